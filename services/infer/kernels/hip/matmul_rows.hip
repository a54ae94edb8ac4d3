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

template <int kRows, bool kVec, typename W>
__global__ void __launch_bounds__(kThreads)
    MatMulRowsKernel(const float* x, int64_t m, int64_t k, int64_t ldx, const W* w, int64_t n,
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
    MatMulRowsKernel<kRows, true>
        <<<grid, kThreads, 0, stream>>>(x, m, k, ldx, w, n, y, ldy, accumulate);
  } else {
    MatMulRowsKernel<kRows, false>
        <<<grid, kThreads, 0, stream>>>(x, m, k, ldx, w, n, y, ldy, accumulate);
  }
  return hipGetLastError();
}

template <typename W>
hipError_t LaunchAnyRows(const float* x, int64_t m, int64_t k, int64_t ldx, const W* w, int64_t n,
                         float* y, int64_t ldy, bool accumulate, hipStream_t stream) {
  if (m == 0 || n == 0) return hipSuccess;
  // The row tile only decides how many rows share a block's weight loads.
  if (m >= kMaxRows) return LaunchRows<kMaxRows>(x, m, k, ldx, w, n, y, ldy, accumulate, stream);
  if (m >= 4) return LaunchRows<4>(x, m, k, ldx, w, n, y, ldy, accumulate, stream);
  if (m >= 2) return LaunchRows<2>(x, m, k, ldx, w, n, y, ldy, accumulate, stream);
  return LaunchRows<1>(x, m, k, ldx, w, n, y, ldy, accumulate, stream);
}

// out row r (stride ld_out) = bf16(x row r), k values per row.
__global__ void RoundRowsToBf16Kernel(const float* x, int64_t m, int64_t k, int64_t ldx,
                                      uint16_t* out, int64_t ld_out) {
  const int64_t n = m * k;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / k;
    const int64_t c = e % k;
    out[r * ld_out + c] = FloatToBf16(x[r * ldx + c]);
  }
}

__global__ void WidenBf16Kernel(const uint16_t* in, int64_t n, float* out) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[e] = Bf16ToFloat(in[e]);
  }
}

constexpr int kConvertThreads = 256;

}  // namespace

int64_t MatMulRowsMaxColumns() { return int64_t{65535} * kCols; }

hipError_t MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                      float* y, int64_t ldy, bool accumulate, hipStream_t stream) {
  return LaunchAnyRows(x, m, k, ldx, w, n, y, ldy, accumulate, stream);
}

hipError_t MatMulRowsBf16(const float* x, int64_t m, int64_t k, int64_t ldx, const uint16_t* w,
                          int64_t n, float* y, int64_t ldy, bool accumulate, hipStream_t stream) {
  return LaunchAnyRows(x, m, k, ldx, w, n, y, ldy, accumulate, stream);
}

hipError_t RoundRowsToBf16(const float* x, int64_t m, int64_t k, int64_t ldx, uint16_t* out,
                           int64_t ld_out, hipStream_t stream) {
  if (m == 0 || k == 0) return hipSuccess;
  RoundRowsToBf16Kernel<<<GridFor(m * k, kConvertThreads), kConvertThreads, 0, stream>>>(
      x, m, k, ldx, out, ld_out);
  return hipGetLastError();
}

hipError_t WidenBf16(const uint16_t* in, int64_t n, float* out, hipStream_t stream) {
  if (n == 0) return hipSuccess;
  WidenBf16Kernel<<<GridFor(n, kConvertThreads), kConvertThreads, 0, stream>>>(in, n, out);
  return hipGetLastError();
}

}  // namespace cairn::infer::hip
