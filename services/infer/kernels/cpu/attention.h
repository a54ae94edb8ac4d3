#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_ATTENTION_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "services/infer/kernels/cpu/row_kernels.h"
#include "services/infer/kernels/kernel_backend.h"

// CpuKernelBackend's causal attention as independent work items, for the backend to spread over
// its threads. Each item writes its own part of a.out and nothing else.
namespace cairn::infer::cpu {

// One matrix product of the blocked attention, y[m, n] = x[m, k] . b (b is [n, k] when
// `transposed_b`, else [k, n]): the scores of a block of query rows (m rows, n keys, k the head
// size; transposed) or its weighted values (m rows, n the head size, k keys).
struct AttentionProduct {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool transposed_b = false;
};

// The products of the blocked attention of one query head of a pass of `tokens` queries after
// `past` earlier keys, as sgemm computes them (BlockedAttentionItem without the fused kernel):
// each block of query rows takes the scores of every key its last row sees (the masked ones
// after each row's own key included), then the weighted values. The reference the bench times
// sgemm on; the fused kernel computes fewer of the masked ones.
std::vector<AttentionProduct> BlockedAttentionProducts(int64_t tokens, int64_t past,
                                                       int64_t head_dim);

// Work items of the blocked attention (prefill passes): one per query head and block of query
// rows, the blocks with the most keys first.
int64_t BlockedAttentionItems(const AttentionArgs& a);
// Whether the blocked attention computes its scores with its own kernel (AVX-512 and a call of
// at least 32 query rows) from keys transposed once per call (TransposeKeys), rather than
// through cblas_sgemm: sgemm runs the scores' narrow inner dimension (the head size) at about
// two thirds of its rate on wide products.
bool UseScoreKernel(const AttentionArgs& a);
// Floats of the transposed keys of every kv head of `a`.
int64_t TransposedKeysFloats(const AttentionArgs& a);
// Writes kv head `kv_head`'s keys (all past + tokens of them) into its part of `kt`
// (TransposedKeysFloats floats in all), transposed in blocks of 16 keys, zeros after the last.
void TransposeKeys(const AttentionArgs& a, int kv_head, float* kt);

// Item `item` of the blocked attention. With the transposed keys `kt` and a head size of 32 or
// 64 (where it measured faster): fused, one block of keys at a time (the scores from the score
// kernel, a running softmax per row, the weighted values from a kernel in the score kernel's
// style), the scores never written out whole and key blocks after the group's last row's keys
// skipped. Otherwise: the scores (the score kernel, or cblas_sgemm where `kt` is null), a causal
// softmax per row, the weighted values through cblas_sgemm. `scores` is the running thread's
// buffer. Deterministic for given shapes; the fused and unfused forms round differently.
void BlockedAttentionItem(const AttentionArgs& a, int64_t item, const float* kt,
                          std::vector<float>* scores);

// Whether `a` takes the short path (ShortAttentionItem): fewer query rows than the score kernel
// takes (decode steps), a head size that is a multiple of 64 and no row invariance asked for.
bool UseShortAttention(const AttentionArgs& a);
// Work items of the short path: one per kv head and query row.
int64_t ShortAttentionItems(const AttentionArgs& a);
// Item `item` of the short path: the query heads that share the item's kv head, for one query
// row, together: their scores through the row kernel (RowProducts on fp32 keys, `isa`), each
// key row read once for the whole group, a softmax per head, then the weighted values with the
// group's outputs held in registers while the value rows pass (each sum over keys in order).
// `scores` is the running thread's buffer. Deterministic for given shapes; the result of a row
// depends only on its own query, keys and values.
void ShortAttentionItem(const AttentionArgs& a, Isa isa, int64_t item, std::vector<float>* scores);

// Work items of the row-invariant attention: one per query head and query row.
int64_t RowInvariantAttentionItems(const AttentionArgs& a);
// Item `item`: scores over keys 0..p in key order, a softmax with sums in key order, the
// output accumulated in key order. Nothing depends on the pass the row belongs to.
void RowInvariantAttentionItem(const AttentionArgs& a, int64_t item);

}  // namespace cairn::infer::cpu

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_ATTENTION_H_
