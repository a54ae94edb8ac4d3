// The split path's decode blocks (attention_decode_variant 1 to 3; NVIDIA; described below)
// and the launches of every variant's blocks for one call and for a batch of calls
// (LaunchDecode, LaunchDecodeBatch, declared in attention_device.h; variant 4's blocks are
// attention_decode_stream.hip's, variant 5's attention_decode_mma.hip's). The scalar blocks,
// the merge of the key ranges and the choice of blocks for a launch are attention.hip's.

#include <cmath>
#include <cstdint>

#include "services/infer/kernels/hip/attention_decode_device.h"
#include "services/infer/kernels/hip/attention_device.h"
#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {
namespace {

using attention::kBc;
using attention::kDecodeThreads;
using attention::kDecodeWarps;
using attention::kNarrowRows;
using attention::kSkipTile;
using attention::Params;
using attention::ParamsBatch;

// The decode blocks (attention_decode_variant 1 to 3; NVIDIA): the split path's blocks of at
// most kNarrowRows rows (variants 2 and 3: kDecodeFewRows where a call has no more, or with
// variant 3 where the device would otherwise have idle multiprocessors) with
// AttentionBlock's arithmetic, restructured for latency. A tile's keys and values come in by
// asynchronous copies (`cp.async`, one batch each, zeros past k_end) into one key and one value
// buffer, the next tile's keys while this tile's values are multiplied and its next values
// while the next scores are computed; warp w scores rows w and w + 4 (w alone in blocks of
// kDecodeFewRows rows; warps with no row in use skip the scores) with lane c taking key c, so a
// score is one thread's chain over d as before, and the loops carry no branch (rows not in use
// or skipped run on zeros or keep their value), so that several steps' shared-memory loads go
// out together; the tile's maximum is a shuffle tree (a maximum has no rounding) and the
// weights' exps run on every lane at once; the tile's sum is still one chain in key order (each
// lane adds the 32 weights by shuffles, in order). Per element the same operations on the same
// values as AttentionBlock: the same bits (tested).

// Row stride of the Q and K buffers: 16-byte aligned for the copies, and rows 4 banks apart, so
// a warp's 16-byte reads of 8 consecutive keys' rows hit distinct banks.
constexpr int kDecodePad = 4;

// Shared floats of a decode block of kRows rows (kNarrowRows or kDecodeFewRows).
template <int kRows>
size_t DecodeSharedFloats(int d) {
  const size_t ks = static_cast<size_t>(d) + kDecodePad;
  return kRows * ks + kBc * ks + static_cast<size_t>(kBc) * d + kRows * kBc + kRows;
}
// The smaller decode block (attention_decode_variant 3, or 2 for calls of at most this many rows
// a kv head: one token at a GQA group of up to 4): a row a warp, so no arithmetic on unused rows.
constexpr int kDecodeFewRows = 4;

// (The constants above also serve the host code below that picks the blocks on every platform.)
#if !defined(__HIP_PLATFORM_AMD__)

using attention::DecodeCommit;
using attention::DecodeCopy16;
using attention::DecodeWait;

// This thread's share of a tile copy, worked out once a block: where the threads divide a row's
// 16-byte pieces evenly (d / 4 divides kDecodeThreads: d 16, 32, 64, 128, 256, ...) each thread
// copies the same piece `x` of keys first, first + step, ..., with no division a copy;
// otherwise (`even` false) the copies walk the tile's pieces in turn.
struct DecodeCopyShare {
  bool even;
  int first;
  int step;
  int x;
};
__device__ inline DecodeCopyShare DecodeShareOf(int d) {
  const int per_row = d / 4;
  DecodeCopyShare s;
  s.even = kDecodeThreads % per_row == 0;
  s.first = s.even ? static_cast<int>(threadIdx.x) / per_row : 0;
  s.step = s.even ? kDecodeThreads / per_row : 0;
  s.x = s.even ? (static_cast<int>(threadIdx.x) % per_row) * 4 : 0;
  return s;
}

// Copies keys [kt, kt + kBc) of kv head `kvh` (rows `ld` floats apart in `src`) into `dst`
// (row stride `ds`), zeros from k_end on; one copy group.
__device__ inline void DecodeCopyTile(const float* src, int64_t ld, int kvh, int d, int64_t kt,
                                      int64_t k_end, float* dst, int ds,
                                      const DecodeCopyShare& share) {
  const float* head = src + static_cast<int64_t>(kvh) * d;
  if (share.even) {
    for (int c = share.first; c < kBc; c += share.step) {
      const bool valid = kt + c < k_end;
      const float* from = valid ? head + (kt + c) * ld + share.x : src;
      DecodeCopy16(dst + c * ds + share.x, from, valid);
    }
  } else {
    const int per_row = d / 4;
    const int n = kBc * per_row;
    for (int idx = threadIdx.x; idx < n; idx += kDecodeThreads) {
      const int c = idx / per_row;
      const int x = (idx % per_row) * 4;
      const bool valid = kt + c < k_end;
      const float* from = valid ? head + (kt + c) * ld + x : src;
      DecodeCopy16(dst + c * ds + x, from, valid);
    }
  }
  DecodeCommit();
}

// The block of rows [bx * kRows, ...) of kv head `kvh` over key ranges split0, split0 + 1, ...
// (`ranges` of them, those below `splits`; split path only: writes each range's part_o, part_m
// and part_l). A range's tiles and arithmetic are those of a block of that range alone, its
// running maximum, sum and output starting afresh; the copies run on across a range's end, the
// next range's first tile coming in while this range's last is computed. Needs VecLoads(p).
// Warp w takes rows w, w + kDecodeWarps, ...
template <int kMaxD, int kRows>
__device__ void AttentionDecodeBlock(const Params& p, int64_t bx, int kvh, int64_t split0,
                                     int ranges, int64_t splits) {
  constexpr int kDims = (kMaxD + kDecodeThreads - 1) / kDecodeThreads;
  constexpr int kRowsPerWarp = kRows / kDecodeWarps;
  static_assert(kRows % 4 == 0 && kRowsPerWarp >= 1 && kRowsPerWarp <= 2,
                "one or two rows a warp, a key's weights in float4s");
  extern __shared__ float4 decode_smem4[];
  float* const smem = reinterpret_cast<float*>(decode_smem4);
  const int d = p.d;
  const int ks = d + kDecodePad;
  float* q_tile = smem;                  // [kRows][ks]
  float* k_tile = q_tile + kRows * ks;   // [kBc][ks]
  float* v_tile = k_tile + kBc * ks;     // [kBc][d]
  float* w_tile = v_tile + kBc * d;      // [kBc][kRows]: the tile's weights
  float* alphas = w_tile + kBc * kRows;  // [kRows]: scale, or kSkipTile
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int64_t rho0 = bx * kRows;
  const int live = static_cast<int>(p.rows - rho0 < kRows ? p.rows - rho0 : kRows);
  const int64_t last_pos = p.past + (rho0 + live - 1) / p.group;
  if (split0 + ranges > splits) ranges = static_cast<int>(splits - split0);
  // The block's keys: its ranges' keys up to the last visible one. Tiles never straddle two
  // ranges (split_keys is a multiple of kBc), and keys past span_end are zeros as past k_end.
  const int64_t span_begin = split0 * p.split_keys;
  const int64_t ranges_end = span_begin + ranges * p.split_keys;
  const int64_t span_end = ranges_end < last_pos + 1 ? ranges_end : last_pos + 1;
  const DecodeCopyShare share = DecodeShareOf(d);

  if (span_begin < span_end) {
    DecodeCopyTile(p.k, p.kv_ld, kvh, d, span_begin, span_end, k_tile, ks, share);
    DecodeCopyTile(p.v, p.kv_ld, kvh, d, span_begin, span_end, v_tile, d, share);
  }
  // The rows' queries: a row's token and head worked out once (no division a value).
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float* qr = nullptr;
    if (r < live) {
      const int64_t rho = rho0 + r;
      const int64_t t = rho / p.group;
      const int64_t h = static_cast<int64_t>(kvh) * p.group + rho % p.group;
      qr = p.q + t * p.q_ld + h * d;
    }
    for (int x = tid; x < d; x += kDecodeThreads) q_tile[r * ks + x] = r < live ? qr[x] : 0.0f;
  }

  // Warp w's rows w + kDecodeWarps * j: running maximum and sum (the same in every lane).
  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp];
  int64_t pos[kRowsPerWarp];
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int r = warp + kDecodeWarps * j;
    pos[j] = r < live ? p.past + (rho0 + r) / p.group : -1;
  }
  // Output: row r, dims tid + kDecodeThreads * i.
  float acc[kRows][kDims];

  for (int64_t split = split0; split < split0 + ranges; ++split) {
    const int64_t k_begin = split * p.split_keys;
    const int64_t split_end = k_begin + p.split_keys;
    const int64_t k_end = split_end < span_end ? split_end : span_end;
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      row_max[j] = -INFINITY;
      row_sum[j] = 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[r][i] = 0.0f;
    }

    for (int64_t kt = k_begin; kt < k_end; kt += kBc) {
      // The block's next tile, in this range or the next one.
      const bool more = kt + kBc < span_end;
      DecodeWait<1>();  // This tile's keys (its values may still be in flight).
      __syncthreads();
      {
        const int c = lane;
        const int64_t key = kt + c;
        const float* kr = k_tile + c * ks;
        float s[kRowsPerWarp];
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) s[j] = 0.0f;
        // The warp's rows without a branch in the loop (a row not in use holds zeros and its
        // score is dropped), so that the loads of several steps go out together.
        if (warp < live) {
          const float* qr[kRowsPerWarp];
#pragma unroll
          for (int j = 0; j < kRowsPerWarp; ++j) qr[j] = q_tile + (warp + kDecodeWarps * j) * ks;
#pragma unroll 8
          for (int x = 0; x < d; x += 4) {
            const float4 kv = *reinterpret_cast<const float4*>(kr + x);
            float4 a[kRowsPerWarp];
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j) {
              a[j] = *reinterpret_cast<const float4*>(qr[j] + x);
            }
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j) s[j] = fmaf(a[j].x, kv.x, s[j]);
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j) s[j] = fmaf(a[j].y, kv.y, s[j]);
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j) s[j] = fmaf(a[j].z, kv.z, s[j]);
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j) s[j] = fmaf(a[j].w, kv.w, s[j]);
          }
        }
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) {
          const int r = warp + kDecodeWarps * j;
          if (r >= live) continue;
          // The rounded product and difference AttentionBlock computes (through shared memory
          // there): spelled out so that neither is fused into a multiply-add here.
          const float sv =
              key <= pos[j] && key < split_end ? __fmul_rn(s[j], p.scale) : -INFINITY;
          float mx = sv;
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
          if (mx == -INFINITY) {
            if (lane == 0) alphas[r] = kSkipTile;
            continue;
          }
          const float m_new = fmaxf(row_max[j], mx);
          const float alpha = expf(row_max[j] - m_new);  // 0 when the old maximum is -inf.
          const float pv = expf(__fsub_rn(sv, m_new));
          float sum = 0.0f;
#pragma unroll
          for (int e = 0; e < kBc; ++e) sum += __shfl_sync(0xffffffffu, pv, e);
          row_sum[j] = fmaf(row_sum[j], alpha, sum);  // AttentionBlock's contracted update.
          row_max[j] = m_new;
          w_tile[c * kRows + r] = pv;
          if (lane == 0) alphas[r] = alpha;
        }
      }
      __syncthreads();  // The keys are read: the next tile's may come in.
      if (more) DecodeCopyTile(p.k, p.kv_ld, kvh, d, kt + kBc, span_end, k_tile, ks, share);
      if (more) {
        DecodeWait<1>();  // This tile's values (the next keys may still be in flight).
      } else {
        DecodeWait<0>();
      }
      __syncthreads();
      {
        bool take[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float alpha = r < live ? alphas[r] : kSkipTile;
          take[r] = alpha != kSkipTile;
#pragma unroll
          for (int i = 0; i < kDims; ++i) acc[r][i] *= take[r] ? alpha : 1.0f;
        }
#pragma unroll 8
        for (int c = 0; c < kBc; ++c) {
          float pv[kRows];
#pragma unroll
          for (int g = 0; g < kRows / 4; ++g) {
            const float4 w = *reinterpret_cast<const float4*>(w_tile + c * kRows + 4 * g);
            pv[4 * g] = w.x;
            pv[4 * g + 1] = w.y;
            pv[4 * g + 2] = w.z;
            pv[4 * g + 3] = w.w;
          }
          const float* vr = v_tile + c * d;
          float vv[kDims];
#pragma unroll
          for (int i = 0; i < kDims; ++i) {
            const int dim = tid + kDecodeThreads * i;
            vv[i] = dim < d ? vr[dim] : 0.0f;
          }
          // Every row without a branch (a skipped row keeps its value), as for the scores.
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
#pragma unroll
            for (int i = 0; i < kDims; ++i) {
              const float a = fmaf(pv[r], vv[i], acc[r][i]);
              acc[r][i] = take[r] ? a : acc[r][i];
            }
          }
        }
      }
      __syncthreads();  // The values and weights are read.
      if (more) DecodeCopyTile(p.v, p.kv_ld, kvh, d, kt + kBc, span_end, v_tile, d, share);
    }

#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= live) continue;
      const int64_t base = (split * p.kv_heads + kvh) * p.rows + rho0 + r;
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        const int dim = tid + kDecodeThreads * i;
        if (dim < d) p.part_o[base * d + dim] = acc[r][i];
      }
    }
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const int r = warp + kDecodeWarps * j;
      if (r < live && lane == 0) {
        const int64_t base = (split * p.kv_heads + kvh) * p.rows + rho0 + r;
        p.part_m[base] = row_max[j];
        p.part_l[base] = row_sum[j];
      }
    }
  }
}

// Block z takes ranges z * ranges, ... of `splits`.
template <int kMaxD, int kRows>
__global__ void __launch_bounds__(kDecodeThreads)
    AttentionDecodeKernel(Params p, int ranges, int64_t splits) {
  KernelEntry();
  AttentionDecodeBlock<kMaxD, kRows>(p, blockIdx.x, blockIdx.y,
                                     static_cast<int64_t>(blockIdx.z) * ranges, ranges, splits);
}

// Block z takes sequence z / groups, its ranges (z % groups) * ranges, ...
template <int kMaxD, int kRows>
__global__ void __launch_bounds__(kDecodeThreads)
    AttentionDecodeBatchKernel(ParamsBatch b, int64_t groups, int ranges) {
  KernelEntry();
  const int64_t seq = blockIdx.z / groups;
  const int64_t split0 = (blockIdx.z % groups) * ranges;
  const Params& p = b.seq[seq];
  if (split0 >= b.splits[seq] || static_cast<int64_t>(blockIdx.x) * kRows >= p.rows) return;
  AttentionDecodeBlock<kMaxD, kRows>(p, blockIdx.x, blockIdx.y, split0, ranges, b.splits[seq]);
}
#endif  // !__HIP_PLATFORM_AMD__

// The variant whose blocks are the streamed ones (attention_decode_stream.hip); its rows are
// variant 3's.
constexpr int kStreamVariant = 4;
// The variant on the matrix units (attention_decode_mma.hip; other bits); calls its blocks do
// not take run variant 3's.
constexpr int kMmaVariant = kAttentionDecodeMmaVariant;

// Whether the blocks take kDecodeFewRows rows rather than kNarrowRows: variant 2 where a call
// has no more; variants 3 and 4 also where blocks of kNarrowRows rows (`narrow_blocks` of them
// at one range a block) would leave some of the device's `multiprocessors` without one and
// every sequence of the call is one token (`one_token`), a kv head's rows then in two blocks. The
// rows of one token share their position, so both blocks copy the same keys and values (a
// block's span ends at its last row's last visible key) and a row's arithmetic is the one
// block's; rows of several tokens in two blocks would see different zeros past a span's end.
bool DecodeFewRows(int decode_variant, int64_t max_rows, int64_t narrow_blocks,
                   int multiprocessors, bool one_token) {
  if (decode_variant < 2) return false;
  return max_rows <= kDecodeFewRows ||
         (decode_variant >= 3 && one_token &&
          narrow_blocks < static_cast<int64_t>(multiprocessors));
}

template <int kMaxD, int kRows>
hipError_t LaunchDecodeRows(const Params& p, int64_t splits, const AttentionDecodeSpread& spread,
                            hipStream_t stream) {
#if !defined(__HIP_PLATFORM_AMD__)
  return attention::LaunchDecodeKernel<kRows>(AttentionDecodeKernel<kMaxD, kRows>,
                                              DecodeSharedFloats<kRows>(p.d) * sizeof(float), p,
                                              splits, spread, stream);
#else
  return hipErrorNotSupported;
#endif
}

template <int kMaxD, int kRows>
hipError_t LaunchDecodeBatchRows(const ParamsBatch& b, int count, int64_t max_rows,
                                 int64_t max_splits, const AttentionDecodeSpread& spread,
                                 hipStream_t stream) {
#if !defined(__HIP_PLATFORM_AMD__)
  return attention::LaunchDecodeBatchKernel<kRows>(
      AttentionDecodeBatchKernel<kMaxD, kRows>,
      DecodeSharedFloats<kRows>(b.seq[0].d) * sizeof(float), b, count, max_rows, max_splits,
      spread, stream);
#else
  return hipErrorNotSupported;
#endif
}

}  // namespace

namespace attention {

template <int kMaxD>
hipError_t LaunchDecode(const Params& p, int64_t splits, int decode_variant,
                        const AttentionDecodeSpread& spread, hipStream_t stream) {
  const int64_t narrow_blocks = CeilDiv(p.rows, kNarrowRows) * p.kv_heads * splits;
  if (decode_variant == kMmaVariant) {
    const hipError_t e = LaunchDecodeMma<kMaxD>(p, splits, stream);
    if (e != hipErrorNotSupported) return e;
  }
  const bool few = DecodeFewRows(decode_variant, p.rows, narrow_blocks, spread.multiprocessors,
                                 p.rows == p.group);
  if (decode_variant == kStreamVariant) {
    return few ? LaunchDecodeStream<kMaxD, kDecodeFewRows>(p, splits, spread, stream)
               : LaunchDecodeStream<kMaxD, kNarrowRows>(p, splits, spread, stream);
  }
  return few ? LaunchDecodeRows<kMaxD, kDecodeFewRows>(p, splits, spread, stream)
             : LaunchDecodeRows<kMaxD, kNarrowRows>(p, splits, spread, stream);
}

template <int kMaxD>
hipError_t LaunchDecodeBatch(const ParamsBatch& b, int count, int64_t max_rows,
                             int64_t max_splits, int decode_variant,
                             const AttentionDecodeSpread& spread, hipStream_t stream) {
  int64_t narrow_blocks = 0;
  bool one_token = true;
  for (int i = 0; i < count; ++i) {
    narrow_blocks += CeilDiv(b.seq[i].rows, kNarrowRows) * b.seq[i].kv_heads * b.splits[i];
    one_token = one_token && b.seq[i].rows == b.seq[i].group;
  }
  if (decode_variant == kMmaVariant) {
    const hipError_t e = LaunchDecodeMmaBatch<kMaxD>(b, count, max_splits, stream);
    if (e != hipErrorNotSupported) return e;
  }
  const bool few =
      DecodeFewRows(decode_variant, max_rows, narrow_blocks, spread.multiprocessors, one_token);
  if (decode_variant == kStreamVariant) {
    return few ? LaunchDecodeStreamBatch<kMaxD, kDecodeFewRows>(b, count, max_rows, max_splits,
                                                                spread, stream)
               : LaunchDecodeStreamBatch<kMaxD, kNarrowRows>(b, count, max_rows, max_splits,
                                                             spread, stream);
  }
  return few ? LaunchDecodeBatchRows<kMaxD, kDecodeFewRows>(b, count, max_rows, max_splits,
                                                            spread, stream)
             : LaunchDecodeBatchRows<kMaxD, kNarrowRows>(b, count, max_rows, max_splits, spread,
                                                         stream);
}

// The head dimensions attention.hip launches (Launch, LaunchBatch).
template hipError_t LaunchDecode<64>(const Params&, int64_t, int, const AttentionDecodeSpread&,
                                     hipStream_t);
template hipError_t LaunchDecode<128>(const Params&, int64_t, int, const AttentionDecodeSpread&,
                                      hipStream_t);
template hipError_t LaunchDecode<256>(const Params&, int64_t, int, const AttentionDecodeSpread&,
                                      hipStream_t);
template hipError_t LaunchDecodeBatch<64>(const ParamsBatch&, int, int64_t, int64_t, int,
                                          const AttentionDecodeSpread&, hipStream_t);
template hipError_t LaunchDecodeBatch<128>(const ParamsBatch&, int, int64_t, int64_t, int,
                                           const AttentionDecodeSpread&, hipStream_t);
template hipError_t LaunchDecodeBatch<256>(const ParamsBatch&, int, int64_t, int64_t, int,
                                           const AttentionDecodeSpread&, hipStream_t);

}  // namespace attention
}  // namespace cairn::infer::hip
