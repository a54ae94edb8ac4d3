// MatMulRows: the batch-invariant product for decode. Each output element is one reduction over
// k whose order depends on k alone: thread t of a block takes the 4-element groups t, t + T,
// t + 2T, ... (T threads) and accumulates them in order with fused multiply-adds, then the T
// partial sums meet in a fixed binary tree. Rows and columns only choose which block computes an
// element, never how, so a row's bits do not depend on m (or on n).
//
// Two kernels compute that same order. MatMulRowsKernel (the default): a block of T threads
// takes up to 8 rows and 8 columns of one weight part, one tree per output in shared memory.
// MatMulRowsMultiKernel (multi_row, calls of 2 or more rows): up to 16 rows share each weight
// load, the next weight group is loaded while the current one is multiplied, two column groups
// of T threads share a block (and the input rows in L1), every part of the matrix takes the one
// launch, and the tree is cut into subtrees that many threads sum at once (see ReduceTree).
// Both give the same bits (tested), so a row's bits stay independent of m and of the kernel;
// on the H200 the multi-row kernel was measured slower (1.2-1.3 x at 16 rows), so it is off
// by default.

#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {
namespace {

constexpr int kThreads = 128;  // T above: a power of two.
constexpr int kCols = 8;       // Output columns (weight rows) per block.
constexpr int kMaxRows = 8;    // Input rows per block at most.

// Loads x[i .. i+3] (zeros past k) as fp32. kVec: one 16-byte load (fp32) or 8-byte load (bf16)
// (k % 4 == 0, aligned rows); the scalar path loads the same values, so both paths give the
// same bits. bf16 values widen exactly, so a product over bf16 weights has the bits of the same
// product over their fp32 widening.
template <bool kVec>
__device__ inline void Load4(const float* p, int64_t i, int64_t k, float out[4]) {
  if constexpr (kVec) {
    const float4 v = *reinterpret_cast<const float4*>(p + i);
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) out[e] = i + e < k ? p[i + e] : 0.0f;
  }
}
template <bool kVec>
__device__ inline void Load4(const uint16_t* p, int64_t i, int64_t k, float out[4]) {
  if constexpr (kVec) {
    const uint2 v = *reinterpret_cast<const uint2*>(p + i);
    out[0] = __uint_as_float(v.x << 16);
    out[1] = __uint_as_float(v.x & 0xffff0000u);
    out[2] = __uint_as_float(v.y << 16);
    out[3] = __uint_as_float(v.y & 0xffff0000u);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) out[e] = i + e < k ? Bf16ToFloat(p[i + e]) : 0.0f;
  }
}

// A launch's weight matrix: its rows (the output columns) in up to kMaxParts parts, part p
// holding columns [end[p - 1], end[p]) (end[-1] = 0) contiguous with row stride k, so the
// parts of one WeightMatrix take one launch.
constexpr int kMaxParts = 4;
template <typename W>
struct WeightRows {
  const W* data[kMaxParts];
  int64_t end[kMaxParts];
  int count;
};

// Row `col` of w (k values), or null past its last part.
template <typename W>
__device__ inline const W* RowOf(const WeightRows<W>& w, int64_t col, int64_t k) {
  int64_t start = 0;
#pragma unroll
  for (int p = 0; p < kMaxParts; ++p) {
    if (p < w.count && col < w.end[p]) return w.data[p] + (col - start) * k;
    if (p < w.count) start = w.end[p];
  }
  return nullptr;
}

// Loads weight group i (4 values) of each row in `rows` (zeros for a null row).
template <int kCols, bool kVec, typename W>
__device__ inline void LoadWeights(const W* const (&rows)[kCols], int64_t i, int64_t k,
                                   float (&out)[kCols][4]) {
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    if (rows[c] != nullptr) {
      Load4<kVec>(rows[c], i, k, out[c]);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) out[c][e] = 0.0f;
    }
  }
}

template <int kRows, bool kVec, typename W>
__global__ void __launch_bounds__(kThreads)
    MatMulRowsKernel(const float* x, int64_t m, int64_t k, int64_t ldx, const W* w, int64_t n,
                     float* y, int64_t ldy, bool accumulate) {
  KernelEntry();
  __shared__ float partial[kRows * kCols][kThreads];
  const int t = threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kCols;
  float acc[kRows][kCols];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }
  const int64_t groups = (k + 3) / 4;
  for (int64_t g = t; g < groups; g += kThreads) {
    const int64_t i = g * 4;
    float wv[kCols][4];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      if (j0 + c < n) {
        Load4<kVec>(w + (j0 + c) * k, i, k, wv[c]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) wv[c][e] = 0.0f;
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r0 + r >= m) continue;
      float xv[4];
      Load4<kVec>(x + (r0 + r) * ldx, i, k, xv);
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[r][c] = fmaf(xv[e], wv[c][e], acc[r][c]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) partial[r * kCols + c][t] = acc[r][c];
  }
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (t < s) {
#pragma unroll
      for (int v = 0; v < kRows * kCols; ++v) partial[v][t] += partial[v][t + s];
    }
    __syncthreads();
  }
  if (t < kRows * kCols) {
    const int64_t row = r0 + t / kCols;
    const int64_t col = j0 + t % kCols;
    if (row < m && col < n) {
      const float d = partial[t][0];
      float* out = y + row * ldy + col;
      *out = accumulate ? *out + d : d;
    }
  }
}

// The multi-row kernel. kRows input rows, kCols output columns per thread, kGroups column groups
// of kThreads threads per block: the threads of a group are the T "lanes" of the order above.
constexpr int kMultiGroups = 2;
constexpr int kMultiThreads = kThreads * kMultiGroups;
constexpr int kTreePad = kThreads + 1;  // Row pitch of the partial sums: no bank conflicts.

template <int kOutputs>
constexpr size_t MultiSharedBytes() {
  return sizeof(float) * kMultiGroups * (kOutputs * kTreePad + kThreads);
}

// Sums values[0 .. kCount) as the fixed tree's levels: values[j] += values[j + h] for h =
// kCount / 2, ..., 1. Leaves j are the tree's leaves q + p * j for one residue q modulo a
// power of two p, so the result is the tree's node q at the level that has p nodes (every level
// above p pairs leaves of one residue).
// (A template per level, so every index is a constant and the values stay in registers.)
template <int kHalf, int kCount>
__device__ inline void ReduceLevels(float (&values)[kCount]) {
  if constexpr (kHalf > 0) {
#pragma unroll
    for (int j = 0; j < kHalf; ++j) values[j] += values[j + kHalf];
    ReduceLevels<kHalf / 2>(values);
  }
}
template <int kCount>
__device__ inline float ReduceTree(float (&values)[kCount]) {
  ReduceLevels<kCount / 2>(values);
  return values[0];
}

template <int kRows, int kCols, bool kVec, typename W>
__global__ void __launch_bounds__(kMultiThreads, 2)
    MatMulRowsMultiKernel(const float* x, int64_t m, int64_t k, int64_t ldx, const WeightRows<W> w,
                          int64_t n, float* y, int64_t ldy, bool accumulate) {
  KernelEntry();
  constexpr int kOutputs = kRows * kCols;
  static_assert(kThreads % kOutputs == 0, "outputs must divide the lanes");
  constexpr int kResidues = kThreads / kOutputs;  // Subtrees per output.
  extern __shared__ float shared[];
  const int lane = threadIdx.x % kThreads;
  const int group = threadIdx.x / kThreads;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t j0 = (static_cast<int64_t>(blockIdx.y) * kMultiGroups + group) * kCols;
  const int64_t rows = m - r0 < kRows ? m - r0 : kRows;
  const W* wrows[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) wrows[c] = j0 + c < n ? RowOf(w, j0 + c, k) : nullptr;
  float acc[kRows][kCols];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }
  // Lane t's groups t, t + T, ... in order, each as in MatMulRowsKernel; the next group's
  // weights are in flight while the current one is multiplied.
  const int64_t groups = (k + 3) / 4;
  float wv[kCols][4];
  if (lane < groups) LoadWeights<kCols, kVec>(wrows, int64_t{lane} * 4, k, wv);
  for (int64_t g = lane; g < groups; g += kThreads) {
    float wn[kCols][4];
    if (g + kThreads < groups) {
      LoadWeights<kCols, kVec>(wrows, (g + kThreads) * 4, k, wn);
    } else {
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
#pragma unroll
        for (int e = 0; e < 4; ++e) wn[c][e] = 0.0f;
      }
    }
    const int64_t i = g * 4;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows) continue;
      float xv[4];
      Load4<kVec>(x + (r0 + r) * ldx, i, k, xv);
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[r][c] = fmaf(xv[e], wv[c][e], acc[r][c]);
      }
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
#pragma unroll
      for (int e = 0; e < 4; ++e) wv[c][e] = wn[c][e];
    }
  }
  // The tree: output o's lane partials at partial[o * kTreePad + lane]. Lane (o, q) sums the
  // leaves q, q + kResidues, ... of output o (the tree's node q at the level of kResidues
  // nodes), then one lane per output sums those nodes in the tree's last levels.
  float* partial = shared + group * (kOutputs * kTreePad + kThreads);
  float* nodes = partial + kOutputs * kTreePad;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) partial[(r * kCols + c) * kTreePad + lane] = acc[r][c];
  }
  __syncthreads();
  {
    const int o = lane % kOutputs;
    const int q = lane / kOutputs;
    float leaves[kOutputs];
#pragma unroll
    for (int j = 0; j < kOutputs; ++j) leaves[j] = partial[o * kTreePad + q + kResidues * j];
    nodes[o * kResidues + q] = ReduceTree(leaves);
  }
  __syncthreads();
  if (lane < kOutputs) {
    float top[kResidues];
#pragma unroll
    for (int j = 0; j < kResidues; ++j) top[j] = nodes[lane * kResidues + j];
    const float d = ReduceTree(top);
    const int64_t row = r0 + lane / kCols;
    const int64_t col = j0 + lane % kCols;
    if (row < m && col < n) {
      float* out = y + row * ldy + col;
      *out = accumulate ? *out + d : d;
    }
  }
}

template <int kRows, int kCols, typename W>
hipError_t LaunchMultiRows(const float* x, int64_t m, int64_t k, int64_t ldx,
                           const WeightRows<W>& w, int64_t n, float* y, int64_t ldy,
                           bool accumulate, bool vec, hipStream_t stream) {
  const dim3 grid(static_cast<unsigned int>(CeilDiv(m, kRows)),
                  static_cast<unsigned int>(CeilDiv(n, kCols * kMultiGroups)));
  constexpr size_t bytes = MultiSharedBytes<kRows * kCols>();
  auto* kernel = vec ? MatMulRowsMultiKernel<kRows, kCols, true, W>
                     : MatMulRowsMultiKernel<kRows, kCols, false, W>;
  if (bytes > 48 * 1024) {
    const hipError_t e = AllowSharedBytes(kernel, bytes);
    if (e != hipSuccess) return e;
  }
  // clang-format off
  LaunchKernel(kernel, grid, kMultiThreads, bytes, stream, x, m, k, ldx, w, n, y, ldy, accumulate);
  // clang-format on
  return hipGetLastError();
}

template <int kRows, typename W>
hipError_t LaunchRows(const float* x, int64_t m, int64_t k, int64_t ldx, const W* w, int64_t n,
                      float* y, int64_t ldy, bool accumulate, hipStream_t stream) {
  // Row tiles vary fastest, so the blocks reading one slice of w run together and all but the
  // first find it in L2.
  const dim3 grid(static_cast<unsigned int>(CeilDiv(m, kRows)),
                  static_cast<unsigned int>(CeilDiv(n, kCols)));
  const bool vec = k % 4 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(w) % (4 * sizeof(W)) == 0;
  if (vec) {
    LaunchKernel(MatMulRowsKernel<kRows, true, W>, grid, kThreads, 0, stream, x, m, k, ldx, w, n, y,
                 ldy, accumulate);
  } else {
    LaunchKernel(MatMulRowsKernel<kRows, false, W>, grid, kThreads, 0, stream, x, m, k, ldx, w, n,
                 y, ldy, accumulate);
  }
  return hipGetLastError();
}

template <typename W>
hipError_t LaunchAnyRows(const float* x, int64_t m, int64_t k, int64_t ldx, const RowWeights& rw,
                         float* y, int64_t ldy, bool accumulate, bool multi_row,
                         hipStream_t stream) {
  if (rw.count < 1 || rw.count > kMaxParts) return hipErrorInvalidValue;
  WeightRows<W> w{};
  int64_t n = 0;
  // The multi-row kernel's 16-byte (fp32) or 8-byte (bf16) loads where every part is aligned
  // for them.
  bool vec = k % 4 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  for (int p = 0; p < rw.count; ++p) {
    w.data[p] = static_cast<const W*>(rw.data[p]);
    n += rw.rows[p];
    w.end[p] = n;
    vec = vec && reinterpret_cast<uintptr_t>(rw.data[p]) % (4 * sizeof(W)) == 0;
  }
  w.count = rw.count;
  if (m == 0 || n == 0) return hipSuccess;
  if (multi_row && m >= 2) {
    // Register budget (two blocks of 256 threads per multiprocessor, at most 128 registers a
    // thread, no spills): rows x columns <= 64 and at most 4 columns from 3 rows on.
    if (m >= 9) return LaunchMultiRows<16, 4>(x, m, k, ldx, w, n, y, ldy, accumulate, vec, stream);
    if (m >= 5) return LaunchMultiRows<8, 4>(x, m, k, ldx, w, n, y, ldy, accumulate, vec, stream);
    if (m >= 3) return LaunchMultiRows<4, 4>(x, m, k, ldx, w, n, y, ldy, accumulate, vec, stream);
    return LaunchMultiRows<2, 8>(x, m, k, ldx, w, n, y, ldy, accumulate, vec, stream);
  }
  // The one-row kernel: a launch per part. The row tile only decides how many rows share a
  // block's weight loads.
  for (int p = 0; p < rw.count; ++p) {
    const W* part = w.data[p];
    const int64_t rows = rw.rows[p];
    float* out = y + (p == 0 ? 0 : w.end[p - 1]);
    hipError_t e = hipSuccess;
    if (rows == 0) continue;
    if (m >= kMaxRows) {
      e = LaunchRows<kMaxRows>(x, m, k, ldx, part, rows, out, ldy, accumulate, stream);
    } else if (m >= 4) {
      e = LaunchRows<4>(x, m, k, ldx, part, rows, out, ldy, accumulate, stream);
    } else if (m >= 2) {
      e = LaunchRows<2>(x, m, k, ldx, part, rows, out, ldy, accumulate, stream);
    } else {
      e = LaunchRows<1>(x, m, k, ldx, part, rows, out, ldy, accumulate, stream);
    }
    if (e != hipSuccess) return e;
  }
  return hipSuccess;
}

// out row r (stride ld_out) = bf16(x row r), k values per row.
__global__ void RoundRowsToBf16Kernel(const float* x, int64_t m, int64_t k, int64_t ldx,
                                      uint16_t* out, int64_t ld_out) {
  KernelEntry();
  const int64_t n = m * k;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / k;
    const int64_t c = e % k;
    out[r * ld_out + c] = FloatToBf16(x[r * ldx + c]);
  }
}

// RoundRowsToBf16Kernel over rows of k % 4 == 0 values with 16-byte loads and 8-byte stores
// (strides and pointers aligned to them): blocks of grid.x over a row's groups of 4, grid.y
// over rows. The same rounding per element.
__global__ void RoundRowsToBf16x4Kernel(const float* x, int64_t m, int64_t groups, int64_t ldx,
                                        uint16_t* out, int64_t ld_out) {
  KernelEntry();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= groups) return;
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    const float4 v = reinterpret_cast<const float4*>(x + r * ldx)[c];
    uint2 packed;
    packed.x = static_cast<uint32_t>(FloatToBf16(v.x)) |
               (static_cast<uint32_t>(FloatToBf16(v.y)) << 16);
    packed.y = static_cast<uint32_t>(FloatToBf16(v.z)) |
               (static_cast<uint32_t>(FloatToBf16(v.w)) << 16);
    reinterpret_cast<uint2*>(out + r * ld_out)[c] = packed;
  }
}

__global__ void WidenBf16Kernel(const uint16_t* in, int64_t n, float* out) {
  KernelEntry();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[e] = Bf16ToFloat(in[e]);
  }
}

constexpr int kConvertThreads = 256;

}  // namespace

int64_t MatMulRowsMaxColumns() { return int64_t{65535} * kCols; }

hipError_t MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                      float* y, int64_t ldy, bool accumulate, bool multi_row, hipStream_t stream) {
  const RowWeights one{{w}, {n}, 1, false};
  return LaunchAnyRows<float>(x, m, k, ldx, one, y, ldy, accumulate, multi_row, stream);
}

hipError_t MatMulRowsParts(const float* x, int64_t m, int64_t k, int64_t ldx, const RowWeights& w,
                           float* y, int64_t ldy, bool accumulate, bool multi_row,
                           hipStream_t stream) {
  return w.bf16 ? LaunchAnyRows<uint16_t>(x, m, k, ldx, w, y, ldy, accumulate, multi_row, stream)
                : LaunchAnyRows<float>(x, m, k, ldx, w, y, ldy, accumulate, multi_row, stream);
}

hipError_t RoundRowsToBf16(const float* x, int64_t m, int64_t k, int64_t ldx, uint16_t* out,
                           int64_t ld_out, hipStream_t stream) {
  if (m == 0 || k == 0) return hipSuccess;
  if (k % 4 == 0 && ldx % 4 == 0 && ld_out % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(out) % 8 == 0) {
    const int64_t groups = k / 4;
    const dim3 grid(static_cast<unsigned int>(CeilDiv(groups, kConvertThreads)),
                    static_cast<unsigned int>(m < 65535 ? m : 65535));
    LaunchKernel(RoundRowsToBf16x4Kernel, grid, kConvertThreads, 0, stream, x, m, groups, ldx, out,
                 ld_out);
    return hipGetLastError();
  }
  LaunchKernel(RoundRowsToBf16Kernel, GridFor(m * k, kConvertThreads), kConvertThreads, 0, stream,
               x, m, k, ldx, out, ld_out);
  return hipGetLastError();
}

hipError_t WidenBf16(const uint16_t* in, int64_t n, float* out, hipStream_t stream) {
  if (n == 0) return hipSuccess;
  LaunchKernel(WidenBf16Kernel, GridFor(n, kConvertThreads), kConvertThreads, 0, stream, in, n,
               out);
  return hipGetLastError();
}

}  // namespace cairn::infer::hip
