#include "services/infer/text/output_parser.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/infer/text/bounded_json.h"
#include "services/infer/text/jinja_value.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text {
namespace {

using json = nlohmann::ordered_json;

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsWs(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsWs(s.back())) s.remove_suffix(1);
  return s;
}

// json.dumps(value, ensure_ascii=False): the serialisation templates use for arguments.
std::string DumpArguments(const json& args) {
  absl::StatusOr<std::string> s = jinja::Value::FromJson(args).ToJson();
  return s.ok() ? *s : args.dump();
}

// Returns the "properties" object of tool `name`'s parameters in OpenAI `tools`, or null.
const json* ToolProperties(const json& tools, const std::string& name) {
  if (!tools.is_array()) return nullptr;
  for (const json& t : tools) {
    // Any shape may come from a client: every lookup checks the type it reads (a tool whose
    // name is not a string is skipped, never compared).
    const json* fn = t.is_object() && t.contains("function") ? &t["function"] : &t;
    if (!fn->is_object()) continue;
    const auto n = fn->find("name");
    if (n == fn->end() || !n->is_string() || n->get_ref<const std::string&>() != name) continue;
    const auto params = fn->find("parameters");
    if (params == fn->end() || !params->is_object()) return nullptr;
    const auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) return nullptr;
    return &*props;
  }
  return nullptr;
}

// Returns the schema of parameter `param` of tool `name` in OpenAI `tools`, or null.
const json* ParamSchema(const json& tools, const std::string& name, const std::string& param) {
  const json* props = ToolProperties(tools, name);
  if (props == nullptr) return nullptr;
  const auto prop = props->find(param);
  return prop == props->end() ? nullptr : &*prop;
}

// Where the value of an XML-form parameter that starts at `start` of `rest` (the parameters
// left, up to </function>) ends, and where the next parameter starts. The value ends at the
// first </parameter> that the end or another <parameter= follows (a value may hold such tags
// itself: a shell heredoc about this markup). Where a line opening another parameter of the
// tool comes first, the model left out the close (Qwen3.5 does at long contexts) and the value
// ends before that line; without any close, at the end.
struct XmlValueEnd {
  size_t value_end;
  size_t next;
};
XmlValueEnd FindXmlValueEnd(std::string_view rest, size_t start, const json* properties) {
  constexpr std::string_view kParamOpen = "<parameter=";
  constexpr std::string_view kParamClose = "</parameter>";
  constexpr std::string_view kLineParamOpen = "\n<parameter=";
  size_t close = std::string_view::npos;
  for (size_t c = rest.find(kParamClose, start); c != std::string_view::npos;
       c = rest.find(kParamClose, c + 1)) {
    std::string_view after = rest.substr(c + kParamClose.size());
    while (!after.empty() && IsWs(after.front())) after.remove_prefix(1);
    if (after.empty() || after.substr(0, kParamOpen.size()) == kParamOpen) {
      close = c;
      break;
    }
  }
  const size_t limit = close == std::string_view::npos ? rest.size() : close;
  for (size_t p = rest.find(kLineParamOpen, start); p != std::string_view::npos && p < limit;
       p = rest.find(kLineParamOpen, p + 1)) {
    const size_t key_start = p + kLineParamOpen.size();
    const size_t key_end = rest.find('>', key_start);
    if (key_end == std::string_view::npos) break;
    const std::string key(Trim(rest.substr(key_start, key_end - key_start)));
    // Without a schema any parameter's line counts; with one, only the tool's own parameters.
    if (properties == nullptr || properties->contains(key)) return {p, p + 1};
  }
  if (close == std::string_view::npos) return {rest.size(), rest.size()};
  return {close, close + kParamClose.size()};
}

// The type names `schema` gives ("type", a name or a list); with `branches`, those of its anyOf
// and oneOf members too (one level). nullopt where a place that decides the type names none (a
// member without "type", a "type" that is not names).
std::optional<std::vector<std::string>> NamedTypes(const json& schema, bool branches) {
  if (!schema.is_object()) return std::nullopt;
  std::vector<std::string> types;
  if (const auto type = schema.find("type"); type != schema.end()) {
    if (type->is_string()) {
      types.push_back(type->get<std::string>());
    } else if (type->is_array()) {
      for (const json& t : *type) {
        if (!t.is_string()) return std::nullopt;
        types.push_back(t.get<std::string>());
      }
    } else {
      return std::nullopt;
    }
  }
  bool named = !types.empty();
  if (branches) {
    for (const char* key : {"anyOf", "oneOf"}) {
      const auto members = schema.find(key);
      if (members == schema.end()) continue;
      if (!members->is_array() || members->empty()) return std::nullopt;
      for (const json& m : *members) {
        std::optional<std::vector<std::string>> more = NamedTypes(m, false);
        if (!more.has_value()) return std::nullopt;
        types.insert(types.end(), more->begin(), more->end());
      }
      named = true;
    }
  }
  if (!named) return std::nullopt;
  return types;
}

// Parses {"name": ..., "arguments": {...} | "json string"} into `call`; false if malformed.
bool ParseJsonCall(std::string_view body, ToolCall* call) {
  const json j = ParseBoundedJson(Trim(body));
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) {
    return false;
  }
  call->name = j["name"].get<std::string>();
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  if (!j.contains(key)) {
    call->arguments = "{}";
    return true;
  }
  const json& args = j[key];
  if (args.is_object()) {
    call->arguments = DumpArguments(args);
    return true;
  }
  if (args.is_string()) {
    const json parsed = ParseBoundedJson(args.get_ref<const std::string&>());
    if (parsed.is_discarded() || !parsed.is_object()) return false;
    call->arguments = DumpArguments(parsed);
    return true;
  }
  return false;
}

// Strips one leading and one trailing newline, as the XML form writes them around values.
std::string_view StripOneNewline(std::string_view v) {
  if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
  if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
  return v;
}

// Parses <function=NAME>(<parameter=K>V</parameter>)*</function>; false if malformed.
bool ParseXmlCall(std::string_view body, const json& tools, ToolCall* call) {
  std::string_view s = Trim(body);
  constexpr std::string_view kFnOpen = "<function=";
  constexpr std::string_view kFnClose = "</function>";
  constexpr std::string_view kParamOpen = "<parameter=";
  if (s.substr(0, kFnOpen.size()) != kFnOpen || s.size() < kFnClose.size() ||
      s.substr(s.size() - kFnClose.size()) != kFnClose) {
    return false;
  }
  const size_t name_end = s.find('>');
  call->name = std::string(Trim(s.substr(kFnOpen.size(), name_end - kFnOpen.size())));
  if (call->name.empty() || call->name.find('\n') != std::string::npos) return false;
  std::string_view rest = s.substr(name_end + 1, s.size() - kFnClose.size() - name_end - 1);
  const json* properties = ToolProperties(tools, call->name);
  json args = json::object();
  while (true) {
    rest = Trim(rest);
    if (rest.empty()) break;
    if (rest.substr(0, kParamOpen.size()) != kParamOpen) return false;
    const size_t key_end = rest.find('>');
    if (key_end == std::string_view::npos) return false;
    const std::string key(Trim(rest.substr(kParamOpen.size(), key_end - kParamOpen.size())));
    if (key.empty()) return false;
    const XmlValueEnd end = FindXmlValueEnd(rest, key_end + 1, properties);
    const std::string_view raw =
        StripOneNewline(rest.substr(key_end + 1, end.value_end - key_end - 1));
    const json* schema = ParamSchema(tools, call->name, key);
    json value = std::string(raw);
    if (schema != nullptr && !XmlParamIsString(*schema)) {
      json parsed = ParseBoundedJson(raw);
      if (!parsed.is_discarded()) {
        value = std::move(parsed);
      } else if (raw == "True" || raw == "False") {
        // Templates that render values with Jinja's `string` filter write Python's spellings
        // (Qwen3.5's: True, False, None), and models trained on them write them back.
        value = raw == "True";
      } else if (raw == "None") {
        value = nullptr;
      }
    }
    args[key] = std::move(value);
    rest = rest.substr(end.next);
  }
  call->arguments = DumpArguments(args);
  return true;
}

}  // namespace

bool XmlParamIsString(const nlohmann::ordered_json& param) {
  const std::optional<std::vector<std::string>> types = NamedTypes(param, true);
  return !types.has_value() || std::find(types->begin(), types->end(), "string") != types->end();
}

void ParsedOutput::Append(ParsedOutput other) {
  reasoning_content += other.reasoning_content;
  content += other.content;
  for (auto& c : other.tool_calls) tool_calls.push_back(std::move(c));
  for (auto& w : other.warnings) warnings.push_back(std::move(w));
}

OutputParser::OutputParser(OutputParserOptions options)
    : options_(std::move(options)),
      mode_(options_.starts_in_reasoning && options_.parse_reasoning ? Mode::kReasoning
                                                                     : Mode::kContent),
      at_reasoning_start_(mode_ == Mode::kReasoning) {
  if (!options_.prompt_tail.empty()) pending_ = Push(options_.prompt_tail);
}

ParsedOutput OutputParser::Push(std::string_view text) {
  ParsedOutput out = std::exchange(pending_, ParsedOutput());
  if (finished_) return out;
  buffer_.append(text);
  Process(/*final=*/false, &out);
  return out;
}

ParsedOutput OutputParser::Finish() {
  ParsedOutput out = std::exchange(pending_, ParsedOutput());
  if (finished_) return out;
  Process(/*final=*/true, &out);
  if (mode_ == Mode::kToolCall) {
    out.warnings.push_back(
        absl::StrCat("unterminated tool call returned as content: ", options_.tool_open, buffer_));
    EmitContent(options_.tool_open + buffer_, &out);
  } else if (mode_ == Mode::kReasoning) {
    out.reasoning_content += buffer_;
  } else {
    EmitContent(buffer_, &out);
  }
  buffer_.clear();
  // Trailing whitespace of the answer is kept unless tool calls were made.
  if (tool_calls_ == 0) out.content += held_whitespace_;
  held_whitespace_.clear();
  finished_ = true;
  return out;
}

// Length of the longest suffix of `text` that is a proper prefix of a tag this mode looks for.
size_t OutputParser::HeldPrefix(std::string_view text, bool content_mode) const {
  std::vector<const std::string*> tags;
  if (content_mode) {
    if (options_.parse_reasoning && think_open_allowed_) tags.push_back(&options_.think_open);
    if (options_.parse_tool_calls) tags.push_back(&options_.tool_open);
  } else if (mode_ == Mode::kReasoning) {
    tags.push_back(&options_.think_close);
    if (options_.parse_tool_calls) tags.push_back(&options_.tool_open);
  } else {
    tags.push_back(&options_.tool_close);
  }
  size_t best = 0;
  for (const std::string* tag : tags) {
    for (size_t len = std::min(tag->size() - 1, text.size()); len > best; --len) {
      if (text.substr(text.size() - len) == std::string_view(*tag).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

void OutputParser::EmitContent(std::string_view text, ParsedOutput* out) {
  if (after_think_close_) {
    while (!text.empty() && (text.front() == '\n' || text.front() == '\r')) text.remove_prefix(1);
    if (!text.empty()) after_think_close_ = false;
  }
  if (text.empty()) return;
  // Whitespace is held until non-whitespace content follows it.
  size_t end = text.size();
  while (end > 0 && IsWs(text[end - 1])) --end;
  if (end > 0) {
    out->content += held_whitespace_;
    held_whitespace_.clear();
    out->content.append(text.substr(0, end));
    think_open_allowed_ = false;
  }
  held_whitespace_.append(text.substr(end));
}

void OutputParser::CompleteToolCall(std::string_view body, ParsedOutput* out) {
  ToolCall call;
  const std::string_view trimmed = Trim(body);
  const bool xml =
      options_.format == ToolCallFormat::kXml ||
      (options_.format == ToolCallFormat::kAuto && trimmed.substr(0, 10) == "<function=");
  const bool ok = xml ? ParseXmlCall(body, options_.tools, &call) : ParseJsonCall(body, &call);
  if (!ok) {
    const std::string raw = absl::StrCat(options_.tool_open, Av(body), options_.tool_close);
    out->warnings.push_back(absl::StrCat("malformed tool call returned as content: ", raw));
    out->content += held_whitespace_;
    held_whitespace_.clear();
    out->content += raw;
    return;
  }
  call.id = absl::StrCat(options_.tool_call_id_prefix, tool_calls_);
  ++tool_calls_;
  held_whitespace_.clear();  // Whitespace before a tool call is dropped.
  out->tool_calls.push_back(std::move(call));
}

void OutputParser::Process(bool final, ParsedOutput* out) {
  while (true) {
    if (mode_ == Mode::kReasoning) {
      if (at_reasoning_start_) {
        size_t k = 0;
        while (k < buffer_.size() && (buffer_[k] == '\n' || buffer_[k] == '\r')) ++k;
        buffer_.erase(0, k);
        if (buffer_.empty()) return;
        at_reasoning_start_ = false;
      }
      const size_t close = buffer_.find(options_.think_close);
      const size_t call =
          options_.parse_tool_calls ? buffer_.find(options_.tool_open) : std::string::npos;
      if (close != std::string::npos) {
        // A call opened before the close was a draft inside the reasoning.
        std::string_view r(buffer_.data(), close);
        while (!r.empty() && (r.back() == '\n' || r.back() == '\r')) r.remove_suffix(1);
        out->reasoning_content.append(r);
        buffer_.erase(0, close + options_.think_close.size());
        mode_ = Mode::kContent;
        after_think_close_ = true;
        think_open_allowed_ = false;
        continue;
      }
      if (call != std::string::npos) {
        // A call opened with the reasoning still open (Qwen3.5 sometimes leaves out the
        // </think>): held from its opening, it is reasoning if a </think> follows (a draft),
        // and the answer if the output ends first.
        size_t emit = call;
        while (emit > 0 && (buffer_[emit - 1] == '\n' || buffer_[emit - 1] == '\r')) --emit;
        out->reasoning_content.append(buffer_, 0, emit);
        buffer_.erase(0, emit);
        if (!final) return;
        mode_ = Mode::kContent;
        think_open_allowed_ = false;
        continue;
      }
      if (final) return;
      // Hold a partial closing tag and trailing newlines (they may precede the tag).
      size_t keep = HeldPrefix(buffer_, false);
      size_t emit = buffer_.size() - keep;
      while (emit > 0 && (buffer_[emit - 1] == '\n' || buffer_[emit - 1] == '\r')) --emit;
      out->reasoning_content.append(buffer_, 0, emit);
      buffer_.erase(0, emit);
      return;
    }
    if (mode_ == Mode::kToolCall) {
      const size_t close = buffer_.find(options_.tool_close);
      if (close == std::string::npos) return;  // Held until closed (or Finish).
      CompleteToolCall(std::string_view(buffer_.data(), close), out);
      buffer_.erase(0, close + options_.tool_close.size());
      mode_ = Mode::kContent;
      continue;
    }
    // Content: find the earliest tag. A reasoning block opens only at the answer's start (after
    // whitespace at most): later, "<think>" is text the answer is about.
    size_t think = options_.parse_reasoning && think_open_allowed_
                       ? buffer_.find(options_.think_open)
                       : std::string::npos;
    if (think != std::string::npos && !Trim(std::string_view(buffer_.data(), think)).empty()) {
      think = std::string::npos;
    }
    size_t tool = options_.parse_tool_calls ? buffer_.find(options_.tool_open) : std::string::npos;
    const size_t next = std::min(think, tool);
    if (next != std::string::npos) {
      EmitContent(std::string_view(buffer_.data(), next), out);
      if (next == think) {
        buffer_.erase(0, next + options_.think_open.size());
        mode_ = Mode::kReasoning;
        at_reasoning_start_ = true;
      } else {
        buffer_.erase(0, next + options_.tool_open.size());
        mode_ = Mode::kToolCall;
        think_open_allowed_ = false;
      }
      continue;
    }
    if (final) return;
    const size_t keep = HeldPrefix(buffer_, true);
    EmitContent(std::string_view(buffer_.data(), buffer_.size() - keep), out);
    buffer_.erase(0, buffer_.size() - keep);
    return;
  }
}

ParsedOutput ParseOutput(std::string_view text, const OutputParserOptions& options) {
  OutputParser parser(options);
  ParsedOutput out = parser.Push(text);
  out.Append(parser.Finish());
  return out;
}

}  // namespace cairn::infer::text
