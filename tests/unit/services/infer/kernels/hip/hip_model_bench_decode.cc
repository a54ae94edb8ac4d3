// cairn_hip_model_bench's decode measurements: steps at each slot count against the HBM bound,
// the logits' ways out, and the step by operation, behind a device copy and beside spills.

#include "tests/unit/services/infer/kernels/hip/hip_model_bench.h"

namespace cairn::infer::model_bench {

void ModelBench::Decode() {
  // A copy: --logits-parts may make model_ again below.
  const StateLayout layout = model_->state_layout();
  constexpr int kMaxSlots = 16;
  const int warm = 2;
  // Each slot count runs its steps once per way of returning the logits (DecodeSteps'
  // kDecodeModes) for each combination of variants listed.
  struct Config {
    int bf16_inputs, variant, attention, ranges, kernels, overlapped, copy_kernel, staged_rows,
        staged_mb, prefetch_k, round_mb, fuse_silu, fuse_delta, fold_shared, moe_waves, moe_stream,
        moe_cooperative, stream_products, fuse_conv, early_release, fuse_delta_norm,
        delta_step_blocks, router_inside, static_sixteenths, compact_route, fuse_qk_rope;
  };
  // Every combination of the variants listed, the last listed innermost (an odometer over the
  // lists, the last digit turning fastest).
  const std::vector<std::pair<const std::vector<int>*, int Config::*>> axes = {
      {&f_.mma_bf16_inputs, &Config::bf16_inputs},
      {&f_.mma_variants, &Config::variant},
      {&f_.decode_attention_variants, &Config::attention},
      {&f_.decode_ranges, &Config::ranges},
      {&f_.moe_kernels, &Config::kernels},
      {&f_.overlapped_launches, &Config::overlapped},
      {&f_.copy_rows_kernel, &Config::copy_kernel},
      {&f_.mma_staged_rows, &Config::staged_rows},
      {&f_.mma_staged_mb, &Config::staged_mb},
      {&f_.mma_prefetch_k, &Config::prefetch_k},
      {&f_.round_inputs_mb, &Config::round_mb},
      {&f_.fuse_silu, &Config::fuse_silu},
      {&f_.fuse_delta, &Config::fuse_delta},
      {&f_.fold_shared, &Config::fold_shared},
      {&f_.moe_waves, &Config::moe_waves},
      {&f_.moe_stream, &Config::moe_stream},
      {&f_.moe_cooperative, &Config::moe_cooperative},
      {&f_.stream_products, &Config::stream_products},
      {&f_.fuse_conv, &Config::fuse_conv},
      {&f_.early_release, &Config::early_release},
      {&f_.fuse_delta_norm, &Config::fuse_delta_norm},
      {&f_.delta_step_blocks, &Config::delta_step_blocks},
      {&f_.router_inside, &Config::router_inside},
      {&f_.static_sixteenths, &Config::static_sixteenths},
      {&f_.compact_route, &Config::compact_route},
      {&f_.fuse_qk_rope, &Config::fuse_qk_rope},
  };
  // The axis whose values do not enter where staged rows are 0.
  const size_t staged_mb_axis = static_cast<size_t>(
      std::find_if(axes.begin(), axes.end(),
                   [&](const auto& axis) { return axis.first == &f_.mma_staged_mb; }) -
      axes.begin());
  std::vector<Config> configs;
  std::vector<size_t> digits(axes.size(), 0);
  for (bool more = true; more;) {
    Config c{};
    for (size_t i = 0; i < axes.size(); ++i) c.*axes[i].second = (*axes[i].first)[digits[i]];
    // Where staged rows are 0 the byte threshold does not enter: only its first value.
    if (c.staged_rows != 0 || digits[staged_mb_axis] == 0) configs.push_back(c);
    more = false;
    for (size_t i = axes.size(); i-- > 0;) {
      if (++digits[i] < axes[i].first->size()) {
        more = true;
        break;
      }
      digits[i] = 0;
    }
  }
  const int64_t runs =
      static_cast<int64_t>(f_.decode_slots.size() * f_.logits_parts.size() * configs.size());
  const int64_t rows = f_.decode_depth +
                       (kDecodeModes + (f_.op_times ? 1 : 0) + (f_.moe_trace ? 1 : 0) +
                        (f_.host_lead_mb > 0 ? 1 : 0) + (f_.background_spill_mb > 0 ? 1 : 0)) *
                           runs * (f_.decode_steps + warm) +
                       8;
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> kv =
      SlotKvMemory::Create(layout, {.slots = kMaxSlots, .max_rows = rows, .memory = b_.memory()});
  if (!kv.ok()) Bench::Fail(kv.status().ToString());
  // Slot 0 prefilled, its state copied into the other slots.
  Prefill((*kv)->slot(0), 0, f_.decode_depth);
  std::vector<uint8_t> state(
      static_cast<size_t>(layout.private_bytes() + f_.decode_depth * layout.row_bytes()));
  absl::StatusOr<int64_t> at =
      (*kv)->CapturePrivateState(0, absl::MakeSpan(state).subspan(0, layout.private_bytes()));
  if (!at.ok()) Bench::Fail(at.status().ToString());
  int64_t offset = layout.private_bytes();
  for (size_t c = 0; c < layout.components.size(); ++c) {
    const StateComponent& comp = layout.components[c];
    if (comp.kind != ComponentKind::kRows) continue;
    const int64_t n = f_.decode_depth * comp.bytes();
    Bench::Check((*kv)->CopyRowsOut(0, static_cast<int>(c), 0, f_.decode_depth,
                                    absl::MakeSpan(state).subspan(offset, n)),
                 "rows out");
    offset += n;
  }
  for (int s = 1; s < kMaxSlots; ++s) {
    Bench::Check((*kv)->BeginRestore(s), "begin restore");
    offset = layout.private_bytes();
    for (size_t c = 0; c < layout.components.size(); ++c) {
      const StateComponent& comp = layout.components[c];
      if (comp.kind != ComponentKind::kRows) continue;
      const int64_t n = f_.decode_depth * comp.bytes();
      Bench::Check((*kv)->CopyRowsIn(s, static_cast<int>(c), 0,
                                     absl::MakeConstSpan(state).subspan(offset, n)),
                   "rows in");
      offset += n;
    }
    Bench::Check(
        (*kv)->LoadPrivateState(s, f_.decode_depth,
                                absl::MakeConstSpan(state).subspan(0, layout.private_bytes())),
        "private in");
    Bench::Check((*kv)->Validate(s, f_.decode_depth), "validate");
  }
  // The weights a step reads besides the routed experts: all but the embedding, whose rows are
  // gathered, unless the model loaded it as its LM head too (tied, or a stored head the loader
  // found equal to it: then the weights hold one vocabulary matrix, which the head reads).
  const double loaded = static_cast<double>(model_->info().weight_bytes);
  const bool shared_head =
      costs_.head_bytes == 0 || loaded < costs_.tensor_bytes - costs_.head_bytes / 2;
  const double weights_other =
      loaded - (shared_head ? 0.0 : costs_.embed_bytes) - costs_.expert_bytes;
  for (const int parts : f_.logits_parts) {
    // The same weights and state layout, so the slots' contents stay valid.
    if (parts != logits_parts_) MakeModel(parts);
    for (const int64_t slot_count : f_.decode_slots) {
      for (const Config& c : configs) {
        b_.SetMmaRowsBf16InputsForTest(c.bf16_inputs == 1);
        Bench::Check(b_.SetMmaRowsVariantForTest(c.variant), "mma variant");
        Bench::Check(b_.SetAttentionDecodeVariantForTest(c.attention), "decode attention variant");
        Bench::Check(b_.SetAttentionDecodeRangesPerBlockForTest(c.ranges),
                     "decode attention ranges");
        b_.SetMoeKernelsForTest(c.kernels);
        hip::SetOverlappedLaunches(c.overlapped == 1);
        b_.SetCopyRowsKernelForTest(c.copy_kernel == 1);
        b_.SetMmaRowsStagedMinRowsForTest(c.staged_rows);
        b_.SetMmaRowsStagedMinBytesForTest(int64_t{c.staged_mb} << 20);
        b_.SetMmaRowsPrefetchKForTest(c.prefetch_k);
        b_.SetRoundProductInputsMaxBytesForTest(int64_t{c.round_mb} << 20);
        b_.SetFuseGateUpSiluForTest(c.fuse_silu == 1);
        b_.SetFuseDeltaInputsForTest(c.fuse_delta == 1);
        b_.SetFoldSharedExpertForTest(c.fold_shared == 1);
        b_.SetMoeProductWavesForTest(c.moe_waves);
        b_.SetMoeStreamProductsForTest(c.moe_stream);
        b_.SetMoeOneLaunchCooperativeForTest(c.moe_cooperative == 1);
        b_.SetStreamProductWeightsForTest(c.stream_products);
        b_.SetFuseConvProductForTest(c.fuse_conv == 1);
        hip::SetEarlyRelease(static_cast<unsigned>(c.early_release));
        b_.SetFuseDeltaNormForTest(c.fuse_delta_norm == 1);
        b_.SetDeltaStepMinBlocksForTest(c.delta_step_blocks);
        b_.SetMoeRouterInsideForTest(c.router_inside == 1);
        Bench::Check(b_.SetMoeOneLaunchStaticSixteenthsForTest(c.static_sixteenths),
                     "static sixteenths");
        b_.SetMoeCompactRouteForTest(c.compact_route == 1);
        b_.SetFuseQkNormRopeForTest(c.fuse_qk_rope == 1);
        std::string suffix;
        if (f_.mma_bf16_inputs.size() > 1) {
          suffix += c.bf16_inputs == 1 ? " (bf16 product inputs)" : " (exact product inputs)";
        }
        if (f_.mma_variants.size() > 1) suffix += absl::StrFormat(" (mma variant %d)", c.variant);
        if (f_.decode_attention_variants.size() > 1) {
          suffix += absl::StrFormat(" (decode attention variant %d)", c.attention);
        }
        if (f_.decode_ranges.size() > 1) {
          suffix += absl::StrFormat(" (decode attention ranges a block %d)", c.ranges);
        }
        if (f_.moe_kernels.size() > 1) suffix += absl::StrFormat(" (moe kernels %d)", c.kernels);
        if (f_.overlapped_launches.size() > 1) {
          suffix += absl::StrFormat(" (overlapped launches %d)", c.overlapped);
        }
        if (f_.copy_rows_kernel.size() > 1) {
          suffix += absl::StrFormat(" (copy rows kernel %d)", c.copy_kernel);
        }
        if (f_.mma_staged_rows.size() > 1) {
          suffix += absl::StrFormat(" (staged inputs from %d rows)", c.staged_rows);
        }
        if (f_.mma_staged_mb.size() > 1 && c.staged_rows > 0) {
          suffix += absl::StrFormat(" (staged from %d MB of weights)", c.staged_mb);
        }
        if (f_.logits_parts.size() > 1) suffix += absl::StrFormat(" (logits parts %d)", parts);
        if (f_.mma_prefetch_k.size() > 1) {
          suffix += absl::StrFormat(" (mma prefetch %d)", c.prefetch_k);
        }
        if (f_.round_inputs_mb.size() > 1) {
          suffix += absl::StrFormat(" (rounded inputs up to %d MB)", c.round_mb);
        }
        if (f_.fuse_silu.size() > 1) suffix += absl::StrFormat(" (fused silu %d)", c.fuse_silu);
        if (f_.fuse_delta.size() > 1) {
          suffix += absl::StrFormat(" (fused delta inputs %d)", c.fuse_delta);
        }
        if (f_.fold_shared.size() > 1) {
          suffix += absl::StrFormat(" (shared expert folded %d)", c.fold_shared);
        }
        if (f_.moe_waves.size() > 1) {
          suffix += absl::StrFormat(" (moe product waves %d)", c.moe_waves);
        }
        if (f_.moe_stream.size() > 1) {
          suffix += absl::StrFormat(" (moe products streamed %d)", c.moe_stream);
        }
        if (f_.moe_cooperative.size() > 1) {
          suffix += absl::StrFormat(" (moe one launch cooperative %d)", c.moe_cooperative);
        }
        if (f_.stream_products.size() > 1) {
          suffix += absl::StrFormat(" (product weights streamed %d)", c.stream_products);
        }
        if (f_.fuse_conv.size() > 1) suffix += absl::StrFormat(" (conv fused %d)", c.fuse_conv);
        if (f_.early_release.size() > 1) {
          suffix += absl::StrFormat(" (early release %d)", c.early_release);
        }
        if (f_.fuse_delta_norm.size() > 1) {
          suffix += absl::StrFormat(" (delta norm fused %d)", c.fuse_delta_norm);
        }
        if (f_.delta_step_blocks.size() > 1) {
          suffix += absl::StrFormat(" (delta step blocks %d)", c.delta_step_blocks);
        }
        if (f_.router_inside.size() > 1) {
          suffix += absl::StrFormat(" (router inside %d)", c.router_inside);
        }
        if (f_.static_sixteenths.size() > 1) {
          suffix += absl::StrFormat(" (static sixteenths %d)", c.static_sixteenths);
        }
        if (f_.compact_route.size() > 1) {
          suffix += absl::StrFormat(" (compact route %d)", c.compact_route);
        }
        if (f_.fuse_qk_rope.size() > 1) {
          suffix += absl::StrFormat(" (q/k norms and rope in one launch %d)", c.fuse_qk_rope);
        }
        DecodeSteps(static_cast<int>(slot_count), **kv, weights_other, suffix);
      }
      const HipKernelBackendOptions defaults;
      hip::SetOverlappedLaunches(defaults.overlapped_launches);
      b_.SetCopyRowsKernelForTest(defaults.copy_rows_kernel);
      b_.SetMmaRowsStagedMinRowsForTest(defaults.mma_rows_staged_min_rows);
      b_.SetMmaRowsStagedMinBytesForTest(defaults.mma_rows_staged_min_bytes);
      b_.SetMmaRowsPrefetchKForTest(defaults.mma_rows_prefetch_k);
      b_.SetRoundProductInputsMaxBytesForTest(defaults.round_product_inputs_max_bytes);
      b_.SetFuseGateUpSiluForTest(defaults.fuse_gate_up_silu);
      b_.SetFuseDeltaInputsForTest(defaults.fuse_delta_inputs);
      b_.SetFoldSharedExpertForTest(defaults.fold_shared_expert);
      b_.SetMoeProductWavesForTest(defaults.moe_product_waves);
      b_.SetMoeStreamProductsForTest(defaults.moe_stream_products);
      b_.SetMoeOneLaunchCooperativeForTest(defaults.moe_one_launch_cooperative);
      b_.SetStreamProductWeightsForTest(defaults.stream_product_weights);
      b_.SetFuseConvProductForTest(defaults.fuse_conv_product);
      hip::SetEarlyRelease(defaults.early_release);
      b_.SetFuseDeltaNormForTest(defaults.fuse_delta_norm);
      b_.SetDeltaStepMinBlocksForTest(defaults.delta_step_min_blocks);
      b_.SetMoeRouterInsideForTest(defaults.moe_router_inside);
      Bench::Check(
          b_.SetMoeOneLaunchStaticSixteenthsForTest(defaults.moe_one_launch_static_sixteenths),
          "static sixteenths");
      b_.SetMoeCompactRouteForTest(defaults.moe_compact_route);
      b_.SetFuseQkNormRopeForTest(defaults.fuse_qk_norm_rope);
      b_.SetMoeKernelsForTest(defaults.moe_kernels);
      b_.SetMmaRowsBf16InputsForTest(defaults.mma_rows_bf16_inputs);
      Bench::Check(b_.SetMmaRowsVariantForTest(defaults.mma_rows_variant), "mma variant");
      Bench::Check(b_.SetAttentionDecodeVariantForTest(defaults.attention_decode_variant),
                   "decode attention variant");
      Bench::Check(
          b_.SetAttentionDecodeRangesPerBlockForTest(defaults.attention_decode_ranges_per_block),
          "decode attention ranges");
    }
  }
}

void ModelBench::DecodeSteps(int slots, SlotKvMemory& kv_memory, double weights_other,
                             const std::string& suffix) {
  const StateLayout& layout = model_->state_layout();
  const int warm = 2;
  std::vector<std::vector<int32_t>> next(slots);
  // Each step's logits in fresh vectors (ForwardBatch), then in vectors kept between steps
  // (ForwardBatchInto), then read in place (ForwardBatchViews, as the scheduler's decode).
  double fresh_seconds = 0;
  double kept_seconds = 0;
  double seconds = 0;
  int64_t waits = 0;
  std::vector<std::vector<float>> kept;
  std::vector<absl::Span<const float>> views;
  for (const Mode mode : {kFresh, kKept, kViews}) {
    double& total = mode == kViews ? seconds : mode == kKept ? kept_seconds : fresh_seconds;
    for (int step = 0; step < warm + f_.decode_steps; ++step) {
      std::vector<SequencePass> batch;
      for (int s = 0; s < slots; ++s) {
        next[s] = {tokens_[static_cast<size_t>((step * 31 + s) % 1000)]};
        batch.push_back({kv_memory.slot(s), next[s]});
      }
      if (mode == kViews) ProfilerRange(slots, step == warm);
      // Fresh results are freed after the step's time is taken (as before).
      absl::StatusOr<std::vector<std::vector<float>>> fresh;
      const int64_t waits_before = b_.host_waits();
      const auto start = Clock::now();
      if (mode == kViews) {
        const absl::Status st = model_->ForwardBatchViews(batch, views);
        if (!st.ok()) Bench::Fail(st.ToString());
      } else if (mode == kKept) {
        const absl::Status st = model_->ForwardBatchInto(batch, kept);
        if (!st.ok()) Bench::Fail(st.ToString());
      } else {
        fresh = model_->ForwardBatch(batch);
        if (!fresh.ok()) Bench::Fail(fresh.status().ToString());
      }
      if (step >= warm) {
        total += Bench::Seconds(start);
        if (mode == kViews) waits += b_.host_waits() - waits_before;
      }
    }
  }
  ProfilerRange(slots, false);
  // Bytes one step must read: the weights (embeddings gathered, not read; of the routed
  // experts, the share random routing of `slots` tokens touches), each slot's rows, and
  // each slot's private state read and written.
  double expert_share = 1.0;
  if (o_.num_experts > 0) {
    expert_share = 1.0 - std::pow(1.0 - static_cast<double>(o_.top_k) / o_.num_experts, slots);
  }
  const double bytes = weights_other + costs_.expert_bytes * expert_share +
                       slots * (static_cast<double>(f_.decode_depth) * layout.row_bytes() +
                                2.0 * layout.private_bytes());
  const double tokens_per_s = slots * f_.decode_steps / seconds;
  const double bound = slots / (bytes / ceil_.hbm_bytes_per_s);
  Print(absl::StrFormat(
      "%s decode %2d slots at %ld tokens: %7.2f ms a step  %8.1f tokens/s  HBM bound %8.1f "
      "tokens/s (%.2f GB a step) = %5.1f %%%s",
      name_.c_str(), slots, f_.decode_depth, seconds / f_.decode_steps * 1e3, tokens_per_s, bound,
      bytes / 1e9, 100.0 * tokens_per_s / bound, suffix));
  const double kept_tokens_per_s = slots * f_.decode_steps / kept_seconds;
  const double fresh_tokens_per_s = slots * f_.decode_steps / fresh_seconds;
  Print(absl::StrFormat(
      "%s decode %2d slots, logits copied into kept vectors (ForwardBatchInto): %7.2f ms a "
      "step = %5.1f %%; into fresh vectors each step (ForwardBatch): %7.2f ms = %5.1f %%; host "
      "waits a step (in place): %.1f%s",
      name_.c_str(), slots, kept_seconds / f_.decode_steps * 1e3, 100.0 * kept_tokens_per_s / bound,
      fresh_seconds / f_.decode_steps * 1e3, 100.0 * fresh_tokens_per_s / bound,
      static_cast<double>(waits) / f_.decode_steps, suffix));
  // The host's share of a step that copies the logits from page-locked staging into kept
  // result vectors: the same bytes copied between kept host vectors (median of 5).
  std::vector<std::vector<float>> copies(kept.size());
  std::vector<double> copy_seconds;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = Clock::now();
    for (size_t i = 0; i < kept.size(); ++i) copies[i].assign(kept[i].begin(), kept[i].end());
    copy_seconds.push_back(Bench::Seconds(start));
  }
  std::sort(copy_seconds.begin(), copy_seconds.end());
  if (f_.op_times) OpTimes(slots, kv_memory, suffix);
  if (f_.moe_trace) MoeTrace(slots, kv_memory, suffix);
  if (f_.host_lead_mb > 0) HostLead(slots, kv_memory, seconds / f_.decode_steps, bound, suffix);
  if (f_.background_spill_mb > 0) {
    BesideSpills(slots, kv_memory, seconds / f_.decode_steps, bound, suffix);
  }
  Print(
      absl::StrFormat("%s decode %2d slots: copying a step's logits (%.1f MB) between kept host "
                      "vectors takes %.3f ms%s",
                      name_.c_str(), slots, slots * static_cast<double>(kept[0].size()) * 4e-6,
                      copy_seconds[2] * 1e3, suffix));
}

std::vector<SequencePass> ModelBench::StepBatch(SlotKvMemory& kv_memory, int offset,
                                                std::vector<int32_t>& next) {
  std::vector<SequencePass> batch;
  for (size_t s = 0; s < next.size(); ++s) {
    next[s] = tokens_[(static_cast<size_t>(offset) + s) % 1000];
    batch.push_back({kv_memory.slot(static_cast<int>(s)), absl::MakeConstSpan(&next[s], 1)});
  }
  return batch;
}

void ModelBench::OpTimes(int slots, SlotKvMemory& kv_memory, const std::string& suffix) {
  std::map<std::string, std::pair<double, int64_t>> totals;
  std::vector<int32_t> next(slots);
  std::vector<absl::Span<const float>> views;
  for (int step = 0; step < 2 + f_.decode_steps; ++step) {
    const std::vector<SequencePass> batch = StepBatch(kv_memory, step * 37, next);
    timing_.SetTiming(step >= 2);
    Bench::Check(model_->ForwardBatchViews(batch, views), "op-timed step");
    Bench::Check(timing_.Collect(totals), "op times");
  }
  timing_.SetTiming(false);
  PrintOpTotals(absl::StrFormat("%s decode %2d slots by operation (events on the stream, ",
                                name_.c_str(), slots),
                absl::StrCat(" ms a step with them)", suffix, ":"), totals, f_.decode_steps, 2,
                " a step");
}

void ModelBench::MoeTrace(int slots, SlotKvMemory& kv_memory, const std::string& suffix) {
  constexpr int kPoints = hip::kMoeLayerTracePoints;
  constexpr int64_t kLaunches = 64;  // More than a step's MoE layers.
  const int blocks = b_.MultiprocessorsForTest();
  const size_t values = static_cast<size_t>(kLaunches * blocks * kPoints);
  absl::StatusOr<DeviceBuffer> stamps = b_.Allocate(values * sizeof(uint64_t));
  if (!stamps.ok()) Bench::Fail("moe trace buffer");
  std::vector<int32_t> next(slots);
  std::vector<absl::Span<const float>> views;
  int64_t traced = 0;
  for (int step = 0; step < 3; ++step) {  // Two steps as they run, then the stamped one.
    const std::vector<SequencePass> batch = StepBatch(kv_memory, step * 43, next);
    if (step == 2) {
      if (hipMemsetAsync(stamps->data(), 0, values * sizeof(uint64_t), b_.compute_stream()) !=
          hipSuccess) {
        Bench::Fail("moe trace clear");
      }
      b_.SetMoeLayerTraceForTest(static_cast<uint64_t*>(stamps->data()), kLaunches,
                                 f_.moe_trace == 2);
    }
    Bench::Check(model_->ForwardBatchViews(batch, views), "moe-traced step");
  }
  traced = b_.MoeLayerTracedForTest();
  b_.SetMoeLayerTraceForTest(nullptr, 0);
  std::vector<uint64_t> host(values);
  if (hipMemcpyAsync(host.data(), stamps->data(), values * sizeof(uint64_t), hipMemcpyDeviceToHost,
                     b_.compute_stream()) != hipSuccess ||
      hipStreamSynchronize(b_.compute_stream()) != hipSuccess) {
    Bench::Fail("moe trace download");
  }
  if (traced == 0) {
    Print(absl::StrFormat("%s decode %2d slots: no MoE one launch to stamp%s", name_.c_str(), slots,
                          suffix));
    return;
  }
  static constexpr const char* kNames[kPoints] = {"entered",
                                                  "past the wait",
                                                  "routed and sorted",
                                                  "gate/up, warp 0",
                                                  "gate/up, all warps",
                                                  "down, warp 0",
                                                  "sum's barrier",
                                                  "sum, thread 0",
                                                  "producer's last stage",
                                                  "token 0 routed, once",
                                                  "token 0 routed, twice",
                                                  "warp 0's tokens routed",
                                                  "every token routed"};
  // Per launch and phase: the blocks' median and last time after the launch's first entry (us);
  // then the median of those over the launches.
  std::vector<std::vector<double>> medians(kPoints), lasts(kPoints);
  for (int64_t l = 0; l < traced; ++l) {
    const uint64_t* launch = host.data() + l * blocks * kPoints;
    uint64_t first = 0;
    for (int b = 0; b < blocks; ++b) {
      const uint64_t t = launch[b * kPoints];
      if (t != 0 && (first == 0 || t < first)) first = t;
    }
    for (int p = 0; p < kPoints; ++p) {
      std::vector<double> us;
      for (int b = 0; b < blocks; ++b) {
        const uint64_t t = launch[b * kPoints + p];
        if (t != 0 && t >= first) us.push_back(static_cast<double>(t - first) * 1e-3);
      }
      if (us.empty()) continue;
      std::sort(us.begin(), us.end());
      medians[p].push_back(us[us.size() / 2]);
      lasts[p].push_back(us.back());
    }
  }
  const auto median = [](std::vector<double> v) {
    if (v.empty()) return -1.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  Print(absl::StrFormat(
      "%s decode %2d slots, the MoE one launch by phase (%lld launches of %d blocks; us after the "
      "launch's first block entered, the blocks' median / last, median over the launches)%s:",
      name_.c_str(), slots, static_cast<long long>(traced), blocks, suffix));
  // In the order the phases happen: the routing's own points before the sort's end.
  static constexpr int kOrder[kPoints] = {0, 1, 9, 10, 11, 12, 2, 3, 4, 5, 6, 7, 8};
  for (const int p : kOrder) {
    if (medians[p].empty()) continue;  // The extra routings' stamps without --moe-trace=2.
    Print(absl::StrFormat("   %-24s %7.2f / %7.2f us", kNames[p], median(medians[p]),
                          median(lasts[p])));
  }
}

void ModelBench::HostLead(int slots, SlotKvMemory& kv_memory, double step_seconds, double bound,
                          const std::string& suffix) {
  const size_t bytes = static_cast<size_t>(f_.host_lead_mb) << 20;
  absl::StatusOr<DeviceBuffer> src = b_.Allocate(bytes);
  absl::StatusOr<DeviceBuffer> dst = b_.Allocate(bytes);
  if (!src.ok() || !dst.ok()) Bench::Fail("host lead buffers");
  hipStream_t stream = b_.compute_stream();
  auto copy = [&] {
    if (hipMemcpyAsync(dst->data(), src->data(), bytes, hipMemcpyDeviceToDevice, stream) !=
        hipSuccess) {
      Bench::Fail("host lead copy");
    }
  };
  std::vector<double> copy_seconds;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = Clock::now();
    copy();
    if (hipStreamSynchronize(stream) != hipSuccess) Bench::Fail("host lead sync");
    copy_seconds.push_back(Bench::Seconds(start));
  }
  std::sort(copy_seconds.begin(), copy_seconds.end());
  const double copy_s = copy_seconds[2];
  std::vector<int32_t> next(slots);
  std::vector<absl::Span<const float>> views;
  double total = 0;
  for (int step = 0; step < 2 + f_.decode_steps; ++step) {
    const std::vector<SequencePass> batch = StepBatch(kv_memory, step * 41, next);
    const auto start = Clock::now();
    copy();
    Bench::Check(model_->ForwardBatchViews(batch, views), "host-lead step");
    if (step >= 2) total += Bench::Seconds(start);
  }
  const double device_s = total / f_.decode_steps - copy_s;
  Print(absl::StrFormat(
      "%s decode %2d slots behind a %.2f ms device copy: %.2f ms a step of the device's own "
      "(= %5.1f %% of the HBM bound) against %.2f ms as enqueued%s",
      name_.c_str(), slots, copy_s * 1e3, device_s * 1e3, 100.0 * slots / device_s / bound,
      step_seconds * 1e3, suffix));
}

void ModelBench::BesideSpills(int slots, SlotKvMemory& kv_memory, double step_seconds, double bound,
                              const std::string& suffix) {
  const int64_t bytes = f_.background_spill_mb << 20;
  absl::StatusOr<DeviceBuffer> src = b_.Allocate(bytes);
  if (!src.ok()) Bench::Fail("background spill source");
  std::vector<uint8_t> host(static_cast<size_t>(bytes));
  DeviceMemory* memory = b_.memory();
  Bench::Check(memory->RegisterHost(host.data(), bytes), "pinning the spill destination");
  std::vector<int32_t> next(slots);
  std::vector<absl::Span<const float>> views;
  double total = 0;
  uint64_t ticket = 0;
  Clock::time_point first;
  for (int step = 0; step < 2 + f_.decode_steps; ++step) {
    const std::vector<SequencePass> batch = StepBatch(kv_memory, step * 43, next);
    const auto start = Clock::now();
    if (step == 2) first = start;
    absl::StatusOr<uint64_t> t = memory->DownloadBackground(host.data(), src->data(), bytes);
    Bench::Check(t.status(), "background download");
    ticket = *t;
    Bench::Check(model_->ForwardBatchViews(batch, views), "step beside a background download");
    if (step >= 2) total += Bench::Seconds(start);
  }
  Bench::Check(memory->WaitBackground(ticket), "background downloads");
  const double copies_s = Bench::Seconds(first);
  Bench::Check(memory->UnregisterHost(host.data()), "unpinning the spill destination");
  const double step_s = total / f_.decode_steps;
  Print(absl::StrFormat(
      "%s decode %2d slots beside %ld MB of background downloads a step: %.2f ms a step "
      "(= %5.1f %% of the HBM bound) against %.2f ms without; the downloads %.1f GB/s%s",
      name_.c_str(), slots, f_.background_spill_mb, step_s * 1e3, 100.0 * slots / step_s / bound,
      step_seconds * 1e3, static_cast<double>(bytes) * f_.decode_steps / copies_s / 1e9, suffix));
}

}  // namespace cairn::infer::model_bench
