#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_ATTENTION_MMA_DEVICE_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_ATTENTION_MMA_DEVICE_H_

// Device code shared by the prefill attention's matrix-unit kernels (attention_mma.hip:
// variants 0-4 on mma.sync; attention_wgmma.hip: variants 5 and 6 on Hopper's warpgroup
// instructions): the launch parameters, the softmax step every variant runs on a key tile, the
// final sums and stores, and the launch of the warpgroup kernels. Included only by those two
// kernel sources.

#include <cmath>
#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

#if !defined(__HIP_PLATFORM_AMD__)

namespace cairn::infer::hip::attention_mma {

inline constexpr int kKeys = 64;  // Keys per tile.
inline constexpr unsigned kFullMask = 0xffffffffu;

struct MmaParams {
  const float* q;
  float* out;
  int64_t tokens;
  int64_t past;
  int group;  // q heads per kv head.
  int d;
  float scale_log2;  // scale * log2(e): scores in base 2.
  int64_t q_ld;
  // The rounded keys, [kv head][key][D], and values, [kv head][D][key], keys padded to a
  // multiple of kKeys with zeros (ConvertKvKernel).
  uint16_t* kb;
  uint16_t* vb;
  int64_t keys_pad;
};

__device__ inline uint32_t PackBf16(float lo, float hi) {
  return static_cast<uint32_t>(FloatToBf16(lo)) | (static_cast<uint32_t>(FloatToBf16(hi)) << 16);
}

// PackBf16 by one instruction (round to nearest even: the same bits for every number; a NaN
// may come out with another payload).
__device__ inline uint32_t PackBf16Cvt(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return PackBf16(lo, hi);
#endif
}

// Stores 4 fp32 values as bf16 at dst[0..3] (or dst[0], dst[stride], ... when transposed).
__device__ inline void StoreBf16x4(uint16_t* dst, int stride, float4 x) {
  dst[0] = FloatToBf16(x.x);
  dst[stride] = FloatToBf16(x.y);
  dst[2 * stride] = FloatToBf16(x.z);
  dst[3 * stride] = FloatToBf16(x.w);
}

// One level of kTree's maxima (kMax) or kBareExp's minima: r[i] = max (min) of r[i] and
// r[i + kWidth] for i < kWidth, two rows.
template <int kWidth, bool kMax = true>
__device__ inline void TreeLevel(float* r0, float* r1) {
#pragma unroll
  for (int i = 0; i < kWidth; ++i) {
    r0[i] = kMax ? fmaxf(r0[i], r0[i + kWidth]) : fminf(r0[i], r0[i + kWidth]);
    r1[i] = kMax ? fmaxf(r1[i], r1[i + kWidth]) : fminf(r1[i], r1[i + kWidth]);
  }
}

// The maximum (kMax) or minimum of each of a thread's two rows of a tile's scores (`s` as in
// SoftmaxTile), by a tree of TreeLevel.
template <bool kMax, typename Scores>
__device__ inline void RowTree(Scores s, float& x0, float& x1) {
  float r0[kKeys / 4], r1[kKeys / 4];
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      r0[2 * nt + e] = s(nt, e);
      r1[2 * nt + e] = s(nt, 2 + e);
    }
  }
  static_assert(kKeys == 64, "the tree's four levels");
  TreeLevel<8, kMax>(r0, r1);
  TreeLevel<4, kMax>(r0, r1);
  TreeLevel<2, kMax>(r0, r1);
  TreeLevel<1, kMax>(r0, r1);
  x0 = r0[0];
  x1 = r1[0];
}

// 2^x by the bare instruction (flushes results below 2^-126 to zero).
__device__ inline float BareExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// bar.sync on barrier `id` (not 0, __syncthreads') for `threads` threads of the block.
__device__ inline void NamedBarrier(int id, int threads) {
#if defined(__CUDA_ARCH__)
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#endif
}

// The positions a thread's two rows (frag_row and frag_row + 8 of its warp's 16) see in key
// tile `key0`.
struct TileRows {
  int64_t key0;  // The tile's first key.
  int64_t pos0;  // The rows' positions.
  int64_t pos1;
  int64_t warp_pos;  // The warp's first row's: a tile ending there is visible whole to the warp.
  int quad_col;      // 2 (lane % 4): the thread's first column of each group of 8.
  float scale_log2;
};

// One key tile's softmax step for a thread's two rows, every variant's: `s(nt, e)` and
// `o(dn, e)` are the thread's m16n8 fragment values of the tile's scores (column group nt of
// kKeys / 8) and of the output (head column group dn of D / 8), e 0-1 row frag_row, 2-3 row
// frag_row + 8. The causal mask and scale (kFast: only on tiles that cross one of the warp's
// rows' positions), the tile's maxima (kTree: a tree of fmaxf, else a chain) over the row's
// quad, the running maxima m, the weights in place of the scores, the partial sums l, and the
// output's rescale (kFast: skipped when every scale of the warp is 1). kBareExp: the weights by
// the bare exp2 instruction where that gives exp2f's bits (below).
template <int D, bool kFast, bool kTree, bool kBareExp, typename Scores, typename Out>
__device__ inline void SoftmaxTile(Scores s, Out o, const TileRows& r, float& m0, float& m1,
                                   float& l0, float& l1) {
  // Causal mask, running maxima (per row over its quad), weights and partial sums.
  float tile_max0 = -INFINITY, tile_max1 = -INFINITY;
  if (!kFast || r.key0 + kKeys - 1 > r.warp_pos) {
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t key = r.key0 + nt * 8 + r.quad_col + e;
        s(nt, e) = key <= r.pos0 ? s(nt, e) * r.scale_log2 : -INFINITY;
        s(nt, 2 + e) = key <= r.pos1 ? s(nt, 2 + e) * r.scale_log2 : -INFINITY;
        if constexpr (!kTree) {
          tile_max0 = fmaxf(tile_max0, s(nt, e));
          tile_max1 = fmaxf(tile_max1, s(nt, 2 + e));
        }
      }
    }
  } else {
    // Every key of the tile is visible to every row of the warp: the same values unmasked.
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s(nt, e) = s(nt, e) * r.scale_log2;
        s(nt, 2 + e) = s(nt, 2 + e) * r.scale_log2;
        if constexpr (!kTree) {
          tile_max0 = fmaxf(tile_max0, s(nt, e));
          tile_max1 = fmaxf(tile_max1, s(nt, 2 + e));
        }
      }
    }
  }
  if constexpr (kTree) {
    float x0, x1;
    RowTree<true>(s, x0, x1);
    // The chain's start: all NaN gives -inf, as there.
    tile_max0 = fmaxf(tile_max0, x0);
    tile_max1 = fmaxf(tile_max1, x1);
  }
  tile_max0 = fmaxf(tile_max0, __shfl_xor_sync(kFullMask, tile_max0, 1));
  tile_max0 = fmaxf(tile_max0, __shfl_xor_sync(kFullMask, tile_max0, 2));
  tile_max1 = fmaxf(tile_max1, __shfl_xor_sync(kFullMask, tile_max1, 1));
  tile_max1 = fmaxf(tile_max1, __shfl_xor_sync(kFullMask, tile_max1, 2));
  const float new0 = fmaxf(m0, tile_max0);
  const float new1 = fmaxf(m1, tile_max1);
  // A row that has seen no visible key yet keeps zeros (and scale 1).
  const float alpha0 = new0 == -INFINITY ? 1.0f : exp2f(m0 - new0);
  const float alpha1 = new1 == -INFINITY ? 1.0f : exp2f(m1 - new1);
  float sum0 = 0.0f, sum1 = 0.0f;
  // kBareExp: exp2f(x) is the bare ex2.approx.ftz(x) for x >= -126 and for NaN (below -126 it
  // scales the argument into the normal range and squares the result, several instructions
  // more), so where every argument of the warp's rows is at least -126 (the smallest score less
  // the row's maximum, a finite one: rounding is monotonic) the bare instruction gives exp2f's
  // bits, and the row's maximum is not -inf (no 0 to select).
  bool bare = false;
  if constexpr (kBareExp) {
    float lo0, lo1;
    RowTree<false>(s, lo0, lo1);
    bare = __all_sync(kFullMask, new0 != -INFINITY && new1 != -INFINITY && lo0 - new0 >= -126.0f &&
                                     lo1 - new1 >= -126.0f);
  }
  if (bare) {
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s(nt, e) = BareExp2(s(nt, e) - new0);
        s(nt, 2 + e) = BareExp2(s(nt, 2 + e) - new1);
        sum0 += s(nt, e);
        sum1 += s(nt, 2 + e);
      }
    }
  } else {
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s(nt, e) = new0 == -INFINITY ? 0.0f : exp2f(s(nt, e) - new0);
        s(nt, 2 + e) = new1 == -INFINITY ? 0.0f : exp2f(s(nt, 2 + e) - new1);
        sum0 += s(nt, e);
        sum1 += s(nt, 2 + e);
      }
    }
  }
  l0 = l0 * alpha0 + sum0;
  l1 = l1 * alpha1 + sum1;
  m0 = new0;
  m1 = new1;
  // x * 1 is x: with kFast the rescale is skipped when every scale of the warp is 1.
  if (!kFast || __any_sync(kFullMask, alpha0 != 1.0f || alpha1 != 1.0f)) {
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      o(dn, 0) *= alpha0;
      o(dn, 1) *= alpha0;
      o(dn, 2) *= alpha1;
      o(dn, 3) *= alpha1;
    }
  }
}

// The quad's partial sums, added in the same order on every lane of the quad, and the thread's
// two output rows (out0, out1: rows row0 and row0 + 8 of the pass, `o` as in SoftmaxTile)
// divided by them, rows past `tokens` and columns past `d` left alone.
template <int D, typename Out>
__device__ inline void StoreRows(Out o, float l0, float l1, int64_t row0, int64_t tokens, int d,
                                 int quad_col, float* out0, float* out1) {
  l0 += __shfl_xor_sync(kFullMask, l0, 1);
  l0 += __shfl_xor_sync(kFullMask, l0, 2);
  l1 += __shfl_xor_sync(kFullMask, l1, 1);
  l1 += __shfl_xor_sync(kFullMask, l1, 2);
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
  const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    const int col = dn * 8 + quad_col;
    if (col >= d) continue;  // d % 4 == 0: both columns in or both out.
    if (row0 < tokens) {
      *reinterpret_cast<float2*>(out0 + col) = make_float2(o(dn, 0) * inv0, o(dn, 1) * inv0);
    }
    if (row0 + 8 < tokens) {
      *reinterpret_cast<float2*>(out1 + col) = make_float2(o(dn, 2) * inv1, o(dn, 3) * inv1);
    }
  }
}

// The head dimension of the warpgroup kernels.
inline constexpr int kWgmmaHeadDim = 256;

// Variant 5 (`skew` false) or 6 (true) over the keys and values p.kb / p.vb already rounded:
// attention_wgmma.hip, in sm_90a builds (CAIRN_HIP_WGMMA) only.
hipError_t LaunchWgmma(const MmaParams& p, int q_heads, bool skew, hipStream_t stream);

}  // namespace cairn::infer::hip::attention_mma

#endif  // !__HIP_PLATFORM_AMD__

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_ATTENTION_MMA_DEVICE_H_
