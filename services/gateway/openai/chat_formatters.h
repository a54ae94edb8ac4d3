#ifndef CAIRN_SERVICES_GATEWAY_OPENAI_CHAT_FORMATTERS_H_
#define CAIRN_SERVICES_GATEWAY_OPENAI_CHAT_FORMATTERS_H_

// OpenAI's answers to the daemon's Generate stream: chat.completion / chat.completion.chunk
// (POST /v1/chat/completions) and text_completion objects (POST /v1/completions), with
// usage.prompt_tokens_details.cached_tokens and the `cairn` cache object. The requests are
// chat_mapping.h's.

#include <cstdint>
#include <memory>
#include <string>

#include "services/gateway/openai/format_util.h"

namespace cairn::gateway {

// The chat completions formatter for a request of `model`: usage in a last chunk when
// streamed with `include_usage`; with `logprobs`, each token's logprob and `top_logprobs`
// alternatives.
std::unique_ptr<ResponseFormatter> NewChatFormatter(std::string model, bool include_usage,
                                                    bool logprobs, uint32_t top_logprobs);
// The legacy completions formatter; `token_ids`: the generated token ids beside the text.
std::unique_ptr<ResponseFormatter> NewCompletionFormatter(std::string model, bool include_usage,
                                                          bool logprobs, uint32_t top_logprobs,
                                                          bool token_ids);

// Returns OpenAI's finish_reason for `reason`.
absl::string_view FinishReasonName(infer_v1::Finished::Reason reason);

// Returns OpenAI's usage object for `finished`.
Json UsageObject(const infer_v1::Finished& finished);

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_OPENAI_CHAT_FORMATTERS_H_
