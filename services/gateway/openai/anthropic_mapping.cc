#include "services/gateway/openai/anthropic_mapping.h"

#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/gateway/openai/chat_mapping.h"
#include "services/gateway/openai/errors.h"

namespace cairn::gateway {

namespace {

absl::Status Invalid(const std::string& field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", what));
}

bool IsMediaBlock(const std::string& type) {
  return type == "image" || type == "document" || type == "file" || type == "audio";
}

// Appends the messages of one Anthropic message (blocks may split it in several: each
// tool_result becomes a "tool" message). As Anthropic's API, refuses a message whose content is
// empty, unless it is the `last` and the assistant's, which adds nothing. A message of blocks
// that render as nothing (redacted_thinking alone: Anthropic's API takes it) adds nothing.
absl::Status AddMessage(const JsonFields& f, const RequestLimits& limits, bool last,
                        infer_v1::ChatPrompt* chat) {
  ASSIGN_OR_RETURN(std::optional<std::string> role, f.String("role", 32));
  if (!role.has_value()) return Invalid(f.Name("role"), "is required");
  if (*role != "user" && *role != "assistant" && *role != "system") {
    return Invalid(f.Name("role"), absl::StrCat("\"", *role, "\" is not a known role"));
  }
  const Json* content = f.Get("content");
  if (content == nullptr) return Invalid(f.Name("content"), "is required");
  const bool may_be_empty = last && *role == "assistant";
  if ((content->is_array() && content->empty()) ||
      (content->is_string() && content->get_ref<const std::string&>().empty())) {
    if (may_be_empty) return absl::OkStatus();
    return Invalid(f.Name("content"),
                   "must not be empty (only the final assistant message may be)");
  }
  if (content->is_string()) {
    ASSIGN_OR_RETURN(std::string text, ContentText(*content, f.Name("content"), limits));
    infer_v1::ChatMessage* m = chat->add_messages();
    m->set_role(*role);
    m->set_content(std::move(text));
    return absl::OkStatus();
  }
  if (!content->is_array()) return Invalid(f.Name("content"), "must be a string or an array");
  if (content->size() > limits.max_content_parts) {
    return Invalid(f.Name("content"),
                   absl::StrCat("has more than ", limits.max_content_parts, " blocks"));
  }
  infer_v1::ChatMessage current;
  current.set_role(*role);
  bool current_used = false;
  int text_blocks = 0;  // In `current`.
  auto flush = [&] {
    if (current_used) *chat->add_messages() = current;
    current.Clear();
    current.set_role(*role);
    current_used = false;
    text_blocks = 0;
  };
  for (size_t i = 0; i < content->size(); ++i) {
    const std::string bname = absl::StrCat(f.Name("content"), "[", i, "]");
    const Json& block = (*content)[i];
    if (!block.is_object()) return Invalid(bname, "must be an object");
    JsonFields b(block, bname);
    ASSIGN_OR_RETURN(std::optional<std::string> type, b.String("type", 64));
    if (!type.has_value()) return Invalid(b.Name("type"), "is required");
    if (*type == "text") {
      ASSIGN_OR_RETURN(std::optional<std::string> text, b.String("text", limits.max_string_bytes));
      // Text blocks of one turn are joined with newlines, as ContentText joins text parts.
      absl::StrAppend(current.mutable_content(), text_blocks++ == 0 ? "" : "\n", text.value_or(""));
      if (current.content().size() > limits.max_string_bytes) {
        return Invalid(f.Name("content"),
                       absl::StrCat("is longer than ", limits.max_string_bytes, " bytes"));
      }
      current_used = true;
    } else if (*type == "thinking") {
      ASSIGN_OR_RETURN(std::optional<std::string> thinking,
                       b.String("thinking", limits.max_string_bytes));
      // Several thinking blocks of one turn are joined with newlines too, or their words would
      // run together.
      const bool first = current.reasoning_content().empty();
      absl::StrAppend(current.mutable_reasoning_content(), first ? "" : "\n",
                      thinking.value_or(""));
      if (current.reasoning_content().size() > limits.max_string_bytes) {
        return Invalid(f.Name("content"), absl::StrCat("has thinking longer than ",
                                                       limits.max_string_bytes, " bytes"));
      }
      current_used = true;
    } else if (*type == "redacted_thinking") {
      continue;  // Opaque to us; nothing to render.
    } else if (*type == "tool_use") {
      if (*role != "assistant") return Invalid(bname, "tool_use blocks belong to assistant turns");
      ASSIGN_OR_RETURN(std::optional<std::string> id, b.String("id", 256));
      ASSIGN_OR_RETURN(std::optional<std::string> tool, b.String("name", 256));
      if (!tool.has_value() || tool->empty()) return Invalid(b.Name("name"), "is required");
      ASSIGN_OR_RETURN(const Json* input, b.Object("input"));
      infer_v1::ToolCall* call = current.add_tool_calls();
      call->set_id(id.value_or(""));
      call->set_name(*tool);
      call->set_arguments_json(input == nullptr ? "{}" : DumpJson(*input));
      current_used = true;
    } else if (*type == "tool_result") {
      flush();
      ASSIGN_OR_RETURN(std::optional<std::string> id, b.String("tool_use_id", 256));
      if (!id.has_value()) return Invalid(b.Name("tool_use_id"), "is required");
      std::string text;
      if (const Json* c = b.Get("content"); c != nullptr) {
        ASSIGN_OR_RETURN(text, ContentText(*c, b.Name("content"), limits, ContentAuthor::kAny,
                                           MediaParts::kPlaceholder));
      }
      infer_v1::ChatMessage* m = chat->add_messages();
      m->set_role("tool");
      m->set_tool_call_id(*id);
      m->set_content(std::move(text));
    } else if (*type == "search_result" || *type == "document") {
      ASSIGN_OR_RETURN(std::optional<std::string> text, TextBlockText(b, *type, limits));
      const bool media = !text.has_value();
      if (media && MediaPartsFor(*role, last) == MediaParts::kRefuse) {
        return Invalid(
            bname, absl::StrCat("is a media block (", *type, "); this server accepts text only"));
      }
      absl::StrAppend(current.mutable_content(), text_blocks++ == 0 ? "" : "\n",
                      media ? MediaPlaceholder(*type) : *text);
      if (current.content().size() > limits.max_string_bytes) {
        return Invalid(f.Name("content"),
                       absl::StrCat("is longer than ", limits.max_string_bytes, " bytes"));
      }
      current_used = true;
    } else if (IsMediaBlock(*type)) {
      if (MediaPartsFor(*role, last) == MediaParts::kRefuse) {
        return Invalid(
            bname, absl::StrCat("is a media block (", *type, "); this server accepts text only"));
      }
      absl::StrAppend(current.mutable_content(), text_blocks++ == 0 ? "" : "\n",
                      MediaPlaceholder(*type));
      current_used = true;
    } else {
      return Invalid(b.Name("type"), absl::StrCat("\"", *type, "\" is not a supported block type"));
    }
  }
  flush();
  return absl::OkStatus();
}

absl::Status ParseSystem(const JsonFields& f, const RequestLimits& limits,
                         infer_v1::ChatPrompt* chat) {
  const Json* system = f.Get("system");
  if (system == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string text, ContentText(*system, "system", limits));
  infer_v1::ChatMessage* m = chat->add_messages();
  m->set_role("system");
  m->set_content(std::move(text));
  return absl::OkStatus();
}

absl::Status ParseTools(const JsonFields& f, const RequestLimits& limits,
                        infer_v1::ChatPrompt* chat) {
  if (const Json* tools = f.Get("tools"); tools != nullptr) {
    RETURN_IF_ERROR(
        ForEachObject(*tools, "tools", limits.max_tools, [&](const JsonFields& t) -> absl::Status {
          ASSIGN_OR_RETURN(std::optional<std::string> type, t.String("type", 64));
          if (type.has_value() && *type != "custom") {
            return Invalid(t.Name("type"), absl::StrCat("\"", *type,
                                                        "\" is a server tool; only custom tools "
                                                        "(name, description, input_schema) are "
                                                        "supported"));
          }
          return AddFunctionTool(t, "input_schema", limits, chat).status();
        }));
  }
  ASSIGN_OR_RETURN(const Json* choice, f.Object("tool_choice"));
  if (choice != nullptr) {
    JsonFields c(*choice, "tool_choice");
    ASSIGN_OR_RETURN(std::optional<std::string> type, c.String("type", 32));
    const std::string t = type.value_or("auto");
    // The turn ends after its first call.
    ASSIGN_OR_RETURN(std::optional<bool> single, c.Bool("disable_parallel_tool_use"));
    chat->set_single_tool_call(single.value_or(false));
    if (t == "auto" || t == "none") {
      chat->set_tool_choice(t);
    } else if (t == "any") {
      chat->set_tool_choice("required");
    } else if (t == "tool") {
      ASSIGN_OR_RETURN(std::optional<std::string> tool, c.String("name", 256));
      if (!tool.has_value() || tool->empty()) return Invalid("tool_choice.name", "is required");
      RETURN_IF_ERROR(CheckForcedName(*tool, "tool_choice.name"));
      chat->set_tool_choice(*tool);
    } else {
      return Invalid("tool_choice.type", "must be \"auto\", \"any\", \"tool\" or \"none\"");
    }
  }
  return absl::OkStatus();
}

// Anthropic message objects and stream events.
class AnthropicFormatter : public ResponseFormatter {
 public:
  AnthropicFormatter(std::string model, uint32_t max_tokens)
      : id_(NewId("msg_")), model_(std::move(model)), max_tokens_(max_tokens) {}

  std::string StreamStarted(const infer_v1::Started& s) override {
    const uint64_t cached = s.cache().restored_depth();
    Json usage = {{"input_tokens", s.prompt_tokens() > cached ? s.prompt_tokens() - cached : 0},
                  {"output_tokens", 0},
                  {"cache_read_input_tokens", cached},
                  {"cache_creation_input_tokens", 0}};
    Json message = {{"id", id_},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"model", model_},
                    {"content", Json::array()},
                    {"stop_reason", nullptr},
                    {"stop_sequence", nullptr},
                    {"usage", usage}};
    return absl::StrCat(
        SseEvent("message_start", {{"type", "message_start"}, {"message", message}}),
        SseEvent("ping", {{"type", "ping"}}));
  }

  std::string StreamDelta(const infer_v1::Delta& d) override {
    std::string out;
    if (!d.reasoning_text().empty()) {
      Open(kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, &out);
      Delta({{"type", "thinking_delta"}, {"thinking", d.reasoning_text()}}, &out);
    }
    if (!d.text().empty()) {
      Open(kText, {{"type", "text"}, {"text", ""}}, &out);
      Delta({{"type", "text_delta"}, {"text", d.text()}}, &out);
    }
    for (const auto& tc : d.tool_calls()) {
      if (open_kind_ != kTool || open_tool_ != static_cast<int>(tc.index())) {
        Open(kTool,
             {{"type", "tool_use"},
              {"id", tool_ids_.For(tc.index())},
              {"name", tc.name()},
              {"input", Json::object()}},
             &out, /*force=*/true);
        open_tool_ = static_cast<int>(tc.index());
      }
      if (!tc.arguments_delta().empty()) {
        Delta({{"type", "input_json_delta"}, {"partial_json", tc.arguments_delta()}}, &out);
      }
    }
    return out;
  }

  std::string StreamFinished(const infer_v1::Finished& f) override {
    std::string out;
    Close(&out);
    Json delta = {{"type", "message_delta"},
                  {"delta",
                   {{"stop_reason", AnthropicStopReason(f, max_tokens_)},
                    {"stop_sequence", StopSequence(f)}}},
                  {"usage", Usage(f)},
                  {"cairn", CairnObject(f.cache())}};
    absl::StrAppend(&out, SseEvent("message_delta", delta),
                    SseEvent("message_stop", {{"type", "message_stop"}}));
    return out;
  }

  std::string StreamError(const absl::Status& status) override {
    const int http = HttpStatusFor(status);
    return SseEvent(
        "error",
        {{"type", "error"},
         {"error",
          {{"type", AnthropicErrorType(http)}, {"message", AnthropicErrorMessage(status)}}}});
  }

  void Collect(const infer_v1::Delta& d) override { collected_.Add(d); }

  Json Body(const infer_v1::Finished& f) override {
    Json content = Json::array();
    const std::string& reasoning = collected_.reasoning(f);
    const std::string& text = collected_.text(f);
    if (!reasoning.empty()) {
      content.push_back({{"type", "thinking"}, {"thinking", reasoning}, {"signature", ""}});
    }
    if (!text.empty()) content.push_back({{"type", "text"}, {"text", text}});
    for (int i = 0; i < f.tool_calls_size(); ++i) {
      const infer_v1::ToolCall& tc = f.tool_calls(i);
      // Bounded as a request body is (nesting, members): the daemon's words, and the body is
      // copied and serialised by recursion. The daemon bounds them too.
      absl::StatusOr<Json> parsed =
          ParseJsonObject(tc.arguments_json(), RequestLimits().max_json_depth);
      Json input = parsed.ok() ? *std::move(parsed) : Json::object();
      content.push_back({{"type", "tool_use"},
                         {"id", tool_ids_.For(static_cast<uint32_t>(i))},
                         {"name", tc.name()},
                         {"input", input}});
    }
    return {{"id", id_},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model_},
            {"content", content},
            {"stop_reason", AnthropicStopReason(f, max_tokens_)},
            {"stop_sequence", StopSequence(f)},
            {"usage", Usage(f)},
            {"cairn", CairnObject(f.cache())}};
  }

 private:
  enum Kind { kNone, kThinking, kText, kTool };

  // The stop string that ended the output, or null.
  static Json StopSequence(const infer_v1::Finished& f) {
    if (AnthropicStopReason(f, 0) != "stop_sequence") return nullptr;
    return f.stop_sequence();
  }

  static Json Usage(const infer_v1::Finished& f) {
    const uint32_t cached = std::min(f.cached_tokens(), f.prompt_tokens());
    return {{"input_tokens", f.prompt_tokens() - cached},
            {"output_tokens", f.completion_tokens()},
            {"cache_read_input_tokens", cached},
            {"cache_creation_input_tokens", 0}};
  }

  void Open(Kind kind, Json block, std::string* out, bool force = false) {
    if (open_kind_ == kind && !force) return;
    Close(out);
    open_kind_ = kind;
    absl::StrAppend(out, SseEvent("content_block_start", {{"type", "content_block_start"},
                                                          {"index", index_},
                                                          {"content_block", std::move(block)}}));
  }
  void Delta(Json delta, std::string* out) {
    absl::StrAppend(out, SseEvent("content_block_delta", {{"type", "content_block_delta"},
                                                          {"index", index_},
                                                          {"delta", std::move(delta)}}));
  }
  void Close(std::string* out) {
    if (open_kind_ == kNone) return;
    absl::StrAppend(
        out, SseEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}));
    open_kind_ = kNone;
    open_tool_ = -1;
    ++index_;
  }

  const std::string id_;
  const std::string model_;
  const uint32_t max_tokens_;  // The request's output limit (0: none).
  Kind open_kind_ = kNone;
  int open_tool_ = -1;
  int index_ = 0;  // Index of the open block, or of the next one.
  CollectedOutput collected_;
  ToolCallIds tool_ids_{"toolu_"};
};

absl::StatusOr<GenerationSpec> Parse(const Json& body, const RequestLimits& limits,
                                     bool count_only) {
  JsonFields f(body, "");
  GenerationSpec spec;
  ASSIGN_OR_RETURN(std::optional<std::string> model, f.String("model", 256));
  spec.model = model.value_or("");
  ASSIGN_OR_RETURN(std::optional<bool> stream, f.Bool("stream"));
  spec.stream = stream.value_or(false);
  infer_v1::GenerateRequest& req = spec.request;
  infer_v1::ChatPrompt* chat = req.mutable_chat();
  RETURN_IF_ERROR(ParseSystem(f, limits, chat));
  const Json* messages = f.Get("messages");
  if (messages == nullptr) return Invalid("messages", "is required");
  if (messages->is_array() && messages->empty()) return Invalid("messages", "must not be empty");
  size_t index = 0;
  RETURN_IF_ERROR(
      ForEachObject(*messages, "messages", limits.max_messages, [&](const JsonFields& m) {
        const bool last = ++index == messages->size();
        return AddMessage(m, limits, last, chat);
      }));
  // Every message may add nothing (an empty final assistant message, redacted_thinking blocks
  // alone): the daemon would refuse the empty prompt naming its own field.
  if (chat->messages_size() == 0) {
    return Invalid("messages",
                   "must hold a message with content (an empty final assistant message and "
                   "redacted_thinking blocks add none)");
  }
  RETURN_IF_ERROR(ParseTools(f, limits, chat));
  ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens,
                   f.Integer("max_tokens", 1, limits.max_tokens_limit));
  if (!max_tokens.has_value() && !count_only) return Invalid("max_tokens", "is required");
  infer_v1::SamplingParams* s = req.mutable_sampling();
  // Knobs left out are the model's (generation_config.json) or the API's defaults (the daemon
  // fills them: model_defaults).
  s->set_model_defaults(true);
  ASSIGN_OR_RETURN(std::optional<double> temperature, f.Number("temperature", 0, 1));
  if (temperature.has_value()) s->set_temperature(static_cast<float>(*temperature));
  ASSIGN_OR_RETURN(std::optional<double> top_p, f.Number("top_p", 0, 1));
  if (top_p.has_value()) s->set_top_p(static_cast<float>(*top_p));
  ASSIGN_OR_RETURN(std::optional<int64_t> top_k, f.Integer("top_k", 0, 1 << 20));
  if (top_k.has_value()) s->set_top_k(static_cast<uint32_t>(*top_k));
  SetMaxTokens(max_tokens.value_or(0), limits, s);
  // Anthropic's current models take max_tokens as a ceiling: where the prompt leaves fewer
  // tokens of the context, the answer runs to the context's end and says so in its
  // stop_reason. (Claude Code asks for 32,000, more than a 40K context leaves after its
  // system prompt and tools: a refusal would end its first turn.)
  if (s->has_max_tokens()) s->set_max_tokens_is_ceiling(true);
  const uint32_t output_limit = s->has_max_tokens() ? s->max_tokens() : 0;
  ASSIGN_OR_RETURN(const Json* stops, f.Array("stop_sequences", limits.max_stop));
  if (stops != nullptr) {
    for (size_t i = 0; i < stops->size(); ++i) {
      const std::string name = absl::StrCat("stop_sequences[", i, "]");
      const Json& v = (*stops)[i];
      if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
        return Invalid(name, "must be a non-empty string");
      }
      if (v.get_ref<const std::string&>().size() > limits.max_stop_bytes) {
        return Invalid(name, absl::StrCat("is longer than ", limits.max_stop_bytes, " bytes"));
      }
      s->add_stop(v.get<std::string>());
    }
  }
  infer_v1::TemplateOptions* options = chat->mutable_options();
  options->set_add_generation_prompt(true);
  // A final assistant message with text is a prefill: the answer continues it.
  const infer_v1::ChatMessage* final_message =
      chat->messages_size() > 0 ? &chat->messages(chat->messages_size() - 1) : nullptr;
  if (final_message != nullptr && final_message->role() == "assistant" &&
      !final_message->content().empty() && final_message->tool_calls_size() == 0) {
    options->set_continue_final_message(true);
  }
  RETURN_IF_ERROR(CheckForcedToolChoice(*chat));
  // Structured outputs: {"type": "json_schema", "schema": {...}}, as the beta's output_format
  // or as output_config.format (whose other fields, such as effort, are not used); decoding is
  // constrained to the schema (docs/gateway.md).
  ASSIGN_OR_RETURN(const Json* output_format, f.Object("output_format"));
  std::string format_field = "output_format";
  ASSIGN_OR_RETURN(const Json* output_config, f.Object("output_config"));
  if (output_config != nullptr) {
    ASSIGN_OR_RETURN(const Json* config_format,
                     JsonFields(*output_config, "output_config").Object("format"));
    if (config_format != nullptr) {
      if (output_format != nullptr) {
        return Invalid("output_config.format", "and output_format cannot both be given");
      }
      output_format = config_format;
      format_field = "output_config.format";
    }
  }
  if (output_format != nullptr) {
    const JsonFields of(*output_format, format_field);
    ASSIGN_OR_RETURN(std::optional<std::string> type, of.String("type", 64));
    if (type.value_or("") != "json_schema") {
      return Invalid(of.Name("type"), "must be \"json_schema\"");
    }
    RETURN_IF_ERROR(
        ReadJsonSchemaFormat(of, /*name_required=*/false, req.mutable_response_format()));
    RETURN_IF_ERROR(
        CheckResponseFormatFits(req, format_field, "a final assistant message (a prefill)"));
  }
  ASSIGN_OR_RETURN(const Json* thinking, f.Object("thinking"));
  if (thinking != nullptr) {
    ASSIGN_OR_RETURN(std::optional<std::string> type,
                     JsonFields(*thinking, "thinking").String("type", 32));
    options->set_enable_thinking(type.value_or("enabled") != "disabled");
  }
  req.set_parse_output(true);
  ASSIGN_OR_RETURN(const Json* metadata, f.Object("metadata"));
  (void)metadata;  // metadata.user_id is a per-run id: checked for shape, never rendered.
  req.set_conversation(ConversationLabel("", *chat));
  spec.make_formatter = [output_limit](const std::string& name) {
    return std::make_unique<AnthropicFormatter>(name, output_limit);
  };
  return spec;
}

}  // namespace

absl::string_view AnthropicStopReason(const infer_v1::Finished& finished, uint32_t max_tokens) {
  if (finished.reason() == infer_v1::Finished::REASON_STOP && !finished.stop_sequence().empty()) {
    return "stop_sequence";
  }
  switch (finished.reason()) {
    case infer_v1::Finished::REASON_LENGTH:
      if (max_tokens == 0 || finished.completion_tokens() < max_tokens) {
        return "model_context_window_exceeded";
      }
      return "max_tokens";
    case infer_v1::Finished::REASON_TOOL_CALLS:
      return "tool_use";
    default:
      return "end_turn";
  }
}

absl::StatusOr<GenerationSpec> ParseAnthropicMessagesRequest(const Json& body,
                                                             const RequestLimits& limits) {
  return Parse(body, limits, /*count_only=*/false);
}

absl::StatusOr<GenerationSpec> ParseAnthropicCountTokensRequest(const Json& body,
                                                                const RequestLimits& limits) {
  return Parse(body, limits, /*count_only=*/true);
}

}  // namespace cairn::gateway
