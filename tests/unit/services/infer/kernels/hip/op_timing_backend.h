#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_OP_TIMING_BACKEND_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_OP_TIMING_BACKEND_H_

// A KernelBackend that forwards every operation to a HipKernelBackend and, while timing is on,
// records a device event on the backend's compute stream before each one: the time between an
// operation's event and the next one's is that operation's share of the stream (every operation
// runs on that one stream, in order). The GPU machine has no working profiler (nsys cannot
// write a report there), so the model benchmark uses this for a decode step's breakdown by
// operation. With timing off an operation costs one more virtual call.

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "services/infer/kernels/hip/hip_compat.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/kernel_backend.h"

namespace cairn::infer {

// Thread-compatible (as the backend it wraps).
class OpTimingBackend final : public KernelBackend {
 public:
  explicit OpTimingBackend(HipKernelBackend* hip) : hip_(hip) {}
  OpTimingBackend(const OpTimingBackend&) = delete;
  OpTimingBackend& operator=(const OpTimingBackend&) = delete;
  ~OpTimingBackend() override {
    for (hipEvent_t e : events_) static_cast<void>(hipEventDestroy(e));
  }

  // Starts recording (clearing what was recorded) or stops.
  void SetTiming(bool on) {
    timing_ = on;
    marks_.clear();
  }
  // Waits for the device, ends the recording with a last event and adds each interval to
  // `totals` (milliseconds and calls by operation name); the last operation's interval runs to
  // that last event, so it includes what followed it on the stream (a step's logits download).
  absl::Status Collect(std::map<std::string, std::pair<double, int64_t>>& totals) {
    if (marks_.empty()) return absl::OkStatus();
    Mark("end");
    if (hipEventSynchronize(events_[marks_.size() - 1]) != hipSuccess) {
      return absl::InternalError("op timing: waiting for the last event");
    }
    for (size_t i = 0; i + 1 < marks_.size(); ++i) {
      float ms = 0;
      if (hipEventElapsedTime(&ms, events_[i], events_[i + 1]) != hipSuccess) {
        return absl::InternalError(absl::StrCat("op timing: elapsed time of ", marks_[i]));
      }
      auto& [total, calls] = totals[marks_[i]];
      total += ms;
      ++calls;
    }
    marks_.clear();
    return absl::OkStatus();
  }

  absl::string_view name() const override { return hip_->name(); }
  DeviceMemory* memory() override { return hip_->memory(); }
  absl::Status Fault() const override { return hip_->Fault(); }
  absl::Status Recover() override { return hip_->Recover(); }
  bool AcceptsWeightType(WeightType t) const override { return hip_->AcceptsWeightType(t); }
  bool TakesRowTiles(WeightType t) const override { return hip_->TakesRowTiles(t); }

  void MatMulTransposed(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                        int64_t n, float* y, int64_t ldy, bool accumulate) override {
    Mark("matmul (fp32 gemm)");
    hip_->MatMulTransposed(x, m, k, ldx, w, n, y, ldy, accumulate);
  }
  void MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                  float* y, int64_t ldy, bool accumulate) override {
    Mark("matmul rows (fp32)");
    hip_->MatMulRows(x, m, k, ldx, w, n, y, ldy, accumulate);
  }
  void EmbeddingGather(const float* table, int64_t dim, const int32_t* ids, int64_t n,
                       float* out) override {
    Mark("embedding");
    hip_->EmbeddingGather(table, dim, ids, n, out);
  }
  void MatMulTransposedTyped(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                             float* y, int64_t ldy, bool accumulate) override {
    if (timing_) Mark(absl::StrCat("gemm n=", w.rows(), " k=", w.cols));
    hip_->MatMulTransposedTyped(x, m, ldx, w, y, ldy, accumulate);
  }
  void MatMulRowsTyped(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                       int64_t ldy, bool accumulate) override {
    if (timing_) Mark(absl::StrCat("product n=", w.rows(), " k=", w.cols));
    hip_->MatMulRowsTyped(x, m, ldx, w, y, ldy, accumulate);
  }
  void MatMulRowsSiluMul(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* gu,
                         float* act) override {
    if (timing_) Mark(absl::StrCat("product + silu mul n=", w.rows(), " k=", w.cols));
    hip_->MatMulRowsSiluMul(x, m, ldx, w, gu, act);
  }
  void MatMulRowsCausalConv(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                            int64_t ldy, absl::Span<const CausalConvArgs> convs) override {
    if (timing_) Mark(absl::StrCat("product + causal conv n=", w.rows(), " k=", w.cols));
    hip_->MatMulRowsCausalConv(x, m, ldx, w, y, ldy, convs);
  }
  void EmbeddingGatherTyped(const WeightMatrix& table, const int32_t* ids, int64_t n,
                            float* out) override {
    Mark("embedding");
    hip_->EmbeddingGatherTyped(table, ids, n, out);
  }
  void SplitHeadPairs(const float* in, int64_t rows, int heads, int head_dim, float* a,
                      float* b) override {
    Mark("split head pairs");
    hip_->SplitHeadPairs(in, rows, heads, head_dim, a, b);
  }
  void SplitHeadPairsStrided(const float* in, int64_t ld, int64_t rows, int heads, int head_dim,
                             float* a, float* b) override {
    Mark("split head pairs");
    hip_->SplitHeadPairsStrided(in, ld, rows, heads, head_dim, a, b);
  }
  void SigmoidMul(float* x, const float* gate, int64_t n) override {
    Mark("sigmoid mul");
    hip_->SigmoidMul(x, gate, n);
  }
  void GdnGates(const float* in, int64_t ld, int64_t tokens, int heads, int64_t b_offset,
                int64_t a_offset, const float* dt_bias, const float* neg_a, float* g,
                float* beta) override {
    Mark("delta gates");
    hip_->GdnGates(in, ld, tokens, heads, b_offset, a_offset, dt_bias, neg_a, g, beta);
  }
  void MoeRoute(const float* logits, int64_t tokens, int experts, int top_k, bool renormalise,
                int32_t* ids, float* weights) override {
    Mark("moe route");
    hip_->MoeRoute(logits, tokens, experts, top_k, renormalise, ids, weights);
  }
  absl::Status MoeExperts(const MoeExpertsArgs& args, ScratchArena& scratch) override {
    Mark(args.router != nullptr ? "moe router and routed experts" : "moe routed experts");
    return hip_->MoeExperts(args, scratch);
  }
  void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
               bool zero_centred, float* y) override {
    if (timing_) Mark(absl::StrCat("rmsnorm dim=", dim));
    hip_->RmsNorm(x, rows, dim, w, eps, zero_centred, y);
  }
  void GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w,
                    float eps, float* y) override {
    Mark("gated rmsnorm");
    hip_->GatedRmsNorm(x, z, rows, dim, w, eps, y);
  }
  void RmsNormHeads(float* x, int64_t tokens, int heads, int64_t dim, int64_t ld, const float* w,
                    float eps, bool zero_centred) override {
    if (timing_) Mark(absl::StrCat("rmsnorm dim=", dim));
    hip_->RmsNormHeads(x, tokens, heads, dim, ld, w, eps, zero_centred);
  }
  void GatedRmsNormHeads(const float* x, const float* z, int64_t tokens, int heads, int64_t dim,
                         int64_t z_ld, const float* w, float eps, float* y) override {
    Mark("gated rmsnorm");
    hip_->GatedRmsNormHeads(x, z, tokens, heads, dim, z_ld, w, eps, y);
  }
  void L2Normalize(float* x, int64_t rows, int64_t dim, float eps, float scale) override {
    Mark("l2 normalize");
    hip_->L2Normalize(x, rows, dim, eps, scale);
  }
  void L2NormalizeTwo(float* a, float a_scale, float* b, float b_scale, int64_t tokens, int heads,
                      int64_t dim, int64_t ld, float eps) override {
    Mark("l2 normalize q and k");
    hip_->L2NormalizeTwo(a, a_scale, b, b_scale, tokens, heads, dim, ld, eps);
  }
  void Rope(float* x, int64_t tokens, int64_t ld, int heads, int head_dim, int rotary_dim,
            const float* inv_freq, int64_t first_position) override {
    Mark("rope");
    hip_->Rope(x, tokens, ld, heads, head_dim, rotary_dim, inv_freq, first_position);
  }
  void SiluMul(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t rows,
               int64_t dim, float* out) override {
    Mark("silu mul");
    hip_->SiluMul(gate, ld_gate, up, ld_up, rows, dim, out);
  }
  void CausalConvSilu(const float* in, int64_t ld_in, int64_t tokens, int64_t channels,
                      const float* w, int kernel, float* state, float* out) override {
    Mark("causal conv");
    hip_->CausalConvSilu(in, ld_in, tokens, channels, w, kernel, state, out);
  }
  void CausalConvSiluBatch(absl::Span<const CausalConvArgs> batch) override {
    Mark("causal conv");
    hip_->CausalConvSiluBatch(batch);
  }
  void RopeAppendBatch(absl::Span<const RopeAppendArgs> batch) override {
    Mark("rope + kv append");
    hip_->RopeAppendBatch(batch);
  }
  void NormRopeAppendBatch(const QkNormArgs& n, absl::Span<const RopeAppendArgs> batch) override {
    Mark("q/k norms, rope + kv append");
    hip_->NormRopeAppendBatch(n, batch);
  }
  void Attention(const AttentionArgs& args) override {
    Mark("attention");
    hip_->Attention(args);
  }
  void AttentionBatch(absl::Span<const AttentionArgs> batch) override {
    Mark("attention");
    hip_->AttentionBatch(batch);
  }
  void GatedDeltaRule(const GatedDeltaArgs& args) override {
    Mark("delta rule");
    hip_->GatedDeltaRule(args);
  }
  void GatedDeltaRuleBatch(absl::Span<const GatedDeltaArgs> batch) override {
    Mark("delta rule");
    hip_->GatedDeltaRuleBatch(batch);
  }
  void GatedDeltaStepBatch(const GatedDeltaInputs& inputs,
                           absl::Span<const GatedDeltaArgs> batch) override {
    if (timing_) Mark("delta rule step with its gates and q / k norms");
    hip_->GatedDeltaStepBatch(inputs, batch);
  }
  void GatedDeltaStepNormBatch(const GatedDeltaInputs& inputs,
                               absl::Span<const GatedDeltaArgs> batch,
                               const GatedNormHeadsArgs& norm) override {
    if (timing_) Mark("delta rule step with its inputs, then the gated rmsnorm");
    hip_->GatedDeltaStepNormBatch(inputs, batch, norm);
  }

  void CopyRows(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                int64_t ld_dst) override {
    Mark("copy rows");
    hip_->CopyRows(src, ld_src, rows, cols, dst, ld_dst);
  }
  void AddScaledRows(const float* src, int64_t rows, int64_t dim, const int32_t* dst_rows,
                     const float* scales, float* dst) override {
    Mark("add scaled rows");
    hip_->AddScaledRows(src, rows, dim, dst_rows, scales, dst);
  }
  void SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* gate) override {
    Mark("sigmoid scale rows");
    hip_->SigmoidScaleRows(x, rows, dim, gate);
  }

 private:
  // Records the next event (creating it the first time) before an operation named `what`. Call
  // sites that build a name check timing_ first, so that untimed steps build none.
  void Mark(absl::string_view what) {
    if (!timing_) return;
    if (marks_.size() == events_.size()) {
      hipEvent_t e = nullptr;
      if (hipEventCreate(&e) != hipSuccess) return;
      events_.push_back(e);
    }
    if (hipEventRecord(events_[marks_.size()], hip_->compute_stream()) != hipSuccess) return;
    marks_.emplace_back(what);
  }

  HipKernelBackend* const hip_;
  bool timing_ = false;
  std::vector<hipEvent_t> events_;  // Reused between recordings.
  std::vector<std::string> marks_;  // The operation after each recorded event.
};

}  // namespace cairn::infer

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_OP_TIMING_BACKEND_H_
