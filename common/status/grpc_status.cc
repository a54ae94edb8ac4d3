#include "common/status/grpc_status.h"

#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/types/optional.h"

namespace cairn {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      GrpcErrorDetailsOf(status).value_or(""));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share their values (0..16).
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  if (status.error_details().empty()) return out;
  return WithGrpcErrorDetails(std::move(out), status.error_details());
}

absl::Status WithGrpcErrorDetails(absl::Status status, std::string details) {
  status.SetPayload(kGrpcErrorDetailsPayload, absl::Cord(std::move(details)));
  return status;
}

std::optional<std::string> GrpcErrorDetailsOf(const absl::Status& status) {
  absl::optional<absl::Cord> details = status.GetPayload(kGrpcErrorDetailsPayload);
  if (!details.has_value()) return std::nullopt;
  return std::string(*details);
}

}  // namespace cairn
