#ifndef CAIRN_COMMON_GRPC_SERVER_RUNNER_H_
#define CAIRN_COMMON_GRPC_SERVER_RUNNER_H_

// Starts a gRPC server the way every cairn daemon does: on a Unix socket or TCP, with the
// standard health service and server reflection, and drains it gracefully (docs/reliability.md
// RPC4-RPC7).

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace cairn {

struct ServerRunnerOptions {
  // "unix:PATH" (absolute or relative path) or "HOST:PORT"; port 0 picks a free port.
  std::string listen;
  // Permission bits set on a Unix socket after bind (SM2: the units' UMask is 0077).
  int unix_socket_mode = 0660;
  // Largest message accepted; bulk bytes never travel over gRPC (RPC6).
  int max_receive_message_bytes = 4 * 1024 * 1024;
  // How long Drain() lets in-flight calls finish before cancelling them.
  absl::Duration drain_timeout = absl::Seconds(10);
  // Service names reported by the health service besides "" (the whole server).
  std::vector<std::string> health_services;
};

// Owns one running grpc::Server. Thread-safe.
//
// Health starts NOT_SERVING for "" and every listed service; the owner calls SetServing once
// it is ready (model loaded, catalog reconciled). Drain() flips everything to NOT_SERVING,
// then shuts the server down with the drain deadline.
class ServerRunner {
 public:
  // Builds and starts a server exposing `services` (not owned; they must outlive the
  // runner). InvalidArgument for a malformed `listen`; AlreadyExists if another process
  // listens on the Unix socket (a stale socket is replaced), NotFound or PermissionDenied for a
  // socket folder that is missing or not writable; Unavailable if it cannot bind (a
  // TCP port in use included: SO_REUSEPORT is off).
  static absl::StatusOr<std::unique_ptr<ServerRunner>> Start(
      const ServerRunnerOptions& options, const std::vector<grpc::Service*>& services);
  ~ServerRunner();
  ServerRunner(const ServerRunner&) = delete;
  ServerRunner& operator=(const ServerRunner&) = delete;

  // The address clients dial: "unix:PATH" or "HOST:PORT" with the chosen port.
  const std::string& address() const { return address_; }
  // The bound TCP port, or 0 for a Unix socket.
  int port() const { return port_; }

  // Sets the health status of `service` ("" = the whole server).
  void SetServing(const std::string& service, bool serving);
  // Sets every reported service (and "") at once.
  void SetAllServing(bool serving);
  // Reports NOT_SERVING everywhere, stops accepting calls, waits for in-flight calls up to
  // the drain timeout, then cancels the rest. Idempotent.
  void Drain();
  // Blocks until the server has shut down (after Drain() from another thread).
  void Wait();

  grpc::Server* server() const { return server_.get(); }

 private:
  ServerRunner() = default;

  ServerRunnerOptions options_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::string unix_path_;  // Removed on destruction when non-empty.
  int port_ = 0;
};

// Splits "unix:PATH" / "HOST:PORT" listen strings. Exposed for tests and clients.
struct ListenAddress {
  bool is_unix = false;
  std::string path;  // For Unix sockets.
  std::string host;  // For TCP.
  int port = 0;
};
absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& listen);

}  // namespace cairn

#endif  // CAIRN_COMMON_GRPC_SERVER_RUNNER_H_
