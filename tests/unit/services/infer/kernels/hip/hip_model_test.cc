// The model on the GPU: Qwen3HybridModel with its weights, activations and slots in the HIP
// backend's memory. Full-model logits against the CPU backend on each architecture preset
// (prefill passes of every kind, then batched decode across two slots), and restore exactness on
// the device (a slot captured and restored through SlotKvMemory continues bit-identically to the
// uncaptured run with the same pass boundaries). Label gpu; skips without a device.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/status/status_macros.h"
#include "gtest/gtest.h"
#include "services/infer/engine/generation.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/models/model_test_util.h"

namespace cairn::infer {
namespace {

// With fp32 GEMM and attention inputs (HipKernelBackendOptions::bf16_gemm_inputs,
// bf16_attention, mma_rows_bf16_inputs and mma_delta off, as --gpu-bf16-inputs=false sets
// them) both backends compute over the same bf16 weights in fp32 with fp32 accumulation, in
// different reduction orders (vendor GEMM against OpenBLAS, tiled attention, chunked delta
// rule): a pass's logits agree
// within this fraction of its largest reference logit. The kernels alone agree within 1e-5
// (kernels/hip/README.md); eight layers of random weights amplify that.
constexpr float kRelativeTolerance = 1e-3f;
// The default backend rounds every product's input rows to bf16 (prefill GEMMs and decode's row
// products) and prefill attention's q, k, v: each product is off by up to 1.5e-3 of its
// magnitude (measured; the kernel test's bound is 4e-3). These random 8-layer presets amplify a
// product's error about 300 times (fp32: 3e-7 per product gives 1e-4 in the logits), so the bf16
// path's logits differ from the CPU backend's by up to 0.65 of the largest logit (H200,
// 2026-12-01). This bound only catches gross errors (NaN, a wrong part, stride or transpose, which
// give unrelated logits); the kernel test pins the products themselves.
constexpr float kBf16InputRelativeTolerance = 1.0f;

// Prefill passes: one token (recurrent delta rule), a GEMM pass crossing the 64-token chunk, a
// short pass (the batch-invariant row kernels), a pass of exactly one chunk, a longer one.
const std::vector<int64_t> kPasses = {1, 100, 7, 64, 128};
constexpr int64_t kPromptTokens = 300;
constexpr int kDecodeSteps = 4;

float RelativeDifference(const std::vector<float>& reference, const std::vector<float>& other) {
  float largest = 1.0f;
  for (float v : reference) largest = std::max(largest, std::fabs(v));
  return testing::MaxAbsDiff(reference, other) / largest;
}

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Everything valid in slot `slot`: private components whole, rows up to its position, read
// back from the device.
absl::StatusOr<std::vector<uint8_t>> StateBytes(SlotKvMemory& kv, int slot) {
  const StateLayout& layout = kv.slot(slot)->layout();
  std::vector<uint8_t> out(layout.private_bytes());
  ASSIGN_OR_RETURN(const int64_t position, kv.CapturePrivateState(slot, absl::MakeSpan(out)));
  for (size_t c = 0; c < layout.components.size(); ++c) {
    const StateComponent& comp = layout.components[c];
    if (comp.kind != ComponentKind::kRows) continue;
    std::vector<uint8_t> rows(static_cast<size_t>(position * comp.bytes()));
    RETURN_IF_ERROR(kv.CopyRowsOut(slot, static_cast<int>(c), 0, position, absl::MakeSpan(rows)));
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

// Loads StateBytes of a slot at `position` into slot `slot`.
absl::Status RestoreBytes(SlotKvMemory& kv, int slot, int64_t position,
                          const std::vector<uint8_t>& state) {
  const StateLayout& layout = kv.slot(slot)->layout();
  RETURN_IF_ERROR(kv.BeginRestore(slot));
  const int64_t private_bytes = layout.private_bytes();
  int64_t at = private_bytes;
  for (size_t c = 0; c < layout.components.size(); ++c) {
    const StateComponent& comp = layout.components[c];
    if (comp.kind != ComponentKind::kRows) continue;
    const int64_t n = position * comp.bytes();
    RETURN_IF_ERROR(
        kv.CopyRowsIn(slot, static_cast<int>(c), 0, absl::MakeConstSpan(state).subspan(at, n)));
    at += n;
  }
  RETURN_IF_ERROR(
      kv.LoadPrivateState(slot, position, absl::MakeConstSpan(state).subspan(0, private_bytes)));
  return kv.Validate(slot, position);
}

class HipModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (HipDeviceCount() == 0) GTEST_SKIP() << "no HIP device";
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> gpu = HipKernelBackend::Create({});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
    cpu_ = testing::TestBackend();
    absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset(GetParam(), gpu_.get());
    ASSERT_TRUE(model.ok()) << model.status();
    gpu_model_ = *std::move(model);
    model = testing::LoadPreset(GetParam(), cpu_.get());
    ASSERT_TRUE(model.ok()) << model.status();
    cpu_model_ = *std::move(model);
    vocab_ = cpu_model_->info().vocab_size;
    tokens_ = testing::RandomTokens(kPromptTokens, vocab_, 7);
  }

  std::unique_ptr<HipKernelBackend> gpu_;
  std::unique_ptr<CpuKernelBackend> cpu_;
  std::unique_ptr<Model> gpu_model_;
  std::unique_ptr<Model> cpu_model_;
  int64_t vocab_ = 0;
  std::vector<int32_t> tokens_;

  // A slot captured at a depth and restored into another slot continues with the bits of the
  // slot that was never captured, and ends with its state.
  void ExpectRestoreContinuesBitIdentically() {
    const std::vector<int64_t> head = {100, 1, 50};  // Depth 151: two chunks and a tail.
    const std::vector<int64_t> tail = {8, 141};
    constexpr int64_t kDepth = 151;
    absl::StatusOr<std::unique_ptr<SlotKvMemory>> kv =
        SlotKvMemory::Create(gpu_model_->state_layout(),
                             {.slots = 3, .max_rows = kPromptTokens, .memory = gpu_->memory()});
    ASSERT_TRUE(kv.ok()) << kv.status();
    std::vector<int64_t> all = head;
    all.insert(all.end(), tail.begin(), tail.end());
    const auto span = absl::MakeConstSpan(tokens_);
    absl::StatusOr<std::vector<float>> uncaptured =
        Prefill(*gpu_model_, (*kv)->slot(0), span, all, /*all_logits=*/true);
    ASSERT_TRUE(uncaptured.ok()) << uncaptured.status();
    ASSERT_TRUE(Prefill(*gpu_model_, (*kv)->slot(1), span.subspan(0, kDepth), head, true).ok());
    absl::StatusOr<std::vector<uint8_t>> captured = StateBytes(**kv, 1);
    ASSERT_TRUE(captured.ok()) << captured.status();
    // The slot that held it goes to another conversation; the state comes back in another slot.
    CAIRN_ASSERT_OK((*kv)->Reset(1));
    ASSERT_TRUE(Prefill(*gpu_model_, (*kv)->slot(1), span.subspan(200, 30), {30}, false).ok());
    CAIRN_ASSERT_OK(RestoreBytes(**kv, 2, kDepth, *captured));
    absl::StatusOr<std::vector<float>> continued =
        Prefill(*gpu_model_, (*kv)->slot(2), span.subspan(kDepth), tail, /*all_logits=*/true);
    ASSERT_TRUE(continued.ok()) << continued.status();

    const std::vector<float> expected(uncaptured->begin() + kDepth * vocab_, uncaptured->end());
    EXPECT_TRUE(SameBytes(expected, *continued));
    absl::StatusOr<std::vector<uint8_t>> state0 = StateBytes(**kv, 0);
    absl::StatusOr<std::vector<uint8_t>> state2 = StateBytes(**kv, 2);
    ASSERT_TRUE(state0.ok() && state2.ok());
    EXPECT_TRUE(*state0 == *state2);
  }

  // See ADecodeStepsLogitsDoNotDependOnItsBatch.
  void ExpectDecodeStepsIndependentOfTheirBatch() {
    const auto span = absl::MakeConstSpan(tokens_);
    std::vector<std::unique_ptr<SlotState>> slots;
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<std::unique_ptr<SlotState>> s =
          SlotState::Create(gpu_model_->state_layout(), 64, gpu_->memory());
      ASSERT_TRUE(s.ok()) << s.status();
      slots.push_back(*std::move(s));
    }
    // Slots 0 and 1 hold the same conversation; 2 and 3 others.
    for (int i = 0; i < 4; ++i) {
      const int64_t first = i < 2 ? 0 : 20 * i;
      ASSERT_TRUE(gpu_model_->Forward(slots[i].get(), span.subspan(first, 30), {}).ok());
    }
    for (int step = 0; step < 3; ++step) {
      const std::vector<int32_t> next = {tokens_[static_cast<size_t>(40 + step)]};
      const std::vector<int32_t> other = {tokens_[static_cast<size_t>(50 + step)]};
      // A short pass of several tokens shares the batch too (the row-invariant group).
      const std::vector<int32_t> several(tokens_.begin() + 60 + 3 * step,
                                         tokens_.begin() + 63 + 3 * step);
      const SequencePass alone[] = {{slots[0].get(), next}};
      const SequencePass shared[] = {
          {slots[2].get(), other}, {slots[1].get(), next}, {slots[3].get(), several}};
      absl::StatusOr<std::vector<std::vector<float>>> a = gpu_model_->ForwardBatch(alone);
      absl::StatusOr<std::vector<std::vector<float>>> b = gpu_model_->ForwardBatch(shared);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_TRUE(SameBytes((*a)[0], (*b)[1])) << "step " << step;
    }
  }
};

// The logits of `passes` over the prompt, then of kDecodeSteps batched decode steps of two
// slots (the prompt's continuation and a second conversation), on one backend's model.
absl::StatusOr<std::vector<std::vector<float>>> RunAll(Model& model, KernelBackend& backend,
                                                       const std::vector<int32_t>& tokens) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<SlotState> a,
      SlotState::Create(model.state_layout(), kPromptTokens + kDecodeSteps, backend.memory()));
  ASSIGN_OR_RETURN(std::unique_ptr<SlotState> b,
                   SlotState::Create(model.state_layout(), 64 + kDecodeSteps, backend.memory()));
  std::vector<std::vector<float>> out;
  int64_t done = 0;
  for (int64_t n : kPasses) {
    ASSIGN_OR_RETURN(
        std::vector<float> logits,
        model.Forward(a.get(), absl::MakeConstSpan(tokens).subspan(done, n), {.all_logits = true}));
    out.push_back(std::move(logits));
    done += n;
  }
  ASSIGN_OR_RETURN(std::vector<float> other,
                   model.Forward(b.get(), absl::MakeConstSpan(tokens).subspan(10, 64), {}));
  out.push_back(std::move(other));
  for (int step = 0; step < kDecodeSteps; ++step) {
    // Fixed next tokens, so that both backends decode the same sequence.
    const std::vector<int32_t> next_a = {tokens[static_cast<size_t>(step)]};
    const std::vector<int32_t> next_b = {tokens[static_cast<size_t>(step + 1)]};
    const SequencePass batch[] = {{a.get(), next_a}, {b.get(), next_b}};
    ASSIGN_OR_RETURN(std::vector<std::vector<float>> logits, model.ForwardBatch(batch));
    for (std::vector<float>& l : logits) out.push_back(std::move(l));
  }
  return out;
}

// Runs RunAll on both backends and expects every pass's logits within `tolerance`.
void ExpectLogitsMatch(const std::string& what, Model& cpu_model, KernelBackend& cpu,
                       Model& gpu_model, KernelBackend& gpu, const std::vector<int32_t>& tokens,
                       float tolerance) {
  absl::StatusOr<std::vector<std::vector<float>>> want = RunAll(cpu_model, cpu, tokens);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<std::vector<std::vector<float>>> got = RunAll(gpu_model, gpu, tokens);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(want->size(), got->size());
  float worst = 0.0f;
  for (size_t i = 0; i < want->size(); ++i) {
    ASSERT_EQ((*want)[i].size(), (*got)[i].size()) << "pass " << i;
    for (float v : (*got)[i]) ASSERT_TRUE(std::isfinite(v)) << "pass " << i;
    const float d = RelativeDifference((*want)[i], (*got)[i]);
    EXPECT_LE(d, tolerance) << "pass " << i;
    worst = std::max(worst, d);
  }
  std::cout << "[ measured ] " << what << ": largest logit difference " << worst
            << " of the largest logit (tolerance " << tolerance << ")\n";
}

TEST_P(HipModelTest, LogitsMatchTheCpuBackendWithFp32Inputs) {
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> exact =
      HipKernelBackend::Create({.bf16_gemm_inputs = false,
                                .bf16_attention = false,
                                .mma_rows_bf16_inputs = false,
                                .mma_delta = false});
  ASSERT_TRUE(exact.ok()) << exact.status();
  absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset(GetParam(), exact->get());
  ASSERT_TRUE(model.ok()) << model.status();
  ExpectLogitsMatch(GetParam() + " (fp32 inputs)", *cpu_model_, *cpu_, **model, **exact, tokens_,
                    kRelativeTolerance);
}

TEST_P(HipModelTest, LogitsMatchTheCpuBackendWithinTheBf16InputRounding) {
  ExpectLogitsMatch(GetParam() + " (bf16 inputs)", *cpu_model_, *cpu_, *gpu_model_, *gpu_, tokens_,
                    kBf16InputRelativeTolerance);
}

TEST_P(HipModelTest, WeightsStayBf16OnTheDevice) {
  // The presets are bf16 checkpoints: two bytes per parameter in matrices.
  EXPECT_LT(gpu_model_->info().weight_bytes, 3 * gpu_model_->info().num_parameters);
}

// Expects two RunAll results to hold the same bits in every pass.
void ExpectSamePasses(const absl::StatusOr<std::vector<std::vector<float>>>& want,
                      const absl::StatusOr<std::vector<std::vector<float>>>& got) {
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(want->size(), got->size());
  for (size_t i = 0; i < want->size(); ++i) {
    EXPECT_TRUE(SameBytes((*want)[i], (*got)[i])) << "pass " << i;
  }
}

TEST_P(HipModelTest, SameInputsGiveBitIdenticalLogits) {
  absl::StatusOr<std::vector<std::vector<float>>> first = RunAll(*gpu_model_, *gpu_, tokens_);
  ExpectSamePasses(first, RunAll(*gpu_model_, *gpu_, tokens_));
}

// Overlapped launches (each kernel scheduled while the previous one finishes, waiting for it
// before it touches memory; on by default) give the bits of plain launches: every prefill pass
// and batched decode step of RunAll, with them and without.
TEST_P(HipModelTest, OverlappedLaunchesGiveTheBitsOfPlainOnes) {
  ASSERT_TRUE(hip::OverlappedLaunches());
  absl::StatusOr<std::vector<std::vector<float>>> overlapped = RunAll(*gpu_model_, *gpu_, tokens_);
  hip::SetOverlappedLaunches(false);
  absl::StatusOr<std::vector<std::vector<float>>> plain = RunAll(*gpu_model_, *gpu_, tokens_);
  hip::SetOverlappedLaunches(true);
  ExpectSamePasses(plain, overlapped);
}

// Kernels that let the next one be scheduled right after their own wait (hip::SetEarlyRelease,
// every kind) give the bits of releasing it at their exit: every pass and decode step.
TEST_P(HipModelTest, EarlyReleaseGivesTheBitsOfReleaseAtExit) {
  hip::SetEarlyRelease(hip::kReleaseAllKinds);
  absl::StatusOr<std::vector<std::vector<float>>> early = RunAll(*gpu_model_, *gpu_, tokens_);
  hip::SetEarlyRelease(0);
  absl::StatusOr<std::vector<std::vector<float>>> at_exit = RunAll(*gpu_model_, *gpu_, tokens_);
  hip::SetEarlyRelease(HipKernelBackendOptions().early_release);
  ExpectSamePasses(at_exit, early);
}

// A delta-rule layer's decode conv in the input projection's launch (fuse_conv_product, on by
// default) gives the bits of the product then the conv launch: every pass and decode step of
// RunAll, fused and not.
TEST_P(HipModelTest, ConvInTheProjectionGivesTheBitsOfTheConvLaunch) {
  absl::StatusOr<std::vector<std::vector<float>>> fused = RunAll(*gpu_model_, *gpu_, tokens_);
  gpu_->SetFuseConvProductForTest(false);
  absl::StatusOr<std::vector<std::vector<float>>> apart = RunAll(*gpu_model_, *gpu_, tokens_);
  gpu_->SetFuseConvProductForTest(true);
  ExpectSamePasses(apart, fused);
}

// An attention layer's output gate split, q and k norms, RoPE and append in one launch
// (fuse_qk_norm_rope, on by default) give the bits of their four launches: every pass and
// decode step of RunAll, in one launch and not.
TEST_P(HipModelTest, QkNormsAndRopeInOneLaunchGiveTheBitsOfTheirLaunches) {
  gpu_->SetFuseQkNormRopeForTest(true);
  const int64_t before = gpu_->norm_rope_launches();
  absl::StatusOr<std::vector<std::vector<float>>> one = RunAll(*gpu_model_, *gpu_, tokens_);
  EXPECT_GT(gpu_->norm_rope_launches(), before);
  gpu_->SetFuseQkNormRopeForTest(false);
  absl::StatusOr<std::vector<std::vector<float>>> apart = RunAll(*gpu_model_, *gpu_, tokens_);
  gpu_->SetFuseQkNormRopeForTest(HipKernelBackendOptions().fuse_qk_norm_rope);
  ExpectSamePasses(apart, one);
}

// A delta-rule layer's gated norm inside its decode steps' launch (fuse_delta_norm), with that
// kernel compiled for four blocks a multiprocessor and for what its registers like, gives the
// bits of the norm launch after the steps: every pass and decode step of RunAll.
TEST_P(HipModelTest, GatedNormInTheDeltaStepGivesTheBitsOfTheNormLaunch) {
  const HipKernelBackendOptions defaults;
  gpu_->SetFuseDeltaNormForTest(false);
  absl::StatusOr<std::vector<std::vector<float>>> apart = RunAll(*gpu_model_, *gpu_, tokens_);
  gpu_->SetFuseDeltaNormForTest(true);
  for (const int blocks : {1, 4}) {
    gpu_->SetDeltaStepMinBlocksForTest(blocks);
    const int64_t before = gpu_->delta_norm_inside_launches();
    ExpectSamePasses(apart, RunAll(*gpu_model_, *gpu_, tokens_));
    // The presets' value heads: 32 wide (a cluster of one block) in "dense" and "moe", whose
    // steps take the norm inside; 16 in "next", which the norm inside does not take.
    EXPECT_EQ(gpu_->delta_norm_inside_launches() > before, GetParam() != "next");
  }
  gpu_->SetFuseDeltaNormForTest(defaults.fuse_delta_norm);
  gpu_->SetDeltaStepMinBlocksForTest(defaults.delta_step_min_blocks);
}

// A MoE decode layer's router product inside the one launch (moe_router_inside) gives the bits
// of its own launch before it: every pass and decode step of RunAll.
TEST_P(HipModelTest, RouterInsideTheOneLaunchGivesTheBitsOfItsLaunch) {
  gpu_->SetMoeRouterInsideForTest(false);
  absl::StatusOr<std::vector<std::vector<float>>> apart = RunAll(*gpu_model_, *gpu_, tokens_);
  gpu_->SetMoeRouterInsideForTest(true);
  const int64_t before = gpu_->moe_router_inside_launches();
  absl::StatusOr<std::vector<std::vector<float>>> inside = RunAll(*gpu_model_, *gpu_, tokens_);
  // "next" and "moe" have MoE layers, whose decode steps the one launch takes.
  EXPECT_EQ(gpu_->moe_router_inside_launches() > before, GetParam() != "dense");
  gpu_->SetMoeRouterInsideForTest(HipKernelBackendOptions().moe_router_inside);
  ExpectSamePasses(apart, inside);
}

// The MoE one launch's routing in compact code (moe_compact_route) gives the bits of its
// unrolled code: every pass and decode step of RunAll.
TEST_P(HipModelTest, CompactRoutingInTheOneLaunchGivesTheBitsOfTheUnrolledRouting) {
  gpu_->SetMoeCompactRouteForTest(false);
  absl::StatusOr<std::vector<std::vector<float>>> unrolled = RunAll(*gpu_model_, *gpu_, tokens_);
  gpu_->SetMoeCompactRouteForTest(true);
  const int64_t before = hip::MoeLayerStreamLaunches();
  absl::StatusOr<std::vector<std::vector<float>>> compact = RunAll(*gpu_model_, *gpu_, tokens_);
  // "next" and "moe" have MoE layers, whose decode steps the one launch takes.
  EXPECT_EQ(hip::MoeLayerStreamLaunches() > before,
            GetParam() != "dense" && hip::MoeLayerStreamSupported());
  gpu_->SetMoeCompactRouteForTest(HipKernelBackendOptions().moe_compact_route);
  ExpectSamePasses(unrolled, compact);
}

// Logits in parts of the vocabulary, each part's download queued on its own stream while the
// next part computes (Qwen3HybridOptions::logits_parts; the test presets' logits are below the
// default's minimum size, so gpu_model_ computes them whole), give the bits of one product.
TEST_P(HipModelTest, LogitsInPartsGiveTheBitsOfOneProduct) {
  ModelLoadOptions options;
  options.qwen3_hybrid.logits_parts = 3;
  options.qwen3_hybrid.logits_parts_min_bytes = 0;
  absl::StatusOr<std::unique_ptr<Model>> parts =
      testing::LoadPreset(GetParam(), gpu_.get(), options);
  ASSERT_TRUE(parts.ok()) << parts.status();
  absl::StatusOr<std::vector<std::vector<float>>> want = RunAll(*gpu_model_, *gpu_, tokens_);
  ExpectSamePasses(want, RunAll(**parts, *gpu_, tokens_));
}

// Logits written by the product straight into the page-locked staging through the device's
// alias of it (Qwen3HybridOptions::logits_direct_max_bytes) give the bits of the product
// downloaded, and a decode step still waits for the device once.
TEST_P(HipModelTest, LogitsWrittenIntoTheStagingGiveTheBitsOfTheDownload) {
  // A page of its own, so that the registration shares no page with other memory.
  const std::unique_ptr<void, decltype(&std::free)> host(std::aligned_alloc(4096, 4096),
                                                         &std::free);
  ASSERT_NE(host, nullptr);
  ASSERT_TRUE(gpu_->memory()->RegisterHost(host.get(), 4096).ok());
  EXPECT_NE(gpu_->memory()->HostAlias(host.get()), nullptr);
  CAIRN_EXPECT_OK(gpu_->memory()->UnregisterHost(host.get()));
  ModelLoadOptions options;
  options.qwen3_hybrid.logits_parts = 1;
  options.qwen3_hybrid.logits_direct_max_bytes = std::numeric_limits<int64_t>::max();
  absl::StatusOr<std::unique_ptr<Model>> direct =
      testing::LoadPreset(GetParam(), gpu_.get(), options);
  ASSERT_TRUE(direct.ok()) << direct.status();
  absl::StatusOr<std::vector<std::vector<float>>> want = RunAll(*gpu_model_, *gpu_, tokens_);
  ExpectSamePasses(want, RunAll(**direct, *gpu_, tokens_));
  CAIRN_EXPECT_OK(testing::CompareReusedResults(**direct, gpu_->memory(), 11));
}

// ForwardBatchInto reuses its results' memory (the logits staged, then copied into each result)
// and gives ForwardBatch's bits; so do ForwardBatchViews' spans into the staging.
TEST_P(HipModelTest, ReusedResultsGiveTheBitsOfFreshOnes) {
  CAIRN_EXPECT_OK(testing::CompareReusedResults(*gpu_model_, gpu_->memory(), 11));
}

// A steady decode step through ForwardBatchViews waits for the device once (the logits'
// download; the token ids go up queued) and gives the bits of the same steps run through
// ForwardBatch on fresh slots, so the queued ids are the step's own.
TEST_P(HipModelTest, SteadyDecodeStepWaitsOnceAndGivesTheSameBits) {
  constexpr int kSteps = 6;
  const auto run =
      [&](bool views,
          std::vector<int64_t>* waits) -> absl::StatusOr<std::vector<std::vector<float>>> {
    std::vector<std::unique_ptr<SlotState>> slots;
    for (int i = 0; i < 3; ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<SlotState> slot,
                       SlotState::Create(gpu_model_->state_layout(), 16, gpu_->memory()));
      slots.push_back(std::move(slot));
    }
    std::vector<std::vector<float>> out;
    std::vector<absl::Span<const float>> spans;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<int32_t> next(slots.size());
      std::vector<SequencePass> batch;
      for (size_t i = 0; i < slots.size(); ++i) {
        next[i] = tokens_[static_cast<size_t>(step * 3 + static_cast<int>(i))];
        batch.push_back({slots[i].get(), absl::MakeConstSpan(&next[i], 1)});
      }
      const int64_t before = gpu_->host_waits();
      if (views) {
        RETURN_IF_ERROR(gpu_model_->ForwardBatchViews(batch, spans));
        for (absl::Span<const float> v : spans) out.emplace_back(v.begin(), v.end());
      } else {
        ASSIGN_OR_RETURN(std::vector<std::vector<float>> logits, gpu_model_->ForwardBatch(batch));
        for (std::vector<float>& l : logits) out.push_back(std::move(l));
      }
      if (waits != nullptr) waits->push_back(gpu_->host_waits() - before);
    }
    return out;
  };
  absl::StatusOr<std::vector<std::vector<float>>> fresh = run(false, nullptr);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  std::vector<int64_t> waits;
  absl::StatusOr<std::vector<std::vector<float>>> viewed = run(true, &waits);
  ASSERT_TRUE(viewed.ok()) << viewed.status();
  ASSERT_EQ(fresh->size(), viewed->size());
  for (size_t i = 0; i < fresh->size(); ++i) {
    EXPECT_TRUE(SameBytes((*fresh)[i], (*viewed)[i])) << "step " << i / 3 << " slot " << i % 3;
  }
  // The first steps may grow the scratch arena (an allocation waits); later ones must not.
  for (int step = 2; step < kSteps; ++step) EXPECT_EQ(waits[step], 1) << "step " << step;
}

TEST_P(HipModelTest, RestoredSlotContinuesBitIdentically) {
  ExpectRestoreContinuesBitIdentically();
}

// A decode step's logits are the same bits whatever shares its batch: a slot decoded alone and
// its twin (the same prompt) decoded between two other conversations, and within one pass of
// short prompts of several tokens (the MoE layers' routed experts run on the device).
TEST_P(HipModelTest, ADecodeStepsLogitsDoNotDependOnItsBatch) {
  ExpectDecodeStepsIndependentOfTheirBatch();
}

// Decode attention on the matrix units (attention_decode_variant 5: bf16 operands, other bits):
// the logits near the CPU backend's (the bf16 path's gross-error bound), equal inputs giving
// equal bits, a decode step's bits independent of its batch (a batch whose short pass of
// several tokens its blocks do not take), a restored slot continuing bit for bit, and its
// blocks launched where the preset's heads allow them.
TEST_P(HipModelTest, MatrixUnitDecodeAttentionKeepsEveryPromise) {
  CAIRN_ASSERT_OK(gpu_->SetAttentionDecodeVariantForTest(hip::kAttentionDecodeMmaVariant));
  const int64_t before = hip::AttentionDecodeMmaLaunches();
  ExpectLogitsMatch(GetParam() + " (decode attention variant 5)", *cpu_model_, *cpu_, *gpu_model_,
                    *gpu_, tokens_, kBf16InputRelativeTolerance);
  // Every preset's heads are a multiple of 16 wide with a GQA group of at most 8.
  EXPECT_EQ(hip::AttentionDecodeMmaLaunches() > before, hip::AttentionDecodeMmaSupported());
  absl::StatusOr<std::vector<std::vector<float>>> first = RunAll(*gpu_model_, *gpu_, tokens_);
  ExpectSamePasses(first, RunAll(*gpu_model_, *gpu_, tokens_));
  ExpectDecodeStepsIndependentOfTheirBatch();
  ExpectRestoreContinuesBitIdentically();
  CAIRN_ASSERT_OK(
      gpu_->SetAttentionDecodeVariantForTest(HipKernelBackendOptions().attention_decode_variant));
}

TEST_P(HipModelTest, SlotsInHostMemoryAreRefused) {
  absl::StatusOr<std::unique_ptr<SlotState>> host =
      SlotState::Create(gpu_model_->state_layout(), 8, HostDeviceMemory());
  ASSERT_TRUE(host.ok());
  absl::StatusOr<std::vector<float>> r =
      gpu_model_->Forward(host->get(), absl::MakeConstSpan(tokens_).subspan(0, 2), {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Architectures, HipModelTest, ::testing::Values("dense", "next", "moe"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace cairn::infer
