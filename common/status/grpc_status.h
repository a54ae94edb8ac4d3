#ifndef CAIRN_COMMON_STATUS_GRPC_STATUS_H_
#define CAIRN_COMMON_STATUS_GRPC_STATUS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace cairn {

// The absl payload under which a status holds a gRPC call's binary error details (the
// grpc-status-details-bin trailer, grpc::Status::error_details()). Its value is the details'
// bytes, unchanged: a serialized message of the service's proto, which names it.
inline constexpr char kGrpcErrorDetailsPayload[] = "type.cairn.dev/grpc-error-details";

// Converts between absl and gRPC statuses. The two share their code numbering, so the code is
// a cast and the message is carried over unchanged. Binary error details travel both ways as
// the payload kGrpcErrorDetailsPayload; other payloads stay behind. A service that passes on a
// status it received passes its details on too, in the proto of the service that sent them.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Returns `status` with `details` as the binary error details ToGrpcStatus sends. A peer that
// is not ours may decode them as a google.rpc.Status (gRPC-Go clients do, and take the call's
// code and message from it), so `details` should be a message whose fields 1 and 2 hold the
// status's code and message, as google.rpc.Status's do. An ok status is returned unchanged.
absl::Status WithGrpcErrorDetails(absl::Status status, std::string details);

// Returns the binary error details `status` holds (from FromGrpcStatus or
// WithGrpcErrorDetails), or nullopt where it holds none.
std::optional<std::string> GrpcErrorDetailsOf(const absl::Status& status);

}  // namespace cairn

#endif  // CAIRN_COMMON_STATUS_GRPC_STATUS_H_
