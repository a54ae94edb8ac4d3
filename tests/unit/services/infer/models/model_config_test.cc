#include "services/infer/models/model_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

using ::cairn::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ModelConfigTest, ReadsTextConfigOfAWrapper) {
  const char* json = R"({"model_type": "qwen3_5", "tie_word_embeddings": true,
    "text_config": {"model_type": "qwen3_5_text", "vocab_size": 100, "hidden_size": 32,
      "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
      "num_key_value_heads": 1, "head_dim": 16, "linear_num_key_heads": 1,
      "linear_num_value_heads": 2, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
      "rope_parameters": {"rope_type": "default", "rope_theta": 1e7,
                          "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]}}})";

  absl::StatusOr<HybridConfig> c = ParseHybridConfig(json);

  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, HybridFamily::kQwen35);
  EXPECT_EQ(c->hidden_size, 32);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->rope_theta, 1e7);
  EXPECT_EQ(c->rotary_dim, 8);
  EXPECT_EQ(c->conv_dim(), 2 * 8 + 16);
  EXPECT_FALSE(c->IsMoeLayer(0));
}

TEST(ModelConfigTest, LegacyRopeFieldsAndDerivedLayerTypes) {
  const char* json = R"({"model_type": "qwen3_next", "num_hidden_layers": 8,
    "rope_theta": 5000000.0, "partial_rotary_factor": 0.25, "mlp_only_layers": [2],
    "num_experts": 4, "num_experts_per_tok": 2})";

  absl::StatusOr<HybridConfig> c = ParseHybridConfig(json);

  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, HybridFamily::kQwen3Next);
  EXPECT_EQ(c->rope_theta, 5e6);
  EXPECT_EQ(c->rotary_dim, 64);  // head_dim 256 by default.
  EXPECT_EQ(c->full_attention,
            (std::vector<bool>{false, false, false, true, false, false, false, true}));
  EXPECT_TRUE(c->IsMoeLayer(1));
  EXPECT_FALSE(c->IsMoeLayer(2));
}

TEST(ModelConfigTest, Qwen35MoeAlwaysRenormalises) {
  absl::StatusOr<HybridConfig> c =
      ParseHybridConfig(R"({"model_type": "qwen3_5_moe_text", "norm_topk_prob": false})");

  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_TRUE(c->IsMoeLayer(0));
}

TEST(ModelConfigTest, UnknownArchitectureIsNotFound) {
  absl::StatusOr<HybridConfig> c = ParseHybridConfig(R"({"model_type": "llama"})");

  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(c.status().message(), HasSubstr("llama"));
}

TEST(ModelConfigTest, InconsistentHeadsAreInvalid) {
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3_5_text", "num_attention_heads": 3,
                                    "num_key_value_heads": 2})")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3_5_text",
                                    "linear_num_value_heads": 5})")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3_5_text", "hidden_size": "big"})")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ModelConfigTest, RopeScalingIsUnimplemented) {
  absl::StatusOr<HybridConfig> c = ParseHybridConfig(
      R"({"model_type": "qwen3_5_text", "rope_parameters": {"rope_type": "yarn"}})");

  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kUnimplemented));
}

TEST(ModelConfigTest, NotJsonIsInvalid) {
  EXPECT_THAT(ParseHybridConfig("{").status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn::infer
