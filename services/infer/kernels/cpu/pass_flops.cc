#include "services/infer/kernels/cpu/pass_flops.h"

#include <algorithm>

#include "services/infer/kernels/cpu/attention.h"

namespace cairn::infer::cpu {

double ShapeFlops(const PassProduct& p) {
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
}

double ModelFlops(const std::vector<PassProduct>& products) {
  double total = 0;
  for (const PassProduct& p : products) total += p.model_flops;
  return total;
}

std::vector<PassProduct> LinearPassProducts(const std::vector<std::pair<int64_t, int64_t>>& weights,
                                            int64_t tokens) {
  std::vector<PassProduct> out;
  out.reserve(weights.size());
  for (const auto& [rows, cols] : weights) {
    PassProduct p{PassPart::kLinear, tokens, rows, cols, /*transposed_b=*/true, 0};
    p.model_flops = ShapeFlops(p);
    out.push_back(p);
  }
  return out;
}

std::vector<PassProduct> AttentionPassProducts(int64_t tokens, int64_t past, int64_t head_dim) {
  std::vector<PassProduct> out;
  for (const AttentionProduct& a : BlockedAttentionProducts(tokens, past, head_dim)) {
    // The block's rows are consecutive and its last row sees the most keys (`keys`, the
    // scores' n or the values' k): the row j before the last sees keys - j of them.
    const int64_t rows = a.m;
    const int64_t keys = a.transposed_b ? a.n : a.k;
    const double seen = static_cast<double>(rows) * static_cast<double>(keys) -
                        static_cast<double>(rows) * static_cast<double>(rows - 1) / 2;
    out.push_back({PassPart::kAttention, a.m, a.n, a.k, a.transposed_b,
                   2.0 * static_cast<double>(head_dim) * seen});
  }
  return out;
}

std::vector<PassProduct> DeltaRulePassProducts(int64_t tokens, int64_t dk, int64_t dv,
                                               int64_t chunk) {
  std::vector<PassProduct> out;
  const double k2 = 2.0 * static_cast<double>(dk);
  const double v2 = 2.0 * static_cast<double>(dv);
  if (chunk <= 0) {
    for (int i = 0; i < 3; ++i) {
      out.push_back({PassPart::kDeltaRule, 1, dv, dk, false,
                     static_cast<double>(tokens) * v2 * static_cast<double>(dk)});
    }
    return out;
  }
  for (int64_t c0 = 0; c0 < tokens; c0 += chunk) {
    const int64_t len = std::min(chunk, tokens - c0);
    const double l = static_cast<double>(len);
    const double below = l * (l - 1) / 2;   // Strictly below the diagonal.
    const double causal = l * (l + 1) / 2;  // With the diagonal.
    const double whole = 2.0 * l * static_cast<double>(dk) * static_cast<double>(dv);
    const PassPart d = PassPart::kDeltaRule;
    out.push_back({d, len, len, dk, true, below * k2});    // K K^T.
    out.push_back({d, len, dv, len, false, below * v2});   // u = (I + B)^-1 beta v.
    out.push_back({d, len, dk, len, false, below * k2});   // w = (I + B)^-1 beta e^G k.
    out.push_back({d, len, dv, dk, false, whole});         // W S.
    out.push_back({d, len, dv, dk, false, whole});         // Q S.
    out.push_back({d, len, len, dk, true, causal * k2});   // Q K^T.
    out.push_back({d, len, dv, len, false, causal * v2});  // P V_new.
    out.push_back({d, dk, dv, len, false, whole});         // K'^T V_new.
  }
  return out;
}

}  // namespace cairn::infer::cpu
