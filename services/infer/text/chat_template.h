#ifndef CAIRN_SERVICES_INFER_TEXT_CHAT_TEMPLATE_H_
#define CAIRN_SERVICES_INFER_TEXT_CHAT_TEMPLATE_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/jinja.h"
#include "services/infer/text/tokenizer.h"

namespace cairn::infer::text {

// A chat request as the template sees it (OpenAI-style).
struct ChatRequest {
  // [{"role": "system"|"user"|"assistant"|"tool", "content": ..., "reasoning_content": ...,
  //   "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}],
  //   "tool_call_id": ...}, ...]
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // OpenAI tool definitions, or null (the template then sees `tools` as none).
  nlohmann::ordered_json tools = nullptr;
  bool add_generation_prompt = true;
  // Passed to the template only when set (templates test `enable_thinking is defined`).
  std::optional<bool> enable_thinking;
  // Further template variables (an object), e.g. {"preserve_thinking": true}.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // Leaves the last message, the assistant's, open for the answer to continue (transformers'
  // continue_final_message): the template runs without the generation prompt (whatever
  // add_generation_prompt says) and the text is cut where what the template writes after that
  // message's content begins (found by a render with a marker for the content).
  bool continue_final_message = false;
  // Forces the answer to open with a tool call (tool_choice "required", or a named function):
  // "" for any of `tools`, else the function's name. The prompt then ends in the template's
  // tool-call opening (ForcedToolCallText), rendered without reasoning, and the answer continues
  // it. Unset: the model chooses.
  std::optional<std::string> forced_tool;
  // Renders the turn without reasoning, as for `forced_tool` (enable_thinking false whatever it
  // says, a reasoning block the template opens anyway closed empty), so that the answer starts
  // with its content (structured outputs: the JSON value).
  bool without_reasoning = false;
  // The messages' own text (contents, reasoning, tool-call arguments) and the tool definitions'
  // strings are encoded with their special tokens as text: a file an agent reads that holds
  // "<|im_end|>" stays those characters instead of closing the turn. The template's own markup
  // keeps its special tokens. False: every special token's text in the rendered prompt is the token
  // (transformers' apply_chat_template followed by encoding, which splits nothing).
  bool special_tokens_as_text = true;
  // When > 0, the prompt's encoding stops past this many tokens (EncodeOptions::max_tokens) and
  // RenderPrompt returns OutOfRange: a conversation no context can hold costs no more.
  size_t max_prompt_tokens = 0;
};

// Parses a request object: {"messages": [...], "tools": [...], "add_generation_prompt": bool,
// "enable_thinking": bool, any other field -> extra}. Errors: InvalidArgument naming the bad
// field (messages missing or not an array of objects with a string role, ...).
absl::StatusOr<ChatRequest> ParseChatRequest(const nlohmann::ordered_json& request);

struct ChatTemplateOptions {
  // Special-token strings passed to the template as bos_token / eos_token / pad_token /
  // unk_token, as transformers does (from tokenizer_config.json when loaded from a model).
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  // OpenAI clients send tool-call arguments as a JSON string; templates that iterate them
  // (`arguments|items`, the XML form) need an object. When true, string arguments that parse as
  // a JSON object are passed to the template as that object (what OpenAI-compatible servers do).
  bool parse_string_arguments = true;
  jinja::TemplateOptions jinja;
};

// A model's chat template. Thread-safe: Render may be called concurrently.
class ChatTemplate {
 public:
  // Parses `source`. Errors: InvalidArgument for syntax outside the supported Jinja subset.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Create(
      std::string_view source, const ChatTemplateOptions& options = {});
  // Loads the template of a Hugging Face model folder: chat_template.jinja if present, else the
  // "chat_template" field of tokenizer_config.json (a string, or a list of {name, template}
  // where "default" is used); special tokens come from tokenizer_config.json. `options`'
  // special tokens, when set, take precedence. Errors: NotFound when the folder has no template,
  // InvalidArgument for malformed files or unsupported template syntax.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromModelDir(
      const std::string& dir, ChatTemplateOptions options = {});

  // Renders `request` to the prompt text. Errors: InvalidArgument for a malformed request or a
  // template type error (or, with continue_final_message, a last message that is not the
  // assistant's text or whose content the rendered text lacks), FailedPrecondition when the
  // template raises (e.g. "No user query found in messages."), ResourceExhausted past the Jinja
  // limits.
  absl::StatusOr<std::string> Render(const ChatRequest& request) const;

  const std::string& source() const { return source_; }
  const ChatTemplateOptions& options() const { return options_; }

 private:
  ChatTemplate(std::string source, ChatTemplateOptions options,
               std::unique_ptr<jinja::Template> tmpl)
      : source_(std::move(source)), options_(std::move(options)), template_(std::move(tmpl)) {}

  const std::string source_;
  const ChatTemplateOptions options_;
  std::unique_ptr<jinja::Template> template_;
};

struct StableBoundaryOptions {
  // The placeholder turns appended to find what the next request will keep (design §6).
  std::string placeholder_answer = "cairn placeholder answer";
  std::string placeholder_question = "cairn placeholder question";
};

struct RenderedPrompt {
  std::string text;
  std::vector<TokenId> ids;
  // The number of leading tokens of `ids` that the next turn's prompt is expected to repeat:
  // the longest common token prefix of `ids` and the tokens of the same messages followed by a
  // placeholder assistant answer and a placeholder user question (rendered without a generation
  // prompt). Captures reasoning stripping, re-serialisation and tail changes (docs/model.md §6.3).
  size_t stable_boundary = 0;
  // The number of leading tokens of `ids` that another conversation with the same leading
  // system (and developer) messages and tools is expected to send too: the longest common token
  // prefix of `ids` and the tokens of those messages followed by a placeholder user question.
  // 0 when the template rejects that.
  size_t shared_boundary = 0;
  // What `text` ends with that the answer continues as its own (a forced tool call's opening,
  // ChatRequest::forced_tool): an output parser reads it before the generated text
  // (OutputParserOptions::prompt_tail). Empty otherwise.
  std::string forced_text;
};

// How a template writes a tool call inside <tool_call>: as JSON, {"name": ..., "arguments": ...}
// (Qwen3's), or as XML, <function=NAME> with <parameter=KEY> blocks (Qwen3-Coder's and
// Qwen3.5's), told apart by "<function=" in its source.
enum class ToolCallMarkup { kJson, kXml };
// The text that opens a tool call in either markup (one added token in Qwen's vocabularies).
inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";  // Likewise.
ToolCallMarkup ToolCallMarkupOf(const ChatTemplate& chat_template);

// The text a forced tool call opens with in the template's format: "<tool_call>\n", followed
// for a named function by its opening, `<function=NAME>\n` where the template writes calls as
// XML (its source has "<function="), else `{"name": "NAME", "arguments":` (JSON, as Qwen3's
// template writes them; the space after the colon is left to the model, whose tokens carry it
// with what follows).
std::string ForcedToolCallText(const ChatTemplate& chat_template, std::string_view function);

// Checks that `request` can force its tool call (`forced_tool` set): it has tools, defines the
// function named (a name without whitespace, controls, '<' or '>'), and neither continues its
// final message nor leaves out the generation prompt. InvalidArgument saying which otherwise.
absl::Status CheckForcedTool(const ChatRequest& request);

// Renders and tokenizes `request` and computes its stable boundary (0 when the template rejects
// the placeholder turns). With `special_tokens_as_text`, each special token's text in the
// messages is wrapped in markers before the render, and the spans the markers enclose in the
// rendered text are encoded as text (EncodeOptions::literal_spans), the markers removed; a render
// that loses or splits a marker (a template that escapes or cuts the messages' text) is done
// again without them. With `forced_tool` or `without_reasoning`, the render runs with
// enable_thinking false and a reasoning block it still opens ("<think>\n" at its end) is closed
// empty; with `forced_tool` the text then ends in ForcedToolCallText. Errors: those of
// CheckForcedTool, ChatTemplate::Render and Tokenizer::Encode for `request` itself.
absl::StatusOr<RenderedPrompt> RenderPrompt(const ChatTemplate& chat_template,
                                            const Tokenizer& tokenizer, const ChatRequest& request,
                                            const StableBoundaryOptions& options = {});

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_CHAT_TEMPLATE_H_
