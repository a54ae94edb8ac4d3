#ifndef CAIRN_SERVICES_GATEWAY_OPENAI_ERRORS_H_
#define CAIRN_SERVICES_GATEWAY_OPENAI_ERRORS_H_

// The one place that maps Status codes to HTTP (style.md §4). Bodies follow the API of the
// route: OpenAI's {"error": {"message", "type", "param", "code"}} everywhere, except
// Anthropic's {"type": "error", "error": {"type", "message"}} under /v1/messages.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "services/gateway/http/http_server.h"

namespace cairn::gateway {

struct ErrorRendering {
  int retry_after_seconds = 1;  // Sent as Retry-After with 429 and 503.
};

// Returns the HTTP status for `status`: an explicit one attached with WithHttpStatus, else
// the table of style.md §4.
int HttpStatusFor(const absl::Status& status);

// Attaches the request field `param` to `status`: OpenAI's error body names it in "param"
// (null otherwise), as OpenAI's API does for a field it refuses.
absl::Status WithErrorParam(absl::Status status, absl::string_view param);

// Returns the OpenAI error "type" for an HTTP status ("invalid_request_error", ...).
absl::string_view OpenAiErrorType(int http_status);
// Returns the Anthropic error "type" for an HTTP status.
absl::string_view AnthropicErrorType(int http_status);

// Returns true if `path` is answered in Anthropic's shapes.
bool IsAnthropicPath(absl::string_view path);

// Renders `status` as the response for a request to `path`.
HttpResponse RenderError(const absl::Status& status, absl::string_view path,
                         const ErrorRendering& options = {});

// The error object alone, as OpenAI's SSE streams and the Responses API carry it. Its `code`
// is "context_length_exceeded" where the request does not fit the model's context (as OpenAI's,
// which clients look for before they shorten the conversation), else the status's name. Its
// `param` is the one WithErrorParam named, else for an overflow `overflow_param` (the request
// field that holds the prompt: "messages", "prompt" or "input"; empty: null), else null.
std::string OpenAiErrorJson(const absl::Status& status, absl::string_view overflow_param = {});

// The request field that holds the prompt on the OpenAI route `path` ("messages" for chat
// completions, "prompt" for completions, "input" for responses; empty for other paths).
absl::string_view PromptParamFor(absl::string_view path);

// True where `status` says the prompt (and the output asked for) do not fit the model's
// context: by cairn-infer's reason, the ErrorDetails (infer.proto) it sends as the call's binary
// error details and FromGrpcStatus keeps (common/status/grpc_status.h), where the status holds
// them; else, from an older daemon that sends none, by cairn-infer's words in a 400.
bool IsContextOverflow(const absl::Status& status);

// The message of an Anthropic error for `status`: Anthropic's "prompt is too long: " ahead of
// cairn-infer's words where the request does not fit the context (Claude Code reads that
// opening as its cue to compact the conversation), else the status's message.
std::string AnthropicErrorMessage(const absl::Status& status);

// Returns the `code` of the error a Responses stream ends with (response.failed), in OpenAI's
// words, which clients act on (Codex CLI stops on context_length_exceeded and retries others):
// "context_length_exceeded" where the prompt (and the output asked for) do not fit the model's
// context, "rate_limit_exceeded" for overload (429), "server_error" for any 5xx, else the
// OpenAI error type of the 4xx ("invalid_request_error", "not_found_error", ...).
absl::string_view ResponsesErrorCode(const absl::Status& status);

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_OPENAI_ERRORS_H_
