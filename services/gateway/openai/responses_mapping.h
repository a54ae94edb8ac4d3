#ifndef CAIRN_SERVICES_GATEWAY_OPENAI_RESPONSES_MAPPING_H_
#define CAIRN_SERVICES_GATEWAY_OPENAI_RESPONSES_MAPPING_H_

// OpenAI's Responses API, POST /v1/responses <-> cairn.infer.v1.Generate (Codex CLI speaks
// only this API): `input` as text or items (messages with developer / system / user /
// assistant roles, function_call and function_call_output items, reasoning items),
// `instructions`, function tools and the function tools of a `namespace` (shown to the model
// as "NAMESPACE.NAME"; calls come back naming their namespace), hosted tools (web search, file
// search, code interpreter, image generation, remote MCP) left out of the prompt, other tool
// types refused with a clear error,
// `reasoning` summaries, streaming events and the response object. Nothing is stored:
// `previous_response_id` is refused, `store` is accepted and ignored.

#include "absl/status/statusor.h"
#include "services/gateway/openai/format_util.h"

namespace cairn::gateway {

absl::StatusOr<GenerationSpec> ParseResponsesRequest(const Json& body, const RequestLimits& limits);

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_OPENAI_RESPONSES_MAPPING_H_
