#ifndef CAIRN_SERVICES_GATEWAY_OPENAI_ANTHROPIC_MAPPING_H_
#define CAIRN_SERVICES_GATEWAY_OPENAI_ANTHROPIC_MAPPING_H_

// Anthropic's POST /v1/messages <-> cairn.infer.v1.Generate, so that Anthropic-protocol
// agents can use a local model: system prompts, text / tool_use / tool_result / thinking
// blocks, custom tools, tool_choice, stop_sequences, thinking, and usage with
// cache_read_input_tokens. Fields agents send for Anthropic's own service (metadata,
// cache_control, context_management, output_config, service_tier, ...) are accepted and
// never reach the prompt. Server tools and media blocks are refused with a clear error.

#include "absl/status/statusor.h"
#include "services/gateway/openai/format_util.h"

namespace cairn::gateway {

// Parses a Messages request body (`max_tokens` is required).
absl::StatusOr<GenerationSpec> ParseAnthropicMessagesRequest(const Json& body,
                                                             const RequestLimits& limits);
// Parses a count_tokens request body (as Messages, without `max_tokens`).
absl::StatusOr<GenerationSpec> ParseAnthropicCountTokensRequest(const Json& body,
                                                                const RequestLimits& limits);

// Returns Anthropic's stop_reason for `finished`, of a request whose output limit was
// `max_tokens` (0: none): an output cut short of it by the context's end is
// "model_context_window_exceeded", as Anthropic answers for its current models.
absl::string_view AnthropicStopReason(const infer_v1::Finished& finished, uint32_t max_tokens);

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_OPENAI_ANTHROPIC_MAPPING_H_
