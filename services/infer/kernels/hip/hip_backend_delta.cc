// HipKernelBackend's gated delta rule: the shape checks, the recurrent and chunked forms (the
// chunked one on the matrix units where the kernels take it), batches of decode steps, and the
// steps with their gates and q / k normalisation inside the rule (fuse_delta_inputs). The rest
// of the backend is in hip_kernel_backend.cc.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/infer/kernels/hip/hip_errors.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer {

using hip::Invalid;

bool HipKernelBackend::CheckGatedDelta(const GatedDeltaArgs& a) {
  if (a.k_heads <= 0 || a.v_heads <= 0 || a.v_heads % a.k_heads != 0) {
    Keep(Invalid("gated delta",
                 absl::StrCat("v_heads ", a.v_heads, " is not a multiple of k_heads ", a.k_heads)));
    return false;
  }
  if (a.dk <= 0 || a.dv <= 0 || a.dk > hip::GatedDeltaMaxHeadDim()) {
    Keep(Invalid("gated delta", absl::StrCat("dk ", a.dk, " / dv ", a.dv, " unsupported (dk max ",
                                             hip::GatedDeltaMaxHeadDim(), ")")));
    return false;
  }
  if (a.qk_ld < 0 || a.v_ld < 0 || a.qk_stride() < static_cast<int64_t>(a.k_heads) * a.dk ||
      a.v_stride() < static_cast<int64_t>(a.v_heads) * a.dv) {
    Keep(Invalid("gated delta",
                 absl::StrCat("row strides ", a.qk_ld, " / ", a.v_ld, " shorter than the rows")));
    return false;
  }
  if (a.chunk < 0 || a.chunk > hip::GatedDeltaMaxChunk() ||
      hip::GatedDeltaPrepSharedBytes(a.chunk, a.dk, a.dv) >
          static_cast<size_t>(max_shared_bytes_) ||
      hip::GatedDeltaScanSharedBytes(a.chunk, a.dk) > static_cast<size_t>(max_shared_bytes_)) {
    Keep(Invalid("gated delta", absl::StrCat("chunk ", a.chunk, " unsupported (max ",
                                             hip::GatedDeltaMaxChunk(), ")")));
    return false;
  }
  return true;
}

namespace {

hip::GatedDeltaLaunch LaunchOf(const GatedDeltaArgs& a) {
  return {a.q,       a.k,       a.v,  a.g,  a.beta,  a.state,       a.out,       a.tokens,
          a.k_heads, a.v_heads, a.dk, a.dv, a.chunk, a.qk_stride(), a.v_stride()};
}

}  // namespace

void HipKernelBackend::GatedDeltaRule(const GatedDeltaArgs& a) {
  if (!Enter() || a.tokens == 0 || !CheckGatedDelta(a)) return;
  const hip::GatedDeltaLaunch l = LaunchOf(a);
  if (options_.mma_delta && hip::GatedDeltaMmaSupported(l, max_shared_bytes_)) {
    GatedDeltaMmaCall(l, nullptr);
    return;
  }
  const int64_t segment = DeltaSegment(a.chunk);
  float* ws = nullptr;
  const int64_t ws_floats = hip::GatedDeltaWorkspaceFloats(l, segment);
  if (ws_floats > 0 && (ws = Workspace(ws_floats)) == nullptr) return;
  Check(hip::GatedDelta(l, segment, ws, compute_), "gated delta launch");
}

int64_t HipKernelBackend::DeltaSegment(int chunk) const {
  int64_t segment = options_.delta_segment_tokens;
  if (chunk > 0) {
    // Whole chunks, and no more chunks per segment than a grid dimension takes.
    constexpr int64_t kMaxGridY = 65535;
    segment = std::clamp<int64_t>(segment / chunk, 1, kMaxGridY) * chunk;
  }
  return segment;
}

void HipKernelBackend::GatedDeltaMmaCall(const hip::GatedDeltaLaunch& l,
                                         const hip::GatedDeltaMmaInputs* inputs) {
  const int64_t segment = DeltaSegment(l.chunk);
  float* ws = Workspace(hip::GatedDeltaMmaWorkspaceFloats(l, segment));
  if (ws == nullptr) return;
  Check(hip::GatedDeltaMmaParts(l, segment, ws, true, true, inputs, compute_),
        "gated delta (matrix units) launch");
}

void HipKernelBackend::GatedDeltaRuleBatch(absl::Span<const GatedDeltaArgs> batch) {
  std::vector<hip::GatedDeltaLaunch> run;
  // Launches the recurrent calls gathered in `run`.
  const auto flush = [&] {
    if (!run.empty() && Enter()) {
      Check(hip::GatedDeltaRecurrentBatch(run.data(), static_cast<int>(run.size()), compute_),
            "gated delta batch launch");
    }
    run.clear();
  };
  for (const GatedDeltaArgs& a : batch) {
    if (!Enter()) return;
    if (a.tokens == 0) continue;
    if (!CheckGatedDelta(a)) return;
    // A recurrent call joins the run if the run has room, the same shape and not its state.
    bool joins = a.chunk == 0 && static_cast<int>(run.size()) < hip::GatedDeltaMaxBatch();
    for (const hip::GatedDeltaLaunch& l : run) {
      joins = joins && l.state != a.state && l.k_heads == a.k_heads && l.v_heads == a.v_heads &&
              l.dk == a.dk && l.dv == a.dv;
    }
    if (!joins) flush();
    if (a.chunk == 0) {
      run.push_back(LaunchOf(a));
    } else {
      GatedDeltaRule(a);
    }
  }
  flush();
}

void HipKernelBackend::GatedDeltaStepBatch(const GatedDeltaInputs& in,
                                           absl::Span<const GatedDeltaArgs> batch) {
  StepBatch(in, batch, nullptr);
}

void HipKernelBackend::GatedDeltaStepNormBatch(const GatedDeltaInputs& in,
                                               absl::Span<const GatedDeltaArgs> batch,
                                               const GatedNormHeadsArgs& norm) {
  if (StepBatch(in, batch, &norm)) return;
  GatedRmsNormHeads(norm.x, norm.z, norm.tokens, norm.heads, norm.dim, norm.z_ld, norm.w, norm.eps,
                    norm.y);
}

bool HipKernelBackend::StepBatch(const GatedDeltaInputs& in, absl::Span<const GatedDeltaArgs> batch,
                                 const GatedNormHeadsArgs* norm) {
  // Each call's q, k, g and beta must be the inputs' rows of its own tokens. Then the decode
  // steps (one token, recurrent, equal dv) go in launches that normalise q and k and work out
  // the gates inside the rule's blocks, and the chunked calls on the matrix units each do that
  // in their prepare kernels; if any call can do neither, the three calls.
  bool fused = fuse_delta_inputs_ && hip::GatedDeltaPreparedSupported() && in.v_heads > 0 &&
               in.qk_ld > 0 && in.proj_ld >= 0;
  std::vector<hip::GatedDeltaLaunch> steps, chunked;
  std::vector<const float*> step_rows, chunked_rows;
  std::vector<int64_t> step_token_rows;
  for (size_t i = 0; fused && i < batch.size(); ++i) {
    const GatedDeltaArgs& a = batch[i];
    if (a.tokens == 0) continue;
    // a.g's place in in.g, in floats (any pointers: compared as addresses).
    const auto bytes =
        static_cast<int64_t>(reinterpret_cast<uintptr_t>(a.g) - reinterpret_cast<uintptr_t>(in.g));
    const int64_t at = bytes / static_cast<int64_t>(sizeof(float));
    const int64_t r = at / in.v_heads;
    fused = a.tokens > 0 && a.dk == in.dk && a.k_heads == in.k_heads && a.v_heads == in.v_heads &&
            bytes >= 0 && bytes % sizeof(float) == 0 && at % in.v_heads == 0 &&
            r + a.tokens <= in.tokens && a.beta == in.beta + at && a.q == in.q + r * in.qk_ld &&
            a.k == in.k + r * in.qk_ld && (a.tokens == 1 || a.qk_stride() == in.qk_ld);
    for (size_t j = 0; fused && j < i; ++j) fused = batch[j].state != a.state;
    if (!fused) break;
    const hip::GatedDeltaLaunch l = LaunchOf(a);
    const float* rows = in.proj + r * in.proj_ld;
    if (a.tokens == 1 && a.chunk == 0) {
      fused = a.dk <= hip::GatedDeltaPreparedMaxHeadDim() && (steps.empty() || a.dv == steps[0].dv);
      steps.push_back(l);
      step_rows.push_back(rows);
      step_token_rows.push_back(r);
    } else {
      fused = options_.mma_delta && hip::GatedDeltaMmaSupported(l, max_shared_bytes_);
      chunked.push_back(l);
      chunked_rows.push_back(rows);
    }
  }
  if (!fused) {
    KernelBackend::GatedDeltaStepBatch(in, batch);
    return false;
  }
  if (!Enter()) return true;
  for (const GatedDeltaArgs& a : batch) {
    if (a.tokens > 0 && !CheckGatedDelta(a)) return true;
  }
  // The norm inside the steps where its rows are exactly theirs (each written by one step).
  bool norm_inside = norm != nullptr && fuse_delta_norm_ && !delta_norm_refused_ &&
                     chunked.empty() && !steps.empty() &&
                     hip::GatedDeltaNormSupported(steps[0].dv) && norm->heads == in.v_heads &&
                     norm->dim == steps[0].dv && norm->z_ld >= norm->heads * norm->dim &&
                     norm->tokens == static_cast<int64_t>(steps.size());
  std::vector<bool> seen(norm_inside ? steps.size() : 0, false);
  for (size_t i = 0; norm_inside && i < steps.size(); ++i) {
    const int64_t r = step_token_rows[i];
    norm_inside = r >= 0 && r < norm->tokens && !seen[r] &&
                  steps[i].out == norm->x + r * norm->heads * norm->dim;
    if (norm_inside) seen[r] = true;
  }
  const hip::GatedDeltaPrepArgs prep{in.b_offset, in.a_offset, in.dt_bias,
                                     in.neg_a,    in.q_scale,  in.eps};
  hip::GatedDeltaNorm inside{};
  int buffer = 0;
  if (norm_inside) {
    const int64_t width = norm->heads * norm->dim;
    inside = {norm->z, norm->z_ld,
              norm->w, norm->eps,
              norm->y, RoundedOutput(norm->tokens, norm->tokens * width, width, &buffer),
              nullptr};
  }
  const size_t most = static_cast<size_t>(hip::GatedDeltaMaxBatch());
  bool launched = true;
  std::vector<int64_t> rows_apart;  // Rows whose steps ran without the norm (a refusal).
  for (size_t i = 0; i < steps.size(); i += most) {
    const int count = static_cast<int>(std::min(most, steps.size() - i));
    inside.rows = step_token_rows.data() + i;
    bool normed = norm_inside && !delta_norm_refused_;
    const auto launch = [&](bool with_norm) {
      if (with_norm && refuse_cluster_launches_for_test_) return hipErrorNotSupported;
      return hip::GatedDeltaRecurrentPrepared(steps.data() + i, step_rows.data() + i, count, prep,
                                              with_norm ? &inside : nullptr, delta_step_min_blocks_,
                                              compute_);
    };
    hipError_t e = launch(normed);
    if (normed && e != hipSuccess) {
      // The device refused the cluster launch (say too few multiprocessors left to it for a
      // cluster; nothing ran): these steps without the norm, and no cluster launch from here on.
      delta_norm_refused_ = true;
      normed = false;
      e = launch(false);
    }
    if (normed && e == hipSuccess) ++delta_norm_inside_launches_;
    if (norm_inside && !normed && e == hipSuccess) {
      // This part of the call (a refusal now or in an earlier part) norms its rows apart below.
      rows_apart.insert(rows_apart.end(), inside.rows, inside.rows + count);
    }
    launched = Check(e, "gated delta prepared launch") && launched;
  }
  for (size_t i = 0; i < chunked.size(); ++i) {
    const hip::GatedDeltaMmaInputs inputs{chunked_rows[i], in.proj_ld, prep};
    GatedDeltaMmaCall(chunked[i], &inputs);
  }
  if (norm_inside && launched && rows_apart.empty() && inside.rounded != nullptr) {
    rounded_ = {norm->y, norm->tokens * norm->heads * norm->dim, inside.rounded, buffer};
  }
  const int64_t width = norm_inside ? norm->heads * norm->dim : 0;
  for (const int64_t r : rows_apart) {
    GatedRmsNormHeads(norm->x + r * width, norm->z + r * norm->z_ld, 1, norm->heads, norm->dim,
                      norm->z_ld, norm->w, norm->eps, norm->y + r * width);
  }
  return norm_inside;
}

}  // namespace cairn::infer
