#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_GATED_DELTA_MMA_DEVICE_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_GATED_DELTA_MMA_DEVICE_H_

// Device helpers of the chunked delta rule on the matrix units (gated_delta_mma.hip): fp32
// operands split into bf16 pieces (two, or three for K K^T) and the products over them on
// mma.sync m16n8k16, the fragments' loads from fp32 rows, from rows stored split (pairs, row
// pairs) and from split bf16 arrays, and the asynchronous copies that stage the rows. Included
// only by kernel sources; NVIDIA builds (sm_80 and later for the instructions).

#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/mma_rows_device.h"

#if !defined(__HIP_PLATFORM_AMD__)

namespace cairn::infer::hip::delta_mma {

// --- matrix-unit helpers --------------------------------------------------------------------

// Two fp32 values rounded to bf16 (nearest even) in one register, `a` in the low half
// (mma_rows_device.h's).
using mma_rows::PackBf16;

// Splits the pair (a, b) into hi and lo bf16 pairs.
__device__ inline void Split2(float a, float b, uint32_t& hi, uint32_t& lo) {
  hi = PackBf16(a, b);
  lo = PackBf16(a - __uint_as_float(hi << 16), b - __uint_as_float(hi & 0xffff0000u));
}

// Stores (a, b) split over the two floats at `dst` (8-byte aligned): the hi pieces' word, then
// the lo pieces' (Split2), which LoadAPairs reads back as a fragment's pieces.
__device__ inline void StorePair(float* dst, float a, float b) {
  uint2 x;
  Split2(a, b, x.x, x.y);
  *reinterpret_cast<uint2*>(dst) = x;
}

// An operand fragment split into its two pieces.
struct FragA {
  uint32_t hi[4], lo[4];
};
struct FragB {
  uint32_t hi[2], lo[2];
};

// c += a . b over both pieces: lo.hi and hi.lo first, then hi.hi.
__device__ inline void Mma3(float c[4], const FragA& a, const FragB& b) {
  Mma(c, a.lo, b.hi[0], b.hi[1]);
  Mma(c, a.hi, b.lo[0], b.lo[1]);
  Mma(c, a.hi, b.hi[0], b.hi[1]);
}

// Three pieces (hi, mid, lo) for K K^T, whose rounding the triangular solve amplifies: the
// six products of combined order up to two (lo.hi .. hi.hi, small first) are within about
// 2^-24 of fp32.
struct FragA3 {
  uint32_t p[3][4];
};
struct FragB3 {
  uint32_t p[3][2];
};

__device__ inline void Split3(float a, float b, uint32_t& hi, uint32_t& mid, uint32_t& lo) {
  hi = PackBf16(a, b);
  a -= __uint_as_float(hi << 16);
  b -= __uint_as_float(hi & 0xffff0000u);
  mid = PackBf16(a, b);
  lo = PackBf16(a - __uint_as_float(mid << 16), b - __uint_as_float(mid & 0xffff0000u));
}

__device__ inline void Mma6(float c[4], const FragA3& a, const FragB3& b) {
  Mma(c, a.p[2], b.p[0][0], b.p[0][1]);
  Mma(c, a.p[0], b.p[2][0], b.p[2][1]);
  Mma(c, a.p[1], b.p[1][0], b.p[1][1]);
  Mma(c, a.p[1], b.p[0][0], b.p[0][1]);
  Mma(c, a.p[0], b.p[1][0], b.p[1][1]);
  Mma(c, a.p[0], b.p[0][0], b.p[0][1]);
}

// As LoadARows and LoadBRows below, in three pieces.
__device__ inline FragA3 LoadARows3(const float* m, int ld, int m0, int k0, int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  FragA3 f;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = m0 + g + (r & 1) * 8;
    const int col = k0 + 2 * t + (r >> 1) * 8;
    const float2 x = *reinterpret_cast<const float2*>(m + row * ld + col);
    Split3(x.x, x.y, f.p[0][r], f.p[1][r], f.p[2][r]);
  }
  return f;
}
__device__ inline FragB3 LoadBRows3(const float* m, int ld, int k0, int n0, int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  FragB3 f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float2 x = *reinterpret_cast<const float2*>(m + (n0 + g) * ld + k0 + 2 * t + 8 * r);
    Split3(x.x, x.y, f.p[0][r], f.p[1][r], f.p[2][r]);
  }
  return f;
}

// The A fragment (16 x 16, rows m0.., columns k0..) of a row-major fp32 matrix in shared memory
// with row stride `ld` (even), split into its pieces. Lane (g, t) holds rows g and g + 8,
// columns 2t, 2t + 1, 2t + 8, 2t + 9.
__device__ inline FragA LoadARows(const float* m, int ld, int m0, int k0, int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  FragA f;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = m0 + g + (r & 1) * 8;
    const int col = k0 + 2 * t + (r >> 1) * 8;
    const float2 x = *reinterpret_cast<const float2*>(m + row * ld + col);
    Split2(x.x, x.y, f.hi[r], f.lo[r]);
  }
  return f;
}

// LoadARows' fragment from a matrix stored split (StorePair): the same pieces, read instead of
// computed.
__device__ inline FragA LoadAPairs(const float* m, int ld, int m0, int k0, int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  FragA f;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = m0 + g + (r & 1) * 8;
    const int col = k0 + 2 * t + (r >> 1) * 8;
    const uint2 x = *reinterpret_cast<const uint2*>(m + row * ld + col);
    f.hi[r] = x.x;
    f.lo[r] = x.y;
  }
  return f;
}

// Stores the pairs (a[j], b[j]) of two rows' four columns split across those rows: the hi
// pieces' words over row `r0`'s four floats, the lo pieces' over row `r1`'s (16-byte aligned).
// LoadAColPairs reads them back.
__device__ inline void StoreRowPairs(float* r0, float* r1, const float (&a)[4],
                                     const float (&b)[4]) {
  uint4 hi, lo;
  Split2(a[0], b[0], hi.x, lo.x);
  Split2(a[1], b[1], hi.y, lo.y);
  Split2(a[2], b[2], hi.z, lo.z);
  Split2(a[3], b[3], hi.w, lo.w);
  *reinterpret_cast<uint4*>(r0) = hi;
  *reinterpret_cast<uint4*>(r1) = lo;
}

// The A fragment whose element (x, c) is row c's value at column x (a transposed operand:
// columns of the fragment are rows), from rows stored split in row pairs (StoreRowPairs) in
// `m`: element (c, x) of an even row c holds the hi pieces of rows c and c + 1 at column x,
// element (c + 1, x) their lo pieces.
__device__ inline FragA LoadAColPairs(const float* m, int ld, int m0, int k0, int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  FragA f;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = m0 + g + (r & 1) * 8;
    const int col = k0 + 2 * t + (r >> 1) * 8;
    f.hi[r] = __float_as_uint(m[col * ld + row]);
    f.lo[r] = __float_as_uint(m[(col + 1) * ld + row]);
  }
  return f;
}

// The B fragment (16 x 8, k0.., n0..) whose element (k, n) is m[n * ld + k]: the rows of `m`
// are the fragment's columns, read in pairs along the row.
__device__ inline FragB LoadBRows(const float* m, int ld, int k0, int n0, int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  FragB f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float2 x = *reinterpret_cast<const float2*>(m + (n0 + g) * ld + k0 + 2 * t + 8 * r);
    Split2(x.x, x.y, f.hi[r], f.lo[r]);
  }
  return f;
}

// The B fragment whose element (k, n) is m[k * ld + n] * scale[k] (scale null: 1).
__device__ inline FragB LoadBCols(const float* m, int ld, const float* scale, int k0, int n0,
                                  int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  FragB f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int k = k0 + 2 * t + 8 * r;
    float a = m[k * ld + n0 + g];
    float b = m[(k + 1) * ld + n0 + g];
    if (scale != nullptr) {
      a *= scale[k];
      b *= scale[k + 1];
    }
    Split2(a, b, f.hi[r], f.lo[r]);
  }
  return f;
}

// The B fragment whose element (k, n) is hi/lo[n * ld + k]: operands split once, as they are
// written (the state and v_new), stored as bf16 pieces with k pairs in 32-bit words.
__device__ inline FragB LoadBSplit(const uint16_t* hi, const uint16_t* lo, int ld, int k0, int n0,
                                   int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  FragB f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int at = (n0 + g) * ld + k0 + 2 * t + 8 * r;
    f.hi[r] = *reinterpret_cast<const uint32_t*>(hi + at);
    f.lo[r] = *reinterpret_cast<const uint32_t*>(lo + at);
  }
  return f;
}

// hi/lo[at] = the two bf16 pieces of x (nearest even, as Split2).
__device__ inline void StoreSplit(uint16_t* hi, uint16_t* lo, int at, float x) {
  const uint16_t h = FloatToBf16(x);
  hi[at] = h;
  lo[at] = FloatToBf16(x - Bf16ToFloat(h));
}

// --- asynchronous copies --------------------------------------------------------------------

// `bytes` (4 or 16) from global `src` into shared `dst`; zeros where `valid` is false.
template <int kBytes>
__device__ inline void CopyAsync(float* dst, const float* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned int to = static_cast<unsigned int>(__cvta_generic_to_shared(dst));
  const int n = valid ? kBytes : 0;
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(n));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(src), "r"(n));
  }
#else
  for (int i = 0; i < kBytes / 4; ++i) dst[i] = valid ? src[i] : 0.0f;
#endif
}
__device__ inline void CopyCommit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int kPending>
__device__ inline void CopyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

// Copies `rows` x `cols` floats (cols a multiple of 4 when kVec) from global `src` (row stride
// `ld`) into shared `dst` (row stride `dld`); rows >= `valid_rows` and columns >= `valid_cols`
// become zeros. The block's kBlockThreads threads share the work.
template <bool kVec, int kBlockThreads>
__device__ inline void CopyTile(float* dst, int dld, const float* src, int64_t ld, int rows,
                                int cols, int valid_rows, int valid_cols) {
  constexpr int kW = kVec ? 4 : 1;
  const int per_row = cols / kW;
  for (int i = threadIdx.x; i < rows * per_row; i += kBlockThreads) {
    const int r = i / per_row;
    const int c = (i % per_row) * kW;
    const bool ok = r < valid_rows && c < valid_cols;
    CopyAsync<kW * 4>(dst + r * dld + c, ok ? src + r * ld + c : src, ok);
  }
}

}  // namespace cairn::infer::hip::delta_mma

#endif  // !__HIP_PLATFORM_AMD__

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_GATED_DELTA_MMA_DEVICE_H_
