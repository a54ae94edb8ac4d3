#include "services/infer/kernels/kernel_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace cairn::infer {

WeightMatrix WeightMatrix::RowRange(int64_t begin, int64_t end) const {
  WeightMatrix out;
  out.type = type;
  out.layout = layout;
  out.cols = cols;
  out.whole_rows = whole_rows > 0 ? whole_rows : rows();
  const int64_t row_bytes = cols * WeightTypeSize(type);
  int64_t first = 0;  // The part's first row in the whole matrix.
  for (int i = 0; i < num_parts; ++i) {
    const int64_t from = std::max(begin, first);
    const int64_t to = std::min(end, first + parts[i].rows);
    if (from < to) {
      out.parts[out.num_parts++] = {
          static_cast<const char*>(parts[i].data) + (from - first) * row_bytes, to - from};
    }
    first += parts[i].rows;
  }
  return out;
}

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

void KernelBackend::L2NormalizeTwo(float* a, float a_scale, float* b, float b_scale, int64_t tokens,
                                   int heads, int64_t dim, int64_t ld, float eps) {
  if (ld == heads * dim) {
    L2Normalize(a, tokens * heads, dim, eps, a_scale);
    L2Normalize(b, tokens * heads, dim, eps, b_scale);
    return;
  }
  for (int64_t t = 0; t < tokens; ++t) L2Normalize(a + t * ld, heads, dim, eps, a_scale);
  for (int64_t t = 0; t < tokens; ++t) L2Normalize(b + t * ld, heads, dim, eps, b_scale);
}

void KernelBackend::SplitHeadPairsStrided(const float* in, int64_t ld, int64_t rows, int heads,
                                          int head_dim, float* a, float* b) {
  const int64_t width = static_cast<int64_t>(heads) * head_dim;
  if (ld == 2 * width) {
    SplitHeadPairs(in, rows, heads, head_dim, a, b);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    SplitHeadPairs(in + r * ld, 1, heads, head_dim, a + r * width, b + r * width);
  }
}

void KernelBackend::RmsNormHeads(float* x, int64_t tokens, int heads, int64_t dim, int64_t ld,
                                 const float* w, float eps, bool zero_centred) {
  if (ld == heads * dim) {
    RmsNorm(x, tokens * heads, dim, w, eps, zero_centred, x);
    return;
  }
  for (int64_t t = 0; t < tokens; ++t) {
    RmsNorm(x + t * ld, heads, dim, w, eps, zero_centred, x + t * ld);
  }
}

void KernelBackend::GatedRmsNormHeads(const float* x, const float* z, int64_t tokens, int heads,
                                      int64_t dim, int64_t z_ld, const float* w, float eps,
                                      float* y) {
  if (z_ld == heads * dim) {
    GatedRmsNorm(x, z, tokens * heads, dim, w, eps, y);
    return;
  }
  const int64_t width = heads * dim;
  for (int64_t t = 0; t < tokens; ++t) {
    GatedRmsNorm(x + t * width, z + t * z_ld, heads, dim, w, eps, y + t * width);
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

void KernelBackend::NormRopeAppendBatch(const QkNormArgs& n,
                                        absl::Span<const RopeAppendArgs> batch) {
  if (n.qg != nullptr) {
    SplitHeadPairsStrided(n.qg, n.qg_ld, n.rows, n.q_heads, n.head_dim, n.q, n.gate);
  }
  RmsNormHeads(n.q, n.rows, n.q_heads, n.head_dim, n.q_ld, n.q_norm, n.eps, n.zero_centred);
  RmsNormHeads(n.k, n.rows, n.kv_heads, n.head_dim, n.kv_ld, n.k_norm, n.eps, n.zero_centred);
  RopeAppendBatch(batch);
}

void KernelBackend::AttentionBatch(absl::Span<const AttentionArgs> batch) {
  for (const AttentionArgs& args : batch) Attention(args);
}

void KernelBackend::GatedDeltaRuleBatch(absl::Span<const GatedDeltaArgs> batch) {
  for (const GatedDeltaArgs& args : batch) GatedDeltaRule(args);
}

void KernelBackend::GatedDeltaStepBatch(const GatedDeltaInputs& in,
                                        absl::Span<const GatedDeltaArgs> batch) {
  GdnGates(in.proj, in.proj_ld, in.tokens, in.v_heads, in.b_offset, in.a_offset, in.dt_bias,
           in.neg_a, in.g, in.beta);
  L2NormalizeTwo(in.q, in.q_scale, in.k, 1.0f, in.tokens, in.k_heads, in.dk, in.qk_ld, in.eps);
  GatedDeltaRuleBatch(batch);
}

void KernelBackend::GatedDeltaStepNormBatch(const GatedDeltaInputs& inputs,
                                            absl::Span<const GatedDeltaArgs> batch,
                                            const GatedNormHeadsArgs& norm) {
  GatedDeltaStepBatch(inputs, batch);
  GatedRmsNormHeads(norm.x, norm.z, norm.tokens, norm.heads, norm.dim, norm.z_ld, norm.w, norm.eps,
                    norm.y);
}

void KernelBackend::SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* gate) {
  for (int64_t i = 0; i < rows; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-gate[i]));
    for (int64_t j = 0; j < dim; ++j) x[i * dim + j] *= s;
  }
}

absl::StatusOr<MoeExpertsArgs> KernelBackend::PackedMoeArgs(const MoeExpertsArgs& args,
                                                            ScratchArena& scratch) {
  if (!args.StridesValid()) {
    return absl::InvalidArgumentError(absl::StrCat("MoE logits rows ", args.logits_ld,
                                                   " apart for ", args.experts, " experts, gates ",
                                                   args.out_gate_ld));
  }
  MoeExpertsArgs a = args;
  if (a.LogitsLd() != a.experts && a.tokens > 0) {
    ASSIGN_OR_RETURN(float* logits, scratch.Take<float>(a.tokens * a.experts));
    CopyRows(args.logits, args.LogitsLd(), a.tokens, a.experts, logits, a.experts);
    a.logits = logits;
  }
  if (a.out_gate != nullptr && a.OutGateLd() != 1 && a.tokens > 0) {
    ASSIGN_OR_RETURN(float* gate, scratch.Take<float>(a.tokens));
    CopyRows(args.out_gate, args.OutGateLd(), a.tokens, 1, gate, 1);
    a.out_gate = gate;
  }
  a.logits_ld = 0;
  a.out_gate_ld = 0;
  return a;
}

absl::Status KernelBackend::MoeSharedExpert(const MoeExpertsArgs& a, ScratchArena& scratch) {
  if (a.shared_gate_up == nullptr && a.shared_down == nullptr) return absl::OkStatus();
  const int64_t w = a.shared_width;
  if (a.shared_gate_up == nullptr || a.shared_down == nullptr || w <= 0 ||
      a.shared_gate_up->rows() != 2 * w || a.shared_gate_up->cols != a.hidden ||
      a.shared_down->rows() != a.hidden || a.shared_down->cols != w) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoE shared expert of width ", w, " does not fit hidden ", a.hidden));
  }
  const int64_t t = a.tokens;
  ScratchArena::Frame frame(scratch);
  ASSIGN_OR_RETURN(float* gu, scratch.Take<float>(t * 2 * w));
  ASSIGN_OR_RETURN(float* act, scratch.Take<float>(t * w));
  if (a.row_invariant) {
    MatMulRowsSiluMul(a.x, t, a.hidden, *a.shared_gate_up, gu, act);
    MatMulRowsTyped(act, t, w, *a.shared_down, a.out, a.hidden, false);
  } else {
    MatMulTransposedTyped(a.x, t, a.hidden, *a.shared_gate_up, gu, 2 * w, false);
    SiluMul(gu, 2 * w, gu + w, 2 * w, t, w, act);
    MatMulTransposedTyped(act, t, w, *a.shared_down, a.out, a.hidden, false);
  }
  return absl::OkStatus();
}

absl::Status KernelBackend::CheckMoeRouter(const MoeExpertsArgs& args) {
  if (args.router == nullptr) return absl::OkStatus();
  if (args.router_logits == nullptr || args.logits != args.router_logits ||
      args.router->rows() < args.experts || args.router->rows() > args.LogitsLd() ||
      args.router->cols != args.hidden) {
    return absl::InvalidArgumentError("MoE router product does not give the call's logits");
  }
  // A gate read from the logits' rows must be a column the product writes.
  const auto at = [](const float* p) { return reinterpret_cast<uintptr_t>(p); };
  const uintptr_t begin = at(args.router_logits);
  const uintptr_t end = at(args.router_logits + args.tokens * args.LogitsLd());
  const uintptr_t gate = at(args.out_gate);
  if (args.out_gate != nullptr && gate >= begin && gate < end &&
      static_cast<int64_t>((gate - begin) / sizeof(float)) % args.LogitsLd() >=
          args.router->rows()) {
    return absl::InvalidArgumentError("MoE shared gate outside the router product's columns");
  }
  return absl::OkStatus();
}

absl::Status KernelBackend::MoeRouter(const MoeExpertsArgs& args) {
  if (args.router == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(CheckMoeRouter(args));
  if (args.row_invariant) {
    MatMulRowsTyped(args.x, args.tokens, args.hidden, *args.router, args.router_logits,
                    args.LogitsLd(), false);
  } else {
    MatMulTransposedTyped(args.x, args.tokens, args.hidden, *args.router, args.router_logits,
                          args.LogitsLd(), false);
  }
  return absl::OkStatus();
}

absl::Status KernelBackend::MoeExperts(const MoeExpertsArgs& args, ScratchArena& scratch) {
  ScratchArena::Frame frame(scratch);
  RETURN_IF_ERROR(MoeRouter(args));
  RETURN_IF_ERROR(MoeSharedExpert(args, scratch));
  ASSIGN_OR_RETURN(const MoeExpertsArgs a, PackedMoeArgs(args, scratch));
  if (a.out_gate != nullptr) SigmoidScaleRows(a.out, a.tokens, a.hidden, a.out_gate);
  RETURN_IF_ERROR(MoeRoutedExperts(a, scratch));
  if (a.residual != nullptr) AddScaledRows(a.out, a.tokens, a.hidden, nullptr, nullptr, a.residual);
  return absl::OkStatus();
}

absl::Status KernelBackend::MoeRoutedExperts(const MoeExpertsArgs& a, ScratchArena& scratch) {
  if (a.LogitsLd() != a.experts) {
    return absl::InvalidArgumentError("MoeRoutedExperts needs its logits in rows of their own");
  }
  const int64_t t = a.tokens;
  const int64_t d = a.hidden;
  const int64_t width = a.width;
  const int e = a.experts;
  const int top_k = a.top_k;
  const int64_t picks = t * top_k;
  if (picks == 0) return absl::OkStatus();
  DeviceMemory* const memory = this->memory();
  ScratchArena::Frame frame(scratch);
  // The ids and then the weights in one buffer, so they come down in one copy.
  ASSIGN_OR_RETURN(int32_t * ids, scratch.Take<int32_t>(2 * picks));
  float* weights = reinterpret_cast<float*>(ids + picks);
  MoeRoute(a.logits, t, e, top_k, a.renormalise, ids, weights);
  // The routing comes to the host, which sorts the tokens by expert.
  std::vector<int32_t> routing(static_cast<size_t>(2 * picks));
  RETURN_IF_ERROR(memory->Download(routing.data(), ids, picks * 8));
  const absl::Span<const int32_t> host_ids(routing.data(), static_cast<size_t>(picks));
  std::vector<float> host_weights(static_cast<size_t>(picks));
  std::memcpy(host_weights.data(), routing.data() + picks, picks * 4);
  std::vector<int64_t> count(static_cast<size_t>(e) + 1, 0);
  for (int32_t id : host_ids) {
    if (id < 0 || id >= e) return absl::InternalError(absl::StrCat("MoE routing gave expert ", id));
    ++count[static_cast<size_t>(id) + 1];
  }
  // Expert ex's (token, weight) pairs are entries [start[ex], start[ex + 1]) in token order.
  std::vector<int64_t> start(count.size(), 0);
  int64_t largest = 0;
  for (int ex = 0; ex < e; ++ex) {
    start[ex + 1] = start[ex] + count[ex + 1];
    largest = std::max(largest, count[ex + 1]);
  }
  // The sorted rows and then their scales (as bits) in one buffer, so they go up in one copy.
  std::vector<int32_t> sorted(static_cast<size_t>(2 * picks));
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < picks; ++i) {
    const int64_t at = next[static_cast<size_t>(host_ids[i])]++;
    sorted[at] = static_cast<int32_t>(i / top_k);
    std::memcpy(&sorted[picks + at], &host_weights[i], 4);
  }
  ASSIGN_OR_RETURN(int32_t * rows_dev, scratch.Take<int32_t>(2 * picks));
  const float* scales_dev = reinterpret_cast<const float*>(rows_dev + picks);
  RETURN_IF_ERROR(memory->Upload(rows_dev, sorted.data(), picks * 8));
  ASSIGN_OR_RETURN(float* xs, scratch.Take<float>(largest * d));
  ASSIGN_OR_RETURN(float* ys, scratch.Take<float>(largest * d));
  ASSIGN_OR_RETURN(float* gu, scratch.Take<float>(largest * 2 * width));
  ASSIGN_OR_RETURN(float* act, scratch.Take<float>(largest * width));
  const auto matmul = [&](const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                          int64_t ldy) {
    if (a.row_invariant) {
      MatMulRowsTyped(x, m, ldx, w, y, ldy, false);
    } else {
      MatMulTransposedTyped(x, m, ldx, w, y, ldy, false);
    }
  };
  // Experts in ascending id: every token's sum has a fixed order.
  for (int ex = 0; ex < e; ++ex) {
    const int64_t n = count[ex + 1];
    if (n == 0) continue;
    EmbeddingGather(a.x, d, rows_dev + start[ex], n, xs);
    matmul(xs, n, d, a.gate_up[ex], gu, 2 * width);
    SiluMul(gu, 2 * width, gu + width, 2 * width, n, width, act);
    matmul(act, n, width, a.down[ex], ys, d);
    AddScaledRows(ys, n, d, rows_dev + start[ex], scales_dev + start[ex], a.out);
  }
  return absl::OkStatus();
}

}  // namespace cairn::infer
