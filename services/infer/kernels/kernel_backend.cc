#include "services/infer/kernels/kernel_backend.h"

#include <algorithm>
#include <cmath>

namespace cairn::infer {

// Host implementations of the data-movement operations. They are written as the models wrote
// them inline before the operations moved behind the seam, so the CPU backend's bits are those
// of that code.

void KernelBackend::CopyRows(const float* src, int64_t ld_src, int64_t rows, int64_t cols,
                             float* dst, int64_t ld_dst) {
  if (ld_src == cols && ld_dst == cols) {
    std::copy(src, src + rows * cols, dst);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src + r * ld_src, src + r * ld_src + cols, dst + r * ld_dst);
  }
}

void KernelBackend::AddScaledRows(const float* src, int64_t rows, int64_t dim,
                                  const int32_t* dst_rows, const float* scales, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    float* o = dst + (dst_rows == nullptr ? r : static_cast<int64_t>(dst_rows[r])) * dim;
    const float* x = src + r * dim;
    if (scales == nullptr) {
      for (int64_t j = 0; j < dim; ++j) o[j] += x[j];
    } else {
      const float s = scales[r];
      for (int64_t j = 0; j < dim; ++j) o[j] += s * x[j];
    }
  }
}

void KernelBackend::CausalConvSiluBatch(absl::Span<const CausalConvArgs> batch) {
  for (const CausalConvArgs& a : batch) {
    CausalConvSilu(a.in, a.ld_in, a.tokens, a.channels, a.w, a.kernel, a.state, a.out);
  }
}

void KernelBackend::RopeAppendBatch(absl::Span<const RopeAppendArgs> batch) {
  for (const RopeAppendArgs& a : batch) {
    const int64_t width = static_cast<int64_t>(a.kv_heads) * a.head_dim;
    Rope(a.q, a.tokens, a.q_ld, a.q_heads, a.head_dim, a.rotary_dim, a.inv_freq, a.position);
    CopyRows(a.k, a.kv_ld, a.tokens, width, a.k_dst, width);
    CopyRows(a.v, a.kv_ld, a.tokens, width, a.v_dst, width);
    Rope(a.k_dst, a.tokens, width, a.kv_heads, a.head_dim, a.rotary_dim, a.inv_freq, a.position);
  }
}

void KernelBackend::AttentionBatch(absl::Span<const AttentionArgs> batch) {
  for (const AttentionArgs& args : batch) Attention(args);
}

void KernelBackend::GatedDeltaRuleBatch(absl::Span<const GatedDeltaArgs> batch) {
  for (const GatedDeltaArgs& args : batch) GatedDeltaRule(args);
}

void KernelBackend::SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* gate) {
  for (int64_t i = 0; i < rows; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-gate[i]));
    for (int64_t j = 0; j < dim; ++j) x[i * dim + j] *= s;
  }
}

}  // namespace cairn::infer
