#include "services/infer/models/random_checkpoint_presets.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cairn::infer {
namespace {

RandomCheckpointOptions Dense() {
  RandomCheckpointOptions o;
  o.model_type = "qwen3_5_text";
  o.seed = 11;
  o.num_layers = 8;
  o.tie_word_embeddings = true;
  // The tied embedding is the LM head: keep logits at the few-units scale of real models.
  o.embed_scale = 0.25;
  return o;
}

RandomCheckpointOptions Next() {
  RandomCheckpointOptions o;
  o.model_type = "qwen3_next";
  o.seed = 12;
  o.num_heads = 4;
  o.num_kv_heads = 1;
  o.head_dim = 32;
  o.partial_rotary_factor = 0.5;
  o.linear_k_heads = 2;
  o.linear_v_heads = 6;
  o.linear_k_dim = 16;
  o.linear_v_dim = 16;
  o.num_experts = 8;
  o.top_k = 2;
  o.mlp_only_layers = {1};
  o.legacy_rope_fields = true;
  o.write_layer_types = false;
  o.shards = 2;
  return o;
}

RandomCheckpointOptions Moe() {
  RandomCheckpointOptions o;
  o.model_type = "qwen3_5_moe_text";
  o.seed = 13;
  o.num_experts = 6;
  o.top_k = 3;
  o.shards = 3;
  return o;
}

// Plain Qwen3 (rows-only state): GQA, head_dim 32 rotated whole, Qwen3's RoPE base, tied
// embeddings like the small Qwen3 models.
RandomCheckpointOptions Qwen3() {
  RandomCheckpointOptions o;
  o.model_type = "qwen3";
  o.seed = 14;
  o.num_layers = 4;
  o.rope_theta = 1e6;
  o.tie_word_embeddings = true;
  o.embed_scale = 0.25;
  return o;
}

RandomCheckpointOptions Bench50m() {
  RandomCheckpointOptions o;
  o.model_type = "qwen3_5_text";
  o.seed = 50;
  o.vocab_size = 32000;
  o.hidden_size = 512;
  o.intermediate_size = 1280;
  o.num_layers = 12;
  o.num_heads = 8;
  o.num_kv_heads = 2;
  o.head_dim = 64;
  o.linear_k_heads = 4;
  o.linear_v_heads = 8;
  o.linear_k_dim = 64;
  o.linear_v_dim = 64;
  o.tie_word_embeddings = true;
  return o;
}

// The Qwen3 vocabulary rows (every id of the real tokenizer) and its end-of-turn ids
// (<|im_end|>, <|endoftext|>).
constexpr int64_t kQwen3VocabRows = 151936;
constexpr int kQwen3ImEnd = 151645;
constexpr int kQwen3EndOfText = 151643;
// Long enough for a coding agent's system prompt, tools and a few turns.
constexpr int64_t kDemoContextTokens = 65536;

RandomCheckpointOptions Demo() {
  RandomCheckpointOptions o;
  o.model_type = "qwen3_5_text";
  o.seed = 35;
  o.vocab_size = kQwen3VocabRows;
  o.hidden_size = 256;
  o.intermediate_size = 768;
  o.num_layers = 8;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.head_dim = 64;
  o.linear_k_heads = 2;
  o.linear_v_heads = 4;
  o.linear_k_dim = 64;
  o.linear_v_dim = 64;
  o.tie_word_embeddings = true;
  o.embed_scale = 0.25;
  o.max_position_embeddings = kDemoContextTokens;
  o.eos_token_ids = {kQwen3ImEnd, kQwen3EndOfText};
  return o;
}

// About 0.53B parameters (a 151936-token tied vocabulary, D 1024, 20 layers of which 5 full
// attention): the size class of the smallest Qwen3.5 models, for CPU benchmarks.
RandomCheckpointOptions Bench500m() {
  RandomCheckpointOptions o;
  o.model_type = "qwen3_5_text";
  o.seed = 500;
  o.vocab_size = kQwen3VocabRows;
  o.hidden_size = 1024;
  o.intermediate_size = 3072;
  o.num_layers = 20;
  o.num_heads = 8;
  o.num_kv_heads = 2;
  o.head_dim = 256;
  o.linear_k_heads = 16;
  o.linear_v_heads = 16;
  o.linear_k_dim = 128;
  o.linear_v_dim = 128;
  o.tie_word_embeddings = true;
  o.embed_scale = 0.25;
  return o;
}

}  // namespace

std::vector<std::string> RandomCheckpointPresetNames() {
  return {"dense", "dense-wrapped", "next",       "moe", "moe-wrapped",
          "qwen3", "bench-50m",     "bench-500m", "demo"};
}

absl::StatusOr<RandomCheckpointOptions> RandomCheckpointPreset(absl::string_view name) {
  if (name == "dense") return Dense();
  if (name == "dense-wrapped") {
    RandomCheckpointOptions o = Dense();
    o.model_type = "qwen3_5";
    return o;
  }
  if (name == "next") return Next();
  if (name == "moe") return Moe();
  if (name == "moe-wrapped") {
    RandomCheckpointOptions o = Moe();
    o.model_type = "qwen3_5_moe";
    return o;
  }
  if (name == "qwen3") return Qwen3();
  if (name == "bench-50m") return Bench50m();
  if (name == "demo") return Demo();
  if (name == "bench-500m") return Bench500m();
  return absl::NotFoundError(absl::StrCat("unknown preset '", name, "' (known: ",
                                          absl::StrJoin(RandomCheckpointPresetNames(), ", "), ")"));
}

}  // namespace cairn::infer
