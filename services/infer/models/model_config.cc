#include "services/infer/models/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json/json_scan.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace cairn::infer {
namespace {

using Json = nlohmann::json;

constexpr int kDefaultHeads = 16;
constexpr int kDefaultHeadDim = 256;
constexpr double kDefaultRopeTheta = 10000.0;
constexpr double kDefaultPartialRotary = 0.25;

// transformers' Qwen3NextConfig defaults (docs/model.md §1.1) and the Qwen3.5 / Qwen3 overrides.
struct Defaults {
  int64_t vocab_size = 151936;
  int64_t hidden_size = 2048;
  int64_t intermediate_size = 5632;
  int num_layers = 48;
  int num_kv_heads = 2;
  int num_heads = kDefaultHeads;
  int head_dim = kDefaultHeadDim;
  double partial_rotary = kDefaultPartialRotary;
};
// Qwen3Config: 32 heads of 128, 32 KV heads, the whole head rotated.
constexpr Defaults kQwen3Defaults{151936, 4096, 22016, 32, 32, 32, 128, 1.0};
constexpr int kDefaultConvKernel = 4;
constexpr int kDefaultLinearHeadDim = 128;
constexpr int kDefaultLinearKHeads = 16;
constexpr int kDefaultLinearVHeads = 32;
constexpr int kDefaultExperts = 512;
constexpr int kDefaultTopK = 10;
// Qwen3_5MoeTextConfig's own expert defaults.
constexpr int kQwen35MoeDefaultExperts = 256;
constexpr int kQwen35MoeDefaultTopK = 8;
constexpr int64_t kDefaultMoeIntermediate = 512;
constexpr int kDefaultFullAttentionInterval = 4;
constexpr double kDefaultRmsEps = 1e-6;

template <typename T>
absl::StatusOr<T> Get(const Json& obj, const char* key, T fallback) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  const Json& v = obj[key];
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return absl::InvalidArgumentError(absl::StrCat(key, " is not a bool"));
    return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(key, " is not an integer"));
    }
    // Range-checked: get<T> would wrap a value past T (2^32 + 1 read as 1).
    const bool fits =
        v.is_number_unsigned()
            ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
            : v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                  v.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max());
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(key, " is out of range: ", v.dump()));
    }
    return v.get<T>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return absl::InvalidArgumentError(absl::StrCat(key, " is not a number"));
    return v.get<T>();
  } else {
    if (!v.is_string()) return absl::InvalidArgumentError(absl::StrCat(key, " is not a string"));
    return v.get<T>();
  }
}

absl::Status Positive(const char* name, int64_t v) {
  if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(name, " must be > 0, got ", v));
  return absl::OkStatus();
}

// At most `max` (the kMax* bounds in model_config.h).
absl::Status AtMost(const char* name, int64_t v, int64_t max) {
  if (v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is ", v, ", above this server's limit of ", max));
  }
  return absl::OkStatus();
}

absl::Status Bounded(const char* name, int64_t v, int64_t max) {
  RETURN_IF_ERROR(Positive(name, v));
  return AtMost(name, v, max);
}

// Layer-type names that may key a per-layer-type rope_parameters dict.
bool IsLayerTypeName(const std::string& key) {
  return key == "full_attention" || key == "linear_attention" || key == "sliding_attention";
}

// The RoPE settings as transformers 5 reads them for the text model (RotaryEmbeddingConfigMixin
// convert_rope_params_to_dict / standardize_rope_params): a non-empty `rope_scaling` (the legacy
// key) replaces `rope_parameters` whole; the dict's rope_theta and partial_rotary_factor win over
// the same keys beside it, then transformers' defaults. `t` is the text config; a wrapper's own
// top-level RoPE keys never reach its text config, so they are not read. `where` prefixes field
// names in messages ("text_config." for a wrapper).
absl::Status ParseRope(const Json& t, double default_partial_rotary, bool reads_partial_rotary,
                       const std::string& where, HybridConfig& c) {
  const Json* rope = nullptr;
  std::string field;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!t.contains(key) || t[key].is_null()) continue;
    const Json& v = t[key];
    if (!v.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, key, " is not an object"));
    }
    if (v.empty()) continue;  // Falsy in Python: as if absent.
    rope = &v;
    field = absl::StrCat(where, key);
    break;
  }
  ASSIGN_OR_RETURN(c.rope_theta, Get<double>(t, "rope_theta", kDefaultRopeTheta));
  // An explicit null leaves the factor out of the RoPE dict, and the rotary embedding then
  // rotates the whole head.
  const bool partial_null =
      t.contains("partial_rotary_factor") && t["partial_rotary_factor"].is_null();
  c.partial_rotary_factor = partial_null ? 1.0 : default_partial_rotary;
  if (reads_partial_rotary) {
    ASSIGN_OR_RETURN(c.partial_rotary_factor,
                     Get<double>(t, "partial_rotary_factor", c.partial_rotary_factor));
  }
  if (rope != nullptr) {
    if (std::all_of(rope->items().begin(), rope->items().end(),
                    [](const auto& kv) { return IsLayerTypeName(kv.key()); })) {
      return absl::UnimplementedError(absl::StrCat(field, " per layer type is not supported"));
    }
    // rope_type, else the legacy key type, else default.
    ASSIGN_OR_RETURN(std::string legacy_type, Get<std::string>(*rope, "type", "default"));
    ASSIGN_OR_RETURN(std::string type, Get<std::string>(*rope, "rope_type", legacy_type));
    if (type != "default") {
      return absl::UnimplementedError(
          absl::StrCat(field, " rope_type ", type, " is not supported (only default RoPE is run)"));
    }
    ASSIGN_OR_RETURN(c.rope_theta, Get<double>(*rope, "rope_theta", c.rope_theta));
    if (reads_partial_rotary) {
      ASSIGN_OR_RETURN(c.partial_rotary_factor,
                       Get<double>(*rope, "partial_rotary_factor", c.partial_rotary_factor));
    }
  }
  // Qwen3's rotary embedding rotates the whole head whatever the config says.
  if (!reads_partial_rotary) c.partial_rotary_factor = 1.0;
  if (c.rope_theta <= 0) return absl::InvalidArgumentError("rope_theta must be > 0");
  // The rotary dims are int(head_dim * factor), as transformers computes them; the product is
  // range-checked before the conversion, which is undefined past int's range.
  const double rotary_dims = c.head_dim * c.partial_rotary_factor;
  if (!(rotary_dims >= 1 && rotary_dims < c.head_dim + 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "partial_rotary_factor ", c.partial_rotary_factor, " gives ", rotary_dims,
        " rotary dims for head_dim ", c.head_dim, "; it must give 1 to head_dim"));
  }
  c.rotary_dim = static_cast<int>(rotary_dims);
  if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("partial_rotary_factor ",
                                                   c.partial_rotary_factor, " gives rotary dim ",
                                                   c.rotary_dim, " for head_dim ", c.head_dim));
  }
  return absl::OkStatus();
}

// `layer_types` as one flag per layer (true = full attention), or empty when the config has none.
// `linear_allowed`: whether linear_attention (GDN) layers exist in the family.
absl::StatusOr<std::vector<bool>> LayerTypes(const Json& t, int num_layers, bool linear_allowed) {
  std::vector<bool> full;
  if (!t.contains("layer_types") || t["layer_types"].is_null()) return full;
  const Json& lt = t["layer_types"];
  if (!lt.is_array() || static_cast<int>(lt.size()) != num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer_types must list ", num_layers, " layers"));
  }
  for (const Json& v : lt) {
    std::string s = v.is_string() ? v.get<std::string>() : "";
    // The hybrids' config classes rename the legacy names (remap_legacy_layer_types).
    if (linear_allowed && s == "mamba") s = "linear_attention";
    if (linear_allowed && s == "attention") s = "full_attention";
    if (s == "sliding_attention") {
      return absl::UnimplementedError("layer_types: sliding_attention is not supported");
    }
    if (s != "full_attention" && !(linear_allowed && s == "linear_attention")) {
      return absl::InvalidArgumentError(absl::StrCat("unknown layer type '", s, "'"));
    }
    full.push_back(s == "full_attention");
  }
  return full;
}

// Plain Qwen3's attention options (docs/model.md §1.2): sliding windows are not run.
absl::Status ParseQwen3Attention(const Json& t, HybridConfig& c) {
  ASSIGN_OR_RETURN(bool sliding, Get<bool>(t, "use_sliding_window", false));
  if (sliding) {
    return absl::UnimplementedError("use_sliding_window true is not supported for qwen3");
  }
  ASSIGN_OR_RETURN(c.full_attention, LayerTypes(t, c.num_layers, /*linear_allowed=*/false));
  if (c.full_attention.empty()) c.full_attention.assign(static_cast<size_t>(c.num_layers), true);
  return absl::OkStatus();
}

// A quantized checkpoint's config names its method in quantization_config (at the top level, or
// in a wrapper's text_config); its weights are not the bf16 / f16 / f32 matrices we run.
absl::Status RefuseQuantized(const Json& obj) {
  if (!obj.contains("quantization_config") || obj["quantization_config"].is_null()) {
    return absl::OkStatus();
  }
  const Json& q = obj["quantization_config"];
  const std::string method =
      q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
          ? q["quant_method"].get<std::string>()
          : "unnamed";
  return absl::UnimplementedError(absl::StrCat(
      "quantized checkpoints are not supported (quantization_config.quant_method ", method, ")"));
}

// `architectures` (when given) must name language models: a classifier or a bare model of the same
// model_type has other heads, or none.
absl::Status RefuseOtherHeads(const Json& outer) {
  if (!outer.contains("architectures") || !outer["architectures"].is_array()) {
    return absl::OkStatus();
  }
  for (const Json& a : outer["architectures"]) {
    const std::string name = a.is_string() ? a.get<std::string>() : "";
    if (!absl::EndsWith(name, "ForCausalLM") && !absl::EndsWith(name, "ForConditionalGeneration")) {
      return absl::UnimplementedError(
          absl::StrCat("architectures names ", name, "; only causal language models are run"));
    }
  }
  return absl::OkStatus();
}

// The object holding the text hyper-parameters: `outer` itself for the text-only types (which
// ignore a `text_config` key, as their transformers config classes do), `text_config` for the
// wrappers. A wrapper's config class builds its text config from `text_config` alone (all
// defaults when it is absent), so text fields beside it are never read; a wrapper without
// `text_config` that has them is refused rather than run with the defaults.
absl::StatusOr<const Json*> TextConfig(const Json& outer, const std::string& model_type) {
  static const Json* const kEmpty = new Json(Json::object());
  if (model_type != "qwen3_5" && model_type != "qwen3_5_moe") return &outer;
  if (outer.contains("text_config") && !outer["text_config"].is_null()) {
    if (!outer["text_config"].is_object()) {
      return absl::InvalidArgumentError("text_config is not an object");
    }
    return &outer["text_config"];
  }
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                          "layer_types", "rope_parameters", "rope_theta"}) {
    if (outer.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(model_type, " config has ", key,
                                                     " but no text_config; a ", model_type,
                                                     " text model is read from text_config only"));
    }
  }
  return kEmpty;
}

}  // namespace

bool HybridConfig::HasLinearAttention() const {
  return std::find(full_attention.begin(), full_attention.end(), false) != full_attention.end();
}

bool HybridConfig::IsMoeLayer(int i) const {
  if (family == HybridFamily::kQwen35 || family == HybridFamily::kQwen3Dense) return false;
  if (family == HybridFamily::kQwen35Moe) return true;
  if (num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), i) != mlp_only_layers.end()) {
    return false;
  }
  return (i + 1) % decoder_sparse_step == 0;
}

absl::StatusOr<HybridConfig> ParseHybridConfig(absl::string_view json_text) {
  if (FileJsonTooDeep(json_text)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json nests deeper than ", kMaxFileJsonNesting, " levels"));
  }
  const Json outer = Json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (outer.is_discarded() || !outer.is_object()) {
    return absl::InvalidArgumentError("config.json is not a JSON object");
  }
  HybridConfig c;
  ASSIGN_OR_RETURN(c.model_type, Get<std::string>(outer, "model_type", ""));
  Defaults d;
  if (c.model_type == "qwen3_next") {
    c.family = HybridFamily::kQwen3Next;
  } else if (c.model_type == "qwen3_5" || c.model_type == "qwen3_5_text") {
    c.family = HybridFamily::kQwen35;
    d = Defaults{248320, 4096, 12288, 32, 4};
  } else if (c.model_type == "qwen3_5_moe" || c.model_type == "qwen3_5_moe_text") {
    c.family = HybridFamily::kQwen35Moe;
    d = Defaults{248320, 2048, 0, 40, 2};
  } else if (c.model_type == "qwen3") {
    c.family = HybridFamily::kQwen3Dense;
    d = kQwen3Defaults;
    c.zero_centred_norm = false;
    c.attention_gate = false;
  } else {
    return absl::NotFoundError(absl::StrCat("unknown model_type '", c.model_type,
                                            "' (supported: qwen3, qwen3_next, qwen3_5, "
                                            "qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text)"));
  }
  ASSIGN_OR_RETURN(const Json* text, TextConfig(outer, c.model_type));
  const Json& t = *text;
  // Prefix of the text config's field names in messages.
  const std::string where = text == &outer ? "" : "text_config.";
  RETURN_IF_ERROR(RefuseOtherHeads(outer));
  RETURN_IF_ERROR(RefuseQuantized(outer));
  RETURN_IF_ERROR(RefuseQuantized(t));
  ASSIGN_OR_RETURN(std::string act, Get<std::string>(t, "hidden_act", "silu"));
  // transformers' ACT2FN maps "swish" to the same SiLU as "silu".
  if (act != "silu" && act != "swish") {
    return absl::UnimplementedError(absl::StrCat(where, "hidden_act ", act));
  }
  // Every family's attention projections take biases when this is true; we run none.
  ASSIGN_OR_RETURN(bool bias, Get<bool>(t, "attention_bias", false));
  if (bias) {
    return absl::UnimplementedError(
        absl::StrCat("attention_bias true is not supported for ", c.model_type));
  }
  ASSIGN_OR_RETURN(c.vocab_size, Get<int64_t>(t, "vocab_size", d.vocab_size));
  ASSIGN_OR_RETURN(c.hidden_size, Get<int64_t>(t, "hidden_size", d.hidden_size));
  ASSIGN_OR_RETURN(c.intermediate_size, Get<int64_t>(t, "intermediate_size", d.intermediate_size));
  ASSIGN_OR_RETURN(c.num_layers, Get<int>(t, "num_hidden_layers", d.num_layers));
  ASSIGN_OR_RETURN(c.num_heads, Get<int>(t, "num_attention_heads", d.num_heads));
  // An explicit null means as many as the attention heads (Qwen3Config's rule; the hybrids'
  // config classes have none and refuse null, which is read the same way here).
  const bool kv_null = t.contains("num_key_value_heads") && t["num_key_value_heads"].is_null();
  ASSIGN_OR_RETURN(c.num_kv_heads,
                   Get<int>(t, "num_key_value_heads", kv_null ? c.num_heads : d.num_kv_heads));
  RETURN_IF_ERROR(Bounded("num_attention_heads", c.num_heads, kMaxHeads));
  // transformers' config classes default head_dim (256; 128 for Qwen3), so the modelling
  // code's D / Hq fallback never applies.
  ASSIGN_OR_RETURN(c.head_dim, Get<int>(t, "head_dim", d.head_dim));
  ASSIGN_OR_RETURN(double eps, Get<double>(t, "rms_norm_eps", kDefaultRmsEps));
  if (!(eps >= 0.0 && eps < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("rms_norm_eps must be in [0, 1), got ", eps));
  }
  c.rms_norm_eps = static_cast<float>(eps);
  // The flag decides only a checkpoint without lm_head.weight (the loader takes a stored head
  // that differs from the embedding whatever it says). A wrapper's two loaders read different
  // levels: AutoModelForCausalLM's text model text_config's, the checkpoint's own
  // ...ForConditionalGeneration the top level's. Either one tying is the only reading that gives
  // such a checkpoint a head (the other starts from a random one), so either level's true ties.
  ASSIGN_OR_RETURN(const bool text_tie, Get<bool>(t, "tie_word_embeddings", false));
  ASSIGN_OR_RETURN(const bool outer_tie, Get<bool>(outer, "tie_word_embeddings", false));
  c.tie_word_embeddings = text_tie || outer_tie;
  for (auto [name, v, max] : {std::tuple{"vocab_size", c.vocab_size, kMaxVocabSize},
                              {"hidden_size", c.hidden_size, kMaxHiddenSize},
                              {"num_hidden_layers", int64_t{c.num_layers}, kMaxLayers},
                              {"num_key_value_heads", int64_t{c.num_kv_heads}, kMaxHeads},
                              {"head_dim", int64_t{c.head_dim}, kMaxHeadDim}}) {
    RETURN_IF_ERROR(Bounded(name, v, max));
  }
  // Positive where it is used (dense MLP layers, checked below); bounded either way.
  RETURN_IF_ERROR(AtMost("intermediate_size", c.intermediate_size, kMaxIntermediateSize));
  if (c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        "num_attention_heads must be a multiple of "
        "num_key_value_heads");
  }
  RETURN_IF_ERROR(ParseRope(t, d.partial_rotary,
                            /*reads_partial_rotary=*/c.family != HybridFamily::kQwen3Dense, where,
                            c));
  if (c.family == HybridFamily::kQwen3Dense) {
    // No linear attention, no experts: the sizes of those stay 0.
    RETURN_IF_ERROR(ParseQwen3Attention(t, c));
    RETURN_IF_ERROR(Positive("intermediate_size", c.intermediate_size));
    return c;
  }
  ASSIGN_OR_RETURN(c.conv_kernel, Get<int>(t, "linear_conv_kernel_dim", kDefaultConvKernel));
  ASSIGN_OR_RETURN(c.linear_k_dim, Get<int>(t, "linear_key_head_dim", kDefaultLinearHeadDim));
  ASSIGN_OR_RETURN(c.linear_v_dim, Get<int>(t, "linear_value_head_dim", kDefaultLinearHeadDim));
  ASSIGN_OR_RETURN(c.linear_k_heads, Get<int>(t, "linear_num_key_heads", kDefaultLinearKHeads));
  ASSIGN_OR_RETURN(c.linear_v_heads, Get<int>(t, "linear_num_value_heads", kDefaultLinearVHeads));
  for (auto [name, v, max] : {std::tuple{"linear_conv_kernel_dim", c.conv_kernel, kMaxConvKernel},
                              {"linear_key_head_dim", c.linear_k_dim, kMaxHeadDim},
                              {"linear_value_head_dim", c.linear_v_dim, kMaxHeadDim},
                              {"linear_num_key_heads", c.linear_k_heads, kMaxHeads},
                              {"linear_num_value_heads", c.linear_v_heads, kMaxHeads}}) {
    RETURN_IF_ERROR(Bounded(name, v, max));
  }
  if (c.linear_v_heads % c.linear_k_heads != 0) {
    return absl::InvalidArgumentError(
        "linear_num_value_heads must be a multiple of "
        "linear_num_key_heads");
  }

  if (c.family != HybridFamily::kQwen35) {
    const bool moe35 = c.family == HybridFamily::kQwen35Moe;
    ASSIGN_OR_RETURN(c.num_experts, Get<int>(t, "num_experts",
                                             moe35 ? kQwen35MoeDefaultExperts : kDefaultExperts));
    ASSIGN_OR_RETURN(
        c.top_k, Get<int>(t, "num_experts_per_tok", moe35 ? kQwen35MoeDefaultTopK : kDefaultTopK));
    ASSIGN_OR_RETURN(c.moe_intermediate_size,
                     Get<int64_t>(t, "moe_intermediate_size", kDefaultMoeIntermediate));
    ASSIGN_OR_RETURN(c.shared_intermediate_size,
                     Get<int64_t>(t, "shared_expert_intermediate_size", kDefaultMoeIntermediate));
    if (c.family == HybridFamily::kQwen3Next) {
      ASSIGN_OR_RETURN(c.norm_topk_prob, Get<bool>(t, "norm_topk_prob", true));
      ASSIGN_OR_RETURN(c.decoder_sparse_step, Get<int>(t, "decoder_sparse_step", 1));
      RETURN_IF_ERROR(Positive("decoder_sparse_step", c.decoder_sparse_step));
      if (t.contains("mlp_only_layers") && !t["mlp_only_layers"].is_null()) {
        if (!t["mlp_only_layers"].is_array()) {
          return absl::InvalidArgumentError("mlp_only_layers is not a list");
        }
        for (const Json& v : t["mlp_only_layers"]) {
          if (!v.is_number_integer()) {
            return absl::InvalidArgumentError("mlp_only_layers holds a non-integer");
          }
          // In int's range, not wrapped into it (2^32 + 2 is not layer 2); a layer index past
          // the layers is allowed and names none, as transformers reads the list.
          if (v.is_number_unsigned()
                  ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())
                  : v.get<int64_t>() < std::numeric_limits<int>::min() ||
                        v.get<int64_t>() > std::numeric_limits<int>::max()) {
            return absl::InvalidArgumentError(
                absl::StrCat("mlp_only_layers holds an out-of-range layer index: ", v.dump()));
          }
          c.mlp_only_layers.push_back(static_cast<int>(v.get<int64_t>()));
        }
      }
    } else {
      c.norm_topk_prob = true;  // Qwen3.5-MoE's router always renormalises (docs/model.md §1.1).
    }
    if (c.num_experts > 0) {
      RETURN_IF_ERROR(Bounded("num_experts", c.num_experts, kMaxExperts));
      RETURN_IF_ERROR(Positive("num_experts_per_tok", c.top_k));
      RETURN_IF_ERROR(
          Bounded("moe_intermediate_size", c.moe_intermediate_size, kMaxIntermediateSize));
      RETURN_IF_ERROR(Bounded("shared_expert_intermediate_size", c.shared_intermediate_size,
                              kMaxIntermediateSize));
      if (c.top_k > c.num_experts) {
        return absl::InvalidArgumentError("num_experts_per_tok exceeds num_experts");
      }
    } else if (c.family == HybridFamily::kQwen35Moe) {
      return absl::InvalidArgumentError("num_experts must be > 0 for qwen3_5_moe");
    }
  }
  for (int i = 0; i < c.num_layers; ++i) {
    if (!c.IsMoeLayer(i)) RETURN_IF_ERROR(Positive("intermediate_size", c.intermediate_size));
  }

  ASSIGN_OR_RETURN(c.full_attention, LayerTypes(t, c.num_layers, /*linear_allowed=*/true));
  if (c.full_attention.empty()) {
    ASSIGN_OR_RETURN(int interval,
                     Get<int>(t, "full_attention_interval", kDefaultFullAttentionInterval));
    RETURN_IF_ERROR(Positive("full_attention_interval", interval));
    for (int i = 0; i < c.num_layers; ++i) c.full_attention.push_back((i + 1) % interval == 0);
  }
  return c;
}

}  // namespace cairn::infer
