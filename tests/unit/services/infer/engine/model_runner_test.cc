#include "services/infer/run/model_runner.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/models/model_test_util.h"

namespace cairn::infer {
namespace {

using ::cairn::testing::StatusIs;

TEST(ModelRunnerTest, ReportsArgmaxTopLogitsGreedyAndTimings) {
  absl::StatusOr<std::string> dir = testing::PresetDir("next");
  ASSERT_TRUE(dir.ok()) << dir.status();
  ModelRunOptions o;
  o.model_dir = *dir;
  o.prompt_ids = testing::RandomTokens(80, 1024, 5);
  o.greedy = 4;
  o.logits_at = {0, 79};
  o.top = 3;
  o.pass_tokens = 30;
  o.threads = 2;

  absl::StatusOr<nlohmann::json> out = RunModelOnce(o);

  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)["architecture"], "qwen3_next");
  EXPECT_EQ((*out)["argmax"].size(), 80u);
  EXPECT_EQ((*out)["greedy"].size(), 4u);
  // The first generated token is the argmax at the last prompt position, and the top list
  // of that position starts with it.
  EXPECT_EQ((*out)["greedy"][0], (*out)["argmax"][79]);
  ASSERT_EQ((*out)["top"].size(), 2u);
  EXPECT_EQ((*out)["top"][1]["position"], 79);
  ASSERT_EQ((*out)["top"][1]["top"].size(), 3u);
  EXPECT_EQ((*out)["top"][1]["top"][0][0], (*out)["argmax"][79]);
  EXPECT_GE((*out)["top"][1]["top"][0][1].get<double>(),
            (*out)["top"][1]["top"][1][1].get<double>());
  EXPECT_TRUE((*out)["timings"].contains("prefill_tokens_per_s"));
  EXPECT_EQ((*out)["weights_digest"].get<std::string>().size(), 16u);
}

TEST(ModelRunnerTest, PositionOutsideThePromptIsInvalid) {
  absl::StatusOr<std::string> dir = testing::PresetDir("dense");
  ASSERT_TRUE(dir.ok());
  ModelRunOptions o;
  o.model_dir = *dir;
  o.prompt_ids = {1, 2, 3};
  o.logits_at = {3};

  EXPECT_THAT(RunModelOnce(o).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  o.logits_at = {};
  o.prompt_ids = {};
  EXPECT_THAT(RunModelOnce(o).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ModelRunnerTest, ParsesTokenIdArrays) {
  absl::StatusOr<std::vector<int32_t>> ok = ParseTokenIds("[1, 2, 300]");

  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, (std::vector<int32_t>{1, 2, 300}));
  EXPECT_THAT(ParseTokenIds("[1, -2]").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseTokenIds("{\"a\": 1}").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseTokenIds("[1, \"x\"]").status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn::infer
