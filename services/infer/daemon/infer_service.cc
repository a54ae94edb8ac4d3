#include "services/infer/daemon/infer_service.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status/grpc_status.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/infer/daemon/generate_stream.h"
#include "services/infer/text/bounded_json.h"
#include "services/infer/text/chat_template.h"
#include "services/infer/text/json_constraint.h"
#include "services/infer/text/tool_call_grammar.h"

namespace cairn::infer {
namespace {

using ordered_json = nlohmann::ordered_json;

absl::Time DeadlineOf(const grpc::CallbackServerContext* context) {
  const auto d = context->deadline();
  if (d == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

absl::StatusOr<ordered_json> MessagesJson(const v1::ChatPrompt& chat, size_t max_messages) {
  if (chat.messages_size() == 0) return absl::InvalidArgumentError("chat.messages is empty");
  if (static_cast<size_t>(chat.messages_size()) > max_messages) {
    return absl::InvalidArgumentError(absl::StrCat("chat.messages has ", chat.messages_size(),
                                                   " messages, at most ", max_messages,
                                                   " are accepted"));
  }
  ordered_json messages = ordered_json::array();
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatMessage& m = chat.messages(i);
    if (m.has_media()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chat.messages[", i, "] has non-text content; this server accepts text only"));
    }
    if (m.role() != "system" && m.role() != "user" && m.role() != "assistant" &&
        m.role() != "tool" && m.role() != "developer") {
      return absl::InvalidArgumentError(absl::StrCat("chat.messages[", i, "].role \"", m.role(),
                                                     "\" is not one of system, ",
                                                     "developer, user, assistant, tool"));
    }
    ordered_json j = ordered_json::object();
    // Templates know "system"; the Responses API's "developer" role means the same.
    j["role"] = m.role() == "developer" ? "system" : m.role();
    j["content"] = m.content();
    if (!m.reasoning_content().empty()) j["reasoning_content"] = m.reasoning_content();
    if (m.tool_calls_size() > 0) {
      ordered_json calls = ordered_json::array();
      for (const v1::ToolCall& c : m.tool_calls()) {
        ordered_json call = ordered_json::object();
        call["id"] = c.id();
        call["type"] = "function";
        call["function"] = {{"name", c.name()}, {"arguments", c.arguments_json()}};
        calls.push_back(std::move(call));
      }
      j["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id().empty()) j["tool_call_id"] = m.tool_call_id();
    if (!m.name().empty()) j["name"] = m.name();
    messages.push_back(std::move(j));
  }
  return messages;
}

absl::StatusOr<ordered_json> ToolsJson(const v1::ChatPrompt& chat) {
  if (chat.tools_size() == 0) return ordered_json(nullptr);
  ordered_json tools = ordered_json::array();
  for (int i = 0; i < chat.tools_size(); ++i) {
    if (absl::Status bounds = text::CheckJsonTextBounds(chat.tools(i).json()); !bounds.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("chat.tools[", i, "]: ", bounds.message()));
    }
    ordered_json t = ordered_json::parse(chat.tools(i).json(), nullptr, /*allow_exceptions=*/false);
    if (t.is_discarded() || !t.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("chat.tools[", i, "] is not a JSON object"));
    }
    tools.push_back(std::move(t));
  }
  return tools;
}

// The engine's view of a JsonConstraint. The engine's mask covers the model's logits; a
// tokenizer with more ids than the model has (a warning at load) gets a scratch mask of its own
// size, of which the logits' part is copied (no id past them can be sampled).
//
// Thread-compatible: one request's, on the scheduler thread.
class JsonTokenConstraint final : public TokenConstraint {
 public:
  JsonTokenConstraint(std::unique_ptr<text::JsonConstraint> json, int32_t id_limit)
      : json_(std::move(json)), id_limit_(id_limit) {}

  absl::Status Allowed(absl::Span<uint64_t> allowed) override {
    const size_t words = (static_cast<size_t>(id_limit_) + 63) / 64;
    if (words <= allowed.size()) return json_->Allowed(allowed);
    scratch_.resize(words);
    RETURN_IF_ERROR(json_->Allowed(absl::MakeSpan(scratch_)));
    std::copy(scratch_.begin(), scratch_.begin() + allowed.size(), allowed.begin());
    return absl::OkStatus();
  }
  absl::Status Accept(int32_t token) override { return json_->Accept(token); }
  bool Unconstrained() const override { return json_->Unconstrained(); }

 private:
  const std::unique_ptr<text::JsonConstraint> json_;
  const int32_t id_limit_;
  std::vector<uint64_t> scratch_;
};

// The request's tools as a grammar cache key: each one's strict flag and JSON as sent.
std::string ToolsKey(const v1::ChatPrompt& chat) {
  std::string key;
  for (const v1::Tool& t : chat.tools()) {
    absl::StrAppend(&key, t.strict() ? "s" : "-", t.json().size(), ":", t.json());
  }
  return key;
}

// Whether a function may be strict: Tool.strict, or a "strict" member in the JSON (a client of
// the daemon's own API may put it there). No tool that says "strict" leaves "auto" calls free
// without parsing the tools.
bool MayHaveStrictTool(const v1::ChatPrompt& chat) {
  for (const v1::Tool& t : chat.tools()) {
    if (t.strict() || absl::StrContains(t.json(), "\"strict\"")) return true;
  }
  return false;
}

// The request's tools for a grammar: as ToolsJson, each function marked "strict" where the
// client asked (v1::Tool::strict; the template renders the tools without it).
absl::StatusOr<ordered_json> ToolsForGrammar(const v1::ChatPrompt& chat) {
  ASSIGN_OR_RETURN(ordered_json tools, ToolsJson(chat));
  for (int i = 0; i < chat.tools_size(); ++i) {
    ordered_json& t = tools[static_cast<size_t>(i)];
    if (chat.tools(i).strict() && t.contains("function") && t["function"].is_object()) {
      t["function"]["strict"] = true;
    }
  }
  return tools;
}

bool ForcesToolCall(const v1::ChatPrompt& chat) {
  const std::string& choice = chat.tool_choice();
  return !choice.empty() && choice != "auto" && choice != "none";
}

bool HasResponseFormat(const v1::GenerateRequest& request) {
  return request.has_response_format() &&
         request.response_format().format_case() != v1::ResponseFormat::FORMAT_NOT_SET;
}

// Returns INVALID_ARGUMENT with `message` for a request the context cannot hold, with the
// ErrorDetails (infer.proto) that name the reason, which ToGrpcStatus sends as the call's
// binary error details: the gateway acts on the reason, not on the message's words.
absl::Status ContextOverflowError(std::string message) {
  v1::ErrorDetails details;
  details.set_code(static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  details.set_message(message);
  details.set_reason(v1::ERROR_REASON_CONTEXT_OVERFLOW);
  return WithGrpcErrorDetails(absl::InvalidArgumentError(message), details.SerializeAsString());
}

}  // namespace

InferServiceImpl::InferServiceImpl(const ServedModel* model, Scheduler* scheduler, ThreadPool* pool,
                                   std::function<bool()> cache_connected,
                                   const InferServiceOptions& options)
    : model_(model),
      scheduler_(scheduler),
      pool_(pool),
      cache_connected_(std::move(cache_connected)),
      options_(options),
      grammars_(options.grammar_cache_entries, options.grammar_cache_key_bytes),
      id_prefix_(absl::StrFormat("gen-%08x-", std::random_device{}())) {}

std::string InferServiceImpl::NewRequestId() const {
  return absl::StrCat(id_prefix_, next_id_.fetch_add(1, std::memory_order_relaxed));
}

absl::Status InferServiceImpl::NeedTokenizer() const {
  if (model_->tokenizer() != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      model_->tokenizer_error(), "; only token-id prompts (prompt.token_ids) are served"));
}

absl::StatusOr<text::RenderedPrompt> InferServiceImpl::RenderChat(const v1::ChatPrompt& chat,
                                                                  bool without_reasoning,
                                                                  size_t max_tokens) const {
  RETURN_IF_ERROR(NeedTokenizer());
  if (model_->chat_template() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(model_->template_error(), "; send the prompt as text or token ids instead"));
  }
  // tool_choice: "auto" (or absent) lets the model choose, "none" leaves the tools out of the
  // prompt, "required" or a function's name ends the prompt in a tool call's opening.
  const std::string& choice = chat.tool_choice();
  text::ChatRequest req;
  ASSIGN_OR_RETURN(req.messages, MessagesJson(chat, options_.max_messages));
  if (choice != "none") {
    ASSIGN_OR_RETURN(req.tools, ToolsJson(chat));
  }
  if (!choice.empty() && choice != "auto" && choice != "none") {
    req.forced_tool = choice == "required" ? "" : choice;
  }
  req.add_generation_prompt = chat.has_options() ? chat.options().add_generation_prompt() : true;
  req.continue_final_message = chat.options().continue_final_message();
  if (chat.has_options() && chat.options().has_enable_thinking()) {
    req.enable_thinking = chat.options().enable_thinking();
  }
  req.without_reasoning = without_reasoning;
  req.special_tokens_as_text = options_.special_tokens_as_text;
  req.max_prompt_tokens = max_tokens;
  if (req.forced_tool.has_value()) {
    if (absl::Status s = text::CheckForcedTool(req); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat.tool_choice \"", choice, "\": ", s.message()));
    }
  }
  absl::StatusOr<text::RenderedPrompt> rendered =
      text::RenderPrompt(*model_->chat_template(), *model_->tokenizer(), req);
  // The template's raise_exception (the only FailedPrecondition of a render) refuses the
  // conversation itself ("System message must be at the beginning."): the client's to fix.
  if (absl::IsFailedPrecondition(rendered.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the chat template refused the messages: ", rendered.status().message()));
  }
  return rendered;
}

absl::StatusOr<GenerateRequest> InferServiceImpl::Prepare(const v1::GenerateRequest& request,
                                                          text::OutputParserOptions* parser) const {
  GenerateRequest out;
  if (request.request_id().size() > options_.max_label_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_id is longer than ", options_.max_label_bytes, " bytes"));
  }
  if (request.conversation().size() > options_.max_label_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("conversation is longer than ", options_.max_label_bytes, " bytes"));
  }
  out.id = request.request_id().empty() ? NewRequestId() : request.request_id();
  out.conversation = request.conversation();
  const int64_t vocab = model_->model()->info().vocab_size;
  const bool formatted = HasResponseFormat(request);
  if (formatted && request.has_chat()) {
    // The constraint starts at the first generated token: the answer must start there too.
    if (ForcesToolCall(request.chat())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "response_format cannot be combined with chat.tool_choice \"",
          request.chat().tool_choice(), "\": a forced tool call is not a structured answer"));
    }
    if (request.chat().options().continue_final_message()) {
      return absl::InvalidArgumentError(
          "response_format cannot be combined with chat.options.continue_final_message: the "
          "answer would continue text the format does not constrain");
    }
  }
  std::string prompt_text;
  // The prompt must leave a token of the context to generate: a longer one is refused after
  // that many tokens' work, not its whole text's (OutOfRange from the encoding).
  const int64_t context = scheduler_->context_tokens();
  const size_t max_prompt = static_cast<size_t>(std::max<int64_t>(context - 1, 1));
  const auto overflow = [&](const absl::Status& s) {
    if (!absl::IsOutOfRange(s)) return s;
    return ContextOverflowError(absl::StrCat("prompt of more than ", max_prompt,
                                             " tokens does not fit the context of ", context,
                                             " tokens (at least one token must be generated)"));
  };
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kChat: {
      absl::StatusOr<text::RenderedPrompt> chat_rendered =
          RenderChat(request.chat(), formatted, max_prompt);
      if (!chat_rendered.ok()) return overflow(chat_rendered.status());
      text::RenderedPrompt& rendered = *chat_rendered;
      out.prompt.assign(rendered.ids.begin(), rendered.ids.end());
      out.stable_boundary = static_cast<int64_t>(rendered.stable_boundary);
      out.shared_boundary = static_cast<int64_t>(rendered.shared_boundary);
      prompt_text = std::move(rendered.text);
      parser->prompt_tail = std::move(rendered.forced_text);
      break;
    }
    case v1::GenerateRequest::kText: {
      RETURN_IF_ERROR(NeedTokenizer());
      text::EncodeOptions encode;
      encode.max_tokens = max_prompt;
      absl::StatusOr<std::vector<text::TokenId>> ids =
          model_->tokenizer()->Encode(request.text(), encode);
      if (!ids.ok()) return overflow(ids.status());
      out.prompt.assign(ids->begin(), ids->end());
      prompt_text = request.text();
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      for (int i = 0; i < request.token_ids().ids_size(); ++i) {
        const uint32_t id = request.token_ids().ids(i);
        if (id >= static_cast<uint64_t>(vocab)) {
          return absl::InvalidArgumentError(absl::StrCat("token_ids.ids[", i, "] = ", id,
                                                         " is outside the vocabulary of ", vocab));
        }
        out.prompt.push_back(static_cast<int32_t>(id));
      }
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return absl::InvalidArgumentError("prompt is missing (chat, text or token_ids)");
  }
  if (out.prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  for (size_t i = 0; i < out.prompt.size(); ++i) {
    if (out.prompt[i] < 0 || out.prompt[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("the prompt's token ", i, " (id ", out.prompt[i],
                       ") is outside the model's vocabulary of ", vocab));
    }
  }
  const int64_t n = static_cast<int64_t>(out.prompt.size());
  if (n >= context) {
    return ContextOverflowError(absl::StrCat("prompt of ", n,
                                             " tokens does not fit the context of ", context,
                                             " tokens (at least one token must be generated)"));
  }
  if (request.stable_boundary() > 0) {
    if (request.stable_boundary() > static_cast<uint64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat("stable_boundary ", request.stable_boundary(),
                                                     " is past the prompt's ", n, " tokens"));
    }
    out.stable_boundary = static_cast<int64_t>(request.stable_boundary());
  }
  if (request.shared_boundary() > 0) {
    if (request.shared_boundary() > static_cast<uint64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat("shared_boundary ", request.shared_boundary(),
                                                     " is past the prompt's ", n, " tokens"));
    }
    out.shared_boundary = static_cast<int64_t>(request.shared_boundary());
  }

  const v1::SamplingParams& p = request.sampling();
  SamplingOptions& s = out.sampling;
  // With model_defaults, a knob the request leaves absent is the model's (generation_config.json)
  // or the APIs' default; without, its zero value (temperature 0: greedy), as before presence.
  const SamplingDefaults& model = model_->sampling_defaults();
  const bool defaults = p.model_defaults();
  const float temperature =
      p.has_temperature() || !defaults ? p.temperature() : model.temperature.value_or(1.0f);
  const uint32_t top_k =
      p.has_top_k() || !defaults ? p.top_k() : static_cast<uint32_t>(model.top_k.value_or(0));
  const float top_p = p.has_top_p() || !defaults ? p.top_p() : model.top_p.value_or(1.0f);
  const float min_p = p.has_min_p() || !defaults ? p.min_p() : model.min_p.value_or(0.0f);
  const float repetition = p.has_repetition_penalty() || !defaults
                               ? p.repetition_penalty()
                               : model.repetition_penalty.value_or(1.0f);
  s.temperature = temperature;
  s.top_k = static_cast<int>(std::min<uint32_t>(top_k, static_cast<uint32_t>(vocab)));
  s.top_p = top_p == 0.0f ? 1.0f : top_p;
  s.min_p = min_p;
  s.repetition_penalty = repetition == 0.0f ? 1.0f : repetition;
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  if (p.has_seed()) s.seed = p.seed();
  if (p.logprobs() > static_cast<uint32_t>(options_.max_logprobs)) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.logprobs must be at most ",
                                                   options_.max_logprobs, ", got ", p.logprobs()));
  }
  s.logprobs = static_cast<int>(p.logprobs());
  if (absl::Status v = ValidateSamplingOptions(s, options_.max_logprobs); !v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.", v.message()));
  }
  if (p.has_max_tokens()) {
    if (p.max_tokens() == 0) {
      return absl::InvalidArgumentError("sampling.max_tokens must be at least 1");
    }
    if (static_cast<int64_t>(p.max_tokens()) > context - n && !p.max_tokens_is_ceiling()) {
      return ContextOverflowError(
          absl::StrCat("sampling.max_tokens ", p.max_tokens(), " is more than the ", context - n,
                       " tokens the context of ", context, " leaves after the prompt"));
    }
    out.max_tokens = std::min<int64_t>(p.max_tokens(), context - n);
  } else {
    out.max_tokens = context - n;
  }
  for (int i = 0; i < p.stop_token_ids_size(); ++i) {
    if (p.stop_token_ids(i) >= static_cast<uint64_t>(vocab)) {
      return absl::InvalidArgumentError(absl::StrCat("sampling.stop_token_ids[", i,
                                                     "] = ", p.stop_token_ids(i),
                                                     " is outside the vocabulary of ", vocab));
    }
    out.stop_ids.push_back(static_cast<int32_t>(p.stop_token_ids(i)));
  }
  if (!p.ignore_eos()) {
    out.stop_ids.insert(out.stop_ids.end(), model_->eos_ids().begin(), model_->eos_ids().end());
  }
  if (p.stop_size() > options_.max_stop_strings) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.stop has ", p.stop_size(),
                                                   " strings, at most ", options_.max_stop_strings,
                                                   " are accepted"));
  }
  for (int i = 0; i < p.stop_size(); ++i) {
    if (p.stop(i).empty() || p.stop(i).size() > options_.max_stop_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.stop[", i, "] must be 1 to ", options_.max_stop_bytes, " bytes"));
    }
  }
  if (p.stop_size() > 0 || request.parse_output()) RETURN_IF_ERROR(NeedTokenizer());
  parser->starts_in_reasoning = absl::EndsWith(prompt_text, "<think>\n");
  // A chat without tools, or whose tool_choice is "none", gets no tool calls: a <tool_call> the
  // model writes anyway (an example of the markup, a habit from the history) is its text, as
  // OpenAI's contract for "none" and vLLM have it.
  if (request.has_chat() &&
      (request.chat().tools_size() == 0 || request.chat().tool_choice() == "none")) {
    parser->parse_tool_calls = false;
  }
  if (formatted) {
    if (p.ignore_eos()) {
      return absl::InvalidArgumentError(
          "sampling.ignore_eos cannot be combined with response_format: the answer ends with "
          "an end-of-turn token once its JSON value is complete");
    }
    ASSIGN_OR_RETURN(out.constraint, MakeConstraint(request, out.stop_ids));
    // The answer is the JSON value: no reasoning or tool calls are looked for in it (a string
    // in it may hold "<tool_call>").
    parser->starts_in_reasoning = false;
    parser->parse_reasoning = false;
    parser->parse_tool_calls = false;
  } else if (request.has_chat() && request.chat().tools_size() > 0 &&
             !(ForcesToolCall(request.chat()) && p.ignore_eos())) {
    // Tool calls are held to calls of defined functions whose arguments their parameters
    // accept: a forced one, and under "auto" those the model opens when a function is strict
    // (in the template's markup, JSON or XML); with chat.single_tool_call the turn ends after
    // the first call (MakeConstraint).
    ASSIGN_OR_RETURN(out.constraint, MakeConstraint(request, out.stop_ids));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<TokenConstraint>> InferServiceImpl::MakeConstraint(
    const v1::GenerateRequest& request, const std::vector<int32_t>& stop_ids) const {
  RETURN_IF_ERROR(NeedTokenizer());
  std::shared_ptr<const text::JsonGrammar> grammar;
  if (!HasResponseFormat(request)) {
    if (!request.has_chat() || model_->chat_template() == nullptr) return nullptr;
    const text::ToolCallMarkup markup = text::ToolCallMarkupOf(*model_->chat_template());
    const v1::ChatPrompt& chat = request.chat();
    const std::string& choice = chat.tool_choice();
    // The tools are parsed only to compile a grammar the cache does not hold.
    auto compile = [&chat](auto build) -> absl::StatusOr<std::shared_ptr<const text::JsonGrammar>> {
      ASSIGN_OR_RETURN(ordered_json tools, ToolsForGrammar(chat));
      return build(tools);
    };
    // One call at most: the turn ends after it (not where the end of turn is ignored).
    const bool single = chat.single_tool_call() && !request.sampling().ignore_eos();
    if (!ForcesToolCall(chat)) {
      const std::optional<text::TokenId> open = model_->tokenizer()->TokenToId(text::kToolCallOpen);
      const bool strict = MayHaveStrictTool(chat);
      if (choice == "none" || !open.has_value() || (!strict && !single)) return nullptr;
      std::shared_ptr<const text::JsonGrammar> call;
      if (strict) {
        ASSIGN_OR_RETURN(call, grammars_.GetOrCompile(absl::StrCat("auto\n", ToolsKey(chat)), [&] {
          return compile([markup](const ordered_json& tools) {
            return text::StrictToolCallGrammar(tools, markup);
          });
        }));
      }
      // No strict function: calls are the model's (up to the close token with `single`).
      if (call == nullptr && !single) return nullptr;
      text::CallTokens tokens;
      tokens.open = *open;
      tokens.close = model_->tokenizer()->TokenToId(text::kToolCallClose).value_or(-1);
      if (single) tokens.end_after_call = stop_ids;
      const text::TokenIndex* index = model_->token_index();
      return std::make_unique<JsonTokenConstraint>(
          text::TriggeredConstraint(std::move(call), index, std::move(tokens)), index->id_limit());
    }
    const std::string function = choice == "required" ? "" : choice;
    absl::StatusOr<std::shared_ptr<const text::JsonGrammar>> call = grammars_.GetOrCompile(
        absl::StrCat("forced\n", single ? "1" : "*", function, "\n", ToolsKey(chat)), [&] {
          return compile([&function, markup, single](const ordered_json& tools) {
            return text::ForcedToolCallGrammar(tools, function, markup, single);
          });
        });
    if (!call.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat.tool_choice \"", choice, "\": ", call.status().message()));
    }
    grammar = std::move(*call);
  }
  const v1::ResponseFormat& format = request.response_format();
  switch (grammar != nullptr ? v1::ResponseFormat::FORMAT_NOT_SET : format.format_case()) {
    case v1::ResponseFormat::kJsonObject:
      if (!format.json_object()) {
        return absl::InvalidArgumentError(
            "response_format.json_object must be true when set (leave response_format unset "
            "for free text)");
      }
      grammar = text::JsonGrammar::AnyObject();
      break;
    case v1::ResponseFormat::kJsonSchema: {
      absl::StatusOr<std::shared_ptr<const text::JsonGrammar>> compiled = grammars_.GetOrCompile(
          absl::StrCat("schema\n", format.json_schema()),
          [&] { return text::JsonGrammar::FromSchema(format.json_schema()); });
      if (!compiled.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("response_format.json_schema: ", compiled.status().message()));
      }
      grammar = std::move(*compiled);
      break;
    }
    case v1::ResponseFormat::FORMAT_NOT_SET:
      if (grammar == nullptr) return nullptr;
      break;
  }
  // The answer ends with a token that ends the turn: the model's EOS ids and the special tokens
  // among the request's stop ids (an ordinary token there stops generation wherever it is
  // sampled, as a stop string does, and stays part of the grammar).
  std::vector<text::TokenId> end_ids;
  for (int32_t id : stop_ids) {
    const bool eos = std::find(model_->eos_ids().begin(), model_->eos_ids().end(), id) !=
                     model_->eos_ids().end();
    if ((eos || model_->tokenizer()->IsSpecial(id)) &&
        std::find(end_ids.begin(), end_ids.end(), id) == end_ids.end()) {
      end_ids.push_back(id);
    }
  }
  if (end_ids.empty()) {
    if (!HasResponseFormat(request)) return nullptr;  // A forced call stays as it was.
    return absl::FailedPreconditionError(
        "response_format needs an end-of-turn token to end the answer, and the model defines "
        "no eos_token_id (config.json, generation_config.json); pass a special token in "
        "sampling.stop_token_ids");
  }
  const text::TokenIndex* index = model_->token_index();
  return std::make_unique<JsonTokenConstraint>(
      text::JsonConstraint::Create(std::move(grammar), index, std::move(end_ids)),
      index->id_limit());
}

grpc::Status InferServiceImpl::Enqueue(absl::AnyInvocable<void() &&> fn) {
  return ToGrpcStatus(
      pool_->ScheduleCall(std::move(fn), options_.max_queued_calls, "the inference daemon"));
}

grpc::ServerWriteReactor<v1::GenerateResponse>* InferServiceImpl::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  auto* reactor = new GenerateReactor(options_.max_stream_buffer_bytes);
  const absl::Time deadline = DeadlineOf(context);
  const grpc::Status queued = Enqueue([this, request, reactor, deadline] {
    GenerateSinkOptions so;
    absl::StatusOr<GenerateRequest> prepared = Prepare(*request, &so.parser);
    if (!prepared.ok()) {
      reactor->Close(ToGrpcStatus(prepared.status()));
      return;
    }
    so.tokenizer = model_->tokenizer();
    so.stop.assign(request->sampling().stop().begin(), request->sampling().stop().end());
    so.parse_output = request->parse_output();
    if (request->has_chat()) {
      absl::StatusOr<ordered_json> tools = ToolsJson(request->chat());
      if (tools.ok()) so.parser.tools = std::move(*tools);
    }
    so.logprobs = prepared->sampling.logprobs;
    so.request_id = prepared->id;
    prepared->sink = std::make_unique<GenerateSink>(reactor, std::move(so));
    prepared->deadline = deadline;
    // Submit consumes the request only on success; on failure the sink was never used.
    absl::Status submitted = scheduler_->Submit(std::move(*prepared));
    if (!submitted.ok()) reactor->Close(ToGrpcStatus(submitted));
  });
  if (!queued.ok()) reactor->Close(queued);
  return reactor;
}

grpc::ServerUnaryReactor* InferServiceImpl::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const grpc::Status queued = Enqueue([this, request, response, reactor] {
    absl::Status st = NeedTokenizer();
    if (st.ok()) {
      text::EncodeOptions eo;
      eo.parse_special = request->parse_special();
      absl::StatusOr<std::vector<text::TokenId>> ids =
          model_->tokenizer()->Encode(request->text(), eo);
      if (ids.ok()) {
        for (text::TokenId id : *ids) response->add_ids(static_cast<uint32_t>(id));
      }
      st = ids.status();
    }
    reactor->Finish(ToGrpcStatus(st));
  });
  if (!queued.ok()) reactor->Finish(queued);
  return reactor;
}

grpc::ServerUnaryReactor* InferServiceImpl::Detokenize(grpc::CallbackServerContext* context,
                                                       const v1::DetokenizeRequest* request,
                                                       v1::DetokenizeResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const grpc::Status queued = Enqueue([this, request, response, reactor] {
    absl::Status st = NeedTokenizer();
    if (st.ok()) {
      std::vector<text::TokenId> ids(request->ids().begin(), request->ids().end());
      absl::StatusOr<std::string> text = model_->tokenizer()->Decode(ids, request->skip_special());
      if (text.ok()) response->set_text(std::move(*text));
      st = text.status();
    }
    reactor->Finish(ToGrpcStatus(st));
  });
  if (!queued.ok()) reactor->Finish(queued);
  return reactor;
}

grpc::ServerUnaryReactor* InferServiceImpl::ApplyTemplate(grpc::CallbackServerContext* context,
                                                          const v1::ApplyTemplateRequest* request,
                                                          v1::ApplyTemplateResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const grpc::Status queued = Enqueue([this, request, response, reactor] {
    absl::StatusOr<text::RenderedPrompt> rendered = RenderChat(request->chat());
    if (rendered.ok()) {
      response->set_text(std::move(rendered->text));
      for (text::TokenId id : rendered->ids) response->add_ids(static_cast<uint32_t>(id));
      response->set_stable_boundary(static_cast<uint64_t>(rendered->stable_boundary));
      response->set_shared_boundary(static_cast<uint64_t>(rendered->shared_boundary));
    }
    reactor->Finish(ToGrpcStatus(rendered.status()));
  });
  if (!queued.ok()) reactor->Finish(queued);
  return reactor;
}

grpc::ServerUnaryReactor* InferServiceImpl::ListSlots(grpc::CallbackServerContext* context,
                                                      const v1::ListSlotsRequest* /*request*/,
                                                      v1::ListSlotsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  for (const SlotSnapshot& s : scheduler_->Snapshot()) {
    v1::SlotInfo* info = response->add_slots();
    info->set_slot(static_cast<uint32_t>(s.slot));
    switch (s.state) {
      case SlotSnapshot::State::kIdle:
        info->set_state(v1::SlotInfo::STATE_IDLE);
        break;
      case SlotSnapshot::State::kPrefill:
        info->set_state(v1::SlotInfo::STATE_PREFILL);
        break;
      case SlotSnapshot::State::kDecode:
        info->set_state(v1::SlotInfo::STATE_DECODE);
        break;
      case SlotSnapshot::State::kRestoring:
        info->set_state(v1::SlotInfo::STATE_RESTORING);
        break;
    }
    info->set_tokens(static_cast<uint64_t>(s.tokens));
    info->set_request_id(s.request_id);
    info->set_conversation(s.conversation);
  }
  response->set_queued_requests(static_cast<uint32_t>(scheduler_->queued()));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* InferServiceImpl::GetModelInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetModelInfoRequest* /*req*/,
                                                         v1::GetModelInfoResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const Model& m = *model_->model();
  response->set_name(model_->name());
  response->set_architecture(m.info().architecture);
  response->set_parameters(static_cast<uint64_t>(m.info().num_parameters));
  response->set_context_length(static_cast<uint32_t>(scheduler_->context_tokens()));
  response->set_vocab_size(static_cast<uint32_t>(m.info().vocab_size));
  response->set_compat_digest(model_->identity().digest);
  response->set_weights_digest(model_->identity().weights_digest);
  response->set_backend(model_->backend_name());
  response->set_slots(static_cast<uint32_t>(scheduler_->Snapshot().size()));
  response->set_full_attention_layers(static_cast<uint32_t>(model_->full_attention_layers()));
  response->set_linear_attention_layers(static_cast<uint32_t>(model_->linear_attention_layers()));
  response->set_bytes_per_row(static_cast<uint64_t>(m.state_layout().row_bytes()));
  response->set_private_state_bytes(static_cast<uint64_t>(m.state_layout().private_bytes()));
  response->set_cache_connected(cache_connected_ && cache_connected_());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace cairn::infer
