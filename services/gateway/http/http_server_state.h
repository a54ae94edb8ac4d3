#ifndef CAIRN_SERVICES_GATEWAY_HTTP_HTTP_SERVER_STATE_H_
#define CAIRN_SERVICES_GATEWAY_HTTP_HTTP_SERVER_STATE_H_

// The HTTP server's state shared by its listener, its sessions and HttpServer (http_server.cc's
// and http_session.cc's own; not part of the gateway_http library's interface).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/strand.hpp"
#include "common/concurrency/mutex.h"
#include "services/gateway/http/http_server.h"

namespace cairn::gateway {

// A connection the server can close at shutdown.
class Closable {
 public:
  virtual ~Closable() = default;
  // Drops every handler-supplied callback and closes the socket. Called by Shutdown() once
  // the io_context's threads have stopped, so nothing else runs on the connection's strand.
  virtual void ForceClose() = 0;
};

// Shared by the listener, the sessions and the HttpServer. Thread-safe: options, router and
// errors are immutable after Start; counters are atomics; the drain wait uses mu_.
class HttpServerState {
 public:
  HttpServerState(HttpServerOptions options, Router router, ErrorRenderer errors)
      : options_(std::move(options)),
        router_(std::move(router)),
        errors_(std::move(errors)),
        ioc_(std::max(1, options_.threads)),
        acceptor_(boost::asio::make_strand(ioc_)) {}

  const HttpServerOptions& options() const { return options_; }
  const Router& router() const { return router_; }
  HttpResponse RenderError(const absl::Status& s, absl::string_view path) const {
    return errors_(s, path);
  }
  boost::asio::io_context& ioc() { return ioc_; }
  boost::asio::ip::tcp::acceptor& acceptor() { return acceptor_; }
  bool draining() const { return draining_.load(); }
  void set_draining() { draining_.store(true); }

  std::atomic<int64_t> connections{0};
  std::atomic<int64_t> inflight{0};
  std::atomic<int64_t> body_bytes{0};  // Charged by sessions (max_body_bytes_in_flight).
  std::atomic<int64_t> rejected_busy{0};

  // Exchanges in progress; Shutdown waits for zero.
  void ExchangeStarted() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    ++exchanges_;
  }
  void ExchangeEnded() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (--exchanges_ == 0) cv_.SignalAll();
  }
  int64_t exchanges() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return exchanges_;
  }
  // Returns true if every exchange ended within `timeout`.
  bool WaitForExchanges(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::Time deadline = absl::Now() + timeout;
    MutexLock lock(&mu_);
    while (exchanges_ > 0) {
      absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      cv_.WaitWithTimeout(&mu_, left);
    }
    return true;
  }

  // Remembers `c` for ForceCloseAll (weakly: the connection's owners decide its lifetime).
  void Register(const std::shared_ptr<Closable>& c) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (connections_.size() >= compact_at_) {
      connections_.erase(
          std::remove_if(connections_.begin(), connections_.end(),
                         [](const std::weak_ptr<Closable>& w) { return w.expired(); }),
          connections_.end());
      compact_at_ = std::max<size_t>(64, 2 * connections_.size());
    }
    connections_.push_back(c);
  }
  // Force-closes every connection still alive. REQUIRES: the io_context is stopped.
  void ForceCloseAll() ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<std::shared_ptr<Closable>> alive;
    {
      MutexLock lock(&mu_);
      for (const auto& w : connections_) {
        if (auto c = w.lock()) alive.push_back(std::move(c));
      }
      connections_.clear();
    }
    for (auto& c : alive) c->ForceClose();
  }

  std::vector<std::thread> threads;  // Written by Start and Shutdown only.
  bool shut_down = false;            // Written by Shutdown only (one caller).

 private:
  const HttpServerOptions options_;
  const Router router_;
  const ErrorRenderer errors_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::atomic<bool> draining_{false};
  mutable Mutex mu_;
  CondVar cv_;
  int64_t exchanges_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::weak_ptr<Closable>> connections_ ABSL_GUARDED_BY(mu_);
  size_t compact_at_ ABSL_GUARDED_BY(mu_) = 64;
};

// Serves the accepted connection `socket` on its own strand until it closes (http_session.cc):
// registered with `state` for shutdown, answered 503 and closed at once when the server already
// holds max_connections.
void ServeConnection(boost::asio::ip::tcp::socket socket, HttpServerState* state);

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_HTTP_HTTP_SERVER_STATE_H_
