// The routed experts of a MoE layer on the device (HipKernelBackend::MoeExperts, decode): the
// picks of MoeRoute bucketed by expert on the device, the experts' products as grouped launches
// over every expert's range of picks, and each token's weighted sum in ascending expert id.
//
// Bits: the products are MatMulRowsMma's (matmul_rows_mma.hip) operation for operation: an
// output element is the same sequence of matrix instructions over its own input row and weight
// column, with k cut into the segments MatMulRowsMma chooses from n and k, so a pick's row is
// the bits of the per-expert MatMulRowsTyped call the default makes. The sum is
// out = out + w * y a pick at a time in ascending expert id, AddScaledRows' expression in the
// default's order. Nothing depends on which other tokens share the call or where a pick lands
// in its expert's range.

#include <atomic>
#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/hip/mma_rows_device.h"

namespace cairn::infer::hip {

namespace {

constexpr int kSortChunk = 256;  // Picks per block of the count and scatter kernels.
constexpr int kOffsetThreads = 1024;
constexpr int kMaxExperts = kOffsetThreads;  // One thread per expert in the offsets kernel.
constexpr int kMaxTopK = 32;
constexpr int kCombineThreads = 256;
constexpr int kGemmTileRows = 64;  // Picks per tile of the prefill path (MoeGemmTileRows()).

constexpr int kRouteThreads = 256;
constexpr int kOffsetBatch = 16;  // Chunk counts a thread of MoeOffsetsKernel loads at once.

// MoeRoute (elementwise.hip: one thread walks a token's experts top_k + 2 times) with a block
// per token and the same bits: the maximum (exact in any order), every exp(l - max) once, their
// sum by one thread in expert order (MoeRoute's order), the probabilities by MoeRoute's
// expression, and pick i as the best expert strictly after pick i - 1 in the order
// (probability descending, id ascending), found by a tree over the threads' own bests (the
// order is total, so any tree finds MoeRoute's pick); the picks' sum in pick order.
__global__ void __launch_bounds__(kRouteThreads)
    MoeRouteBlockKernel(const float* logits, int experts, int top_k, bool renormalise, int32_t* ids,
                        float* weights) {
  KernelEntry();
  __shared__ float probs[kMaxExperts];
  __shared__ float best_ps[kRouteThreads];
  __shared__ int32_t best_ids[kRouteThreads];
  __shared__ float shared_sum;
  const int64_t tok = blockIdx.x;
  const float* l = logits + tok * experts;
  const int tid = threadIdx.x;
  float mx = -INFINITY;
  bool any = false;
  for (int j = tid; j < experts; j += kRouteThreads) {
    mx = any ? fmaxf(mx, l[j]) : l[j];
    any = true;
  }
  best_ps[tid] = mx;
  best_ids[tid] = any ? 1 : 0;
  __syncthreads();
  for (int s = kRouteThreads / 2; s > 0; s >>= 1) {
    if (tid < s && best_ids[tid + s] != 0) {
      best_ps[tid] = best_ids[tid] != 0 ? fmaxf(best_ps[tid], best_ps[tid + s]) : best_ps[tid + s];
      best_ids[tid] = 1;
    }
    __syncthreads();
  }
  mx = best_ps[0];
  for (int j = tid; j < experts; j += kRouteThreads) probs[j] = expf(l[j] - mx);
  __syncthreads();
  if (tid == 0) {
    float sum = 0.0f;
    for (int j = 0; j < experts; ++j) sum += probs[j];
    shared_sum = sum;
  }
  __syncthreads();
  const float sum = shared_sum;
  for (int j = tid; j < experts; j += kRouteThreads) probs[j] = probs[j] / sum;
  __syncthreads();
  float prev_p = INFINITY;
  int prev_id = -1;
  float top_sum = 0.0f;
  // Thread 0's picked probabilities, written once at the end (divided by their sum when
  // renormalising: the value MoeRoute stores, without reading it back from global memory).
  float picked[kMaxTopK];
  for (int i = 0; i < top_k; ++i) {
    float best_p = -1.0f;
    int best_id = -1;
    for (int j = tid; j < experts; j += kRouteThreads) {
      const float p = probs[j];
      const bool after_prev = p < prev_p || (p == prev_p && j > prev_id);
      if (after_prev && p > best_p) {
        best_p = p;
        best_id = j;
      }
    }
    best_ps[tid] = best_p;
    best_ids[tid] = best_id;
    __syncthreads();
    for (int s = kRouteThreads / 2; s > 0; s >>= 1) {
      if (tid < s) {
        const float op = best_ps[tid + s];
        const int oid = best_ids[tid + s];
        const bool better = oid >= 0 && (best_ids[tid] < 0 || op > best_ps[tid] ||
                                         (op == best_ps[tid] && oid < best_ids[tid]));
        if (better) {
          best_ps[tid] = op;
          best_ids[tid] = oid;
        }
      }
      __syncthreads();
    }
    best_p = best_ps[0];
    best_id = best_ids[0];
    __syncthreads();
    if (tid == 0) {
      ids[tok * top_k + i] = best_id;
      picked[i] = best_p;
    }
    top_sum += best_p;
    prev_p = best_p;
    prev_id = best_id;
  }
  if (tid == 0) {
    for (int i = 0; i < top_k; ++i) {
      weights[tok * top_k + i] = renormalise ? picked[i] / top_sum : picked[i];
    }
  }
}

// Per chunk of kSortChunk picks: the picks per expert, and each pick's rank among the chunk's
// earlier picks of its expert (a stable order: token order within an expert). Shared-memory
// integer counts are exact whatever order the increments land in.
__global__ void __launch_bounds__(kSortChunk)
    MoeCountKernel(const int32_t* ids, int64_t picks, int experts, int32_t* hist, int32_t* rank) {
  KernelEntry();
  __shared__ int32_t counts[kMaxExperts];
  __shared__ int32_t chunk_ids[kSortChunk];
  for (int e = threadIdx.x; e < experts; e += kSortChunk) counts[e] = 0;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kSortChunk + threadIdx.x;
  int32_t id = i < picks ? ids[i] : -1;
  if (id < 0 || id >= experts) id = -1;
  chunk_ids[threadIdx.x] = id;
  __syncthreads();
  if (id >= 0) {
    atomicAdd(&counts[id], 1);
    int32_t r = 0;
    for (int j = 0; j < static_cast<int>(threadIdx.x); ++j) r += chunk_ids[j] == id ? 1 : 0;
    rank[i] = r;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += kSortChunk) {
    hist[static_cast<int64_t>(blockIdx.x) * experts + e] = counts[e];
  }
}

// One block, a thread per expert: each chunk's first slot in the expert's range, the ranges'
// starts (experts in ascending id) and the row tiles of every expert (`tile_rows` picks each).
__global__ void __launch_bounds__(kOffsetThreads)
    MoeOffsetsKernel(const int32_t* hist, int chunks, int experts, int tile_rows, int32_t* base,
                     int32_t* offsets, MoeTile* tiles, int32_t* num_tiles) {
  KernelEntry();
  __shared__ int32_t scan_rows[kOffsetThreads];
  __shared__ int32_t scan_tiles[kOffsetThreads];
  const int e = threadIdx.x;
  int32_t count = 0;
  if (e < experts) {
    // kOffsetBatch chunks' counts loaded before any is added, so that the loads overlap (one
    // dependent load a chunk made a prefill's 320 chunks about 120 us).
    int c = 0;
    for (; c + kOffsetBatch <= chunks; c += kOffsetBatch) {
      int32_t h[kOffsetBatch];
#pragma unroll
      for (int u = 0; u < kOffsetBatch; ++u) h[u] = hist[static_cast<int64_t>(c + u) * experts + e];
#pragma unroll
      for (int u = 0; u < kOffsetBatch; ++u) {
        base[static_cast<int64_t>(c + u) * experts + e] = count;
        count += h[u];
      }
    }
    for (; c < chunks; ++c) {
      base[static_cast<int64_t>(c) * experts + e] = count;
      count += hist[static_cast<int64_t>(c) * experts + e];
    }
  }
  const int32_t ntiles = (count + tile_rows - 1) / tile_rows;
  scan_rows[e] = count;
  scan_tiles[e] = ntiles;
  __syncthreads();
  // Inclusive scans (Hillis-Steele over the block's threads).
  for (int s = 1; s < kOffsetThreads; s <<= 1) {
    const int32_t r = e >= s ? scan_rows[e - s] : 0;
    const int32_t t = e >= s ? scan_tiles[e - s] : 0;
    __syncthreads();
    scan_rows[e] += r;
    scan_tiles[e] += t;
    __syncthreads();
  }
  const int32_t first_row = scan_rows[e] - count;
  const int32_t first_tile = scan_tiles[e] - ntiles;
  if (e < experts) {
    offsets[e] = first_row;
    for (int32_t j = 0; j < ntiles; ++j) {
      const int32_t start = first_row + j * tile_rows;
      const int32_t rows = count - j * tile_rows < tile_rows ? count - j * tile_rows : tile_rows;
      tiles[first_tile + j] = MoeTile{e, start, rows};
    }
  }
  if (e == kOffsetThreads - 1) *num_tiles = scan_tiles[e];
}

// Each pick to its slot: its expert's range start, its chunk's first slot there, its rank.
__global__ void __launch_bounds__(kSortChunk)
    MoeScatterKernel(const int32_t* ids, int64_t picks, int experts, const int32_t* base,
                     const int32_t* offsets, const int32_t* rank, int32_t* sorted_picks,
                     int32_t* slot_of_pick) {
  KernelEntry();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kSortChunk + threadIdx.x;
  if (i >= picks) return;
  const int32_t id = ids[i];
  if (id < 0 || id >= experts) {
    slot_of_pick[i] = -1;
    return;
  }
  const int32_t slot =
      offsets[id] + base[static_cast<int64_t>(blockIdx.x) * experts + id] + rank[i];
  sorted_picks[slot] = static_cast<int32_t>(i);
  slot_of_pick[i] = slot;
}

// ---- The eighth round's routing, sorting and sum (HipKernelBackendOptions::moe_kernels = 1):
// the same outputs, bit for bit, with fewer launches and loads that overlap.

// The sort of at most kSmallSortPicks picks in one block (MoeCountKernel, MoeOffsetsKernel and
// MoeScatterKernel in one launch): a pick's rank among the earlier picks of its expert, the
// experts' counts (integer, exact in any order), the scans and tiles of MoeOffsetsKernel, and
// each pick to offsets[expert] + rank: the same slots, tiles and counts.
constexpr int kSmallSortPicks = kOffsetThreads;
static_assert(kSmallSortPicks == kMaxExperts);

// kThreads: the block's threads, at least the call's picks and experts.
template <int kThreads = kOffsetThreads>
__device__ void SortPicksInBlock(const int32_t* ids, int picks, int experts, int tile_rows,
                                 int32_t* offsets, MoeTile* tiles, int32_t* num_tiles,
                                 int32_t* sorted_picks, int32_t* slot_of_pick) {
  static_assert(kThreads % 32 == 0 && kThreads <= kSmallSortPicks);
  __shared__ int32_t pick_ids[kThreads];
  __shared__ int32_t counts[kThreads];
  __shared__ int32_t scan_rows[kThreads];
  __shared__ int32_t scan_tiles[kThreads];
  const int t = threadIdx.x;  // blockDim.x == kThreads.
  int32_t id = t < picks ? ids[t] : -1;
  if (id < 0 || id >= experts) id = -1;
  pick_ids[t] = id;
  counts[t] = 0;
  __syncthreads();
  int32_t rank = 0;
  if (id >= 0) {
    atomicAdd(&counts[id], 1);
    for (int j = 0; j < t; ++j) rank += pick_ids[j] == id ? 1 : 0;
  }
  __syncthreads();
  const int32_t count = t < experts ? counts[t] : 0;
  const int32_t ntiles = (count + tile_rows - 1) / tile_rows;
#if !defined(__HIP_PLATFORM_AMD__)
  // The inclusive scans of the counts and tiles: within each warp by shuffles, the warps' totals
  // by warp 0 the same way, then each thread adds the totals of the warps before its own (three
  // barriers instead of twenty; integer sums, so the same values in any order).
  {
    static_assert(kThreads / 32 <= 32, "warp 0 scans the warps' totals");
    constexpr unsigned kAll = 0xffffffffu;
    __shared__ int32_t warp_rows[kThreads / 32];
    __shared__ int32_t warp_tiles[kThreads / 32];
    const int lane = t % 32;
    const int warp = t / 32;
    int32_t rows_incl = count, tiles_incl = ntiles;
#pragma unroll
    for (int s = 1; s < 32; s <<= 1) {
      const int32_t r = __shfl_up_sync(kAll, rows_incl, s);
      const int32_t n = __shfl_up_sync(kAll, tiles_incl, s);
      if (lane >= s) {
        rows_incl += r;
        tiles_incl += n;
      }
    }
    if (lane == 31) {
      warp_rows[warp] = rows_incl;
      warp_tiles[warp] = tiles_incl;
    }
    __syncthreads();
    if (warp == 0) {
      // Lanes past the block's warps take zeros and store nothing (a block of fewer than 32
      // warps has fewer totals).
      constexpr int kWarpsHere = kThreads / 32;
      int32_t wr = lane < kWarpsHere ? warp_rows[lane] : 0;
      int32_t wn = lane < kWarpsHere ? warp_tiles[lane] : 0;
#pragma unroll
      for (int s = 1; s < 32; s <<= 1) {
        const int32_t r = __shfl_up_sync(kAll, wr, s);
        const int32_t n = __shfl_up_sync(kAll, wn, s);
        if (lane >= s) {
          wr += r;
          wn += n;
        }
      }
      if (lane < kWarpsHere) {
        warp_rows[lane] = wr;
        warp_tiles[lane] = wn;
      }
    }
    __syncthreads();
    scan_rows[t] = rows_incl + (warp > 0 ? warp_rows[warp - 1] : 0);
    scan_tiles[t] = tiles_incl + (warp > 0 ? warp_tiles[warp - 1] : 0);
    __syncthreads();
  }
#else
  scan_rows[t] = count;
  scan_tiles[t] = ntiles;
  __syncthreads();
  for (int s = 1; s < kThreads; s <<= 1) {
    const int32_t r = t >= s ? scan_rows[t - s] : 0;
    const int32_t n = t >= s ? scan_tiles[t - s] : 0;
    __syncthreads();
    scan_rows[t] += r;
    scan_tiles[t] += n;
    __syncthreads();
  }
#endif
  const int32_t first_row = scan_rows[t] - count;
  const int32_t first_tile = scan_tiles[t] - ntiles;
  if (t < experts) {
    offsets[t] = first_row;
    for (int32_t j = 0; j < ntiles; ++j) {
      const int32_t start = first_row + j * tile_rows;
      const int32_t rows = count - j * tile_rows < tile_rows ? count - j * tile_rows : tile_rows;
      tiles[first_tile + j] = MoeTile{t, start, rows};
    }
  }
  if (t == kThreads - 1) *num_tiles = scan_tiles[t];
  __syncthreads();
  // scan_rows[e] - counts[e] is expert e's first slot.
  if (t < picks) {
    if (id < 0) {
      slot_of_pick[t] = -1;
    } else {
      const int32_t slot = scan_rows[id] - counts[id] + rank;
      sorted_picks[slot] = t;
      slot_of_pick[t] = slot;
    }
  }
}

__global__ void __launch_bounds__(kOffsetThreads)
    MoeSortSmallKernel(const int32_t* ids, int picks, int experts, int tile_rows,
                       int32_t* offsets, MoeTile* tiles, int32_t* num_tiles,
                       int32_t* sorted_picks, int32_t* slot_of_pick) {
  KernelEntry();
  SortPicksInBlock(ids, picks, experts, tile_rows, offsets, tiles, num_tiles, sorted_picks,
                   slot_of_pick);
}

#if !defined(__HIP_PLATFORM_AMD__)

constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kRouteWarps = kRouteThreads / 32;
constexpr int kLaneExperts = 16;  // Experts a routing lane keeps in registers (RouteTokenInWarp).
// The fused routing and sort's smaller block, for calls of at most this many experts and picks.
constexpr int kHalfRouteThreads = kOffsetThreads / 2;
static_assert(kHalfRouteThreads <= 32 * kLaneExperts, "a half block's calls route in registers");
// Calls of at most this many tokens (and kSmallSortPicks picks) route and sort in one block.
constexpr int kFusedRouteTokens = kOffsetThreads / 32;
// Shared memory a block may take without asking for more, and (at least) the static shared
// memory of SortPicksInBlock at its largest block (16.25 KiB at 1024 threads; 8.125 KiB at 512)
// beside the fused kernel's dynamic routing buffer.
constexpr size_t kDefaultSharedBytes = 48 * 1024;
constexpr size_t kSortSharedBytes = 17 * 1024;
static_assert((4 * kOffsetThreads + 2 * (kOffsetThreads / 32)) * sizeof(int32_t) <=
                  kSortSharedBytes,
              "SortPicksInBlock's shared arrays");

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
    const bool better =
        oid >= 0 && (best_id < 0 || op > best_p || (op == best_p && oid < best_id));
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
__device__ inline void StorePicks(int top_k, bool renormalise, float my_p, int my_id,
                                  float top_sum, int32_t* ids, float* weights) {
  const int lane = threadIdx.x % 32;
  if (lane < top_k) {
    ids[lane] = my_id;
    weights[lane] = renormalise ? my_p / top_sum : my_p;
  }
}

// RouteTokenInWarp's register path (experts <= 32 * kLaneExperts): lane l's experts l, l + 32,
// ... in registers, `buf` holding only the exps for lane 0's sum.
__device__ void RouteTokenInRegisters(const float* l, int experts, int top_k, bool renormalise,
                                      float* buf, int32_t* ids, float* weights) {
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
__device__ void RouteTokenInWarp(const float* l, int experts, int top_k, bool renormalise,
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

// A warp per token (kRouteWarps tokens a block); dynamic shared memory: kRouteWarps *
// RouteStride(experts) floats.
__global__ void __launch_bounds__(kRouteThreads)
    MoeRouteWarpKernel(const float* logits, int64_t logits_ld, int64_t tokens, int experts,
                       int top_k, bool renormalise, int32_t* ids, float* weights) {
  extern __shared__ float4 route_buf4[];
  float* const route_buf = reinterpret_cast<float*>(route_buf4);
  KernelEntry();
  const int warp = threadIdx.x / 32;
  const int64_t tok = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (tok >= tokens) return;  // Uniform per warp.
  RouteTokenInWarp(logits + tok * logits_ld, experts, top_k, renormalise,
                   route_buf + warp * RouteStride(experts), ids + tok * top_k,
                   weights + tok * top_k);
}

// A decode step's routing and sort in one launch: warp w routes token w (tokens <=
// kFusedRouteTokens), then the block sorts the picks (SortPicksInBlock; the ids written
// above are visible to the block after the barrier). Dynamic shared memory: tokens *
// RouteStride(experts) floats.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    MoeRouteSortSmallKernel(const float* logits, int64_t logits_ld, int tokens, int experts,
                            int top_k, bool renormalise, int tile_rows, int32_t* ids,
                            float* weights,
                            int32_t* offsets, MoeTile* tiles, int32_t* num_tiles,
                            int32_t* sorted_picks, int32_t* slot_of_pick) {
  extern __shared__ float4 route_buf4[];
  float* const route_buf = reinterpret_cast<float*>(route_buf4);
  KernelEntry();
  const int tok = threadIdx.x / 32;
  if (tok < tokens) {
    RouteTokenInWarp(logits + tok * logits_ld, experts, top_k, renormalise,
                     route_buf + tok * RouteStride(experts), ids + tok * top_k,
                     weights + tok * top_k);
  }
  __syncthreads();
  SortPicksInBlock<kThreads>(ids, tokens * top_k, experts, tile_rows, offsets, tiles, num_tiles,
                             sorted_picks, slot_of_pick);
}

#endif  // !__HIP_PLATFORM_AMD__

// MoeCombineKernel's sums with a block per (token, kCombineWideCols columns): the token's picks
// put in ascending expert id (stable: a pick's place is the number of valid picks before it in
// that order, the insertion sort's result) by top_k threads at once, then each thread's 4 (or
// 1) columns take out = out + w * y a pick at a time in that order, the rows of kCombineBatch
// picks loaded before they are added.
constexpr int kCombineWideThreads = 64;
constexpr int kCombineBatch = 8;

template <bool kVec>
__global__ void __launch_bounds__(kCombineWideThreads)
    MoeCombineWideKernel(const float* y, const int32_t* ids, const float* weights,
                         const int32_t* slot_of_pick, int top_k, int64_t dim, float* out,
                         const float* gate, int64_t gate_ld, float* residual) {
  KernelEntry();
  __shared__ int32_t pick_ids[kMaxTopK];
  __shared__ float pick_w[kMaxTopK];
  __shared__ int32_t pick_slot[kMaxTopK];
  __shared__ float sorted_w[kMaxTopK];
  __shared__ int64_t sorted_row[kMaxTopK];
  __shared__ int valid;
  const int64_t tok = blockIdx.x;
  const int tid = threadIdx.x;
  if (tid < top_k) {
    const int64_t i = tok * top_k + tid;
    const int32_t slot = slot_of_pick[i];
    pick_slot[tid] = slot;
    pick_ids[tid] = ids[i];
    pick_w[tid] = weights[i];
  }
  __syncthreads();
  if (tid < top_k && pick_slot[tid] >= 0) {
    const int32_t id = pick_ids[tid];
    int at = 0;
    for (int j = 0; j < top_k; ++j) {
      if (pick_slot[j] < 0) continue;
      at += pick_ids[j] < id || (pick_ids[j] == id && j < tid) ? 1 : 0;
    }
    sorted_w[at] = pick_w[tid];
    sorted_row[at] = static_cast<int64_t>(pick_slot[tid]) * dim;
  }
  if (tid == 0) {
    int n = 0;
    for (int j = 0; j < top_k; ++j) n += pick_slot[j] >= 0 ? 1 : 0;
    valid = n;
  }
  __syncthreads();
  const int n = valid;
  constexpr int kPer = kVec ? 4 : 1;
  const int64_t c = (static_cast<int64_t>(blockIdx.y) * kCombineWideThreads + tid) * kPer;
  if (c >= dim) return;
  float* o = out + tok * dim + c;
  // SigmoidScaleRows' product (one rounding) where there is a gate.
  const float scale = gate != nullptr ? DeviceSigmoid(gate[tok * gate_ld]) : 1.0f;
  if constexpr (kVec) {
    float4 v = *reinterpret_cast<const float4*>(o);
    if (gate != nullptr) {
      v.x = __fmul_rn(v.x, scale);
      v.y = __fmul_rn(v.y, scale);
      v.z = __fmul_rn(v.z, scale);
      v.w = __fmul_rn(v.w, scale);
    }
    for (int p0 = 0; p0 < n; p0 += kCombineBatch) {
      float4 yv[kCombineBatch];
#pragma unroll
      for (int q = 0; q < kCombineBatch; ++q) {
        if (p0 + q < n) yv[q] = *reinterpret_cast<const float4*>(y + sorted_row[p0 + q] + c);
      }
#pragma unroll
      for (int q = 0; q < kCombineBatch; ++q) {
        if (p0 + q >= n) break;
        const float w = sorted_w[p0 + q];
        // Two roundings, never a fused multiply-add: AddScaledRows' (and the CPU's) arithmetic.
        v.x = __fadd_rn(v.x, __fmul_rn(w, yv[q].x));
        v.y = __fadd_rn(v.y, __fmul_rn(w, yv[q].y));
        v.z = __fadd_rn(v.z, __fmul_rn(w, yv[q].z));
        v.w = __fadd_rn(v.w, __fmul_rn(w, yv[q].w));
      }
    }
    *reinterpret_cast<float4*>(o) = v;
    if (residual != nullptr) {
      // AddScaledRows' unscaled addition.
      float4* r = reinterpret_cast<float4*>(residual + tok * dim + c);
      float4 rv = *r;
      rv.x = __fadd_rn(rv.x, v.x);
      rv.y = __fadd_rn(rv.y, v.y);
      rv.z = __fadd_rn(rv.z, v.z);
      rv.w = __fadd_rn(rv.w, v.w);
      *r = rv;
    }
  } else {
    float v = *o;
    if (gate != nullptr) v = __fmul_rn(v, scale);
    for (int p0 = 0; p0 < n; p0 += kCombineBatch) {
      float yv[kCombineBatch];
#pragma unroll
      for (int q = 0; q < kCombineBatch; ++q) {
        if (p0 + q < n) yv[q] = y[sorted_row[p0 + q] + c];
      }
#pragma unroll
      for (int q = 0; q < kCombineBatch; ++q) {
        if (p0 + q >= n) break;
        v = __fadd_rn(v, __fmul_rn(sorted_w[p0 + q], yv[q]));
      }
    }
    *o = v;
    if (residual != nullptr) residual[tok * dim + c] = __fadd_rn(residual[tok * dim + c], v);
  }
}

// ---- The grouped product: MatMulRowsMma's kernel in tiles of 8 rows, a tile's rows being
// one expert's picks, over MatMulRowsMma's device code (mma_rows_device.h), so that the bits
// are that kernel's.

#if !defined(__HIP_PLATFORM_AMD__)

using mma_rows::ColumnOf;
using mma_rows::kStep;
using mma_rows::kThreads;
using mma_rows::kTileCols;
using mma_rows::kUnroll;
using mma_rows::kWarps;
using mma_rows::LoadInputs8;
using mma_rows::LoadWeights8;
using mma_rows::SplitPieces;
using mma_rows::StepProducts;

// Grid: x = row tiles (up to max_tiles; blocks past *num_tiles exit), then the shared rows'
// tiles of 8 (MoeSharedRows), y = groups of kWarps / warps_per_tile column tiles of 16. A
// tile's row r is slot tile.start + r; its input is x row sorted_picks[slot] / top_k (`gather`)
// or x row slot, its output y row slot (for a shared tile: shared.x and shared.y rows of that
// index). kSilu (MoeRowsMmaSiluMul, each expert's rows [gate; up] of `width` rows each): column
// tile c takes gate rows 8c .. 8c + 7 as its columns g and the matching up rows as its columns
// g + 8, and writes act row slot = silu(gate) * up (SiluMul's expression) instead of y: as
// MatMulRowsMmaSiluMul, the gate and up values are the plain product's bits.
//
// The arithmetic is MatMulRowsMma's: k is cut into `segments` segments (from n and k only),
// each segment's sum is one chain of steps from zero, and a column's value is segment 0's sum
// plus segment 1's, plus segment 2's, ... in order. warps_per_tile (a power of two dividing
// segments) is only who does that work: warp w takes column tile w / warps_per_tile of the
// group and the segments / warps_per_tile consecutive segments from part w % warps_per_tile on,
// each segment's sum kept apart; part 0 adds its own segments' sums in order as they finish,
// then the other parts' from shared memory, in order. warps_per_tile == segments is
// MatMulRowsMma's own layout (a warp a segment); fewer make fewer, longer-lived warps (calls of
// many tiles: a warp's loads stream for longer between its start and its reduction). The bits
// are the same for every warps_per_tile.
constexpr int kMaxPartSegments = kWarps / 2;  // Segments a part past 0 hands over (at most).

template <int kPieces, bool kVec, bool kSilu = false>
__global__ void __launch_bounds__(kThreads, 2)
    MoeRowsMmaKernel(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                     const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                     const MoeExpertParts* weights, int64_t n, int64_t k, float* y, int64_t ldy,
                     int segments, int64_t segment, int warps_per_tile, int64_t width,
                     MoeSharedRows shared) {
  KernelEntry();
  // Part p's sum of its segment j (of segments / warps_per_tile), for parts past 0 only.
  __shared__ float partial[kWarps][kMaxPartSegments][4][32];
  // Blocks past max_tiles take the shared rows' tiles of 8 (their rows in order, no sort).
  const int64_t shared_tile = static_cast<int64_t>(blockIdx.x) - max_tiles;
  MoeTile tile;
  const MoeExpertParts* parts;
  if (shared_tile >= 0) {
    const int64_t start = shared_tile * 8;
    tile = {-1, static_cast<int32_t>(start),
            static_cast<int32_t>(shared.rows - start < 8 ? shared.rows - start : 8)};
    parts = shared.weights;
    x = shared.x;
    ldx = shared.ldx;
    y = shared.y;
    ldy = shared.ldy;
    sorted_picks = nullptr;
  } else {
    // The count and this block's tile loaded together (the tile table has max_tiles entries, so
    // the load stays inside it; an entry past the count is not used).
    const int32_t count = *num_tiles;
    tile = tiles[blockIdx.x];
    if (static_cast<int32_t>(blockIdx.x) >= count) return;  // Uniform per block.
    parts = weights + tile.expert;
  }
  const MoeExpertParts& w = *parts;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int part = warp % warps_per_tile;
  const int own = segments / warps_per_tile;  // Segments a warp takes.
  const int64_t ctile =
      static_cast<int64_t>(blockIdx.y) * (kWarps / warps_per_tile) + warp / warps_per_tile;
  const int64_t col0 = ctile * kTileCols;
  const uint16_t* wa;
  const uint16_t* wb;
  if constexpr (kSilu) {
    const int64_t j = ctile * 8 + g;
    wa = j < width ? ColumnOf(w, j, k) : nullptr;
    wb = j < width ? ColumnOf(w, width + j, k) : nullptr;
  } else {
    wa = col0 + g < n ? ColumnOf(w, col0 + g, k) : nullptr;
    wb = col0 + g + 8 < n ? ColumnOf(w, col0 + g + 8, k) : nullptr;
  }
  const float* xa = nullptr;
  if (g < tile.rows) {
    const int64_t slot = tile.start + g;
    const int64_t row = sorted_picks != nullptr ? sorted_picks[slot] / top_k : slot;
    xa = x + row * ldx;
  }
  float acc[4] = {};
  for (int j = 0; j < own; ++j) {
    float sum[4] = {};
    const int64_t begin = static_cast<int64_t>(part * own + j) * segment;
    const int64_t end = begin + segment < k ? begin + segment : k;
    for (int64_t kb = begin; kb < end; kb += kStep * kUnroll) {
      uint4 va[kUnroll], vb[kUnroll];
      float v0[kUnroll][8];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const bool live = kb + u * kStep < end;
        const int64_t i = kb + u * kStep + 8 * t;
        va[u] = LoadWeights8<kVec>(live ? wa : nullptr, i, k);
        vb[u] = LoadWeights8<kVec>(live ? wb : nullptr, i, k);
        LoadInputs8<kVec>(live ? xa : nullptr, i, k, v0[u]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (kb + u * kStep >= end) break;
        uint32_t pieces[kPieces][4];
        SplitPieces<kPieces>(v0[u], pieces);
        StepProducts<kPieces>(va[u], vb[u], pieces, sum);
      }
    }
    if (part != 0) {
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[warp][j][e][lane] = sum[e];
    } else if (j == 0) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] = sum[e];
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] += sum[e];
    }
  }
  if (warps_per_tile > 1) {
    __syncthreads();
    if (part != 0) return;
    for (int p = 1; p < warps_per_tile; ++p) {
      for (int j = 0; j < own; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[e] += partial[warp + p][j][e][lane];
      }
    }
  }
  // acc[e]: weight column g (+8 for e >= 2), tile row 2t (+1 for odd e).
  if constexpr (kSilu) {
    const int64_t j = ctile * 8 + g;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 2 * t + e;
      if (r < tile.rows && j < width) {
        y[(tile.start + r) * ldy + j] = DeviceSilu(acc[e]) * acc[e + 2];
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = 2 * t + (e & 1);
      const int64_t col = col0 + g + (e >= 2 ? 8 : 0);
      if (r < tile.rows && col < n) y[(tile.start + r) * ldy + col] = acc[e];
    }
  }
}

// ---- The prefill path's grouped GEMM: bf16 x bf16 -> fp32 on the matrix units over tiles of
// kGemmRows picks of one expert and kGemmCols weight columns. Operands are staged in shared
// memory by asynchronous copies (kGemmStages steps of kGemmK in flight), fragments come from
// ldmatrix, and every output element is one accumulation chain of m16n8k16 instructions over
// k = 0, 16, 32, ... in order: its bits depend on its own row, its weight column and k alone
// (where a row sits in its tile, the tile's other rows, or how many tiles the call has never
// enter its arithmetic).

constexpr int kGemmRows = kGemmTileRows;  // Picks per tile (one expert's).
constexpr int kGemmCols = 128;   // Weight columns (output columns) per block.
constexpr int kGemmK = 32;       // k values per stage: four 16-byte chunks a row.
constexpr int kGemmStages = 4;   // Stages in flight (48 KiB of shared memory).
constexpr int kGemmThreads = 128;  // 2 x 2 warps, each 32 rows x 64 columns.
constexpr int kGemmChunks = kGemmK / 8;

// Element offset of 16-byte chunk `chunk` of row `row` in a stage: chunks XOR-swizzled by
// (row / 2) % 4, so the 8 rows an ldmatrix reads (and the rows a warp's copies write) fall in
// distinct banks.
__device__ inline int GemmSwizzle(int row, int chunk) {
  return row * kGemmK + ((chunk ^ ((row >> 1) & 3)) << 3);
}

// 16 bytes global -> shared asynchronously, or 16 zero bytes when !valid (`src` unread).
__device__ inline void CopyAsync16Or0(uint16_t* dst, const uint16_t* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned int to = static_cast<unsigned int>(__cvta_generic_to_shared(dst));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(bytes));
#else
  *reinterpret_cast<uint4*>(dst) =
      valid ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
#endif
}
__device__ inline void GemmCommit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int kPending>
__device__ inline void GemmWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}
// Four 8x8 bf16 matrices from shared memory (lanes 8j .. 8j + 7 give matrix j's row addresses).
__device__ inline void LoadMatrix4(const uint16_t* p, uint32_t r[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned int at = static_cast<unsigned int>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
#else
  static_cast<void>(p);
  r[0] = r[1] = r[2] = r[3] = 0;
#endif
}

// Grid: one block per (tile, group of kGemmCols weight columns), the groups of a tile
// consecutive, so the blocks running together share their tiles' rows (and a tile's expert's
// weights its neighbours) in L2; blocks past *num_tiles' exit.
__global__ void __launch_bounds__(kGemmThreads, 4)
    MoeGemmKernel(const uint16_t* a, int64_t lda, const MoeTile* tiles, const int32_t* num_tiles,
                  int groups, const MoeExpertParts* weights, int64_t n, int64_t k, float* y,
                  int64_t ldy) {
  KernelEntry();
  const int32_t tile_index = static_cast<int32_t>(blockIdx.x / groups);
  if (tile_index >= *num_tiles) return;  // Uniform per block.
  __shared__ __align__(128) uint16_t sa[kGemmStages][kGemmRows * kGemmK];
  __shared__ __align__(128) uint16_t sb[kGemmStages][kGemmCols * kGemmK];
  const MoeTile tile = tiles[tile_index];
  const MoeExpertParts& w = weights[tile.expert];
  const int64_t col0 = static_cast<int64_t>(blockIdx.x % groups) * kGemmCols;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;

  // The chunks this thread copies each stage: 2 of the a tile, 4 of the weights.
  constexpr int kAPer = kGemmRows * kGemmChunks / kGemmThreads;
  constexpr int kBPer = kGemmCols * kGemmChunks / kGemmThreads;
  const uint16_t* a_src[kAPer];
  int a_dst[kAPer];
  bool a_live[kAPer];
  int a_k[kAPer];
#pragma unroll
  for (int i = 0; i < kAPer; ++i) {
    const int c = tid + i * kGemmThreads;
    const int r = c / kGemmChunks;
    const int ch = c % kGemmChunks;
    a_live[i] = r < tile.rows;
    a_src[i] = a + (static_cast<int64_t>(tile.start) + (a_live[i] ? r : 0)) * lda + ch * 8;
    a_dst[i] = GemmSwizzle(r, ch);
    a_k[i] = ch * 8;
  }
  const uint16_t* b_src[kBPer];
  int b_dst[kBPer];
  bool b_live[kBPer];
  int b_k[kBPer];
#pragma unroll
  for (int i = 0; i < kBPer; ++i) {
    const int c = tid + i * kGemmThreads;
    const int r = c / kGemmChunks;
    const int ch = c % kGemmChunks;
    const uint16_t* col = col0 + r < n ? ColumnOf(w, col0 + r, k) : nullptr;
    b_live[i] = col != nullptr;
    b_src[i] = (col != nullptr ? col : w.data[0]) + ch * 8;
    b_dst[i] = GemmSwizzle(r, ch);
    b_k[i] = ch * 8;
  }
  const auto load = [&](int stage, int64_t k0) {
#pragma unroll
    for (int i = 0; i < kAPer; ++i) {
      const bool v = a_live[i] && k0 + a_k[i] < k;
      CopyAsync16Or0(&sa[stage][a_dst[i]], v ? a_src[i] + k0 : a_src[i], v);
    }
#pragma unroll
    for (int i = 0; i < kBPer; ++i) {
      const bool v = b_live[i] && k0 + b_k[i] < k;
      CopyAsync16Or0(&sb[stage][b_dst[i]], v ? b_src[i] + k0 : b_src[i], v);
    }
  };

  const int wm = warp / 2;  // Rows 32 wm .. 32 wm + 31 of the tile.
  const int wn = warp % 2;  // Columns 64 wn .. 64 wn + 63 of the block.
  float acc[2][8][4] = {};
  const int64_t steps = (k + kGemmK - 1) / kGemmK;
#pragma unroll
  for (int s = 0; s < kGemmStages - 1; ++s) {
    if (s < steps) load(s, static_cast<int64_t>(s) * kGemmK);
    GemmCommit();
  }
  for (int64_t step = 0; step < steps; ++step) {
    GemmWait<kGemmStages - 2>();
    __syncthreads();  // Stage `step` is in; every warp is done with the stage refilled next.
    const int64_t ahead = step + kGemmStages - 1;
    if (ahead < steps) load(static_cast<int>(ahead % kGemmStages), ahead * kGemmK);
    GemmCommit();
    const int stage = static_cast<int>(step % kGemmStages);
#pragma unroll
    for (int kk = 0; kk < kGemmK / 16; ++kk) {
      uint32_t af[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int row = wm * 32 + mi * 16 + lane % 16;
        LoadMatrix4(&sa[stage][GemmSwizzle(row, 2 * kk + lane / 16)], af[mi]);
      }
      uint32_t bf[8][2];
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) {
        const int row = wn * 64 + nj * 16 + ((lane >> 4) << 3) + (lane & 7);
        uint32_t r[4];
        LoadMatrix4(&sb[stage][GemmSwizzle(row, 2 * kk + ((lane >> 3) & 1))], r);
        bf[2 * nj][0] = r[0];
        bf[2 * nj][1] = r[1];
        bf[2 * nj + 1][0] = r[2];
        bf[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) Mma(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
      }
    }
  }
  GemmWait<0>();
  // acc[mi][ni][e]: tile row 32 wm + 16 mi + lane / 4 (+8 for e >= 2), column
  // 64 wn + 8 ni + 2 (lane % 4) (+1 for odd e).
  const int g = lane / 4;
  const int t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = wm * 32 + mi * 16 + g + (e >= 2 ? 8 : 0);
      if (r >= tile.rows) continue;
      float* out = y + (static_cast<int64_t>(tile.start) + r) * ldy;
#pragma unroll
      for (int ni = 0; ni < 8; ++ni) {
        const int64_t col = col0 + wn * 64 + ni * 8 + 2 * t + (e & 1);
        if (col < n) out[col] = acc[mi][ni][e];
      }
    }
  }
}

#endif  // !__HIP_PLATFORM_AMD__

constexpr int kGatherThreads = 256;
constexpr int kGatherRowsPerBlock = kGatherThreads / 32;  // A warp a row.
static_assert(kGemmTileRows % kGatherRowsPerBlock == 0);

// Four fp32 values rounded to bf16 (FloatToBf16 each) in one 8-byte store.
__device__ inline void StoreBf16x4(uint16_t* dst, float4 v) {
  uint2 p;
  p.x = static_cast<uint32_t>(FloatToBf16(v.x)) | (static_cast<uint32_t>(FloatToBf16(v.y)) << 16);
  p.y = static_cast<uint32_t>(FloatToBf16(v.z)) | (static_cast<uint32_t>(FloatToBf16(v.w)) << 16);
  *reinterpret_cast<uint2*>(dst) = p;
}

// kGatherRowsPerBlock slots of a tile a block (a warp a slot): the pick's input row rounded to
// bf16 (FloatToBf16: RoundRowsToBf16's rounding). kVec: 16-byte loads and 8-byte stores (k % 4
// == 0, aligned rows); the same values either way.
template <bool kVec>
__global__ void __launch_bounds__(kGatherThreads)
    MoeGatherBf16Kernel(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                        const MoeTile* tiles, const int32_t* num_tiles, int64_t k, uint16_t* out,
                        int64_t ld_out) {
  KernelEntry();
  constexpr int kParts = kGemmTileRows / kGatherRowsPerBlock;
  const int32_t tile_index = static_cast<int32_t>(blockIdx.x / kParts);
  if (tile_index >= *num_tiles) return;
  const MoeTile tile = tiles[tile_index];
  const int r = static_cast<int>(blockIdx.x % kParts) * kGatherRowsPerBlock + threadIdx.x / 32;
  if (r >= tile.rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t slot = static_cast<int64_t>(tile.start) + r;
  const float* src = x + static_cast<int64_t>(sorted_picks[slot] / top_k) * ldx;
  uint16_t* dst = out + slot * ld_out;
  if constexpr (kVec) {
    for (int64_t c = 4 * lane; c < k; c += 4 * 32) {
      StoreBf16x4(dst + c, *reinterpret_cast<const float4*>(src + c));
    }
  } else {
    for (int64_t c = lane; c < k; c += 32) dst[c] = FloatToBf16(src[c]);
  }
}

// SiluMulKernel's expression (elementwise.hip) on four values a thread (width % 4 == 0, rows
// of gu 16-byte aligned), rounded as RoundRowsToBf16Kernel rounds.
__global__ void MoeSiluMulBf16Kernel(const float* gu, int64_t rows, int64_t width,
                                     uint16_t* out) {
  KernelEntry();
  const int64_t quads = width / 4;
  const int64_t n = rows * quads;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / quads;
    const int64_t i = e % quads * 4;
    const float4 g = *reinterpret_cast<const float4*>(gu + r * 2 * width + i);
    const float4 u = *reinterpret_cast<const float4*>(gu + r * 2 * width + width + i);
    float4 v;
    v.x = DeviceSilu(g.x) * u.x;
    v.y = DeviceSilu(g.y) * u.y;
    v.z = DeviceSilu(g.z) * u.z;
    v.w = DeviceSilu(g.w) * u.w;
    StoreBf16x4(out + r * width + i, v);
  }
}

// A block per token: its picks in ascending expert id, out = out + w * y one pick at a time
// (AddScaledRows' arithmetic: the product rounded, then the sum).
__global__ void __launch_bounds__(kCombineThreads)
    MoeCombineKernel(const float* y, const int32_t* ids, const float* weights,
                     const int32_t* slot_of_pick, int top_k, int64_t dim, float* out) {
  KernelEntry();
  const int64_t tok = blockIdx.x;
  int32_t order[kMaxTopK];
  int n = 0;
  for (int j = 0; j < top_k; ++j) {
    const int64_t i = tok * top_k + j;
    if (slot_of_pick[i] < 0) continue;  // A pick that names no expert adds nothing.
    int at = n++;
    while (at > 0 && ids[tok * top_k + order[at - 1]] > ids[i]) {
      order[at] = order[at - 1];
      --at;
    }
    order[at] = j;
  }
  float* o = out + tok * dim;
  for (int64_t c = threadIdx.x; c < dim; c += kCombineThreads) {
    float v = o[c];
    for (int p = 0; p < n; ++p) {
      const int64_t i = tok * top_k + order[p];
      // Two roundings, never a fused multiply-add: AddScaledRows' (and the CPU's) arithmetic.
      v = __fadd_rn(v, __fmul_rn(weights[i], y[static_cast<int64_t>(slot_of_pick[i]) * dim + c]));
    }
    o[c] = v;
  }
}

}  // namespace

int MoeMaxExperts() { return kMaxExperts; }
int MoeMaxTopK() { return kMaxTopK; }
int MoeTileRows() { return 8; }

int64_t MoeMaxTiles(int64_t picks, int experts, int tile_rows) {
  // An expert with c picks has ceil(c / tile_rows) <= c / tile_rows + 1 tiles.
  const int64_t spread = picks < experts ? picks : experts;
  const int64_t bound = picks / tile_rows + spread + 1;
  return picks < bound ? picks : bound;
}

hipError_t MoeRouteBlock(const float* logits, int64_t tokens, int experts, int top_k,
                         bool renormalise, int32_t* ids, float* weights, hipStream_t stream) {
  if (tokens == 0 || top_k == 0) return hipSuccess;
  // The kernels keep a token's picks in an array of kMaxTopK.
  if (experts < 1 || experts > kMaxExperts || top_k < 0 || top_k > kMaxTopK ||
      tokens > 0x7fffffff) {
    return hipErrorInvalidValue;
  }
  LaunchKernel(MoeRouteBlockKernel, static_cast<unsigned int>(tokens), kRouteThreads, 0, stream,
               logits, experts, top_k, renormalise, ids, weights);
  return hipGetLastError();
}

MoeSortSizes MoeSortSizesFor(int64_t picks, int experts, int tile_rows) {
  MoeSortSizes s;
  s.chunks = CeilDiv(picks, kSortChunk);
  s.hist_ints = s.chunks * experts;
  s.max_tiles = tile_rows >= 1 ? MoeMaxTiles(picks, experts, tile_rows) : 0;
  return s;
}

hipError_t MoeSortPicks(const int32_t* ids, int64_t picks, int experts, int tile_rows,
                        const MoeSortBuffers& b, hipStream_t stream, bool one_block) {
  if (picks == 0) return hipSuccess;
  if (experts < 1 || experts > kMaxExperts || tile_rows < 1) return hipErrorInvalidValue;
  if (one_block && picks <= kSmallSortPicks) {
    LaunchKernel(MoeSortSmallKernel, 1, kOffsetThreads, 0, stream, ids, static_cast<int>(picks),
                 experts, tile_rows, b.offsets, b.tiles, b.num_tiles, b.sorted_picks,
                 b.slot_of_pick);
    return hipGetLastError();
  }
  const int64_t chunks = CeilDiv(picks, kSortChunk);
  if (chunks > 0x7fffffff) return hipErrorInvalidValue;
  LaunchKernel(MoeCountKernel, static_cast<unsigned int>(chunks), kSortChunk, 0, stream, ids, picks,
               experts, b.hist, b.rank);
  LaunchKernel(MoeOffsetsKernel, 1, kOffsetThreads, 0, stream, b.hist, static_cast<int>(chunks),
               experts, tile_rows, b.base, b.offsets, b.tiles, b.num_tiles);
  LaunchKernel(MoeScatterKernel, static_cast<unsigned int>(chunks), kSortChunk, 0, stream, ids,
               picks, experts, b.base, b.offsets, b.rank, b.sorted_picks, b.slot_of_pick);
  return hipGetLastError();
}

hipError_t MoeRouteAndSort(const float* logits, int64_t logits_ld, int64_t tokens, int experts,
                           int top_k, bool renormalise, MoeRouting routing, int tile_rows,
                           int32_t* ids, float* weights, const MoeSortBuffers& b,
                           hipStream_t stream) {
  const int64_t picks = tokens * top_k;
  if (picks == 0) return hipSuccess;
  if (experts < 1 || experts > kMaxExperts || top_k < 1 || top_k > experts || top_k > kMaxTopK ||
      tile_rows < 1 || tokens < 0 || tokens > 0x7fffffff || logits_ld < experts) {
    return hipErrorInvalidValue;
  }
#if defined(__HIP_PLATFORM_AMD__)
  if (logits_ld != experts) return hipErrorInvalidValue;
#else
  if (routing != MoeRouting::kWarp && logits_ld != experts) return hipErrorInvalidValue;
#endif
  hipError_t e = hipSuccess;
  switch (routing) {
    case MoeRouting::kThread:
      e = MoeRoute(logits, tokens, experts, top_k, renormalise, ids, weights, stream);
      break;
    case MoeRouting::kBlock:
      e = MoeRouteBlock(logits, tokens, experts, top_k, renormalise, ids, weights, stream);
      break;
    case MoeRouting::kWarp:
#if defined(__HIP_PLATFORM_AMD__)
      e = MoeRouteBlock(logits, tokens, experts, top_k, renormalise, ids, weights, stream);
#else
      if (tokens <= kFusedRouteTokens && picks <= kSmallSortPicks) {
        const size_t bytes = static_cast<size_t>(tokens) * RouteStride(experts) * sizeof(float);
        // Beyond the default beside the sort's static shared memory: ask for it. A device whose
        // blocks cannot have that much routes and sorts in separate launches below.
        // Half the block where the call allows it: a thread then has up to 128 registers, and
        // the routing warps keep their experts in them without spilling.
        const bool half = experts <= kHalfRouteThreads && picks <= kHalfRouteThreads &&
                          tokens <= kHalfRouteThreads / 32;
        const auto kernel = half ? MoeRouteSortSmallKernel<kHalfRouteThreads>
                                 : MoeRouteSortSmallKernel<kOffsetThreads>;
        if (bytes + kSortSharedBytes <= kDefaultSharedBytes ||
            AllowSharedBytes(kernel, bytes) == hipSuccess) {
          LaunchKernel(kernel, 1, half ? kHalfRouteThreads : kOffsetThreads, bytes, stream, logits,
                       logits_ld, static_cast<int>(tokens), experts, top_k, renormalise,
                       tile_rows, ids, weights, b.offsets, b.tiles, b.num_tiles, b.sorted_picks,
                       b.slot_of_pick);
          return hipGetLastError();
        }
        static_cast<void>(hipGetLastError());  // The refusal, not an error of this call.
      }
      LaunchKernel(MoeRouteWarpKernel, static_cast<unsigned int>(CeilDiv(tokens, kRouteWarps)),
                   kRouteThreads,
                   static_cast<size_t>(kRouteWarps) * RouteStride(experts) * sizeof(float),
                   stream, logits, logits_ld, tokens, experts, top_k, renormalise, ids, weights);
      e = hipGetLastError();
#endif
      break;
  }
  if (e != hipSuccess) return e;
  return MoeSortPicks(ids, picks, experts, tile_rows, b, stream,
                      /*one_block=*/routing == MoeRouting::kWarp);
}

#if defined(__HIP_PLATFORM_AMD__)

int64_t MoeLongWarpLaunches() { return 0; }
hipError_t MoeRowsMma(const float*, int64_t, const int32_t*, int, const MoeTile*, const int32_t*,
                      int64_t, const MoeExpertParts*, bool, int64_t, int64_t, float*, int64_t,
                      bool, hipStream_t, const MoeSharedRows&, const MoeLongWarps&) {
  return hipErrorNotSupported;
}
hipError_t MoeRowsMmaSiluMul(const float*, int64_t, const int32_t*, int, const MoeTile*,
                             const int32_t*, int64_t, const MoeExpertParts*, bool, int64_t,
                             int64_t, float*, bool, hipStream_t, const MoeSharedRows&,
                             const MoeLongWarps&) {
  return hipErrorNotSupported;
}

#else

namespace {

std::atomic<int64_t> long_warp_launches{0};  // MoeLongWarpLaunches().

// The grouped product's kernel for the call's inputs.
template <bool kSilu>
auto MoeRowsMmaKernelFor(bool vec, bool bf16_inputs) {
  return vec ? (bf16_inputs ? MoeRowsMmaKernel<1, true, kSilu> : MoeRowsMmaKernel<3, true, kSilu>)
             : (bf16_inputs ? MoeRowsMmaKernel<1, false, kSilu>
                            : MoeRowsMmaKernel<3, false, kSilu>);
}

// Warps a column tile (MoeRowsMmaKernel's warps_per_tile): the fewest, so the longest-lived
// warps, whose grid of `tiles` row tiles still has `waves` blocks for each place the device
// holds (`places`); else `segments`, a warp a segment. waves <= 0 or places <= 0: segments.
int WarpsPerTile(int64_t tiles, int64_t col_tiles, int segments, int waves, int64_t places) {
  if (waves <= 0 || places <= 0) return segments;
  int wpt = 1;
  while (wpt < segments && tiles * CeilDiv(col_tiles, kWarps / wpt) < waves * places) wpt *= 2;
  return wpt;
}

// MoeRowsMma, or with kSilu MoeRowsMmaSiluMul (n = 2 * width, y the activation).
// `weights_aligned` covers the shared rows' weights too.
template <bool kSilu>
hipError_t RunMoeRowsMma(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                         const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                         const MoeExpertParts* weights, bool weights_aligned, int64_t n, int64_t k,
                         float* y, int64_t ldy, bool bf16_inputs, int64_t width,
                         hipStream_t stream, const MoeSharedRows& shared,
                         const MoeLongWarps& long_warps) {
  const int64_t shared_tiles =
      shared.weights != nullptr && shared.rows > 0 ? CeilDiv(shared.rows, 8) : 0;
  if ((max_tiles == 0 && shared_tiles == 0) || n == 0) return hipSuccess;
  if (max_tiles < 0 || max_tiles + shared_tiles > 0x7fffffff) return hipErrorInvalidValue;
  // MatMulRowsMma's segments: from n and k only.
  const int64_t col_tiles = CeilDiv(n, kTileCols);
  const mma_rows::Segments cut = mma_rows::SegmentsFor(n, k);
  const int segments = cut.count;
  const int64_t segment = cut.length;
  const auto rows_aligned = [&](const float* p, int64_t ld) {
    return ld % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  };
  const bool vec = weights_aligned && k % 8 == 0 && rows_aligned(x, ldx) &&
                   (shared_tiles == 0 || rows_aligned(shared.x, shared.ldx));
  const auto kernel = MoeRowsMmaKernelFor<kSilu>(vec, bf16_inputs);
  int64_t places = 0;
  if (long_warps.waves > 0 && long_warps.multiprocessors > 0) {
    int per = 0;
    if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, kThreads, 0) == hipSuccess) {
      places = static_cast<int64_t>(per) * long_warps.multiprocessors;
    } else {
      static_cast<void>(hipGetLastError());  // No answer: a warp a segment.
    }
  }
  const int wpt =
      WarpsPerTile(max_tiles + shared_tiles, col_tiles, segments, long_warps.waves, places);
  static_assert(kWarps / 2 <= kMaxPartSegments, "a part past 0 has at most kWarps / 2 segments");
  if (segments > kWarps || wpt < 1 || wpt > segments || segments % wpt != 0) {
    return hipErrorInvalidValue;
  }
  const int64_t groups = CeilDiv(col_tiles, kWarps / wpt);
  if (groups > 65535) return hipErrorInvalidValue;
  const dim3 grid(static_cast<unsigned int>(max_tiles + shared_tiles),
                  static_cast<unsigned int>(groups));
  LaunchKernel(kernel, grid, kThreads, 0, stream, x, ldx, sorted_picks, top_k, tiles, num_tiles,
               max_tiles, weights, n, k, y, ldy, segments, segment, wpt, width, shared);
  if (wpt < segments) long_warp_launches.fetch_add(1, std::memory_order_relaxed);
  return hipGetLastError();
}

}  // namespace

int64_t MoeLongWarpLaunches() { return long_warp_launches.load(std::memory_order_relaxed); }

hipError_t MoeRowsMma(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                      const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                      const MoeExpertParts* weights, bool weights_aligned, int64_t n, int64_t k,
                      float* y, int64_t ldy, bool bf16_inputs, hipStream_t stream,
                      const MoeSharedRows& shared, const MoeLongWarps& long_warps) {
  return RunMoeRowsMma<false>(x, ldx, sorted_picks, top_k, tiles, num_tiles, max_tiles, weights,
                              weights_aligned, n, k, y, ldy, bf16_inputs, 0, stream, shared,
                              long_warps);
}

hipError_t MoeRowsMmaSiluMul(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                             const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                             const MoeExpertParts* weights, bool weights_aligned, int64_t width,
                             int64_t k, float* act, bool bf16_inputs, hipStream_t stream,
                             const MoeSharedRows& shared, const MoeLongWarps& long_warps) {
  if (width <= 0 || width % 8 != 0) return hipErrorInvalidValue;
  return RunMoeRowsMma<true>(x, ldx, sorted_picks, top_k, tiles, num_tiles, max_tiles, weights,
                             weights_aligned, 2 * width, k, act, width, bf16_inputs, width, stream,
                             shared, long_warps);
}

#endif  // __HIP_PLATFORM_AMD__

#if defined(__HIP_PLATFORM_AMD__)

bool MoeGemmSupported() { return false; }
int MoeGemmTileRows() { return kGemmTileRows; }
hipError_t MoeGemmBf16(const uint16_t*, int64_t, const MoeTile*, const int32_t*, int64_t,
                       const MoeExpertParts*, bool, int64_t, int64_t, float*, int64_t,
                       hipStream_t) {
  return hipErrorNotSupported;
}

#else

bool MoeGemmSupported() { return true; }
int MoeGemmTileRows() { return kGemmTileRows; }

hipError_t MoeGemmBf16(const uint16_t* a, int64_t lda, const MoeTile* tiles,
                       const int32_t* num_tiles, int64_t max_tiles, const MoeExpertParts* weights,
                       bool weights_aligned, int64_t n, int64_t k, float* y, int64_t ldy,
                       hipStream_t stream) {
  if (max_tiles == 0 || n == 0) return hipSuccess;
  const int64_t groups = CeilDiv(n, kGemmCols);
  if (!weights_aligned || k % 8 != 0 || lda % 8 != 0 ||
      reinterpret_cast<uintptr_t>(a) % 16 != 0 || max_tiles * groups > 0x7fffffff) {
    return hipErrorInvalidValue;
  }
  LaunchKernel(MoeGemmKernel, static_cast<unsigned int>(max_tiles * groups), kGemmThreads, 0,
               stream, a, lda, tiles, num_tiles, static_cast<int>(groups), weights, n, k, y, ldy);
  return hipGetLastError();
}

#endif  // __HIP_PLATFORM_AMD__

hipError_t MoeGatherBf16(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                         const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                         int64_t k, uint16_t* out, int64_t ld_out, hipStream_t stream) {
  if (max_tiles == 0 || k == 0) return hipSuccess;
  constexpr int64_t kParts = kGemmTileRows / kGatherRowsPerBlock;
  if (max_tiles * kParts > 0x7fffffff || top_k < 1) return hipErrorInvalidValue;
  const bool vec = k % 4 == 0 && ldx % 4 == 0 && ld_out % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 8 == 0;
  const auto blocks = static_cast<unsigned int>(max_tiles * kParts);
  if (vec) {
    LaunchKernel(MoeGatherBf16Kernel<true>, blocks, kGatherThreads, 0, stream, x, ldx, sorted_picks,
                 top_k, tiles, num_tiles, k, out, ld_out);
  } else {
    LaunchKernel(MoeGatherBf16Kernel<false>, blocks, kGatherThreads, 0, stream, x, ldx,
                 sorted_picks, top_k, tiles, num_tiles, k, out, ld_out);
  }
  return hipGetLastError();
}

hipError_t MoeSiluMulBf16(const float* gu, int64_t rows, int64_t width, uint16_t* out,
                          hipStream_t stream) {
  if (rows * width == 0) return hipSuccess;
  if (width % 4 != 0 || reinterpret_cast<uintptr_t>(gu) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 8 != 0) {
    return hipErrorInvalidValue;
  }
  LaunchKernel(MoeSiluMulBf16Kernel, GridFor(rows * width / 4, kGatherThreads), kGatherThreads, 0,
               stream, gu, rows, width, out);
  return hipGetLastError();
}

hipError_t MoeCombine(const float* y, const int32_t* ids, const float* weights,
                      const int32_t* slot_of_pick, int64_t tokens, int top_k, int64_t dim,
                      float* out, hipStream_t stream, bool wide, const float* gate,
                      float* residual, int64_t gate_ld) {
  if (tokens == 0) return hipSuccess;
  if (top_k < 1 || top_k > kMaxTopK || tokens > 0x7fffffff) return hipErrorInvalidValue;
  if (!wide && (gate != nullptr || residual != nullptr)) return hipErrorInvalidValue;
  if (wide) {
    const bool vec = dim % 4 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(residual) % 16 == 0;
    const int64_t groups = CeilDiv(dim, kCombineWideThreads * (vec ? 4 : 1));
    if (groups > 65535) return hipErrorInvalidValue;
    const dim3 grid(static_cast<unsigned int>(tokens), static_cast<unsigned int>(groups));
    if (vec) {
      LaunchKernel(MoeCombineWideKernel<true>, grid, kCombineWideThreads, 0, stream, y, ids,
                   weights, slot_of_pick, top_k, dim, out, gate, gate_ld, residual);
    } else {
      LaunchKernel(MoeCombineWideKernel<false>, grid, kCombineWideThreads, 0, stream, y, ids,
                   weights, slot_of_pick, top_k, dim, out, gate, gate_ld, residual);
    }
    return hipGetLastError();
  }
  LaunchKernel(MoeCombineKernel, static_cast<unsigned int>(tokens), kCombineThreads, 0, stream, y,
               ids, weights, slot_of_pick, top_k, dim, out);
  return hipGetLastError();
}

}  // namespace cairn::infer::hip
