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
}  // namespace

std::unique_ptr<grpc::ClientContext> NewClientContext(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMicroseconds(timeout));
  return ctx;
}

std::shared_ptr<grpc::Channel> NewLocalChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

}  // namespace cairn
