#include "services/infer/daemon/served_model.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checksum/checksum.h"
#include "common/json/json_scan.h"
#include "common/log/log.h"
#include "common/status/annotate.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/infer/kernels/backend_factory.h"

namespace cairn::infer {
namespace {

// The numerics classes of the backends: part of the compatibility identity, so that state
// computed by another backend (or another version of one's arithmetic) is never mixed.
// CPU v3 / pass-invariant v2: the row kernel adds every product with a fused multiply-add, and
// heads of 32 or 64 take the fused blocked attention (docs/cpu-backend.md, fifth round); both
// change bits, so checkpoints an older binary persisted are not restored into this arithmetic.
// CPU v4: decode passes of fewer than 32 rows take the short attention path (the row kernel
// over a key/value head's query heads instead of sgemm on one row; docs/cpu-backend.md, sixth
// round), which changes their bits; the pass-invariant arithmetic is unchanged.
// CPU v5 / pass-invariant v3: the gated delta rule (both forms) flushes subnormal values to zero,
// which changes the bits of heads whose state decays below 2^-126, and the norms sum their
// squares in sixteen lanes and a tree instead of one running sum (docs/cpu-backend.md, ninth
// round).
constexpr char kCpuNumericsClass[] = "cpu-f32-v5";
constexpr char kCpuPassInvariantClass[] = "cpu-f32-pass-invariant-v3";
// The HIP backend keeps bf16 weights and gives its prefill GEMMs and prefill attention bf16
// inputs (v2; v1 widened the weights and ran everything in fp32); v3: its decode products run on
// the matrix units with each fp32 input split into three bf16 pieces (hip::MatMulRowsMma), in
// another order than v2's row kernel. Its pass-invariant numerics run every product through that
// row-independent product with fp32 inputs (v2; v1 had the row kernel). v4 (and pass-invariant
// v3): decode attention merges its key ranges in a fixed tree of eight chains instead of one
// chain, and the default's chunked delta rule runs on the matrix units (hip::GatedDeltaMma).
// v5: the decode products round their inputs to bf16 as the prefill GEMMs do
// (HipKernelBackendOptions::mma_rows_bf16_inputs) instead of splitting them into three pieces;
// the fp32-inputs and pass-invariant numerics keep the exact split.
constexpr char kHipNumericsClass[] = "hip-bf16-v5";
// --gpu-bf16-inputs=false: bf16 weights, every matrix-unit input fp32 (or split exactly); the
// delta rule stays on the fp32 kernels.
constexpr char kHipFp32InputsClass[] = "hip-f32-inputs-v4";
constexpr char kHipPassInvariantClass[] = "hip-f32-pass-invariant-v3";

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// eos_token_id may be an integer or a list of integers.
void AddIds(const nlohmann::json& v, std::vector<int32_t>* out) {
  auto add = [out](const nlohmann::json& x) {
    if (x.is_number_integer() && x.get<int64_t>() >= 0 &&
        x.get<int64_t>() <= std::numeric_limits<int32_t>::max()) {
      const int32_t id = static_cast<int32_t>(x.get<int64_t>());
      if (std::find(out->begin(), out->end(), id) == out->end()) out->push_back(id);
    }
  };
  if (v.is_array()) {
    for (const auto& x : v) add(x);
  } else {
    add(v);
  }
}

// Reads eos_token_id (top level or in text_config) and max_position_embeddings.
void ReadConfigExtras(const std::filesystem::path& dir, std::vector<int32_t>* eos,
                      int64_t* max_positions) {
  for (const char* name : {"config.json", "generation_config.json"}) {
    absl::StatusOr<std::string> text = ReadFile(dir / name);
    if (!text.ok() || FileJsonTooDeep(*text)) continue;
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;
    for (const nlohmann::json* o : {&j, j.contains("text_config") ? &j["text_config"] : nullptr}) {
      if (o == nullptr || !o->is_object()) continue;
      if (o->contains("eos_token_id")) AddIds((*o)["eos_token_id"], eos);
      if (o->contains("max_position_embeddings") &&
          (*o)["max_position_embeddings"].is_number_integer()) {
        *max_positions =
            std::max<int64_t>(*max_positions, (*o)["max_position_embeddings"].get<int64_t>());
      }
    }
  }
}

// generation_config.json's sampling values: numbers in the range each knob takes (anything
// else is left out, so a request falls back to the API's default rather than failing).
SamplingDefaults ReadSamplingDefaults(const std::filesystem::path& dir) {
  SamplingDefaults d;
  absl::StatusOr<std::string> text = ReadFile(dir / "generation_config.json");
  if (!text.ok() || FileJsonTooDeep(*text)) return d;
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return d;
  auto number = [&](const char* key, double lo, double hi) -> std::optional<double> {
    if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
    const double v = j[key].get<double>();
    if (!(v >= lo && v <= hi)) return std::nullopt;
    return v;
  };
  if (auto v = number("temperature", 0, 100)) d.temperature = static_cast<float>(*v);
  // transformers decodes greedily where do_sample is false, whatever temperature says.
  if (j.contains("do_sample") && j["do_sample"].is_boolean() && !j["do_sample"].get<bool>()) {
    d.temperature = 0.0f;
  }
  if (auto v = number("top_k", 0, 1 << 20); v && *v == static_cast<int>(*v)) {
    d.top_k = static_cast<int>(*v);
  }
  if (auto v = number("top_p", 0, 1)) d.top_p = static_cast<float>(*v);
  if (auto v = number("min_p", 0, 1)) d.min_p = static_cast<float>(*v);
  if (auto v = number("repetition_penalty", 0, 10); v && *v > 0) {
    d.repetition_penalty = static_cast<float>(*v);
  }
  return d;
}

std::string LayoutDigest(const StateLayout& layout) {
  std::string text = absl::StrCat("chunk_rows=", layout.rows_per_chunk, ";");
  for (const StateComponent& c : layout.components) {
    absl::StrAppend(&text, c.name, ",", c.kind == ComponentKind::kRows ? "rows" : "private", ",",
                    c.floats, ",f32;");
  }
  return Hex(Xxh3(text));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const ServedModelOptions& options) {
  auto served = std::unique_ptr<ServedModel>(new ServedModel());
  const std::filesystem::path dir(options.dir);
  if (options.numerics != "fast" && options.numerics != "pass-invariant") {
    return absl::InvalidArgumentError(
        absl::StrCat("numerics \"", options.numerics, "\" is not one of fast, pass-invariant"));
  }
  ModelLoadOptions load = options.load;
  load.qwen3_hybrid.pass_invariant = options.numerics == "pass-invariant";
  ASSIGN_OR_RETURN(served->backend_,
                   CreateKernelBackend({.name = options.backend,
                                        .threads = options.threads,
                                        .cpu_spin_us = options.cpu_spin_us,
                                        .gpu_bf16_inputs = options.gpu_bf16_inputs,
                                        .pass_invariant = load.qwen3_hybrid.pass_invariant,
                                        .gpu_moe_one_launch = options.gpu_moe_one_launch}));
  served->backend_name_ = options.backend;
  ASSIGN_OR_RETURN(served->model_, LoadModel(options.dir, served->backend_.get(), load));

  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tokenizer =
      text::Tokenizer::FromFile((dir / "tokenizer.json").string());
  std::string tokenizer_digest = "none";
  if (tokenizer.ok()) {
    served->tokenizer_ = std::move(*tokenizer);
    ASSIGN_OR_RETURN(std::string text, ReadFile(dir / "tokenizer.json"));
    tokenizer_digest = Hex(Xxh3(text));
    if (served->tokenizer_->id_limit() > served->model_->info().vocab_size) {
      CAIRN_LOG(WARNING) << "tokenizer has ids up to " << served->tokenizer_->id_limit()
                         << " but the model's vocabulary is " << served->model_->info().vocab_size
                         << "; prompts with larger ids are refused";
    }
    // Once per model: every structured-output request's masks read it.
    const absl::Time index_start = absl::Now();
    served->token_index_ = text::TokenIndex::Build(*served->tokenizer_);
    CAIRN_LOG(INFO) << "structured outputs: indexed " << served->token_index_->id_limit()
                    << " token ids in " << absl::ToDoubleMilliseconds(absl::Now() - index_start)
                    << " ms";
  } else if (absl::IsNotFound(tokenizer.status())) {
    served->tokenizer_error_ = absl::StrCat("the model folder has no tokenizer.json");
  } else {
    return Annotate(tokenizer.status(), "loading tokenizer.json");
  }
  absl::StatusOr<std::unique_ptr<text::ChatTemplate>> chat =
      text::ChatTemplate::FromModelDir(options.dir);
  std::string template_digest = "none";
  if (chat.ok()) {
    template_digest = Hex(Xxh3((*chat)->source()));
    served->template_ = std::move(*chat);
  } else if (absl::IsNotFound(chat.status())) {
    served->template_error_ =
        "the model folder has no chat template (chat_template.jinja or tokenizer_config.json's "
        "chat_template)";
  } else {
    return Annotate(chat.status(), "loading the chat template");
  }

  int64_t max_positions = 0;
  ReadConfigExtras(dir, &served->eos_ids_, &max_positions);
  if (options.generation_config_defaults) served->sampling_defaults_ = ReadSamplingDefaults(dir);
  if (options.context_tokens > 0) {
    served->context_tokens_ = options.context_tokens;
  } else {
    served->context_tokens_ = max_positions > 0
                                  ? std::min(max_positions, options.max_context_tokens)
                                  : options.max_context_tokens;
  }
  served->name_ = options.served_name.empty()
                      ? std::filesystem::weakly_canonical(dir).filename().string()
                      : options.served_name;

  const StateLayout& layout = served->model_->state_layout();
  for (const StateComponent& c : layout.components) {
    if (c.kind == ComponentKind::kRows && c.name.size() > 2 &&
        c.name.compare(c.name.size() - 2, 2, ".k") == 0) {
      ++served->full_layers_;
    }
    if (c.kind == ComponentKind::kPrivate && c.name.find("recurrent") != std::string::npos) {
      ++served->linear_layers_;
    }
  }
  CompatibilityIdentity& id = served->identity_;
  id.architecture = served->model_->info().architecture;
  id.weights_digest = Hex(served->model_->info().weights_digest);
  id.tokenizer_digest = tokenizer_digest;
  id.template_digest = template_digest;
  id.layout_digest = LayoutDigest(layout);
  const bool hip = options.backend == "hip";
  if (load.qwen3_hybrid.pass_invariant) {
    id.numerics_class = hip ? kHipPassInvariantClass : kCpuPassInvariantClass;
  } else {
    id.numerics_class = kCpuNumericsClass;
    if (hip) id.numerics_class = options.gpu_bf16_inputs ? kHipNumericsClass : kHipFp32InputsClass;
  }
  id.speculative_config = "";
  // The loader has just read config.json; any edit to it (a RoPE base, the experts a token
  // takes, a norm's epsilon) changes the state the same weights compute, so it is a new
  // identity. Its bytes, not its parse: conservative, and independent of what the model reads.
  ASSIGN_OR_RETURN(const std::string config_text, ReadFile(dir / "config.json"));
  id.config_digest = Hex(Xxh3(config_text));
  id.digest =
      Hex(Xxh3(absl::StrCat(id.architecture, "|", id.weights_digest, "|", id.tokenizer_digest, "|",
                            id.template_digest, "|", id.layout_digest, "|", id.numerics_class, "|",
                            id.speculative_config, "|", id.config_digest)));
  return served;
}

}  // namespace cairn::infer
