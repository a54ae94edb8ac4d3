// MoE routing and sort on the device (HipKernelBackend::MoeExperts; moe_experts.hip has the
// products and the sum): MoeRoute's picks by a block or a warp per token, bucketed by expert
// into tiles (MoeSortPicks), and both in one launch for small decode calls (MoeRouteAndSort).
//
// Bits: the routing is MoeRoute's (elementwise.hip) pick for pick and weight for weight (the
// same maximum, exps, sum in expert order and total order of picks); the sort is integer
// counting, so its slots and tiles do not depend on how the work is split.

#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/hip/moe_route_device.h"

namespace cairn::infer::hip {

namespace {

constexpr int kSortChunk = 256;  // Picks per block of the count and scatter kernels.
constexpr int kOffsetThreads = 1024;
constexpr int kMaxExperts = kOffsetThreads;  // One thread per expert in the offsets kernel.
constexpr int kMaxTopK = kMoeMaxTopK;

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
    MoeSortSmallKernel(const int32_t* ids, int picks, int experts, int tile_rows, int32_t* offsets,
                       MoeTile* tiles, int32_t* num_tiles, int32_t* sorted_picks,
                       int32_t* slot_of_pick) {
  KernelEntry();
  SortPicksInBlock(ids, picks, experts, tile_rows, offsets, tiles, num_tiles, sorted_picks,
                   slot_of_pick);
}

#if !defined(__HIP_PLATFORM_AMD__)

using moe_route::kLaneExperts;
using moe_route::RouteStride;
using moe_route::RouteTokenInWarp;
constexpr int kRouteWarps = kRouteThreads / 32;
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
                            float* weights, int32_t* offsets, MoeTile* tiles, int32_t* num_tiles,
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

// MoeRouteDivisionMismatches: thread i of the grid takes the floats whose bits are begin + i,
// begin + i + the grid's threads, ... below `end`, and counts those that moe_route::Divide
// divides by `sum` to other bits than the `/` operator does (NaNs alike whatever their payloads).
__global__ void MoeRouteDivisionKernel(float sum, uint32_t begin, uint32_t end,
                                       unsigned long long* mismatches) {
  const moe_route::SumDivider d = moe_route::DividerFor(sum);
  unsigned long long n = 0;
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t b = begin + static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < end;
       b += step) {
    const float v = __uint_as_float(static_cast<uint32_t>(b));
    const float want = v / sum;
    const float got = d.exact ? moe_route::Divide(d, v) : v / sum;
    const bool both_nan = want != want && got != got;
    n += __float_as_uint(want) != __float_as_uint(got) && !both_nan ? 1 : 0;
  }
  if (n != 0) atomicAdd(mismatches, n);
}

#endif  // !__HIP_PLATFORM_AMD__

}  // namespace

hipError_t MoeRouteDivisionMismatches(float sum, bool with_nans, unsigned long long* mismatches,
                                      hipStream_t stream) {
#if defined(__HIP_PLATFORM_AMD__)
  static_cast<void>(sum);
  static_cast<void>(with_nans);
  static_cast<void>(mismatches);
  static_cast<void>(stream);
  return hipErrorNotSupported;
#else
  // Every float in [0, 1] (bits 0 to 0x3f800000), then the NaNs of positive sign.
  constexpr uint32_t kPastOne = 0x3f800001u, kFirstNan = 0x7f800001u, kPastNans = 0x80000000u;
  constexpr unsigned int kBlocks = 1024, kThreadsHere = 256;
  LaunchKernel(MoeRouteDivisionKernel, kBlocks, kThreadsHere, 0, stream, sum, 0u, kPastOne,
               mismatches);
  if (with_nans) {
    LaunchKernel(MoeRouteDivisionKernel, kBlocks, kThreadsHere, 0, stream, sum, kFirstNan,
                 kPastNans, mismatches);
  }
  return hipGetLastError();
#endif
}

int MoeMaxExperts() { return kMaxExperts; }
int MoeMaxTopK() { return kMaxTopK; }

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
                       logits_ld, static_cast<int>(tokens), experts, top_k, renormalise, tile_rows,
                       ids, weights, b.offsets, b.tiles, b.num_tiles, b.sorted_picks,
                       b.slot_of_pick);
          return hipGetLastError();
        }
        static_cast<void>(hipGetLastError());  // The refusal, not an error of this call.
      }
      LaunchKernel(MoeRouteWarpKernel, static_cast<unsigned int>(CeilDiv(tokens, kRouteWarps)),
                   kRouteThreads,
                   static_cast<size_t>(kRouteWarps) * RouteStride(experts) * sizeof(float), stream,
                   logits, logits_ld, tokens, experts, top_k, renormalise, ids, weights);
      e = hipGetLastError();
#endif
      break;
  }
  if (e != hipSuccess) return e;
  return MoeSortPicks(ids, picks, experts, tile_rows, b, stream,
                      /*one_block=*/routing == MoeRouting::kWarp);
}

}  // namespace cairn::infer::hip
