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

// Lane 0's sum of buf[0 .. experts) in expert order (MoeRoute's one chain of additions): 16
// values a batch in four 16-byte loads, the next batch's loads issued before this batch's adds.
__device__ inline float SumInOrder(const float* buf, int experts) {
  float sum = 0.0f;
  int j = 0;
  if (experts >= 16) {
    float4 q[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) q[u] = *reinterpret_cast<const float4*>(buf + 4 * u);
    for (; j + 16 <= experts; j += 16) {
      float4 next[4];
      const bool more = j + 32 <= experts;
      if (more) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          next[u] = *reinterpret_cast<const float4*>(buf + j + 16 + 4 * u);
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        sum += q[u].x;
        sum += q[u].y;
        sum += q[u].z;
        sum += q[u].w;
      }
      if (more) {
#pragma unroll
        for (int u = 0; u < 4; ++u) q[u] = next[u];
      }
    }
  }
  for (; j < experts; ++j) sum += buf[j];
  return sum;
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

// RouteTokenInWarp's register path (experts <= 32 * kLaneExperts): lane l's experts l, l + 32,
// ... in registers, `buf` holding only the exps for lane 0's sum.
__device__ inline void RouteTokenInRegisters(const float* l, int experts, int top_k,
                                             bool renormalise, float* buf, int32_t* ids,
                                             float* weights) {
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
  const float sum = __shfl_sync(kFullWarp, lane == 0 ? SumInOrder(buf, experts) : 0.0f, 0);
#pragma unroll
  for (int u = 0; u < kLaneExperts; ++u) v[u] = v[u] / sum;
  float prev_p = INFINITY;
  int prev_id = -1;
  float top_sum = 0.0f;
  float my_p = 0.0f;  // Pick `lane`'s probability and id (lanes below top_k).
  int my_id = -1;
  for (int i = 0; i < top_k; ++i) {
    float best_p = -1.0f;
    int best_id = -1;
#pragma unroll
    for (int u = 0; u < kLaneExperts; ++u) {
      const int j = lane + 32 * u;
      const bool after_prev = v[u] < prev_p || (v[u] == prev_p && j > prev_id);
      if (j < experts && after_prev && v[u] > best_p) {
        best_p = v[u];
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

// MoeRouteBlockKernel's arithmetic for one token by one warp, over `buf`, RouteStride(experts)
// floats of shared memory, 16-byte aligned (lane l takes experts l, l + 32, ...): the maximum by
// shuffles (exact in any order; NaN ignored unless every logit is NaN, as the block's fmaxf
// tree), exp(l - max) each, their sum by lane 0 in expert order (MoeRoute's one thread), the
// probabilities p / sum, and pick i as the best strictly after pick i - 1 in (probability
// descending, id ascending): each lane's best in ascending id, then the warp's best
// (WarpBestPick). Lane i keeps pick i and writes it.
//
// Up to kLaneExperts experts a lane (512 experts) each lane keeps its values in registers and
// `buf` holds only the exps for lane 0's sum; more experts take loops over `buf`, their loads
// batched so that latency is paid once a batch (the logits kRouteLoads a lane at a time).
__device__ inline void RouteTokenInWarp(const float* l, int experts, int top_k, bool renormalise,
                                        float* buf, int32_t* ids, float* weights) {
  if (experts <= 32 * kLaneExperts) {
    RouteTokenInRegisters(l, experts, top_k, renormalise, buf, ids, weights);
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
  const float sum = __shfl_sync(kFullWarp, lane == 0 ? SumInOrder(buf, experts) : 0.0f, 0);
  // From here each lane reads only its own experts' values.
#pragma unroll 4
  for (int j = lane; j < experts; j += 32) buf[j] = buf[j] / sum;
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
