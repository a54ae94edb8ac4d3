#include "services/infer/models/random_checkpoint_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checksum/checksum.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/infer/models/safetensors.h"

namespace cairn::infer {
namespace {

using Json = nlohmann::json;
using Shape = std::vector<int64_t>;

// How a tensor's values are drawn (uniform in each case). Scales keep activations O(1) so
// that logits are well separated and greedy decoding is stable under rounding differences.
enum class Init {
  kLinear,    // +-sqrt(3 / fan_in): unit variance out for unit variance in.
  kEmbed,     // +-embed_scale.
  kZeroNorm,  // +-0.1 around 0 (zero-centred RMSNorm weights).
  kOneNorm,   // 1 +- 0.1 (the GDN gated norm; plain Qwen3's RMSNorm weights).
  kConv,      // +-0.5.
  kALog,      // log(U(1, 16)), transformers' A initialisation.
  kDtBias,    // +-0.5.
  kRouter,    // +-2 sqrt(3 / fan_in): distinct expert choices.
};
constexpr float kNormSpread = 0.1f;
constexpr float kConvSpread = 0.5f;
constexpr float kDtSpread = 0.5f;
constexpr float kALogLow = 1.0f;
constexpr float kALogHigh = 16.0f;
constexpr float kRouterGain = 2.0f;

struct TensorSpec {
  std::string name;  // Without the weight prefix (lm_head.weight is top level).
  bool prefixed = true;
  Shape shape;
  Init init = Init::kLinear;
};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::vector<uint16_t> Generate(const TensorSpec& spec, const RandomCheckpointOptions& o) {
  const uint64_t seed = o.seed;
  int64_t n = 1;
  for (int64_t d : spec.shape) n *= d;
  const uint64_t key = Xxh3(spec.name, seed);
  const float fan_in = static_cast<float>(spec.shape.back());
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float u = static_cast<float>(SplitMix64(key + static_cast<uint64_t>(i)) >> 40) *
                    (1.0f / 16777216.0f);  // [0, 1)
    const float s = 2.0f * u - 1.0f;       // [-1, 1)
    float v = 0.0f;
    switch (spec.init) {
      case Init::kLinear:
        v = s * std::sqrt(3.0f / fan_in);
        break;
      case Init::kEmbed:
        v = s * static_cast<float>(o.embed_scale);
        break;
      case Init::kZeroNorm:
        v = s * kNormSpread;
        break;
      case Init::kOneNorm:
        v = 1.0f + s * kNormSpread;
        break;
      case Init::kConv:
        v = s * kConvSpread;
        break;
      case Init::kALog:
        v = std::log(kALogLow + u * (kALogHigh - kALogLow));
        break;
      case Init::kDtBias:
        v = s * kDtSpread;
        break;
      case Init::kRouter:
        v = s * kRouterGain * std::sqrt(3.0f / fan_in);
        break;
    }
    out[i] = FloatToBf16(v);
  }
  return out;
}

bool IsMoeType(const std::string& t) {
  return t == "qwen3_next" || t == "qwen3_5_moe" || t == "qwen3_5_moe_text";
}
bool IsWrapper(const std::string& t) { return t == "qwen3_5" || t == "qwen3_5_moe"; }
// Plain Qwen3: every layer ungated full attention, RMSNorm scale w (not 1 + w).
bool IsPlainQwen3(const std::string& t) { return t == "qwen3"; }
bool IsFullAttention(const RandomCheckpointOptions& o, int layer) {
  return IsPlainQwen3(o.model_type) || (layer + 1) % o.full_attention_interval == 0;
}

std::vector<TensorSpec> Specs(const RandomCheckpointOptions& o) {
  const int64_t d = o.hidden_size;
  const int64_t kd = static_cast<int64_t>(o.linear_k_heads) * o.linear_k_dim;
  const int64_t vd = static_cast<int64_t>(o.linear_v_heads) * o.linear_v_dim;
  const int64_t hv = o.linear_v_heads;
  const bool next = o.model_type == "qwen3_next";
  const Init norm = IsPlainQwen3(o.model_type) ? Init::kOneNorm : Init::kZeroNorm;
  const int64_t q_rows = o.num_heads * o.head_dim * (IsPlainQwen3(o.model_type) ? 1 : 2);
  std::vector<TensorSpec> s;
  s.push_back({"embed_tokens.weight", true, {o.vocab_size, d}, Init::kEmbed});
  s.push_back({"norm.weight", true, {d}, norm});
  if (!o.tie_word_embeddings) {
    s.push_back({"lm_head.weight", false, {o.vocab_size, d}, Init::kLinear});
  }
  auto swiglu = [&](const std::string& p, int64_t width) {
    s.push_back({p + "gate_proj.weight", true, {width, d}, Init::kLinear});
    s.push_back({p + "up_proj.weight", true, {width, d}, Init::kLinear});
    s.push_back({p + "down_proj.weight", true, {d, width}, Init::kLinear});
  };
  for (int i = 0; i < o.num_layers; ++i) {
    const std::string p = absl::StrCat("layers.", i, ".");
    s.push_back({p + "input_layernorm.weight", true, {d}, norm});
    s.push_back({p + "post_attention_layernorm.weight", true, {d}, norm});
    if (IsFullAttention(o, i)) {
      const std::string a = p + "self_attn.";
      const int64_t hd = o.head_dim;
      s.push_back({a + "q_proj.weight", true, {q_rows, d}, Init::kLinear});
      s.push_back({a + "k_proj.weight", true, {o.num_kv_heads * hd, d}, Init::kLinear});
      s.push_back({a + "v_proj.weight", true, {o.num_kv_heads * hd, d}, Init::kLinear});
      s.push_back({a + "o_proj.weight", true, {d, o.num_heads * hd}, Init::kLinear});
      s.push_back({a + "q_norm.weight", true, {hd}, norm});
      s.push_back({a + "k_norm.weight", true, {hd}, norm});
    } else {
      const std::string g = p + "linear_attn.";
      if (next) {
        s.push_back({g + "in_proj_qkvz.weight", true, {2 * kd + 2 * vd, d}, Init::kLinear});
        s.push_back({g + "in_proj_ba.weight", true, {2 * hv, d}, Init::kLinear});
      } else {
        s.push_back({g + "in_proj_qkv.weight", true, {2 * kd + vd, d}, Init::kLinear});
        s.push_back({g + "in_proj_z.weight", true, {vd, d}, Init::kLinear});
        s.push_back({g + "in_proj_b.weight", true, {hv, d}, Init::kLinear});
        s.push_back({g + "in_proj_a.weight", true, {hv, d}, Init::kLinear});
      }
      s.push_back({g + "conv1d.weight", true, {2 * kd + vd, 1, o.conv_kernel}, Init::kConv});
      s.push_back({g + "dt_bias", true, {hv}, Init::kDtBias});
      s.push_back({g + "A_log", true, {hv}, Init::kALog});
      s.push_back({g + "norm.weight", true, {o.linear_v_dim}, Init::kOneNorm});
      s.push_back({g + "out_proj.weight", true, {d, vd}, Init::kLinear});
    }
    const std::string m = p + "mlp.";
    const bool dense_layer = !IsMoeType(o.model_type) ||
                             (next && std::find(o.mlp_only_layers.begin(), o.mlp_only_layers.end(),
                                                i) != o.mlp_only_layers.end());
    if (dense_layer) {
      swiglu(m, o.intermediate_size);
      continue;
    }
    const int64_t e = o.num_experts;
    const int64_t inter = o.moe_intermediate_size;
    s.push_back({m + "gate.weight", true, {e, d}, Init::kRouter});
    if (next) {
      for (int64_t x = 0; x < e; ++x) swiglu(absl::StrCat(m, "experts.", x, "."), inter);
    } else {
      s.push_back({m + "experts.gate_up_proj", true, {e, 2 * inter, d}, Init::kLinear});
      s.push_back({m + "experts.down_proj", true, {e, d, inter}, Init::kLinear});
    }
    swiglu(m + "shared_expert.", o.shared_intermediate_size);
    s.push_back({m + "shared_expert_gate.weight", true, {1, d}, Init::kLinear});
  }
  return s;
}

// The fields of plain Qwen3's config.json that the hybrids lack or spell differently, shaped as
// the published Qwen3 configs: top-level rope_theta, rope_scaling null, no sliding windows.
void PlainQwen3Fields(const RandomCheckpointOptions& o, Json& c) {
  c["rope_theta"] = o.rope_theta;
  c["rope_scaling"] = nullptr;
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
  c["max_window_layers"] = o.num_layers;
  c["intermediate_size"] = o.intermediate_size;
}

Json TextConfig(const RandomCheckpointOptions& o) {
  const bool next = o.model_type == "qwen3_next";
  Json c;
  if (IsPlainQwen3(o.model_type)) {
    c["architectures"] = {"Qwen3ForCausalLM"};
    c["model_type"] = "qwen3";
  } else if (o.model_type == "qwen3_next") {
    c["architectures"] = {"Qwen3NextForCausalLM"};
    c["model_type"] = "qwen3_next";
  } else if (o.model_type == "qwen3_5_text" || o.model_type == "qwen3_5") {
    c["architectures"] = {"Qwen3_5ForCausalLM"};
    c["model_type"] = "qwen3_5_text";
  } else {
    c["architectures"] = {"Qwen3_5MoeForCausalLM"};
    c["model_type"] = "qwen3_5_moe_text";
  }
  c["vocab_size"] = o.vocab_size;
  c["hidden_size"] = o.hidden_size;
  c["num_hidden_layers"] = o.num_layers;
  c["num_attention_heads"] = o.num_heads;
  c["num_key_value_heads"] = o.num_kv_heads;
  c["head_dim"] = o.head_dim;
  c["hidden_act"] = "silu";
  c["max_position_embeddings"] = o.max_position_embeddings;
  if (!o.eos_token_ids.empty()) c["eos_token_id"] = o.eos_token_ids;
  c["rms_norm_eps"] = o.rms_norm_eps;
  c["tie_word_embeddings"] = o.tie_word_embeddings;
  c["attention_bias"] = false;
  c["dtype"] = "bfloat16";
  if (IsPlainQwen3(o.model_type)) {
    PlainQwen3Fields(o, c);
    return c;
  }
  c["linear_conv_kernel_dim"] = o.conv_kernel;
  c["linear_key_head_dim"] = o.linear_k_dim;
  c["linear_value_head_dim"] = o.linear_v_dim;
  c["linear_num_key_heads"] = o.linear_k_heads;
  c["linear_num_value_heads"] = o.linear_v_heads;
  if (o.write_layer_types) {
    Json types = Json::array();
    for (int i = 0; i < o.num_layers; ++i) {
      types.push_back((i + 1) % o.full_attention_interval == 0 ? "full_attention"
                                                               : "linear_attention");
    }
    c["layer_types"] = types;
  } else {
    c["full_attention_interval"] = o.full_attention_interval;
  }
  if (o.legacy_rope_fields) {
    c["rope_theta"] = o.rope_theta;
    c["partial_rotary_factor"] = o.partial_rotary_factor;
  } else {
    Json rope = {{"rope_type", "default"},
                 {"rope_theta", o.rope_theta},
                 {"partial_rotary_factor", o.partial_rotary_factor}};
    if (!next) {
      // Interleaved MRoPE sections summing to rotary_dim / 2 (they all read the same
      // positions for text).
      const int half = static_cast<int>(o.head_dim * o.partial_rotary_factor) / 2;
      const int hw = (half + 2) / 3;
      rope["mrope_section"] = {half - 2 * hw, hw, hw};
      rope["mrope_interleaved"] = true;
    }
    c["rope_parameters"] = rope;
  }
  if (o.model_type != "qwen3_5_moe" && o.model_type != "qwen3_5_moe_text") {
    c["intermediate_size"] = o.intermediate_size;
  }
  if (IsMoeType(o.model_type)) {
    c["num_experts"] = o.num_experts;
    c["num_experts_per_tok"] = o.top_k;
    c["moe_intermediate_size"] = o.moe_intermediate_size;
    c["shared_expert_intermediate_size"] = o.shared_intermediate_size;
    if (next) {
      c["norm_topk_prob"] = o.norm_topk_prob;
      c["decoder_sparse_step"] = 1;
      c["mlp_only_layers"] = o.mlp_only_layers;
    }
  }
  return c;
}

// config.json: the text config, inside a wrapper for the wrapper types.
Json FullConfig(const RandomCheckpointOptions& o) {
  Json config = TextConfig(o);
  if (!IsWrapper(o.model_type)) return config;
  Json outer;
  outer["architectures"] = {o.model_type == "qwen3_5" ? "Qwen3_5ForConditionalGeneration"
                                                      : "Qwen3_5MoeForConditionalGeneration"};
  outer["model_type"] = o.model_type;
  outer["tie_word_embeddings"] = o.tie_word_embeddings;
  outer["text_config"] = config;
  return outer;
}

std::string FullName(const TensorSpec& spec, const RandomCheckpointOptions& o) {
  if (!spec.prefixed) return spec.name;
  return (IsWrapper(o.model_type) ? "model.language_model." : "model.") + spec.name;
}

absl::Status WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

struct Payload {
  std::string name;
  Shape shape;
  std::vector<uint16_t> bf16;
};

absl::Status WriteShard(const std::filesystem::path& path, const std::vector<Payload*>& tensors) {
  Json header = Json::object();
  uint64_t offset = 0;
  for (const Payload* t : tensors) {
    const uint64_t bytes = t->bf16.size() * 2;
    header[t->name] = {
        {"dtype", "BF16"}, {"shape", t->shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  // Data in the order of the offsets above; bf16 is stored little-endian.
  for (const Payload* t : tensors) {
    out.write(reinterpret_cast<const char*>(t->bf16.data()),
              static_cast<std::streamsize>(t->bf16.size() * 2));
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

absl::Status Validate(const RandomCheckpointOptions& o) {
  const std::string& t = o.model_type;
  if (t != "qwen3_5_text" && t != "qwen3_5" && t != "qwen3_next" && t != "qwen3_5_moe_text" &&
      t != "qwen3_5_moe" && !IsPlainQwen3(t)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown model_type ", t));
  }
  if (o.vocab_size < 1 || o.hidden_size < 1 || o.num_layers < 1 || o.num_heads < 1 ||
      o.num_kv_heads < 1 || o.head_dim < 2 || o.conv_kernel < 2 || o.linear_k_heads < 1 ||
      o.linear_v_heads < 1 || o.linear_k_dim < 1 || o.linear_v_dim < 1 || o.shards < 1 ||
      o.full_attention_interval < 1 || o.intermediate_size < 1 || !(o.embed_scale > 0) ||
      o.max_position_embeddings < 1) {
    return absl::InvalidArgumentError("random checkpoint sizes must be positive");
  }
  if (o.num_heads % o.num_kv_heads != 0 || o.linear_v_heads % o.linear_k_heads != 0) {
    return absl::InvalidArgumentError("head counts must divide (GQA and GDN groups)");
  }
  if (IsMoeType(t) && (o.num_experts < 1 || o.top_k < 1 || o.top_k > o.num_experts ||
                       o.moe_intermediate_size < 1 || o.shared_intermediate_size < 1)) {
    return absl::InvalidArgumentError("bad MoE sizes");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteRandomCheckpoint(const std::string& dir, const RandomCheckpointOptions& options) {
  namespace fs = std::filesystem;
  RETURN_IF_ERROR(Validate(options));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));

  std::vector<Payload> payloads;
  uint64_t total = 0;
  for (const TensorSpec& spec : Specs(options)) {
    Payload p{FullName(spec, options), spec.shape, Generate(spec, options)};
    total += p.bf16.size() * 2;
    payloads.push_back(std::move(p));
  }
  std::sort(payloads.begin(), payloads.end(),
            [](const Payload& a, const Payload& b) { return a.name < b.name; });

  RETURN_IF_ERROR(WriteText(fs::path(dir) / "config.json", FullConfig(options).dump(2) + "\n"));

  const int shards = std::min<int>(options.shards, static_cast<int>(payloads.size()));
  if (shards == 1) {
    std::vector<Payload*> all;
    for (Payload& p : payloads) all.push_back(&p);
    return WriteShard(fs::path(dir) / "model.safetensors", all);
  }
  // Contiguous runs of the sorted tensors, each about total / shards bytes.
  Json weight_map = Json::object();
  size_t next = 0;
  uint64_t written = 0;
  for (int s = 0; s < shards; ++s) {
    const std::string name = absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards);
    const uint64_t target = total * static_cast<uint64_t>(s + 1) / static_cast<uint64_t>(shards);
    std::vector<Payload*> part;
    const size_t remaining_shards = static_cast<size_t>(shards - s - 1);
    while (next < payloads.size() - remaining_shards &&
           (part.empty() || written < target || s == shards - 1)) {
      written += payloads[next].bf16.size() * 2;
      weight_map[payloads[next].name] = name;
      part.push_back(&payloads[next++]);
    }
    RETURN_IF_ERROR(WriteShard(fs::path(dir) / name, part));
  }
  Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return WriteText(fs::path(dir) / "model.safetensors.index.json", index.dump(2) + "\n");
}

absl::StatusOr<std::string> RandomCheckpointConfig(const RandomCheckpointOptions& options) {
  RETURN_IF_ERROR(Validate(options));
  return FullConfig(options).dump(2) + "\n";
}

absl::StatusOr<std::vector<RandomTensorShape>> RandomCheckpointTensors(
    const RandomCheckpointOptions& options) {
  RETURN_IF_ERROR(Validate(options));
  std::vector<RandomTensorShape> out;
  for (const TensorSpec& spec : Specs(options)) {
    out.push_back({FullName(spec, options), spec.shape});
  }
  std::sort(out.begin(), out.end(),
            [](const RandomTensorShape& a, const RandomTensorShape& b) { return a.name < b.name; });
  return out;
}

}  // namespace cairn::infer
