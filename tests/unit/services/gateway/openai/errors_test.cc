#include "services/gateway/openai/errors.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "cairn/infer/v1/infer.pb.h"
#include "common/status/annotate.h"
#include "common/status/grpc_status.h"
#include "grpcpp/support/status.h"
#include "gtest/gtest.h"
#include "services/gateway/openai/json_util.h"

namespace cairn::gateway {
namespace {

namespace infer_v1 = ::cairn::infer::v1;

TEST(ErrorsTest, StatusCodesMapToTheStyleGuideTable) {
  EXPECT_EQ(HttpStatusFor(absl::InvalidArgumentError("x")), 400);
  EXPECT_EQ(HttpStatusFor(absl::UnauthenticatedError("x")), 401);
  EXPECT_EQ(HttpStatusFor(absl::PermissionDeniedError("x")), 403);
  EXPECT_EQ(HttpStatusFor(absl::NotFoundError("x")), 404);
  EXPECT_EQ(HttpStatusFor(absl::ResourceExhaustedError("x")), 429);
  EXPECT_EQ(HttpStatusFor(absl::UnimplementedError("x")), 501);
  EXPECT_EQ(HttpStatusFor(absl::UnavailableError("x")), 503);
  EXPECT_EQ(HttpStatusFor(absl::DeadlineExceededError("x")), 504);
  EXPECT_EQ(HttpStatusFor(absl::AlreadyExistsError("x")), 500);
  EXPECT_EQ(HttpStatusFor(absl::FailedPreconditionError("x")), 500);
  EXPECT_EQ(HttpStatusFor(absl::CancelledError("x")), 500);
  EXPECT_EQ(HttpStatusFor(absl::DataLossError("x")), 500);
  EXPECT_EQ(HttpStatusFor(absl::InternalError("x")), 500);
  EXPECT_EQ(HttpStatusFor(WithHttpStatus(absl::InvalidArgumentError("x"), 413)), 413);
}

TEST(ErrorsTest, OpenAiShapeWithRetryAfterOnBusyAnswers) {
  HttpResponse r = RenderError(absl::ResourceExhaustedError("queue full"), "/v1/chat/completions",
                               {.retry_after_seconds = 3});

  Json body = Json::parse(r.body);
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(body["error"]["message"], "queue full");
  EXPECT_EQ(body["error"]["type"], "rate_limit_error");
  EXPECT_EQ(body["error"]["code"], "resource_exhausted");
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].first, "Retry-After");
  EXPECT_EQ(r.headers[0].second, "3");
}

TEST(ErrorsTest, TheParamOfAnErrorIsTheFieldAttachedToIt) {
  const absl::Status named =
      Annotate(WithErrorParam(absl::InvalidArgumentError("x is bad"), "x"), "parsing");

  Json with = Json::parse(RenderError(named, "/v1/chat/completions").body);
  Json without = Json::parse(RenderError(absl::InvalidArgumentError("bad"), "/v1/responses").body);

  EXPECT_EQ(with["error"]["param"], "x") << with;
  EXPECT_EQ(with["error"]["message"], "parsing: x is bad");
  EXPECT_TRUE(without["error"].contains("param"));
  EXPECT_TRUE(without["error"]["param"].is_null()) << without;
}

TEST(ErrorsTest, AFieldErrorNamesItsFieldInParamButNotInAnthropicsShape) {
  const absl::Status error = InvalidField("messages[0].content", "is required");

  Json openai = Json::parse(RenderError(error, "/v1/chat/completions").body);
  // Unordered: the members' order is not at issue.
  nlohmann::json anthropic = nlohmann::json::parse(RenderError(error, "/v1/messages").body);

  EXPECT_EQ(openai["error"]["message"], "messages[0].content is required");
  EXPECT_EQ(openai["error"]["param"], "messages[0].content") << openai;
  // Anthropic's error has no param: the same status renders as before, two members each.
  EXPECT_EQ(anthropic, nlohmann::json::parse(R"({"type": "error", "error": {"type":
      "invalid_request_error", "message": "messages[0].content is required"}})"))
      << anthropic;
}

TEST(ErrorsTest, ResponsesErrorCodesAreOpenAis) {
  EXPECT_EQ(ResponsesErrorCode(absl::InvalidArgumentError(
                "prompt of 5000 tokens does not fit the context of 4096 tokens (at least one token "
                "must be generated)")),
            "context_length_exceeded");
  EXPECT_EQ(ResponsesErrorCode(absl::InvalidArgumentError(
                "sampling.max_tokens 9000 is more than the 96 tokens the context of 4096 leaves "
                "after the prompt")),
            "context_length_exceeded");
  EXPECT_EQ(ResponsesErrorCode(absl::ResourceExhaustedError("request queue is full")),
            "rate_limit_exceeded");
  EXPECT_EQ(ResponsesErrorCode(absl::InvalidArgumentError("temperature must be at most 2")),
            "invalid_request_error");
  EXPECT_EQ(ResponsesErrorCode(absl::NotFoundError("no such model")), "not_found_error");
  EXPECT_EQ(ResponsesErrorCode(absl::UnavailableError("daemon went away")), "server_error");
  EXPECT_EQ(ResponsesErrorCode(absl::InternalError("model exploded")), "server_error");
  EXPECT_EQ(ResponsesErrorCode(absl::DeadlineExceededError("too slow")), "server_error");
}

// A request the context cannot hold is named as OpenAI and Anthropic name it, which clients
// look for before they shorten or compact the conversation.
TEST(ErrorsTest, AContextOverflowIsNamedAsEachApiNamesIt) {
  const absl::Status overflow = absl::InvalidArgumentError(
      "prompt of 5000 tokens does not fit the context of 4096 tokens (at least one token must be "
      "generated)");

  Json openai = Json::parse(RenderError(overflow, "/v1/chat/completions").body);
  Json anthropic = Json::parse(RenderError(overflow, "/v1/messages").body);
  Json other = Json::parse(RenderError(absl::InvalidArgumentError("bad"), "/v1/messages").body);

  EXPECT_EQ(openai["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(openai["error"]["message"], std::string(overflow.message()));
  // The field that holds the prompt, as OpenAI names it; a param named already stays.
  EXPECT_EQ(openai["error"]["param"], "messages");
  EXPECT_EQ(Json::parse(RenderError(overflow, "/v1/completions").body)["error"]["param"], "prompt");
  EXPECT_EQ(Json::parse(RenderError(overflow, "/v1/responses").body)["error"]["param"], "input");
  EXPECT_EQ(Json::parse(RenderError(WithErrorParam(overflow, "max_tokens"), "/v1/chat/completions")
                            .body)["error"]["param"],
            "max_tokens");
  EXPECT_TRUE(Json::parse(OpenAiErrorJson(overflow))["error"]["param"].is_null());
  EXPECT_EQ(Json::parse(OpenAiErrorJson(overflow, "messages"))["error"]["param"], "messages");
  EXPECT_TRUE(Json::parse(RenderError(absl::InvalidArgumentError("bad"), "/v1/chat/completions")
                              .body)["error"]["param"]
                  .is_null());
  EXPECT_EQ(anthropic["error"]["type"], "invalid_request_error");
  EXPECT_EQ(anthropic["error"]["message"],
            absl::StrCat("prompt is too long: ", overflow.message()));
  EXPECT_EQ(other["error"]["message"], "bad");
}

grpc::Status InferStatus(grpc::StatusCode code, const std::string& message,
                         infer_v1::ErrorReason reason) {
  infer_v1::ErrorDetails details;
  details.set_code(static_cast<int32_t>(code));
  details.set_message(message);
  details.set_reason(reason);
  return grpc::Status(code, message, details.SerializeAsString());
}

// cairn-infer names an overflow in the call's binary error details; the gateway goes by them
// whatever the message says, and by the message's words only where a daemon sends no details.
TEST(ErrorsTest, TheDaemonsReasonDecidesAContextOverflow) {
  const std::string words = "the conversation is longer than this model reads";
  const absl::Status reason = FromGrpcStatus(InferStatus(grpc::StatusCode::INVALID_ARGUMENT, words,
                                                         infer_v1::ERROR_REASON_CONTEXT_OVERFLOW));
  const absl::Status no_details =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, words));
  const absl::Status old_daemon =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                  "prompt of 5000 tokens does not fit the context of 4096"));
  const absl::Status other_reason = FromGrpcStatus(InferStatus(
      grpc::StatusCode::INVALID_ARGUMENT, "prompt of 5000 tokens does not fit the context of 4096",
      infer_v1::ERROR_REASON_UNSPECIFIED));

  EXPECT_TRUE(IsContextOverflow(reason));
  EXPECT_EQ(Json::parse(OpenAiErrorJson(reason))["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(ResponsesErrorCode(reason), "context_length_exceeded");
  EXPECT_EQ(Json::parse(RenderError(reason, "/v1/messages").body)["error"]["message"],
            absl::StrCat("prompt is too long: ", words));
  EXPECT_FALSE(IsContextOverflow(no_details));
  EXPECT_EQ(Json::parse(OpenAiErrorJson(no_details))["error"]["code"], "invalid_argument");
  EXPECT_TRUE(IsContextOverflow(old_daemon));
  EXPECT_FALSE(IsContextOverflow(other_reason));
}

TEST(ErrorsTest, AnthropicRoutesGetTheAnthropicShape) {
  HttpResponse r =
      RenderError(absl::InvalidArgumentError("max_tokens is required"), "/v1/messages");

  Json body = Json::parse(r.body);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(body["type"], "error");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["message"], "max_tokens is required");
  EXPECT_TRUE(r.headers.empty());
}

}  // namespace
}  // namespace cairn::gateway
