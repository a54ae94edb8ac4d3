#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_MMA_ROWS_DEVICE_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_MMA_ROWS_DEVICE_H_

// The device code of the batch-invariant bf16 product on the matrix units (NVIDIA mma.sync):
// what MatMulRowsMma (matmul_rows_mma.hip) and the MoE layer's grouped expert product
// (moe_experts.hip) both run, so that an expert's rows are the bits of a MatMulRowsMma call on
// that expert (the numerics are described in matmul_rows_mma.hip). Included only by kernel
// sources, and only in NVIDIA builds.

#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"

#if !defined(__HIP_PLATFORM_AMD__)

namespace cairn::infer::hip::mma_rows {

inline constexpr int kWarps = 8;  // Per block: kWarps / segments column tiles of 16.
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kTileCols = 16;  // Weight columns per warp.
inline constexpr int kTileRows = 16;  // Input rows per tile (two instruction sets of 8).
inline constexpr int kStep = 32;      // k values per step: 8 per lane quad position.
inline constexpr int kUnroll = 4;     // Steps whose weight loads are in flight together.
// The MoE one launch reads each expert unit once a call: its bulk copies ask L2 to evict those
// lines first (moe_stream::BulkCopyWithPolicy), the same values.
inline constexpr bool kStreamWeights = true;
// Enough warps to keep the device's memory busy: calls with fewer column tiles cut k into up
// to kMaxSegments segments (a power of two), none shorter than kMinSegment.
inline constexpr int64_t kTargetWarps = 2048;
inline constexpr int kMaxSegments = kWarps;
inline constexpr int64_t kMinSegment = 256;

// How a product of n weight columns over k values cuts k: `count` segments of `length` values
// (a multiple of kStep; the last may be shorter). From n and k only, never from the rows.
struct Segments {
  int count;
  int64_t length;
};
inline Segments SegmentsFor(int64_t n, int64_t k) {
  const int64_t tiles = (n + kTileCols - 1) / kTileCols;
  const int64_t steps = (k + kStep - 1) / kStep;
  int count = 1;
  while (count < kMaxSegments && tiles * count < kTargetWarps &&
         steps * kStep / (2 * count) >= kMinSegment) {
    count *= 2;
  }
  return {count, (steps + count - 1) / count * kStep};
}

// Row `col` of weights in parts (a struct of up to N part pointers `data`, their ends `end` in
// rows and their `count`), k values a row, or null past the last part.
template <typename Parts>
__device__ inline const uint16_t* ColumnOf(const Parts& w, int64_t col, int64_t k) {
  constexpr int kParts = sizeof(w.data) / sizeof(w.data[0]);
  int64_t start = 0;
#pragma unroll
  for (int p = 0; p < kParts; ++p) {
    if (p < w.count && col < w.end[p]) return w.data[p] + (col - start) * k;
    if (p < w.count) start = w.end[p];
  }
  return nullptr;
}

// 8 bf16 weights at p[i .. i+7] (zeros past k or for a null column), as four pairs. kVec: one
// 16-byte load (k % 8 == 0, aligned rows, i % 8 == 0); the scalar path loads the same values.
// kStream: the 16-byte load carries an evict_first L2 cache policy (RowWeights::streamed), for
// weights a call reads once, so that they do not push out of L2 what later kernels read again
// (see the HIP README, forty-fourth round). The same values either way.
// A cache policy under which L2 evicts first the lines a load or copy brings in: for weights a
// launch reads once (RowWeights::streamed, the MoE one launch's bulk copies). Without side
// effects, so the compiler may compute it once for many loads.
__device__ inline uint64_t EvictFirstPolicy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

template <bool kVec, bool kStream = false>
__device__ inline uint4 LoadWeights8(const uint16_t* p, int64_t i, int64_t k) {
  if (p == nullptr || i >= k) return make_uint4(0, 0, 0, 0);
  if constexpr (kVec) {
    if constexpr (kStream) {
      const uint64_t policy = EvictFirstPolicy();
      uint4 v;
      asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
          : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
          : "l"(p + i), "l"(policy));
      return v;
    }
    return *reinterpret_cast<const uint4*>(p + i);
  } else {
    uint32_t v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t a = i + 2 * e < k ? p[i + 2 * e] : 0u;
      const uint32_t b = i + 2 * e + 1 < k ? p[i + 2 * e + 1] : 0u;
      v[e] = a | (b << 16);
    }
    return make_uint4(v[0], v[1], v[2], v[3]);
  }
}

// 8 fp32 inputs at p[i .. i+7] (zeros past k or for a null row).
template <bool kVec>
__device__ inline void LoadInputs8(const float* p, int64_t i, int64_t k, float out[8]) {
  if (p == nullptr || i >= k) {
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = 0.0f;
    return;
  }
  if constexpr (kVec) {
    const float4 a = *reinterpret_cast<const float4*>(p + i);
    const float4 b = *reinterpret_cast<const float4*>(p + i + 4);
    out[0] = a.x;
    out[1] = a.y;
    out[2] = a.z;
    out[3] = a.w;
    out[4] = b.x;
    out[5] = b.y;
    out[6] = b.z;
    out[7] = b.w;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = i + e < k ? p[i + e] : 0.0f;
  }
}

// Two fp32 values rounded to bf16 (nearest even) in one register, `a` in the low half.
__device__ inline uint32_t PackBf16(float a, float b) {
  uint32_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(b), "f"(a));
#else
  r = static_cast<uint32_t>(FloatToBf16(a)) | (static_cast<uint32_t>(FloatToBf16(b)) << 16);
#endif
  return r;
}

// Splits 8 inputs into kPieces bf16 pieces, pieces[p][e] holding elements 2e and 2e + 1: three
// pieces (hi, mid, lo) sum to the input to within fp32 rounding of the last; one piece is the
// input rounded to bf16 (nearest even), as the prefill GEMM's inputs are rounded.
template <int kPieces>
__device__ inline void SplitPieces(float v[8], uint32_t pieces[kPieces][4]) {
  static_assert(kPieces == 1 || kPieces == 3);
#pragma unroll
  for (int p = 0; p < kPieces; ++p) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t r = PackBf16(v[2 * e], v[2 * e + 1]);
      pieces[p][e] = r;
      if (p + 1 < kPieces) {
        v[2 * e] -= __uint_as_float(r << 16);
        v[2 * e + 1] -= __uint_as_float(r & 0xffff0000u);
      }
    }
  }
}

// One lane's inputs of one step: 8 fp32 values (split into pieces when used) or 8 inputs
// already rounded to bf16 (MatMulRowsMma's staged inputs), as four pairs.
template <typename In>
struct StepInputs;
template <>
struct StepInputs<float> {
  float v[8];
};
template <>
struct StepInputs<uint16_t> {
  uint4 v;
};

// The step's 8 inputs at p[i .. i+7] (zeros past k or for a null row); bf16 inputs as weights
// are loaded (the same pairs).
template <bool kVec>
__device__ inline void LoadStepInputs(const float* p, int64_t i, int64_t k,
                                      StepInputs<float>& out) {
  LoadInputs8<kVec>(p, i, k, out.v);
}
template <bool kVec>
__device__ inline void LoadStepInputs(const uint16_t* p, int64_t i, int64_t k,
                                      StepInputs<uint16_t>& out) {
  out.v = LoadWeights8<kVec>(p, i, k);
}

// The pieces of a step's inputs (SplitPieces); inputs rounded to bf16 already are the one
// piece PackBf16 would have made of their fp32 values.
template <int kPieces>
__device__ inline void InputPieces(StepInputs<float>& in, uint32_t pieces[kPieces][4]) {
  SplitPieces<kPieces>(in.v, pieces);
}
template <int kPieces>
__device__ inline void InputPieces(const StepInputs<uint16_t>& in, uint32_t pieces[kPieces][4]) {
  static_assert(kPieces == 1, "staged inputs are one bf16 piece");
  pieces[0][0] = in.v.x;
  pieces[0][1] = in.v.y;
  pieces[0][2] = in.v.z;
  pieces[0][3] = in.v.w;
}

// sum += the step's products for one set of 8 input rows. Lane (g, t) = (lane / 4, lane % 4)
// holds weights wa (column g) and wb (column g + 8) and inputs (row g) at k = 8t .. 8t + 7 of
// the step; instruction h takes the pairs 2h and 2h + 1, so its k index 2t(+1) is the step's
// 8t + 4h (+1) and 2t + 8(+1) is 8t + 4h + 2 (+1), the same permutation for both operands. The
// two instructions' chains start from zero each step (lo, then mid, then hi: the matrix units
// accumulate without rounding to nearest, so the small pieces go first and no chain grows
// long) and reach the fp32 sum by ordinary additions. With one piece each chain is one
// instruction.
template <int kPieces>
__device__ inline void StepProducts(const uint4& wa, const uint4& wb,
                                    const uint32_t pieces[kPieces][4], float sum[4]) {
  float c0[4] = {}, c1[4] = {};
  const uint32_t a0[4] = {wa.x, wb.x, wa.y, wb.y};
  const uint32_t a1[4] = {wa.z, wb.z, wa.w, wb.w};
#pragma unroll
  for (int p = kPieces - 1; p >= 0; --p) {
    Mma(c0, a0, pieces[p][0], pieces[p][1]);
    Mma(c1, a1, pieces[p][2], pieces[p][3]);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) sum[e] += c0[e] + c1[e];
}

}  // namespace cairn::infer::hip::mma_rows

#endif  // !__HIP_PLATFORM_AMD__

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_MMA_ROWS_DEVICE_H_
