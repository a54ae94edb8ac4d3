#include "services/infer/models/model_config.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

using ::cairn::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ModelConfigTest, ReadsTextConfigOfAWrapper) {
  const char* json = R"({"model_type": "qwen3_5", "tie_word_embeddings": true,
    "text_config": {"model_type": "qwen3_5_text", "tie_word_embeddings": true,
      "vocab_size": 100, "hidden_size": 32,
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

// AutoModelForCausalLM runs a wrapper as Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM, built from
// text_config alone: the wrapper's top-level tie_word_embeddings is not what ties its LM head.
// A wrapper's tie_word_embeddings is read at both levels (AutoModelForCausalLM reads
// text_config's, the checkpoint's ForConditionalGeneration the top level's): either one's true
// ties a checkpoint without lm_head.weight.
TEST(ModelConfigTest, WrapperTieWordEmbeddingsIsReadAtEitherLevel) {
  for (const char* type : {"qwen3_5", "qwen3_5_moe"}) {
    const std::string top_only =
        absl::StrCat(R"({"model_type": ")", type, R"(", "tie_word_embeddings": true,
                     "text_config": {}})");
    const std::string text_only =
        absl::StrCat(R"({"model_type": ")", type, R"(", "tie_word_embeddings": false,
                     "text_config": {"tie_word_embeddings": true}})");
    const std::string neither =
        absl::StrCat(R"({"model_type": ")", type, R"(", "tie_word_embeddings": false,
                     "text_config": {}})");

    absl::StatusOr<HybridConfig> a = ParseHybridConfig(top_only);
    absl::StatusOr<HybridConfig> b = ParseHybridConfig(text_only);
    absl::StatusOr<HybridConfig> c = ParseHybridConfig(neither);

    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(a->tie_word_embeddings) << top_only;
    EXPECT_TRUE(b->tie_word_embeddings) << text_only;
    EXPECT_FALSE(c->tie_word_embeddings) << neither;
  }
}

// A wrapper's text config class is built from text_config alone, so RoPE keys beside it are never
// seen by the text model: it keeps its own defaults (theta 10000, a quarter of the head).
TEST(ModelConfigTest, WrapperTopLevelRopeKeysAreNotRead) {
  for (const char* json :
       {R"({"model_type": "qwen3_5", "rope_parameters": {"rope_type": "default",
            "rope_theta": 1e7, "partial_rotary_factor": 0.5}, "text_config": {}})",
        R"({"model_type": "qwen3_5_moe", "rope_theta": 1e7, "partial_rotary_factor": 0.5,
            "text_config": {}})",
        R"({"model_type": "qwen3_5", "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
            "text_config": {}})"}) {
    absl::StatusOr<HybridConfig> c = ParseHybridConfig(json);

    ASSERT_TRUE(c.ok()) << c.status() << json;
    EXPECT_EQ(c->rope_theta, 10000.0) << json;
    EXPECT_EQ(c->rotary_dim, 64) << json;  // head_dim 256 x 0.25.
  }
}

// A text-only type's config class has no text_config: one in config.json is ignored. A wrapper
// without text_config runs the text defaults, so text fields beside it are refused, not dropped.
TEST(ModelConfigTest, TextConfigIsReadOnlyForTheWrapperTypes) {
  absl::StatusOr<HybridConfig> next = ParseHybridConfig(
      R"({"model_type": "qwen3_next", "hidden_size": 64, "text_config": {"hidden_size": 32}})");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->hidden_size, 64);

  absl::StatusOr<HybridConfig> flat =
      ParseHybridConfig(R"({"model_type": "qwen3_5", "hidden_size": 32})");
  EXPECT_THAT(flat.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(flat.status().message(), HasSubstr("hidden_size"));
  EXPECT_THAT(flat.status().message(), HasSubstr("text_config"));
  absl::StatusOr<HybridConfig> bare = ParseHybridConfig(R"({"model_type": "qwen3_5_moe"})");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->hidden_size, 2048);
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3_5", "text_config": 3})").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// transformers 5 (convert_rope_params_to_dict): a non-empty rope_scaling replaces rope_parameters
// whole; rope_theta then comes from that dict, else from beside it, else 10000.
TEST(ModelConfigTest, RopeScalingReplacesRopeParameters) {
  absl::StatusOr<HybridConfig> a = ParseHybridConfig(R"({"model_type": "qwen3_5_text",
    "rope_scaling": {"rope_type": "default"},
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.5}})");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rope_theta, 10000.0);
  EXPECT_EQ(a->rotary_dim, 64);

  absl::StatusOr<HybridConfig> b = ParseHybridConfig(R"({"model_type": "qwen3_next",
    "rope_theta": 5e6, "rope_scaling": {"type": "default", "rope_theta": 1e6}})");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rope_theta, 1e6);

  // The discarded rope_parameters' type does not matter; the kept rope_scaling's does.
  EXPECT_TRUE(ParseHybridConfig(R"({"model_type": "qwen3", "rope_scaling": {"type": "default"},
    "rope_parameters": {"rope_type": "yarn", "factor": 4.0}})")
                  .ok());
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3", "rope_parameters": {"type": "default"},
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})")
                  .status(),
              StatusIs(absl::StatusCode::kUnimplemented));
  // An empty rope_scaling is falsy in Python: rope_parameters stays.
  absl::StatusOr<HybridConfig> c = ParseHybridConfig(R"({"model_type": "qwen3_5_text",
    "rope_scaling": {}, "rope_parameters": {"rope_theta": 1e7}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 1e7);
}

TEST(ModelConfigTest, DefaultRopeScalingIsAcceptedInEveryForm) {
  for (const char* scaling :
       {"null", "{}", R"({"rope_type": "default"})", R"({"type": "default"})"}) {
    for (const char* type : {"qwen3", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}) {
      const std::string json =
          absl::StrCat(R"({"model_type": ")", type, R"(", "rope_scaling": )", scaling, "}");
      EXPECT_TRUE(ParseHybridConfig(json).ok()) << json;
    }
    for (const char* type : {"qwen3_5", "qwen3_5_moe"}) {
      const std::string json = absl::StrCat(
          R"({"model_type": ")", type, R"(", "text_config": {"rope_scaling": )", scaling, "}}");
      EXPECT_TRUE(ParseHybridConfig(json).ok()) << json;
    }
  }
  // Qwen3.5's multimodal RoPE as its text_config writes it: default RoPE with sections for the
  // image axes, which text positions (the same on every axis) reduce to the plain rotation.
  const absl::StatusOr<HybridConfig> sections = ParseHybridConfig(
      R"({"model_type": "qwen3_5", "text_config": {"rope_parameters": {"rope_type": "default",
          "mrope_section": [11, 11, 10], "mrope_interleaved": true, "rope_theta": 10000000,
          "partial_rotary_factor": 0.25}}})");
  ASSERT_TRUE(sections.ok()) << sections.status();
  EXPECT_EQ(sections->rope_theta, 1e7);
}

// Scaled RoPE is not run, and neither is "mrope": transformers 5 has no RoPE function of that name
// and the text model fails to build.
TEST(ModelConfigTest, OtherRopeTypesAreUnimplementedNamingTheField) {
  for (const char* rope : {R"({"rope_type": "yarn", "factor": 4.0})", R"({"type": "linear"})",
                           R"({"type": "dynamic", "factor": 2.0})", R"({"type": "mrope"})",
                           R"({"rope_type": "llama3"})"}) {
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
      for (const char* type : {"qwen3", "qwen3_next", "qwen3_5_text"}) {
        const std::string json =
            absl::StrCat(R"({"model_type": ")", type, R"(", ")", key, R"(": )", rope, "}");
        absl::Status s = ParseHybridConfig(json).status();
        EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnimplemented)) << json;
        EXPECT_THAT(s.message(), HasSubstr(key)) << json;
      }
      const std::string wrapped = absl::StrCat(R"({"model_type": "qwen3_5_moe", "text_config": {")",
                                               key, R"(": )", rope, "}}");
      absl::Status s = ParseHybridConfig(wrapped).status();
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnimplemented)) << wrapped;
      EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("text_config.", key))) << wrapped;
    }
  }
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3_5_text", "rope_parameters": {
    "full_attention": {"rope_type": "default"}, "linear_attention": {"rope_type": "default"}}})")
                  .status(),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3", "rope_scaling": "yarn"})").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Qwen3's rotary embedding rotates head_dim dims and never reads partial_rotary_factor; the
// hybrids' read it from the RoPE dict, where an explicit null leaves it out (the whole head).
TEST(ModelConfigTest, PartialRotaryFactorAsEachFamilyReadsIt) {
  for (const char* json : {R"({"model_type": "qwen3", "partial_rotary_factor": 0.5})",
                           R"({"model_type": "qwen3", "rope_parameters": {"rope_type": "default",
            "partial_rotary_factor": 0.5}})"}) {
    absl::StatusOr<HybridConfig> c = ParseHybridConfig(json);
    ASSERT_TRUE(c.ok()) << c.status() << json;
    EXPECT_EQ(c->rotary_dim, 128) << json;
  }
  absl::StatusOr<HybridConfig> null_factor =
      ParseHybridConfig(R"({"model_type": "qwen3_5_text", "partial_rotary_factor": null})");
  ASSERT_TRUE(null_factor.ok()) << null_factor.status();
  EXPECT_EQ(null_factor->rotary_dim, 256);
  absl::StatusOr<HybridConfig> in_dict = ParseHybridConfig(R"({"model_type": "qwen3_next",
    "partial_rotary_factor": 0.25, "rope_parameters": {"partial_rotary_factor": 0.5}})");
  ASSERT_TRUE(in_dict.ok()) << in_dict.status();
  EXPECT_EQ(in_dict->rotary_dim, 128);
}

// The hybrids' config classes rename the legacy layer types "mamba" and "attention".
TEST(ModelConfigTest, LegacyLayerTypeNamesAreRenamed) {
  absl::StatusOr<HybridConfig> c = ParseHybridConfig(
      R"({"model_type": "qwen3_5_text", "num_hidden_layers": 2, "layer_types": ["mamba",
          "attention"]})");

  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->full_attention, (std::vector<bool>{false, true}));
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3", "num_hidden_layers": 1,
                                    "layer_types": ["attention"]})")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3_next", "mlp_only_layers": 3})").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
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

// Qwen3_5MoeTextConfig's own defaults (256 experts, 8 per token), not Qwen3NextConfig's 512 / 10:
// a config without num_experts_per_tok must route to 8 experts, as transformers does.
TEST(ModelConfigTest, Qwen35MoeExpertDefaultsAreThoseOfItsConfig) {
  for (const char* json : {R"({"model_type": "qwen3_5_moe_text"})",
                           R"({"model_type": "qwen3_5_moe", "text_config": {}})"}) {
    absl::StatusOr<HybridConfig> c = ParseHybridConfig(json);

    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->num_experts, 256) << json;
    EXPECT_EQ(c->top_k, 8) << json;
    EXPECT_EQ(c->moe_intermediate_size, 512) << json;
    EXPECT_EQ(c->shared_intermediate_size, 512) << json;
  }
  // Qwen3-Next keeps Qwen3NextConfig's.
  absl::StatusOr<HybridConfig> next = ParseHybridConfig(R"({"model_type": "qwen3_next"})");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->num_experts, 512);
  EXPECT_EQ(next->top_k, 10);
}

TEST(ModelConfigTest, UnknownArchitectureIsNotFound) {
  absl::StatusOr<HybridConfig> c = ParseHybridConfig(R"({"model_type": "llama"})");

  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(c.status().message(), HasSubstr("llama"));
}

// A checkpoint of the right model_type but another head (a classifier, a bare encoder) is not a
// language model: with tied embeddings it would otherwise load and produce logits it never had.
TEST(ModelConfigTest, ArchitecturesOtherThanALanguageModelAreUnimplemented) {
  for (const char* arch : {"Qwen3ForSequenceClassification", "Qwen3ForTokenClassification",
                           "Qwen3Model", "Qwen3NextForQuestionAnswering"}) {
    const std::string json = absl::StrCat(R"({"model_type": "qwen3", "architectures": [")", arch,
                                          R"("], "tie_word_embeddings": true})");
    absl::StatusOr<HybridConfig> c = ParseHybridConfig(json);

    EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kUnimplemented)) << json;
    EXPECT_THAT(c.status().message(), HasSubstr(arch)) << json;
  }
  for (const char* json :
       {R"({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]})",
        R"({"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"]})",
        R"({"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"]})",
        R"({"model_type": "qwen3_5_moe_text", "architectures": ["Qwen3_5MoeForCausalLM"]})"}) {
    EXPECT_TRUE(ParseHybridConfig(json).ok()) << json;
  }
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
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3_5_text", "hidden_size": "big"})").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// An integer past its field's range is refused rather than wrapped (2^32 + 1 heads read as 1),
// and an RMSNorm epsilon outside [0, 1) (a negative one gives NaN outputs) likewise.
TEST(ModelConfigTest, OutOfRangeValuesAreInvalidNamingTheField) {
  absl::StatusOr<HybridConfig> wrapped =
      ParseHybridConfig(R"({"model_type": "qwen3_5_text", "num_attention_heads": 4294967297})");
  absl::StatusOr<HybridConfig> negative =
      ParseHybridConfig(R"({"model_type": "qwen3_5_text", "num_key_value_heads": -4294967294})");
  absl::StatusOr<HybridConfig> eps =
      ParseHybridConfig(R"({"model_type": "qwen3_5_text", "rms_norm_eps": -1e-6})");

  EXPECT_THAT(wrapped.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(wrapped.status().message(), HasSubstr("num_attention_heads is out of range"));
  EXPECT_THAT(negative.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(eps.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(eps.status().message(), HasSubstr("rms_norm_eps"));
}

// Sizes are bounded far above any real model (kMax* in model_config.h), so that no product of
// them overflows: a hostile config with fields near INT_MAX is refused naming the field, and
// a field at its bound is accepted.
TEST(ModelConfigTest, SizesAboveTheirBoundsAreInvalidNamingTheField) {
  struct Case {
    const char* model_type;
    const char* field;
    int64_t max;
  };
  const Case cases[] = {
      {"qwen3_5_text", "vocab_size", kMaxVocabSize},
      {"qwen3_5_text", "hidden_size", kMaxHiddenSize},
      {"qwen3_5_text", "intermediate_size", kMaxIntermediateSize},
      {"qwen3_5_text", "num_hidden_layers", kMaxLayers},
      {"qwen3_5_text", "num_attention_heads", kMaxHeads},
      {"qwen3_5_text", "num_key_value_heads", kMaxHeads},
      {"qwen3_5_text", "head_dim", kMaxHeadDim},
      {"qwen3_5_text", "linear_conv_kernel_dim", kMaxConvKernel},
      {"qwen3_5_text", "linear_key_head_dim", kMaxHeadDim},
      {"qwen3_5_text", "linear_value_head_dim", kMaxHeadDim},
      {"qwen3_5_text", "linear_num_key_heads", kMaxHeads},
      {"qwen3_5_text", "linear_num_value_heads", kMaxHeads},
      {"qwen3_next", "num_experts", kMaxExperts},
      {"qwen3_next", "moe_intermediate_size", kMaxIntermediateSize},
      {"qwen3_next", "shared_expert_intermediate_size", kMaxIntermediateSize},
      {"qwen3", "vocab_size", kMaxVocabSize},
      {"qwen3", "hidden_size", kMaxHiddenSize},
      {"qwen3", "intermediate_size", kMaxIntermediateSize},
  };
  for (const Case& c : cases) {
    for (const int64_t v : {c.max + 1, int64_t{2147483647}}) {
      absl::StatusOr<HybridConfig> config = ParseHybridConfig(
          absl::StrCat(R"({"model_type": ")", c.model_type, R"(", ")", c.field, R"(": )", v, "}"));
      EXPECT_THAT(config.status(), StatusIs(absl::StatusCode::kInvalidArgument))
          << c.model_type << " " << c.field << " " << v;
      EXPECT_THAT(
          config.status().message(),
          HasSubstr(absl::StrCat(c.field, " is ", v, ", above this server's limit of ", c.max)))
          << c.model_type;
    }
  }
  // Each field in the list above at its bound parses (the others at their defaults).
  for (const Case& c : cases) {
    // Heads at the bound need key-value (linear key) heads that divide them.
    std::string extra;
    if (absl::string_view(c.field) == "num_attention_heads")
      extra = R"(, "num_key_value_heads": 1)";
    if (absl::string_view(c.field) == "num_key_value_heads") {
      extra = absl::StrCat(R"(, "num_attention_heads": )", kMaxHeads);
    }
    if (absl::string_view(c.field) == "linear_num_value_heads")
      extra = R"(, "linear_num_key_heads": 1)";
    if (absl::string_view(c.field) == "linear_num_key_heads") {
      extra = absl::StrCat(R"(, "linear_num_value_heads": )", kMaxHeads);
    }
    if (absl::string_view(c.field) == "num_experts") extra = R"(, "num_experts_per_tok": 2)";
    absl::StatusOr<HybridConfig> config = ParseHybridConfig(absl::StrCat(
        R"({"model_type": ")", c.model_type, R"(", ")", c.field, R"(": )", c.max, extra, "}"));
    EXPECT_TRUE(config.ok()) << c.model_type << " " << c.field << ": " << config.status();
  }
}

// Config numbers that become integers are range-checked before the conversion: a huge
// partial_rotary_factor (head_dim * factor past int's range is undefined behaviour when
// converted), and an mlp_only_layers entry past int (2^32 + 2 would wrap to layer 2).
TEST(ModelConfigTest, NumbersConvertedToIntegersAreRangeCheckedNamingTheField) {
  for (const char* factor : {"1e300", "-1e300", "3e9", "-0.5"}) {
    absl::StatusOr<HybridConfig> c = ParseHybridConfig(
        absl::StrCat(R"({"model_type": "qwen3_5_text", "partial_rotary_factor": )", factor, "}"));
    EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << factor;
    EXPECT_THAT(c.status().message(), HasSubstr("partial_rotary_factor")) << factor;
  }
  absl::StatusOr<HybridConfig> nested = ParseHybridConfig(
      R"({"model_type": "qwen3_5", "text_config": {"rope_parameters": {"rope_type": "default",
          "partial_rotary_factor": 1e300}}})");
  EXPECT_THAT(nested.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(nested.status().message(), HasSubstr("text_config.partial_rotary_factor"));

  for (const char* layer : {"4294967298", "-4294967294", "18446744073709551615"}) {
    absl::StatusOr<HybridConfig> c = ParseHybridConfig(absl::StrCat(
        R"({"model_type": "qwen3_next", "num_experts": 4, "num_experts_per_tok": 2,
            "mlp_only_layers": [)",
        layer, "]}"));
    EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << layer;
    EXPECT_THAT(c.status().message(), HasSubstr("mlp_only_layers")) << layer;
  }
  // A factor that rounds into head_dim is still read as transformers reads it.
  absl::StatusOr<HybridConfig> near_one = ParseHybridConfig(
      R"({"model_type": "qwen3_5_text", "head_dim": 16, "partial_rotary_factor": 1.01})");
  ASSERT_TRUE(near_one.ok()) << near_one.status();
  EXPECT_EQ(near_one->rotary_dim, 16);
}

TEST(ModelConfigTest, RopeScalingIsUnimplemented) {
  absl::StatusOr<HybridConfig> c = ParseHybridConfig(
      R"({"model_type": "qwen3_5_text", "rope_parameters": {"rope_type": "yarn"}})");

  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kUnimplemented));
}

// transformers reads a rope_parameters dict's legacy "type" key when "rope_type" is absent.
TEST(ModelConfigTest, RopeParametersLegacyTypeKeyIsRead) {
  for (const char* json :
       {R"({"model_type": "qwen3_5_text", "rope_parameters": {"type": "yarn", "factor": 4.0}})",
        R"({"model_type": "qwen3", "rope_parameters": {"type": "linear", "factor": 2.0}})"}) {
    EXPECT_THAT(ParseHybridConfig(json).status(), StatusIs(absl::StatusCode::kUnimplemented))
        << json;
  }
  EXPECT_TRUE(
      ParseHybridConfig(R"({"model_type": "qwen3", "rope_parameters": {"type": "default"}})").ok());
}

// The published fields of Qwen3-0.6B's config.json, written out by hand.
constexpr const char* kQwen3SmallConfig = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

TEST(ModelConfigTest, ReadsAPlainQwen3Config) {
  absl::StatusOr<HybridConfig> c = ParseHybridConfig(kQwen3SmallConfig);

  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, HybridFamily::kQwen3Dense);
  EXPECT_EQ(c->vocab_size, 151936);
  EXPECT_EQ(c->hidden_size, 1024);
  EXPECT_EQ(c->intermediate_size, 3072);
  EXPECT_EQ(c->num_heads, 16);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rotary_dim, 128);  // The whole head.
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-6f);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->zero_centred_norm);
  EXPECT_FALSE(c->attention_gate);
  EXPECT_EQ(c->full_attention, std::vector<bool>(28, true));
  EXPECT_FALSE(c->HasLinearAttention());
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_EQ(c->conv_dim(), 0);
}

TEST(ModelConfigTest, Qwen3DefaultsAreThoseOfQwen3Config) {
  absl::StatusOr<HybridConfig> c = ParseHybridConfig(R"({"model_type": "qwen3",
    "num_attention_heads": 64})");

  ASSERT_TRUE(c.ok()) << c.status();
  // Qwen3Config's num_key_value_heads defaults to 32 whatever the attention heads; only an
  // explicit null means as many as the attention heads.
  EXPECT_EQ(c->num_kv_heads, 32);
  absl::StatusOr<HybridConfig> bare = ParseHybridConfig(R"({"model_type": "qwen3"})");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->num_heads, 32);
  EXPECT_EQ(bare->num_kv_heads, 32);
  absl::StatusOr<HybridConfig> null_kv = ParseHybridConfig(R"({"model_type": "qwen3",
    "num_attention_heads": 8, "num_key_value_heads": null})");
  ASSERT_TRUE(null_kv.ok()) << null_kv.status();
  EXPECT_EQ(null_kv->num_kv_heads, 8);
  EXPECT_THAT(
      ParseHybridConfig(R"({"model_type": "qwen3", "num_attention_heads": 8})").status(),
      StatusIs(absl::StatusCode::kInvalidArgument));  // 8 query heads cannot share 32 KV heads.
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rotary_dim, 128);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->intermediate_size, 22016);
  EXPECT_FALSE(c->tie_word_embeddings);
  // The hybrids keep their switches.
  absl::StatusOr<HybridConfig> hybrid = ParseHybridConfig(R"({"model_type": "qwen3_5_text"})");
  ASSERT_TRUE(hybrid.ok()) << hybrid.status();
  EXPECT_TRUE(hybrid->zero_centred_norm);
  EXPECT_TRUE(hybrid->attention_gate);
  EXPECT_TRUE(hybrid->HasLinearAttention());
}

TEST(ModelConfigTest, Qwen3FeaturesWeDoNotRunAreUnimplemented) {
  for (const char* extra :
       {R"("attention_bias": true)", R"("use_sliding_window": true)",
        R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})",
        R"("rope_scaling": {"type": "mrope"})",
        R"("rope_parameters": {"rope_type": "linear", "factor": 2.0})",
        R"("num_hidden_layers": 2, "layer_types": ["full_attention", "sliding_attention"])"}) {
    const std::string json = std::string(R"({"model_type": "qwen3", )") + extra + "}";
    absl::StatusOr<HybridConfig> c = ParseHybridConfig(json);
    EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kUnimplemented)) << json;
  }
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3", "num_hidden_layers": 2,
                                    "layer_types": ["full_attention", "linear_attention"]})")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3", "attention_bias": "no"})").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// transformers' ACT2FN takes "swish" for the same SiLU as "silu"; other activations are refused
// naming the field, in a wrapper's text_config too.
TEST(ModelConfigTest, SwishIsSiluAndOtherActivationsAreUnimplemented) {
  for (const char* family : {"qwen3", "qwen3_5_text", "qwen3_next"}) {
    for (const char* act : {"silu", "swish"}) {
      const std::string json =
          absl::StrCat(R"({"model_type": ")", family, R"(", "hidden_act": ")", act, R"("})");
      EXPECT_TRUE(ParseHybridConfig(json).ok()) << json;
    }
    const std::string gelu =
        absl::StrCat(R"({"model_type": ")", family, R"(", "hidden_act": "gelu"})");
    EXPECT_THAT(ParseHybridConfig(gelu).status(), StatusIs(absl::StatusCode::kUnimplemented))
        << gelu;
  }
  absl::StatusOr<HybridConfig> wrapped =
      ParseHybridConfig(R"({"model_type": "qwen3_5", "text_config": {"hidden_act": "relu"}})");
  EXPECT_THAT(wrapped.status(), StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(std::string(wrapped.status().message()),
              ::testing::HasSubstr("text_config.hidden_act"));
}

// transformers gives the hybrids' q/k/v/o projections biases when attention_bias is true; we run
// none, so such a config is refused rather than loaded without its biases.
TEST(ModelConfigTest, AttentionBiasIsUnimplementedForEveryFamily) {
  for (const char* json : {R"({"model_type": "qwen3_next", "attention_bias": true})",
                           R"({"model_type": "qwen3_5_text", "attention_bias": true})",
                           R"({"model_type": "qwen3_5", "text_config": {"attention_bias": true}})",
                           R"({"model_type": "qwen3_5_moe_text", "attention_bias": true})"}) {
    absl::StatusOr<HybridConfig> c = ParseHybridConfig(json);

    EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kUnimplemented)) << json;
    EXPECT_THAT(c.status().message(), HasSubstr("attention_bias")) << json;
  }
  EXPECT_TRUE(ParseHybridConfig(R"({"model_type": "qwen3_next", "attention_bias": false})").ok());
}

// A quantized checkpoint (FP8, GPTQ, AWQ, ...) is refused by its config, naming the method, before
// any of its weights is looked at.
TEST(ModelConfigTest, QuantizedCheckpointsAreUnimplemented) {
  for (
      const char* json :
      {R"({"model_type": "qwen3_next", "quantization_config": {"quant_method": "fp8",
            "fmt": "e4m3", "weight_block_size": [128, 128]}})",
       R"({"model_type": "qwen3", "quantization_config": {"quant_method": "gptq", "bits": 4}})",
       R"({"model_type": "qwen3_5_moe", "quantization_config": {"quant_method": "fp8"},
            "text_config": {}})",
       R"({"model_type": "qwen3_5", "text_config": {"quantization_config": {"quant_method": "fp8"}}})",
       R"({"model_type": "qwen3_5_text", "quantization_config": {}})"}) {
    absl::StatusOr<HybridConfig> c = ParseHybridConfig(json);

    EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kUnimplemented)) << json;
    EXPECT_THAT(c.status().message(), HasSubstr("quantiz")) << json;
  }
  EXPECT_THAT(ParseHybridConfig(R"({"model_type": "qwen3_next",
                                    "quantization_config": {"quant_method": "fp8"}})")
                  .status()
                  .message(),
              HasSubstr("fp8"));
  EXPECT_TRUE(ParseHybridConfig(R"({"model_type": "qwen3", "quantization_config": null})").ok());
}

TEST(ModelConfigTest, NotJsonIsInvalid) {
  EXPECT_THAT(ParseHybridConfig("{").status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn::infer
