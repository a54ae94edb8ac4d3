#include "services/infer/engine/sampler.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

using ::cairn::testing::StatusIs;

std::vector<float> Logits() { return {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f}; }

TEST(SamplerTest, GreedyTakesTheLowestIdOfTheLargestLogits) {
  Sampler sampler({}, {});

  SampledToken t = sampler.Sample(Logits());

  EXPECT_EQ(t.id, 1);
}

TEST(SamplerTest, LogprobsAreLogSoftmaxOfTheRawLogits) {
  SamplingOptions o;
  o.logprobs = 2;
  Sampler sampler(o, {});

  SampledToken t = sampler.Sample(Logits());

  double z = 0;
  for (float l : Logits()) z += std::exp(l);
  EXPECT_NEAR(t.logprob, 3.0 - std::log(z), 1e-5);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 3);
}

TEST(SamplerTest, SeededSamplingIsReproducible) {
  SamplingOptions o;
  o.temperature = 1.5f;
  o.seed = 42;
  Sampler a(o, {}), b(o, {});
  std::vector<int32_t> ta, tb;

  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.Sample(Logits()).id);
    tb.push_back(b.Sample(Logits()).id);
  }

  EXPECT_EQ(ta, tb);
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingOptions o;
  o.temperature = 2.0f;
  o.top_k = 1;
  o.seed = 1;
  Sampler sampler(o, {});

  for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler.Sample(Logits()).id, 1);
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.min_p = 0.5f;  // Keeps tokens at least half as likely as the best: ids 1 and 3.
  o.seed = 3;
  Sampler sampler(o, {});

  for (int i = 0; i < 50; ++i) {
    const int32_t id = sampler.Sample(Logits()).id;
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(SamplerTest, TopPKeepsTheSmallestNucleus) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.top_p = 0.5f;  // Token 1 alone holds about 36%; with token 3 the nucleus passes 50%.
  o.seed = 5;
  Sampler sampler(o, {});

  for (int i = 0; i < 50; ++i) {
    const int32_t id = sampler.Sample(Logits()).id;
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(SamplerTest, FrequencyPenaltyMovesGreedyAway) {
  SamplingOptions o;
  o.frequency_penalty = 2.0f;
  Sampler sampler(o, {});

  EXPECT_EQ(sampler.Sample(Logits()).id, 1);
  EXPECT_EQ(sampler.Sample(Logits()).id, 3);  // 1 now scores 3 - 2 = 1.
}

TEST(SamplerTest, RepetitionPenaltyCoversThePrompt) {
  SamplingOptions o;
  o.repetition_penalty = 2.0f;
  const int32_t prompt[] = {1};
  Sampler sampler(o, prompt);

  EXPECT_EQ(sampler.Sample(Logits()).id, 3);
}

TEST(SamplerTest, ValidationNamesTheField) {
  SamplingOptions o;
  o.temperature = std::nanf("");
  EXPECT_THAT(ValidateSamplingOptions(o, 20), StatusIs(absl::StatusCode::kInvalidArgument));
  o = {};
  o.top_p = 0.0f;
  EXPECT_THAT(ValidateSamplingOptions(o, 20), StatusIs(absl::StatusCode::kInvalidArgument));
  o = {};
  o.presence_penalty = -3.0f;
  EXPECT_THAT(ValidateSamplingOptions(o, 20), StatusIs(absl::StatusCode::kInvalidArgument));
  o = {};
  o.logprobs = 21;
  EXPECT_THAT(ValidateSamplingOptions(o, 20), StatusIs(absl::StatusCode::kInvalidArgument));
  o = {};
  o.repetition_penalty = 0.0f;
  EXPECT_THAT(ValidateSamplingOptions(o, 20), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(ValidateSamplingOptions({}, 20).ok());
}

}  // namespace
}  // namespace cairn::infer
