#include "services/gateway/openai/format_util.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status/status_macros.h"

namespace cairn::gateway {
namespace {

// OpenAI's limit on a json_schema format's name.
constexpr size_t kMaxSchemaNameBytes = 64;

// The error about one request field, named in OpenAI's "param" too (InvalidField).
absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return InvalidField(field, what);
}

}  // namespace

absl::string_view TierName(infer_v1::CacheResult::Tier tier) {
  switch (tier) {
    case infer_v1::CacheResult::TIER_LIVE:
      return "live";
    case infer_v1::CacheResult::TIER_RAM:
      return "ram";
    case infer_v1::CacheResult::TIER_DISK:
      return "disk";
    default:
      return "cold";
  }
}

Json CairnObject(const infer_v1::CacheResult& cache) {
  Json j = {{"tier", TierName(cache.restored_from())},
            {"depth", cache.restored_depth()},
            {"prefilled_tokens", cache.prefilled_tokens()},
            {"restore_ms", cache.restore_ms()},
            {"capture_ms", cache.capture_ms()},
            {"ttft_ms", cache.ttft_ms()},
            {"captures", cache.captures()},
            {"cache_available", cache.cache_available()}};
  j["miss_reason"] = cache.miss_reason().empty() ? Json(nullptr) : Json(cache.miss_reason());
  return j;
}

std::string SseData(const Json& j) { return absl::StrCat("data: ", DumpJson(j), "\n\n"); }

std::string SseEvent(absl::string_view name, const Json& j) {
  return absl::StrCat("event: ", name, "\ndata: ", DumpJson(j), "\n\n");
}

std::string NewId(absl::string_view prefix) {
  absl::BitGen gen;
  return absl::StrCat(prefix, absl::StrFormat("%016x%08x", absl::Uniform<uint64_t>(gen),
                                              absl::Uniform<uint32_t>(gen)));
}

const std::string& ToolCallIds::For(uint32_t index) {
  auto [it, added] = ids_.try_emplace(index);
  if (added) it->second = NewId(prefix_);
  return it->second;
}

int64_t UnixSeconds() { return absl::ToUnixSeconds(absl::Now()); }

void SetMaxTokens(int64_t requested, const RequestLimits& limits,
                  infer_v1::SamplingParams* sampling) {
  if (limits.max_output_tokens > 0 && (requested <= 0 || requested > limits.max_output_tokens)) {
    sampling->set_max_tokens(limits.max_output_tokens);
    sampling->set_max_tokens_is_ceiling(true);
  } else if (requested > 0) {
    sampling->set_max_tokens(static_cast<uint32_t>(requested));
  }
}

void CollectedOutput::Add(const infer_v1::Delta& delta) {
  absl::StrAppend(&text_, delta.text());
  absl::StrAppend(&reasoning_, delta.reasoning_text());
  for (const auto& lp : delta.logprobs()) *logprobs_.Add() = lp;
}

absl::Status CheckAgainstVocabulary(const GenerationSpec& spec, uint32_t vocab_size) {
  if (vocab_size == 0) return absl::OkStatus();
  const auto& ids = spec.request.token_ids().ids();
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] >= vocab_size) {
      return Invalid(
          absl::StrCat("prompt[", i, "]"),
          absl::StrCat("= ", ids[i], " is not a token id (vocabulary size ", vocab_size, ")"));
    }
  }
  const auto& stops = spec.request.sampling().stop_token_ids();
  for (int i = 0; i < stops.size(); ++i) {
    if (stops[i] >= vocab_size) {
      return Invalid(
          absl::StrCat("stop_token_ids[", i, "]"),
          absl::StrCat("= ", stops[i], " is not a token id (vocabulary size ", vocab_size, ")"));
    }
  }
  if (spec.top_logprobs > vocab_size) {
    // No param: the field is "top_logprobs" in chat but "logprobs" in legacy completions.
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs exceeds the vocabulary size ", vocab_size));
  }
  return absl::OkStatus();
}

std::string CacheKeyLabel(absl::string_view cache_key) {
  size_t n = std::min<size_t>(cache_key.size(), kCacheKeyLabelBytes);
  // Back over continuation bytes (10xxxxxx) to the start of the character the cut splits.
  while (n > 0 && n < cache_key.size() &&
         (static_cast<unsigned char>(cache_key[n]) & 0xC0) == 0x80) {
    --n;
  }
  return std::string(cache_key.substr(0, n));
}

std::string ConversationLabel(absl::string_view cache_key, const infer_v1::ChatPrompt& chat) {
  if (!cache_key.empty()) return CacheKeyLabel(cache_key);
  // The system prompt and the first user turn identify an agent conversation well enough
  // to route its later turns to the same daemon.
  // FNV-1a: stable across restarts, unlike absl's seeded hash.
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](absl::string_view s) {
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  for (const auto& m : chat.messages()) {
    mix(m.role());
    mix(m.content());
    if (m.role() == "user") break;
  }
  return absl::StrFormat("conv-%016x", h);
}

absl::Status ReadJsonSchemaFormat(const JsonFields& f, bool name_required,
                                  infer_v1::ResponseFormat* format) {
  ASSIGN_OR_RETURN(std::optional<std::string> name, f.String("name", kMaxSchemaNameBytes));
  if (!name.has_value() && name_required) return Invalid(f.Name("name"), "is required");
  if (name.has_value()) {
    const bool valid = !name->empty() && std::all_of(name->begin(), name->end(), [](char c) {
      return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    if (!valid) {
      return Invalid(f.Name("name"), "must be 1 to 64 letters, digits, underscores or dashes");
    }
  }
  RETURN_IF_ERROR(f.String("description", 1 << 20).status());
  // Accepted either way: every answer is constrained to the schema, as strict asks.
  RETURN_IF_ERROR(f.Bool("strict").status());
  ASSIGN_OR_RETURN(const Json* schema, f.Object("schema"));
  format->set_json_schema(schema != nullptr ? DumpJson(*schema) : "{}");
  return absl::OkStatus();
}

absl::Status ParseOpenAiResponseFormat(const Json& format, const std::string& field,
                                       SchemaMembers members, infer_v1::GenerateRequest* request) {
  const JsonFields f(format, field);
  ASSIGN_OR_RETURN(std::optional<std::string> type, f.String("type", 64));
  const std::string kind = type.value_or("text");
  if (kind == "text") return absl::OkStatus();
  if (kind == "json_object") {
    request->mutable_response_format()->set_json_object(true);
    return absl::OkStatus();
  }
  if (kind != "json_schema") {
    return Invalid(f.Name("type"),
                   absl::StrCat("\"", kind, "\" is not one of text, json_object, json_schema"));
  }
  if (members == SchemaMembers::kInline) {
    return ReadJsonSchemaFormat(f, /*name_required=*/true, request->mutable_response_format());
  }
  ASSIGN_OR_RETURN(const Json* schema, f.Object("json_schema"));
  if (schema == nullptr) return Invalid(f.Name("json_schema"), "is required");
  return ReadJsonSchemaFormat(JsonFields(*schema, f.Name("json_schema")), /*name_required=*/true,
                              request->mutable_response_format());
}

absl::Status CheckResponseFormatFits(const infer_v1::GenerateRequest& request,
                                     absl::string_view field, absl::string_view prefill) {
  if (request.response_format().format_case() == infer_v1::ResponseFormat::FORMAT_NOT_SET) {
    return absl::OkStatus();
  }
  const std::string& choice = request.chat().tool_choice();
  if (request.has_chat() && !choice.empty() && choice != "auto" && choice != "none") {
    return Invalid(field,
                   "cannot be combined with a tool_choice that forces a tool call: the answer "
                   "is either the tool call or the structured output");
  }
  if (request.has_chat() && request.chat().options().continue_final_message()) {
    return Invalid(field, absl::StrCat("cannot be combined with ", prefill,
                                       ": the answer must be the JSON value from its start"));
  }
  if (request.sampling().ignore_eos()) {
    return Invalid(field,
                   "cannot be combined with ignore_eos: the answer ends once its JSON value is "
                   "complete");
  }
  return absl::OkStatus();
}

}  // namespace cairn::gateway
