// Variant 4's decode blocks (attention_decode_variant 4; NVIDIA; described below) and their
// launches for one call and for a batch of calls (LaunchDecodeStream, LaunchDecodeStreamBatch,
// declared in attention_decode_device.h and called by attention_decode.hip's LaunchDecode).

#include <cmath>
#include <cstdint>

#include "services/infer/kernels/hip/attention_decode_device.h"
#include "services/infer/kernels/hip/attention_device.h"
#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip::attention {
namespace {

// The streamed decode blocks (attention_decode_variant 4; NVIDIA): the blocks of variant 3 (the
// same rows and key ranges) with the work shared out so that a block keeps many loads in flight
// and reads each key once. A range's tiles go in rounds of kStreamTiles, warp w scoring tile w
// of a round for every row of the block: lane c takes key c and runs one chain over d a row
// (kRows chains at once, each key value loaded once for all of them), the tile's keys streamed
// through the warp's own ring of kStreamSlots pieces of shared memory by `cp.async` (whole
// lines a quarter-warp; the warp's lanes meet at each piece, no block barrier). Then warp w
// takes rows w, w + 4 through the round's tiles in order: the tiles' maxima, the running maxima
// and scales, the weights' exps and each tile's sum (one chain in key order), the running sum.
// Then every thread multiplies its dimensions' values by the weights, tile after tile, each
// value read once from global memory. A score, maximum, weight, sum and output element has the
// operations and operands of AttentionDecodeBlock (and so of AttentionBlock) in the same order:
// the same bits (tested). Tiles past the range's last visible key are skipped as a tile with no
// visible key is. Measured (thirty-fifth round, README): faster than variant 3 alone at 4 and
// 16 sequences, no faster in a model's decode step.
constexpr int kStreamPiece = 32;                   // Floats of a key's row in a ring slot.
constexpr int kStreamStride = kStreamPiece + 4;    // Lanes' slots 4 banks apart.
constexpr int kStreamTiles = kDecodeThreads / 32;  // Tiles scored at once, a warp each.
constexpr int kStreamKeys = kStreamTiles * kBc;    // Keys of a round.
// Ring slots a warp: two, so that four blocks share a multiprocessor (with eight, one block a
// multiprocessor and L2 asked for a round's values ahead, one sequence at 4096 keys was no
// faster: thirty-fifth round).
constexpr int kStreamSlots = 2;
static_assert(kStreamPiece % 4 == 0, "16-byte copies");

// Shared floats of a streamed block of kRows rows.
template <int kRows>
size_t StreamSharedFloats(int d) {
  return static_cast<size_t>(kRows) * d + 2 * static_cast<size_t>(kRows) * kStreamKeys +
         static_cast<size_t>(kStreamTiles) * kRows +
         static_cast<size_t>(kDecodeThreads) * kStreamSlots * kStreamStride;
}

#if !defined(__HIP_PLATFORM_AMD__)
template <int kMaxD, int kRows>
__device__ void AttentionDecodeStreamBlock(const Params& p, int64_t bx, int kvh, int64_t split0,
                                           int ranges, int64_t splits) {
  constexpr int kDims = (kMaxD + kDecodeThreads - 1) / kDecodeThreads;
  constexpr int kRowsPerWarp = kRows / kDecodeWarps;
  constexpr int kBatchKeys = 16;  // Value loads in flight a thread.
  static_assert(kRows % 4 == 0 && kRowsPerWarp >= 1 && kRowsPerWarp <= 2, "rows a warp");
  extern __shared__ float4 decode_smem4[];
  float* const smem = reinterpret_cast<float*>(decode_smem4);
  const int d = p.d;
  float* q_tile = smem;                          // [kRows][d]
  float* scores = q_tile + kRows * d;            // [kRows][kStreamKeys], scaled and masked
  float* w_tile = scores + kRows * kStreamKeys;  // [kStreamKeys][kRows]: the weights
  float* alphas = w_tile + kStreamKeys * kRows;  // [kStreamTiles][kRows]: scale, or kSkipTile
  float* ring = alphas + kStreamTiles * kRows;   // [warp][slot][lane][kStreamStride]
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  float* const warp_ring = ring + static_cast<int64_t>(warp) * kStreamSlots * 32 * kStreamStride;
  float* const my_ring = warp_ring + lane * kStreamStride;
  constexpr int kSlotFloats = 32 * kStreamStride;
  const int64_t rho0 = bx * kRows;
  const int live = static_cast<int>(p.rows - rho0 < kRows ? p.rows - rho0 : kRows);
  const int64_t last_pos = p.past + (rho0 + live - 1) / p.group;
  if (split0 + ranges > splits) ranges = static_cast<int>(splits - split0);
  const int64_t span_begin = split0 * p.split_keys;
  const int64_t ranges_end = span_begin + ranges * p.split_keys;
  const int64_t span_end = ranges_end < last_pos + 1 ? ranges_end : last_pos + 1;
  const float* const k_head = p.k + static_cast<int64_t>(kvh) * d;
  const float* const v_head = p.v + static_cast<int64_t>(kvh) * d;
  const int pieces = (d + kStreamPiece - 1) / kStreamPiece;

  int64_t pos[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float* qr = nullptr;
    pos[r] = -1;
    if (r < live) {
      const int64_t rho = rho0 + r;
      const int64_t t = rho / p.group;
      const int64_t h = static_cast<int64_t>(kvh) * p.group + rho % p.group;
      qr = p.q + t * p.q_ld + h * d;
      pos[r] = p.past + t;
    }
    for (int x = tid; x < d; x += kDecodeThreads) q_tile[r * d + x] = r < live ? qr[x] : 0.0f;
  }

  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp];
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

    for (int64_t round = k_begin; round < k_end; round += kStreamKeys) {
      __syncthreads();  // The queries are in; the last round's weights and scales are read.

      // Warp w scores tile w of the round: lane c key c, a chain over d for every row.
      {
        const int64_t kt = round + static_cast<int64_t>(kBc) * warp;
        const int64_t key = kt + lane;
        float s[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) s[r] = 0.0f;
        if (kt < k_end) {
          // A piece's copies go a line a quarter-warp: lane l copies 16 bytes (l % 8) of keys
          // l / 8, l / 8 + 4, ... (zeros from span_end on).
          const int part = (lane % 8) * 4;
          const auto copy_piece = [&](int piece) {
            const int x = piece * kStreamPiece + part;
            if (x >= d) return;
            float* dst = warp_ring + (piece % kStreamSlots) * kSlotFloats + part;
#pragma unroll
            for (int c = lane / 8; c < kBc; c += 4) {
              const bool valid = kt + c < span_end;
              DecodeCopy16(dst + c * kStreamStride, valid ? k_head + (kt + c) * p.kv_ld + x : p.k,
                           valid);
            }
          };
#pragma unroll
          for (int i = 0; i < kStreamSlots - 1; ++i) {
            if (i < pieces) copy_piece(i);
            DecodeCommit();
          }
          for (int piece = 0; piece < pieces; ++piece) {
            // The slot the last piece used takes piece + kStreamSlots - 1 once every lane has read
            // it.
            __syncwarp();
            if (piece + kStreamSlots - 1 < pieces) copy_piece(piece + kStreamSlots - 1);
            DecodeCommit();
            DecodeWait<kStreamSlots - 1>();
            __syncwarp();  // Every lane's copies of this piece are in.
            const float* kp = my_ring + (piece % kStreamSlots) * kSlotFloats;
            const float* qp = q_tile + piece * kStreamPiece;
            const int len =
                d - piece * kStreamPiece < kStreamPiece ? d - piece * kStreamPiece : kStreamPiece;
            const auto step = [&](int x) {
              const float4 kv = *reinterpret_cast<const float4*>(kp + x);
              float4 a[kRows];
#pragma unroll
              for (int r = 0; r < kRows; ++r) {
                a[r] = *reinterpret_cast<const float4*>(qp + r * d + x);
              }
#pragma unroll
              for (int r = 0; r < kRows; ++r) s[r] = fmaf(a[r].x, kv.x, s[r]);
#pragma unroll
              for (int r = 0; r < kRows; ++r) s[r] = fmaf(a[r].y, kv.y, s[r]);
#pragma unroll
              for (int r = 0; r < kRows; ++r) s[r] = fmaf(a[r].z, kv.z, s[r]);
#pragma unroll
              for (int r = 0; r < kRows; ++r) s[r] = fmaf(a[r].w, kv.w, s[r]);
            };
            if (len == kStreamPiece) {
#pragma unroll
              for (int x = 0; x < kStreamPiece; x += 4) step(x);
            } else {
              for (int x = 0; x < len; x += 4) step(x);
            }
          }
          DecodeWait<0>();
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          // The rounded product AttentionDecodeBlock computes; -inf where not visible.
          const bool visible = kt < k_end && key <= pos[r] && key < split_end;
          scores[r * kStreamKeys + warp * kBc + lane] =
              visible ? __fmul_rn(s[r], p.scale) : -INFINITY;
        }
      }
      __syncthreads();  // The round's scores are in.

      // Warp w's rows, the round's tiles in order.
#pragma unroll
      for (int j = 0; j < kRowsPerWarp; ++j) {
        const int r = warp + kDecodeWarps * j;
        if (r >= live) continue;
        float sv[kStreamTiles], mx[kStreamTiles];
#pragma unroll
        for (int t = 0; t < kStreamTiles; ++t) {
          sv[t] = scores[r * kStreamKeys + t * kBc + lane];
          mx[t] = sv[t];
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) {
            mx[t] = fmaxf(mx[t], __shfl_xor_sync(0xffffffffu, mx[t], o));
          }
        }
        float m_new[kStreamTiles], alpha[kStreamTiles];
        float m = row_max[j];
#pragma unroll
        for (int t = 0; t < kStreamTiles; ++t) {
          m_new[t] = m;
          alpha[t] = kSkipTile;
          if (mx[t] == -INFINITY) continue;  // No visible key: the tile is skipped.
          m_new[t] = fmaxf(m, mx[t]);
          alpha[t] = expf(m - m_new[t]);  // 0 when the old maximum is -inf.
          m = m_new[t];
        }
        float sum[kStreamTiles];
#pragma unroll
        for (int t = 0; t < kStreamTiles; ++t) {
          const float pv = expf(__fsub_rn(sv[t], m_new[t]));
          sum[t] = 0.0f;
#pragma unroll
          for (int e = 0; e < kBc; ++e) sum[t] += __shfl_sync(0xffffffffu, pv, e);
          if (mx[t] != -INFINITY) w_tile[(t * kBc + lane) * kRows + r] = pv;
          if (lane == 0) alphas[t * kRows + r] = alpha[t];
        }
#pragma unroll
        for (int t = 0; t < kStreamTiles; ++t) {
          // AttentionBlock's contracted update.
          if (mx[t] != -INFINITY) row_sum[j] = fmaf(row_sum[j], alpha[t], sum[t]);
        }
        row_max[j] = m;
      }
      __syncthreads();  // The round's weights and scales are in.

      // Every thread's dimensions, the round's tiles in order.
      const int64_t round_end = round + kStreamKeys < k_end ? round + kStreamKeys : k_end;
      for (int t = 0; round + t * kBc < round_end; ++t) {
        const int64_t kt = round + t * kBc;
        bool take[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float a = r < live ? alphas[t * kRows + r] : kSkipTile;
          take[r] = a != kSkipTile;
#pragma unroll
          for (int i = 0; i < kDims; ++i) acc[r][i] *= take[r] ? a : 1.0f;
        }
        for (int c0 = 0; c0 < kBc; c0 += kBatchKeys) {
          float vv[kBatchKeys][kDims];
#pragma unroll
          for (int c = 0; c < kBatchKeys; ++c) {
            const int64_t key = kt + c0 + c;
            const float* vr = v_head + key * p.kv_ld;
#pragma unroll
            for (int i = 0; i < kDims; ++i) {
              const int dim = tid + kDecodeThreads * i;
              vv[c][i] = dim < d && key < span_end ? vr[dim] : 0.0f;
            }
          }
#pragma unroll
          for (int c = 0; c < kBatchKeys; ++c) {
            float pv[kRows];
#pragma unroll
            for (int g = 0; g < kRows / 4; ++g) {
              const float4 w =
                  *reinterpret_cast<const float4*>(w_tile + (t * kBc + c0 + c) * kRows + 4 * g);
              pv[4 * g] = w.x;
              pv[4 * g + 1] = w.y;
              pv[4 * g + 2] = w.z;
              pv[4 * g + 3] = w.w;
            }
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
#pragma unroll
              for (int i = 0; i < kDims; ++i) {
                const float a = fmaf(pv[r], vv[c][i], acc[r][i]);
                acc[r][i] = take[r] ? a : acc[r][i];
              }
            }
          }
        }
      }
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
    AttentionDecodeStreamKernel(Params p, int ranges, int64_t splits) {
  KernelEntry();
  AttentionDecodeStreamBlock<kMaxD, kRows>(
      p, blockIdx.x, blockIdx.y, static_cast<int64_t>(blockIdx.z) * ranges, ranges, splits);
}

// Block z takes sequence z / groups, its ranges (z % groups) * ranges, ...
template <int kMaxD, int kRows>
__global__ void __launch_bounds__(kDecodeThreads)
    AttentionDecodeStreamBatchKernel(ParamsBatch b, int64_t groups, int ranges) {
  KernelEntry();
  const int64_t seq = blockIdx.z / groups;
  const int64_t split0 = (blockIdx.z % groups) * ranges;
  const Params& p = b.seq[seq];
  if (split0 >= b.splits[seq] || static_cast<int64_t>(blockIdx.x) * kRows >= p.rows) return;
  AttentionDecodeStreamBlock<kMaxD, kRows>(p, blockIdx.x, blockIdx.y, split0, ranges,
                                           b.splits[seq]);
}
#endif  // !__HIP_PLATFORM_AMD__

}  // namespace

template <int kMaxD, int kRows>
hipError_t LaunchDecodeStream(const Params& p, int64_t splits, const AttentionDecodeSpread& spread,
                              hipStream_t stream) {
#if !defined(__HIP_PLATFORM_AMD__)
  return LaunchDecodeKernel<kRows>(AttentionDecodeStreamKernel<kMaxD, kRows>,
                                   StreamSharedFloats<kRows>(p.d) * sizeof(float), p, splits,
                                   spread, stream);
#else
  return hipErrorNotSupported;
#endif
}

template <int kMaxD, int kRows>
hipError_t LaunchDecodeStreamBatch(const ParamsBatch& b, int count, int64_t max_rows,
                                   int64_t max_splits, const AttentionDecodeSpread& spread,
                                   hipStream_t stream) {
#if !defined(__HIP_PLATFORM_AMD__)
  return LaunchDecodeBatchKernel<kRows>(AttentionDecodeStreamBatchKernel<kMaxD, kRows>,
                                        StreamSharedFloats<kRows>(b.seq[0].d) * sizeof(float), b,
                                        count, max_rows, max_splits, spread, stream);
#else
  return hipErrorNotSupported;
#endif
}

// The head dimensions and block rows attention_decode.hip launches.
template hipError_t LaunchDecodeStream<64, 4>(const Params&, int64_t, const AttentionDecodeSpread&,
                                              hipStream_t);
template hipError_t LaunchDecodeStreamBatch<64, 4>(const ParamsBatch&, int, int64_t, int64_t,
                                                   const AttentionDecodeSpread&, hipStream_t);
template hipError_t LaunchDecodeStream<64, 8>(const Params&, int64_t, const AttentionDecodeSpread&,
                                              hipStream_t);
template hipError_t LaunchDecodeStreamBatch<64, 8>(const ParamsBatch&, int, int64_t, int64_t,
                                                   const AttentionDecodeSpread&, hipStream_t);
template hipError_t LaunchDecodeStream<128, 4>(const Params&, int64_t, const AttentionDecodeSpread&,
                                               hipStream_t);
template hipError_t LaunchDecodeStreamBatch<128, 4>(const ParamsBatch&, int, int64_t, int64_t,
                                                    const AttentionDecodeSpread&, hipStream_t);
template hipError_t LaunchDecodeStream<128, 8>(const Params&, int64_t, const AttentionDecodeSpread&,
                                               hipStream_t);
template hipError_t LaunchDecodeStreamBatch<128, 8>(const ParamsBatch&, int, int64_t, int64_t,
                                                    const AttentionDecodeSpread&, hipStream_t);
template hipError_t LaunchDecodeStream<256, 4>(const Params&, int64_t, const AttentionDecodeSpread&,
                                               hipStream_t);
template hipError_t LaunchDecodeStreamBatch<256, 4>(const ParamsBatch&, int, int64_t, int64_t,
                                                    const AttentionDecodeSpread&, hipStream_t);
template hipError_t LaunchDecodeStream<256, 8>(const Params&, int64_t, const AttentionDecodeSpread&,
                                               hipStream_t);
template hipError_t LaunchDecodeStreamBatch<256, 8>(const ParamsBatch&, int, int64_t, int64_t,
                                                    const AttentionDecodeSpread&, hipStream_t);

}  // namespace cairn::infer::hip::attention
