// Variant 5's decode blocks (attention_decode_variant 5; NVIDIA): decode attention on the matrix
// units with bf16 operands, as the prefill's bf16_attention computes, so other bits than
// variants 0 to 4 (whose fp32 chains over d keep every block busy issuing shared-memory loads:
// the HIP README, fifty-fourth round).
//
// A block takes one key range (at most kMmaTiles tiles of kBc keys) of one kv head with all of
// its query rows (at most kNarrowRows: one token of a GQA group of up to 8, or a few tokens of
// a smaller group), four warps, warp w the range's tile w. Each warp:
//   - S = Q K^T for its tile on the matrix units (m16n8k16: the rows padded to 16 with zeros,
//     q and the keys rounded to bf16 as they are loaded from their fp32 rows), scaled by the
//     softmax scale in fp32, -inf past each row's position and past the range;
//   - the range's maximum a row (a maximum over the four warps' maxima, exact), then
//     p = exp(s - max) rounded to bf16 (0 for a row without a visible key), and the row's sum
//     of its rounded weights, the lane's eight in key order, then a fixed tree over the quad;
//   - O^T = V^T P^T on the matrix units (the values rounded to bf16 as they are loaded; a row's
//     weights are the C fragment of its scores, so they go in as the B operand as they are).
// The four warps' sums and outputs are then added in warp order. A range's part_o, part_m and
// part_l are those the merge (attention.hip's MergeBlock) takes from every other variant.
// Every sum has a fixed order and nothing depends on the other rows or calls of a launch, so
// a sequence's result is the same alone or in any batch.

#include <atomic>
#include <cmath>
#include <cstdint>

#include "services/infer/kernels/hip/attention_decode_device.h"
#include "services/infer/kernels/hip/attention_device.h"
#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {
namespace {
std::atomic<int64_t> mma_launches{0};  // AttentionDecodeMmaLaunches().
}  // namespace

int64_t AttentionDecodeMmaLaunches() { return mma_launches.load(std::memory_order_relaxed); }

bool AttentionDecodeMmaSupported() {
#if !defined(__HIP_PLATFORM_AMD__)
  return true;
#else
  return false;
#endif
}

namespace attention {
namespace {

#if !defined(__HIP_PLATFORM_AMD__)

constexpr int kMmaTiles = kDecodeWarps;  // A tile a warp: ranges of up to 128 keys.
constexpr int kMmaMaxHeadDim = 256;      // The widest instantiation (LaunchDecodeMma<256>).
static_assert(kNarrowRows == 8, "a block's rows are the m16n8k16 tile's first eight");
// A warp streams its tile's keys, then its values, through its own ring of kMmaSlots pieces of
// kMmaChunk dims of its kBc keys (cp.async; kMmaSlots - 1 pieces ahead of the one computed).
constexpr int kMmaChunk = 64;
constexpr int kMmaStride = kMmaChunk + 8;  // Row pairs of a quarter-warp on distinct banks.
constexpr int kMmaSlots = 3;
constexpr int kMmaSlotFloats = kBc * kMmaStride;
constexpr int kMmaRingFloats = kMmaSlots * kMmaSlotFloats;

// Shared floats of a block: the warps' rings (their outputs, [warp][kNarrowRows][d], reuse
// them at the end) and each warp's maximum and sum a row.
size_t MmaSharedFloats(int d) {
  const size_t rings = static_cast<size_t>(kDecodeWarps) * kMmaRingFloats;
  const size_t outs = static_cast<size_t>(kDecodeWarps) * kNarrowRows * d;
  return (rings > outs ? rings : outs) + 2 * kDecodeWarps * kNarrowRows;
}

// Two fp32 values as a bf16 pair (lo in the low half), rounding to nearest even.
__device__ inline uint32_t PackPair(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// A bf16-rounded fp32 value.
__device__ inline float RoundToBf16(float x) {
  return __uint_as_float(static_cast<uint32_t>(RoundBf16(x)) << 16);
}

// Piece `c` of a warp's stream: c < chunks the keys' dims [kMmaChunk c, ...), then the values'
// (c - chunks). Keys from k_end on are zeros. One copy group.
__device__ inline void MmaCopyPiece(const Params& p, int kvh, int64_t kt, int64_t k_end, int c,
                                    int chunks, float* slot, int lane) {
  const float* src = c < chunks ? p.k : p.v;
  const int dim0 = (c < chunks ? c : c - chunks) * kMmaChunk;
  const float* head = src + static_cast<int64_t>(kvh) * p.d + dim0;
  constexpr int kPieces = kBc * kMmaChunk / 4;  // 16-byte copies a piece.
#pragma unroll
  for (int i = 0; i < kPieces / 32; ++i) {
    const int idx = lane + 32 * i;
    const int key = idx / (kMmaChunk / 4);
    const int x = (idx % (kMmaChunk / 4)) * 4;
    const bool valid = kt + key < k_end && dim0 + x < p.d;
    DecodeCopy16(slot + key * kMmaStride + x, valid ? head + (kt + key) * p.kv_ld + x : p.k, valid);
  }
  DecodeCommit();
}

// Rows [0, rows) of kv head `kvh` over key range `split`. Needs d % 16 == 0, d <= kMaxD,
// rows <= kNarrowRows, p.split_keys <= kMmaTiles * kBc, 16-byte aligned k and v rows.
template <int kMaxD>
__device__ void AttentionDecodeMmaBlock(const Params& p, int kvh, int64_t split) {
  constexpr int kSteps = kMaxD / 16;  // k steps of the scores, m tiles of the values, at most.
  extern __shared__ float4 decode_smem4[];
  float* const smem = reinterpret_cast<float*>(decode_smem4);
  const int d = p.d;
  const int steps = d / 16;
  const int chunks = (d + kMmaChunk - 1) / kMmaChunk;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;  // The fragments' row (scores) and column (values' dims).
  const int t = lane % 4;
  const int live = static_cast<int>(p.rows < kNarrowRows ? p.rows : kNarrowRows);
  const int64_t last_pos = p.past + (live - 1) / p.group;
  const int64_t k_begin = split * p.split_keys;
  const int64_t split_end = k_begin + p.split_keys;
  const int64_t k_end = split_end < last_pos + 1 ? split_end : last_pos + 1;
  const int64_t kt = k_begin + static_cast<int64_t>(warp) * kBc;  // The warp's tile.
  const bool tile_in = kt < k_end;
  const size_t rings = static_cast<size_t>(kDecodeWarps) * kMmaRingFloats;
  const size_t outs_floats = static_cast<size_t>(kDecodeWarps) * kNarrowRows * d;
  float* const ring = smem + static_cast<int64_t>(warp) * kMmaRingFloats;
  float* const outs = smem;  // [warp][row][d], once every ring is done.
  float* const maxima = smem + (rings > outs_floats ? rings : outs_floats);  // [warp][row]
  float* const sums = maxima + kDecodeWarps * kNarrowRows;                   // [warp][row]
  const int pieces = tile_in ? 2 * chunks : 0;
  for (int c = 0; c < kMmaSlots - 1; ++c) {
    if (c < pieces) {
      MmaCopyPiece(p, kvh, kt, k_end, c, chunks, ring + (c % kMmaSlots) * kMmaSlotFloats, lane);
    } else {
      DecodeCommit();
    }
  }

  // Row g's query in bf16 pairs: a0 (dims 16 kk + 2t, + 1) and a2 (+ 8) of each k step.
  uint32_t qa[kSteps][2];
  const float* qr = nullptr;
  if (g < live) {
    const int64_t t_row = g / p.group;
    const int64_t h = static_cast<int64_t>(kvh) * p.group + g % p.group;
    qr = p.q + t_row * p.q_ld + h * d;
  }
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    float2 lo = make_float2(0.0f, 0.0f), hi = make_float2(0.0f, 0.0f);
    if (kk < steps && qr != nullptr) {
      lo = *reinterpret_cast<const float2*>(qr + 16 * kk + 2 * t);
      hi = *reinterpret_cast<const float2*>(qr + 16 * kk + 8 + 2 * t);
    }
    qa[kk][0] = PackPair(lo.x, lo.y);
    qa[kk][1] = PackPair(hi.x, hi.y);
  }

  // The next piece into the ring, then wait for piece c (kMmaSlots - 1 pieces ahead).
  const auto next_piece = [&](int c) {
    const int ahead = c + kMmaSlots - 1;
    if (ahead < pieces) {
      MmaCopyPiece(p, kvh, kt, k_end, ahead, chunks, ring + (ahead % kMmaSlots) * kMmaSlotFloats,
                   lane);
    } else {
      DecodeCommit();
    }
    DecodeWait<kMmaSlots - 1>();
    __syncwarp();
    return ring + (c % kMmaSlots) * kMmaSlotFloats;
  };

  // S for the warp's tile: n tile j holds keys kt + 8 j + (0 .. 7); this lane's B column is
  // key kt + 8 j + g, its C values keys kt + 8 j + 2t and + 1 of row g.
  float s[4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
  }
  constexpr int kChunks = (kMaxD + kMmaChunk - 1) / kMmaChunk;
  if (tile_in) {
    // Unrolled, so that qa and o are indexed by constants and stay in registers.
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if (c >= chunks) continue;
      const float* slot = next_piece(c);
#pragma unroll
      for (int q = 0; q < kMmaChunk / 16; ++q) {
        const int kk = c * (kMmaChunk / 16) + q;
        if (kk >= steps || kk >= kSteps) continue;
        const uint32_t a[4] = {qa[kk][0], 0u, qa[kk][1], 0u};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float* kr = slot + (8 * j + g) * kMmaStride + 16 * q + 2 * t;
          const float2 lo = *reinterpret_cast<const float2*>(kr);
          const float2 hi = *reinterpret_cast<const float2*>(kr + 8);
          Mma(s[j], a, PackPair(lo.x, lo.y), PackPair(hi.x, hi.y));
        }
      }
      __syncwarp();  // The piece is read: its slot may take the next copy.
    }
  }
  // The scaled, masked scores of row g: v[2 j + e] for key kt + 8 j + 2t + e.
  const int64_t pos = g < live ? p.past + g / p.group : -1;
  float v[8];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t key = kt + 8 * j + 2 * t + e;
      const bool visible = tile_in && key <= pos && key < k_end;
      v[2 * j + e] = visible ? __fmul_rn(s[j][e], p.scale) : -INFINITY;
      mx = fmaxf(mx, v[2 * j + e]);
    }
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  if (t == 0) maxima[warp * kNarrowRows + g] = mx;
  __syncthreads();
  float m = maxima[g];
#pragma unroll
  for (int w = 1; w < kDecodeWarps; ++w) m = fmaxf(m, maxima[w * kNarrowRows + g]);

  // The weights in bf16 (0 for a row without a visible key in the range) and their sum.
  float w8[8];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    w8[i] = m == -INFINITY ? 0.0f : RoundToBf16(expf(__fsub_rn(v[i], m)));
    sum += w8[i];
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (t == 0) sums[warp * kNarrowRows + g] = sum;

  // O^T = V^T P^T: m tile mt holds dims 16 mt + (0 .. 15), k step kk2 keys kt + 16 kk2 + (0 ..
  // 15); this lane's A values are dims 16 mt + g (+ 8), keys 2t, 2t + 1 (+ 8); its B values row
  // g's weights of keys 2t, 2t + 1 (+ 8), which are its scores' C values.
  const uint32_t b[2][2] = {{PackPair(w8[0], w8[1]), PackPair(w8[2], w8[3])},
                            {PackPair(w8[4], w8[5]), PackPair(w8[6], w8[7])}};
  float o[kSteps][4];
#pragma unroll
  for (int mt = 0; mt < kSteps; ++mt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[mt][e] = 0.0f;
  }
  if (tile_in) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if (c >= chunks) continue;
      const float* slot = next_piece(chunks + c);
#pragma unroll
      for (int q = 0; q < kMmaChunk / 16; ++q) {
        const int mt = c * (kMmaChunk / 16) + q;
        if (mt >= steps || mt >= kSteps) continue;
#pragma unroll
        for (int kk2 = 0; kk2 < 2; ++kk2) {
          const float* vr = slot + (16 * kk2 + 2 * t) * kMmaStride + 16 * q + g;
          // Keys 2t, 2t + 1, 2t + 8, 2t + 9 of the k step; dims g and g + 8.
          const float x00 = vr[0], x01 = vr[8];
          const float x10 = vr[kMmaStride], x11 = vr[kMmaStride + 8];
          const float x20 = vr[8 * kMmaStride], x21 = vr[8 * kMmaStride + 8];
          const float x30 = vr[9 * kMmaStride], x31 = vr[9 * kMmaStride + 8];
          const uint32_t a[4] = {PackPair(x00, x10), PackPair(x01, x11), PackPair(x20, x30),
                                 PackPair(x21, x31)};
          Mma(o[mt], a, b[kk2][0], b[kk2][1]);
        }
      }
      __syncwarp();
    }
  }
  DecodeWait<0>();
  __syncthreads();  // Every ring read: the outputs take their place.
  // C of m tile mt: (dim 16 mt + g, rows 2t, 2t + 1) and (dim + 8, the same rows).
  float* const mine = outs + static_cast<int64_t>(warp) * kNarrowRows * d;
#pragma unroll
  for (int mt = 0; mt < kSteps; ++mt) {
    if (mt >= steps) continue;
    const int dim = 16 * mt + g;
    mine[(2 * t) * d + dim] = o[mt][0];
    mine[(2 * t + 1) * d + dim] = o[mt][1];
    mine[(2 * t) * d + dim + 8] = o[mt][2];
    mine[(2 * t + 1) * d + dim + 8] = o[mt][3];
  }
  __syncthreads();

  // The range's results: the warps' outputs and sums added in warp order.
  for (int idx = tid; idx < live * d; idx += kDecodeThreads) {
    const int r = idx / d;
    const int dim = idx % d;
    float total = outs[r * d + dim];
#pragma unroll
    for (int w = 1; w < kDecodeWarps; ++w) {
      total += outs[(static_cast<int64_t>(w) * kNarrowRows + r) * d + dim];
    }
    const int64_t base = (split * p.kv_heads + kvh) * p.rows + r;
    p.part_o[base * d + dim] = total;
  }
  if (tid < live) {
    float l = sums[tid];
    float mr = maxima[tid];
#pragma unroll
    for (int w = 1; w < kDecodeWarps; ++w) {
      l += sums[w * kNarrowRows + tid];
      mr = fmaxf(mr, maxima[w * kNarrowRows + tid]);
    }
    const int64_t base = (split * p.kv_heads + kvh) * p.rows + tid;
    p.part_m[base] = mr;
    p.part_l[base] = l;
  }
}

// Block (0, y, z): kv head y, range z.
template <int kMaxD>
__global__ void __launch_bounds__(kDecodeThreads) AttentionDecodeMmaKernel(Params p) {
  KernelEntry();
  AttentionDecodeMmaBlock<kMaxD>(p, blockIdx.y, blockIdx.z);
}

// Block z takes sequence z / groups, its range z % groups.
template <int kMaxD>
__global__ void __launch_bounds__(kDecodeThreads)
    AttentionDecodeMmaBatchKernel(ParamsBatch b, int64_t groups) {
  KernelEntry();
  const int64_t seq = blockIdx.z / groups;
  const int64_t split = blockIdx.z % groups;
  const Params& p = b.seq[seq];
  if (split >= b.splits[seq]) return;
  AttentionDecodeMmaBlock<kMaxD>(p, blockIdx.y, split);
}

// Whether the blocks take a call of this shape: head dimensions a multiple of 16 up to
// kMmaMaxHeadDim, a block's rows, ranges of whole tiles up to a tile a warp, 8-byte aligned
// query rows and 16-byte aligned key and value rows. The one test both the launches and
// AttentionDecodeMmaTakes (the backend's batching) apply, so that they always agree.
bool MmaShapeTakes(int64_t d, int64_t rows, int64_t split_keys, int64_t q_ld, int64_t kv_ld,
                   const float* q, const float* k, const float* v) {
  const auto aligned = [](const float* x, uintptr_t to) {
    return reinterpret_cast<uintptr_t>(x) % to == 0;
  };
  return d > 0 && d % 16 == 0 && d <= kMmaMaxHeadDim && rows >= 1 && rows <= kNarrowRows &&
         split_keys > 0 && split_keys % kBc == 0 && split_keys <= kMmaTiles * kBc &&
         q_ld % 2 == 0 && kv_ld % 4 == 0 && aligned(q, 8) && aligned(k, 16) && aligned(v, 16);
}

template <int kMaxD>
bool MmaTakes(const Params& p) {
  return p.d <= kMaxD && p.part_o != nullptr &&
         MmaShapeTakes(p.d, p.rows, p.split_keys, p.q_ld, p.kv_ld, p.q, p.k, p.v);
}

template <typename Kernel, typename... Args>
hipError_t LaunchMma(Kernel kernel, dim3 grid, size_t shared, hipStream_t stream,
                     const Args&... args) {
  hipError_t e = AllowSharedBytes(kernel, shared);
  if (e == hipSuccess) {
    LaunchKernel(kernel, grid, kDecodeThreads, shared, stream, args...);
    e = hipGetLastError();
  }
  if (e == hipSuccess) mma_launches.fetch_add(1, std::memory_order_relaxed);
  return e;
}

#endif  // !__HIP_PLATFORM_AMD__

}  // namespace

template <int kMaxD>
hipError_t LaunchDecodeMma(const Params& p, int64_t splits, hipStream_t stream) {
#if !defined(__HIP_PLATFORM_AMD__)
  if (!MmaTakes<kMaxD>(p)) return hipErrorNotSupported;
  const dim3 grid(1, static_cast<unsigned int>(p.kv_heads), static_cast<unsigned int>(splits));
  return LaunchMma(AttentionDecodeMmaKernel<kMaxD>, grid, MmaSharedFloats(p.d) * sizeof(float),
                   stream, p);
#else
  static_cast<void>(p);
  static_cast<void>(splits);
  static_cast<void>(stream);
  return hipErrorNotSupported;
#endif
}

template <int kMaxD>
hipError_t LaunchDecodeMmaBatch(const ParamsBatch& b, int count, int64_t max_splits,
                                hipStream_t stream) {
#if !defined(__HIP_PLATFORM_AMD__)
  for (int i = 0; i < count; ++i) {
    if (!MmaTakes<kMaxD>(b.seq[i]) || b.seq[i].d != b.seq[0].d ||
        b.seq[i].kv_heads != b.seq[0].kv_heads) {
      return hipErrorNotSupported;
    }
  }
  const dim3 grid(1, static_cast<unsigned int>(b.seq[0].kv_heads),
                  static_cast<unsigned int>(count * max_splits));
  return LaunchMma(AttentionDecodeMmaBatchKernel<kMaxD>, grid,
                   MmaSharedFloats(b.seq[0].d) * sizeof(float), stream, b, max_splits);
#else
  static_cast<void>(b);
  static_cast<void>(count);
  static_cast<void>(max_splits);
  static_cast<void>(stream);
  return hipErrorNotSupported;
#endif
}

// The head dimensions attention_decode.hip launches.
template hipError_t LaunchDecodeMma<64>(const Params&, int64_t, hipStream_t);
template hipError_t LaunchDecodeMma<128>(const Params&, int64_t, hipStream_t);
template hipError_t LaunchDecodeMma<256>(const Params&, int64_t, hipStream_t);
template hipError_t LaunchDecodeMmaBatch<64>(const ParamsBatch&, int, int64_t, hipStream_t);
template hipError_t LaunchDecodeMmaBatch<128>(const ParamsBatch&, int, int64_t, hipStream_t);
template hipError_t LaunchDecodeMmaBatch<256>(const ParamsBatch&, int, int64_t, hipStream_t);

}  // namespace attention

// The Params attention.hip makes of the call: rows are tokens times the group.
bool AttentionDecodeMmaTakes(const AttentionLaunch& a) {
#if !defined(__HIP_PLATFORM_AMD__)
  if (a.kv_heads <= 0 || a.q_heads % a.kv_heads != 0) return false;
  return attention::MmaShapeTakes(a.head_dim, a.tokens * (a.q_heads / a.kv_heads), a.split_keys,
                                  static_cast<int64_t>(a.q_heads) * a.head_dim,
                                  static_cast<int64_t>(a.kv_heads) * a.head_dim, a.q, a.k, a.v);
#else
  static_cast<void>(a);
  return false;
#endif
}

}  // namespace cairn::infer::hip
