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

constexpr int kRouteThreads = 256;

// MoeRoute (elementwise.hip: one thread walks a token's experts top_k + 2 times) with a block
// per token and the same bits: the maximum (exact in any order), every exp(l - max) once, their
// sum by one thread in expert order (MoeRoute's order), the probabilities by MoeRoute's
// expression, and pick i as the best expert strictly after pick i - 1 in the order
// (probability descending, id ascending), found by a tree over the threads' own bests (the
// order is total, so any tree finds MoeRoute's pick); the picks' sum in pick order.
__global__ void __launch_bounds__(kRouteThreads)
    MoeRouteBlockKernel(const float* logits, int experts, int top_k, bool renormalise, int32_t* ids,
                        float* weights) {
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
      weights[tok * top_k + i] = best_p;
    }
    top_sum += best_p;
    prev_p = best_p;
    prev_id = best_id;
  }
  if (renormalise && tid == 0) {
    for (int i = 0; i < top_k; ++i) weights[tok * top_k + i] /= top_sum;
  }
}

// Per chunk of kSortChunk picks: the picks per expert, and each pick's rank among the chunk's
// earlier picks of its expert (a stable order: token order within an expert). Shared-memory
// integer counts are exact whatever order the increments land in.
__global__ void __launch_bounds__(kSortChunk)
    MoeCountKernel(const int32_t* ids, int64_t picks, int experts, int32_t* hist, int32_t* rank) {
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
  __shared__ int32_t scan_rows[kOffsetThreads];
  __shared__ int32_t scan_tiles[kOffsetThreads];
  const int e = threadIdx.x;
  int32_t count = 0;
  if (e < experts) {
    for (int c = 0; c < chunks; ++c) {
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

// Grid: x = row tiles (up to max_tiles; blocks past *num_tiles exit), y = groups of
// kWarps / segments column tiles of 16. A tile's row r is slot tile.start + r; its input is
// x row sorted_picks[slot] / top_k (`gather`) or x row slot, its output y row slot. Warp w
// takes column tile w / segments of the group and k segment w % segments, as MatMulRowsMma.
template <bool kVec>
__global__ void __launch_bounds__(kThreads, 2)
    MoeRowsMmaKernel(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                     const MoeTile* tiles, const int32_t* num_tiles, const MoeExpertParts* weights,
                     int64_t n, int64_t k, float* y, int64_t ldy, int segments, int64_t segment) {
  if (static_cast<int32_t>(blockIdx.x) >= *num_tiles) return;  // Uniform per block.
  __shared__ float partial[kWarps][4][32];
  const MoeTile tile = tiles[blockIdx.x];
  const MoeExpertParts& w = weights[tile.expert];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int s = warp % segments;
  const int64_t col0 =
      (static_cast<int64_t>(blockIdx.y) * (kWarps / segments) + warp / segments) * kTileCols;
  const uint16_t* wa = col0 + g < n ? ColumnOf(w, col0 + g, k) : nullptr;
  const uint16_t* wb = col0 + g + 8 < n ? ColumnOf(w, col0 + g + 8, k) : nullptr;
  const float* xa = nullptr;
  if (g < tile.rows) {
    const int64_t slot = tile.start + g;
    const int64_t row = sorted_picks != nullptr ? sorted_picks[slot] / top_k : slot;
    xa = x + row * ldx;
  }
  float acc[4] = {};
  const int64_t begin = s * segment;
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
      uint32_t pieces[3][4];
      SplitPieces(v0[u], pieces);
      StepProducts(va[u], vb[u], pieces, acc);
    }
  }
  if (segments > 1) {
#pragma unroll
    for (int e = 0; e < 4; ++e) partial[warp][e][lane] = acc[e];
    __syncthreads();
    if (s != 0) return;
    for (int j = 1; j < segments; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] += partial[warp + j][e][lane];
    }
  }
  // acc[e]: weight column g (+8 for e >= 2), tile row 2t (+1 for odd e).
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int r = 2 * t + (e & 1);
    const int64_t col = col0 + g + (e >= 2 ? 8 : 0);
    if (r < tile.rows && col < n) y[(tile.start + r) * ldy + col] = acc[e];
  }
}

#endif  // !__HIP_PLATFORM_AMD__

// A block per token: its picks in ascending expert id, out = out + w * y one pick at a time
// (AddScaledRows' arithmetic: the product rounded, then the sum).
__global__ void __launch_bounds__(kCombineThreads)
    MoeCombineKernel(const float* y, const int32_t* ids, const float* weights,
                     const int32_t* slot_of_pick, int top_k, int64_t dim, float* out) {
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

int64_t MoeMaxTiles(int64_t picks, int experts) {
  const int64_t spread = picks < experts ? picks : experts;
  const int64_t bound = picks / MoeTileRows() + spread + 1;
  return picks < bound ? picks : bound;
}

hipError_t MoeRouteBlock(const float* logits, int64_t tokens, int experts, int top_k,
                         bool renormalise, int32_t* ids, float* weights, hipStream_t stream) {
  if (tokens == 0 || top_k == 0) return hipSuccess;
  if (experts < 1 || experts > kMaxExperts || tokens > 0x7fffffff) return hipErrorInvalidValue;
  MoeRouteBlockKernel<<<static_cast<unsigned int>(tokens), kRouteThreads, 0, stream>>>(
      logits, experts, top_k, renormalise, ids, weights);
  return hipGetLastError();
}

MoeSortSizes MoeSortSizesFor(int64_t picks, int experts) {
  MoeSortSizes s;
  s.chunks = CeilDiv(picks, kSortChunk);
  s.hist_ints = s.chunks * experts;
  s.max_tiles = MoeMaxTiles(picks, experts);
  return s;
}

hipError_t MoeSortPicks(const int32_t* ids, int64_t picks, int experts, const MoeSortBuffers& b,
                        hipStream_t stream) {
  if (picks == 0) return hipSuccess;
  if (experts < 1 || experts > kMaxExperts) return hipErrorInvalidValue;
  const int64_t chunks = CeilDiv(picks, kSortChunk);
  if (chunks > 0x7fffffff) return hipErrorInvalidValue;
  MoeCountKernel<<<static_cast<unsigned int>(chunks), kSortChunk, 0, stream>>>(ids, picks, experts,
                                                                               b.hist, b.rank);
  MoeOffsetsKernel<<<1, kOffsetThreads, 0, stream>>>(b.hist, static_cast<int>(chunks), experts,
                                                     MoeTileRows(), b.base, b.offsets, b.tiles,
                                                     b.num_tiles);
  MoeScatterKernel<<<static_cast<unsigned int>(chunks), kSortChunk, 0, stream>>>(
      ids, picks, experts, b.base, b.offsets, b.rank, b.sorted_picks, b.slot_of_pick);
  return hipGetLastError();
}

#if defined(__HIP_PLATFORM_AMD__)

hipError_t MoeRowsMma(const float*, int64_t, const int32_t*, int, const MoeTile*, const int32_t*,
                      int64_t, const MoeExpertParts*, bool, int64_t, int64_t, float*, int64_t,
                      hipStream_t) {
  return hipErrorNotSupported;
}

#else

hipError_t MoeRowsMma(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                      const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                      const MoeExpertParts* weights, bool weights_aligned, int64_t n, int64_t k,
                      float* y, int64_t ldy, hipStream_t stream) {
  if (max_tiles == 0 || n == 0) return hipSuccess;
  // MatMulRowsMma's segments: from n and k only.
  const int64_t col_tiles = CeilDiv(n, kTileCols);
  const mma_rows::Segments cut = mma_rows::SegmentsFor(n, k);
  const int segments = cut.count;
  const int64_t segment = cut.length;
  const int64_t groups = CeilDiv(col_tiles, kWarps / segments);
  if (groups > 65535 || max_tiles > 0x7fffffff) return hipErrorInvalidValue;
  const bool vec =
      weights_aligned && k % 8 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const dim3 grid(static_cast<unsigned int>(max_tiles), static_cast<unsigned int>(groups));
  // clang-format off
  if (vec) {
    MoeRowsMmaKernel<true><<<grid, kThreads, 0, stream>>>(
        x, ldx, sorted_picks, top_k, tiles, num_tiles, weights, n, k, y, ldy, segments, segment);
  } else {
    MoeRowsMmaKernel<false><<<grid, kThreads, 0, stream>>>(
        x, ldx, sorted_picks, top_k, tiles, num_tiles, weights, n, k, y, ldy, segments, segment);
  }
  // clang-format on
  return hipGetLastError();
}

#endif  // __HIP_PLATFORM_AMD__

hipError_t MoeCombine(const float* y, const int32_t* ids, const float* weights,
                      const int32_t* slot_of_pick, int64_t tokens, int top_k, int64_t dim,
                      float* out, hipStream_t stream) {
  if (tokens == 0) return hipSuccess;
  if (top_k < 1 || top_k > kMaxTopK || tokens > 0x7fffffff) return hipErrorInvalidValue;
  MoeCombineKernel<<<static_cast<unsigned int>(tokens), kCombineThreads, 0, stream>>>(
      y, ids, weights, slot_of_pick, top_k, dim, out);
  return hipGetLastError();
}

}  // namespace cairn::infer::hip
