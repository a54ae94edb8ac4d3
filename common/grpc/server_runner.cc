#include "common/grpc/server_runner.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/net/unix_socket_path.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace cairn {

absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& listen) {
  ListenAddress out;
  if (absl::StartsWith(listen, "unix:")) {
    out.is_unix = true;
    out.path = listen.substr(5);
    if (out.path.empty()) return absl::InvalidArgumentError("listen address unix: has no path");
    // sockaddr_un.sun_path holds 108 bytes including the terminator.
    if (out.path.size() >= 108) {
      return absl::InvalidArgumentError(
          absl::StrCat("unix socket path ", out.path, " is longer than 107 bytes"));
    }
    return out;
  }
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address \"", listen, "\" is neither unix:PATH nor HOST:PORT"));
  }
  out.host = listen.substr(0, colon);
  if (!absl::SimpleAtoi(listen.substr(colon + 1), &out.port) || out.port < 0 || out.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address \"", listen, "\" has a bad port"));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ServerRunner>> ServerRunner::Start(
    const ServerRunnerOptions& options, const std::vector<grpc::Service*>& services) {
  absl::StatusOr<ListenAddress> addr = ParseListenAddress(options.listen);
  if (!addr.ok()) return addr.status();

  std::unique_ptr<ServerRunner> runner(new ServerRunner());
  runner->options_ = options;
  if (addr->is_unix) {
    // A stale socket from a previous run blocks bind: it is removed, but never a live one (a
    // second daemon would take the first one's clients) nor a file that is not a socket.
    if (absl::Status s = PrepareUnixSocketPath(addr->path); !s.ok()) return s;
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second daemon on the same TCP port would bind beside
  // the first and take half its connections. Off, the second one's bind fails.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int selected_port = 0;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(),
                           addr->is_unix ? nullptr : &selected_port);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  for (grpc::Service* service : services) builder.RegisterService(service);
  runner->server_ = builder.BuildAndStart();
  if (runner->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("could not listen on ", options.listen));
  }
  if (addr->is_unix) {
    runner->unix_path_ = addr->path;
    runner->address_ = options.listen;
    if (::chmod(addr->path.c_str(), static_cast<mode_t>(options.unix_socket_mode)) != 0) {
      CAIRN_LOG(WARNING) << "chmod " << addr->path << ": " << std::strerror(errno);
    }
  } else {
    if (selected_port == 0) {
      return absl::UnavailableError(
          absl::StrCat("could not bind ", options.listen, " (is the port in use?)"));
    }
    runner->port_ = selected_port;
    runner->address_ = absl::StrCat(addr->host, ":", selected_port);
  }
  runner->SetAllServing(false);
  return runner;
}

ServerRunner::~ServerRunner() {
  Drain();
  if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
}

void ServerRunner::SetServing(const std::string& service, bool serving) {
  if (server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(service, serving);
}

void ServerRunner::SetAllServing(bool serving) {
  if (server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", serving);
  for (const std::string& name : options_.health_services) {
    health->SetServingStatus(name, serving);
  }
}

void ServerRunner::Drain() {
  if (server_ == nullptr) return;
  SetAllServing(false);
  auto deadline =
      std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options_.drain_timeout);
  // Idempotent: gRPC ignores a second Shutdown.
  server_->Shutdown(deadline);
}

void ServerRunner::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace cairn
