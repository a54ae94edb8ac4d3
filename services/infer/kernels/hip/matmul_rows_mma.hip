// MatMulRowsMma: the batch-invariant product over bf16 weights on the matrix units (NVIDIA
// mma.sync m16n8k16, bf16 x bf16 -> fp32, sm_80 and later), for decode.
//
// Numerics: each fp32 input x is split into three bf16 pieces, hi = bf16(x),
// mid = bf16(x - hi), lo = bf16(x - hi - mid) (nearest even; the differences are exact in fp32),
// whose sum is x to within fp32 rounding of the last piece; a bf16 weight times a bf16 piece is
// exact in fp32, so what differs from an fp32 dot product is the accumulation: the matrix
// units add without rounding to nearest (measured 1e-5 of the largest output when one chain ran
// over all of k), so each chain runs over one step of 32 k values only and its result joins an
// fp32 sum by ordinary, rounded additions. With `bf16_inputs` (kPieces 1) each input is rounded
// to bf16 (nearest even, hi alone), as the prefill GEMM's inputs are: the products are then
// exact for the rounded inputs, the order the same, and the matrix instructions a third.
//
// Order: the weight columns are the matrix instruction's 16 "rows", the input rows its 8
// "columns" (a second set of instructions for input rows 8-15 of a tile). A warp takes 16
// weight columns and one segment of k; each step of 32 k values runs two chains of
// instructions (lo, mid, hi) over a fixed permutation of the step's k values, and adds them to
// the sum. The number of k segments depends on n (the whole matrix's, for a range of its rows)
// and k only; the segments' sums are added in segment order in shared memory. An output
// element is thus a fixed sequence of operations whose operands are its own input row and its
// weight column: the other rows of the call, how many there are and where in a tile a row falls
// never enter its arithmetic, so a row's bits do not depend on m (tested on the H200: calls of
// 1 to 40 rows from any start give the bits of one call of 40).

#include <cstdint>
#include <type_traits>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/hip/mma_rows_device.h"

namespace cairn::infer::hip {

#if defined(__HIP_PLATFORM_AMD__)

// mma.sync is NVIDIA's: AMD keeps the row kernel.
bool MatMulRowsMmaSupported() { return false; }
int64_t MatMulRowsMmaStagingBytes(int64_t, int64_t) { return 0; }
hipError_t MatMulRowsMma(const float*, int64_t, int64_t, int64_t, const RowWeights&, float*,
                         int64_t, bool, bool, bool, int, int, int64_t, uint16_t*, int64_t,
                         hipStream_t) {
  return hipErrorNotSupported;
}
hipError_t MatMulRowsMmaRounded(const uint16_t*, int64_t, int64_t, int64_t, const RowWeights&,
                                float*, int64_t, bool, bool, int, int, int64_t, int64_t,
                                hipStream_t) {
  return hipErrorNotSupported;
}
hipError_t MatMulRowsMmaSiluMul(const float*, const uint16_t*, int64_t, int64_t, int64_t,
                                const RowWeights&, int64_t, float*, uint16_t*, bool, int, int,
                                int64_t, hipStream_t) {
  return hipErrorNotSupported;
}
hipError_t MatMulRowsMmaConv(const float*, const uint16_t*, int64_t, int64_t, int64_t,
                             const RowWeights&, float*, int64_t, const RowsConv&, bool, int, int,
                             int64_t, int64_t, hipStream_t) {
  return hipErrorNotSupported;
}

#else

namespace {

using mma_rows::ColumnOf;
using mma_rows::InputPieces;
using mma_rows::kStep;
using mma_rows::kThreads;
using mma_rows::kTileCols;
using mma_rows::kTileRows;
using mma_rows::kUnroll;
using mma_rows::kWarps;
using mma_rows::LoadStepInputs;
using mma_rows::LoadWeights8;
using mma_rows::PackBf16;
using mma_rows::StepInputs;
using mma_rows::StepProducts;

constexpr int kMaxParts = 4;

struct Parts {
  const uint16_t* data[kMaxParts];
  int64_t end[kMaxParts];
  int count;
};

// MatMulRowsMmaSiluMul's output: act[row * width + j] = silu(gate j) * up j, the gate and up
// products of weight rows j and width + j, and, where `rounded` is not null, the value rounded
// to bf16 at the same index of `rounded`.
struct SiluOut {
  float* act;
  uint16_t* rounded;
  int64_t width;
};

// The plain product's epilogue: y written (or added to) only.
struct NoEpilogue {};

// Taps MatMulRowsMmaConv's epilogue takes.
constexpr int kConvMaxTaps = kMatMulRowsConvMaxTaps;

// Grid: x = tiles of input rows (kTileRows with kUpper, else 8), y = groups of
// kWarps / segments column tiles. Warp w of a block takes column tile w / segments of the group
// and k segment w % segments. kUpper: tiles of 16 rows whose second set of 8 is in use where
// the call has them (the first set's arithmetic is the same either way). Without kUpper a call
// of 9 to 16 rows runs two tiles of 8: the blocks of one column group follow each other in x,
// so the second tile's weight loads mostly find the first one's in L2.
//
// kU steps' loads are in flight together; kMinBlocks blocks a multiprocessor bound the
// registers (kUnroll and 2: 106-122 registers; 3 and 3: 80, so that three blocks fit: variant
// 1). kEarlyUpper (variant 2, tiles of 16): the second set's inputs are loaded with the weights
// and the first set's instead of one step at a time as they are needed. None of them enters the
// arithmetic.
//
// In: float (fp32 inputs, split into kPieces pieces as they are used) or uint16_t (inputs
// rounded to bf16 beforehand by RoundInputsKernel or by the kernel that wrote them, kPieces 1:
// half the bytes to load, the same pieces).
//
// Epi: what the lanes write. NoEpilogue: y. RowsConv (MatMulRowsMmaConv): y, not accumulating,
// and the causal conv of the columns below epi.channels. SiluOut, kSilu below.
// kSilu (MatMulRowsMmaSiluMul, w = [gate; up] of epi.width rows each): column tile c takes
// gate rows 8c .. 8c + 7 as its columns g and up rows width + 8c .. as its columns g + 8, so
// that each lane holds a gate and its up for the same rows and writes silu(gate) * up (SiluMul's
// expression) instead of both; y is not written. A column's arithmetic does not depend on where
// in a tile it falls, and the segments follow n (2 * width) as for the plain product: the gate
// and up values are the plain product's bits, the activation SiluMul's over them.
template <typename In, int kPieces, bool kVec, bool kUpper, int kU = kUnroll, int kMinBlocks = 2,
          bool kEarlyUpper = false, typename Epi = NoEpilogue, bool kStream = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    MatMulRowsMmaKernel(const In* x, int64_t m, int64_t k, int64_t ldx, Parts w, int64_t n,
                        float* y, int64_t ldy, bool accumulate, int segments, int64_t segment,
                        int64_t prefetch_k, Epi epi, bool release) {
  constexpr bool kSilu = std::is_same_v<Epi, SiluOut>;
  constexpr bool kConv = std::is_same_v<Epi, RowsConv>;
  __shared__ float partial[kWarps][2][4][32];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int s = warp % segments;
  const int64_t tile = static_cast<int64_t>(blockIdx.y) * (kWarps / segments) + warp / segments;
  const int64_t col0 = tile * kTileCols;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * (kUpper ? kTileRows : 8);
  const bool upper = kUpper && row0 + 8 < m;  // Rows 8-15 of the tile in use (warp-uniform).
  const uint16_t* wa;
  const uint16_t* wb;
  if constexpr (kSilu) {
    const int64_t j = tile * 8 + g;
    wa = j < epi.width ? ColumnOf(w, j, k) : nullptr;
    wb = j < epi.width ? ColumnOf(w, epi.width + j, k) : nullptr;
  } else {
    wa = col0 + g < n ? ColumnOf(w, col0 + g, k) : nullptr;
    wb = col0 + g + 8 < n ? ColumnOf(w, col0 + g + 8, k) : nullptr;
  }
  const int64_t begin = s * segment;
  const int64_t end = begin + segment < k ? begin + segment : k;
  // The first prefetch_k weights of each of the warp's columns asked into L2 before the wait
  // (the weights are not what earlier kernels write; a prefetch changes no value either way),
  // the quad's four lanes a line in four each.
  if (prefetch_k > 0) {
    const int64_t stop = begin + prefetch_k < end ? begin + prefetch_k : end;
    for (const uint16_t* col : {wa, wb}) {
      if (col == nullptr) continue;
      const char* first = reinterpret_cast<const char*>(col + begin);
      const char* last = reinterpret_cast<const char*>(col + stop);
      const char* line = first - reinterpret_cast<uintptr_t>(first) % 128 + 128 * t;
      for (; line < last; line += 4 * 128) PrefetchL2(line);
    }
  }
  if constexpr (kConv) {
    // The conv's taps and states asked into L2 before the wait (the epilogue reads them after
    // the product; a prefetch changes no value): lane t of quad 0 the lines of rows 2t and
    // 2t + 1 of each set, lane 0 the taps' lines.
    if (g == 0 && col0 < epi.channels) {
      const int hist = epi.kernel - 1;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t row = row0 + 8 * h + 2 * t + e;
          if (row >= m || (h == 1 && !(kUpper && row0 + 8 < m))) continue;
          for (int i = 0; i < hist; ++i) PrefetchL2(epi.state[row] + i * epi.channels + col0);
        }
      }
      if (t == 0) {
        const float* taps = epi.w + col0 * epi.kernel;
        for (int i = 0; i < kTileCols * epi.kernel; i += 32) PrefetchL2(taps + i);
      }
    }
  }
  KernelEntry(release);
  const In* xa = row0 + g < m ? x + (row0 + g) * ldx : nullptr;
  const In* xb = row0 + 8 + g < m ? x + (row0 + 8 + g) * ldx : nullptr;
  float acc[2][4] = {};
  for (int64_t kb = begin; kb < end; kb += kStep * kU) {
    // The weights and first rows' inputs of the kU steps first, then the products (the
    // second rows' inputs, read from L1 or L2, as they are needed: registers for two blocks a
    // multiprocessor).
    uint4 va[kU], vb[kU];
    StepInputs<In> v0[kU];
    StepInputs<In> v1[kEarlyUpper ? kU : 1];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const bool live = kb + u * kStep < end;
      const int64_t i = kb + u * kStep + 8 * t;
      va[u] = LoadWeights8<kVec, kStream>(live ? wa : nullptr, i, k);
      vb[u] = LoadWeights8<kVec, kStream>(live ? wb : nullptr, i, k);
      LoadStepInputs<kVec>(live ? xa : nullptr, i, k, v0[u]);
      if constexpr (kEarlyUpper) LoadStepInputs<kVec>(live && upper ? xb : nullptr, i, k, v1[u]);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (kb + u * kStep >= end) break;
      uint32_t pieces[kPieces][4];
      const int64_t i = kb + u * kStep + 8 * t;
      InputPieces<kPieces>(v0[u], pieces);
      StepProducts<kPieces>(va[u], vb[u], pieces, acc[0]);
      if (upper) {
        if constexpr (kEarlyUpper) {
          InputPieces<kPieces>(v1[u], pieces);
        } else {
          StepInputs<In> late;
          LoadStepInputs<kVec>(xb, i, k, late);
          InputPieces<kPieces>(late, pieces);
        }
        StepProducts<kPieces>(va[u], vb[u], pieces, acc[1]);
      }
    }
  }
  if (segments > 1) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[warp][h][e][lane] = acc[h][e];
    }
    __syncthreads();
    if (s != 0) return;
    for (int j = 1; j < segments; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[h][e] += partial[warp + j][h][e][lane];
      }
    }
  }
  // acc[h][e]: weight column g (+8 for e >= 2), input row 8h + 2t (+1 for odd e); the second
  // set only where it is in use (without kUpper its rows are the next tile's).
  if constexpr (kSilu) {
    const int64_t j = tile * 8 + g;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !upper) break;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t row = row0 + 8 * h + 2 * t + e;
        if (row < m && j < epi.width) {
          const float v = DeviceSilu(acc[h][e]) * acc[h][e + 2];
          epi.act[row * epi.width + j] = v;
          if (epi.rounded != nullptr) epi.rounded[row * epi.width + j] = RoundBf16(v);
        }
      }
    }
  } else if constexpr (kConv) {
    // The conv of this lane's columns (g and g + 8) for each of its rows, one token a row
    // (CausalConvOutChunks' sum: acc += w * x over the taps, the state's rows then the new
    // value): every load first (the taps, then a set of rows' states), then the arithmetic and
    // the stores, so that the loads are one round trip, not one an element. Each (row, column)
    // is this lane's alone: it reads the state it then rewrites.
    const int hist = epi.kernel - 1;
    float taps[2][kConvMaxTaps];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int64_t col = col0 + g + 8 * c;
#pragma unroll
      for (int i = 0; i < kConvMaxTaps; ++i) {
        taps[c][i] = col < epi.channels && i < epi.kernel ? epi.w[col * epi.kernel + i] : 0.0f;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !upper) break;
      float old[4][kConvMaxTaps - 1];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = row0 + 8 * h + 2 * t + (e & 1);
        const int64_t col = col0 + g + (e >= 2 ? 8 : 0);
        const bool live = row < m && col < epi.channels;
#pragma unroll
        for (int i = 0; i < kConvMaxTaps - 1; ++i) {
          old[e][i] = live && i < hist ? epi.state[row][i * epi.channels + col] : 0.0f;
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = row0 + 8 * h + 2 * t + (e & 1);
        const int64_t col = col0 + g + (e >= 2 ? 8 : 0);
        if (row >= m || col >= n) continue;
        const float v = acc[h][e];
        y[row * ldy + col] = v;
        if (col >= epi.channels) continue;
        const float(&tap)[kConvMaxTaps] = taps[e >= 2 ? 1 : 0];
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < kConvMaxTaps - 1; ++i) {
          if (i < hist) sum += tap[i] * old[e][i];
        }
#pragma unroll
        for (int i = 0; i < kConvMaxTaps; ++i) {
          if (i == hist) sum += tap[i] * v;
        }
        epi.out[row][col] = DeviceSilu(sum);
        float* state = epi.state[row];
#pragma unroll
        for (int i = 0; i + 1 < kConvMaxTaps; ++i) {
          if (i + 1 < hist) state[i * epi.channels + col] = old[e][i + 1];
          if (i + 1 == hist) state[i * epi.channels + col] = v;
        }
      }
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !upper) break;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = row0 + 8 * h + 2 * t + (e & 1);
        const int64_t col = col0 + g + (e >= 2 ? 8 : 0);
        if (row < m && col < n) {
          float* out = y + row * ldy + col;
          *out = accumulate ? *out + acc[h][e] : acc[h][e];
        }
      }
    }
  }
}

// 1 when `blocks` blocks of a call of `m` rows fill `multiprocessors` multiprocessors better
// three at a time (variant 1) than two at a time (variant 0), else 0: the share of the last
// wave's places in use, waves of 2 or 3 blocks a multiprocessor. Measured on the H200 (dense
// 9B-like decode shapes): 386 blocks (delta-rule in_proj, 1 row) 0.033 ms in variant 1 against
// 0.037; 256 (MLP down) 0.035 against 0.032. Near ties go to variant 1 for more than 8 rows
// (two tiles of 8 a column group: 16 x 24576 0.092 ms against 0.097) and to variant 0 else.
// Over many waves the last wave's fill matters less than variant 1's fewer loads in flight:
// calls of up to 8 rows whose grids exceed kManyWaves waves at two blocks a multiprocessor take
// variant 0 (the lm head, 1940 blocks: 0.498 / 0.504 ms at 1 / 4 rows against 0.526 / 0.562 in
// variant 1; at 16 rows, 3880 blocks, 0.870 against 0.867, so those keep the rule above). With
// bf16 inputs too (2026-12-04, `cairn_hip_kernel_bench --decode-products`): the dense lm head
// at 1 / 4 rows 0.480 / 0.487 ms in variant 0 against 0.520 / 0.525 in variant 1, the MoE
// model's (151936 x 2048, 1187 blocks) 0.154 / 0.156 against 0.161 / 0.163. (An earlier
// measurement with bf16 inputs had variant 1 the faster, 0.500 against 0.526 ms; the weights'
// prefetch before the wait and the inputs rounded by the kernels that write them came since.)
constexpr int64_t kManyWaves = 4;
int ThreeBlocksFillBetter(int64_t blocks, int64_t m, int multiprocessors) {
  if (multiprocessors <= 0) return 0;
  if (m <= 8 && blocks > kManyWaves * 2 * multiprocessors) return 0;
  const auto fill = [&](int per) {
    const int64_t places = static_cast<int64_t>(per) * multiprocessors;
    return static_cast<double>(blocks) / static_cast<double>(CeilDiv(blocks, places) * places);
  };
  const double two = fill(2), three = fill(3);
  if (three > two + 0.01) return 1;
  return m > 8 && three >= two - 0.01 ? 1 : 0;
}

// Whether a call of 9 to 16 rows takes variant 2's kernel (one tile of 16 rows, the second
// set's inputs loaded with the weights) under variant -1: where that grid of `blocks` blocks
// gives every multiprocessor one and fits one wave at two a multiprocessor, or spans more than
// kManyWaves such waves. Measured on the H200 at 16 rows (variant 2 against the tiles of 8 of
// variant -1): MLP down, 256 blocks, 0.048 ms against 0.054; delta-rule out and attention o
// (256) 0.020 against 0.022; attention q (256) 0.034 against 0.037; the lm head (1940) 0.821
// against 0.849; but MLP gate+up (384, 1.45 waves) 0.098 against 0.092, delta-rule in_proj (386)
// 0.060 against 0.050 and attention k or v (64, half the multiprocessors idle) 0.015 against
// 0.010, which keep tiles of 8.
bool EarlyTileOf16Fills(int64_t blocks, int multiprocessors) {
  if (multiprocessors <= 0) return false;
  const int64_t two = 2 * static_cast<int64_t>(multiprocessors);
  return (blocks >= multiprocessors && blocks <= two) || blocks > kManyWaves * two;
}

// The vector-load kernel MatMulRowsMma picked, with kPieces bf16 pieces an input and streamed
// weight loads or not (kStream).
template <typename In, int kPieces, typename Epi, bool kStream>
void LaunchVectorMatMulRowsMma(dim3 grid, bool early, bool upper, int variant, const In* x,
                               int64_t m, int64_t k, int64_t ldx, const Parts& w, int64_t n,
                               float* y, int64_t ldy, bool accumulate, int segments,
                               int64_t segment, int64_t prefetch_k, const Epi& epi,
                               hipStream_t stream) {
  if (early) {
    LaunchKernel(MatMulRowsMmaKernel<In, kPieces, true, true, 3, 2, true, Epi, kStream>, grid,
                 kThreads, 0, stream, x, m, k, ldx, w, n, y, ldy, accumulate, segments, segment,
                 prefetch_k, epi, EarlyRelease(kReleaseProducts));
  } else if (!upper && variant == 1) {
    LaunchKernel(MatMulRowsMmaKernel<In, kPieces, true, false, 3, 3, false, Epi, kStream>, grid,
                 kThreads, 0, stream, x, m, k, ldx, w, n, y, ldy, accumulate, segments, segment,
                 prefetch_k, epi, EarlyRelease(kReleaseProducts));
  } else if (upper) {
    LaunchKernel(MatMulRowsMmaKernel<In, kPieces, true, true, kUnroll, 2, false, Epi, kStream>,
                 grid, kThreads, 0, stream, x, m, k, ldx, w, n, y, ldy, accumulate, segments,
                 segment, prefetch_k, epi, EarlyRelease(kReleaseProducts));
  } else {
    LaunchKernel(MatMulRowsMmaKernel<In, kPieces, true, false, kUnroll, 2, false, Epi, kStream>,
                 grid, kThreads, 0, stream, x, m, k, ldx, w, n, y, ldy, accumulate, segments,
                 segment, prefetch_k, epi, EarlyRelease(kReleaseProducts));
  }
}

// The kernel MatMulRowsMma picked, with kPieces bf16 pieces an input; the weights' loads
// streamed where `streamed` (RowWeights::streamed; the scalar path's loads never are).
template <typename In, int kPieces, typename Epi = NoEpilogue>
void LaunchMatMulRowsMma(dim3 grid, bool early, bool vec, bool upper, int variant, bool streamed,
                         const In* x, int64_t m, int64_t k, int64_t ldx, const Parts& w, int64_t n,
                         float* y, int64_t ldy, bool accumulate, int segments, int64_t segment,
                         int64_t prefetch_k, const Epi& epi, hipStream_t stream) {
  // The epilogues run only with vector loads (MatMulRowsMmaSiluMul and MatMulRowsMmaConv
  // check); `early` implies them.
  if (vec && streamed) {
    LaunchVectorMatMulRowsMma<In, kPieces, Epi, true>(grid, early, upper, variant, x, m, k, ldx, w,
                                                      n, y, ldy, accumulate, segments, segment,
                                                      prefetch_k, epi, stream);
  } else if (vec) {
    LaunchVectorMatMulRowsMma<In, kPieces, Epi, false>(grid, early, upper, variant, x, m, k, ldx, w,
                                                       n, y, ldy, accumulate, segments, segment,
                                                       prefetch_k, epi, stream);
  } else if constexpr (std::is_same_v<Epi, NoEpilogue>) {
    if (upper) {
      LaunchKernel(MatMulRowsMmaKernel<In, kPieces, false, true>, grid, kThreads, 0, stream, x, m,
                   k, ldx, w, n, y, ldy, accumulate, segments, segment, prefetch_k, epi,
                   EarlyRelease(kReleaseProducts));
    } else {
      LaunchKernel(MatMulRowsMmaKernel<In, kPieces, false, false>, grid, kThreads, 0, stream, x, m,
                   k, ldx, w, n, y, ldy, accumulate, segments, segment, prefetch_k, epi,
                   EarlyRelease(kReleaseProducts));
    }
  }
}

// The staged inputs' row stride: whole 16-byte groups, so that every row's loads are vectors.
int64_t StagedStride(int64_t k) { return (k + 7) / 8 * 8; }

// out row r (stride StagedStride(k)) = x row r rounded to bf16 by PackBf16 (the rounding the
// product's one-piece split makes), zeros from k to the stride: thread e of the grid-stride loop
// writes the pair 2e % stride of row 2e / stride.
__global__ void RoundInputsKernel(const float* x, int64_t m, int64_t k, int64_t ldx,
                                  uint32_t* out, int64_t stride) {
  KernelEntry();
  const int64_t pairs = stride / 2;
  const int64_t n = m * pairs;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / pairs;
    const int64_t c = 2 * (e % pairs);
    const float* row = x + r * ldx;
    out[e] = PackBf16(c < k ? row[c] : 0.0f, c + 1 < k ? row[c + 1] : 0.0f);
  }
}

}  // namespace

bool MatMulRowsMmaSupported() { return true; }

int64_t MatMulRowsMmaStagingBytes(int64_t m, int64_t k) {
  return m * StagedStride(k) * static_cast<int64_t>(sizeof(uint16_t));
}

namespace {

// MatMulRowsMma over fp32 inputs `x` (rows ldx apart), or, where `rounded` is not null, over
// inputs already rounded to bf16 (rows ld_rounded apart; bf16_inputs then holds). With `conv`,
// MatMulRowsMmaConv's conv after the product. With `silu`,
// MatMulRowsMmaSiluMul's activation instead of y.
hipError_t RunMatMulRowsMma(const float* x, const uint16_t* rounded, int64_t m, int64_t k,
                            int64_t ldx, int64_t ld_rounded, const RowWeights& rw, float* y,
                            int64_t ldy, bool accumulate, bool bf16_inputs, bool tiles_of_8,
                            int variant, int multiprocessors, int64_t segment_n, uint16_t* staging,
                            int64_t prefetch_k, const SiluOut* silu, const RowsConv* conv,
                            hipStream_t stream) {
  if (rw.count < 1 || rw.count > kMaxParts || !rw.bf16 || variant < -1 || variant > 2 ||
      reinterpret_cast<uintptr_t>(staging) % 16 != 0 || (rounded != nullptr && !bf16_inputs)) {
    return hipErrorInvalidValue;
  }
  if (silu != nullptr && (!bf16_inputs || staging != nullptr || accumulate || silu->width <= 0 ||
                          silu->width % 8 != 0 || segment_n != 2 * silu->width)) {
    return hipErrorInvalidValue;
  }
  if (conv != nullptr &&
      (!bf16_inputs || staging != nullptr || accumulate || silu != nullptr ||
       m > kMatMulRowsConvMaxRows || conv->kernel < 1 || conv->kernel > kConvMaxTaps ||
       conv->channels < 0 || conv->w == nullptr)) {
    return hipErrorInvalidValue;
  }
  const bool staged = rounded == nullptr && bf16_inputs && staging != nullptr;
  Parts w{};
  int64_t n = 0;
  // Staged inputs are 16-byte rows of whole groups of 8 (StagedStride); their loads are vectors
  // where the weights' are, as are rounded rows whose stride and start allow them.
  bool vec = k % 8 == 0 &&
             (staged ||
              (rounded != nullptr
                   ? ld_rounded % 8 == 0 && reinterpret_cast<uintptr_t>(rounded) % 16 == 0
                   : ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0));
  for (int p = 0; p < rw.count; ++p) {
    w.data[p] = static_cast<const uint16_t*>(rw.data[p]);
    n += rw.rows[p];
    w.end[p] = n;
    vec = vec && reinterpret_cast<uintptr_t>(rw.data[p]) % 16 == 0;
  }
  w.count = rw.count;
  if (silu != nullptr && (!vec || n != 2 * silu->width)) return hipErrorInvalidValue;
  if (conv != nullptr && (!vec || conv->channels > n)) return hipErrorInvalidValue;
  if (m == 0 || n == 0) return hipSuccess;
  // The segments depend on the whole matrix's n and on k only, never on m or on the range.
  const int64_t tiles = CeilDiv(n, kTileCols);
  const mma_rows::Segments cut = mma_rows::SegmentsFor(segment_n > n ? segment_n : n, k);
  const int segments = cut.count;
  const int64_t segment = cut.length;
  const int64_t groups = CeilDiv(tiles, kWarps / segments);
  // Tiles of 16 rows use their second set of 8 (kUpper) where the call has more than 8 rows;
  // with `tiles_of_8`, calls of 9 to 16 rows (decode batches) run tiles of 8 instead, except in
  // variant 2 (one tile of 16, both sets' inputs loaded early; other calls as variant -1) and,
  // under variant -1, where that tile's grid fills the device (EarlyTileOf16Fills).
  const bool batch_of_16 = vec && m > 8 && m <= kTileRows;
  const bool early =
      batch_of_16 && (variant == 2 || (variant == -1 && tiles_of_8 &&
                                       EarlyTileOf16Fills(groups, multiprocessors)));
  if (variant == 2 && !early) variant = -1;
  const bool upper = m > 8 && (early || !(tiles_of_8 && m <= kTileRows));
  const int64_t row_tiles = CeilDiv(m, upper ? kTileRows : 8);
  if (groups > 65535 || row_tiles > 0x7fffffff) return hipErrorInvalidValue;
  const dim3 grid(static_cast<unsigned int>(row_tiles), static_cast<unsigned int>(groups));
  if (variant == -1) {
    variant = ThreeBlocksFillBetter(row_tiles * groups, m, multiprocessors);
  }
  if (silu != nullptr && rounded != nullptr) {
    LaunchMatMulRowsMma<uint16_t, 1, SiluOut>(grid, early, vec, upper, variant, rw.streamed,
                                              rounded, m, k, ld_rounded, w, n, y, ldy, false,
                                              segments, segment, prefetch_k, *silu, stream);
  } else if (silu != nullptr) {
    LaunchMatMulRowsMma<float, 1, SiluOut>(grid, early, vec, upper, variant, rw.streamed, x, m, k,
                                           ldx, w, n, y, ldy, false, segments, segment, prefetch_k,
                                           *silu, stream);
  } else if (conv != nullptr && rounded != nullptr) {
    LaunchMatMulRowsMma<uint16_t, 1, RowsConv>(grid, early, vec, upper, variant, rw.streamed,
                                               rounded, m, k, ld_rounded, w, n, y, ldy, false,
                                               segments, segment, prefetch_k, *conv, stream);
  } else if (conv != nullptr) {
    LaunchMatMulRowsMma<float, 1, RowsConv>(grid, early, vec, upper, variant, rw.streamed, x, m, k,
                                            ldx, w, n, y, ldy, false, segments, segment, prefetch_k,
                                            *conv, stream);
  } else if (rounded != nullptr) {
    LaunchMatMulRowsMma<uint16_t, 1>(grid, early, vec, upper, variant, rw.streamed, rounded, m, k,
                                     ld_rounded, w, n, y, ldy, accumulate, segments, segment,
                                     prefetch_k, {}, stream);
  } else if (staged) {
    const int64_t stride = StagedStride(k);
    constexpr int kRoundThreads = 256;
    LaunchKernel(RoundInputsKernel, GridFor(m * stride / 2, kRoundThreads), kRoundThreads, 0,
                 stream, x, m, k, ldx, reinterpret_cast<uint32_t*>(staging), stride);
    const hipError_t e = hipGetLastError();
    if (e != hipSuccess) return e;
    LaunchMatMulRowsMma<uint16_t, 1>(grid, early, vec, upper, variant, rw.streamed, staging, m, k,
                                     stride, w, n, y, ldy, accumulate, segments, segment,
                                     prefetch_k, {}, stream);
  } else if (bf16_inputs) {
    LaunchMatMulRowsMma<float, 1>(grid, early, vec, upper, variant, rw.streamed, x, m, k, ldx, w, n,
                                  y, ldy, accumulate, segments, segment, prefetch_k, {}, stream);
  } else {
    LaunchMatMulRowsMma<float, 3>(grid, early, vec, upper, variant, rw.streamed, x, m, k, ldx, w, n,
                                  y, ldy, accumulate, segments, segment, prefetch_k, {}, stream);
  }
  return hipGetLastError();
}

}  // namespace

hipError_t MatMulRowsMma(const float* x, int64_t m, int64_t k, int64_t ldx, const RowWeights& rw,
                         float* y, int64_t ldy, bool accumulate, bool bf16_inputs, bool tiles_of_8,
                         int variant, int multiprocessors, int64_t segment_n, uint16_t* staging,
                         int64_t prefetch_k, hipStream_t stream) {
  return RunMatMulRowsMma(x, nullptr, m, k, ldx, 0, rw, y, ldy, accumulate, bf16_inputs, tiles_of_8,
                          variant, multiprocessors, segment_n, staging, prefetch_k, nullptr,
                          nullptr, stream);
}

hipError_t MatMulRowsMmaRounded(const uint16_t* xb, int64_t m, int64_t k, int64_t ldxb,
                                const RowWeights& rw, float* y, int64_t ldy, bool accumulate,
                                bool tiles_of_8, int variant, int multiprocessors,
                                int64_t segment_n, int64_t prefetch_k, hipStream_t stream) {
  if (xb == nullptr || ldxb < k) return hipErrorInvalidValue;
  return RunMatMulRowsMma(nullptr, xb, m, k, 0, ldxb, rw, y, ldy, accumulate, true, tiles_of_8,
                          variant, multiprocessors, segment_n, nullptr, prefetch_k, nullptr,
                          nullptr, stream);
}

hipError_t MatMulRowsMmaSiluMul(const float* x, const uint16_t* xb, int64_t m, int64_t k,
                                int64_t ldx, const RowWeights& rw, int64_t width, float* act,
                                uint16_t* act_rounded, bool tiles_of_8, int variant,
                                int multiprocessors, int64_t prefetch_k, hipStream_t stream) {
  if ((x == nullptr) == (xb == nullptr) || act == nullptr || ldx < k) return hipErrorInvalidValue;
  const SiluOut silu{act, act_rounded, width};
  return RunMatMulRowsMma(x, xb, m, k, ldx, ldx, rw, nullptr, 0, false, true, tiles_of_8, variant,
                          multiprocessors, 2 * width, nullptr, prefetch_k, &silu, nullptr, stream);
}

hipError_t MatMulRowsMmaConv(const float* x, const uint16_t* xb, int64_t m, int64_t k, int64_t ldx,
                             const RowWeights& rw, float* y, int64_t ldy, const RowsConv& conv,
                             bool tiles_of_8, int variant, int multiprocessors, int64_t segment_n,
                             int64_t prefetch_k, hipStream_t stream) {
  if ((x == nullptr) == (xb == nullptr) || y == nullptr || ldx < k) return hipErrorInvalidValue;
  for (int64_t r = 0; r < m && r < kMatMulRowsConvMaxRows; ++r) {
    if (conv.channels > 0 &&
        (conv.out[r] == nullptr || (conv.kernel > 1 && conv.state[r] == nullptr))) {
      return hipErrorInvalidValue;
    }
  }
  return RunMatMulRowsMma(x, xb, m, k, ldx, ldx, rw, y, ldy, false, true, tiles_of_8, variant,
                          multiprocessors, segment_n, nullptr, prefetch_k, nullptr, &conv, stream);
}

#endif  // __HIP_PLATFORM_AMD__

}  // namespace cairn::infer::hip
