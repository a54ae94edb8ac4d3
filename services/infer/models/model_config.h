#ifndef CAIRN_SERVICES_INFER_MODELS_MODEL_CONFIG_H_
#define CAIRN_SERVICES_INFER_MODELS_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn::infer {

// Which of the Qwen3 families a config describes: the hybrids (Gated DeltaNet + gated attention)
// and plain Qwen3, whose layers are all ungated full attention (docs/model.md §1.2).
enum class HybridFamily {
  kQwen3Next,   // qwen3_next: fused in_proj_qkvz / in_proj_ba, MoE with per-expert tensors.
  kQwen35,      // qwen3_5, qwen3_5_text: split GDN projections, dense MLP.
  kQwen35Moe,   // qwen3_5_moe, qwen3_5_moe_text: split GDN projections, MoE in every layer.
  kQwen3Dense,  // qwen3: every layer full attention without output gate, plain RMSNorm, dense MLP.
};

// Upper bounds on config.json's sizes, which ParseHybridConfig refuses above (InvalidArgument
// naming the field). Far above any released model (hidden sizes reach 16K-18K, vocabularies
// 260K, 128 attention heads, 126 layers, head dims 256, 512 experts, FFN widths 74K), they keep
// every product the model computes from them in int64 (vocab * hidden 2^44, a stacked expert
// tensor experts * 2 * moe_intermediate * hidden 2^57, linear_v_heads * k_dim * v_dim 2^40),
// where a hostile config with each field near INT_MAX would overflow.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;
inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 20;
// intermediate_size, moe_intermediate_size, shared_expert_intermediate_size.
inline constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;
inline constexpr int64_t kMaxLayers = int64_t{1} << 12;
// Attention, key-value and linear-attention (key, value) heads.
inline constexpr int64_t kMaxHeads = int64_t{1} << 12;
// head_dim and the linear-attention key and value head dims.
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 14;
inline constexpr int64_t kMaxConvKernel = int64_t{1} << 10;  // linear_conv_kernel_dim.
inline constexpr int64_t kMaxExperts = int64_t{1} << 16;

// The text hyper-parameters of a Qwen3-family checkpoint (docs/model.md §1.1), with the defaults
// of the family's transformers config where config.json leaves a field out. The per-family
// switches (`zero_centred_norm`, `attention_gate`, and `rotary_dim`) are what the model reads;
// it never branches on `family` for them.
struct HybridConfig {
  std::string model_type;  // As written at the top of config.json.
  HybridFamily family = HybridFamily::kQwen35;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 0;
  double partial_rotary_factor = 0;
  int rotary_dim = 0;
  bool tie_word_embeddings = false;
  // RMSNorm scale 1 + w (the hybrids) or w (plain Qwen3); the GDN gated norm is always w.
  bool zero_centred_norm = true;
  // q_proj also produces a per-head output gate, applied as sigmoid(gate) (the hybrids).
  bool attention_gate = true;
  int conv_kernel = 0;
  int linear_k_heads = 0;
  int linear_v_heads = 0;
  int linear_k_dim = 0;
  int linear_v_dim = 0;
  int num_experts = 0;
  int top_k = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_intermediate_size = 0;
  bool norm_topk_prob = true;
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;
  std::vector<bool> full_attention;  // Per layer: true = full attention, false = GDN.

  // Whether any layer is a GDN layer (then the linear-attention sizes are meaningful).
  bool HasLinearAttention() const;

  int64_t key_dim() const { return static_cast<int64_t>(linear_k_heads) * linear_k_dim; }
  int64_t value_dim() const { return static_cast<int64_t>(linear_v_heads) * linear_v_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  // Whether layer `i` uses the sparse MoE block (else the dense SwiGLU MLP).
  bool IsMoeLayer(int i) const;
};

// Parses config.json text as transformers 5 builds the text model from it with
// AutoModelForCausalLM (docs/model.md §1): a wrapper's (qwen3_5, qwen3_5_moe) text fields,
// tie_word_embeddings and RoPE keys come from `text_config` only; rope_theta /
// partial_rotary_factor beside or inside rope_parameters, or inside a non-empty legacy
// rope_scaling, which replaces rope_parameters; derived layer_types. NotFound for an unknown
// model_type; Unimplemented for `architectures` other than causal language models (ForCausalLM,
// ForConditionalGeneration); InvalidArgument naming the field for missing or inconsistent values
// and sizes above the kMax* bounds;
// Unimplemented for features we do not run (another activation, a RoPE type other than default,
// attention biases, quantized checkpoints, and for qwen3 sliding-window layers).
absl::StatusOr<HybridConfig> ParseHybridConfig(absl::string_view json_text);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_MODEL_CONFIG_H_
