// cairn_hip_model_bench's prefill measurements: prefill rates, restore and capture, the TTFT
// table at --ttft-depth, and a prefill by operation.

#include "tests/unit/services/infer/kernels/hip/hip_model_bench.h"

namespace cairn::infer::model_bench {

double ModelBench::PrefillFlops(int64_t from, int64_t to) const {
  const double t = static_cast<double>(to - from);
  const double gemm = 2.0 * costs_.matrix_params * t;
  // Causal attention: QK^T and PV over the keys up to each query.
  const double keys = (static_cast<double>(to) * to - static_cast<double>(from) * from) / 2.0;
  const double attention =
      costs_.full_layers * 4.0 * o_.num_heads * static_cast<double>(o_.head_dim) * keys;
  // Delta rule: S^T k, k (x) delta and S^T q per token and v-head.
  const double delta = costs_.delta_layers * 6.0 * o_.linear_v_heads *
                       static_cast<double>(o_.linear_k_dim) * o_.linear_v_dim * t;
  return gemm + attention + delta;
}

double ModelBench::Prefill(SlotState* slot, int64_t from, int64_t to) {
  const auto start = Clock::now();
  for (int64_t at = from; at < to;) {
    const int64_t end = std::min(to, at + f_.pass_tokens);
    const auto pass = absl::MakeConstSpan(tokens_).subspan(at, end - at);
    const bool profile = from == 0 && to == f_.profile_prefill && end == to;
    if (profile) ProfilerRange(true);
    absl::StatusOr<std::vector<float>> logits = model_->Forward(slot, pass, {});
    if (!logits.ok()) Bench::Fail(logits.status().ToString());
    if (profile) ProfilerRange(false);
    at = end;
  }
  return Bench::Seconds(start);
}

void ModelBench::ReportPrefill(int64_t tokens, double seconds, const std::string& suffix) {
  const double flops = PrefillFlops(0, tokens);
  const double gemm = 2.0 * costs_.matrix_params * tokens;
  Print(absl::StrFormat(
      "%s prefill %7ld tokens: %8.3f s  %9.0f tokens/s  %6.1f TFLOP/s = %5.1f %% of the bf16 "
      "matrix rate (GEMM share of the FLOPs %4.1f %%)%s",
      name_.c_str(), tokens, seconds, tokens / seconds, flops / seconds / 1e12,
      100.0 * flops / seconds / ceil_.bf16_flops, 100.0 * gemm / flops, suffix.c_str()));
}

void ModelBench::PrefillAndTtft() {
  const StateLayout& layout = model_->state_layout();
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> kv = SlotKvMemory::Create(
      layout, {.slots = 1, .max_rows = MaxDepth() + f_.turn_tokens + 8, .memory = b_.memory()});
  if (!kv.ok()) Bench::Fail(kv.status().ToString());
  SlotState* slot = (*kv)->slot(0);
  // The checkpoint at ttft_depth, in page-locked memory as the arena is.
  const int64_t state_bytes = layout.private_bytes() + f_.ttft_depth * layout.row_bytes();
  std::unique_ptr<uint8_t[]> state(new uint8_t[static_cast<size_t>(state_bytes)]);
  std::memset(state.get(), 0, static_cast<size_t>(state_bytes));
  Bench::Check(b_.RegisterHost(state.get(), state_bytes), "register the checkpoint buffer");
  const auto whole = absl::MakeSpan(state.get(), static_cast<size_t>(state_bytes));

  // One pass first, not counted: the model's first pass after its load pays one-time costs
  // (the MoE weight tables' uploads, the scratch arena's growth, the kernels' first loads) that
  // the first measured length would otherwise carry.
  if (!f_.prefill.empty()) {
    Bench::Check((*kv)->Reset(0), "reset");
    const int64_t warm =
        std::min(f_.pass_tokens, *std::max_element(f_.prefill.begin(), f_.prefill.end()));
    Print(absl::StrFormat("%s warm-up pass of %ld tokens (not counted): %.3f s", name_.c_str(),
                          warm, Prefill(slot, 0, warm)));
  }
  double cold = 0, capture_private = 0, capture_rows = 0;
  for (const int64_t t : f_.prefill) {
    if (t < f_.ttft_depth || t != MaxDepth()) {
      for (const int on : f_.moe_prefill) {
        b_.SetGroupedMoePrefillForTest(on >= 1);
        b_.SetMoeGemmWgmmaForTest(on >= 2);
        if (on >= 2) b_.SetMoeGemmWgmmaWarpgroupsForTest(on >= 4 ? 2 : on);
        b_.SetMoeGemmTmaForTest(on >= 4 ? on - 3 : 0);
        for (const int variant : f_.attention_variants) {
          for (const int kernels : f_.moe_kernels) {
            for (const int round_mb : f_.round_inputs_mb) {
              b_.SetMoeKernelsForTest(kernels);
              b_.SetRoundProductInputsMaxBytesForTest(int64_t{round_mb} << 20);
              Bench::Check(b_.SetAttentionMmaVariantForTest(variant), "attention variant");
              Bench::Check((*kv)->Reset(0), "reset");
              std::string label;
              if (costs_.expert_bytes > 0) {  // Models with routed experts only.
                label = absl::StrFormat(" (grouped moe prefill %s)", on == 5   ? "tma 2"
                                                                     : on == 4 ? "tma 1"
                                                                     : on == 3 ? "wgmma 3"
                                                                     : on == 2 ? "wgmma 2"
                                                                     : on == 1 ? "on"
                                                                               : "off");
              }
              if (f_.attention_variants.size() > 1) {
                absl::StrAppend(&label, absl::StrFormat(" (attention variant %d)", variant));
              }
              if (f_.moe_kernels.size() > 1) {
                absl::StrAppend(&label, absl::StrFormat(" (moe kernels %d)", kernels));
              }
              if (f_.round_inputs_mb.size() > 1) {
                absl::StrAppend(&label, absl::StrFormat(" (rounded inputs up to %d MB)", round_mb));
              }
              ReportPrefill(t, Prefill(slot, 0, t), label);
              if (f_.prefill_op_times) PrefillOpTimes(**kv, slot, t, label);
            }
          }
        }
      }
      Bench::Check(
          b_.SetAttentionMmaVariantForTest(HipKernelBackendOptions().attention_mma_variant),
          "attention variant");
      b_.SetRoundProductInputsMaxBytesForTest(
          HipKernelBackendOptions().round_product_inputs_max_bytes);
      continue;
    }
    Bench::Check((*kv)->Reset(0), "reset");
    // The longest run also gives the cold TTFT and the capture at ttft_depth.
    cold = Prefill(slot, 0, f_.ttft_depth);
    auto start = Clock::now();
    absl::StatusOr<int64_t> at =
        (*kv)->CapturePrivateState(0, whole.subspan(0, layout.private_bytes()));
    if (!at.ok()) Bench::Fail(at.status().ToString());
    capture_private = Bench::Seconds(start);
    start = Clock::now();
    int64_t offset = layout.private_bytes();
    for (size_t c = 0; c < layout.components.size(); ++c) {
      const StateComponent& comp = layout.components[c];
      if (comp.kind != ComponentKind::kRows) continue;
      const int64_t n = f_.ttft_depth * comp.bytes();
      Bench::Check(
          (*kv)->CopyRowsOut(0, static_cast<int>(c), 0, f_.ttft_depth, whole.subspan(offset, n)),
          "rows out");
      offset += n;
    }
    capture_rows = Bench::Seconds(start);
    ReportPrefill(t, cold + Prefill(slot, f_.ttft_depth, t));
  }
  if (cold == 0) {
    Bench::Check(b_.UnregisterHost(state.get()), "unregister");
    return;
  }
  const double private_mb = layout.private_bytes() / 1e6;
  Print(absl::StrFormat(
      "%s capture at %ld tokens: private state %.1f MB in %.2f ms (%.1f GB/s); all %.2f GB of "
      "rows out in %.1f ms (%.1f GB/s; a capture borrows them)",
      name_.c_str(), f_.ttft_depth, private_mb, capture_private * 1e3,
      private_mb / 1e3 / capture_private, (state_bytes - layout.private_bytes()) / 1e9,
      capture_rows * 1e3, (state_bytes - layout.private_bytes()) / 1e9 / capture_rows));

  // Restore from the page-locked copy, as from the arena.
  const double restore = Restore(**kv, whole);
  Print(absl::StrFormat(
      "%s restore %.2f GB from pinned memory: %.1f ms  %.1f GB/s = %.1f %% of pinned "
      "host-to-device",
      name_.c_str(), state_bytes / 1e9, restore * 1e3, state_bytes / 1e9 / restore,
      100.0 * state_bytes / restore / ceil_.h2d_bytes_per_s));
  const double live = Prefill(slot, f_.ttft_depth, f_.ttft_depth + f_.turn_tokens);
  double disk_read = -1;
  if (!f_.disk_dir.empty()) disk_read = ReadFromDisk(whole);
  Print(absl::StrFormat("%s TTFT at %ld tokens + a %ld-token turn:", name_.c_str(), f_.ttft_depth,
                        f_.turn_tokens));
  Print(absl::StrFormat("   cold (prefill from scratch)    %9.3f s", cold));
  if (disk_read >= 0) {
    Print(
        absl::StrFormat("   disk (read, restore, turn)     %9.3f s  (read %.3f s, restore %.3f s)",
                        disk_read + restore + live, disk_read, restore));
  }
  Print(absl::StrFormat("   RAM (restore, turn)            %9.3f s  (restore %.3f s)",
                        restore + live, restore));
  Print(absl::StrFormat("   live (turn only)               %9.3f s", live));
  Bench::Check(b_.UnregisterHost(state.get()), "unregister");
}

double ModelBench::Restore(SlotKvMemory& kv, absl::Span<uint8_t> state) {
  const StateLayout& layout = model_->state_layout();
  const auto start = Clock::now();
  Bench::Check(kv.BeginRestore(0), "begin restore");
  int64_t offset = layout.private_bytes();
  const int64_t depth =
      (static_cast<int64_t>(state.size()) - offset) / std::max<int64_t>(1, layout.row_bytes());
  for (size_t c = 0; c < layout.components.size(); ++c) {
    const StateComponent& comp = layout.components[c];
    if (comp.kind != ComponentKind::kRows) continue;
    const int64_t n = depth * comp.bytes();
    Bench::Check(kv.CopyRowsIn(0, static_cast<int>(c), 0, state.subspan(offset, n)), "rows in");
    offset += n;
  }
  Bench::Check(kv.LoadPrivateState(0, depth, state.subspan(0, layout.private_bytes())),
               "private state in");
  Bench::Check(kv.Validate(0, depth), "validate");
  return Bench::Seconds(start);
}

double ModelBench::ReadFromDisk(absl::Span<uint8_t> state) {
  const std::string path = f_.disk_dir + "/cairn-bench-checkpoint";
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) Bench::Fail("cannot create " + path);
  for (size_t at = 0; at < state.size();) {
    const ssize_t n = ::write(fd, state.data() + at, std::min<size_t>(state.size() - at, 1 << 26));
    if (n <= 0) Bench::Fail("write " + path);
    at += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) Bench::Fail("cannot open " + path);
  const auto start = Clock::now();
  for (size_t at = 0; at < state.size();) {
    const ssize_t n = ::read(fd, state.data() + at, std::min<size_t>(state.size() - at, 1 << 26));
    if (n <= 0) Bench::Fail("read " + path);
    at += static_cast<size_t>(n);
  }
  const double seconds = Bench::Seconds(start);
  ::close(fd);
  ::unlink(path.c_str());
  Print(absl::StrFormat("%s disk read %.2f GB: %.3f s (%.2f GB/s)", name_.c_str(),
                        state.size() / 1e9, seconds, state.size() / 1e9 / seconds));
  return seconds;
}

void ModelBench::PrefillOpTimes(SlotKvMemory& kv, SlotState* slot, int64_t tokens,
                                const std::string& label) {
  std::map<std::string, std::pair<double, int64_t>> totals;
  Bench::Check(kv.Reset(0), "reset");
  for (int64_t at = 0; at < tokens;) {
    const int64_t end = std::min(tokens, at + f_.pass_tokens);
    timing_.SetTiming(true);
    absl::StatusOr<std::vector<float>> logits =
        model_->Forward(slot, absl::MakeConstSpan(tokens_).subspan(at, end - at), {});
    if (!logits.ok()) Bench::Fail(logits.status().ToString());
    Bench::Check(timing_.Collect(totals), "prefill op times");
    at = end;
  }
  timing_.SetTiming(false);
  PrintOpTotals(absl::StrFormat("%s prefill %ld tokens by operation (events on the stream, ",
                                name_.c_str(), tokens),
                absl::StrCat(" ms with them)", label, ":"), totals, 1.0, 1, "");
}

}  // namespace cairn::infer::model_bench
