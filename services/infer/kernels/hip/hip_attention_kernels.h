#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_ATTENTION_KERNELS_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_ATTENTION_KERNELS_H_

// The attention kernels' launchers (attention.hip, attention_decode*.hip, attention_mma.hip,
// attention_wgmma.hip), under hip_kernels.h's rules: device memory, enqueued on `stream`, the
// launch's error returned, every reduction in an order fixed by the shape. Included by
// hip_kernels.h.

#include <cstddef>
#include <cstdint>

#include "services/infer/kernels/hip/hip_compat.h"

namespace cairn::infer::hip {

// Causal GQA attention (the layout of AttentionArgs). Query rows are taken per kv head as
// (token, q head in group) pairs; keys are visited in tiles from key 0, so a row's result
// depends only on its own query, its position and the keys up to it. With `split_keys` > 0
// the keys are cut into ranges of that many keys (a multiple of AttentionKeyTile()), each
// range processed by its own blocks and the partial results merged in range order; that is
// the decode path, for long contexts with few query rows.
struct AttentionLaunch {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t tokens;
  int64_t past;
  int q_heads;
  int kv_heads;
  int head_dim;
  float scale;
  int64_t split_keys;  // 0: one range over all keys.
};
int AttentionMaxHeadDim();
int AttentionKeyTile();
// Key ranges of split_keys one call may have.
int64_t AttentionMaxSplits();
// Dynamic shared memory one attention block needs for `head_dim`.
size_t AttentionSharedBytes(int head_dim);
// Workspace floats the split path needs (0 without splits).
int64_t AttentionWorkspaceFloats(const AttentionLaunch& a);
// `decode_variant` (0 to kAttentionDecodeVariants - 1; the same bits) picks the split path's
// blocks where a call has at most 8 rows a kv head (a decode token's query heads): 0, the tile
// kernel (8 rows, keys and values loaded into shared memory in four batches of loads, then
// computed); 1, where the loads are 16-byte (else 0), AttentionDecodeBlock: asynchronous copies
// of each tile's keys and values overlapping the other's arithmetic, warps without a row in use
// skip the scores, the scores a lane a key, branch-free loops (NVIDIA; AMD takes 0); 2, as 1,
// but calls of at most 4 rows a kv head (one token at a GQA group of up to 4) take blocks of 4
// rows, a row a warp, instead of 8 of which half run on zeros; 3, as 2, and one-token calls (every
// sequence of a batch one token) of 5 to 8 rows a kv head whose blocks of 8 rows would leave
// multiprocessors idle (fewer blocks than `spread.multiprocessors`: one token of a GQA group of 8
// at a few thousand keys) take blocks of 4 rows too, a kv head's rows in two blocks reading the
// same keys and values; 4, variant 3's blocks streamed (AttentionDecodeStreamBlock in
// attention_decode_stream.hip): a warp a tile of a round of four, a lane a key scoring every row of
// the block, the tile's keys streamed through the warp's own ring of shared memory, each value
// read once from global memory. Variants 0 to 4 give the same bits. 5 (attention_decode_mma.hip)
// gives others: the scores and the weighted values on the matrix units, q, k, v and the softmax
// weights rounded to bf16 with fp32 accumulation (the prefill's bf16_attention numerics), a
// block a key range of up to 128 keys with every row of a kv head; calls it does not take
// (ranges longer than 128 keys, head dimensions not a multiple of 16, AMD) run variant 3.
inline constexpr int kAttentionDecodeVariants = 6;
// The variants that give variant 0's bits: 0 to kAttentionDecodeSameBitsVariants - 1.
inline constexpr int kAttentionDecodeSameBitsVariants = 5;
// The variant on the matrix units, whose bits are its own, and the variant whose blocks run the
// calls it does not take (and row-invariant calls, which it never takes).
inline constexpr int kAttentionDecodeMmaVariant = 5;
inline constexpr int kAttentionDecodeMmaFallbackVariant = 3;
// Whether this build has variant 5's blocks (NVIDIA; elsewhere every call runs variant 3's).
bool AttentionDecodeMmaSupported();
// Whether variant 5's blocks take a split-path call (head dimension a multiple of 16 up to 256,
// at most 8 rows a kv head, ranges of whole key tiles up to 128 keys, 8-byte aligned query and
// 16-byte aligned key and value rows; never on AMD). Its other calls get variant 0's bits, so a
// batch must not mix the two kinds: a call's bits would then depend on its batch.
bool AttentionDecodeMmaTakes(const AttentionLaunch& a);
// Launches of variant 5's matrix-unit blocks so far in this process (for tests).
int64_t AttentionDecodeMmaLaunches();
// How the decode blocks (decode_variant 1 to 3) share out a call's key ranges: each block takes
// `ranges_per_block` consecutive ranges (1, 2 or 4; 0: the most of those that still leave
// `min_waves` waves of blocks on `multiprocessors` multiprocessors, each holding as many blocks
// as the runtime's occupancy calculator gives; 1 where those are unknown). A range's
// arithmetic is that of a block of its own, so the choice never changes a bit; fewer, longer
// blocks keep their copies in flight across a range's end and are fewer to schedule.
inline constexpr int kAttentionDecodeMaxRangesPerBlock = 4;
struct AttentionDecodeSpread {
  int ranges_per_block = 1;
  int multiprocessors = 0;
  int min_waves = 2;
};
hipError_t Attention(const AttentionLaunch& a, int decode_variant,
                     const AttentionDecodeSpread& spread, float* workspace, hipStream_t stream);
// The split path of `count` calls (each with split_keys > 0, tokens > 0, equal q_heads, kv_heads
// and head_dim; at most AttentionMaxBatch() calls, and calls times the most key ranges of one
// call at most AttentionMaxBatchRanges()) in one launch of each kernel: each call's blocks run
// the code of its own Attention call, so its bits are that call's. `workspace` holds the calls'
// AttentionWorkspaceFloats one after another.
int AttentionMaxBatch();
int64_t AttentionMaxBatchRanges();
hipError_t AttentionSplitBatch(const AttentionLaunch* a, int count, int decode_variant,
                               const AttentionDecodeSpread& spread, float* workspace,
                               hipStream_t stream);
// The prefill path (split_keys == 0) on the matrix units (attention_mma.hip): q, k, v rounded
// to bf16 (k and v once per call into `workspace`, AttentionMmaWorkspaceBytes), fp32 softmax and
// accumulation, keys in tiles of 64 from key 0, so a row's bits depend only on its query,
// position and keys. Supported: NVIDIA, head_dim <= 256 and a multiple of 4, 16-byte aligned
// q / k / v, and enough shared memory per block.
// `variant` picks the block layout (0 to kAttentionMmaVariants - 1; every variant gives the same
// bits): 0, 128 rows a block, 32-bit fragment loads (the first kernel); 1, the same layout with
// ldmatrix fragment loads, masks only on tiles that cross a row's position and the output's
// rescale skipped when no maximum moved; 2, variant 1's code with 64 rows a block and single
// key and value buffers, so that two blocks share a multiprocessor; 3, variant 1's layout with
// the block's second half of warps one phase behind (P V of the previous tile before the
// scores of the next), one barrier a tile, row maxima by a tree, and the keys and values
// rounded by 16-byte kernels; 4, variant 2 with variant 3's maxima and rounding kernels; 5, for
// head dimension 256 in sm_90a builds, variant 3's operations on the warpgroup instructions
// (elsewhere variant 3); 6, variant 5 with its second warpgroup one phase behind as variant 3's
// second half (elsewhere variant 3). Variants 3-6 take a tile's weights by the bare exp2
// instruction where it gives exp2f's bits.
inline constexpr int kAttentionMmaVariants = 7;
bool AttentionMmaSupported(const AttentionLaunch& a, int max_shared_bytes);
int64_t AttentionMmaWorkspaceBytes(const AttentionLaunch& a);
hipError_t AttentionMma(const AttentionLaunch& a, int variant, void* workspace, hipStream_t stream);

}  // namespace cairn::infer::hip

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_ATTENTION_KERNELS_H_
