// Prefill attention on the matrix units: flash-style causal GQA attention whose two products
// (Q K^T and P V) run as bf16 x bf16 -> fp32 matrix instructions (NVIDIA mma.sync m16n8k16,
// sm_80 and later). q, k and v stay fp32 in memory; a first kernel rounds the call's keys and
// values to bf16 once into the workspace (keys as they are, values transposed, zeros past the
// last key), which the attention blocks then copy tile by tile into shared memory with
// asynchronous copies, the next tile's copy in flight while the current one is multiplied. A
// block rounds its query tile to bf16 itself, and the softmax weights P are rounded to bf16 for
// the second product. Scores, the running maxima and sums, and the output accumulate in fp32.
//
// Order: a block takes 128 (or, variants 2 and 4, 64) query rows of one q head (16 per warp) and
// walks the keys in tiles of 64 from key 0 up to its last row's position. Each output element is a
// fixed sequence of matrix instructions over those tiles; a row's scores depend only on its own
// query and the tile's keys, and a tile with no key visible to a row leaves that row's maximum, sum
// and output unchanged (scale 1, weights 0). So a row's bits depend only on its query, its position
// and the keys up to it, never on the other rows of the pass or where the pass starts.

#include <cstdint>

#include "services/infer/kernels/hip/attention_mma_device.h"
#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {

#if defined(__HIP_PLATFORM_AMD__)

// mma.sync is NVIDIA's: the fp32 kernel (attention.hip) serves AMD.
bool AttentionMmaSupported(const AttentionLaunch&, int) { return false; }
int64_t AttentionMmaWorkspaceBytes(const AttentionLaunch&) { return 0; }
hipError_t AttentionMma(const AttentionLaunch&, int, void*, hipStream_t) {
  return hipErrorNotSupported;
}

#else

namespace {

using attention_mma::BareExp2;
using attention_mma::kFullMask;
using attention_mma::kKeys;
using attention_mma::MmaParams;
using attention_mma::NamedBarrier;
using attention_mma::PackBf16;
using attention_mma::PackBf16Cvt;
using attention_mma::SoftmaxTile;
using attention_mma::StoreBf16x4;
using attention_mma::StoreRows;
using attention_mma::TileRows;

constexpr int kPad = 8;    // bf16 padding per shared row: conflict-free fragment loads.

// Keys and values (rows of kv_ld floats, head hk at column hk * d) rounded to bf16 into kb
// ([kv heads][keys_pad][dd], zeros past d and past `keys`) and vb ([kv heads][dd][keys_pad]).
__global__ void ConvertKvKernel(const float* k, const float* v, int64_t keys, int64_t kv_ld, int d,
                                int dd, int64_t keys_pad, int64_t total, uint16_t* kb,
                                uint16_t* vb) {
  KernelEntry();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // e runs over [kv head][key][dd] for the keys; the values' element is its transpose.
    const int c = static_cast<int>(e % dd);
    const int64_t key = (e / dd) % keys_pad;
    const int64_t hk = e / (dd * keys_pad);
    const bool in = key < keys && c < d;
    const int64_t at = key * kv_ld + hk * d + c;
    kb[e] = in ? FloatToBf16(k[at]) : 0;
    // The values: index e read as [kv head][dd][keys_pad].
    const int64_t vkey = e % keys_pad;
    const int vc = static_cast<int>((e / keys_pad) % dd);
    const bool vin = vkey < keys && vc < d;
    vb[e] = vin ? FloatToBf16(v[vkey * kv_ld + hk * d + vc]) : 0;
  }
}

// ConvertKvKernel's output by two kernels with 16-byte accesses and no 64-bit division per
// element (variants 3 and 4): the same FloatToBf16 of the same values into the same places.
// Keys: a thread per 4 columns of a key row (the padded row dd / 4 threads, blocks of
// kConvertThreads rows' worth). Grid (keys_pad * dd / 4 / kConvertThreads, kv heads).
constexpr int kConvertThreads = 256;
__global__ void __launch_bounds__(kConvertThreads)
    ConvertKeysKernel(const float* k, int64_t keys, int64_t kv_ld, int d, int dd,
                      int64_t keys_pad, uint16_t* kb) {
  KernelEntry();
  const int quads = dd / 4;
  const int64_t at = static_cast<int64_t>(blockIdx.x) * kConvertThreads + threadIdx.x;
  const int64_t key = at / quads;
  const int c = static_cast<int>(at % quads) * 4;
  const int64_t hk = blockIdx.y;
  if (key >= keys_pad) return;
  float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (key < keys && c < d) {
    x = *reinterpret_cast<const float4*>(k + key * kv_ld + hk * d + c);
  }
  uint2 r;
  r.x = static_cast<uint32_t>(FloatToBf16(x.x)) | (static_cast<uint32_t>(FloatToBf16(x.y)) << 16);
  r.y = static_cast<uint32_t>(FloatToBf16(x.z)) | (static_cast<uint32_t>(FloatToBf16(x.w)) << 16);
  *reinterpret_cast<uint2*>(kb + (hk * keys_pad + key) * dd + c) = r;
}

// Values, transposed through shared memory: a block takes 64 keys x 64 columns of one kv head,
// reads them as rows (16 threads a key, 16 bytes each), rounds them into a [column][key] tile
// (rows of 66 values: a warp's stores meet at most two to a bank), and writes each column's 64
// keys as 128 contiguous bytes (8 threads, 16 bytes each, read from the tile as 4-byte words).
// Grid (keys_pad / 64, dd / 64, kv heads).
__global__ void __launch_bounds__(kConvertThreads)
    ConvertValuesKernel(const float* v, int64_t keys, int64_t kv_ld, int d, int dd,
                        int64_t keys_pad, uint16_t* vb) {
  KernelEntry();
  constexpr int kTile = 64;
  constexpr int kStride = kTile + 2;
  __shared__ __align__(16) uint16_t tile[kTile * kStride];
  const int64_t key0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int c0 = static_cast<int>(blockIdx.y) * kTile;
  const int64_t hk = blockIdx.z;
  const int t = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int i = 0; i < kTile * kTile / 4 / kConvertThreads; ++i) {
    const int r = t / 16 + i * (kConvertThreads / 16);  // The key within the tile.
    const int c = (t % 16) * 4;                          // The first of 4 columns.
    const int64_t key = key0 + r;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (key < keys && c0 + c < d) {
      x = *reinterpret_cast<const float4*>(v + key * kv_ld + hk * d + c0 + c);
    }
    tile[(c + 0) * kStride + r] = FloatToBf16(x.x);
    tile[(c + 1) * kStride + r] = FloatToBf16(x.y);
    tile[(c + 2) * kStride + r] = FloatToBf16(x.z);
    tile[(c + 3) * kStride + r] = FloatToBf16(x.w);
  }
  __syncthreads();
  const uint32_t* words = reinterpret_cast<const uint32_t*>(tile);
#pragma unroll
  for (int i = 0; i < kTile * kTile / 8 / kConvertThreads; ++i) {
    const int u = t + i * kConvertThreads;
    const int c = u / 8;        // The column.
    const int r = (u % 8) * 8;  // Its first of 8 keys.
    const uint32_t* w = words + (c * kStride + r) / 2;
    *reinterpret_cast<uint4*>(vb + (hk * dd + c0 + c) * keys_pad + key0 + r) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// A block's layout. Every variant computes the same bits: they differ in how many rows a block
// takes, how tiles are buffered and how fragments reach registers, never in the arithmetic.
//   kWarps: 16 query rows per warp.
//   kSplit: false, keys and values share a stage, two stages (the next tile's copy in flight
//     while the current one is multiplied); true, one buffer of keys and one of values (the
//     values copied while the scores are computed, the next keys while the values are
//     multiplied): half the shared memory, so two blocks of 4 warps share a multiprocessor.
//   kFast: fragments by ldmatrix (a quarter of the shared-memory load instructions), only tiles
//     that cross one of the warp's rows' positions masked, the weights packed by one conversion
//     instruction, and the output's rescale skipped when no row of the warp has a new maximum
//     (a scale of exactly 1). Off: 32-bit fragment loads, every tile masked (variant 0).
template <int D, int kWarps, bool kSplit>
constexpr size_t MmaSharedBytes() {
  constexpr size_t kRows = kWarps * 16;
  constexpr size_t kBuffers = kSplit ? 1 : 2;
  // The query tile, and the buffers of the key and value tiles.
  return (kRows * (D + kPad) + kBuffers * kKeys * (D + kPad) + kBuffers * D * (kKeys + kPad)) *
         sizeof(uint16_t);
}

// 16 bytes from global `src` to shared `dst` without passing through registers.
__device__ inline void CopyAsync16(uint16_t* dst, const uint16_t* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned int to = static_cast<unsigned int>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(src));
#else
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}
__device__ inline void CopyAsyncCommit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most `kPending` committed groups of this thread are still in flight.
template <int kPending>
__device__ inline void CopyAsyncWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

__device__ inline uint32_t SharedAddress(const uint16_t* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ inline uint32_t Load32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// kSkew (variant 3; unsplit, kFast): the block's second half of warps ("late") multiplies each
// tile's values one tile later than the first half: after the barrier of tile j it runs P V of
// tile j - 1 (its weights kept packed in registers), then the scores and weights of tile j,
// while the first half runs tile j's scores, weights and P V. So on every scheduler (warps w and
// w + 4) one warp's softmax overlaps the other's matrix instructions instead of both waiting
// on the same phase. One barrier a tile: after it the next keys are copied by every thread
// into the buffer tile j - 1 used, the next values by the late half once its warps are past
// P V of tile j - 1 (a barrier of those warps alone). Each output element still sees its
// rescales and P V products in tile order: variant 1's operations and bits.
// kTree (variants 3 and 4): a tile's row maxima by a tree of fmaxf instead of a chain (the
// maximum of the same values whatever the order: fmaxf drops NaNs, and a zero's sign reaches
// only exp2 of a difference, 1 either way), and the weights by the bare exp2 instruction where
// it gives exp2f's bits (SoftmaxTile's kBareExp).
template <int D, int kWarps, bool kSplit, bool kFast, bool kSkew, bool kTree>
__global__ void __launch_bounds__(kWarps * 32, kSplit ? 2 : 1) AttentionMmaKernel(MmaParams p) {
  KernelEntry();
  static_assert(!kSkew || (!kSplit && kFast && kWarps % 2 == 0), "skew: unsplit, kFast");
  extern __shared__ __align__(16) uint16_t smem[];
  constexpr int kRows = kWarps * 16;
  constexpr int kThreads = kWarps * 32;
  constexpr int kBuffers = kSplit ? 1 : 2;
  constexpr int kQs = D + kPad;                  // Row stride of the Q and K tiles.
  constexpr int kVs = kKeys + kPad;              // Row stride of the transposed V tile.
  uint16_t* qs = smem;                           // [kRows][kQs]
  uint16_t* ks0 = qs + kRows * kQs;              // [kBuffers][kKeys][kQs]
  uint16_t* vt0 = ks0 + kBuffers * kKeys * kQs;  // [kBuffers][D][kVs]: V transposed.
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int h = blockIdx.x;
  const int64_t hk = h / p.group;
  const uint16_t* kg = p.kb + hk * p.keys_pad * D;
  const uint16_t* vg = p.vb + hk * D * p.keys_pad;
  // Blocks start in order of falling work (the last query rows see the most keys), every head's
  // block of a row range together, so the last blocks to start are the shortest.
  const int64_t t0 = static_cast<int64_t>(gridDim.y - 1 - blockIdx.y) * kRows;
  constexpr int kVecs = D / 4;  // float4s per padded row.

  // The Q tile, zeros past the pass's tokens and past d (d % 4 == 0).
  for (int e = tid; e < kRows * kVecs; e += kThreads) {
    const int r = e / kVecs;
    const int c = (e % kVecs) * 4;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (t0 + r < p.tokens && c < p.d) {
      x = *reinterpret_cast<const float4*>(p.q + (t0 + r) * p.q_ld + static_cast<int64_t>(h) * p.d +
                                           c);
    }
    StoreBf16x4(qs + r * kQs + c, 1, x);
  }

  const int64_t last_row = (t0 + kRows < p.tokens ? t0 + kRows : p.tokens) - 1;
  const int64_t keys = p.past + last_row + 1;
  const int64_t tiles = (keys + kKeys - 1) / kKeys;
  const int frag_row = warp * 16 + lane / 4;  // This thread's rows: frag_row and frag_row + 8.
  const int64_t pos0 = p.past + t0 + frag_row;
  const int64_t pos1 = pos0 + 8;
  // The warp's first row's position: a tile whose last key is at most this is visible whole to
  // every row of the warp.
  const int64_t warp_pos = p.past + t0 + warp * 16;
  const int quad_col = (lane % 4) * 2;
  // ldmatrix addresses: lane l gives row l % 8 of matrix l / 8. For Q (the A fragment):
  // matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
  // For K and transposed V (B fragments of two column groups of 8): (group 0, k 0-7),
  // (group 0, k 8-15), (group 1, k 0-7), (group 1, k 8-15).
  const int q_lane = (warp * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kQs + (lane / 16) * 8;
  const int k_lane = ((lane / 16) * 8 + lane % 8) * kQs + ((lane / 8) % 2) * 8;
  const int v_lane = ((lane / 16) * 8 + lane % 8) * kVs + ((lane / 8) % 2) * 8;

  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dn][e] = 0.0f;
  }
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  // Tile j's keys or values into buffer j % kBuffers: 16-byte pieces, 8 bf16 each. Keys past the
  // block's last visible key are copied too (the workspace holds them, or zeros past the
  // call's keys); the mask gives them weight 0, so they add exact zeros.
  const auto copy_keys = [&](int64_t j) {
    uint16_t* ks = ks0 + (j % kBuffers) * kKeys * kQs;
    const int64_t key0 = j * kKeys;
    constexpr int kKeyPieces = D / 8;
    for (int e = tid; e < kKeys * kKeyPieces; e += kThreads) {
      const int r = e / kKeyPieces;
      const int c = (e % kKeyPieces) * 8;
      CopyAsync16(ks + r * kQs + c, kg + (key0 + r) * D + c);
    }
  };
  const auto copy_values = [&](int64_t j) {
    uint16_t* vt = vt0 + (j % kBuffers) * D * kVs;
    const int64_t key0 = j * kKeys;
    constexpr int kValuePieces = kKeys / 8;
    for (int e = tid; e < D * kValuePieces; e += kThreads) {
      const int c = e / kValuePieces;
      const int r = (e % kValuePieces) * 8;
      CopyAsync16(vt + c * kVs + r, vg + c * p.keys_pad + key0 + r);
    }
  };
  // kSkew: the late half's copies of the next tile's values.
  [[maybe_unused]] const auto copy_values_late = [&](int64_t j) {
    uint16_t* vt = vt0 + (j % kBuffers) * D * kVs;
    const int64_t key0 = j * kKeys;
    constexpr int kValuePieces = kKeys / 8;
    for (int e = tid - kThreads / 2; e < D * kValuePieces; e += kThreads / 2) {
      const int c = e / kValuePieces;
      const int r = (e % kValuePieces) * 8;
      CopyAsync16(vt + c * kVs + r, vg + c * p.keys_pad + key0 + r);
    }
  };
  // O += P V over a tile's values `vt`, P packed: the score fragments of two key groups of 8
  // form one A fragment of 16 keys.
  [[maybe_unused]] const auto multiply_values = [&](const uint32_t(&pa)[kKeys / 16][4],
                                                    const uint16_t* vt) {
    const uint32_t va = SharedAddress(vt + v_lane);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        LoadMatrixX4(b, va + (dp * 16 * kVs + kk * 16) * 2);
        Mma(o[2 * dp], pa[kk], b[0], b[1]);
        Mma(o[2 * dp + 1], pa[kk], b[2], b[3]);
      }
    }
  };
  [[maybe_unused]] const bool late = kSkew && warp >= kWarps / 2;
  [[maybe_unused]] uint32_t pa[kKeys / 16][4];  // kSkew: this tile's weights, packed.
  if (tiles > 0) {
    copy_keys(0);
    if constexpr (kSplit) CopyAsyncCommit();
    copy_values(0);
    CopyAsyncCommit();
  }
  for (int64_t j = 0; j < tiles; ++j) {
    const int64_t key0 = j * kKeys;
    const uint16_t* ks = ks0 + (j % kBuffers) * kKeys * kQs;
    const uint16_t* vt = vt0 + (j % kBuffers) * D * kVs;
    if constexpr (kSkew) {
      CopyAsyncWait<0>();  // Tile j's keys (and, late half, values).
    } else if constexpr (kSplit) {
      CopyAsyncWait<1>();  // Tile j's keys (its values may still be in flight).
    } else if (j + 1 < tiles) {
      copy_keys(j + 1);  // Into the buffer the previous tile's readers are done with.
      copy_values(j + 1);
      CopyAsyncCommit();
      CopyAsyncWait<1>();
    } else {
      CopyAsyncWait<0>();
    }
    __syncthreads();  // Tile j (and the query tile) complete for every thread.
    if constexpr (kSkew) {
      // Every warp is past tile j - 1's keys, the early half past its values.
      if (j + 1 < tiles) copy_keys(j + 1);
      if (late) {
        if (j > 0) {
          multiply_values(pa, vt0 + ((j - 1) % kBuffers) * D * kVs);
          NamedBarrier(1, kThreads / 2);  // The late half is past tile j - 1's values.
        }
        if (j + 1 < tiles) copy_values_late(j + 1);
      }
      CopyAsyncCommit();
    }

    // Scores of this warp's 16 rows against the tile's 64 keys.
    float s[kKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
    }
    if constexpr (kFast) {
      const uint32_t qa = SharedAddress(qs + q_lane);
      const uint32_t ka = SharedAddress(ks + k_lane);
#pragma unroll 4
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        LoadMatrixX4(a, qa + kk * 32);
#pragma unroll
        for (int np = 0; np < kKeys / 16; ++np) {
          uint32_t b[4];
          LoadMatrixX4(b, ka + (np * 16 * kQs + kk * 16) * 2);
          Mma(s[2 * np], a, b[0], b[1]);
          Mma(s[2 * np + 1], a, b[2], b[3]);
        }
      }
    } else {
#pragma unroll 4
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint16_t* qa = qs + frag_row * kQs + kk * 16 + quad_col;
        const uint32_t a[4] = {Load32(qa), Load32(qa + 8 * kQs), Load32(qa + 8),
                               Load32(qa + 8 * kQs + 8)};
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) {
          const uint16_t* kb = ks + (nt * 8 + lane / 4) * kQs + kk * 16 + quad_col;
          Mma(s[nt], a, Load32(kb), Load32(kb + 8));
        }
      }
    }
    if constexpr (kSplit) {
      __syncthreads();  // Every warp is done with tile j's keys.
      if (j + 1 < tiles) copy_keys(j + 1);
      CopyAsyncCommit();  // Possibly empty: the group count stays one per tile and kind.
    }

    SoftmaxTile<D, kFast, kTree, kTree>([&](int nt, int e) -> float& { return s[nt][e]; },
                                        [&](int dn, int e) -> float& { return o[dn][e]; },
                                        {key0, pos0, pos1, warp_pos, quad_col, p.scale_log2}, m0,
                                        m1, l0, l1);

    if constexpr (kSplit) {
      CopyAsyncWait<1>();  // Tile j's values (the next keys may still be in flight).
      __syncthreads();
    }
    // O += P V: the score fragments of two key groups of 8 form one A fragment of 16 keys.
    if constexpr (kSkew) {
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        pa[kk][0] = PackBf16Cvt(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = PackBf16Cvt(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = PackBf16Cvt(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = PackBf16Cvt(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
      if (!late) multiply_values(pa, vt);  // The late half's turn comes after the next barrier.
    } else if constexpr (kFast) {
      const uint32_t va = SharedAddress(vt + v_lane);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        const uint32_t a[4] = {PackBf16Cvt(s[2 * kk][0], s[2 * kk][1]),
                               PackBf16Cvt(s[2 * kk][2], s[2 * kk][3]),
                               PackBf16Cvt(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               PackBf16Cvt(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          LoadMatrixX4(b, va + (dp * 16 * kVs + kk * 16) * 2);
          Mma(o[2 * dp], a, b[0], b[1]);
          Mma(o[2 * dp + 1], a, b[2], b[3]);
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        const uint32_t a[4] = {PackBf16(s[2 * kk][0], s[2 * kk][1]),
                               PackBf16(s[2 * kk][2], s[2 * kk][3]),
                               PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
          const uint16_t* vb = vt + (dn * 8 + lane / 4) * kVs + kk * 16 + quad_col;
          Mma(o[dn], a, Load32(vb), Load32(vb + 8));
        }
      }
    }
    if constexpr (!kSkew) {
      __syncthreads();  // Every warp is done with tile j's values (and, unsplit, its keys).
    }
    if constexpr (kSplit) {
      if (j + 1 < tiles) copy_values(j + 1);
      CopyAsyncCommit();
    }
  }
  if constexpr (kSkew) {
    // The late half's last tile (no copy writes its buffer any more).
    if (late && tiles > 0) multiply_values(pa, vt0 + ((tiles - 1) % kBuffers) * D * kVs);
  }

  const int64_t row0 = t0 + frag_row;
  float* out0 = p.out + row0 * p.q_ld + static_cast<int64_t>(h) * p.d;
  StoreRows<D>([&](int dn, int e) -> float& { return o[dn][e]; }, l0, l1, row0, p.tokens, p.d,
               quad_col, out0, out0 + 8 * p.q_ld);
}


template <int D, int kWarps, bool kSplit, bool kFast, bool kSkew, bool kTree>
hipError_t LaunchMmaKernel(const MmaParams& p, int q_heads, hipStream_t stream) {
  constexpr size_t kShared = MmaSharedBytes<D, kWarps, kSplit>();
  const auto kernel = AttentionMmaKernel<D, kWarps, kSplit, kFast, kSkew, kTree>;
  hipError_t e = AllowSharedBytes(kernel, kShared);
  if (e != hipSuccess) return e;
  if constexpr (kSplit) {
    // Two blocks a multiprocessor need the largest shared-memory carveout.
    e = hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                            hipFuncAttributePreferredSharedMemoryCarveout, 100);
    if (e != hipSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned int>(q_heads),
                  static_cast<unsigned int>(CeilDiv(p.tokens, kWarps * 16)));
  // clang-format 14 splits the launch's closing >>> after a template's arguments.
  // clang-format off
  LaunchKernel(kernel, grid, kWarps * 32, kShared, stream, p);
  // clang-format on
  return hipGetLastError();
}

template <int D>
hipError_t LaunchMma(const MmaParams& p, const float* k, const float* v, int64_t kv_ld,
                     int kv_heads, int q_heads, int variant, hipStream_t stream) {
  const int64_t total = static_cast<int64_t>(kv_heads) * p.keys_pad * D;
  if (variant < 3) {
    // clang-format off
    LaunchKernel(ConvertKvKernel, GridFor(total, kConvertThreads), kConvertThreads, 0, stream, k, v,
                 p.past + p.tokens, kv_ld, p.d, D, p.keys_pad, total, p.kb, p.vb);
    // clang-format on
  } else {
    const dim3 keys_grid(static_cast<unsigned int>(p.keys_pad * (D / 4) / kConvertThreads),
                         static_cast<unsigned int>(kv_heads));
    const dim3 values_grid(static_cast<unsigned int>(p.keys_pad / 64), D / 64,
                           static_cast<unsigned int>(kv_heads));
    // clang-format off
    LaunchKernel(ConvertKeysKernel, keys_grid, kConvertThreads, 0, stream, k, p.past + p.tokens,
                 kv_ld, p.d, D, p.keys_pad, p.kb);
    LaunchKernel(ConvertValuesKernel, values_grid, kConvertThreads, 0, stream, v, p.past + p.tokens,
                 kv_ld, p.d, D, p.keys_pad, p.vb);
    // clang-format on
  }
  switch (variant) {
    case 0:
      return LaunchMmaKernel<D, 8, false, false, false, false>(p, q_heads, stream);
    case 1:
      return LaunchMmaKernel<D, 8, false, true, false, false>(p, q_heads, stream);
    case 2:
      return LaunchMmaKernel<D, 4, true, true, false, false>(p, q_heads, stream);
    case 3:
      return LaunchMmaKernel<D, 8, false, true, true, true>(p, q_heads, stream);
    case 4:
      return LaunchMmaKernel<D, 4, true, true, false, true>(p, q_heads, stream);
    default:
#if defined(CAIRN_HIP_WGMMA)
      if constexpr (D == attention_mma::kWgmmaHeadDim) {
        return attention_mma::LaunchWgmma(p, q_heads, variant == 6, stream);
      }
#endif
      // Variants 5 and 6 elsewhere (other head dimensions, builds without wgmma): variant 3.
      return LaunchMmaKernel<D, 8, false, true, true, true>(p, q_heads, stream);
  }
}

}  // namespace

bool AttentionMmaSupported(const AttentionLaunch& a, int max_shared_bytes) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return a.split_keys == 0 && a.head_dim > 0 && a.head_dim <= 256 && a.head_dim % 4 == 0 &&
         a.q_heads % a.kv_heads == 0 && aligned(a.q) && aligned(a.k) && aligned(a.v) &&
         reinterpret_cast<uintptr_t>(a.out) % 8 == 0 &&
         MmaSharedBytes<256, 8, false>() <= static_cast<size_t>(max_shared_bytes) &&
         a.tokens <= int64_t{65535} * 64;
}

// Keys padded to whole tiles; head dimensions padded to the kernel's D.
int64_t AttentionMmaWorkspaceBytes(const AttentionLaunch& a) {
  const int64_t dd = a.head_dim <= 64 ? 64 : a.head_dim <= 128 ? 128 : 256;
  return 2 * static_cast<int64_t>(a.kv_heads) * CeilDiv(a.past + a.tokens, kKeys) * kKeys * dd *
         static_cast<int64_t>(sizeof(uint16_t));
}

hipError_t AttentionMma(const AttentionLaunch& a, int variant, void* workspace,
                        hipStream_t stream) {
  if (a.tokens == 0) return hipSuccess;
  MmaParams p;
  p.q = a.q;
  p.out = a.out;
  p.tokens = a.tokens;
  p.past = a.past;
  p.group = a.q_heads / a.kv_heads;
  p.d = a.head_dim;
  p.scale_log2 = a.scale * 1.4426950408889634f;
  p.q_ld = static_cast<int64_t>(a.q_heads) * a.head_dim;
  p.keys_pad = CeilDiv(a.past + a.tokens, kKeys) * kKeys;
  const int64_t kv_ld = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  auto* kb = static_cast<uint16_t*>(workspace);
  p.kb = kb;
  p.vb = kb + AttentionMmaWorkspaceBytes(a) / 2 / static_cast<int64_t>(sizeof(uint16_t));
  if (a.head_dim <= 64) {
    return LaunchMma<64>(p, a.k, a.v, kv_ld, a.kv_heads, a.q_heads, variant, stream);
  }
  if (a.head_dim <= 128) {
    return LaunchMma<128>(p, a.k, a.v, kv_ld, a.kv_heads, a.q_heads, variant, stream);
  }
  return LaunchMma<256>(p, a.k, a.v, kv_ld, a.kv_heads, a.q_heads, variant, stream);
}

#endif  // __HIP_PLATFORM_AMD__

}  // namespace cairn::infer::hip
