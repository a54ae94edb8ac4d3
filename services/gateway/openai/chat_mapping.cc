#include "services/gateway/openai/chat_mapping.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "services/gateway/openai/chat_formatters.h"

namespace cairn::gateway {

namespace {

constexpr int64_t kMaxSeed = std::numeric_limits<int64_t>::max();

// The error about one request field, named in OpenAI's "param" too (InvalidField).
absl::Status Invalid(const std::string& field, absl::string_view what) {
  return InvalidField(field, what);
}

}  // namespace

std::string MediaPlaceholder(absl::string_view type) {
  return absl::StrCat("[", type, " omitted: this server reads text only]");
}

MediaParts MediaPartsFor(absl::string_view role, bool last) {
  return role == "user" && last ? MediaParts::kRefuse : MediaParts::kPlaceholder;
}

absl::StatusOr<std::optional<std::string>> TextBlockText(const JsonFields& block,
                                                         absl::string_view type,
                                                         const RequestLimits& limits) {
  std::vector<std::string> lines;
  ASSIGN_OR_RETURN(std::optional<std::string> title,
                   block.String("title", limits.max_string_bytes));
  if (title.has_value() && !title->empty()) lines.push_back(*std::move(title));
  // The text blocks under `owner` (a search_result, or a document's "content" source).
  const auto blocks_text = [&](const JsonFields& owner) -> absl::Status {
    const Json* content = owner.Get("content");
    if (content == nullptr) return Invalid(owner.Name("content"), "is required");
    ASSIGN_OR_RETURN(std::string body, ContentText(*content, owner.Name("content"), limits,
                                                   ContentAuthor::kAny, MediaParts::kPlaceholder));
    lines.push_back(std::move(body));
    return absl::OkStatus();
  };
  if (type == "search_result") {
    ASSIGN_OR_RETURN(std::optional<std::string> source,
                     block.String("source", limits.max_string_bytes));
    if (source.has_value() && !source->empty()) lines.push_back(*std::move(source));
    RETURN_IF_ERROR(blocks_text(block));
  } else {
    ASSIGN_OR_RETURN(const Json* source_json, block.Object("source"));
    if (source_json == nullptr) return Invalid(block.Name("source"), "is required");
    const JsonFields source(*source_json, block.Name("source"));
    ASSIGN_OR_RETURN(std::optional<std::string> kind, source.String("type", 64));
    if (kind != "text" && kind != "content") return std::optional<std::string>();  // Media.
    ASSIGN_OR_RETURN(std::optional<std::string> context,
                     block.String("context", limits.max_string_bytes));
    if (context.has_value() && !context->empty()) lines.push_back(*std::move(context));
    if (*kind == "text") {
      ASSIGN_OR_RETURN(std::optional<std::string> data,
                       source.String("data", limits.max_string_bytes));
      if (!data.has_value()) return Invalid(source.Name("data"), "is required");
      lines.push_back(*std::move(data));
    } else {
      RETURN_IF_ERROR(blocks_text(source));
    }
  }
  std::string text = absl::StrJoin(lines, "\n");
  if (text.size() > limits.max_string_bytes) {
    return Invalid(block.path(),
                   absl::StrCat("is longer than ", limits.max_string_bytes, " bytes"));
  }
  return text;
}

absl::StatusOr<std::string> ContentText(const Json& content, const std::string& field,
                                        const RequestLimits& limits, ContentAuthor author,
                                        MediaParts media) {
  if (content.is_null()) return std::string();
  if (content.is_string()) {
    const std::string& s = content.get_ref<const std::string&>();
    if (s.size() > limits.max_string_bytes) {
      return Invalid(field, absl::StrCat("is longer than ", limits.max_string_bytes, " bytes"));
    }
    return s;
  }
  if (!content.is_array()) {
    return Invalid(
        field, absl::StrCat("must be a string or an array of parts, not ", JsonTypeName(content)));
  }
  if (content.size() > limits.max_content_parts) {
    return Invalid(field, absl::StrCat("has more than ", limits.max_content_parts, " parts"));
  }
  // Text parts are joined with newlines, as vLLM joins them: parts are separate pieces of text
  // (an Anthropic system prompt's blocks, a tool result's), and run together their words would
  // merge.
  std::string text;
  const auto too_long = [&] {
    return Invalid(field, absl::StrCat("is longer than ", limits.max_string_bytes, " bytes"));
  };
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_name = absl::StrCat(field, "[", i, "]");
    const Json& part = content[i];
    const char* separator = i == 0 ? "" : "\n";
    if (part.is_string()) {  // Some clients send bare strings.
      absl::StrAppend(&text, separator, part.get_ref<const std::string&>());
      if (text.size() > limits.max_string_bytes) return too_long();
      continue;
    }
    JsonFields p(part, part_name);
    if (!part.is_object()) return Invalid(part_name, "must be an object");
    ASSIGN_OR_RETURN(std::optional<std::string> type, p.String("type", 64));
    if (!type.has_value()) return Invalid(p.Name("type"), "is required");
    if (*type == "text" || *type == "input_text" || *type == "output_text") {
      ASSIGN_OR_RETURN(std::optional<std::string> t, p.String("text", limits.max_string_bytes));
      if (!t.has_value()) return Invalid(p.Name("text"), "is required");
      absl::StrAppend(&text, separator, *t);
    } else if (*type == "refusal") {
      // OpenAI answers a refusal as such a part (or as the message's "refusal"), and a client
      // replaying the conversation sends it back: it is what the assistant said.
      if (author != ContentAuthor::kAssistant) {
        return Invalid(part_name, "is a refusal part, which only an assistant message may hold");
      }
      ASSIGN_OR_RETURN(std::optional<std::string> t, p.String("refusal", limits.max_string_bytes));
      if (!t.has_value()) return Invalid(p.Name("refusal"), "is required");
      absl::StrAppend(&text, separator, *t);
    } else if (*type == "document" || *type == "search_result") {
      // Anthropic's, in a tool result or a system prompt: Claude Code's Read tool answers a
      // PDF with a document block.
      ASSIGN_OR_RETURN(std::optional<std::string> t, TextBlockText(p, *type, limits));
      if (t.has_value()) {
        absl::StrAppend(&text, separator, *t);
      } else if (media == MediaParts::kRefuse) {
        return Invalid(part_name, absl::StrCat("is a media part (", *type,
                                               "); this server accepts text only"));
      } else {
        absl::StrAppend(&text, separator, MediaPlaceholder(*type));
      }
    } else if (*type == "image_url" || *type == "input_image" || *type == "input_audio" ||
               *type == "file" || *type == "input_file" || *type == "image" ||
               *type == "video_url") {
      if (media == MediaParts::kRefuse) {
        return Invalid(part_name, absl::StrCat("is a media part (", *type,
                                               "); this server accepts text only"));
      }
      absl::StrAppend(&text, separator, MediaPlaceholder(*type));
    } else {
      return Invalid(p.Name("type"), absl::StrCat("\"", *type, "\" is not a known part type"));
    }
    if (text.size() > limits.max_string_bytes) return too_long();
  }
  return text;
}

namespace {

absl::Status ParseToolCalls(const Json& calls, const std::string& field,
                            const RequestLimits& limits, infer_v1::ChatMessage* m) {
  return ForEachObject(calls, field, limits.max_tools, [&](const JsonFields& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<std::string> id, c.String("id", 256));
    ASSIGN_OR_RETURN(const Json* fn, c.Object("function"));
    if (fn == nullptr) return Invalid(c.Name("function"), "is required");
    JsonFields f(*fn, c.Name("function"));
    ASSIGN_OR_RETURN(std::optional<std::string> fname, f.String("name", 256));
    if (!fname.has_value() || fname->empty()) return Invalid(f.Name("name"), "is required");
    infer_v1::ToolCall* call = m->add_tool_calls();
    call->set_id(id.value_or(""));
    call->set_name(*fname);
    const Json* args = f.Get("arguments");
    if (args == nullptr) {
      call->set_arguments_json("{}");
    } else if (args->is_string()) {
      call->set_arguments_json(args->get<std::string>());
    } else if (args->is_object()) {  // Lenient: some clients send the object itself.
      call->set_arguments_json(DumpJson(*args));
    } else {
      return Invalid(f.Name("arguments"), "must be a JSON string");
    }
    return absl::OkStatus();
  });
}

absl::Status ParseTools(const JsonFields& top, const RequestLimits& limits,
                        infer_v1::ChatPrompt* chat) {
  const Json* tools = top.Get("tools");
  if (tools == nullptr) return absl::OkStatus();
  return ForEachObject(*tools, "tools", limits.max_tools, [&](const JsonFields& t) -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<std::string> type, t.String("type", 64));
    if (type.value_or("function") != "function") {
      return Invalid(t.Name("type"),
                     absl::StrCat("\"", *type, "\" is not supported; only function tools are"));
    }
    ASSIGN_OR_RETURN(const Json* fn, t.Object("function"));
    if (fn == nullptr) return Invalid(t.Name("function"), "is required");
    return AddFunctionTool(JsonFields(*fn, t.Name("function")), "parameters", limits, chat)
        .status();
  });
}

absl::Status AddChatMessage(const JsonFields& f, const RequestLimits& limits, bool last,
                            infer_v1::ChatPrompt* chat) {
  ASSIGN_OR_RETURN(std::optional<std::string> role, f.String("role", 32));
  if (!role.has_value()) return Invalid(f.Name("role"), "is required");
  if (*role == "developer") role = "system";
  if (*role == "function") {
    return Invalid(f.Name("role"),
                   "\"function\" is the deprecated role of a function's result, which this server "
                   "does not take; send the result as role \"tool\" with the call's tool_call_id");
  }
  if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool") {
    return Invalid(f.Name("role"), absl::StrCat("\"", *role, "\" is not a known role"));
  }
  infer_v1::ChatMessage* m = chat->add_messages();
  m->set_role(*role);
  const ContentAuthor content_author =
      *role == "assistant" ? ContentAuthor::kAssistant : ContentAuthor::kAny;
  if (const Json* content = f.Get("content"); content != nullptr) {
    ASSIGN_OR_RETURN(std::string text, ContentText(*content, f.Name("content"), limits,
                                                   content_author, MediaPartsFor(*role, last)));
    m->set_content(std::move(text));
  }
  ASSIGN_OR_RETURN(std::optional<std::string> author, f.String("name", 256));
  if (author.has_value()) m->set_name(*author);
  if (*role == "assistant") {
    // An answer OpenAI refused carries its words in "refusal" (content null); replayed, they
    // are the assistant's text, after any content.
    ASSIGN_OR_RETURN(std::optional<std::string> refusal,
                     f.String("refusal", limits.max_string_bytes));
    if (refusal.has_value() && !refusal->empty()) {
      if (m->content().size() + refusal->size() + 1 > limits.max_string_bytes) {
        return Invalid(f.Name("content"), absl::StrCat("is longer than ", limits.max_string_bytes,
                                                       " bytes with the refusal"));
      }
      absl::StrAppend(m->mutable_content(), m->content().empty() ? "" : "\n", *refusal);
    }
    ASSIGN_OR_RETURN(std::optional<std::string> reasoning,
                     f.String("reasoning_content", limits.max_string_bytes));
    if (!reasoning.has_value()) {
      ASSIGN_OR_RETURN(reasoning, f.String("reasoning", limits.max_string_bytes));
    }
    if (reasoning.has_value()) m->set_reasoning_content(*reasoning);
    if (f.Get("function_call") != nullptr) {
      return Invalid(f.Name("function_call"),
                     "is the deprecated form of tool_calls, which this server does not take; "
                     "send the call in tool_calls, with an id its tool message names");
    }
    if (const Json* calls = f.Get("tool_calls"); calls != nullptr) {
      RETURN_IF_ERROR(ParseToolCalls(*calls, f.Name("tool_calls"), limits, m));
    }
  }
  if (*role == "tool") {
    ASSIGN_OR_RETURN(std::optional<std::string> call_id, f.String("tool_call_id", 256));
    if (call_id.has_value()) m->set_tool_call_id(*call_id);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> AddFunctionTool(const JsonFields& f, const char* schema_field,
                                            const RequestLimits& limits, infer_v1::ChatPrompt* chat,
                                            absl::string_view name_prefix) {
  ASSIGN_OR_RETURN(std::optional<std::string> name, f.String("name", 256));
  if (!name.has_value() || name->empty()) return Invalid(f.Name("name"), "is required");
  name->insert(0, std::string(name_prefix));
  ASSIGN_OR_RETURN(std::optional<std::string> description,
                   f.String("description", limits.max_string_bytes));
  ASSIGN_OR_RETURN(const Json* schema, f.Object(schema_field));
  Json function = {{"name", *name}};
  if (description.has_value()) function["description"] = *description;
  function["parameters"] = schema == nullptr ? Json{{"type", "object"}} : *schema;
  ASSIGN_OR_RETURN(std::optional<bool> strict, f.Bool("strict"));
  infer_v1::Tool* tool = chat->add_tools();
  tool->set_json(DumpJson({{"type", "function"}, {"function", function}}));
  tool->set_strict(strict.value_or(false));
  return *name;
}

absl::Status ParseToolChoice(const JsonFields& top, infer_v1::ChatPrompt* chat) {
  const Json* choice = top.Get("tool_choice");
  if (choice == nullptr) return absl::OkStatus();
  if (choice->is_string()) {
    const std::string& s = choice->get_ref<const std::string&>();
    if (s != "auto" && s != "none" && s != "required") {
      return Invalid("tool_choice", "must be \"auto\", \"none\", \"required\" or an object");
    }
    chat->set_tool_choice(s);
    return absl::OkStatus();
  }
  if (!choice->is_object()) return Invalid("tool_choice", "must be a string or an object");
  // Chat names the function in {"function": {"name"}}, the Responses API in {"name"}.
  JsonFields c(*choice, "tool_choice");
  ASSIGN_OR_RETURN(const Json* fn, c.Object("function"));
  JsonFields named = fn == nullptr ? c : JsonFields(*fn, "tool_choice.function");
  ASSIGN_OR_RETURN(std::optional<std::string> name, named.String("name", 256));
  if (!name.has_value() || name->empty()) return Invalid(named.Name("name"), "is required");
  RETURN_IF_ERROR(CheckForcedName(*name, named.Name("name")));
  chat->set_tool_choice(*name);
  return absl::OkStatus();
}

absl::Status CheckForcedName(const std::string& name, const std::string& field) {
  // The daemon's tool_choice holds a mode or a function's name in one string.
  if (name == "auto" || name == "none" || name == "required") {
    return Invalid(field, absl::StrCat("\"", name,
                                       "\" is a tool_choice mode; a function of that name "
                                       "cannot be forced"));
  }
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7f || c == '<' || c == '>') {
      return Invalid(field,
                     "may not hold whitespace, control characters, '<' or '>' (it is written into "
                     "the tool call's opening)");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckForcedToolChoice(const infer_v1::ChatPrompt& chat) {
  const std::string& choice = chat.tool_choice();
  if (choice.empty() || choice == "auto" || choice == "none") return absl::OkStatus();
  if (chat.options().continue_final_message()) {
    return Invalid("tool_choice",
                   "cannot force a tool call while the final assistant message is continued");
  }
  if (chat.tools_size() == 0) {
    return Invalid("tool_choice", "forces a tool call, but the request has no tools");
  }
  if (choice == "required") return absl::OkStatus();
  for (const infer_v1::Tool& tool : chat.tools()) {
    const Json t = Json::parse(tool.json(), nullptr, /*allow_exceptions=*/false);
    const Json* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (fn != nullptr && fn->is_object() && fn->contains("name") && (*fn)["name"] == choice) {
      return absl::OkStatus();
    }
  }
  return Invalid("tool_choice", absl::StrCat("names the function \"", choice,
                                             "\", which the tools do not define"));
}

absl::Status ParseChatMessages(const Json& messages, const std::string& field,
                               const RequestLimits& limits, infer_v1::ChatPrompt* chat) {
  if (messages.is_array() && messages.empty()) return Invalid(field, "must not be empty");
  size_t index = 0;
  return ForEachObject(messages, field, limits.max_messages, [&](const JsonFields& f) {
    const bool last = ++index == messages.size();
    return AddChatMessage(f, limits, last, chat);
  });
}

absl::Status ParseSampling(const JsonFields& f, const RequestLimits& limits,
                           std::initializer_list<const char*> max_tokens_fields,
                           const char* stop_field, infer_v1::SamplingParams* s) {
  // The knobs the client leaves out are the model's (its generation_config.json, as vLLM
  // serves them) or else the API's defaults: the daemon fills them (model_defaults).
  s->set_model_defaults(true);
  ASSIGN_OR_RETURN(std::optional<double> temperature, f.Number("temperature", 0, 100));
  if (temperature.has_value()) s->set_temperature(static_cast<float>(*temperature));
  ASSIGN_OR_RETURN(std::optional<double> top_p, f.Number("top_p", 0, 1));
  if (top_p.has_value()) s->set_top_p(static_cast<float>(*top_p));
  ASSIGN_OR_RETURN(std::optional<int64_t> top_k, f.Integer("top_k", -1, 1 << 20));
  if (top_k.has_value()) s->set_top_k(static_cast<uint32_t>(std::max<int64_t>(*top_k, 0)));
  ASSIGN_OR_RETURN(std::optional<double> min_p, f.Number("min_p", 0, 1));
  if (min_p.has_value()) s->set_min_p(static_cast<float>(*min_p));
  ASSIGN_OR_RETURN(std::optional<double> presence, f.Number("presence_penalty", -2, 2));
  if (presence.has_value()) s->set_presence_penalty(static_cast<float>(*presence));
  ASSIGN_OR_RETURN(std::optional<double> frequency, f.Number("frequency_penalty", -2, 2));
  if (frequency.has_value()) s->set_frequency_penalty(static_cast<float>(*frequency));
  ASSIGN_OR_RETURN(std::optional<double> repetition, f.Number("repetition_penalty", 0, 10));
  if (repetition.has_value()) {
    if (*repetition == 0) return Invalid("repetition_penalty", "must be greater than 0");
    s->set_repetition_penalty(static_cast<float>(*repetition));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> seed, f.Integer("seed", -1, kMaxSeed));
  if (seed.has_value() && *seed >= 0) s->set_seed(static_cast<uint64_t>(*seed));
  int64_t max_tokens = 0;
  for (const char* name : max_tokens_fields) {
    ASSIGN_OR_RETURN(std::optional<int64_t> v, f.Integer(name, 1, limits.max_tokens_limit));
    if (v.has_value()) {
      max_tokens = *v;
      break;
    }
  }
  SetMaxTokens(max_tokens, limits, s);
  if (const Json* stop = f.Get(stop_field); stop != nullptr) {
    const std::string name = f.Name(stop_field);
    auto add = [&](const Json& v, const std::string& vname) -> absl::Status {
      if (!v.is_string()) return Invalid(vname, "must be a string");
      const std::string& str = v.get_ref<const std::string&>();
      if (str.empty()) return Invalid(vname, "must not be empty");
      if (str.size() > limits.max_stop_bytes) {
        return Invalid(vname, absl::StrCat("is longer than ", limits.max_stop_bytes, " bytes"));
      }
      s->add_stop(str);
      return absl::OkStatus();
    };
    if (stop->is_array()) {
      if (stop->size() > limits.max_stop) {
        return Invalid(name, absl::StrCat("has more than ", limits.max_stop, " entries"));
      }
      for (size_t i = 0; i < stop->size(); ++i) {
        RETURN_IF_ERROR(add((*stop)[i], absl::StrCat(name, "[", i, "]")));
      }
    } else {
      RETURN_IF_ERROR(add(*stop, name));
    }
  }
  ASSIGN_OR_RETURN(const Json* stop_ids, f.Array("stop_token_ids", limits.max_stop));
  if (stop_ids != nullptr) {
    for (size_t i = 0; i < stop_ids->size(); ++i) {
      ASSIGN_OR_RETURN(int64_t id,
                       JsonInteger((*stop_ids)[i], absl::StrCat("stop_token_ids[", i, "]"), 0,
                                   std::numeric_limits<uint32_t>::max()));
      s->add_stop_token_ids(static_cast<uint32_t>(id));
    }
  }
  ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, f.Bool("ignore_eos"));
  s->set_ignore_eos(ignore_eos.value_or(false));
  return absl::OkStatus();
}

namespace {

// Fields both OpenAI endpoints check the same way: model, n, best_of, stream, stream_options.
struct CommonFields {
  std::string model;
  bool stream = false;
  bool include_usage = false;
};

absl::StatusOr<CommonFields> ParseCommon(const JsonFields& f) {
  CommonFields c;
  ASSIGN_OR_RETURN(std::optional<std::string> model, f.String("model", 256));
  c.model = model.value_or("");
  ASSIGN_OR_RETURN(std::optional<int64_t> n, f.Integer("n", 1, 1 << 20));
  if (n.has_value() && *n != 1) return Invalid("n", "must be 1 (one choice per request)");
  ASSIGN_OR_RETURN(std::optional<int64_t> best_of, f.Integer("best_of", 1, 1 << 20));
  if (best_of.has_value() && *best_of != 1) return Invalid("best_of", "must be 1");
  ASSIGN_OR_RETURN(std::optional<bool> stream, f.Bool("stream"));
  c.stream = stream.value_or(false);
  ASSIGN_OR_RETURN(const Json* options, f.Object("stream_options"));
  if (options != nullptr && !c.stream) {
    // OpenAI's API refuses it too (a null is absent, as everywhere).
    return Invalid("stream_options", "is only allowed when stream is enabled");
  }
  if (options != nullptr) {
    ASSIGN_OR_RETURN(std::optional<bool> usage,
                     JsonFields(*options, "stream_options").Bool("include_usage"));
    c.include_usage = usage.value_or(false);
  }
  return c;
}

}  // namespace

absl::StatusOr<GenerationSpec> ParseChatCompletionRequest(const Json& body,
                                                          const RequestLimits& limits) {
  JsonFields f(body, "");
  GenerationSpec spec;
  ASSIGN_OR_RETURN(CommonFields common, ParseCommon(f));
  spec.model = common.model;
  spec.stream = common.stream;
  infer_v1::GenerateRequest& req = spec.request;
  infer_v1::ChatPrompt* chat = req.mutable_chat();
  const Json* messages = f.Get("messages");
  if (messages == nullptr) return Invalid("messages", "is required");
  // The deprecated function-calling fields are refused rather than ignored: a client using
  // them would silently get no calls.
  if (const Json* functions = f.Get("functions");
      functions != nullptr && !(functions->is_array() && functions->empty())) {
    return Invalid("functions",
                   "is the deprecated form of tools, which this server does not take; send each "
                   "function as {\"type\": \"function\", \"function\": {...}} in tools");
  }
  if (f.Get("function_call") != nullptr) {
    return Invalid("function_call",
                   "is the deprecated form of tool_choice, which this server does not take; use "
                   "tools and tool_choice");
  }
  RETURN_IF_ERROR(ParseChatMessages(*messages, "messages", limits, chat));
  RETURN_IF_ERROR(ParseTools(f, limits, chat));
  RETURN_IF_ERROR(ParseToolChoice(f, chat));
  // parallel_tool_calls false: the turn ends after its first call (absent or true: as many
  // calls as the model writes).
  ASSIGN_OR_RETURN(std::optional<bool> parallel, f.Bool("parallel_tool_calls"));
  chat->set_single_tool_call(parallel == false);
  // Structured outputs: decoding is constrained to the format (docs/gateway.md).
  ASSIGN_OR_RETURN(const Json* format, f.Object("response_format"));
  if (format != nullptr) {
    RETURN_IF_ERROR(
        ParseOpenAiResponseFormat(*format, "response_format", SchemaMembers::kNested, &req));
  }
  RETURN_IF_ERROR(ParseSampling(f, limits, {"max_completion_tokens", "max_tokens"}, "stop",
                                req.mutable_sampling()));
  ASSIGN_OR_RETURN(std::optional<bool> logprobs, f.Bool("logprobs"));
  ASSIGN_OR_RETURN(std::optional<int64_t> top_logprobs,
                   f.Integer("top_logprobs", 0, limits.max_top_logprobs));
  if (top_logprobs.value_or(0) > 0 && !logprobs.value_or(false)) {
    return Invalid("top_logprobs", "needs \"logprobs\": true");
  }
  if (logprobs.value_or(false)) {
    // The daemon returns each token's logprob with its top alternatives; at least one.
    spec.top_logprobs = static_cast<uint32_t>(top_logprobs.value_or(0));
    req.mutable_sampling()->set_logprobs(std::max<uint32_t>(1, spec.top_logprobs));
  }
  infer_v1::TemplateOptions* options = chat->mutable_options();
  options->set_add_generation_prompt(true);
  // vLLM's extension: continue the final assistant message instead of starting a new turn.
  ASSIGN_OR_RETURN(std::optional<bool> continue_final, f.Bool("continue_final_message"));
  if (continue_final.value_or(false)) options->set_continue_final_message(true);
  RETURN_IF_ERROR(CheckForcedToolChoice(*chat));
  RETURN_IF_ERROR(CheckResponseFormatFits(req, "response_format", "continue_final_message"));
  ASSIGN_OR_RETURN(const Json* kwargs, f.Object("chat_template_kwargs"));
  if (kwargs != nullptr) {
    ASSIGN_OR_RETURN(std::optional<bool> thinking,
                     JsonFields(*kwargs, "chat_template_kwargs").Bool("enable_thinking"));
    if (thinking.has_value()) options->set_enable_thinking(*thinking);
  }
  ASSIGN_OR_RETURN(std::optional<std::string> effort, f.String("reasoning_effort", 32));
  if (effort.has_value() && !options->has_enable_thinking()) {
    options->set_enable_thinking(*effort != "none" && *effort != "minimal");
  }
  req.set_parse_output(true);
  ASSIGN_OR_RETURN(std::optional<std::string> cache_key, f.String("prompt_cache_key", 1024));
  req.set_conversation(ConversationLabel(cache_key.value_or(""), *chat));
  const bool include_usage = common.include_usage;
  const bool want_logprobs = logprobs.value_or(false);
  const uint32_t top_n = spec.top_logprobs;
  spec.make_formatter = [include_usage, want_logprobs, top_n](const std::string& model) {
    return NewChatFormatter(model, include_usage, want_logprobs, top_n);
  };
  return spec;
}

absl::StatusOr<GenerationSpec> ParseCompletionRequest(const Json& body,
                                                      const RequestLimits& limits) {
  JsonFields f(body, "");
  GenerationSpec spec;
  ASSIGN_OR_RETURN(CommonFields common, ParseCommon(f));
  spec.model = common.model;
  spec.stream = common.stream;
  infer_v1::GenerateRequest& req = spec.request;
  const Json* prompt = f.Get("prompt");
  if (prompt == nullptr) return Invalid("prompt", "is required");
  const Json* p = prompt;
  // A list holding one prompt is that prompt; more than one would be several choices.
  if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    if (p->size() != 1) return Invalid("prompt", "must hold exactly one prompt");
    p = &p->front();
  }
  if (p->is_string()) {
    const std::string& text = p->get_ref<const std::string&>();
    if (text.size() > limits.max_string_bytes) {
      return Invalid("prompt", absl::StrCat("is longer than ", limits.max_string_bytes, " bytes"));
    }
    req.set_text(text);
  } else if (p->is_array()) {
    if (p->empty()) return Invalid("prompt", "must not be empty");
    if (p->size() > limits.max_prompt_token_ids) {
      return Invalid("prompt",
                     absl::StrCat("has more than ", limits.max_prompt_token_ids, " token ids"));
    }
    auto* ids = req.mutable_token_ids()->mutable_ids();
    ids->Reserve(static_cast<int>(p->size()));
    for (size_t i = 0; i < p->size(); ++i) {
      ASSIGN_OR_RETURN(int64_t id, JsonInteger((*p)[i], absl::StrCat("prompt[", i, "]"), 0,
                                               std::numeric_limits<uint32_t>::max()));
      ids->Add(static_cast<uint32_t>(id));
    }
  } else {
    return Invalid("prompt", "must be a string or an array of token ids");
  }
  ASSIGN_OR_RETURN(std::optional<bool> echo, f.Bool("echo"));
  if (echo.value_or(false)) return Invalid("echo", "is not supported");
  // A client's conversation key labels the request in the cache's events and retention.
  ASSIGN_OR_RETURN(std::optional<std::string> cache_key, f.String("prompt_cache_key", 1024));
  if (cache_key.has_value()) req.set_conversation(CacheKeyLabel(*cache_key));
  // vLLM's extension: the generated token ids in each choice (a client replaying an agent
  // conversation sends them back, so the next turn continues the live slot).
  ASSIGN_OR_RETURN(std::optional<bool> return_ids, f.Bool("return_token_ids"));
  // Cairn's extension for token-id prompts, whose boundaries the server cannot render:
  // {"cairn": {"stable_boundary": N, "shared_boundary": M}} (docs/gateway.md).
  ASSIGN_OR_RETURN(const Json* ext, f.Object("cairn"));
  if (ext != nullptr) {
    JsonFields cairn(*ext, "cairn");
    const int64_t max = std::numeric_limits<uint32_t>::max();
    ASSIGN_OR_RETURN(std::optional<int64_t> stable, cairn.Integer("stable_boundary", 0, max));
    ASSIGN_OR_RETURN(std::optional<int64_t> shared, cairn.Integer("shared_boundary", 0, max));
    if (stable.has_value()) req.set_stable_boundary(static_cast<uint64_t>(*stable));
    if (shared.has_value()) req.set_shared_boundary(static_cast<uint64_t>(*shared));
  }
  ASSIGN_OR_RETURN(std::optional<std::string> suffix, f.String("suffix", limits.max_string_bytes));
  if (suffix.has_value() && !suffix->empty()) return Invalid("suffix", "is not supported");
  RETURN_IF_ERROR(ParseSampling(f, limits, {"max_tokens"}, "stop", req.mutable_sampling()));
  // vLLM takes response_format here too: the text generated after the prompt is the value.
  ASSIGN_OR_RETURN(const Json* format, f.Object("response_format"));
  if (format != nullptr) {
    RETURN_IF_ERROR(
        ParseOpenAiResponseFormat(*format, "response_format", SchemaMembers::kNested, &req));
    RETURN_IF_ERROR(CheckResponseFormatFits(req, "response_format", ""));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> top, f.Integer("logprobs", 0, limits.max_top_logprobs));
  if (top.has_value()) {
    spec.top_logprobs = static_cast<uint32_t>(*top);
    req.mutable_sampling()->set_logprobs(std::max<uint32_t>(1, spec.top_logprobs));
  }
  const bool include_usage = common.include_usage;
  const bool want_logprobs = top.has_value();
  const bool want_ids = return_ids.value_or(false);
  const uint32_t top_n = spec.top_logprobs;
  spec.make_formatter = [include_usage, want_logprobs, top_n, want_ids](const std::string& model) {
    return NewCompletionFormatter(model, include_usage, want_logprobs, top_n, want_ids);
  };
  return spec;
}

}  // namespace cairn::gateway
