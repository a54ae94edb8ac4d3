#include "services/gateway/openai/responses_mapping.h"

#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/gateway/openai/chat_mapping.h"
#include "services/gateway/openai/errors.h"

namespace cairn::gateway {

namespace {

// The error about one request field, named in OpenAI's "param" too (InvalidField).
absl::Status Invalid(const std::string& field, absl::string_view what) {
  return InvalidField(field, what);
}

// Joins a namespace and the name of one of its functions into the name the model sees.
constexpr char kNamespaceSeparator[] = ".";

// Builds the chat prompt from `input` items. Reasoning items attach to the assistant turn
// that follows them; consecutive function calls share one assistant turn.
// Thread-compatible; `limits` and `chat` must outlive it.
class InputBuilder {
 public:
  InputBuilder(const RequestLimits& limits, infer_v1::ChatPrompt* chat)
      : limits_(limits), chat_(chat) {}

  // `last`: the input's newest item.
  absl::Status AddItem(const Json& item, const std::string& name, bool last) {
    if (!item.is_object()) return Invalid(name, "must be an object");
    JsonFields f(item, name);
    ASSIGN_OR_RETURN(std::optional<std::string> type, f.String("type", 64));
    const std::string t = type.value_or("message");
    if (t == "message") return AddMessage(f, last);
    if (t == "function_call") {
      ASSIGN_OR_RETURN(std::optional<std::string> call_id, f.String("call_id", 256));
      ASSIGN_OR_RETURN(std::optional<std::string> fn, f.String("name", 256));
      ASSIGN_OR_RETURN(std::optional<std::string> ns, f.String("namespace", 128));
      ASSIGN_OR_RETURN(std::optional<std::string> args,
                       f.String("arguments", limits_.max_string_bytes));
      if (!call_id.has_value()) return Invalid(f.Name("call_id"), "is required");
      if (!fn.has_value() || fn->empty()) return Invalid(f.Name("name"), "is required");
      infer_v1::ChatMessage* m = AssistantTurn(/*for_call=*/true);
      infer_v1::ToolCall* call = m->add_tool_calls();
      call->set_id(*call_id);
      call->set_name(ns.has_value() && !ns->empty() ? absl::StrCat(*ns, kNamespaceSeparator, *fn)
                                                    : *fn);
      call->set_arguments_json(args.value_or("{}"));
      return absl::OkStatus();
    }
    if (t == "function_call_output") {
      ASSIGN_OR_RETURN(std::optional<std::string> call_id, f.String("call_id", 256));
      if (!call_id.has_value()) return Invalid(f.Name("call_id"), "is required");
      std::string output;
      if (const Json* o = f.Get("output"); o != nullptr) {
        ASSIGN_OR_RETURN(output, ContentText(*o, f.Name("output"), limits_, ContentAuthor::kAny,
                                             MediaParts::kPlaceholder));
      }
      infer_v1::ChatMessage* m = NewMessage("tool");
      m->set_tool_call_id(*call_id);
      m->set_content(std::move(output));
      return absl::OkStatus();
    }
    if (t == "reasoning") {
      // Summaries (or full reasoning text) go back as the next assistant turn's reasoning.
      for (const char* key : {"content", "summary"}) {
        ASSIGN_OR_RETURN(const Json* parts, f.Array(key, limits_.max_content_parts));
        if (parts == nullptr || parts->empty()) continue;
        for (size_t i = 0; i < parts->size(); ++i) {
          const std::string pname = absl::StrCat(f.Name(key), "[", i, "]");
          if (!(*parts)[i].is_object()) return Invalid(pname, "must be an object");
          ASSIGN_OR_RETURN(std::optional<std::string> text,
                           JsonFields((*parts)[i], pname).String("text", limits_.max_string_bytes));
          absl::StrAppend(&pending_reasoning_, text.value_or(""));
        }
        break;
      }
      return absl::OkStatus();
    }
    if (t == "item_reference") {
      return Invalid(f.Name("type"),
                     "item_reference needs stored responses; this server stores none");
    }
    return Invalid(f.Name("type"), absl::StrCat("\"", t, "\" items are not supported"));
  }

  // Drops reasoning that no assistant turn followed.
  void Finish() { pending_reasoning_.clear(); }

 private:
  absl::Status AddMessage(const JsonFields& f, bool last) {
    ASSIGN_OR_RETURN(std::optional<std::string> role, f.String("role", 32));
    if (!role.has_value()) return Invalid(f.Name("role"), "is required");
    std::string r = *role == "developer" ? "system" : *role;
    if (r != "system" && r != "user" && r != "assistant") {
      return Invalid(f.Name("role"), absl::StrCat("\"", *role, "\" is not a known role"));
    }
    std::string text;
    if (const Json* c = f.Get("content"); c != nullptr) {
      ASSIGN_OR_RETURN(
          text, ContentText(*c, f.Name("content"), limits_,
                            r == "assistant" ? ContentAuthor::kAssistant : ContentAuthor::kAny,
                            MediaPartsFor(r, last)));
    }
    infer_v1::ChatMessage* m = r == "assistant" ? AssistantTurn(/*for_call=*/false) : NewMessage(r);
    absl::StrAppend(m->mutable_content(), text);
    return absl::OkStatus();
  }

  infer_v1::ChatMessage* NewMessage(const std::string& role) {
    infer_v1::ChatMessage* m = chat_->add_messages();
    m->set_role(role);
    return m;
  }

  // The assistant turn to extend: a new one, unless the last turn is an assistant turn a
  // function call can join (calls follow the text of their turn).
  infer_v1::ChatMessage* AssistantTurn(bool for_call) {
    infer_v1::ChatMessage* m = nullptr;
    const int n = chat_->messages_size();
    if (for_call && n > 0 && chat_->messages(n - 1).role() == "assistant" &&
        pending_reasoning_.empty()) {
      m = chat_->mutable_messages(n - 1);
    } else {
      m = NewMessage("assistant");
    }
    if (!pending_reasoning_.empty()) {
      m->set_reasoning_content(std::move(pending_reasoning_));
      pending_reasoning_.clear();
    }
    return m;
  }

  const RequestLimits& limits_;
  infer_v1::ChatPrompt* chat_;
  std::string pending_reasoning_;
};

// Tools OpenAI runs on its own servers. No local server can run them, so they are left out of
// the prompt (the model never sees them) instead of failing the request: Codex CLI, for one,
// offers web_search on every request.
bool IsHostedTool(absl::string_view type) {
  return absl::StartsWith(type, "web_search") || type == "file_search" ||
         type == "code_interpreter" || type == "image_generation" || type == "mcp";
}

// Reads `tools` into `chat`: function tools as they are, the function tools of a namespace
// under "NAMESPACE.NAME" (kNamespaceSeparator; `namespaces` gets each namespace's name),
// hosted tools skipped. Names must be unique once qualified.
// Thread-compatible; `limits`, `chat` and `namespaces` must outlive it.
class ToolsParser {
 public:
  ToolsParser(const RequestLimits& limits, infer_v1::ChatPrompt* chat,
              std::set<std::string>* namespaces)
      : limits_(limits), chat_(chat), namespaces_(namespaces) {}

  absl::Status Parse(const JsonFields& f) {
    if (const Json* tools = f.Get("tools"); tools != nullptr) {
      RETURN_IF_ERROR(ForEachObject(*tools, "tools", limits_.max_tools,
                                    [&](const JsonFields& t) { return AddTool(t); }));
    }
    RETURN_IF_ERROR(ParseToolChoice(f, chat_));
    // The Responses API names a namespace's function in {"name", "namespace"}.
    if (const Json* choice = f.Get("tool_choice"); choice != nullptr && choice->is_object()) {
      ASSIGN_OR_RETURN(std::optional<std::string> ns,
                       JsonFields(*choice, "tool_choice").String("namespace", 128));
      if (ns.has_value() && !ns->empty()) {
        std::string qualified = absl::StrCat(*ns, kNamespaceSeparator, chat_->tool_choice());
        // Written into the call's opening, so checked as a name is (the name part already was).
        RETURN_IF_ERROR(CheckForcedName(qualified, "tool_choice.namespace"));
        chat_->set_tool_choice(std::move(qualified));
      }
    }
    return CheckForcedToolChoice(*chat_);
  }

 private:
  absl::Status AddTool(const JsonFields& t) {
    ASSIGN_OR_RETURN(std::optional<std::string> type, t.String("type", 64));
    const std::string kind = type.value_or("");
    if (kind == "function") return AddFunction(t, "");
    if (IsHostedTool(kind)) return absl::OkStatus();
    if (kind != "namespace") return Unsupported(t, kind);
    ASSIGN_OR_RETURN(std::optional<std::string> ns, t.String("name", 128));
    if (!ns.has_value() || ns->empty()) return Invalid(t.Name("name"), "is required");
    if (ns->find(kNamespaceSeparator) != std::string::npos) {
      return Invalid(t.Name("name"),
                     absl::StrCat("must not contain \"", kNamespaceSeparator, "\""));
    }
    RETURN_IF_ERROR(t.String("description", limits_.max_string_bytes).status());
    ASSIGN_OR_RETURN(const Json* inner, t.Array("tools", limits_.max_tools));
    if (inner == nullptr) return Invalid(t.Name("tools"), "is required");
    namespaces_->insert(*ns);
    const std::string prefix = absl::StrCat(*ns, kNamespaceSeparator);
    return ForEachObject(*inner, t.Name("tools"), limits_.max_tools,
                         [&](const JsonFields& it) { return AddNamespaceFunction(it, prefix); });
  }

  absl::Status AddNamespaceFunction(const JsonFields& t, const std::string& prefix) {
    ASSIGN_OR_RETURN(std::optional<std::string> type, t.String("type", 64));
    if (type.value_or("") != "function") return Unsupported(t, type.value_or(""));
    return AddFunction(t, prefix);
  }

  absl::Status AddFunction(const JsonFields& t, absl::string_view prefix) {
    if (++functions_ > limits_.max_tools) {
      return Invalid("tools", absl::StrCat("hold more than ", limits_.max_tools,
                                           " functions (namespaces included)"));
    }
    ASSIGN_OR_RETURN(std::string name, AddFunctionTool(t, "parameters", limits_, chat_, prefix));
    if (!names_.insert(name).second) {
      return Invalid(t.Name("name"), absl::StrCat("\"", name, "\" names two tools"));
    }
    return absl::OkStatus();
  }

  static absl::Status Unsupported(const JsonFields& t, const std::string& type) {
    return Invalid(t.Name("type"), absl::StrCat("\"", type,
                                                "\" tools are not supported; only \"function\" "
                                                "tools (also inside a \"namespace\") are"));
  }

  const RequestLimits& limits_;
  infer_v1::ChatPrompt* chat_;
  std::set<std::string>* namespaces_;
  std::set<std::string> names_;  // Qualified names so far.
  size_t functions_ = 0;
};

Json MessageItem(const std::string& id, const std::string& text, absl::string_view status) {
  Json content = Json::array();
  if (status != "in_progress") {  // Completed, or incomplete: cut by the output's length.
    content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}});
  }
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", content}};
}

Json ReasoningItem(const std::string& id, const std::string& text, bool done) {
  Json summary = Json::array();
  if (done) summary.push_back({{"type", "summary_text"}, {"text", text}});
  return {{"type", "reasoning"}, {"id", id}, {"summary", summary}};
}

// A function_call item; a call of a namespace's function (`name` is "NAMESPACE.NAME" and
// NAMESPACE one of `namespaces`) names its namespace apart, as the Responses API does.
Json FunctionCallItem(const std::set<std::string>& namespaces, const std::string& id,
                      const std::string& call_id, const std::string& name,
                      const std::string& arguments, absl::string_view status) {
  Json item = {{"type", "function_call"}, {"id", id},        {"call_id", call_id}, {"name", name},
               {"arguments", arguments},  {"status", status}};
  if (const size_t sep = name.find(kNamespaceSeparator);
      sep != std::string::npos && namespaces.count(name.substr(0, sep)) != 0) {
    item["namespace"] = name.substr(0, sep);
    item["name"] = name.substr(sep + std::strlen(kNamespaceSeparator));
  }
  return item;
}

// The response object and its stream events.
class ResponsesFormatter : public ResponseFormatter {
 public:
  ResponsesFormatter(std::string model, std::set<std::string> namespaces, bool parallel)
      : id_(NewId("resp_")),
        model_(std::move(model)),
        namespaces_(std::move(namespaces)),
        parallel_(parallel),
        created_(UnixSeconds()) {}

  std::string StreamStarted(const infer_v1::Started&) override {
    std::string out;
    Open(&out);
    return out;
  }

  // Codex CLI ends a stream that sent no event for minutes (comments do not count), so a long
  // prefill would be cut off and asked again, forever: until the output begins, each tick is
  // an event (the first opens the response). Once items are open, a snapshot sent now would
  // lack them, and ticks are comments.
  std::string StreamHeartbeat() override {
    std::string out;
    if (!opened_) {
      Open(&out);
    } else if (open_ == kNone && output_.empty()) {
      Emit("response.in_progress", {{"response", Response("in_progress", Json::array(), nullptr)}},
           &out);
    } else {
      out = ": ping\n\n";
    }
    return out;
  }

  std::string StreamDelta(const infer_v1::Delta& d) override {
    std::string out;
    if (!d.reasoning_text().empty()) {
      if (open_ != kReasoning) {
        CloseItem(&out);
        OpenItem(kReasoning, NewId("rs_"), &out);
        Emit("response.reasoning_summary_part.added",
             {{"item_id", item_id_},
              {"output_index", output_.size()},
              {"summary_index", 0},
              {"part", {{"type", "summary_text"}, {"text", ""}}}},
             &out);
      }
      item_text_ += d.reasoning_text();
      Emit("response.reasoning_summary_text.delta",
           {{"item_id", item_id_},
            {"output_index", output_.size()},
            {"summary_index", 0},
            {"delta", d.reasoning_text()}},
           &out);
    }
    if (!d.text().empty()) {
      if (open_ != kMessage) {
        CloseItem(&out);
        OpenItem(kMessage, NewId("msg_"), &out);
        Emit("response.content_part.added",
             {{"item_id", item_id_},
              {"output_index", output_.size()},
              {"content_index", 0},
              {"part", TextPart("")}},
             &out);
      }
      item_text_ += d.text();
      Emit("response.output_text.delta",
           {{"item_id", item_id_},
            {"output_index", output_.size()},
            {"content_index", 0},
            {"delta", d.text()}},
           &out);
    }
    for (const auto& tc : d.tool_calls()) {
      if (open_ != kCall || open_tool_ != static_cast<int>(tc.index())) {
        CloseItem(&out);
        call_id_ = tool_ids_.For(tc.index());
        call_name_ = tc.name();
        open_tool_ = static_cast<int>(tc.index());
        OpenItem(kCall, NewId("fc_"), &out);
      }
      if (tc.arguments_delta().empty()) continue;
      item_text_ += tc.arguments_delta();
      Emit("response.function_call_arguments.delta",
           {{"item_id", item_id_},
            {"output_index", output_.size()},
            {"delta", tc.arguments_delta()}},
           &out);
    }
    return out;
  }

  std::string StreamFinished(const infer_v1::Finished& f) override {
    std::string out;
    Open(&out);  // A daemon that skipped Started.
    // An answer cut by max_output_tokens (or the server's cap, or the context) is incomplete,
    // and its stream ends so, as OpenAI's does; so does the message it cut.
    const bool incomplete = f.reason() == infer_v1::Finished::REASON_LENGTH;
    CloseItem(&out, incomplete ? "incomplete" : "completed");
    Emit(incomplete ? "response.incomplete" : "response.completed",
         {{"response", Final(f, output_)}}, &out);
    return out;
  }

  std::string StreamError(const absl::Status& status) override {
    Json r = Response("failed", output_, nullptr);
    r["error"] = {{"code", ResponsesErrorCode(status)}, {"message", std::string(status.message())}};
    std::string out;
    // The stream may have begun with pings only (a long prefill, then the daemon's error):
    // clients take no lifecycle event before response.created.
    Open(&out);
    Emit("response.failed", {{"response", r}}, &out);
    return out;
  }

  void Collect(const infer_v1::Delta& d) override { collected_.Add(d); }

  Json Body(const infer_v1::Finished& f) override {
    Json output = Json::array();
    const std::string& reasoning = collected_.reasoning(f);
    const std::string& text = collected_.text(f);
    if (!reasoning.empty()) output.push_back(ReasoningItem(NewId("rs_"), reasoning, true));
    const bool incomplete = f.reason() == infer_v1::Finished::REASON_LENGTH;
    if (!text.empty()) {
      output.push_back(MessageItem(NewId("msg_"), text, incomplete ? "incomplete" : "completed"));
    }
    for (int i = 0; i < f.tool_calls_size(); ++i) {
      const infer_v1::ToolCall& tc = f.tool_calls(i);
      output.push_back(FunctionCallItem(namespaces_, NewId("fc_"),
                                        tool_ids_.For(static_cast<uint32_t>(i)), tc.name(),
                                        tc.arguments_json(), "completed"));
    }
    return Final(f, output);
  }

 private:
  enum Kind { kNone, kReasoning, kMessage, kCall };

  static Json TextPart(const std::string& text) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}};
  }

  // Appends response.created and response.in_progress, the stream's first events, unless they
  // were sent already.
  void Open(std::string* out) {
    if (opened_) return;
    opened_ = true;
    Json r = Response("in_progress", Json::array(), nullptr);
    Emit("response.created", {{"response", r}}, out);
    Emit("response.in_progress", {{"response", r}}, out);
  }

  // Appends one event, numbered in the order of the calls.
  void Emit(absl::string_view type, Json fields, std::string* out) {
    fields["type"] = type;
    fields["sequence_number"] = sequence_++;
    absl::StrAppend(out, SseEvent(type, fields));
  }

  Json Response(absl::string_view status, Json output, Json usage) const {
    return {{"id", id_},
            {"object", "response"},
            {"created_at", created_},
            {"status", status},
            {"model", model_},
            {"output", std::move(output)},
            {"parallel_tool_calls", parallel_},
            {"tool_choice", "auto"},
            {"tools", Json::array()},
            {"store", false},
            {"incomplete_details", nullptr},
            {"error", nullptr},
            {"usage", std::move(usage)}};
  }

  Json Final(const infer_v1::Finished& f, Json output) const {
    const bool incomplete = f.reason() == infer_v1::Finished::REASON_LENGTH;
    Json usage = {
        {"input_tokens", f.prompt_tokens()},
        {"input_tokens_details", {{"cached_tokens", f.cached_tokens()}}},
        {"output_tokens", f.completion_tokens()},
        {"output_tokens_details", {{"reasoning_tokens", f.reasoning_tokens()}}},
        {"total_tokens", static_cast<uint64_t>(f.prompt_tokens()) + f.completion_tokens()}};
    Json r = Response(incomplete ? "incomplete" : "completed", std::move(output), usage);
    if (incomplete) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    r["cairn"] = CairnObject(f.cache());
    return r;
  }

  Json OpenItemJson() const {
    switch (open_) {
      case kReasoning:
        return ReasoningItem(item_id_, "", false);
      case kMessage:
        return MessageItem(item_id_, "", "in_progress");
      default:
        return FunctionCallItem(namespaces_, item_id_, call_id_, call_name_, "", "in_progress");
    }
  }

  void OpenItem(Kind kind, std::string id, std::string* out) {
    open_ = kind;
    item_id_ = std::move(id);
    item_text_.clear();
    Emit("response.output_item.added", {{"output_index", output_.size()}, {"item", OpenItemJson()}},
         out);
  }

  // `message_status` is the status a message item closes with ("incomplete" when the answer
  // was cut); other items close completed.
  void CloseItem(std::string* out, absl::string_view message_status = "completed") {
    if (open_ == kNone) return;
    const size_t index = output_.size();
    Json item;
    switch (open_) {
      case kReasoning:
        Emit("response.reasoning_summary_text.done",
             {{"item_id", item_id_},
              {"output_index", index},
              {"summary_index", 0},
              {"text", item_text_}},
             out);
        Emit("response.reasoning_summary_part.done",
             {{"item_id", item_id_},
              {"output_index", index},
              {"summary_index", 0},
              {"part", {{"type", "summary_text"}, {"text", item_text_}}}},
             out);
        item = ReasoningItem(item_id_, item_text_, true);
        break;
      case kMessage:
        Emit("response.output_text.done",
             {{"item_id", item_id_},
              {"output_index", index},
              {"content_index", 0},
              {"text", item_text_}},
             out);
        Emit("response.content_part.done",
             {{"item_id", item_id_},
              {"output_index", index},
              {"content_index", 0},
              {"part", TextPart(item_text_)}},
             out);
        item = MessageItem(item_id_, item_text_, message_status);
        break;
      default:
        Emit("response.function_call_arguments.done",
             {{"item_id", item_id_}, {"output_index", index}, {"arguments", item_text_}}, out);
        item =
            FunctionCallItem(namespaces_, item_id_, call_id_, call_name_, item_text_, "completed");
        break;
    }
    Emit("response.output_item.done", {{"output_index", index}, {"item", item}}, out);
    output_.push_back(std::move(item));
    open_ = kNone;
    open_tool_ = -1;
  }

  const std::string id_;
  const std::string model_;
  const std::set<std::string> namespaces_;  // Of the request's namespace tools.
  const bool parallel_;                     // The request's parallel_tool_calls.
  const int64_t created_;
  uint64_t sequence_ = 0;
  bool opened_ = false;          // response.created was sent.
  Json output_ = Json::array();  // Items closed so far.
  Kind open_ = kNone;
  std::string item_id_;
  std::string item_text_;  // Text, reasoning or arguments of the open item.
  std::string call_id_;
  std::string call_name_;
  int open_tool_ = -1;
  CollectedOutput collected_;
  ToolCallIds tool_ids_{"call_"};  // The calls' call_id.
};

}  // namespace

absl::StatusOr<GenerationSpec> ParseResponsesRequest(const Json& body,
                                                     const RequestLimits& limits) {
  JsonFields f(body, "");
  GenerationSpec spec;
  ASSIGN_OR_RETURN(std::optional<std::string> model, f.String("model", 256));
  spec.model = model.value_or("");
  ASSIGN_OR_RETURN(std::optional<bool> stream, f.Bool("stream"));
  spec.stream = stream.value_or(false);
  ASSIGN_OR_RETURN(std::optional<std::string> previous, f.String("previous_response_id", 256));
  if (previous.has_value()) {
    return Invalid("previous_response_id",
                   "is not supported: this server stores no responses; "
                   "send the whole conversation in input");
  }
  RETURN_IF_ERROR(f.Bool("store").status());  // Accepted; nothing is ever stored.
  infer_v1::GenerateRequest& req = spec.request;
  infer_v1::ChatPrompt* chat = req.mutable_chat();
  ASSIGN_OR_RETURN(std::optional<std::string> instructions,
                   f.String("instructions", limits.max_string_bytes));
  if (instructions.has_value()) {
    infer_v1::ChatMessage* m = chat->add_messages();
    m->set_role("system");
    m->set_content(*instructions);
  }
  const Json* input = f.Get("input");
  if (input == nullptr) return Invalid("input", "is required");
  if (input->is_string()) {
    infer_v1::ChatMessage* m = chat->add_messages();
    m->set_role("user");
    ASSIGN_OR_RETURN(std::string text, ContentText(*input, "input", limits));
    m->set_content(std::move(text));
  } else if (input->is_array()) {
    if (input->size() > limits.max_messages) {
      return Invalid("input", absl::StrCat("has more than ", limits.max_messages, " items"));
    }
    InputBuilder builder(limits, chat);
    for (size_t i = 0; i < input->size(); ++i) {
      RETURN_IF_ERROR(
          builder.AddItem((*input)[i], absl::StrCat("input[", i, "]"), i + 1 == input->size()));
    }
    builder.Finish();
  } else {
    return Invalid("input", "must be a string or an array of items");
  }
  if (chat->messages_size() == 0) return Invalid("input", "must not be empty");
  std::set<std::string> namespaces;
  RETURN_IF_ERROR(ToolsParser(limits, chat, &namespaces).Parse(f));
  ASSIGN_OR_RETURN(std::optional<bool> parallel, f.Bool("parallel_tool_calls"));
  chat->set_single_tool_call(parallel == false);  // The turn ends after its first call.
  ASSIGN_OR_RETURN(const Json* text, f.Object("text"));
  if (text != nullptr) {
    ASSIGN_OR_RETURN(const Json* format, JsonFields(*text, "text").Object("format"));
    // Structured outputs: decoding is constrained to the format (docs/gateway.md).
    if (format != nullptr) {
      RETURN_IF_ERROR(
          ParseOpenAiResponseFormat(*format, "text.format", SchemaMembers::kInline, &req));
    }
  }
  RETURN_IF_ERROR(ParseSampling(f, limits, {"max_output_tokens"}, "stop", req.mutable_sampling()));
  infer_v1::TemplateOptions* options = chat->mutable_options();
  options->set_add_generation_prompt(true);
  RETURN_IF_ERROR(CheckResponseFormatFits(req, "text.format", ""));
  ASSIGN_OR_RETURN(const Json* reasoning, f.Object("reasoning"));
  if (reasoning != nullptr) {
    ASSIGN_OR_RETURN(std::optional<std::string> effort,
                     JsonFields(*reasoning, "reasoning").String("effort", 32));
    if (effort.has_value()) options->set_enable_thinking(*effort != "none" && *effort != "minimal");
  }
  req.set_parse_output(true);
  ASSIGN_OR_RETURN(std::optional<std::string> cache_key, f.String("prompt_cache_key", 1024));
  req.set_conversation(ConversationLabel(cache_key.value_or(""), *chat));
  spec.make_formatter = [namespaces = std::move(namespaces),
                         parallel = !chat->single_tool_call()](const std::string& name) {
    return std::make_unique<ResponsesFormatter>(name, namespaces, parallel);
  };
  return spec;
}

}  // namespace cairn::gateway
