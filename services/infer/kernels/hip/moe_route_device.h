#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_ROUTE_DEVICE_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_ROUTE_DEVICE_H_

// A token's routing by one warp with MoeRoute's bits (elementwise.hip): moe_routing.hip's
// routing launches and the one-launch MoE layer (moe_stream_layer.hip), which routes the few
// tokens of a decode call itself, share it. NVIDIA builds only (warp reductions).

#include <cmath>
#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"

#if !defined(__HIP_PLATFORM_AMD__)

namespace cairn::infer::hip::moe_route {

constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kLaneExperts = 16;  // Experts a routing lane keeps in registers (RouteTokenInWarp).
// Floats of shared memory a routing warp's token takes: its experts rounded up to whole float4s.
__host__ __device__ constexpr int RouteStride(int experts) { return (experts + 3) / 4 * 4; }
constexpr int kRouteLoads = 8;  // Logits a lane loads before it stores any (loads in flight).
// Experts a lane takes a turn of RouteTokenInRegisters' exps and divisions (divides kLaneExperts).
constexpr int kRouteBatch = 4;
static_assert(kLaneExperts % kRouteBatch == 0, "whole turns");

// The warp's best under (probability descending, id ascending) of the lanes' own bests
// (best_id < 0: none), in every lane; none anywhere leaves best_p -1 and best_id -1. The
// probabilities of candidates are never negative or NaN, so their bits plus one order them as
// unsigned integers (0: no candidate): the largest by one warp reduction, then the least id among
// the lanes holding it by another. The order is total, so this is the butterfly's and MoeRoute's
// pick.
// (Before sm_80, which has no warp reductions: the butterfly of shuffles under the same order.)
__device__ inline void WarpBestPick(float& best_p, int& best_id) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float op = __shfl_xor_sync(kFullWarp, best_p, off);
    const int oid = __shfl_xor_sync(kFullWarp, best_id, off);
    const bool better = oid >= 0 && (best_id < 0 || op > best_p || (op == best_p && oid < best_id));
    if (better) {
      best_p = op;
      best_id = oid;
    }
  }
#else
  const unsigned key = best_id >= 0 ? __float_as_uint(best_p) + 1u : 0u;
  const unsigned top = __reduce_max_sync(kFullWarp, key);
  if (top == 0u) {
    best_p = -1.0f;
    best_id = -1;
    return;
  }
  best_id = static_cast<int>(
      __reduce_min_sync(kFullWarp, key == top ? static_cast<unsigned>(best_id) : 0xffffffffu));
  best_p = __uint_as_float(top - 1u);
#endif
}

// sum += the 16 values of q in order, one rounded addition each.
__device__ inline void AddInOrder(float& sum, const float4 (&q)[4]) {
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    sum += q[u].x;
    sum += q[u].y;
    sum += q[u].z;
    sum += q[u].w;
  }
}

// Lane 0's sum of buf[0 .. experts) in expert order (MoeRoute's one chain of additions): 32
// values a turn in two batches of four 16-byte loads, each batch loaded while the other is
// added, so the chain's additions wait only on each other.
// kCompact: the tail past the last whole turn of 32 in a loop that is not unrolled (the same
// additions in the same order; RouteTokenInRegisters<true>'s code size).
template <bool kCompact = false>
__device__ inline float SumInOrder(const float* buf, int experts) {
  float sum = 0.0f;
  int j = 0;
  if (experts >= 32) {
    float4 a[4], b[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) a[u] = *reinterpret_cast<const float4*>(buf + 4 * u);
    for (; j + 32 <= experts; j += 32) {
#pragma unroll
      for (int u = 0; u < 4; ++u) b[u] = *reinterpret_cast<const float4*>(buf + j + 16 + 4 * u);
      AddInOrder(sum, a);
      if (j + 48 <= experts) {
#pragma unroll
        for (int u = 0; u < 4; ++u) a[u] = *reinterpret_cast<const float4*>(buf + j + 32 + 4 * u);
      }
      AddInOrder(sum, b);
    }
  }
  if constexpr (kCompact) {
#pragma unroll 1
    for (; j < experts; ++j) sum += buf[j];
  } else {
    for (; j < experts; ++j) sum += buf[j];
  }
  return sum;
}

// The sums Divide takes: a token's sum of exps holds exp(0) = 1 and at most MoeMaxExperts()
// (1024) values of at most 1; the upper bound leaves room and keeps every intermediate of
// Divide's sequence normal. Other sums (NaN among them) take the `/` operator.
constexpr float kDivideSumMin = 1.0f;
constexpr float kDivideSumMax = 2048.0f;

// Division by a token's sum of exps with the bits of IEEE division (round to nearest even), for
// the exps that routing divides: values in [0, 1] or NaN, over a sum in [kDivideSumMin,
// kDivideSumMax] (DividerFor's `exact`; a sum outside, NaN among them, takes the `/` operator). The
// compiler's `/` checks each quotient's range and calls a long subroutine where an exp is tiny
// (below about 2^-100 the quotient is subnormal): a router whose logits spread by more than about
// 87 pays that call for most of its experts, each in turn (measured on an H100: 16 divisions a lane
// 940 cycles for logits of spread 2, 11800 for spread 30). Here every quotient takes the same few
// instructions: the sum's reciprocal once (the approximation refined by one Newton step), then a
// quotient and one correction from its exact residual, the sequence `/` uses where its check
// passes. An exp below 2^-40 is scaled by 2^64 first (exactly: a power of two), so the quotient
// stays normal, and scaled back by 2^-64: exact where the quotient is normal; where it is
// subnormal, the scaled quotient rounded to the subnormal grid is the true quotient's rounding
// except where it lies exactly on a midpoint of that grid, where the residual's sign says which way
// the true quotient lies (a zero residual: a true tie, rounded to even by the scaling back).
struct SumDivider {
  float sum;
  float reciprocal;  // 1 / sum, within the approximation refined by one Newton step.
  bool exact;        // sum in [kDivideSumMin, kDivideSumMax]: Divide gives `/`'s bits.
};

__device__ inline SumDivider DividerFor(float sum) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(sum));
  r = __fmaf_rn(r, __fmaf_rn(-sum, r, 1.0f), r);
  return SumDivider{sum, r, sum >= kDivideSumMin && sum <= kDivideSumMax};
}

// v / d.sum for v in [0, 1] or NaN where d.exact (see SumDivider).
__device__ inline float Divide(const SumDivider& d, float v) {
  constexpr float kUp = 0x1p64f, kDown = 0x1p-64f;
  constexpr float kHalfGrid = 0x1p-86f;  // Half the subnormal spacing 2^-149, scaled up by 2^64.
  const bool small = v < 0x1p-40f;
  const float a = small ? __fmul_rn(v, kUp) : v;
  const float q0 = __fmul_rn(a, d.reciprocal);
  const float q = __fmaf_rn(d.reciprocal, __fmaf_rn(-d.sum, q0, a), q0);
  const float down = __fmul_rn(q, kDown);
  const float off = __fsub_rn(q, __fmul_rn(down, kUp));  // Exact: |off| <= kHalfGrid.
  const float residual = __fmaf_rn(-d.sum, q, a);
  const bool midpoint = fabsf(off) == kHalfGrid && residual != 0.0f;
  const float nudged = __fmul_rn(__fadd_rn(q, copysignf(kHalfGrid, residual)), kDown);
  return small ? (midpoint ? nudged : down) : q;
}

// Lane i's pick i to ids / weights: the value MoeRoute stores (divided by the picks' sum when
// renormalising).
__device__ inline void StorePicks(int top_k, bool renormalise, float my_p, int my_id, float top_sum,
                                  int32_t* ids, float* weights) {
  const int lane = threadIdx.x % 32;
  if (lane < top_k) {
    ids[lane] = my_id;
    weights[lane] = renormalise ? my_p / top_sum : my_p;
  }
}

// Lane `lane`'s best of p[] (ids lane + 32 u: ascending with u) by a tree of adjacent pairs, so
// that of two equal probabilities the lower id wins, as in the picks' order; -1: none (every p[u]
// is -1). The tree's instructions are few (a kernel's first pass fetches them from memory).
__device__ inline void LaneBest(const float (&p)[kLaneExperts], float& best_p, int& best_u) {
  float tp[kLaneExperts / 2];
  int tu[kLaneExperts / 2];
#pragma unroll
  for (int i = 0; i < kLaneExperts / 2; ++i) {
    const bool second = p[2 * i + 1] > p[2 * i];
    tp[i] = second ? p[2 * i + 1] : p[2 * i];
    tu[i] = second ? 2 * i + 1 : 2 * i;
  }
#pragma unroll
  for (int n = kLaneExperts / 4; n >= 1; n /= 2) {
#pragma unroll
    for (int i = 0; i < n; ++i) {
      const bool second = tp[2 * i + 1] > tp[2 * i];
      tp[i] = second ? tp[2 * i + 1] : tp[2 * i];
      tu[i] = second ? tu[2 * i + 1] : tu[2 * i];
    }
  }
  best_p = tp[0];
  best_u = tu[0];
}

// RouteTokenInRegisters' probabilities, unrolled (kCompact false).
__device__ inline void RoutedProbabilities(const float* l, int experts, float* buf,
                                           float (&p)[kLaneExperts]) {
  const int lane = threadIdx.x % 32;
  float v[kLaneExperts];
#pragma unroll
  for (int u = 0; u < kLaneExperts; ++u) {
    const int j = lane + 32 * u;
    v[u] = j < experts ? l[j] : NAN;
  }
  float mx = NAN;
#pragma unroll
  for (int u = 0; u < kLaneExperts; ++u) mx = fmaxf(mx, v[u]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullWarp, mx, off));
#pragma unroll
  for (int u = 0; u < kLaneExperts; ++u) {
    const int j = lane + 32 * u;
    if (j < experts) {
      v[u] = expf(v[u] - mx);
      buf[j] = v[u];
    }
  }
  __syncwarp();
  const SumDivider d =
      DividerFor(__shfl_sync(kFullWarp, lane == 0 ? SumInOrder(buf, experts) : 0.0f, 0));
  if (d.exact) {
#pragma unroll
    for (int u = 0; u < kLaneExperts; ++u) p[u] = Divide(d, v[u]);
  } else {
#pragma unroll
    for (int u = 0; u < kLaneExperts; ++u) p[u] = v[u] / d.sum;
  }
#pragma unroll
  for (int u = 0; u < kLaneExperts; ++u) {
    // Probabilities are never negative; NaN fails the test.
    if (!(lane + 32 * u < experts && p[u] >= 0.0f)) p[u] = -1.0f;
  }
}

// RouteTokenInRegisters' probabilities in turns of kRouteBatch experts (kCompact true).
__device__ inline void RoutedProbabilitiesCompact(const float* l, int experts, float* buf,
                                                  float (&p)[kLaneExperts]) {
  const int lane = threadIdx.x % 32;
  float mx = NAN;
#pragma unroll
  for (int u = 0; u < kLaneExperts; ++u) {
    const int j = lane + 32 * u;
    const float v = j < experts ? l[j] : NAN;
    if (j < experts) buf[j] = v;
    mx = fmaxf(mx, v);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullWarp, mx, off));
#pragma unroll 1
  for (int u0 = 0; u0 < kLaneExperts; u0 += kRouteBatch) {
#pragma unroll
    for (int u = u0; u < u0 + kRouteBatch; ++u) {
      const int j = lane + 32 * u;
      if (j < experts) buf[j] = expf(buf[j] - mx);
    }
  }
  __syncwarp();
  // Lane 0's sum has read every exp once the other lanes hold it.
  const SumDivider d =
      DividerFor(__shfl_sync(kFullWarp, lane == 0 ? SumInOrder<true>(buf, experts) : 0.0f, 0));
  if (d.exact) {
#pragma unroll 1
    for (int u0 = 0; u0 < kLaneExperts; u0 += kRouteBatch) {
#pragma unroll
      for (int u = u0; u < u0 + kRouteBatch; ++u) {
        const int j = lane + 32 * u;
        if (j < experts) buf[j] = Divide(d, buf[j]);
      }
    }
  } else {
#pragma unroll 1
    for (int u0 = 0; u0 < kLaneExperts; u0 += kRouteBatch) {
#pragma unroll
      for (int u = u0; u < u0 + kRouteBatch; ++u) {
        const int j = lane + 32 * u;
        if (j < experts) buf[j] = buf[j] / d.sum;
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kLaneExperts; ++u) {
    const int j = lane + 32 * u;
    p[u] = j < experts ? buf[j] : -1.0f;
    // Probabilities are never negative; NaN fails the test.
    if (!(p[u] >= 0.0f)) p[u] = -1.0f;
  }
}

// RouteTokenInWarp's register path (experts <= 32 * kLaneExperts): lane l's experts l, l + 32,
// ..., their probabilities in registers for the picks. Those that can never be picked (NaN, past
// `experts`) become -1, below every probability. A round's pick is the warp's best
// (WarpBestPick) of the lanes' bests (LaneBest), which its lane then sets to -1: the order is
// total, so this picks what taking the best strictly after the last pick does.
// kCompact false: every value's exp and division unrolled, the exps in registers and `buf`
// holding them only for lane 0's sum. kCompact true: the exps and the divisions kRouteBatch
// experts a turn in a loop that is not unrolled, `buf` holding the logits, the exps, then the
// probabilities on their way into registers: the same arithmetic for each expert (the same
// bits) in a fraction of the instructions, which a launch's first pass fetches from memory (the
// MoE one launch routes once a launch, cold; MoeLayerStreamArgs::compact_route).
template <bool kCompact = false>
__device__ inline void RouteTokenInRegisters(const float* l, int experts, int top_k,
                                             bool renormalise, float* buf, int32_t* ids,
                                             float* weights) {
  float p[kLaneExperts];
  if constexpr (kCompact) {
    RoutedProbabilitiesCompact(l, experts, buf, p);
  } else {
    RoutedProbabilities(l, experts, buf, p);
  }
  const int lane = threadIdx.x % 32;
  float top_sum = 0.0f;
  float my_p = 0.0f;  // Pick `lane`'s probability and id (lanes below top_k).
  int my_id = -1;
  for (int i = 0; i < top_k; ++i) {
    float best_p;
    int best_u;
    LaneBest(p, best_p, best_u);
    int best_id = best_p >= 0.0f ? lane + 32 * best_u : -1;
    best_p = best_p >= 0.0f ? best_p : -1.0f;
    WarpBestPick(best_p, best_id);
    if (lane == i) {
      my_p = best_p;
      my_id = best_id;
    }
    top_sum += best_p;
    const int taken = best_id >= 0 && best_id % 32 == lane ? best_id / 32 : -1;
#pragma unroll
    for (int u = 0; u < kLaneExperts; ++u) p[u] = u == taken ? -1.0f : p[u];
  }
  StorePicks(top_k, renormalise, my_p, my_id, top_sum, ids, weights);
}

// MoeRouteBlockKernel's arithmetic for one token by one warp, over `buf`, RouteStride(experts)
// floats of shared memory, 16-byte aligned (lane l takes experts l, l + 32, ...): the maximum by
// shuffles (exact in any order; NaN ignored unless every logit is NaN, as the block's fmaxf
// tree), exp(l - max) each, their sum by lane 0 in expert order (MoeRoute's one thread), the
// probabilities p / sum (Divide: the operator's bits), and pick i as the best strictly after
// pick i - 1 in (probability descending, id ascending). Lane i keeps pick i and writes it.
//
// Up to kLaneExperts experts a lane (512 experts) each lane keeps its values in registers and
// `buf` holds only the exps for lane 0's sum (RouteTokenInRegisters); more experts take
// loops over `buf`, their loads batched so that latency is paid once a batch (the logits
// kRouteLoads a lane at a time), and a round a pick: each lane's best strictly after the last
// pick in ascending id, then the warp's best (WarpBestPick).
// kCompact: RouteTokenInRegisters' (the register path's code size; the same bits).
template <bool kCompact = false>
__device__ inline void RouteTokenInWarp(const float* l, int experts, int top_k, bool renormalise,
                                        float* buf, int32_t* ids, float* weights) {
  if (experts <= 32 * kLaneExperts) {
    RouteTokenInRegisters<kCompact>(l, experts, top_k, renormalise, buf, ids, weights);
    return;
  }
  const int lane = threadIdx.x % 32;
  float mx = NAN;
  for (int j0 = lane; j0 < experts; j0 += 32 * kRouteLoads) {
    float v[kRouteLoads];
#pragma unroll
    for (int u = 0; u < kRouteLoads; ++u) {
      const int j = j0 + 32 * u;
      v[u] = j < experts ? l[j] : NAN;
    }
#pragma unroll
    for (int u = 0; u < kRouteLoads; ++u) {
      const int j = j0 + 32 * u;
      if (j < experts) buf[j] = v[u];
      mx = fmaxf(mx, v[u]);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullWarp, mx, off));
#pragma unroll 4
  for (int j = lane; j < experts; j += 32) buf[j] = expf(buf[j] - mx);
  __syncwarp();
  const SumDivider d =
      DividerFor(__shfl_sync(kFullWarp, lane == 0 ? SumInOrder(buf, experts) : 0.0f, 0));
  // From here each lane reads only its own experts' values.
  if (d.exact) {
#pragma unroll 4
    for (int j = lane; j < experts; j += 32) buf[j] = Divide(d, buf[j]);
  } else {
#pragma unroll 4
    for (int j = lane; j < experts; j += 32) buf[j] = buf[j] / d.sum;
  }
  float prev_p = INFINITY;
  int prev_id = -1;
  float top_sum = 0.0f;
  float my_p = 0.0f;  // Pick `lane`'s probability and id (lanes below top_k).
  int my_id = -1;
  for (int i = 0; i < top_k; ++i) {
    float best_p = -1.0f;
    int best_id = -1;
#pragma unroll 4
    for (int j = lane; j < experts; j += 32) {
      const float v = buf[j];
      const bool after_prev = v < prev_p || (v == prev_p && j > prev_id);
      if (after_prev && v > best_p) {
        best_p = v;
        best_id = j;
      }
    }
    WarpBestPick(best_p, best_id);
    if (lane == i) {
      my_p = best_p;
      my_id = best_id;
    }
    top_sum += best_p;
    prev_p = best_p;
    prev_id = best_id;
  }
  StorePicks(top_k, renormalise, my_p, my_id, top_sum, ids, weights);
}

}  // namespace cairn::infer::hip::moe_route

#endif  // !__HIP_PLATFORM_AMD__

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_ROUTE_DEVICE_H_
