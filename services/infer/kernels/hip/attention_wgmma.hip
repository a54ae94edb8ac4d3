// Prefill attention variants 5 and 6 (head dimension 256, sm_90a builds): attention_mma.hip's
// algorithm and bits with both products on Hopper's warpgroup matrix instructions (`wgmma`).
// attention_mma.hip rounds the keys and values and launches these kernels through
// attention_mma::LaunchWgmma; elsewhere that file runs variant 3 for both.

#include <cstdint>
#include <type_traits>

#include "services/infer/kernels/hip/attention_mma_device.h"
#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/hip/wgmma_device.h"

#if defined(CAIRN_HIP_WGMMA) && !defined(__HIP_PLATFORM_AMD__)

namespace cairn::infer::hip::attention_mma {
namespace {

// Variant 5 (head dim 256, sm_90a builds): variant 3's operations with both products on the
// warpgroup instructions. A block of two warpgroups takes 128 query rows (warp w rows 16 w ..
// 16 w + 15, as variant 3's); the query tile and each tile's keys and transposed values sit in
// shared memory in the instructions' 128-byte swizzled layout (the query and keys as sub-tiles
// of 64 head columns), two stages of keys and values. The scores of a warpgroup's 64 rows
// against a tile's 64 keys are one m64n64 instruction a k16 step over the head dimension in
// order; their accumulators hold the values variant 3's m16n8 fragments hold, so the mask, the
// maxima (the tree), the weights and sums and the rescale are variant 3's code; the weights,
// packed to bf16 as there, are the register operand of P V, one m64n256 instruction a k16 step
// over the tile's keys in order. Each output element so sees the same sequence of operations:
// the bits of variants 0-4 (tested).
// Variant 6 (kSkew): the second warpgroup one phase behind the first, as variant 3's second half
// of warps (below, at the loop), so that one warpgroup's softmax meets the other's matrix
// instructions.
constexpr int kWgD = kWgmmaHeadDim;
constexpr int kWgRows = 128;
constexpr int kWgThreads = 256;
constexpr int kWgSub = 64 * wgmma::kRowBytes;   // A sub-tile: 64 rows of 64 bf16, 8 KiB.
constexpr int kWgQBytes = kWgRows * kWgD * 2;   // [warpgroup][head column / 64] sub-tiles.
constexpr int kWgKBytes = kKeys * kWgD * 2;     // [head column / 64] sub-tiles of 64 keys.
constexpr int kWgVBytes = kWgD * kKeys * 2;     // [head column][64 keys]: V transposed.
constexpr int kWgStageBytes = kWgKBytes + kWgVBytes;
constexpr size_t kWgSharedBytes = kWgQBytes + 2 * kWgStageBytes + wgmma::kAlign;

template <bool kSkew>
__global__ void __launch_bounds__(kWgThreads, 1) AttentionWgmmaKernel(MmaParams p) {
  KernelEntry();
  constexpr int D = kWgD;
  extern __shared__ __align__(16) unsigned char wg_smem[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(wg_smem));
  const uint32_t q_at = (raw + wgmma::kAlign - 1) / wgmma::kAlign * wgmma::kAlign;
  unsigned char* const q_tile = wg_smem + (q_at - raw);
  const uint32_t stage0 = q_at + kWgQBytes;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int wg = warp / 4;
  const int h = blockIdx.x;
  const int64_t hk = h / p.group;
  const uint16_t* kg = p.kb + hk * p.keys_pad * D;
  const uint16_t* vg = p.vb + hk * D * p.keys_pad;
  const int64_t t0 = static_cast<int64_t>(gridDim.y - 1 - blockIdx.y) * kWgRows;
  constexpr int kVecs = D / 4;

  // The query tile (variant 3's rounding), zeros past the pass's tokens and past d.
  for (int e = tid; e < kWgRows * kVecs; e += kWgThreads) {
    const int r = e / kVecs;
    const int c = (e % kVecs) * 4;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (t0 + r < p.tokens && c < p.d) {
      x = *reinterpret_cast<const float4*>(p.q + (t0 + r) * p.q_ld + static_cast<int64_t>(h) * p.d +
                                           c);
    }
    auto* dst = reinterpret_cast<uint16_t*>(q_tile + ((r / 64) * (D / 64) + c / 64) * kWgSub +
                                            wgmma::Swizzled(r % 64, (c % 64) / 8)) +
                c % 8;
    StoreBf16x4(dst, 1, x);
  }

  const int64_t last_row = (t0 + kWgRows < p.tokens ? t0 + kWgRows : p.tokens) - 1;
  const int64_t keys = p.past + last_row + 1;
  const int64_t tiles = (keys + kKeys - 1) / kKeys;
  const int frag_row = warp * 16 + lane / 4;
  const int64_t pos0 = p.past + t0 + frag_row;
  const int64_t pos1 = pos0 + 8;
  const int64_t warp_pos = p.past + t0 + warp * 16;
  const int quad_col = (lane % 4) * 2;

  // Tile j's keys and values into stage j % 2 in 16-byte pieces (8 bf16). A thread's pieces
  // sit at fixed strides from its first, so only its first piece's addresses are computed:
  // keys, pieces tid + 256 i of a tile (row tid / 32 + 8 i, chunk tid % 32: 8 rows further,
  // the same swizzle); values, pieces t + kN i when kN threads copy them (thread t of them:
  // head column t / 8 + kN / 8 i, key chunk t % 8).
  constexpr int kKeyPieces = D / 8;  // A key row's.
  constexpr int kValuePieces = kKeys / 8;  // A transposed value row's.
  static_assert(kWgThreads % kKeyPieces == 0 && (kWgThreads / kKeyPieces) % 8 == 0);
  const uint32_t key_to = static_cast<uint32_t>((tid % kKeyPieces / 8) * kWgSub) +
                          wgmma::Swizzled(tid / kKeyPieces, tid % kKeyPieces % 8);
  const uint16_t* const key_from = kg + (tid / kKeyPieces) * D + (tid % kKeyPieces) * 8;
  const auto copy_keys = [&](int64_t j) {
    const uint32_t to = stage0 + static_cast<uint32_t>((j % 2) * kWgStageBytes) + key_to;
    const uint16_t* from = key_from + j * kKeys * D;
    constexpr int kRows = kWgThreads / kKeyPieces;
#pragma unroll
    for (int i = 0; i < kKeys / kRows; ++i) {
      wgmma::CopyChunk(to + static_cast<uint32_t>(i * kRows * wgmma::kRowBytes),
                       from + i * kRows * D, true);
    }
  };
  // kN threads from `first` copy the values (`threads`: std::integral_constant<int, kN>).
  const auto copy_values = [&](auto threads, int64_t j, int first) {
    constexpr int kN = decltype(threads)::value;
    static_assert(kN % (8 * kValuePieces) == 0);
    constexpr int kCols = kN / kValuePieces;
    const int t = tid - first;
    const uint32_t to = stage0 + static_cast<uint32_t>((j % 2) * kWgStageBytes) + kWgKBytes +
                        wgmma::Swizzled(t / kValuePieces, t % kValuePieces);
    const uint16_t* from =
        vg + (t / kValuePieces) * p.keys_pad + j * kKeys + (t % kValuePieces) * 8;
    const int64_t step = kCols * p.keys_pad;
#pragma unroll
    for (int i = 0; i < D / kCols; ++i) {
      wgmma::CopyChunk(to + static_cast<uint32_t>(i * kCols * wgmma::kRowBytes), from, true);
      from += step;
    }
  };

  float o[D / 2];  // o[4 dn + e]: variant 3's o[dn][e].
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  // The weights of a tile packed to bf16 (two key groups of 8 a register operand of 16 keys).
  uint32_t pa[kKeys / 16][4];

  // Scores of this warpgroup's 64 rows against tile j's 64 keys (s[4 nt + e]: variant 3's
  // s[nt][e]), variant 3's mask, maxima, weights, sums and rescale, and the weights into pa.
  const auto scores = [&](int64_t j) {
    const uint32_t ks = stage0 + static_cast<uint32_t>((j % 2) * kWgStageBytes);
    float s[kKeys / 2];
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) s[i] = 0.0f;
    wgmma::Fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t qa = q_at + static_cast<uint32_t>((wg * (D / 64) + kk / 4) * kWgSub);
      const uint32_t ka = ks + static_cast<uint32_t>((kk / 4) * kWgSub);
      wgmma::MmaSS64(s, wgmma::Descriptor(qa) + 2 * (kk % 4),
                     wgmma::Descriptor(ka) + 2 * (kk % 4));
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceAccumulators(s);
    SoftmaxTile<D, true, true, true>([&](int nt, int e) -> float& { return s[4 * nt + e]; },
                                     [&](int dn, int e) -> float& { return o[4 * dn + e]; },
                                     {j * kKeys, pos0, pos1, warp_pos, quad_col, p.scale_log2}, m0,
                                     m1, l0, l1);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      pa[kk][0] = PackBf16Cvt(s[8 * kk], s[8 * kk + 1]);
      pa[kk][1] = PackBf16Cvt(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = PackBf16Cvt(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = PackBf16Cvt(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };
  // O += P V for tile j: one m64n256 instruction a k16 step over the tile's keys in order.
  const auto multiply = [&](int64_t j) {
    const uint32_t vs = stage0 + static_cast<uint32_t>((j % 2) * kWgStageBytes) + kWgKBytes;
    wgmma::FenceAccumulators(o);
    wgmma::Fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      wgmma::MmaRS256(o, pa[kk], wgmma::Descriptor(vs) + 2 * kk);
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceAccumulators(o);
  };

  if (tiles > 0) {
    copy_keys(0);
    copy_values(std::integral_constant<int, kWgThreads>(), 0, 0);
    wgmma::CopyCommit();
  }
  if constexpr (!kSkew) {
    for (int64_t j = 0; j < tiles; ++j) {
      if (j + 1 < tiles) {
        // Into the stage the previous tile's readers are done with.
        copy_keys(j + 1);
        copy_values(std::integral_constant<int, kWgThreads>(), j + 1, 0);
        wgmma::CopyCommit();
        wgmma::CopyWait<1>();
      } else {
        wgmma::CopyWait<0>();
      }
      wgmma::FenceProxy();
      __syncthreads();  // Tile j (and the query tile) complete for every thread.
      scores(j);
      multiply(j);
      __syncthreads();  // Every warp is done with tile j's keys and values.
    }
  } else {
    // The late warpgroup (1) runs P V of tile j - 1 after tile j's barrier, then tile j's
    // scores; the early one (0) tile j's scores and P V. One barrier a tile: after it every
    // thread copies tile j + 1's keys into the stage of tile j - 1's (whose scores both
    // warpgroups finished before the barrier), and the late warpgroup tile j + 1's values once
    // its P V of tile j - 1 is done (a barrier of its threads alone). Each output element still
    // sees its rescales and P V products in tile order: variant 5's bits.
    const bool late = wg == 1;
    for (int64_t j = 0; j <= tiles; ++j) {
      wgmma::CopyWait<0>();
      wgmma::FenceProxy();
      __syncthreads();  // Tile j's keys and values (and the query tile) complete.
      if (j + 1 < tiles) {
        copy_keys(j + 1);
        wgmma::CopyCommit();
      }
      if (late) {
        if (j > 0) multiply(j - 1);
        NamedBarrier(1, kWgThreads / 2);  // The late warpgroup is done with tile j - 1's values.
        if (j + 1 < tiles) {
          copy_values(std::integral_constant<int, kWgThreads / 2>(), j + 1, kWgThreads / 2);
          wgmma::CopyCommit();
        }
        if (j < tiles) scores(j);
      } else if (j < tiles) {
        scores(j);
        multiply(j);
      }
    }
  }

  // Variant 3's sums and stores.
  const int64_t row0 = t0 + frag_row;
  float* out0 = p.out + row0 * p.q_ld + static_cast<int64_t>(h) * p.d;
  StoreRows<D>([&](int dn, int e) -> float& { return o[4 * dn + e]; }, l0, l1, row0, p.tokens,
               p.d, quad_col, out0, out0 + 8 * p.q_ld);
}

template <bool kSkew>
hipError_t LaunchWgmmaKernel(const MmaParams& p, int q_heads, hipStream_t stream) {
  const auto kernel = AttentionWgmmaKernel<kSkew>;
  const hipError_t e = AllowSharedBytes(kernel, kWgSharedBytes);
  if (e != hipSuccess) return e;
  const dim3 grid(static_cast<unsigned int>(q_heads),
                  static_cast<unsigned int>(CeilDiv(p.tokens, kWgRows)));
  LaunchKernel(kernel, grid, kWgThreads, kWgSharedBytes, stream, p);
  return hipGetLastError();
}

}  // namespace

hipError_t LaunchWgmma(const MmaParams& p, int q_heads, bool skew, hipStream_t stream) {
  return skew ? LaunchWgmmaKernel<true>(p, q_heads, stream)
              : LaunchWgmmaKernel<false>(p, q_heads, stream);
}

}  // namespace cairn::infer::hip::attention_mma

#endif  // CAIRN_HIP_WGMMA && !__HIP_PLATFORM_AMD__
