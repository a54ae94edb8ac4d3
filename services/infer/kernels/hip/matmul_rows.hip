// MatMulRows: the batch-invariant product for decode. Each output element is one reduction over
// k whose order depends on k alone: thread t of a block takes the 4-element groups t, t + T,
// t + 2T, ... (T threads) and accumulates them in order with fused multiply-adds, then the T
// partial sums meet in a fixed binary tree. Rows and columns only choose which block computes an
// element, never how, so a row's bits do not depend on m (or on n).

#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {
namespace {

constexpr int kThreads = 128;  // T above: a power of two.
constexpr int kCols = 8;       // Output columns (weight rows) per block.
constexpr int kMaxRows = 8;    // Input rows per block at most.

// Loads x[i .. i+3] (zeros past k). kVec: 16-byte loads (k % 4 == 0, aligned rows); the scalar
// path loads the same values, so both paths give the same bits.
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

template <int kRows, bool kVec>
__global__ void __launch_bounds__(kThreads)
    MatMulRowsKernel(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                     float* y, int64_t ldy, bool accumulate) {
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

template <int kRows>
hipError_t LaunchRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                      float* y, int64_t ldy, bool accumulate, hipStream_t stream) {
  // Row tiles vary fastest, so the blocks reading one slice of w run together and all but the
  // first find it in L2.
  const dim3 grid(static_cast<unsigned int>(CeilDiv(m, kRows)),
                  static_cast<unsigned int>(CeilDiv(n, kCols)));
  const bool vec = k % 4 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(w) % 16 == 0;
  if (vec) {
    MatMulRowsKernel<kRows, true>
        <<<grid, kThreads, 0, stream>>>(x, m, k, ldx, w, n, y, ldy, accumulate);
  } else {
    MatMulRowsKernel<kRows, false>
        <<<grid, kThreads, 0, stream>>>(x, m, k, ldx, w, n, y, ldy, accumulate);
  }
  return hipGetLastError();
}

}  // namespace

int64_t MatMulRowsMaxColumns() { return int64_t{65535} * kCols; }

hipError_t MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                      float* y, int64_t ldy, bool accumulate, hipStream_t stream) {
  if (m == 0 || n == 0) return hipSuccess;
  // The row tile only decides how many rows share a block's weight loads.
  if (m >= kMaxRows) return LaunchRows<kMaxRows>(x, m, k, ldx, w, n, y, ldy, accumulate, stream);
  if (m >= 4) return LaunchRows<4>(x, m, k, ldx, w, n, y, ldy, accumulate, stream);
  if (m >= 2) return LaunchRows<2>(x, m, k, ldx, w, n, y, ldy, accumulate, stream);
  return LaunchRows<1>(x, m, k, ldx, w, n, y, ldy, accumulate, stream);
}

}  // namespace cairn::infer::hip
