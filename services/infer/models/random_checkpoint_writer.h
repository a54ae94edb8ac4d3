#ifndef CAIRN_SERVICES_INFER_MODELS_RANDOM_CHECKPOINT_WRITER_H_
#define CAIRN_SERVICES_INFER_MODELS_RANDOM_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cairn::infer {

// Architecture, sizes and seed of a random-weight checkpoint. The defaults are a small
// qwen3_5_text model that exercises every code path cheaply: GQA, partial rotary, r = Hv/Hk
// = 2, dk != dv.
struct RandomCheckpointOptions {
  // qwen3_5_text, qwen3_5 (vision-language wrapper: text_config, model.language_model.*),
  // qwen3_next (per-expert tensors), qwen3_5_moe_text, qwen3_5_moe (wrapper; fused experts),
  // qwen3 (plain Qwen3: every layer full attention; the linear-attention, MoE,
  // partial_rotary_factor and full_attention_interval options are ignored).
  std::string model_type = "qwen3_5_text";
  uint64_t seed = 1;
  int64_t vocab_size = 1024;
  int64_t hidden_size = 64;
  int64_t intermediate_size = 128;
  int num_layers = 4;
  int num_heads = 4;
  int num_kv_heads = 2;
  int head_dim = 32;
  double rope_theta = 1e7;
  double partial_rotary_factor = 0.25;
  // Write rope_theta / partial_rotary_factor at the top level (older configs) instead of a
  // rope_parameters object.
  bool legacy_rope_fields = false;
  int full_attention_interval = 4;
  // Write layer_types explicitly (else readers derive them from full_attention_interval).
  bool write_layer_types = true;
  int conv_kernel = 4;
  int linear_k_heads = 2;
  int linear_v_heads = 4;
  int linear_k_dim = 16;
  int linear_v_dim = 32;
  int num_experts = 8;
  int top_k = 2;
  int64_t moe_intermediate_size = 32;
  int64_t shared_intermediate_size = 48;
  bool norm_topk_prob = true;        // qwen3_next only.
  std::vector<int> mlp_only_layers;  // qwen3_next only.
  bool tie_word_embeddings = false;
  double rms_norm_eps = 1e-6;
  // Embedding values are uniform in +-embed_scale. With tied embeddings this also sets the
  // logits' scale (about embed_scale * sqrt(hidden_size / 3) standard deviation).
  double embed_scale = 1.0;
  // Number of safetensors files; > 1 also writes model.safetensors.index.json.
  int shards = 1;
  // config.json's max_position_embeddings (the daemon's default context length).
  int64_t max_position_embeddings = 4096;
  // config.json's eos_token_id; not written when empty.
  std::vector<int> eos_token_ids;
};

// Writes a Hugging Face checkpoint folder into `dir` (created if needed): config.json and bf16
// safetensors with deterministic pseudo-random weights. A tensor's values depend only on the
// seed and its name without the weight prefix, so the wrapper and text-only forms of a model,
// and every sharding, hold identical weights. InvalidArgument for inconsistent sizes or an
// unknown model_type; Internal for I/O errors.
absl::Status WriteRandomCheckpoint(const std::string& dir, const RandomCheckpointOptions& options);

// What WriteRandomCheckpoint would write, without the values: the config.json text and each
// tensor's full name (weight prefix included) and shape, in name order. For benchmarks of
// models too large to write, which build their store in memory (TensorStore::FromViews).
// InvalidArgument as WriteRandomCheckpoint.
struct RandomTensorShape {
  std::string name;
  std::vector<int64_t> shape;
};
absl::StatusOr<std::string> RandomCheckpointConfig(const RandomCheckpointOptions& options);
absl::StatusOr<std::vector<RandomTensorShape>> RandomCheckpointTensors(
    const RandomCheckpointOptions& options);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_RANDOM_CHECKPOINT_WRITER_H_
