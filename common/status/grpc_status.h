#ifndef CAIRN_COMMON_STATUS_GRPC_STATUS_H_
#define CAIRN_COMMON_STATUS_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace cairn {

// Converts between absl and gRPC statuses. The two share their code numbering, so the code is
// a cast and the message is carried over unchanged.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace cairn

#endif  // CAIRN_COMMON_STATUS_GRPC_STATUS_H_
