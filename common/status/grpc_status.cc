#include "common/status/grpc_status.h"

#include <string>

namespace cairn {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  int code = static_cast<int>(status.error_code());
  // Codes outside absl's range (none today) become Unknown rather than an invalid enum.
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(status.error_message());
  }
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

}  // namespace cairn
