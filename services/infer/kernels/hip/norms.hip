// Row norms: RMSNorm (weights optionally zero-centred; rows packed, or heads of token rows `ld`
// apart), the gated RMSNorm and L2 normalisation (up to two arrays of rows in one launch), the
// RMS norms optionally with a bf16 copy of their output for the products. A block per row, its
// sum a fixed-tree BlockSum; rows of at most kRowThreads values a warp each (`warp_row_norms`,
// NVIDIA).

#include <cmath>
#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {
namespace {

// Where row r of a norm's rows of `dim` values starts: head r % heads of token r / heads, token
// rows `ld` apart (contiguous rows: heads 1, ld dim). Only the addresses follow it.
struct HeadRows {
  int64_t heads;
  int64_t ld;
  __device__ int64_t Offset(int64_t r, int64_t dim) const {
    return r / heads * ld + r % heads * dim;
  }
};
HeadRows Contiguous(int64_t dim) { return {1, dim}; }

// Thread t's sum of squares of x[t], x[t + kRowThreads], ... in that order; eight loads in flight
// before their multiply-adds.
__device__ float SumSquares(const float* x, int64_t dim) {
  constexpr int kBatch = 8;
  float ss = 0.0f;
  int64_t i = threadIdx.x;
  for (; i + (kBatch - 1) * kRowThreads < dim; i += kBatch * kRowThreads) {
    float v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) v[b] = x[i + b * kRowThreads];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) ss = fmaf(v[b], v[b], ss);
  }
  for (; i < dim; i += kRowThreads) ss = fmaf(x[i], x[i], ss);
  return ss;
}

// Rows of at most kHeldValues * kRowThreads values are held in registers between the sum and the
// output: every load of a thread is in flight at once, and x is read once. The weights (and a
// gated norm's gates) are loaded with them, before the sum: loaded in the output loop, each
// waited behind the previous store (y may alias them, so the compiler keeps the order), which
// made a 4096-value row take about 11 us (H200, 2026-12-03). The arithmetic and its order are
// those of the loops over longer rows.
constexpr int kHeldValues = 16;

__global__ void __launch_bounds__(kRowThreads)
    RmsNormKernel(const float* x, int64_t dim, const float* w, float eps, bool zero_centred,
                  float* y, HeadRows rows, uint16_t* rounded, bool release) {
  KernelEntry(release);
  __shared__ float scratch[kRowThreads];
  const int64_t at = rows.Offset(blockIdx.x, dim);
  const float* xr = x + at;
  float* yr = y + at;
  if (dim <= int64_t{kHeldValues} * kRowThreads) {
    float v[kHeldValues], wv[kHeldValues];
#pragma unroll
    for (int b = 0; b < kHeldValues; ++b) {
      const int64_t i = threadIdx.x + b * kRowThreads;
      v[b] = i < dim ? xr[i] : 0.0f;
      wv[b] = i < dim ? (zero_centred ? 1.0f + w[i] : w[i]) : 0.0f;
    }
    float ss = 0.0f;
#pragma unroll
    for (int b = 0; b < kHeldValues; ++b) {
      if (threadIdx.x + b * kRowThreads < dim) ss = fmaf(v[b], v[b], ss);
    }
    ss = BlockSum<kRowThreads>(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
#pragma unroll
    for (int b = 0; b < kHeldValues; ++b) {
      const int64_t i = threadIdx.x + b * kRowThreads;
      if (i < dim) StoreOut(yr, rounded, at, i, v[b] * inv * wv[b]);
    }
    return;
  }
  const float ss = BlockSum<kRowThreads>(SumSquares(xr, dim), scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads) {
    StoreOut(yr, rounded, at, i, xr[i] * inv * (zero_centred ? 1.0f + w[i] : w[i]));
  }
}

__global__ void __launch_bounds__(kRowThreads)
    GatedRmsNormKernel(const float* x, const float* z, int64_t dim, const float* w, float eps,
                       float* y, HeadRows z_rows, uint16_t* rounded, bool release) {
  KernelEntry(release);
  __shared__ float scratch[kRowThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  const float* zr = z + z_rows.Offset(r, dim);
  float* yr = y + r * dim;
  if (dim <= int64_t{kHeldValues} * kRowThreads) {
    float v[kHeldValues], wv[kHeldValues], zv[kHeldValues];
#pragma unroll
    for (int b = 0; b < kHeldValues; ++b) {
      const int64_t i = threadIdx.x + b * kRowThreads;
      v[b] = i < dim ? xr[i] : 0.0f;
      wv[b] = i < dim ? w[i] : 0.0f;
      zv[b] = i < dim ? zr[i] : 0.0f;
    }
    float ss = 0.0f;
#pragma unroll
    for (int b = 0; b < kHeldValues; ++b) {
      if (threadIdx.x + b * kRowThreads < dim) ss = fmaf(v[b], v[b], ss);
    }
    ss = BlockSum<kRowThreads>(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
#pragma unroll
    for (int b = 0; b < kHeldValues; ++b) {
      const int64_t i = threadIdx.x + b * kRowThreads;
      if (i < dim) StoreOut(yr, rounded, r * dim, i, v[b] * inv * wv[b] * DeviceSilu(zv[b]));
    }
    return;
  }
  const float ss = BlockSum<kRowThreads>(SumSquares(xr, dim), scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads) {
    StoreOut(yr, rounded, r * dim, i, xr[i] * inv * w[i] * DeviceSilu(zr[i]));
  }
}

// Up to two arrays of rows that L2Normalize scales in one launch, each with its own scale: grid
// row blockIdx.y takes array blockIdx.y. Row r is head r % heads of token r / heads, token rows
// ld apart.
struct L2Arrays {
  float* x[2];
  float scale[2];
  int heads;
  int64_t ld;
};

__device__ inline float* L2Row(const L2Arrays& arrays, int64_t r, int64_t dim) {
  return arrays.x[blockIdx.y] + r / arrays.heads * arrays.ld + r % arrays.heads * dim;
}

__global__ void __launch_bounds__(kRowThreads)
    L2NormalizeKernel(L2Arrays arrays, int64_t dim, float eps) {
  KernelEntry();
  __shared__ float scratch[kRowThreads];
  const float scale = arrays.scale[blockIdx.y];
  float* xr = L2Row(arrays, blockIdx.x, dim);
  const float ss = BlockSum<kRowThreads>(SumSquares(xr, dim), scratch);
  const float inv = 1.0f / sqrtf(ss + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads) xr[i] = xr[i] * inv * scale;
}

constexpr int kWarpRows = kRowThreads / 32;  // Rows per block of kRowThreads threads.

#if !defined(__HIP_PLATFORM_AMD__)
// This warp's row index: blockIdx.x * kWarpRows + warp.
__device__ inline int64_t WarpRow() {
  return static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / 32;
}

// WarpRowValues of this warp's row of x (rows of dim); returns the row's index.
__device__ inline int64_t WarpRowLoad(const float* x, int64_t dim, float v[kWarpParts],
                                      float part[kWarpParts]) {
  const int64_t r = WarpRow();
  WarpRowValues(x + r * dim, dim, v, part);
  return r;
}

__global__ void __launch_bounds__(kRowThreads)
    RmsNormWarpKernel(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                      bool zero_centred, float* y, HeadRows layout, uint16_t* rounded,
                      bool release) {
  KernelEntry(release);
  if (WarpRow() >= rows) return;
  float v[kWarpParts], part[kWarpParts], wv[kWarpParts];
  const int64_t at = layout.Offset(WarpRow(), dim);
  WarpRowValues(x + at, dim, v, part);
  // The weights before the sum, as RmsNormKernel's held rows.
#pragma unroll
  for (int j = 0; j < kWarpParts; ++j) {
    const int i = threadIdx.x % 32 + 32 * j;
    wv[j] = i < dim ? (zero_centred ? 1.0f + w[i] : w[i]) : 0.0f;
  }
  const float ss = WarpRowSum(part);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  float* yr = y + at;
#pragma unroll
  for (int j = 0; j < kWarpParts; ++j) {
    const int i = threadIdx.x % 32 + 32 * j;
    if (i < dim) StoreOut(yr, rounded, at, i, v[j] * inv * wv[j]);
  }
}

__global__ void __launch_bounds__(kRowThreads)
    GatedRmsNormWarpKernel(const float* x, const float* z, int64_t rows, int64_t dim,
                           const float* w, float eps, float* y, HeadRows z_rows, uint16_t* rounded,
                           bool release) {
  KernelEntry(release);
  if (static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / 32 >= rows) return;
  float v[kWarpParts], part[kWarpParts], wv[kWarpParts], zv[kWarpParts];
  const int64_t r = WarpRowLoad(x, dim, v, part);
  const float* zr = z + z_rows.Offset(r, dim);
  // The weights and gates before the sum, as RmsNormKernel's held rows.
#pragma unroll
  for (int j = 0; j < kWarpParts; ++j) {
    const int i = threadIdx.x % 32 + 32 * j;
    wv[j] = i < dim ? w[i] : 0.0f;
    zv[j] = i < dim ? zr[i] : 0.0f;
  }
  const float ss = WarpRowSum(part);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  float* yr = y + r * dim;
#pragma unroll
  for (int j = 0; j < kWarpParts; ++j) {
    const int i = threadIdx.x % 32 + 32 * j;
    if (i < dim) StoreOut(yr, rounded, r * dim, i, v[j] * inv * wv[j] * DeviceSilu(zv[j]));
  }
}

__global__ void __launch_bounds__(kRowThreads)
    L2NormalizeWarpKernel(L2Arrays arrays, int64_t rows, int64_t dim, float eps) {
  KernelEntry();
  if (WarpRow() >= rows) return;
  float* xr = L2Row(arrays, WarpRow(), dim);
  WarpL2Normalize(xr, dim, eps, arrays.scale[blockIdx.y], xr);
}
#endif  // !__HIP_PLATFORM_AMD__

// Whether a norm of rows of `dim` values takes the warp-per-row kernels.
bool WarpRows(int64_t dim, bool warp_rows) {
#if defined(__HIP_PLATFORM_AMD__)
  static_cast<void>(dim);
  static_cast<void>(warp_rows);
  return false;
#else
  return warp_rows && dim <= kRowThreads;
#endif
}

unsigned int WarpRowBlocks(int64_t rows) {
  return static_cast<unsigned int>((rows + kWarpRows - 1) / kWarpRows);
}

hipError_t LaunchRmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                         bool zero_centred, float* y, HeadRows layout, bool warp_rows,
                         uint16_t* rounded, hipStream_t stream) {
  if (rows == 0) return hipSuccess;
#if !defined(__HIP_PLATFORM_AMD__)
  if (WarpRows(dim, warp_rows)) {
    LaunchKernel(RmsNormWarpKernel, WarpRowBlocks(rows), kRowThreads, 0, stream, x, rows, dim, w,
                 eps, zero_centred, y, layout, rounded, EarlyRelease(kReleaseNorms));
    return hipGetLastError();
  }
#endif
  LaunchKernel(RmsNormKernel, static_cast<unsigned int>(rows), kRowThreads, 0, stream, x, dim, w,
               eps, zero_centred, y, layout, rounded, EarlyRelease(kReleaseNorms));
  return hipGetLastError();
}

hipError_t LaunchGatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim,
                              const float* w, float eps, float* y, HeadRows z_rows,
                              bool warp_rows, uint16_t* rounded, hipStream_t stream) {
  if (rows == 0) return hipSuccess;
#if !defined(__HIP_PLATFORM_AMD__)
  if (WarpRows(dim, warp_rows)) {
    LaunchKernel(GatedRmsNormWarpKernel, WarpRowBlocks(rows), kRowThreads, 0, stream, x, z, rows,
                 dim, w, eps, y, z_rows, rounded, EarlyRelease(kReleaseNorms));
    return hipGetLastError();
  }
#endif
  LaunchKernel(GatedRmsNormKernel, static_cast<unsigned int>(rows), kRowThreads, 0, stream, x, z,
               dim, w, eps, y, z_rows, rounded, EarlyRelease(kReleaseNorms));
  return hipGetLastError();
}

}  // namespace

hipError_t RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                   bool zero_centred, float* y, bool warp_rows, uint16_t* rounded,
                   hipStream_t stream) {
  if (rounded != nullptr && dim % 8 != 0) return hipErrorInvalidValue;
  return LaunchRmsNorm(x, rows, dim, w, eps, zero_centred, y, Contiguous(dim), warp_rows, rounded,
                       stream);
}

hipError_t RmsNormHeads(float* x, int64_t tokens, int heads, int64_t dim, int64_t ld,
                        const float* w, float eps, bool zero_centred, bool warp_rows,
                        hipStream_t stream) {
  if (heads <= 0 || ld < heads * dim) return hipErrorInvalidValue;
  return LaunchRmsNorm(x, tokens * heads, dim, w, eps, zero_centred, x, HeadRows{heads, ld},
                       warp_rows, nullptr, stream);
}

hipError_t GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w,
                        float eps, float* y, bool warp_rows, uint16_t* rounded,
                        hipStream_t stream) {
  if (rounded != nullptr && dim % 8 != 0) return hipErrorInvalidValue;
  return LaunchGatedRmsNorm(x, z, rows, dim, w, eps, y, Contiguous(dim), warp_rows, rounded,
                            stream);
}

hipError_t GatedRmsNormHeads(const float* x, const float* z, int64_t tokens, int heads,
                             int64_t dim, int64_t z_ld, const float* w, float eps, float* y,
                             bool warp_rows, uint16_t* rounded, hipStream_t stream) {
  if (heads <= 0 || z_ld < heads * dim) return hipErrorInvalidValue;
  if (rounded != nullptr && heads * dim % 8 != 0) return hipErrorInvalidValue;
  return LaunchGatedRmsNorm(x, z, tokens * heads, dim, w, eps, y, HeadRows{heads, z_ld},
                            warp_rows, rounded, stream);
}

namespace {

// L2Normalize over the first `count` (1 or 2) arrays of `arrays`, in one launch.
hipError_t L2NormalizeArrays(const L2Arrays& arrays, unsigned int count, int64_t rows, int64_t dim,
                             float eps, bool warp_rows, hipStream_t stream) {
  if (rows == 0) return hipSuccess;
#if !defined(__HIP_PLATFORM_AMD__)
  if (WarpRows(dim, warp_rows)) {
    LaunchKernel(L2NormalizeWarpKernel, dim3(WarpRowBlocks(rows), count), kRowThreads, 0, stream,
                 arrays, rows, dim, eps);
    return hipGetLastError();
  }
#endif
  LaunchKernel(L2NormalizeKernel, dim3(static_cast<unsigned int>(rows), count), kRowThreads, 0,
               stream, arrays, dim, eps);
  return hipGetLastError();
}

}  // namespace

hipError_t L2Normalize(float* x, int64_t rows, int64_t dim, float eps, float scale, bool warp_rows,
                       hipStream_t stream) {
  return L2NormalizeArrays({{x, nullptr}, {scale, 0.0f}, 1, dim}, 1, rows, dim, eps, warp_rows,
                           stream);
}

hipError_t L2NormalizeTwo(float* a, float a_scale, float* b, float b_scale, int64_t tokens,
                          int heads, int64_t dim, int64_t ld, float eps, bool warp_rows,
                          hipStream_t stream) {
  return L2NormalizeArrays({{a, b}, {a_scale, b_scale}, heads, ld}, 2, tokens * heads, dim, eps,
                           warp_rows, stream);
}

}  // namespace cairn::infer::hip
