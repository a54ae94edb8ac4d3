#ifndef CAIRN_COMMON_GRPC_CLIENT_H_
#define CAIRN_COMMON_GRPC_CLIENT_H_

// Client-side helpers: every call carries a deadline (docs/reliability.md RPC1).

#include <chrono>
#include <memory>
#include <string>

#include "absl/time/time.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace cairn {

// Returns now + `timeout` on the system clock, saturated: now for a zero or negative timeout,
// the clock's end (time_point::max(), gRPC's "no deadline") for one too long to add.
std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout);

// Returns a ClientContext whose deadline is `timeout` from now (DeadlineAfter). Use it for every
// call; a context without a deadline is a lint failure.
std::unique_ptr<grpc::ClientContext> NewClientContext(absl::Duration timeout);

// Returns an insecure channel to `target` ("unix:PATH" or "HOST:PORT") with the local-peer
// reconnect backoff (RPC2: a few seconds at most). A target from an operator (a flag, a config
// file, the environment) must pass ValidatePeerAddress first (peer_address.h): gRPC takes almost
// any string and retries a bad one for ever.
std::shared_ptr<grpc::Channel> NewLocalChannel(const std::string& target);

}  // namespace cairn

#endif  // CAIRN_COMMON_GRPC_CLIENT_H_
