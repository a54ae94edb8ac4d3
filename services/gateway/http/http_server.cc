#include "services/gateway/http/http_server.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "boost/beast/core.hpp"
#include "common/log/log.h"
#include "services/gateway/http/http_server_state.h"

namespace cairn::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = boost::asio::ip::tcp;

namespace {

// How long the listener waits before accepting again after accept failed.
constexpr absl::Duration kAcceptRetryDelay = absl::Milliseconds(100);

// Accepts connections on the acceptor's strand.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  explicit Listener(HttpServerState* state)
      : state_(state), retry_timer_(state->acceptor().get_executor()) {}
  void DoAccept() {
    state_->acceptor().async_accept(
        net::make_strand(state_->ioc()),
        beast::bind_front_handler(&Listener::OnAccept, shared_from_this()));
  }

 private:
  void OnAccept(beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !state_->acceptor().is_open()) return;
    if (ec) {
      // Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS): the connection stays in the
      // backlog and accepting again at once fails again at once, so wait a little first.
      if (!failing_) {
        CAIRN_LOG(WARNING) << "accepting a connection failed: " << ec.message()
                           << "; retrying every " << kAcceptRetryDelay;
      }
      failing_ = true;
      retry_timer_.expires_after(absl::ToChronoMilliseconds(kAcceptRetryDelay));
      retry_timer_.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
        if (wait_ec || !self->state_->acceptor().is_open()) return;
        self->DoAccept();
      });
      return;
    }
    if (failing_) {
      CAIRN_LOG(INFO) << "accepting connections again";
      failing_ = false;
    }
    if (const int bytes = state_->options().socket_send_buffer_bytes; bytes > 0) {
      beast::error_code ignored;  // Best effort: the kernel's default still works.
      socket.set_option(net::socket_base::send_buffer_size(bytes), ignored);
    }
    ServeConnection(std::move(socket), state_);
    DoAccept();
  }
  HttpServerState* const state_;
  net::steady_timer retry_timer_;
  bool failing_ = false;  // The last accept failed.
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              Router router, ErrorRenderer errors) {
  beast::error_code ec;
  net::ip::address address = net::ip::make_address(options.host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen host \"", options.host, "\" is not an IP address"));
  }
  if (!address.is_loopback() && options.api_keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("refusing to listen on non-loopback address ",
                                                   options.host, " without API keys"));
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("listen port ", options.port, " out of range"));
  }
  auto server = std::unique_ptr<HttpServer>(new HttpServer());
  server->state_ = std::make_unique<HttpServerState>(options, std::move(router), std::move(errors));
  HttpServerState* state = server->state_.get();
  tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  tcp::acceptor& acceptor = state->acceptor();
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.host, ":", options.port, ": ", ec.message()));
  }
  server->port_ = acceptor.local_endpoint(ec).port();
  std::make_shared<Listener>(state)->DoAccept();
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    state->threads.emplace_back([state] {
      // Handlers catch their own exceptions; this keeps a thread alive if one slips through.
      for (;;) {
        try {
          state->ioc().run();
          return;
        } catch (const std::exception& e) {
          CAIRN_LOG(ERROR) << "exception escaped an HTTP handler: " << e.what();
        }
      }
    });
  }
  return server;
}

HttpServer::~HttpServer() { Shutdown(); }

HttpServerStats HttpServer::stats() const {
  HttpServerStats s;
  s.connections = state_->connections.load();
  s.exchanges = state_->exchanges();
  s.inflight = state_->inflight.load();
  s.body_bytes = state_->body_bytes.load();
  s.rejected_busy = state_->rejected_busy.load();
  return s;
}

void HttpServer::Shutdown() {
  if (state_ == nullptr || state_->shut_down) return;
  state_->shut_down = true;
  state_->set_draining();
  net::post(state_->acceptor().get_executor(), [state = state_.get()] {
    beast::error_code ignored;
    state->acceptor().close(ignored);
  });
  if (!state_->WaitForExchanges(state_->options().drain_timeout)) {
    CAIRN_LOG(WARNING) << "drain timeout: closing " << state_->exchanges()
                       << " requests still in progress";
  }
  state_->ioc().stop();
  for (std::thread& t : state_->threads) t.join();
  state_->threads.clear();
  // Breaks the references from connections to handler state (a stream still running when
  // the drain timed out), so that both can be freed.
  state_->ForceCloseAll();
}

}  // namespace cairn::gateway
