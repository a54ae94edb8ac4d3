// One accepted HTTP connection (Session): its reads, the exchange handed to the router's
// handler (SessionExchange), whole and streamed responses, heartbeats, and noticing a client
// that left. HttpServer's listener hands every accepted socket to ServeConnection.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <deque>
#include <exception>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "boost/beast/core.hpp"
#include "common/log/log.h"
#include "common/status/check.h"
#include "services/gateway/http/http_server.h"
#include "services/gateway/http/http_server_state.h"

namespace cairn::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

namespace {

std::string RetryAfter(const HttpServerOptions& o) { return absl::StrCat(o.retry_after_seconds); }

// How often a connection whose read-ahead is full asks the kernel whether its client left.
constexpr absl::Duration kGoneCheckInterval = absl::Milliseconds(250);

// Returns true if the peer of the TCP socket `fd` has closed its side or reset the
// connection: the socket is no longer ESTABLISHED (CLOSE_WAIT after the peer's FIN, CLOSE
// after a reset), which the kernel knows even while unread bytes sit before the FIN.
bool PeerHasClosed(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  return info.tcpi_state != TCP_ESTABLISHED;
}

// One connection. Confined to its strand: every member is touched only by handlers running
// on the strand of `stream_`. Held by shared_ptr because pending Beast handlers and the
// exchanges handed to request handlers keep it alive (Beast's async server pattern).
//
// Invariants: at most one read (request read or watch read) and one write are pending;
// `current_seq_` names the exchange allowed to answer, and it changes only after the
// response has been fully written.
class Session : public Closable, public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, HttpServerState* state)
      : stream_(std::move(socket)),
        state_(state),
        heartbeat_timer_(stream_.get_executor()),
        gone_timer_(stream_.get_executor()) {
    ++state_->connections;
  }
  ~Session() { --state_->connections; }

  void Run() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->DoRead(); });
  }
  // Answers 503 at once and closes (connection cap).
  void RejectBusy() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->BeginUnreadExchange("/");
      self->SendWhole(self->BusyResponse(absl::UnavailableError("too many connections")));
    });
  }

  void ForceClose() override {
    on_gone_ = nullptr;
    heartbeat_ = nullptr;
    gone_timer_.cancel();
    chunks_.clear();
    beast::error_code ignored;
    stream_.socket().close(ignored);
    if (exchange_active_) {
      exchange_active_ = false;
      if (counted_exchange_) {
        counted_exchange_ = false;
        state_->ExchangeEnded();
      }
      if (admitted_) {
        admitted_ = false;
        --state_->inflight;
      }
      ReleaseBodyCharge();
    }
  }

  // Gives back what this exchange's body was charged against max_body_bytes_in_flight.
  void ReleaseBodyCharge() {
    state_->body_bytes -= body_charge_;
    body_charge_ = 0;
  }

  // ---- Exchange API (strand only) ----
  bool IsCurrent(uint64_t seq) const { return exchange_active_ && seq == current_seq_; }
  const HttpRequest& request() const { return request_; }
  absl::string_view path() const { return current_path_; }
  void Respond(uint64_t seq, HttpResponse response) {
    if (!IsCurrent(seq) || response_started_) return;
    SendWhole(std::move(response));
  }
  void RespondError(uint64_t seq, const absl::Status& status) {
    if (!IsCurrent(seq) || response_started_) return;
    SendWhole(state_->RenderError(status, current_path_));
  }
  void StartStream(uint64_t seq, std::string content_type) {
    if (!IsCurrent(seq) || response_started_) return;
    response_started_ = true;
    auto header = std::make_unique<http::response<http::empty_body>>(http::status::ok, version_);
    header->set(http::field::content_type, content_type);
    header->set(http::field::cache_control, "no-cache");
    // A reverse proxy in front (nginx) buffers a response unless told not to: a stream's
    // tokens would arrive in bursts, and its pings never.
    header->set("X-Accel-Buffering", "no");
    header->keep_alive(keep_alive_);
    // HTTP/1.0 has no chunked encoding: the stream is delimited by closing the connection.
    chunked_ = version_ >= 11;
    if (chunked_) {
      header->chunked(true);
    } else {
      keep_alive_ = false;
      header->keep_alive(false);
    }
    stream_header_ = std::move(header);
    header_serializer_ =
        std::make_unique<http::response_serializer<http::empty_body>>(*stream_header_);
    Enqueue(Chunk{Chunk::kHeader, "", nullptr});
  }
  void Write(uint64_t seq, std::string data, std::function<void(bool)> done) {
    if (!IsCurrent(seq) || stream_header_ == nullptr || stream_ended_) {
      if (done) Post([done] { done(false); });
      return;
    }
    Enqueue(Chunk{Chunk::kData, std::move(data), std::move(done)});
  }
  void EndStream(uint64_t seq) {
    if (!IsCurrent(seq) || stream_header_ == nullptr || stream_ended_) return;
    stream_ended_ = true;
    Enqueue(Chunk{Chunk::kLast, "", nullptr});
  }
  void OnClientGone(uint64_t seq, std::function<void()> fn) {
    if (client_gone_) {
      Post(std::move(fn));
      return;
    }
    if (IsCurrent(seq)) on_gone_ = std::move(fn);
  }
  void Post(std::function<void()> fn) {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), fn = std::move(fn)] { self->RunGuarded(fn); });
  }
  void StartHeartbeat(uint64_t seq, absl::Duration interval, std::function<void()> tick) {
    if (!IsCurrent(seq) || interval <= absl::ZeroDuration()) return;
    heartbeat_ = std::move(tick);
    heartbeat_interval_ = interval;
    ArmHeartbeat();
  }

 private:
  struct Chunk {
    enum Kind { kHeader, kData, kLast } kind;
    std::string data;
    std::function<void(bool)> done;
  };

  void ArmHeartbeat() {
    heartbeat_timer_.expires_after(absl::ToChronoMilliseconds(heartbeat_interval_));
    heartbeat_timer_.async_wait(
        [self = shared_from_this(), seq = current_seq_](beast::error_code ec) {
          if (ec || !self->IsCurrent(seq) || !self->heartbeat_) return;
          self->RunGuarded(self->heartbeat_);
          if (self->IsCurrent(seq) && self->heartbeat_) self->ArmHeartbeat();
        });
  }

  // Runs a handler-supplied function; an exception becomes a 500 (none may escape).
  void RunGuarded(const std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      CAIRN_LOG(ERROR) << "handler for " << current_path_ << " threw: " << e.what();
      FailCurrent(absl::InternalError("internal error in the handler"));
    } catch (...) {
      CAIRN_LOG(ERROR) << "handler for " << current_path_ << " threw";
      FailCurrent(absl::InternalError("internal error in the handler"));
    }
  }
  void FailCurrent(const absl::Status& s) {
    if (!exchange_active_) return;
    if (!response_started_) {
      SendWhole(state_->RenderError(s, current_path_));
    } else {
      Close();
    }
  }

  void DoRead() {
    parser_.emplace();
    parser_->body_limit(state_->options().max_body_bytes);
    parser_->header_limit(state_->options().max_header_bytes);
    // One deadline for the whole request, header and body.
    stream_.expires_after(absl::ToChronoMilliseconds(state_->options().read_timeout));
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::OnHeader, shared_from_this()));
  }

  // The header is in (and within the limits). Whatever can refuse the request without its
  // body is decided now (Admit), and a refused request is answered at once, its body never
  // read. A client waiting for "100 Continue" (curl does for large bodies) gets it only once
  // the request is admitted; then the body is read.
  void OnHeader(beast::error_code ec, size_t bytes) {
    if (ec) {
      OnRead(ec, bytes);
      return;
    }
    const HttpRequest& header = parser_->get();
    BeginExchange(header);
    route_ = Admit(header);
    if (route_ == nullptr) return;  // Answered.
    if (parser_->is_done()) {
      OnRead(ec, bytes);
      return;
    }
    auto expect = header.find(http::field::expect);
    if (expect != header.end() &&
        absl::EqualsIgnoreCase(absl::string_view(expect->value().data(), expect->value().size()),
                               "100-continue")) {
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                       [self = shared_from_this()](beast::error_code write_ec, size_t) {
                         if (write_ec) {
                           self->Close();
                           return;
                         }
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  // The request is read whole, or reading it failed: before its header was in (no exchange
  // has begun) or while its body was read (the exchange begun at OnHeader is answered).
  void OnRead(beast::error_code ec, size_t /*bytes*/) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset ||
        ec == net::error::eof) {
      Close();
      return;
    }
    if (ec) {
      // Errors answer for the request being read, never for the one before it (a HEAD), in
      // the shape of its path where its header shows it; the connection closes after them.
      if (!exchange_active_) BeginUnreadExchange(RequestPath());
      keep_alive_ = false;
      linger_ = true;
      if (ec == http::error::body_limit) {
        // Sent as soon as the header shows the size (GW3), the body is never read.
        SendWhole(
            state_->RenderError(WithHttpStatus(absl::InvalidArgumentError(absl::StrCat(
                                                   "request body exceeds the limit of ",
                                                   state_->options().max_body_bytes, " bytes")),
                                               413),
                                current_path_));
      } else if (ec == http::error::header_limit) {
        SendWhole(state_->RenderError(
            WithHttpStatus(absl::InvalidArgumentError("request headers are too large"), 431),
            current_path_));
      } else {
        SendWhole(state_->RenderError(
            absl::InvalidArgumentError(absl::StrCat("malformed HTTP request: ", ec.message())),
            current_path_));
      }
      return;
    }
    request_ = parser_->release();
    parser_.reset();
    body_unread_ = false;
    keep_alive_ = request_.keep_alive();
    StartWatch();
    auto exchange = MakeExchange();
    const HttpHandler& handler = route_->handler;
    RunGuarded([&] { handler(exchange); });
  }

  // The path of the request being read ("/" before its target is known).
  std::string RequestPath() const {
    if (!parser_.has_value()) return "/";
    const auto& req = parser_->get();
    return RequestTargetPath(absl::string_view(req.target().data(), req.target().size()));
  }

  HttpResponse BusyResponse(const absl::Status& s) {
    ++state_->rejected_busy;
    HttpResponse r = state_->RenderError(s, current_path_);
    r.status = 503;
    r.headers.emplace_back("Retry-After", RetryAfter(state_->options()));
    return r;
  }

  // Begins the exchange of the request whose header is `header`: every per-request field is
  // set from it, so that nothing of the request before (a HEAD, say) shapes this answer.
  void BeginExchange(const HttpRequest& header) {
    ++current_seq_;
    exchange_active_ = true;
    response_started_ = false;
    stream_ended_ = false;
    stream_header_.reset();
    header_serializer_.reset();
    state_->ExchangeStarted();
    counted_exchange_ = true;
    current_path_ = RequestTargetPath(
        absl::string_view(header.target().data(), header.target().size()), &target_authority_);
    head_ = header.method() == http::verb::head;
    version_ = header.version();
    keep_alive_ = header.keep_alive();
    body_unread_ = !parser_->is_done();
    linger_ = false;
  }

  // Begins an exchange that answers without a request header (the connection cap, a header
  // too large or malformed): HTTP/1.1, not HEAD, and the connection closes after it.
  void BeginUnreadExchange(std::string path) {
    exchange_active_ = true;
    response_started_ = false;
    current_path_ = std::move(path);
    head_ = false;
    version_ = 11;
    keep_alive_ = false;
    linger_ = true;
  }

  // Returns the route that will answer the request whose header is `header`, or nullptr
  // once the request is answered (refused: a missing or repeated Host, draining, no route,
  // wrong method, no key, a foreign Host or Origin without keys, admission).
  const Router::Route* Admit(const HttpRequest& header) {
    if (absl::Status host = CheckHostHeader(header); !host.ok()) {
      // A malformed request (RFC 9112 3.2: 400), answered as one: the connection closes.
      keep_alive_ = false;
      linger_ = true;
      SendWhole(state_->RenderError(host, current_path_));
      return nullptr;
    }
    if (state_->draining()) {
      keep_alive_ = false;
      Refuse(BusyResponse(absl::UnavailableError("the gateway is shutting down")));
      return nullptr;
    }
    bool path_known = false;
    const Router::Route* route = state_->router().Find(header.method(), current_path_, &path_known);
    if (route == nullptr && path_known) {
      HttpResponse r =
          state_->RenderError(WithHttpStatus(absl::InvalidArgumentError(absl::StrCat(
                                                 "method ", std::string(header.method_string()),
                                                 " not allowed on ", current_path_)),
                                             405),
                              current_path_);
      r.headers.emplace_back("Allow", state_->router().AllowedMethods(current_path_));
      Refuse(std::move(r));
      return nullptr;
    }
    if (route == nullptr) {
      Refuse(state_->RenderError(absl::NotFoundError(absl::StrCat("no route ", current_path_)),
                                 current_path_));
      return nullptr;
    }
    const bool keys = !state_->options().api_keys.empty();
    if (keys && !route->options.public_route &&
        !RequestHasApiKey(header, route->options.browser, state_->options().api_keys)) {
      HttpResponse r = state_->RenderError(
          absl::UnauthenticatedError("missing or invalid API key (Authorization: Bearer KEY)"),
          current_path_);
      if (route->options.browser) {
        r.headers.emplace_back("WWW-Authenticate", "Basic realm=\"cairn\", charset=\"UTF-8\"");
      }
      Refuse(std::move(r));
      return nullptr;
    }
    // Without keys the listener is on loopback (Start refuses anything else): only what a
    // local client sends is answered, never what a web page makes a browser send.
    // The host of an absolute-form target stands for the Host header (RFC 9112 3.2.2).
    const bool loopback_host = target_authority_.has_value()
                                   ? IsLoopbackHost(*target_authority_)
                                   : HeaderAbsentOr(header, http::field::host, IsLoopbackHost);
    if (!keys && !loopback_host) {
      Refuse(state_->RenderError(
          absl::PermissionDeniedError(
              "without API keys the gateway answers only requests whose Host is a loopback name "
              "(localhost, 127.0.0.1 or [::1]); use --api-key-file to serve other names"),
          current_path_));
      return nullptr;
    }
    if (!keys && !HeaderAbsentOr(header, http::field::origin, IsLoopbackOrigin)) {
      Refuse(state_->RenderError(
          absl::PermissionDeniedError(
              "without API keys the gateway refuses requests from web pages of other origins "
              "(the Origin header names a host other than localhost, 127.0.0.1 or [::1])"),
          current_path_));
      return nullptr;
    }
    // No content coding is decoded: a compressed body would be read whole and then fail as
    // JSON that does not parse, naming nothing the client can fix.
    if (!HeaderAbsentOr(header, http::field::content_encoding, IsIdentityCoding)) {
      auto coding = header.find(http::field::content_encoding);
      HttpResponse r = state_->RenderError(
          WithHttpStatus(absl::InvalidArgumentError(
                             absl::StrCat("Content-Encoding ", std::string(coding->value()),
                                          " is not supported; send the request body uncompressed")),
                         415),
          current_path_);
      r.headers.emplace_back("Accept-Encoding", "identity");
      Refuse(std::move(r));
      return nullptr;
    }
    // Nor a transfer coding other than chunked (RFC 9112 6.1: 501): "gzip, chunked" would be
    // de-chunked and its still-compressed bytes read as JSON.
    if (absl::Status coding = CheckTransferCoding(header); !coding.ok()) {
      Refuse(state_->RenderError(coding, current_path_));
      return nullptr;
    }
    // The body is charged now, before it is read: its Content-Length, or the most a chunked
    // body may be. The answer's work never holds more than its own body.
    const auto length = parser_->content_length();  // A boost::optional.
    const uint64_t charge =
        length ? *length : (parser_->chunked() ? state_->options().max_body_bytes : 0);
    if (charge > 0) {
      body_charge_ = static_cast<int64_t>(charge);
      const int64_t held = state_->body_bytes += body_charge_;
      if (static_cast<uint64_t>(held) > state_->options().max_body_bytes_in_flight) {
        Refuse(BusyResponse(absl::UnavailableError(
            absl::StrCat("server busy: ", held - body_charge_,
                         " bytes of request bodies are being read or answered"))));
        return nullptr;
      }
    }
    if (route->options.admission) {
      int64_t now = ++state_->inflight;
      admitted_ = true;
      if (now > state_->options().max_inflight) {
        Refuse(BusyResponse(absl::UnavailableError(absl::StrCat(
            "server busy: ", state_->options().max_inflight, " requests in progress"))));
        return nullptr;
      }
    }
    return route;
  }

  // Answers a request refused at its header. Its body is never read, so a connection whose
  // request has one closes after the answer (lingering: see Linger).
  void Refuse(HttpResponse r) {
    if (body_unread_) {
      keep_alive_ = false;
      linger_ = true;
    }
    SendWhole(std::move(r));
  }

  std::shared_ptr<HttpExchange> MakeExchange();

  // Reads ahead while a handler works, to see the client leave (GW6). Bytes of a pipelined
  // next request are kept in `buffer_` for the next DoRead, up to max_pipelined_bytes; past
  // that the socket is no longer read, and CheckGoneLater asks the kernel instead.
  void StartWatch() {
    if (watching_ || client_gone_) return;
    if (buffer_.size() >= state_->options().max_pipelined_bytes) {
      if (gone_check_seq_ != current_seq_) CheckGoneLater();
      return;
    }
    watching_ = true;
    stream_.expires_never();
    stream_.async_read_some(buffer_.prepare(4096),
                            beast::bind_front_handler(&Session::OnWatch, shared_from_this()));
  }

  void OnWatch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (n > 0) buffer_.commit(n);
    if (read_after_watch_) {  // The exchange ended while the watch was pending.
      read_after_watch_ = false;
      if (ec && ec != net::error::operation_aborted) {
        Close();
      } else {
        DoRead();
      }
      return;
    }
    if (ec) {
      if (ec != net::error::operation_aborted) ClientGone();
      return;
    }
    if (exchange_active_) StartWatch();
  }

  // While the read-ahead is full, the client's EOF or reset sits behind bytes nobody reads:
  // the socket's TCP state shows it, polled every kGoneCheckInterval until the exchange ends.
  void CheckGoneLater() {
    gone_check_seq_ = current_seq_;
    gone_timer_.expires_after(absl::ToChronoMilliseconds(kGoneCheckInterval));
    gone_timer_.async_wait([self = shared_from_this(), seq = current_seq_](beast::error_code ec) {
      if (ec || !self->IsCurrent(seq) || self->client_gone_) return;
      if (PeerHasClosed(self->stream_.socket().native_handle())) {
        self->ClientGone();
      } else {
        self->CheckGoneLater();
      }
    });
  }

  void ClientGone() {
    if (client_gone_) return;
    client_gone_ = true;
    keep_alive_ = false;
    std::function<void()> fn = std::move(on_gone_);
    on_gone_ = nullptr;
    if (fn) RunGuarded(fn);
    Close();  // Ends the exchange; a pending write completes with an error.
  }

  void SendWhole(HttpResponse r) {
    response_started_ = true;
    auto res = std::make_unique<http::response<http::string_body>>(
        static_cast<http::status>(r.status), version_ == 0 ? 11 : version_);
    res->set(http::field::server, "cairn-gateway");
    if (!r.content_type.empty()) res->set(http::field::content_type, r.content_type);
    for (auto& [name, value] : r.headers) res->set(name, value);
    if (state_->draining()) keep_alive_ = false;
    res->keep_alive(keep_alive_);
    const bool head = head_;
    if (head) {
      res->content_length(r.body.size());
    } else {
      res->body() = std::move(r.body);
      res->prepare_payload();
    }
    response_ = std::move(res);
    stream_.expires_after(absl::ToChronoMilliseconds(state_->options().write_timeout));
    writing_ = true;
    if (head) {
      header_only_ = std::make_unique<http::response_serializer<http::string_body>>(*response_);
      http::async_write_header(
          stream_, *header_only_,
          beast::bind_front_handler(&Session::OnWholeWritten, shared_from_this()));
    } else {
      http::async_write(stream_, *response_,
                        beast::bind_front_handler(&Session::OnWholeWritten, shared_from_this()));
    }
  }

  void OnWholeWritten(beast::error_code ec, size_t /*bytes*/) {
    writing_ = false;
    response_.reset();
    header_only_.reset();
    if (ec) {
      ClientGone();
      EndExchange(false);
      return;
    }
    EndExchange(keep_alive_ && !client_gone_);
  }

  void Enqueue(Chunk c) {
    chunks_.push_back(std::move(c));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (chunks_.empty()) return;
    writing_ = true;
    stream_.expires_after(absl::ToChronoMilliseconds(state_->options().write_timeout));
    auto handler = beast::bind_front_handler(&Session::OnChunkWritten, shared_from_this());
    Chunk& c = chunks_.front();
    switch (c.kind) {
      case Chunk::kHeader:
        http::async_write_header(stream_, *header_serializer_, std::move(handler));
        break;
      case Chunk::kData:
        if (c.data.empty()) {  // An empty chunk would end the stream.
          net::post(stream_.get_executor(),
                    [self = shared_from_this()] { self->OnChunkWritten(beast::error_code(), 0); });
        } else if (chunked_) {
          net::async_write(stream_, http::make_chunk(net::buffer(c.data)), std::move(handler));
        } else {
          net::async_write(stream_, net::buffer(c.data), std::move(handler));
        }
        break;
      case Chunk::kLast:
        if (chunked_) {
          net::async_write(stream_, http::make_chunk_last(), std::move(handler));
        } else {
          net::post(stream_.get_executor(),
                    [self = shared_from_this()] { self->OnChunkWritten(beast::error_code(), 0); });
        }
        break;
    }
  }

  void OnChunkWritten(beast::error_code ec, size_t /*bytes*/) {
    writing_ = false;
    Chunk c = std::move(chunks_.front());
    chunks_.pop_front();
    if (ec) {
      for (Chunk& rest : chunks_) {
        if (rest.done) Post([done = std::move(rest.done)] { done(false); });
      }
      chunks_.clear();
      if (c.done) RunGuarded([&] { c.done(false); });
      ClientGone();
      if (exchange_active_) EndExchange(false);
      return;
    }
    if (c.done) RunGuarded([&] { c.done(true); });
    if (c.kind == Chunk::kLast) {
      EndExchange(keep_alive_ && !client_gone_);
      return;
    }
    if (!writing_) WriteNext();
    // The stream's one timer also bounds the watch read: once nothing is being written, a
    // quiet stream (a slow step, a long prefill) must not time out as if a write had.
    if (!writing_ && watching_) stream_.expires_never();
  }

  // Ends the current exchange: releases its admission and reads the next request (`reuse`)
  // or closes the connection.
  void EndExchange(bool reuse) {
    if (!exchange_active_) return;
    exchange_active_ = false;
    on_gone_ = nullptr;
    gone_timer_.cancel();
    if (heartbeat_) {
      heartbeat_ = nullptr;
      heartbeat_timer_.cancel();
    }
    if (admitted_) {
      admitted_ = false;
      --state_->inflight;
    }
    ReleaseBodyCharge();
    if (counted_exchange_) {
      counted_exchange_ = false;
      state_->ExchangeEnded();
    }
    if (!reuse || state_->draining()) {
      if (linger_ && !client_gone_) {
        Linger();
      } else {
        Close();
      }
      return;
    }
    if (watching_) {
      read_after_watch_ = true;
      beast::error_code ignored;
      beast::get_lowest_layer(stream_).socket().cancel(ignored);
      return;
    }
    DoRead();
  }

  // Closes a connection answered before its request was read whole: the send side is shut
  // (the answer ends there for the client), then what the client still sends is read and
  // dropped until it closes or linger_timeout passes. Closing a socket with unread bytes
  // resets the connection, and a reset can destroy the answer before the client has read it.
  // REQUIRES: no exchange is active.
  void Linger() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(absl::ToChronoMilliseconds(state_->options().linger_timeout));
    LingerRead();
  }
  void LingerRead() {
    stream_.async_read_some(net::buffer(linger_buffer_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) {
                                self->stream_.close();
                              } else {
                                self->LingerRead();
                              }
                            });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
    if (exchange_active_) {
      client_gone_ = true;
      std::function<void()> fn = std::move(on_gone_);
      on_gone_ = nullptr;
      if (fn) RunGuarded(fn);
      EndExchange(false);
    }
  }

  beast::tcp_stream stream_;
  HttpServerState* const state_;  // Outlives every session (Shutdown joins the threads).
  net::steady_timer heartbeat_timer_;
  std::function<void()> heartbeat_;  // Set while the current exchange wants ticks.
  absl::Duration heartbeat_interval_;
  net::steady_timer gone_timer_;  // CheckGoneLater's.
  uint64_t gone_check_seq_ = 0;   // The exchange gone_timer_ was last armed for.
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest request_;                   // The request whose handler runs (valid once read whole).
  const Router::Route* route_ = nullptr;  // Its route, from its header; owned by the router.
  std::string current_path_;
  // The host and port of the request's target where it is in absolute form.
  std::optional<std::string> target_authority_;
  // Of the request being answered, set from its header (or for an answer without one).
  bool head_ = false;         // HEAD: the answer goes without its body.
  unsigned version_ = 11;     // Its HTTP version (10 or 11).
  bool body_unread_ = false;  // Its body has not been read (it was refused at the header).
  bool linger_ = false;       // Answered before it was read whole: Linger() instead of Close().
  std::array<char, 4096> linger_buffer_;
  uint64_t current_seq_ = 0;
  bool exchange_active_ = false;
  bool counted_exchange_ = false;
  bool response_started_ = false;
  bool stream_ended_ = false;
  bool keep_alive_ = false;
  bool admitted_ = false;
  int64_t body_charge_ = 0;  // Of this exchange's body, in state_->body_bytes.
  bool watching_ = false;
  bool read_after_watch_ = false;
  bool writing_ = false;
  bool chunked_ = true;  // Of the current stream (false for HTTP/1.0 clients).
  bool client_gone_ = false;
  bool closed_ = false;
  std::function<void()> on_gone_;
  std::unique_ptr<http::response<http::string_body>> response_;
  std::unique_ptr<http::response_serializer<http::string_body>> header_only_;
  std::unique_ptr<http::response<http::empty_body>> stream_header_;
  std::unique_ptr<http::response_serializer<http::empty_body>> header_serializer_;
  std::deque<Chunk> chunks_;
};

// The handle a handler gets: the session plus the sequence number of its request, so that a
// late call after the answer (or for an earlier request on a keep-alive connection) is a
// no-op.
class SessionExchange : public HttpExchange {
 public:
  SessionExchange(std::shared_ptr<Session> session, uint64_t seq)
      : session_(std::move(session)), seq_(seq) {}
  const HttpRequest& request() const override { return session_->request(); }
  absl::string_view path() const override { return session_->path(); }
  void Respond(HttpResponse r) override { session_->Respond(seq_, std::move(r)); }
  void RespondError(const absl::Status& s) override { session_->RespondError(seq_, s); }
  void StartStream(std::string content_type) override {
    session_->StartStream(seq_, std::move(content_type));
  }
  void Write(std::string data, std::function<void(bool)> done) override {
    session_->Write(seq_, std::move(data), std::move(done));
  }
  void EndStream() override { session_->EndStream(seq_); }
  void OnClientGone(std::function<void()> fn) override {
    session_->OnClientGone(seq_, std::move(fn));
  }
  void Post(std::function<void()> fn) override { session_->Post(std::move(fn)); }
  void StartHeartbeat(absl::Duration interval, std::function<void()> tick) override {
    session_->StartHeartbeat(seq_, interval, std::move(tick));
  }
  bool finished() const override { return !session_->IsCurrent(seq_); }

 private:
  std::shared_ptr<Session> session_;
  const uint64_t seq_;
};

std::shared_ptr<HttpExchange> Session::MakeExchange() {
  return std::make_shared<SessionExchange>(shared_from_this(), current_seq_);
}

}  // namespace

void ServeConnection(tcp::socket socket, HttpServerState* state) {
  auto session = std::make_shared<Session>(std::move(socket), state);
  state->Register(session);
  if (state->connections.load() > state->options().max_connections) {
    session->RejectBusy();
  } else {
    session->Run();
  }
}

}  // namespace cairn::gateway
