#include "services/gateway/openai/errors.h"

#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cairn/infer/v1/infer.pb.h"
#include "common/status/grpc_status.h"
#include "nlohmann/json.hpp"
#include "services/gateway/openai/json_util.h"

namespace cairn::gateway {

int HttpStatusFor(const absl::Status& status) {
  if (int explicit_status = HttpStatusOf(status); explicit_status != 0) return explicit_status;
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:  // AlreadyExists, FailedPrecondition, Cancelled, DataLoss, Internal, Unknown...
      return 500;
  }
}

namespace {

constexpr char kErrorParamPayload[] = "type.cairn.dev/openai-error-param";

}  // namespace

absl::Status WithErrorParam(absl::Status status, absl::string_view param) {
  status.SetPayload(kErrorParamPayload, absl::Cord(param));
  return status;
}

namespace {

// Error "type" names by HTTP status in both APIs; others fall back by class (4xx / 5xx).
struct ErrorTypeRow {
  int http;
  absl::string_view openai;
  absl::string_view anthropic;
};
constexpr ErrorTypeRow kErrorTypes[] = {
    {401, "authentication_error", "authentication_error"},
    {403, "permission_error", "permission_error"},
    {404, "not_found_error", "not_found_error"},
    {413, "invalid_request_error", "request_too_large"},
    {429, "rate_limit_error", "rate_limit_error"},
    {503, "service_unavailable_error", "overloaded_error"},
    {504, "service_unavailable_error", "overloaded_error"},
};

const ErrorTypeRow* FindErrorType(int http_status) {
  for (const ErrorTypeRow& row : kErrorTypes) {
    if (row.http == http_status) return &row;
  }
  return nullptr;
}

}  // namespace

absl::string_view OpenAiErrorType(int http_status) {
  if (const ErrorTypeRow* row = FindErrorType(http_status)) return row->openai;
  return http_status < 500 ? "invalid_request_error" : "server_error";
}

absl::string_view AnthropicErrorType(int http_status) {
  if (const ErrorTypeRow* row = FindErrorType(http_status)) return row->anthropic;
  return http_status < 500 ? "invalid_request_error" : "api_error";
}

bool IsAnthropicPath(absl::string_view path) { return absl::StartsWith(path, "/v1/messages"); }

namespace {
std::string CodeName(const absl::Status& status) {
  std::string name = absl::StatusCodeToString(status.code());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}
}  // namespace

namespace {

namespace infer_v1 = ::cairn::infer::v1;

// How cairn-infer words a request the context cannot hold (ValidateGenerate in
// services/infer/daemon/infer_service.cc: the prompt alone, or with the max_tokens asked for).
// Only a fallback for a daemon older than ErrorDetails, which sent the words alone: services
// share only proto/, and the status code (INVALID_ARGUMENT) does not tell an overflow from
// other bad requests.
constexpr absl::string_view kContextOverflowMessages[] = {"does not fit the context",
                                                          "leaves after the prompt"};

// Returns cairn-infer's reason for the failure `status` reports, or nullopt where the status
// holds no ErrorDetails (or ones that do not parse).
std::optional<infer_v1::ErrorReason> InferErrorReason(const absl::Status& status) {
  std::optional<std::string> bytes = GrpcErrorDetailsOf(status);
  infer_v1::ErrorDetails details;
  if (!bytes.has_value() || !details.ParseFromString(*bytes)) return std::nullopt;
  return details.reason();
}

}  // namespace

bool IsContextOverflow(const absl::Status& status) {
  // A daemon that sends ErrorDetails names every overflow in them, so its reason decides.
  if (std::optional<infer_v1::ErrorReason> reason = InferErrorReason(status)) {
    return *reason == infer_v1::ERROR_REASON_CONTEXT_OVERFLOW;
  }
  // An older daemon sends no details: its words are all there is to go by.
  if (HttpStatusFor(status) != 400) return false;
  for (absl::string_view words : kContextOverflowMessages) {
    if (absl::StrContains(status.message(), words)) return true;
  }
  return false;
}

std::string AnthropicErrorMessage(const absl::Status& status) {
  if (IsContextOverflow(status)) return absl::StrCat("prompt is too long: ", status.message());
  return std::string(status.message());
}

absl::string_view PromptParamFor(absl::string_view path) {
  if (path == "/v1/chat/completions") return "messages";
  if (path == "/v1/completions") return "prompt";
  if (path == "/v1/responses") return "input";
  return {};
}

std::string OpenAiErrorJson(const absl::Status& status, absl::string_view overflow_param) {
  const int http = HttpStatusFor(status);
  const absl::optional<absl::Cord> param = status.GetPayload(kErrorParamPayload);
  const bool overflow = IsContextOverflow(status);
  nlohmann::json param_json;  // null
  if (param.has_value()) {
    param_json = std::string(*param);
  } else if (overflow && !overflow_param.empty()) {
    // OpenAI names the field that holds the conversation.
    param_json = std::string(overflow_param);
  }
  nlohmann::json error = {
      {"message", std::string(status.message())},
      {"type", OpenAiErrorType(http)},
      {"param", param_json},
      {"code", overflow ? std::string("context_length_exceeded") : CodeName(status)}};
  return DumpJson(nlohmann::json{{"error", error}});
}

absl::string_view ResponsesErrorCode(const absl::Status& status) {
  const int http = HttpStatusFor(status);
  if (http >= 500) return "server_error";
  if (http == 429) return "rate_limit_exceeded";
  if (IsContextOverflow(status)) return "context_length_exceeded";
  return OpenAiErrorType(http);
}

HttpResponse RenderError(const absl::Status& status, absl::string_view path,
                         const ErrorRendering& options) {
  HttpResponse r;
  r.status = HttpStatusFor(status);
  if (IsAnthropicPath(path)) {
    nlohmann::json body = {
        {"type", "error"},
        {"error",
         {{"type", AnthropicErrorType(r.status)}, {"message", AnthropicErrorMessage(status)}}}};
    r.body = DumpJson(body);
  } else {
    r.body = OpenAiErrorJson(status, PromptParamFor(path));
  }
  if (r.status == 429 || r.status == 503) {
    r.headers.emplace_back("Retry-After", absl::StrCat(options.retry_after_seconds));
  }
  if (r.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

}  // namespace cairn::gateway
