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
#include "services/infer/kernels/hip/moe_combine_device.h"

namespace cairn::infer::hip {

namespace {

constexpr int kMaxTopK = kMoeMaxTopK;
constexpr int kCombineThreads = 256;
constexpr int kGemmTileRows = 64;  // Picks per tile of the prefill path (MoeGemmTileRows()).

// MoeCombineKernel's sums with a block per (token, kCombineWideCols columns): the token's picks
// put in ascending expert id (stable: a pick's place is the number of valid picks before it in
// that order, the insertion sort's result) by top_k threads at once, then each thread's 4 (or
// 1) columns take out = out + w * y a pick at a time in that order, the rows of kCombineBatch
// picks loaded before they are added.
constexpr int kCombineWideThreads = 64;
constexpr int kCombineBatch = moe_combine::kBatch;

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
  __shared__ int32_t sorted_slot[kMaxTopK];
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
    sorted_slot[at] = pick_slot[tid];
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
    moe_combine::CombineFour<false>(y + c, dim, sorted_slot, sorted_w, n, gate != nullptr, scale, o,
                                    residual != nullptr ? residual + tok * dim + c : nullptr);
  } else {
    float v = *o;
    if (gate != nullptr) v = __fmul_rn(v, scale);
    for (int p0 = 0; p0 < n; p0 += kCombineBatch) {
      float yv[kCombineBatch];
#pragma unroll
      for (int q = 0; q < kCombineBatch; ++q) {
        if (p0 + q < n) yv[q] = y[static_cast<int64_t>(sorted_slot[p0 + q]) * dim + c];
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
constexpr int kGemmCols = 128;            // Weight columns (output columns) per block.
constexpr int kGemmK = 32;                // k values per stage: four 16-byte chunks a row.
constexpr int kGemmStages = 4;            // Stages in flight (48 KiB of shared memory).
constexpr int kGemmThreads = 128;         // 2 x 2 warps, each 32 rows x 64 columns.
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
// LoadMatrixX4 at a generic pointer into shared memory.
__device__ inline void LoadMatrix4(const uint16_t* p, uint32_t r[4]) {
  LoadMatrixX4(r, static_cast<uint32_t>(__cvta_generic_to_shared(p)));
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
                        int64_t ld_out, int parts) {
  KernelEntry();
  const int32_t tile_index = static_cast<int32_t>(blockIdx.x / parts);
  if (tile_index >= *num_tiles) return;
  const MoeTile tile = tiles[tile_index];
  const int r = static_cast<int>(blockIdx.x % parts) * kGatherRowsPerBlock + threadIdx.x / 32;
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
__global__ void MoeSiluMulBf16Kernel(const float* gu, int64_t rows, int64_t width, uint16_t* out) {
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

int MoeTileRows() { return 8; }

#if defined(__HIP_PLATFORM_AMD__)

int64_t MoeLongWarpLaunches() { return 0; }
hipError_t MoeRowsMma(const float*, int64_t, const int32_t*, int, const MoeTile*, const int32_t*,
                      int64_t, const MoeExpertParts*, bool, int64_t, int64_t, float*, int64_t, bool,
                      hipStream_t, const MoeSharedRows&, const MoeLongWarps&) {
  return hipErrorNotSupported;
}
hipError_t MoeRowsMmaSiluMul(const float*, int64_t, const int32_t*, int, const MoeTile*,
                             const int32_t*, int64_t, const MoeExpertParts*, bool, int64_t, int64_t,
                             float*, bool, hipStream_t, const MoeSharedRows&, const MoeLongWarps&) {
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
                         float* y, int64_t ldy, bool bf16_inputs, int64_t width, hipStream_t stream,
                         const MoeSharedRows& shared, const MoeLongWarps& long_warps) {
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
  if (long_warps.stream && vec && long_warps.multiprocessors > 0) {
    const hipError_t e = MoeRowsStream(
        kSilu, x, ldx, sorted_picks, top_k, tiles, num_tiles, max_tiles, weights, n, k, y, ldy,
        bf16_inputs, width, segments, segment, long_warps.multiprocessors, stream, shared);
    if (e != hipErrorNotSupported) return e;  // Else it did not take the call: the launches.
  }
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
  // With wpt >= 2 a warp takes at most segments / 2 <= kWarps / 2 segments (the bound of the
  // kernel's `partial`); SegmentsFor never cuts more than kWarps.
  static_assert(mma_rows::kMaxSegments <= kWarps && kWarps / 2 <= kMaxPartSegments);
  if (segments > kWarps || wpt < 1 || wpt > segments || segments % wpt != 0) {
    return hipErrorInvalidValue;
  }
  const int64_t groups = CeilDiv(col_tiles, kWarps / wpt);
  if (groups > 65535) return hipErrorInvalidValue;
  const dim3 grid(static_cast<unsigned int>(max_tiles + shared_tiles),
                  static_cast<unsigned int>(groups));
  LaunchKernel(kernel, grid, kThreads, 0, stream, x, ldx, sorted_picks, top_k, tiles, num_tiles,
               max_tiles, weights, n, k, y, ldy, segments, segment, wpt, width, shared);
  const hipError_t e = hipGetLastError();
  if (e == hipSuccess && wpt < segments) {
    long_warp_launches.fetch_add(1, std::memory_order_relaxed);
  }
  return e;
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
  if (!weights_aligned || k % 8 != 0 || lda % 8 != 0 || reinterpret_cast<uintptr_t>(a) % 16 != 0 ||
      max_tiles * groups > 0x7fffffff) {
    return hipErrorInvalidValue;
  }
  LaunchKernel(MoeGemmKernel, static_cast<unsigned int>(max_tiles * groups), kGemmThreads, 0,
               stream, a, lda, tiles, num_tiles, static_cast<int>(groups), weights, n, k, y, ldy);
  return hipGetLastError();
}

#endif  // __HIP_PLATFORM_AMD__

hipError_t MoeGatherBf16(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                         const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                         int64_t k, uint16_t* out, int64_t ld_out, int tile_rows,
                         hipStream_t stream) {
  if (max_tiles == 0 || k == 0) return hipSuccess;
  const int parts = tile_rows / kGatherRowsPerBlock;
  if (tile_rows <= 0 || tile_rows % kGatherRowsPerBlock != 0 || max_tiles * parts > 0x7fffffff ||
      top_k < 1) {
    return hipErrorInvalidValue;
  }
  const bool vec = k % 4 == 0 && ldx % 4 == 0 && ld_out % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 8 == 0;
  const auto blocks = static_cast<unsigned int>(max_tiles * parts);
  if (vec) {
    LaunchKernel(MoeGatherBf16Kernel<true>, blocks, kGatherThreads, 0, stream, x, ldx, sorted_picks,
                 top_k, tiles, num_tiles, k, out, ld_out, parts);
  } else {
    LaunchKernel(MoeGatherBf16Kernel<false>, blocks, kGatherThreads, 0, stream, x, ldx,
                 sorted_picks, top_k, tiles, num_tiles, k, out, ld_out, parts);
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
                      float* out, hipStream_t stream, bool wide, const float* gate, float* residual,
                      int64_t gate_ld) {
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
