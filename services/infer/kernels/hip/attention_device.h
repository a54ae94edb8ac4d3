#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_ATTENTION_DEVICE_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_ATTENTION_DEVICE_H_

// What the fp32 attention's two files share (attention.hip: the scalar blocks, the merge of the
// split path's key ranges and the launches that choose the blocks; attention_decode.hip: the
// split path's decode blocks): the block and tile sizes both use, the parameters of a call and
// of a batch of calls, the mark of a skipped tile, and the decode blocks' launches. Included
// only by those two kernel sources.

#include <cstdint>

#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip::attention {

// Query rows per block: kWideRows for prefill, kNarrowRows when a kv head has few query rows
// (decode). Rows never share arithmetic, so the choice does not change any row's bits.
inline constexpr int kWideRows = 32;
inline constexpr int kNarrowRows = 8;
inline constexpr int kBc = 32;  // Keys per tile.

struct Params {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t past;
  int64_t rows;  // tokens * group per kv head.
  int group;
  int kv_heads;
  int d;
  float scale;
  int64_t q_ld;
  int64_t kv_ld;
  int64_t split_keys;  // Keys per range; >= past + tokens without splits.
  float* part_o;       // Split path: [splits, kv_heads, rows, d]; null otherwise.
  float* part_m;       // [splits, kv_heads, rows]
  float* part_l;       // [splits, kv_heads, rows]
};

// Marks a row whose tile held no visible key: the tile is skipped for it.
inline constexpr float kSkipTile = -1.0f;

// Calls per launch of the batched split path: their parameters stay well under the 4 KiB a
// kernel's parameters may take.
inline constexpr int kMaxBatch = 16;
struct ParamsBatch {
  Params seq[kMaxBatch];
  int64_t splits[kMaxBatch];
};

// Whether this platform has the decode blocks (attention_decode.hip; NVIDIA: they copy tiles
// with cp.async).
#if !defined(__HIP_PLATFORM_AMD__)
inline constexpr bool kDecodeBlocks = true;
#else
inline constexpr bool kDecodeBlocks = false;
#endif

// The decode blocks' launches (attention_decode.hip) for one call of the split path (Attention)
// and for a batch of calls (AttentionSplitBatch); kMaxD is 64, 128 or 256.
template <int kMaxD>
hipError_t LaunchDecode(const Params& p, int64_t splits, int decode_variant,
                        const AttentionDecodeSpread& spread, hipStream_t stream);
template <int kMaxD>
hipError_t LaunchDecodeBatch(const ParamsBatch& b, int count, int64_t max_rows, int64_t max_splits,
                             int decode_variant, const AttentionDecodeSpread& spread,
                             hipStream_t stream);

}  // namespace cairn::infer::hip::attention

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_ATTENTION_DEVICE_H_
