// The model on the GPU at realistic widths against the CPU backend. The architecture presets of
// hip_model_test.cc are toy-sized (hidden 64, heads of 16 and 32), so the model never reaches the
// paths the HIP backend keeps for real shapes: the delta rule on the matrix units with its gates
// and q / k norms inside (dk 128), the warpgroup prefill attention (heads of 256), the MoE
// prefill's warpgroup GEMMs and the decode layer's one launch at real expert widths. Here
// random checkpoints with the widths of a Qwen3.5-9B-like dense model and of a
// Qwen3-Next-80B-A3B-like MoE model (fewer layers, experts and vocabulary, so that the CPU
// reference stays short) run prefill passes of every kind, then decode steps of two slots and
// of one, on both backends. Label gpu; skips without a device.
//
// What the comparison can tell: the default backend rounds product inputs to bf16, so its
// logits differ from the CPU backend's by an amount the random layers amplify, and a token whose
// router logits nearly tie may take another expert in one layer (on an H100: the dense shape's
// rows within a cosine of 0.99997 of the reference's, the MoE shape's all above 0.99 but one at
// 0.987). An error of wiring (a wrong stride, part, head or expert; a stale buffer) gives logits
// unrelated to the reference's, whose cosine with them is near zero, in every row it touches. So
// every row's cosine must be at least kFloorCosine and all but kLooseShare of the rows' at least
// kMinCosine; the largest difference is printed. With fp32 inputs both backends compute the same
// sums in other orders (measured: within 5e-6 of the largest logit), and every row must agree
// within kFp32Tolerance.

#include "tests/unit/services/infer/kernels/hip/hip_model_shapes.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status/status_macros.h"
#include "gtest/gtest.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/models/model_loader.h"
#include "services/infer/models/random_checkpoint_writer.h"
#include "tests/unit/services/infer/models/model_test_util.h"

namespace cairn::infer {
namespace {

// bf16 inputs: each row's logits against the reference's, their cosine at least kFloorCosine,
// and at least kMinCosine in all but kLooseShare of the rows.
constexpr double kFloorCosine = 0.9;
constexpr double kMinCosine = 0.99;
constexpr double kLooseShare = 0.02;
// With fp32 inputs: the largest difference at most this fraction of the row's largest logit.
constexpr double kFp32Tolerance = 1e-4;

// Passes over the prompt: one token (the recurrent delta rule), one crossing a 64-token chunk, a
// short pass (the row kernels), one of exactly two chunks, and a longer one ending mid-chunk.
const std::vector<int64_t> kPasses = {1, 100, 7, 128, 161};
constexpr int64_t kPromptTokens = 397;
constexpr int64_t kOtherPrompt = 70;  // The second slot's prompt.
constexpr int kPairSteps = 2;         // Decode steps of both slots, then of the first alone.
constexpr int kAloneSteps = 2;

// The benchmark's shapes (hip_model_shapes.h) cut to three layers (Gated DeltaNet, full
// attention, Gated DeltaNet), a 32000-token vocabulary and a 4096-token context, so that the CPU
// reference stays short; the MoE shape with 64 experts of which 8 a token (512 and 10 in the
// model).
RandomCheckpointOptions Shape(const std::string& name) {
  RandomCheckpointOptions o =
      name == "dense" ? testing::DenseModelShape(3) : testing::MoeModelShape(3);
  o.seed = name == "dense" ? 91 : 92;
  o.full_attention_interval = 2;
  o.vocab_size = 32000;
  o.max_position_embeddings = 4096;
  if (name != "dense") {
    o.num_experts = 64;
    o.top_k = 8;
  }
  return o;
}

// One row of logits a position (all_logits passes) or one (the others), in order.
using Rows = std::vector<std::vector<float>>;

void Append(Rows& rows, const std::vector<float>& logits, int64_t vocab) {
  for (size_t at = 0; at + static_cast<size_t>(vocab) <= logits.size();
       at += static_cast<size_t>(vocab)) {
    rows.emplace_back(logits.begin() + static_cast<std::ptrdiff_t>(at),
                      logits.begin() + static_cast<std::ptrdiff_t>(at + vocab));
  }
}

// The passes, then the decode steps, on one backend's model.
absl::StatusOr<Rows> RunPasses(Model& model, KernelBackend& backend,
                               const std::vector<int32_t>& tokens) {
  const int64_t vocab = model.info().vocab_size;
  const int64_t steps = kPairSteps + kAloneSteps;
  ASSIGN_OR_RETURN(
      std::unique_ptr<SlotState> a,
      SlotState::Create(model.state_layout(), kPromptTokens + steps, backend.memory()));
  ASSIGN_OR_RETURN(std::unique_ptr<SlotState> b,
                   SlotState::Create(model.state_layout(), kOtherPrompt + steps, backend.memory()));
  Rows rows;
  int64_t done = 0;
  for (const int64_t n : kPasses) {
    ASSIGN_OR_RETURN(
        std::vector<float> logits,
        model.Forward(a.get(), absl::MakeConstSpan(tokens).subspan(done, n), {.all_logits = true}));
    Append(rows, logits, vocab);
    done += n;
  }
  ASSIGN_OR_RETURN(
      std::vector<float> other,
      model.Forward(b.get(), absl::MakeConstSpan(tokens).subspan(5, kOtherPrompt), {}));
  Append(rows, other, vocab);
  for (int step = 0; step < steps; ++step) {
    // Fixed next tokens, so that both backends decode the same sequences.
    const std::vector<int32_t> next_a = {tokens[static_cast<size_t>(2 * step)]};
    const std::vector<int32_t> next_b = {tokens[static_cast<size_t>(2 * step + 1)]};
    std::vector<SequencePass> batch = {{a.get(), next_a}};
    if (step < kPairSteps) batch.push_back({b.get(), next_b});
    ASSIGN_OR_RETURN(std::vector<std::vector<float>> logits, model.ForwardBatch(batch));
    for (const std::vector<float>& l : logits) Append(rows, l, vocab);
  }
  return rows;
}

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

class HipModelShapesTest : public ::testing::TestWithParam<std::string> {
 protected:
  // The checkpoint and the CPU backend's logits, once for each shape (the reference is the
  // slow part).
  struct Reference {
    std::string dir;
    std::vector<int32_t> tokens;
    Rows rows;
  };

  static const Reference* ReferenceFor(const std::string& name) {
    static auto* references = new std::map<std::string, Reference>();
    auto it = references->find(name);
    if (it != references->end()) return &it->second;
    Reference r;
    r.dir = testing::ScratchDir() + "/shape-" + name;
    const absl::Status written = WriteRandomCheckpoint(r.dir, Shape(name));
    EXPECT_TRUE(written.ok()) << written;
    if (!written.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<CpuKernelBackend>> cpu = CpuKernelBackend::Create(
        {.threads = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()))});
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    if (!cpu.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(r.dir, cpu->get(), {});
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return nullptr;
    r.tokens = testing::RandomTokens(kPromptTokens, (*model)->info().vocab_size, 17);
    absl::StatusOr<Rows> rows = RunPasses(**model, **cpu, r.tokens);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) return nullptr;
    r.rows = *std::move(rows);
    return &references->emplace(name, std::move(r)).first->second;
  }

  void SetUp() override {
    if (HipDeviceCount() == 0) GTEST_SKIP() << "no HIP device";
  }

  // Runs the shape on a HIP backend made with `options`; returns the rows.
  static Rows OnDevice(const Reference& ref, const HipKernelBackendOptions& options) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> gpu = HipKernelBackend::Create(options);
    EXPECT_TRUE(gpu.ok()) << gpu.status();
    if (!gpu.ok()) return {};
    absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(ref.dir, gpu->get(), {});
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return {};
    absl::StatusOr<Rows> rows = RunPasses(**model, **gpu, ref.tokens);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? *std::move(rows) : Rows{};
  }

  // Every row finite, its cosine with the reference's row at least `floor` and its largest
  // difference at most `tolerance` of the row's largest logit; at most `loose_share` of the rows
  // with a cosine under `min_cosine`. Prints the worst of each measure.
  static void Compare(const std::string& what, const Rows& want, const Rows& got, double floor,
                      double min_cosine, double loose_share, double tolerance) {
    ASSERT_EQ(want.size(), got.size()) << what;
    double worst_cosine = 1.0, worst_difference = 0.0;
    size_t loose = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(want[i].size(), got[i].size()) << what << ", row " << i;
      for (float v : got[i]) ASSERT_TRUE(std::isfinite(v)) << what << ", row " << i;
      float largest = 1.0f;
      for (float v : want[i]) largest = std::max(largest, std::fabs(v));
      const double difference = testing::MaxAbsDiff(want[i], got[i]) / largest;
      const double cosine = Cosine(want[i], got[i]);
      EXPECT_GE(cosine, floor) << what << ", row " << i;
      EXPECT_LE(difference, tolerance) << what << ", row " << i;
      if (cosine < min_cosine) {
        ++loose;
        std::cout << "[ measured ] " << what << ", row " << i << ": cosine " << cosine << "\n";
      }
      worst_cosine = std::min(worst_cosine, cosine);
      worst_difference = std::max(worst_difference, difference);
    }
    EXPECT_LE(static_cast<double>(loose), loose_share * static_cast<double>(want.size()))
        << what << ": rows with a cosine under " << min_cosine;
    std::cout << "[ measured ] " << what << ": " << want.size()
              << " rows of logits, smallest cosine " << worst_cosine << " (" << loose << " under "
              << min_cosine << "), largest difference " << worst_difference
              << " of the row's largest logit\n";
  }
};

TEST_P(HipModelShapesTest, LogitsPointTheCpuBackendsWayWithBf16Inputs) {
  const Reference* ref = ReferenceFor(GetParam());
  ASSERT_NE(ref, nullptr);
  // The difference is only printed (bound 2: logits of the reference's scale).
  Compare(GetParam() + " (bf16 inputs)", ref->rows, OnDevice(*ref, {}), kFloorCosine, kMinCosine,
          kLooseShare, 2.0);
}

TEST_P(HipModelShapesTest, LogitsMatchTheCpuBackendWithFp32Inputs) {
  const Reference* ref = ReferenceFor(GetParam());
  ASSERT_NE(ref, nullptr);
  Compare(GetParam() + " (fp32 inputs)", ref->rows,
          OnDevice(*ref, {.bf16_gemm_inputs = false,
                          .bf16_attention = false,
                          .mma_rows_bf16_inputs = false,
                          .mma_delta = false}),
          1.0 - kFp32Tolerance, 1.0 - kFp32Tolerance, 0.0, kFp32Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Widths, HipModelShapesTest, ::testing::Values("dense", "moe"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace cairn::infer
