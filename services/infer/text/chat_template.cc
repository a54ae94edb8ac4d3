#include "services/infer/text/chat_template.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/json/json_scan.h"
#include "common/status/status_macros.h"
#include "services/infer/text/bounded_json.h"
#include "services/infer/text/file_util.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text {
namespace {

using json = nlohmann::ordered_json;

// Returns `messages` with string tool-call arguments that hold a JSON object replaced by it.
json ParseStringArguments(const json& messages) {
  json out = messages;
  for (json& m : out) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (json& call : m["tool_calls"]) {
      json* fn = call.is_object() && call.contains("function") && call["function"].is_object()
                     ? &call["function"]
                     : &call;
      if (!fn->is_object() || !fn->contains("arguments") || !(*fn)["arguments"].is_string()) {
        continue;
      }
      // Arguments nested too deep or with too large an object stay the string they came as.
      json parsed = ParseBoundedJson((*fn)["arguments"].get_ref<const std::string&>());
      if (!parsed.is_discarded() && parsed.is_object()) (*fn)["arguments"] = std::move(parsed);
    }
  }
  return out;
}

// Reads a special token from tokenizer_config.json: a string or {"content": string}.
std::optional<std::string> SpecialToken(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return std::nullopt;
}

// What a template writes after the final message's content, and where, found by rendering the
// chat once more with that content replaced by a marker no template rewrites.
constexpr absl::string_view kContentMarker = "cairnfinalmessagemarker7f3a";

// The reasoning and tool-call tags of the Qwen templates (OutputParserOptions' defaults).
constexpr absl::string_view kThinkOpen = "<think>";
constexpr absl::string_view kThinkClose = "</think>";

// Checks that the last of `messages` is the assistant's text, which continue_final_message
// can continue. InvalidArgument naming what is wrong otherwise.
absl::Status CheckContinuable(const json& messages) {
  const json* last = messages.empty() ? nullptr : &messages.back();
  if (last == nullptr || !last->is_object() || last->value("role", json()) != "assistant") {
    return absl::InvalidArgumentError(
        "continue_final_message needs the last message to be the assistant's");
  }
  if (last->contains("tool_calls") && !(*last)["tool_calls"].empty()) {
    return absl::InvalidArgumentError(
        "continue_final_message cannot continue a message with tool calls, only text");
  }
  const json content = last->value("content", json());
  if (!content.is_string() || content.get_ref<const std::string&>().empty()) {
    return absl::InvalidArgumentError(
        "continue_final_message needs the last message's content to be non-empty text");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChatRequest> ParseChatRequest(const json& request) {
  if (!request.is_object()) return absl::InvalidArgumentError("chat request must be an object");
  ChatRequest out;
  auto messages = request.find("messages");
  if (messages == request.end() || !messages->is_array()) {
    return absl::InvalidArgumentError("chat request needs a \"messages\" array");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "] must be an object with a string \"role\""));
    }
  }
  out.messages = *messages;
  for (auto it = request.begin(); it != request.end(); ++it) {
    const std::string& key = it.key();
    if (key == "messages") continue;
    if (key == "tools") {
      if (!it->is_null() && !it->is_array()) {
        return absl::InvalidArgumentError("\"tools\" must be an array");
      }
      out.tools = it->is_array() && it->empty() ? json(nullptr) : *it;
    } else if (key == "add_generation_prompt") {
      if (!it->is_boolean()) {
        return absl::InvalidArgumentError("\"add_generation_prompt\" must be a boolean");
      }
      out.add_generation_prompt = it->get<bool>();
    } else if (key == "continue_final_message") {
      if (!it->is_boolean()) {
        return absl::InvalidArgumentError("\"continue_final_message\" must be a boolean");
      }
      out.continue_final_message = it->get<bool>();
    } else if (key == "enable_thinking") {
      if (!it->is_boolean())
        return absl::InvalidArgumentError("\"enable_thinking\" must be a boolean");
      out.enable_thinking = it->get<bool>();
    } else {
      out.extra[key] = *it;
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Create(
    std::string_view source, const ChatTemplateOptions& options) {
  absl::StatusOr<std::unique_ptr<jinja::Template>> tmpl =
      jinja::Template::Parse(source, options.jinja);
  if (!tmpl.ok()) {
    return absl::Status(tmpl.status().code(),
                        absl::StrCat("chat template: ", tmpl.status().message()));
  }
  return std::unique_ptr<ChatTemplate>(
      new ChatTemplate(std::string(source), options, *std::move(tmpl)));
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromModelDir(
    const std::string& dir, ChatTemplateOptions options) {
  std::optional<std::string> source;
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) {
    ASSIGN_OR_RETURN(source, ReadFileToString(jinja_path));
  }
  const std::string config_path = dir + "/tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path));
    if (FileJsonTooDeep(text)) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, " nests deeper than ", kMaxFileJsonNesting, " levels"));
    }
    const nlohmann::json config = nlohmann::json::parse(text, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, " is not a JSON object"));
    }
    if (!options.bos_token) options.bos_token = SpecialToken(config, "bos_token");
    if (!options.eos_token) options.eos_token = SpecialToken(config, "eos_token");
    if (!options.pad_token) options.pad_token = SpecialToken(config, "pad_token");
    if (!options.unk_token) options.unk_token = SpecialToken(config, "unk_token");
    auto ct = config.find("chat_template");
    if (!source && ct != config.end()) {
      if (ct->is_string()) {
        source = ct->get<std::string>();
      } else if (ct->is_array()) {
        for (const auto& entry : *ct) {
          if (entry.is_object() && entry.contains("name") && entry["name"] == "default" &&
              entry.contains("template") && entry["template"].is_string()) {
            source = entry["template"].get<std::string>();
          }
        }
        if (!source) {
          return absl::InvalidArgumentError(
              absl::StrCat(config_path, ": chat_template list has no \"default\" entry"));
        }
      } else if (!ct->is_null()) {
        return absl::InvalidArgumentError(absl::StrCat(config_path, ": bad chat_template"));
      }
    }
  }
  // A multimodal checkpoint's processor template ({"chat_template": "..."}), which
  // AutoProcessor renders with; the tokenizer's own, above, wins where both exist.
  const std::string processor_path = dir + "/chat_template.json";
  if (!source && std::filesystem::exists(processor_path)) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(processor_path));
    const nlohmann::json processor = FileJsonTooDeep(text)
                                         ? nlohmann::json(nlohmann::json::value_t::discarded)
                                         : nlohmann::json::parse(text, nullptr, false);
    if (processor.is_discarded() || !processor.is_object() ||
        !processor.contains("chat_template") || !processor["chat_template"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(processor_path, " is not an object with a string \"chat_template\""));
    }
    source = processor["chat_template"].get<std::string>();
  }
  if (!source) {
    return absl::NotFoundError(
        absl::StrCat("no chat template in ", dir,
                     " (chat_template.jinja, tokenizer_config.json or chat_template.json)"));
  }
  return Create(*source, options);
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatRequest& request) const {
  if (!request.messages.is_array()) return absl::InvalidArgumentError("messages must be an array");
  jinja::ValueDict ctx;
  ctx.Set("messages", jinja::Value::FromJson(options_.parse_string_arguments
                                                 ? ParseStringArguments(request.messages)
                                                 : request.messages));
  ctx.Set("tools", jinja::Value::FromJson(request.tools));
  ctx.Set("documents", jinja::Value::None());
  ctx.Set("add_generation_prompt",
          jinja::Value::Bool(request.add_generation_prompt && !request.continue_final_message));
  auto set_token = [&](const char* name, const std::optional<std::string>& v) {
    if (v) ctx.Set(name, jinja::Value::String(*v));
  };
  set_token("bos_token", options_.bos_token);
  set_token("eos_token", options_.eos_token);
  set_token("pad_token", options_.pad_token);
  set_token("unk_token", options_.unk_token);
  if (request.enable_thinking)
    ctx.Set("enable_thinking", jinja::Value::Bool(*request.enable_thinking));
  if (request.extra.is_object()) {
    for (auto it = request.extra.begin(); it != request.extra.end(); ++it) {
      ctx.Set(it.key(), jinja::Value::FromJson(it.value()));
    }
  }
  ASSIGN_OR_RETURN(std::string text, template_->Render(ctx));
  if (!request.continue_final_message) return text;
  // The answer continues the final message: the render is cut where the template's text after
  // that message's content begins (its end-of-turn marker and whatever follows). That text is
  // found by rendering the chat with a marker for the content: what follows the marker there
  // must end this render too, and what precedes it must begin it. (Searching the render for
  // the content itself, as transformers does, finds a short content such as "<" or "\n"
  // inside the end-of-turn marker.)
  RETURN_IF_ERROR(CheckContinuable(request.messages));
  ChatRequest probe = request;
  probe.continue_final_message = false;
  probe.add_generation_prompt = false;
  probe.messages.back()["content"] = std::string(kContentMarker);
  ASSIGN_OR_RETURN(const std::string marked, Render(probe));
  const size_t at = absl::string_view(marked).rfind(kContentMarker);
  if (at == std::string::npos) {
    return absl::InvalidArgumentError(
        "continue_final_message: the chat template does not render the last message's content, "
        "so the answer cannot continue it");
  }
  const absl::string_view before = absl::string_view(marked).substr(0, at);
  const absl::string_view after = absl::string_view(marked).substr(at + kContentMarker.size());
  if (text.size() < before.size() + after.size() || !absl::StartsWith(text, before) ||
      !absl::EndsWith(text, after)) {
    return absl::InvalidArgumentError(
        "continue_final_message: the chat template renders the last message's content into "
        "more than its own text (e.g. moving reasoning), so the answer cannot continue it");
  }
  text.resize(text.size() - after.size());
  return text;
}

ToolCallMarkup ToolCallMarkupOf(const ChatTemplate& chat_template) {
  return absl::StrContains(chat_template.source(), "<function=") ? ToolCallMarkup::kXml
                                                                 : ToolCallMarkup::kJson;
}

std::string ForcedToolCallText(const ChatTemplate& chat_template, std::string_view function) {
  std::string text =
      absl::StrCat(absl::string_view(kToolCallOpen.data(), kToolCallOpen.size()), "\n");
  if (function.empty()) return text;
  if (ToolCallMarkupOf(chat_template) == ToolCallMarkup::kXml) {
    absl::StrAppend(&text, "<function=", absl::string_view(function.data(), function.size()),
                    ">\n");
  } else {
    // Up to the colon: the space after it is a token of its own alone, where a call written
    // whole carries it in the arguments' first token (' {"'), a split the model never saw.
    absl::StrAppend(&text, "{\"name\": ",
                    nlohmann::ordered_json(std::string(function))
                        .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                    ", \"arguments\":");
  }
  return text;
}

absl::Status CheckForcedTool(const ChatRequest& request) {
  if (request.continue_final_message) {
    return absl::InvalidArgumentError("a forced tool call cannot continue the final message");
  }
  if (!request.add_generation_prompt) {
    return absl::InvalidArgumentError("a forced tool call needs the generation prompt");
  }
  if (!request.tools.is_array() || request.tools.empty()) {
    return absl::InvalidArgumentError("a forced tool call needs tools, and the request has none");
  }
  if (request.forced_tool->empty()) return absl::OkStatus();
  // The name goes into the call's opening as it is: characters that end or break the call's
  // markup (XML templates end the name at '>'), whitespace and controls are refused.
  for (const char ch : *request.forced_tool) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7f || c == '<' || c == '>') {
      return absl::InvalidArgumentError(
          "a forced function's name may not hold whitespace, control characters, '<' or '>'");
    }
  }
  for (const nlohmann::ordered_json& tool : request.tools) {
    const nlohmann::ordered_json* fn =
        tool.is_object() && tool.contains("function") && tool["function"].is_object()
            ? &tool["function"]
            : &tool;
    if (fn->is_object() && fn->contains("name") && (*fn)["name"] == *request.forced_tool) {
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the request's tools define no function \"", *request.forced_tool, "\""));
}

namespace {

// Markers around a special token's text in a message, removed after the render: two characters
// of the private use area of plane 16 around a name with a number, all three chosen among those
// no string or key of the request holds. A message can thus neither forge a marker nor hide a
// broken one: after the render, any trace of either character or of the number means the
// template cut or escaped a marked text (the number survives escapes and case changes).
struct Markers {
  std::string first, second;  // The two characters (UTF-8).
  std::string number;         // Decimal digits.
  std::string open, close;
};

// The private use characters of plane 16 markers may take: U+100000 to U+10FFFD.
constexpr uint32_t kMarkerFirst = 0x100000;
constexpr uint32_t kMarkerCount = 0xFFFE;

// Marks in `used` the plane-16 private use characters of `s` (4-byte UTF-8 sequences F4 80-8F).
void MarkPlane16(std::string_view s, std::vector<bool>& used) {
  for (size_t i = s.find('\xF4'); i != std::string_view::npos && i + 3 < s.size();
       i = s.find('\xF4', i + 1)) {
    const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k])); };
    if (b(1) < 0x80 || b(1) > 0x8F) continue;
    const uint32_t cp = ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    if (cp < kMarkerCount) used[cp] = true;
  }
}

// Calls `fn` on every string and object key of `j`, and stops at the first true it returns.
template <typename Fn>
bool AnyText(const json& j, const Fn& fn) {
  if (j.is_string()) return fn(std::string_view(j.get_ref<const std::string&>()));
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (fn(std::string_view(it.key())) || AnyText(it.value(), fn)) return true;
    }
  } else if (j.is_array()) {
    for (const json& v : j) {
      if (AnyText(v, fn)) return true;
    }
  }
  return false;
}

// The parts of a request a render reads: its messages (string arguments parsed where the
// template's options parse them), tools and extra context.
struct RenderInputs {
  json* messages;
  json* tools;
  json* extra;
};

template <typename Fn>
bool AnyTextOf(const RenderInputs& in, const Fn& fn) {
  return AnyText(*in.messages, fn) || AnyText(*in.tools, fn) || AnyText(*in.extra, fn);
}

bool HoldsAny(std::string_view s, const std::vector<std::string>& needles) {
  return std::any_of(needles.begin(), needles.end(),
                     [&](const std::string& t) { return s.find(t) != std::string_view::npos; });
}

// Whether a string of tool-call arguments in `messages` holds a JSON escape (its parsed value,
// which the template reads, may then hold text the string does not).
bool EscapedArguments(const json& messages) {
  for (const json& m : messages) {
    const auto calls = m.is_object() ? m.find("tool_calls") : m.end();
    if (calls == m.end() || !calls->is_array()) continue;
    for (const json& call : *calls) {
      const json* fn = call.is_object() && call.contains("function") ? &call["function"] : &call;
      const auto args = fn->is_object() ? fn->find("arguments") : fn->end();
      if (args != fn->end() && args->is_string() &&
          args->get_ref<const std::string&>().find('\\') != std::string::npos) {
        return true;
      }
    }
  }
  return false;
}

// Markers for `in`; InvalidArgument where its text leaves no two characters free.
absl::StatusOr<Markers> MarkersFor(const RenderInputs& in) {
  std::vector<bool> used(kMarkerCount, false);
  AnyTextOf(in, [&](std::string_view s) {
    MarkPlane16(s, used);
    return false;
  });
  // Any free characters and number will do (the request holds none of them): a counter
  // spreads the choices, so that renders differ in their markers.
  static std::atomic<uint64_t> counter{0};
  uint64_t x = counter.fetch_add(1, std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull;
  const auto next = [&x] {
    x += 0x9E3779B97F4A7C15ull;  // SplitMix64.
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  Markers m;
  for (std::string* c : {&m.first, &m.second}) {
    const uint32_t start = static_cast<uint32_t>(next() % kMarkerCount);
    uint32_t k = 0;
    while (k < kMarkerCount && used[(start + k) % kMarkerCount]) ++k;
    if (k == kMarkerCount) {
      return absl::InvalidArgumentError(
          "the request holds a special token's text (such as <|im_end|>) and nearly every "
          "private use character of plane 16, which leaves none to keep that text as text");
    }
    const uint32_t cp = (start + k) % kMarkerCount;
    used[cp] = true;
    unicode::AppendUtf8(kMarkerFirst + cp, c);
  }
  for (int tries = 0;; ++tries) {
    m.number = absl::StrCat(next() % 9000000000000000000ull + 1000000000000000000ull);
    if (!AnyTextOf(in, [&](std::string_view s) { return s.find(m.number) != s.npos; })) break;
    if (tries == 8) {
      return absl::InvalidArgumentError(
          "the request holds a special token's text and the marker numbers chosen for it");
    }
  }
  m.open = absl::StrCat(m.first, "cairn-literal-", m.number, m.second);
  m.close = absl::StrCat(m.second, "cairn-literal-", m.number, m.first);
  return m;
}

// Wraps every occurrence of a `specials` text in `s` in the markers. Returns whether any was.
bool WrapSpecials(std::string& s, const std::vector<std::string>& specials,
                  const Markers& markers) {
  if (!HoldsAny(s, specials)) return false;
  std::string out;
  for (size_t pos = 0; pos < s.size();) {
    const std::string* longest = nullptr;
    for (const std::string& t : specials) {
      if (s.compare(pos, t.size(), t) == 0 && (longest == nullptr || t.size() > longest->size())) {
        longest = &t;
      }
    }
    if (longest == nullptr) {
      out += s[pos++];
      continue;
    }
    absl::StrAppend(&out, markers.open, *longest, markers.close);
    pos += longest->size();
  }
  s = std::move(out);
  return true;
}

// WrapSpecials over every string and key of `j`; `skip_key`'s value (a message's role) is left
// alone. An object with a key to wrap is built again in its order.
bool WrapJson(json& j, const std::vector<std::string>& specials, const Markers& markers,
              std::string_view skip_key = {}) {
  if (j.is_string()) return WrapSpecials(j.get_ref<std::string&>(), specials, markers);
  bool any = false;
  if (j.is_array()) {
    for (json& v : j) any = WrapJson(v, specials, markers) || any;
    return any;
  }
  if (!j.is_object()) return false;
  bool in_keys = false;
  for (auto it = j.begin(); it != j.end() && !in_keys; ++it) {
    in_keys = (skip_key.empty() || it.key() != skip_key) && HoldsAny(it.key(), specials);
  }
  if (!in_keys) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (skip_key.empty() || it.key() != skip_key) {
        any = WrapJson(it.value(), specials, markers) || any;
      }
    }
    return any;
  }
  json rebuilt = json::object();
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string key = it.key();
    json value = std::move(it.value());
    if (skip_key.empty() || key != skip_key) {
      WrapSpecials(key, specials, markers);
      WrapJson(value, specials, markers);
    }
    rebuilt[key] = std::move(value);
  }
  j = std::move(rebuilt);
  return true;
}

// A rendered text with the markers taken out, and the spans they enclosed.
struct Encodable {
  std::string text;
  std::vector<std::pair<size_t, size_t>> literal_spans;
};

// Removes the markers of `text`; nullopt if they do not pair up or any trace of one is left
// (a template that escaped or cut the text).
std::optional<Encodable> Unwrap(absl::string_view text, const Markers& markers) {
  Encodable out;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(markers.open, pos);
    if (open == absl::string_view::npos) break;
    const size_t inner = open + markers.open.size();
    const size_t close = text.find(markers.close, inner);
    if (close == absl::string_view::npos) return std::nullopt;
    out.text.append(text.data() + pos, open - pos);
    const size_t first = out.text.size();
    out.text.append(text.data() + inner, close - inner);
    out.literal_spans.emplace_back(first, out.text.size());
    pos = close + markers.close.size();
  }
  out.text.append(text.data() + pos, text.size() - pos);
  if (absl::StrContains(out.text, markers.first) || absl::StrContains(out.text, markers.second) ||
      absl::StrContains(out.text, markers.number)) {
    return std::nullopt;
  }
  return out;
}

// Renders `request`, with the special tokens of its messages, tool definitions and extra
// context marked as text where it asks for that.
absl::StatusOr<Encodable> RenderEncodable(const ChatTemplate& chat_template,
                                          const std::vector<std::string>& specials,
                                          const ChatRequest& request) {
  if (!request.special_tokens_as_text || specials.empty()) {
    ASSIGN_OR_RETURN(std::string text, chat_template.Render(request));
    return Encodable{std::move(text), {}};
  }
  // Most requests hold no special token's text, neither as sent nor behind a JSON escape in a
  // string of tool-call arguments: they render as they are, without a copy.
  const auto holds = [&](std::string_view s) { return HoldsAny(s, specials); };
  if (!AnyText(request.messages, holds) && !AnyText(request.tools, holds) &&
      !AnyText(request.extra, holds) &&
      !(chat_template.options().parse_string_arguments && EscapedArguments(request.messages))) {
    ASSIGN_OR_RETURN(std::string text, chat_template.Render(request));
    return Encodable{std::move(text), {}};
  }
  // What the template will read: string arguments parsed first, as Render does, so that a
  // special token written with JSON escapes (\u003c|im_end|\u003e) is seen and marked too.
  ChatRequest wrapped = request;
  if (chat_template.options().parse_string_arguments) {
    wrapped.messages = ParseStringArguments(wrapped.messages);
  }
  const RenderInputs in{&wrapped.messages, &wrapped.tools, &wrapped.extra};
  // The request is rewritten only where some string holds a special token's text, as few
  // conversations' do.
  if (!AnyTextOf(in, holds)) {
    ASSIGN_OR_RETURN(std::string text, chat_template.Render(wrapped));
    return Encodable{std::move(text), {}};
  }
  // Fails closed: a special token's text that cannot be kept as text is refused, never
  // rendered as the control token.
  for (const json& m : wrapped.messages) {
    const auto role = m.is_object() ? m.find("role") : m.end();
    if (role != m.end() && role->is_string() &&
        HoldsAny(role->get_ref<const std::string&>(), specials)) {
      return absl::InvalidArgumentError(
          "a message's role holds a special token's text (such as <|im_end|>)");
    }
  }
  ASSIGN_OR_RETURN(const Markers markers, MarkersFor(in));
  for (json& m : wrapped.messages) WrapJson(m, specials, markers, "role");
  WrapJson(wrapped.tools, specials, markers);
  WrapJson(wrapped.extra, specials, markers);
  ASSIGN_OR_RETURN(std::string text, chat_template.Render(wrapped));
  std::optional<Encodable> unwrapped = Unwrap(text, markers);
  if (!unwrapped.has_value()) {
    return absl::InvalidArgumentError(
        "the messages or tools hold a special token's text (such as <|im_end|>) that the "
        "model's chat template does not pass through whole, so it cannot be kept as text");
  }
  return *std::move(unwrapped);
}

absl::StatusOr<std::vector<TokenId>> EncodeRendered(const Tokenizer& tokenizer,
                                                    const Encodable& rendered,
                                                    size_t max_tokens = 0) {
  EncodeOptions options;
  options.literal_spans = rendered.literal_spans;
  options.max_tokens = max_tokens;
  return tokenizer.Encode(rendered.text, options);
}

}  // namespace

absl::StatusOr<RenderedPrompt> RenderPrompt(const ChatTemplate& chat_template,
                                            const Tokenizer& tokenizer, const ChatRequest& request,
                                            const StableBoundaryOptions& options) {
  RenderedPrompt out;
  std::vector<std::string> specials;
  for (const AddedToken& t : tokenizer.added_tokens()) {
    if (t.special && !t.content.empty()) specials.push_back(t.content);
  }
  Encodable rendered;
  if (request.forced_tool.has_value() || request.without_reasoning) {
    if (request.forced_tool.has_value()) RETURN_IF_ERROR(CheckForcedTool(request));
    // A forced call (or a structured answer) answers at once: rendered without reasoning, and a
    // reasoning block the template opens anyway is closed empty (Anthropic's API refuses
    // thinking with a forced tool, too).
    ChatRequest plain = request;
    plain.enable_thinking = false;
    ASSIGN_OR_RETURN(rendered, RenderEncodable(chat_template, specials, plain));
    if (absl::EndsWith(rendered.text, absl::StrCat(kThinkOpen, "\n"))) {
      absl::StrAppend(&rendered.text, "\n", kThinkClose, "\n\n");
    }
    if (request.forced_tool.has_value()) {
      out.forced_text = ForcedToolCallText(chat_template, *request.forced_tool);
      rendered.text += out.forced_text;
    }
  } else {
    ASSIGN_OR_RETURN(rendered, RenderEncodable(chat_template, specials, request));
  }
  ASSIGN_OR_RETURN(out.ids, EncodeRendered(tokenizer, rendered, request.max_prompt_tokens));
  out.text = std::move(rendered.text);

  ChatRequest next = request;
  next.add_generation_prompt = false;
  next.continue_final_message = false;
  next.messages.push_back({{"role", "assistant"}, {"content", options.placeholder_answer}});
  next.messages.push_back({{"role", "user"}, {"content", options.placeholder_question}});
  // The boundary is a caching hint: if the template rejects the placeholder turns, the request
  // itself is still fine, and no prefix is promised (boundary 0).
  absl::StatusOr<Encodable> next_text = RenderEncodable(chat_template, specials, next);
  if (!next_text.ok()) return out;
  ASSIGN_OR_RETURN(std::vector<TokenId> next_ids, EncodeRendered(tokenizer, *next_text));
  const auto mismatch =
      std::mismatch(out.ids.begin(), out.ids.end(), next_ids.begin(), next_ids.end());
  out.stable_boundary = static_cast<size_t>(mismatch.first - out.ids.begin());

  // The preamble another conversation would share: the leading system messages and the tools.
  ChatRequest preamble = request;
  preamble.add_generation_prompt = false;
  preamble.continue_final_message = false;
  preamble.messages = nlohmann::ordered_json::array();
  for (const nlohmann::ordered_json& m : request.messages) {
    const nlohmann::ordered_json* role = m.is_object() && m.contains("role") ? &m["role"] : nullptr;
    if (role == nullptr || !role->is_string() || (*role != "system" && *role != "developer")) {
      break;
    }
    preamble.messages.push_back(m);
  }
  preamble.messages.push_back({{"role", "user"}, {"content", options.placeholder_question}});
  absl::StatusOr<Encodable> preamble_text = RenderEncodable(chat_template, specials, preamble);
  if (!preamble_text.ok()) return out;
  ASSIGN_OR_RETURN(std::vector<TokenId> preamble_ids, EncodeRendered(tokenizer, *preamble_text));
  const auto shared =
      std::mismatch(out.ids.begin(), out.ids.end(), preamble_ids.begin(), preamble_ids.end());
  out.shared_boundary = static_cast<size_t>(shared.first - out.ids.begin());
  return out;
}

}  // namespace cairn::infer::text
