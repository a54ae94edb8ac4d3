// Agreement with transformers (tools/reference/qwen3_hybrid_reference.py, outputs committed
// under tests/data/models/): the writer regenerates the identical weights, and our CPU engine
// must match transformers' fp32 logits, argmax and greedy continuation.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/infer/engine/generation.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/models/model_test_util.h"

namespace cairn::infer {
namespace {

constexpr float kLogitTolerance = 1e-3f;
constexpr double kMinArgmaxAgreement = 0.995;

nlohmann::json ReadReference(const std::string& preset) {
  const char* root = std::getenv("CAIRN_SOURCE_DIR");
  std::ifstream in(std::string(root ? root : ".") + "/tests/data/models/" + preset + ".json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, false);
}

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, MatchesTransformers) {
  const nlohmann::json ref = ReadReference(GetParam());
  ASSERT_TRUE(ref.is_object()) << "missing reference for " << GetParam();
  std::unique_ptr<CpuKernelBackend> backend = testing::TestBackend();
  absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset(GetParam(), backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int32_t> prompt = ref["prompt"].get<std::vector<int32_t>>();
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t vocab = (*model)->info().vocab_size;
  absl::StatusOr<std::unique_ptr<SlotState>> slot =
      SlotState::Create((*model)->state_layout(), n + 64);
  ASSERT_TRUE(slot.ok()) << slot.status();

  absl::StatusOr<std::vector<float>> logits =
      Prefill(**model, slot->get(), prompt, {n}, /*all_logits=*/true);
  ASSERT_TRUE(logits.ok()) << logits.status();
  absl::StatusOr<std::vector<int32_t>> greedy = GreedyDecode(
      **model, slot->get(), absl::MakeConstSpan(logits->data() + (n - 1) * vocab, vocab),
      static_cast<int>(ref["greedy"].size()));
  ASSERT_TRUE(greedy.ok()) << greedy.status();

  const std::vector<int64_t> positions = ref["positions"].get<std::vector<int64_t>>();
  for (size_t i = 0; i < positions.size(); ++i) {
    const std::vector<float> expected = ref["logits"][i].get<std::vector<float>>();
    ASSERT_EQ(static_cast<int64_t>(expected.size()), vocab);
    const std::vector<float> actual(logits->begin() + positions[i] * vocab,
                                    logits->begin() + (positions[i] + 1) * vocab);
    EXPECT_LT(testing::MaxAbsDiff(actual, expected), kLogitTolerance)
        << "position " << positions[i];
  }
  const std::vector<int32_t> argmax = ref["argmax"].get<std::vector<int32_t>>();
  ASSERT_EQ(static_cast<int64_t>(argmax.size()), n);
  int64_t same = 0;
  for (int64_t p = 0; p < n; ++p) same += Argmax(logits->data() + p * vocab, vocab) == argmax[p];
  EXPECT_GE(static_cast<double>(same) / static_cast<double>(n), kMinArgmaxAgreement);
  EXPECT_EQ(*greedy, ref["greedy"].get<std::vector<int32_t>>());
}

INSTANTIATE_TEST_SUITE_P(Architectures, ReferenceTest,
                         ::testing::Values("dense", "next", "moe", "qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace cairn::infer
