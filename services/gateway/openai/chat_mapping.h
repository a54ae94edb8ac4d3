#ifndef CAIRN_SERVICES_GATEWAY_OPENAI_CHAT_MAPPING_H_
#define CAIRN_SERVICES_GATEWAY_OPENAI_CHAT_MAPPING_H_

// OpenAI's POST /v1/chat/completions and POST /v1/completions <-> cairn.infer.v1.Generate.
//
// Requests: every field is type- and range-checked before any work (GW4); errors are
// InvalidArgument naming the field. Per-run ids and metadata (user, metadata,
// prompt_cache_key, store, ...) are accepted and never reach the prompt. Media parts are
// refused with a clear error.
//
// Responses: chat_formatters.h (included here for FinishReasonName and UsageObject).

#include "absl/status/statusor.h"
#include "services/gateway/openai/chat_formatters.h"
#include "services/gateway/openai/format_util.h"

namespace cairn::gateway {

// Parses a chat completions request body.
absl::StatusOr<GenerationSpec> ParseChatCompletionRequest(const Json& body,
                                                          const RequestLimits& limits);
// Parses a (legacy) completions request body: `prompt` as text or token ids.
absl::StatusOr<GenerationSpec> ParseCompletionRequest(const Json& body,
                                                      const RequestLimits& limits);

// Reads the sampling fields shared by every API from `fields` into `sampling`. `max_tokens`
// names the field(s) holding the output limit, first found wins.
absl::Status ParseSampling(const JsonFields& fields, const RequestLimits& limits,
                           std::initializer_list<const char*> max_tokens_fields,
                           const char* stop_field, infer_v1::SamplingParams* sampling);

// Parses an OpenAI chat `messages` array into `chat` (shared with the Responses API's
// pieces). `field` names the array in messages.
absl::Status ParseChatMessages(const Json& messages, const std::string& field,
                               const RequestLimits& limits, infer_v1::ChatPrompt* chat);

// Adds the function tool described by `f` (its "name", "description" and the JSON schema in
// `schema_field`) to `chat` in the OpenAI {"type": "function", "function": {...}} form, its
// name prefixed by `name_prefix` (a Responses namespace, "" for none), and its "strict" flag
// beside it (infer_v1::Tool::strict; absent: false). Returns the name.
absl::StatusOr<std::string> AddFunctionTool(const JsonFields& f, const char* schema_field,
                                            const RequestLimits& limits, infer_v1::ChatPrompt* chat,
                                            absl::string_view name_prefix = "");
// Reads `tool_choice`: "auto", "none", "required", or an object naming a function (as
// {"function": {"name"}} in chat, {"name"} in the Responses API).
absl::Status ParseToolChoice(const JsonFields& top, infer_v1::ChatPrompt* chat);
// Checks that a tool_choice forcing a call can be served: the request has tools and does not
// continue its final message, and a named function is one of them. InvalidArgument naming
// `tool_choice` otherwise (the daemon checks the same, in its own field's name).
absl::Status CheckForcedToolChoice(const infer_v1::ChatPrompt& chat);
// Checks a forced function's name as a client gave it in `field`: not one of the modes (auto,
// none, required: the daemon's tool_choice holds either in one string), and nothing that would
// break the call's opening (whitespace, control characters, '<', '>').
absl::Status CheckForcedName(const std::string& name, const std::string& field);

// Whose `content` ContentText reads.
enum class ContentAuthor {
  kAny,
  // An assistant turn of the history: it may also hold OpenAI's refusal parts ({"type":
  // "refusal", "refusal": TEXT}, chat and Responses), which read as the assistant's text.
  kAssistant,
};

// What ContentText does with a media part (an image, audio, a file): this server reads text.
enum class MediaParts {
  // InvalidArgument naming the part: for the request's newest user turn, whose sender should
  // learn that the model cannot see it.
  kRefuse,
  // MediaPlaceholder's text instead: for tool results and the history, which a client resends
  // every turn (a refusal there would refuse every later turn of the conversation).
  kPlaceholder,
};
// The text that stands for a media part or block of type `type`.
std::string MediaPlaceholder(absl::string_view type);
// Which MediaParts a message of `role` gets: the newest message's (`last`) from the user
// are refused, all others stand as placeholders.
MediaParts MediaPartsFor(absl::string_view role, bool last);

// The text of an Anthropic block that can carry text: a document whose source is text
// ({"type": "text", "data": ...}) or text blocks ({"type": "content", "content": ...}), or a
// search_result (its title, source and text blocks); a document's title and context head its
// text. nullopt for a document whose bytes are media (a PDF in base64 or by URL, a file id):
// the caller refuses it or stands a placeholder for it, as for other media.
absl::StatusOr<std::optional<std::string>> TextBlockText(const JsonFields& block,
                                                         absl::string_view type,
                                                         const RequestLimits& limits);

// Reads the text of an OpenAI `content` (a string, or an array of text parts, joined with
// "\n"; Anthropic's text-bearing document and search_result blocks read as TextBlockText).
// InvalidArgument for unknown part types, refusal parts outside an assistant's content, and media
// parts unless `media` is kPlaceholder.
absl::StatusOr<std::string> ContentText(const Json& content, const std::string& field,
                                        const RequestLimits& limits,
                                        ContentAuthor author = ContentAuthor::kAny,
                                        MediaParts media = MediaParts::kRefuse);

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_OPENAI_CHAT_MAPPING_H_
