// The hybrid model's forward passes: the layers (attention, Gated DeltaNet, SwiGLU, MoE) over a
// group of sequences' rows, the groups of a batch, and the logits.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status/status_macros.h"
#include "services/infer/kernels/scratch_arena.h"
#include "services/infer/models/qwen3_hybrid/qwen3_hybrid_model_impl.h"

namespace cairn::infer::qwen3_hybrid {

void Qwen3HybridModel::MatMul(const Group& g, const float* x, int64_t m, int64_t ldx,
                              const WeightMatrix& w, float* y, int64_t ldy, bool accumulate) {
  if (g.row_kernel) {
    backend_->MatMulRowsTyped(x, m, ldx, w, y, ldy, accumulate);
  } else {
    backend_->MatMulTransposedTyped(x, m, ldx, w, y, ldy, accumulate);
  }
}

absl::Status Qwen3HybridModel::RunSwiGlu(const Group& g, const SwiGlu& w, const float* x, int64_t t,
                                         float* y, bool accumulate) {
  const int64_t d = c_.hidden_size;
  ScratchArena::Frame frame(scratch_);
  ASSIGN_OR_RETURN(float* gu, scratch_.Take<float>(t * 2 * w.width));
  ASSIGN_OR_RETURN(float* act, scratch_.Take<float>(t * w.width));
  if (g.row_kernel) {
    backend_->MatMulRowsSiluMul(x, t, d, w.gate_up, gu, act);
  } else {
    MatMul(g, x, t, d, w.gate_up, gu, 2 * w.width, false);
    backend_->SiluMul(gu, 2 * w.width, gu + w.width, 2 * w.width, t, w.width, act);
  }
  MatMul(g, act, t, w.width, w.down, y, d, accumulate);
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::RunAttention(const Group& g, const AttentionWeights& w,
                                            const float* x, float* h) {
  const int64_t d = c_.hidden_size;
  const int hq = c_.num_heads;
  const int hd = c_.head_dim;
  const int64_t t = g.rows;
  const int64_t q_width = static_cast<int64_t>(hq) * hd;
  const int64_t kv_width = static_cast<int64_t>(c_.num_kv_heads) * hd;
  ScratchArena::Frame frame(scratch_);
  // q_proj's output: [q_h | gate_h] per head with the output gate, else q.
  const int64_t q_out = c_.attention_gate ? 2 * q_width : q_width;
  ASSIGN_OR_RETURN(float* q, scratch_.Take<float>(t * q_width));
  float* k = nullptr;
  float* v = nullptr;
  float* qg = q;
  // Between consecutive tokens' rows of qg, q (as the norm, RoPE and attention read it) and k
  // and v.
  int64_t qg_ld = q_out;
  int64_t q_ld = q_width;
  int64_t kv_ld = kv_width;
  if (g.row_kernel && w.qkv.num_parts > 0) {
    // One product for the three (a decode step's few rows: one pass over the weights instead of
    // three), each block used where the product put it, token rows `width` apart: k normalised
    // in place there and appended from there with v, the output gate's pairs split from there.
    // Queries without the gate stay there too where every sequence has one token (attention
    // reads a sequence's query rows q_width apart), else they are copied into rows of their own.
    const int64_t width = q_out + 2 * kv_width;
    ASSIGN_OR_RETURN(float* qkv, scratch_.Take<float>(t * width));
    MatMul(g, x, t, d, w.qkv, qkv, width, false);
    bool one_token_each = true;
    for (const Sequence& s : g.seqs) one_token_each = one_token_each && s.tokens == 1;
    k = qkv + q_out;
    v = qkv + q_out + kv_width;
    kv_ld = width;
    if (c_.attention_gate) {
      qg = qkv;
      qg_ld = width;
    } else if (one_token_each) {
      q = qg = qkv;
      q_ld = width;
    } else {
      backend_->CopyRows(qkv, width, t, q_width, q, q_width);
    }
  } else {
    if (c_.attention_gate) {
      ASSIGN_OR_RETURN(qg, scratch_.Take<float>(t * q_out));
    }
    ASSIGN_OR_RETURN(k, scratch_.Take<float>(t * kv_width));
    ASSIGN_OR_RETURN(v, scratch_.Take<float>(t * kv_width));
    MatMul(g, x, t, d, w.q, qg, q_out, false);
    MatMul(g, x, t, d, w.k, k, kv_width, false);
    MatMul(g, x, t, d, w.v, v, kv_width, false);
  }
  float* gate = nullptr;
  if (c_.attention_gate) {
    ASSIGN_OR_RETURN(gate, scratch_.Take<float>(t * q_width));
  }
  ASSIGN_OR_RETURN(float* o, scratch_.Take<float>(t * q_width));
  // The output gate's pairs split from the queries, the q and k norms, then RoPE of the queries
  // and the new key rows, appended to each slot: one call for the group's sequences (a device
  // backend runs them together, in decode in one launch).
  QkNormArgs norms;
  norms.rows = t;
  norms.qg = gate != nullptr ? qg : nullptr;
  norms.qg_ld = qg_ld;
  norms.gate = gate;
  norms.q = q;
  norms.q_ld = q_ld;
  norms.k = k;
  norms.kv_ld = kv_ld;
  norms.q_heads = hq;
  norms.kv_heads = c_.num_kv_heads;
  norms.head_dim = hd;
  norms.q_norm = w.q_norm.data;
  norms.k_norm = w.k_norm.data;
  norms.eps = c_.rms_norm_eps;
  norms.zero_centred = c_.zero_centred_norm;
  std::vector<RopeAppendArgs> appends;
  appends.reserve(g.seqs.size());
  for (const Sequence& s : g.seqs) {
    const int64_t pos = s.slot->position();
    RopeAppendArgs& a = appends.emplace_back();
    a.q = q + s.row * q_ld;
    a.k = k + s.row * kv_ld;
    a.v = v + s.row * kv_ld;
    a.k_dst = s.slot->data(w.k_component) + pos * kv_width;
    a.v_dst = s.slot->data(w.v_component) + pos * kv_width;
    a.tokens = s.tokens;
    a.position = pos;
    a.q_ld = q_ld;
    a.kv_ld = kv_ld;
    a.q_heads = hq;
    a.kv_heads = c_.num_kv_heads;
    a.head_dim = hd;
    a.rotary_dim = c_.rotary_dim;
    a.inv_freq = inv_freq_.data;
  }
  backend_->NormRopeAppendBatch(norms, appends);
  std::vector<AttentionArgs> batch;
  batch.reserve(g.seqs.size());
  for (const Sequence& s : g.seqs) {
    const int64_t pos = s.slot->position();
    AttentionArgs args;
    args.q = q + s.row * q_ld;
    args.k = s.slot->data(w.k_component);
    args.v = s.slot->data(w.v_component);
    args.out = o + s.row * q_width;
    args.tokens = s.tokens;
    args.past = pos;
    args.q_heads = hq;
    args.kv_heads = c_.num_kv_heads;
    args.head_dim = hd;
    args.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    args.row_invariant = options_.pass_invariant;
    batch.push_back(args);
  }
  backend_->AttentionBatch(batch);
  if (gate != nullptr) backend_->SigmoidMul(o, gate, t * q_width);
  MatMul(g, o, t, q_width, w.o, h, d, true);
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::RunGdn(const Group& g, const GdnWeights& w, const float* x,
                                      float* h) {
  const int64_t d = c_.hidden_size;
  const int64_t kd = c_.key_dim();
  const int64_t vd = c_.value_dim();
  const int hv = c_.linear_v_heads;
  const int64_t conv_dim = c_.conv_dim();
  const int64_t width = conv_dim + vd + 2 * hv;
  const int64_t t = g.rows;
  ScratchArena::Frame frame(scratch_);
  ASSIGN_OR_RETURN(float* proj, scratch_.Take<float>(t * width));
  ASSIGN_OR_RETURN(float* conv, scratch_.Take<float>(t * conv_dim));
  // One call for the group's sequences: a device backend runs them together, in decode in the
  // projection's launch (KernelBackend::MatMulRowsCausalConv).
  std::vector<CausalConvArgs> convs;
  convs.reserve(g.seqs.size());
  for (const Sequence& s : g.seqs) {
    convs.push_back({proj + s.row * width, width, s.tokens, conv_dim, w.conv.data, c_.conv_kernel,
                     s.slot->data(w.conv_component), conv + s.row * conv_dim});
  }
  if (g.row_kernel) {
    backend_->MatMulRowsCausalConv(x, t, d, w.in_proj, proj, width, convs);
  } else {
    MatMul(g, x, t, d, w.in_proj, proj, width, false);
    backend_->CausalConvSiluBatch(convs);
  }
  // q, k and v are the conv output's column blocks, read in place (token rows conv_dim apart):
  // q and k are normalised there (`conv` is used by nothing else) and the rule takes the row
  // strides. z, a block of the projection, is read there too by the gated norm.
  float* q = conv;
  float* k = conv + kd;
  float* v = conv + 2 * kd;
  const int64_t qk_ld = conv_dim;    // Between tokens' rows of q and of k.
  const int64_t v_ld = conv_dim;     // Between tokens' rows of v.
  const float* z = proj + conv_dim;  // Token rows `width` apart.
  ASSIGN_OR_RETURN(float* gates, scratch_.Take<float>(t * hv));
  ASSIGN_OR_RETURN(float* beta, scratch_.Take<float>(t * hv));
  const int dk = c_.linear_k_dim;
  // The gates and q / k's normalisation, then the rule: one call (a device backend may do them
  // inside the rule's decode steps).
  GatedDeltaInputs inputs;
  inputs.proj = proj;
  inputs.proj_ld = width;
  inputs.tokens = t;
  inputs.v_heads = hv;
  inputs.b_offset = conv_dim + vd;
  inputs.a_offset = conv_dim + vd + hv;
  inputs.dt_bias = w.dt_bias.data;
  inputs.neg_a = w.neg_a.data;
  inputs.g = gates;
  inputs.beta = beta;
  inputs.q = q;
  inputs.k = k;
  inputs.q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  inputs.k_heads = c_.linear_k_heads;
  inputs.dk = dk;
  inputs.qk_ld = qk_ld;
  inputs.eps = kL2NormEps;
  ASSIGN_OR_RETURN(float* o, scratch_.Take<float>(t * vd));
  // One call for the group's sequences: a device backend runs their decode steps together.
  std::vector<GatedDeltaArgs> batch;
  batch.reserve(g.seqs.size());
  for (const Sequence& s : g.seqs) {
    GatedDeltaArgs& args = batch.emplace_back();
    args.q = q + s.row * qk_ld;
    args.k = k + s.row * qk_ld;
    args.v = v + s.row * v_ld;
    args.g = gates + s.row * hv;
    args.beta = beta + s.row * hv;
    args.state = s.slot->data(w.recurrent_component);
    args.out = o + s.row * vd;
    args.tokens = s.tokens;
    args.k_heads = c_.linear_k_heads;
    args.v_heads = hv;
    args.dk = dk;
    args.dv = c_.linear_v_dim;
    args.chunk = s.tokens == 1 || options_.pass_invariant ? 0 : options_.gdn_chunk;
    args.qk_ld = qk_ld;
    args.v_ld = v_ld;
  }
  // Then the gated norm over the outputs, in place (a device backend may norm in the rule's
  // decode steps).
  GatedNormHeadsArgs norm;
  norm.x = o;
  norm.z = z;
  norm.tokens = t;
  norm.heads = hv;
  norm.dim = c_.linear_v_dim;
  norm.z_ld = width;
  norm.w = w.norm.data;
  norm.eps = c_.rms_norm_eps;
  norm.y = o;
  backend_->GatedDeltaStepNormBatch(inputs, batch, norm);
  MatMul(g, o, t, vd, w.out, h, d, true);
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::RunMoe(const Group& g, const MoeWeights& w, const float* x,
                                      float* h) {
  const int64_t d = c_.hidden_size;
  const int e = c_.num_experts;
  const int64_t t = g.rows;
  ScratchArena::Frame frame(scratch_);
  // Decode's router logits and shared gate from one product (token rows e + 1 apart, the gate
  // last), else two.
  const bool one_product = g.row_kernel && w.router_gate.num_parts > 0;
  const int64_t logits_ld = one_product ? e + 1 : e;
  ASSIGN_OR_RETURN(float* logits, scratch_.Take<float>(t * logits_ld));
  float* sg = logits + e;
  // Decode's product is MoeExperts' first step (a device backend may run it in the experts'
  // launch).
  if (!one_product) MatMul(g, x, t, d, w.router, logits, e, false);
  // The shared expert first, then the routed experts in ascending id (MoeExperts, which runs
  // the shared expert too, as RunSwiGlu would); every token's sum has a fixed order.
  ASSIGN_OR_RETURN(float* out, scratch_.Take<float>(t * d));
  if (!one_product) {
    ASSIGN_OR_RETURN(sg, scratch_.Take<float>(t));
    MatMul(g, x, t, d, w.shared_gate, sg, 1, false);
  }
  // The shared expert's gate, the routed experts, then the layer's output into the residual
  // stream: one call (a device backend may do the three in one launch).
  MoeExpertsArgs args;
  args.x = x;
  args.logits = logits;
  args.out = out;
  args.tokens = t;
  args.hidden = d;
  args.width = c_.moe_intermediate_size;
  args.experts = e;
  args.top_k = c_.top_k;
  args.renormalise = c_.norm_topk_prob;
  args.gate_up = w.gate_up.data();
  args.down = w.down.data();
  args.row_invariant = g.row_kernel;
  args.out_gate = sg;
  args.logits_ld = logits_ld;
  args.out_gate_ld = one_product ? logits_ld : 1;
  args.shared_gate_up = &w.shared.gate_up;
  args.shared_down = &w.shared.down;
  args.shared_width = w.shared.width;
  args.residual = h;
  if (one_product) {
    args.router = &w.router_gate;
    args.router_logits = logits;
  }
  return backend_->MoeExperts(args, scratch_);
}

absl::Status Qwen3HybridModel::CheckPass(const SequencePass& pass) const {
  if (pass.slot == nullptr) return absl::InvalidArgumentError("forward pass without a slot");
  if (pass.tokens.empty()) return absl::InvalidArgumentError("empty forward pass");
  for (int32_t id : pass.tokens) {
    if (id < 0 || id >= c_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " outside vocabulary of ", c_.vocab_size));
    }
  }
  if (!(pass.slot->layout() == layout_)) {
    return absl::InvalidArgumentError("slot was not created with this model's state layout");
  }
  if (!pass.slot->runnable()) {
    return absl::FailedPreconditionError("slot is being restored and cannot run");
  }
  const int64_t t = static_cast<int64_t>(pass.tokens.size());
  if (pass.slot->memory() != memory_) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot state is in ", pass.slot->memory()->name(), " memory but the ",
                     backend_->name(), " backend computes in ", memory_->name(), " memory"));
  }
  if (pass.slot->position() + t > pass.slot->max_rows()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("pass of ", t, " tokens at position ", pass.slot->position(),
                     " does not fit the slot's ", pass.slot->max_rows(), " rows"));
  }
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::RunGroup(Group& g, absl::Span<const SequencePass> batch,
                                        std::vector<std::vector<float>>& results,
                                        std::vector<absl::Span<const float>>* views) {
  const int64_t d = c_.hidden_size;
  const int64_t t = g.rows;
  ScratchArena::Frame frame(scratch_);
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(t));
  for (const Sequence& s : g.seqs) {
    const SequencePass& pass = batch[s.index];
    ids.insert(ids.end(), pass.tokens.begin(), pass.tokens.end());
  }
  ASSIGN_OR_RETURN(int32_t * ids_dev, scratch_.Take<int32_t>(t));
  // Queued: the host goes on launching the pass while the ids go up (a decode step waits for
  // the device once, at its logits' download).
  RETURN_IF_ERROR(memory_->UploadQueued(ids_dev, ids.data(), t * 4));
  ASSIGN_OR_RETURN(float* h, scratch_.Take<float>(t * d));
  ASSIGN_OR_RETURN(float* xn, scratch_.Take<float>(t * d));
  backend_->EmbeddingGatherTyped(embed_, ids_dev, t, h);
  for (const LayerWeights& lw : layers_) {
    backend_->RmsNorm(h, t, d, lw.input_norm.data, c_.rms_norm_eps, c_.zero_centred_norm, xn);
    if (lw.full_attention) {
      RETURN_IF_ERROR(RunAttention(g, lw.attn, xn, h));
    } else {
      RETURN_IF_ERROR(RunGdn(g, lw.gdn, xn, h));
    }
    backend_->RmsNorm(h, t, d, lw.post_norm.data, c_.rms_norm_eps, c_.zero_centred_norm, xn);
    if (lw.moe) {
      RETURN_IF_ERROR(RunMoe(g, lw.experts, xn, h));
    } else {
      RETURN_IF_ERROR(RunSwiGlu(g, lw.mlp, xn, t, h, true));
    }
  }
  // The rows whose logits are returned: every row of an all_logits pass, else its last.
  // Where those are every row of the group in order (a decode step: one token a sequence), they
  // are `h` itself and need no gathering.
  int64_t rows = 0;
  bool every_row = true;
  for (const Sequence& s : g.seqs) {
    const int64_t n = batch[s.index].all_logits ? s.tokens : 1;
    every_row = every_row && s.row == rows && n == s.tokens;
    rows += n;
  }
  const float* last = h;
  if (!every_row) {
    ASSIGN_OR_RETURN(float* gathered, scratch_.Take<float>(rows * d));
    int64_t row = 0;
    for (const Sequence& s : g.seqs) {
      const int64_t n = batch[s.index].all_logits ? s.tokens : 1;
      backend_->CopyRows(h + (s.row + s.tokens - n) * d, d, n, d, gathered + row * d, d);
      row += n;
    }
    last = gathered;
  }
  ASSIGN_OR_RETURN(float* normed, scratch_.Take<float>(rows * d));
  backend_->RmsNorm(last, rows, d, final_norm_.data, c_.rms_norm_eps, c_.zero_centred_norm, normed);
  ASSIGN_OR_RETURN(float* logits, scratch_.Take<float>(rows * c_.vocab_size));
  const int64_t floats = rows * c_.vocab_size;
  if (views != nullptr || (!memory_->host_visible() && floats <= kMaxStagedLogits)) {
    // Device memory: every row in one copy into page-locked staging (not one pageable copy a
    // sequence), then each sequence's rows into its result. The download waits for the device
    // and reports any error of the pass.
    float* staged = logits_host_.Get(floats);
    RETURN_IF_ERROR(LogitsIntoStaging(g, normed, rows, logits, staged));
    int64_t row = 0;
    for (const Sequence& s : g.seqs) {
      const int64_t n = batch[s.index].all_logits ? s.tokens : 1;
      const float* from = staged + row * c_.vocab_size;
      if (views != nullptr) {
        (*views)[s.index] = absl::MakeConstSpan(from, static_cast<size_t>(n * c_.vocab_size));
      } else {
        results[s.index].assign(from, from + n * c_.vocab_size);
      }
      row += n;
    }
  } else {
    MatMul(g, normed, rows, d, lm_head_, logits, c_.vocab_size, false);
    int64_t row = 0;
    for (const Sequence& s : g.seqs) {
      const int64_t n = batch[s.index].all_logits ? s.tokens : 1;
      std::vector<float>& out = results[s.index];
      out.resize(static_cast<size_t>(n * c_.vocab_size));
      // The first download waits for the device and reports any error of the pass.
      RETURN_IF_ERROR(memory_->Download(out.data(), logits + row * c_.vocab_size,
                                        n * c_.vocab_size * static_cast<int64_t>(sizeof(float))));
      row += n;
    }
  }
  for (const Sequence& s : g.seqs) s.slot->CommitAppend(s.tokens);
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::LogitsIntoStaging(const Group& g, const float* normed, int64_t rows,
                                                 float* logits, float* staged) {
  const int64_t vocab = c_.vocab_size;
  const int64_t bytes = rows * vocab * static_cast<int64_t>(sizeof(float));
  // Parts of whole groups of kLogitsPartRows rows, so that each part's rows keep the
  // alignment of the whole matrix's.
  constexpr int64_t kLogitsPartRows = 128;
  // Straight into the staging: only the row kernels, whose logit bits do not depend on where
  // they are stored; the whole product as one call.
  float* alias = logits_host_.device_alias();
  if (alias != nullptr && bytes <= options_.logits_direct_max_bytes && g.row_kernel &&
      !memory_->host_visible() && lm_head_.layout == WeightLayout::kRows) {
    MatMul(g, normed, rows, c_.hidden_size, lm_head_, alias + (staged - logits_host_.data()), vocab,
           false);
    return memory_->Synchronize();
  }
  const int parts = static_cast<int>(
      std::min<int64_t>(options_.logits_parts, std::max<int64_t>(1, vocab / kLogitsPartRows)));
  // Only the row kernels promise that a logit does not depend on the other weight rows of its
  // call (the GEMMs may pick their blocking by the call's shape; the row kernels decide theirs
  // by the whole matrix, WeightMatrix::whole_rows). A download into pageable memory would wait
  // for its part's product, so parts would only add launches.
  if (parts <= 1 || !g.row_kernel || memory_->host_visible() || !logits_host_.pinned() ||
      lm_head_.layout != WeightLayout::kRows || bytes < options_.logits_parts_min_bytes) {
    MatMul(g, normed, rows, c_.hidden_size, lm_head_, logits, vocab, false);
    return memory_->Download(staged, logits, bytes);
  }
  const int64_t pitch = vocab * static_cast<int64_t>(sizeof(float));
  absl::Status queued;
  for (int p = 0; p < parts && queued.ok(); ++p) {
    const int64_t begin = vocab * p / parts / kLogitsPartRows * kLogitsPartRows;
    const int64_t end =
        p + 1 == parts ? vocab : vocab * (p + 1) / parts / kLogitsPartRows * kLogitsPartRows;
    MatMul(g, normed, rows, c_.hidden_size, lm_head_.RowRange(begin, end), logits + begin, vocab,
           false);
    queued = memory_->DownloadRowsQueued(staged + begin, pitch, logits + begin, pitch,
                                         (end - begin) * static_cast<int64_t>(sizeof(float)), rows);
  }
  // Waited for even after an error: no queued copy may still write the staging afterwards.
  const absl::Status waited = memory_->WaitQueuedDownloads();
  RETURN_IF_ERROR(queued);
  return waited;
}

absl::Status Qwen3HybridModel::PrepareBatch(absl::Span<const SequencePass> batch) const {
  if (batch.empty()) return absl::InvalidArgumentError("empty forward batch");
  for (size_t i = 0; i < batch.size(); ++i) {
    RETURN_IF_ERROR(CheckPass(batch[i]));
    for (size_t j = 0; j < i; ++j) {
      if (batch[j].slot == batch[i].slot) {
        return absl::InvalidArgumentError(
            absl::StrCat("forward batch names one slot twice (sequences ", j, " and ", i, ")"));
      }
    }
  }
  for (const SequencePass& pass : batch) {
    RETURN_IF_ERROR(pass.slot->PrepareAppend(static_cast<int64_t>(pass.tokens.size())));
  }
  return absl::OkStatus();
}

Qwen3HybridModel::Group Qwen3HybridModel::SharedGroup(absl::Span<const SequencePass> batch) const {
  Group small;
  small.row_kernel = true;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t t = static_cast<int64_t>(batch[i].tokens.size());
    if (InSharedGroup(t)) {
      small.seqs.push_back({static_cast<int>(i), batch[i].slot, small.rows, t});
      small.rows += t;
    }
  }
  return small;
}

absl::Status Qwen3HybridModel::FailedPass(absl::Status failed) {
  // Whether or not the backend recovers, the pass failed: its own error is the answer, and a
  // fault is Fault()'s to report.
  static_cast<void>(backend_->Recover());
  return failed;
}

absl::Status Qwen3HybridModel::ForwardBatchViews(absl::Span<const SequencePass> batch,
                                                 std::vector<absl::Span<const float>>& views) {
  absl::Status s = RunBatchViews(batch, views);
  return s.ok() ? s : FailedPass(std::move(s));
}

absl::Status Qwen3HybridModel::ForwardBatchInto(absl::Span<const SequencePass> batch,
                                                std::vector<std::vector<float>>& results) {
  absl::Status s = RunBatchInto(batch, results);
  return s.ok() ? s : FailedPass(std::move(s));
}

absl::Status Qwen3HybridModel::RunBatchViews(absl::Span<const SequencePass> batch,
                                             std::vector<absl::Span<const float>>& views) {
  // In place only where one staged download holds every sequence's logits: device memory, one
  // shared group (every pass short), at most kMaxStagedLogits floats.
  Group all = SharedGroup(batch);
  int64_t floats = 0;
  for (const SequencePass& pass : batch) {
    floats += (pass.all_logits ? static_cast<int64_t>(pass.tokens.size()) : 1) * c_.vocab_size;
  }
  if (memory_->host_visible() || batch.empty() || all.seqs.size() != batch.size() ||
      floats > kMaxStagedLogits) {
    return Model::ForwardBatchViews(batch, views);
  }
  RETURN_IF_ERROR(PrepareBatch(batch));
  views.assign(batch.size(), {});
  const EndPassOnReturn end_pass{scratch_};
  std::vector<std::vector<float>> unused;
  return RunGroup(all, batch, unused, &views);
}

absl::Status Qwen3HybridModel::RunBatchInto(absl::Span<const SequencePass> batch,
                                            std::vector<std::vector<float>>& results) {
  RETURN_IF_ERROR(PrepareBatch(batch));
  // Short passes (decode steps) share one group computed with the row-invariant product;
  // each longer pass runs alone through the GEMM. Which path a sequence takes depends only
  // on its own length, so its bits never depend on the rest of the batch.
  // Every result is assigned or resized in RunGroup, keeping the vectors' memory.
  results.resize(batch.size());
  Group small = SharedGroup(batch);
  const EndPassOnReturn end_pass{scratch_};
  if (!small.seqs.empty()) RETURN_IF_ERROR(RunGroup(small, batch, results));
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t t = static_cast<int64_t>(batch[i].tokens.size());
    if (InSharedGroup(t)) continue;
    Group alone;
    alone.seqs.push_back({static_cast<int>(i), batch[i].slot, 0, t});
    alone.rows = t;
    RETURN_IF_ERROR(RunGroup(alone, batch, results));
  }
  return absl::OkStatus();
}

}  // namespace cairn::infer::qwen3_hybrid
