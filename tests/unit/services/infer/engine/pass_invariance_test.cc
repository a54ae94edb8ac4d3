// Pass invariance (Qwen3HybridOptions::pass_invariant): a sequence's logits and state do not
// depend on how its tokens were split into passes, so a checkpoint restored anywhere and
// continued gives exactly the cold single-pass run's bits.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/infer/engine/generation.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "services/infer/models/model_loader.h"
#include "tests/unit/services/infer/models/model_test_util.h"

namespace cairn::infer {
namespace {

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class PassInvarianceTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Model> Load(bool invariant) {
    absl::StatusOr<std::string> dir = testing::PresetDir(GetParam());
    EXPECT_TRUE(dir.ok()) << dir.status();
    ModelLoadOptions o;
    o.qwen3_hybrid.pass_invariant = invariant;
    absl::StatusOr<std::unique_ptr<Model>> m = LoadModel(*dir, backend_.get(), o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  // Prefills `tokens` in passes of `sizes`, then decodes `decode` tokens greedily; returns every
  // pass's last logits and every decode step's logits.
  std::vector<std::vector<float>> Run(Model& model, const std::vector<int32_t>& tokens,
                                      const std::vector<int64_t>& sizes, int decode) {
    auto memory = SlotKvMemory::Create(model.state_layout(), {1, 1024});
    EXPECT_TRUE(memory.ok());
    std::vector<std::vector<float>> out;
    size_t at = 0;
    std::vector<float> logits;
    for (int64_t n : sizes) {
      auto l = model.Forward((*memory)->slot(0),
                             absl::MakeConstSpan(tokens).subspan(at, static_cast<size_t>(n)), {});
      EXPECT_TRUE(l.ok()) << l.status();
      logits = *l;
      at += static_cast<size_t>(n);
    }
    out.push_back(logits);
    for (int i = 0; i < decode; ++i) {
      const int32_t next = Argmax(logits.data(), static_cast<int64_t>(logits.size()));
      auto l = model.Forward((*memory)->slot(0), absl::MakeConstSpan(&next, 1), {});
      EXPECT_TRUE(l.ok()) << l.status();
      logits = *l;
      out.push_back(logits);
    }
    return out;
  }
  std::unique_ptr<CpuKernelBackend> backend_ = testing::TestBackend();
};

TEST_P(PassInvarianceTest, AnySplitGivesTheSingleRunsBits) {
  std::unique_ptr<Model> model = Load(true);
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> tokens = testing::RandomTokens(700, model->info().vocab_size, 3);

  const auto single = Run(*model, tokens, {700}, 8);
  const auto odd = Run(*model, tokens, {333, 1, 200, 166}, 8);
  const auto chunks = Run(*model, tokens, {64, 64, 7, 500, 65}, 8);

  for (size_t i = 0; i < single.size(); ++i) {
    EXPECT_TRUE(SameBytes(single[i], odd[i])) << "step " << i;
    EXPECT_TRUE(SameBytes(single[i], chunks[i])) << "step " << i;
  }
}

TEST_P(PassInvarianceTest, AgreesWithTheFastNumericsWithinTolerance) {
  std::unique_ptr<Model> fast = Load(false);
  std::unique_ptr<Model> invariant = Load(true);
  ASSERT_NE(fast, nullptr);
  ASSERT_NE(invariant, nullptr);
  const std::vector<int32_t> tokens = testing::RandomTokens(300, fast->info().vocab_size, 4);

  const auto a = Run(*fast, tokens, {300}, 0);
  const auto b = Run(*invariant, tokens, {300}, 0);

  float largest = 1.0f;
  for (float v : a[0]) largest = std::max(largest, std::fabs(v));
  EXPECT_LT(testing::MaxAbsDiff(a[0], b[0]), 1e-3f * largest);
}

INSTANTIATE_TEST_SUITE_P(Architectures, PassInvarianceTest,
                         ::testing::Values("dense", "next", "moe", "qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace cairn::infer
