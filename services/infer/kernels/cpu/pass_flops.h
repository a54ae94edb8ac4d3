#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_PASS_FLOPS_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_PASS_FLOPS_H_

#include <cstdint>
#include <utility>
#include <vector>

// The model FLOPs of a prefill pass, as matrix products a benchmark can time cblas_sgemm on
// (docs/cpu-backend.md section 5): the linear layers, attention's causal products and the
// chunked delta rule's products. Each product names the shape sgemm is timed on and the model
// FLOPs it stands for, which are fewer than the shape's own where only a causal triangle of it
// is needed (the masked scores a block of query rows computes are not model FLOPs).
namespace cairn::infer::cpu {

// Which part of the pass a product belongs to.
enum class PassPart { kLinear, kAttention, kDeltaRule };

// y[m, n] = x[m, k] . b, b being [n, k] when `transposed_b`, else [k, n]; standing for
// `model_flops` of the pass's arithmetic (at most ShapeFlops()).
struct PassProduct {
  PassPart part = PassPart::kLinear;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool transposed_b = false;
  double model_flops = 0;
};

// 2 m n k: the FLOPs of the product's whole shape, as sgemm computes it.
double ShapeFlops(const PassProduct& p);

// The sum of model_flops over `products`.
double ModelFlops(const std::vector<PassProduct>& products);

// The linear layers of a pass of `tokens` tokens: y = x . w^T for each weight of shape
// [rows, cols] in `weights` (every one a whole product: 2 tokens rows cols FLOPs).
std::vector<PassProduct> LinearPassProducts(const std::vector<std::pair<int64_t, int64_t>>& weights,
                                            int64_t tokens);

// One query head's attention in a pass of `tokens` queries after `past` earlier keys: the
// blocked attention's score and value products (BlockedAttentionProducts' shapes), each
// standing for the causal part of its block only. Query row i sees past + i + 1 keys, and each
// key costs 2 head_dim FLOPs in the scores and 2 head_dim in the weighted values, so the head's
// model FLOPs are 4 head_dim (tokens past + tokens (tokens + 1) / 2). Softmax is not counted.
std::vector<PassProduct> AttentionPassProducts(int64_t tokens, int64_t past, int64_t head_dim);

// One v-head of the gated delta rule over `tokens` tokens with key size dk and value size dv.
// Chunked (chunk > 0), per chunk of L tokens (the last one may be shorter), the products of
// the chunked form (docs/model.md section 3.6.5, delta_rule.cc):
//   K K^T          [L, L] over dk, strictly below the diagonal: L (L - 1) / 2 * 2 dk;
//   (I + B)^-1     forward substitution into u (dv wide) and w (dk wide), timed as the
//                  product [L, L] . [L, dv or dk], strictly lower: L (L - 1) / 2 * 2 dv, * 2 dk;
//   W S, Q S       [L, dk] . [dk, dv], whole: 2 L dk dv each;
//   Q K^T          [L, L] over dk, the causal triangle with its diagonal: L (L + 1) / 2 * 2 dk;
//   P V_new        [L, L] . [L, dv], the same triangle: L (L + 1) / 2 * 2 dv;
//   K'^T V_new     [dk, L] . [L, dv], whole: 2 L dk dv.
// Recurrent (chunk == 0), per token: S^T k, the rank-one update and S^T q, each 2 dk dv, timed
// as the product [1, dk] . [dk, dv]. Gates, decays and norms are not counted.
std::vector<PassProduct> DeltaRulePassProducts(int64_t tokens, int64_t dk, int64_t dv,
                                               int64_t chunk);

}  // namespace cairn::infer::cpu

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_PASS_FLOPS_H_
