#include "common/grpc/client.h"

#include <chrono>

#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace cairn {
namespace {
// Reconnect backoff for a peer on the same host (RPC2).
constexpr int kInitialReconnectBackoffMs = 100;
constexpr int kMaxReconnectBackoffMs = 2000;
// How long one connection attempt may take, the HTTP/2 handshake included. gRPC reads it from
// GRPC_ARG_MIN_RECONNECT_BACKOFF_MS (its "minimum connect timeout"), not as a delay: attempts
// that fail at once (nothing listening) are still retried after the backoff above. With the
// backoff's 100 ms here, a peer whose threads are all busy (a prefill on every core) could miss
// sending its SETTINGS frame in time, and the call failed with "connection attempt timed out
// before receiving SETTINGS frame" although the peer was up.
constexpr int kMinConnectTimeoutMs = 5000;
}  // namespace

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  using Clock = std::chrono::system_clock;
  const Clock::time_point now = Clock::now();
  if (timeout <= absl::ZeroDuration()) return now;
  // now + timeout saturates at the clock's end (which gRPC reads as no deadline) instead of
  // overflowing: an infinite duration, or hours enough to pass year 2262.
  const absl::Duration left = absl::FromChrono(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::time_point::max() - now));
  if (timeout >= left) return Clock::time_point::max();
  return now + std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(timeout));
}

std::unique_ptr<grpc::ClientContext> NewClientContext(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(DeadlineAfter(timeout));
  return ctx;
}

std::shared_ptr<grpc::Channel> NewLocalChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kMinConnectTimeoutMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

}  // namespace cairn
