// The gateway's request bodies (docs/gateway.md): OpenAI chat completions, completions and
// responses, Anthropic messages and count_tokens, from the JSON body to the cairn.infer.v1
// request, then the response formatter over a short fake stream.
// Property (reliability plan C2): every invalid body gets a 4xx with a well-formed error body.
// Input: a route selector byte, then the body.

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "common/status/check.h"
#include "services/gateway/openai/anthropic_mapping.h"
#include "services/gateway/openai/chat_mapping.h"
#include "services/gateway/openai/errors.h"
#include "services/gateway/openai/json_util.h"
#include "services/gateway/openai/responses_mapping.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_target.h"

namespace cairn::gateway {
namespace {

using Parser = absl::StatusOr<GenerationSpec> (*)(const Json&, const RequestLimits&);

struct Route {
  const char* path;
  Parser parse;
};

constexpr Route kRoutes[] = {
    {"/v1/chat/completions", ParseChatCompletionRequest},
    {"/v1/completions", ParseCompletionRequest},
    {"/v1/responses", ParseResponsesRequest},
    {"/v1/messages", ParseAnthropicMessagesRequest},
    {"/v1/messages/count_tokens", ParseAnthropicCountTokensRequest},
};
constexpr uint32_t kVocab = 1000;

// Checks that `status` renders as a client error with a JSON error body.
void CheckClientError(const absl::Status& status, const char* path) {
  const HttpResponse response = RenderError(status, path);
  CAIRN_CHECK(response.status >= 400 && response.status < 500);
  const Json body = Json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  CAIRN_CHECK(body.is_object() && body.contains("error"));
}

void FormatFakeStream(const GenerationSpec& spec) {
  if (!spec.make_formatter) return;
  infer_v1::Started started;
  started.set_prompt_tokens(3);
  infer_v1::Delta delta;
  delta.set_text("hello");
  delta.add_token_ids(1);
  infer_v1::Finished finished;
  finished.set_reason(infer_v1::Finished::REASON_STOP);
  finished.set_completion_tokens(1);
  std::unique_ptr<ResponseFormatter> stream = spec.make_formatter("m");
  stream->StreamStarted(started);
  stream->StreamDelta(delta);
  stream->StreamFinished(finished);
  std::unique_ptr<ResponseFormatter> whole = spec.make_formatter("m");
  whole->Collect(delta);
  whole->Body(finished).dump();
}

void Run(uint8_t selector, absl::string_view body) {
  const Route& route = kRoutes[selector % std::size(kRoutes)];
  RequestLimits limits;
  limits.max_prompt_token_ids = 4096;
  limits.max_output_tokens = 64;
  absl::StatusOr<Json> json = ParseJsonObject(body, limits.max_json_depth);
  if (!json.ok()) return CheckClientError(json.status(), route.path);
  absl::StatusOr<GenerationSpec> spec = route.parse(*json, limits);
  if (!spec.ok()) return CheckClientError(spec.status(), route.path);
  if (absl::Status s = CheckAgainstVocabulary(*spec, kVocab); !s.ok()) {
    return CheckClientError(s, route.path);
  }
  ConversationLabel("", spec->request.chat());
  spec->request.ByteSizeLong();
  FormatFakeStream(*spec);
}

}  // namespace
}  // namespace cairn::gateway

CAIRN_FUZZ_TARGET(GatewayRequest) {
  cairn::fuzz::FuzzInput in(data, size);
  const uint8_t selector = in.Byte();
  cairn::gateway::Run(selector, in.rest());
  return 0;
}
