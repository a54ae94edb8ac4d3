#include "tools/cairnctl/http_client.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core/error.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http.hpp"

namespace cairn::cairnctl {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url) {
  constexpr absl::string_view kScheme = "http://";
  if (!absl::StartsWith(url, kScheme)) {
    return absl::InvalidArgumentError(absl::StrCat("url '", url, "' must start with http://"));
  }
  absl::string_view rest = url.substr(kScheme.size());
  HttpUrl out;
  const size_t slash = rest.find('/');
  if (slash != absl::string_view::npos) {
    out.prefix = std::string(rest.substr(slash));
    while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
    rest = rest.substr(0, slash);
  }
  size_t colon = rest.rfind(':');
  if (!rest.empty() && rest.front() == '[') {  // [v6]:port
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("url '", url, "': unterminated ["));
    }
    out.host = std::string(rest.substr(1, close - 1));
    if (rest.size() > close + 1 && rest[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("url '", url, "': junk after ]: want [ADDRESS]:PORT"));
    }
    colon = rest.size() > close + 1 ? close + 1 : absl::string_view::npos;
  } else {
    out.host = std::string(rest.substr(0, colon));
    if (out.host.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("url '", url, "': an IPv6 address goes in brackets, [ADDRESS]:PORT"));
    }
  }
  if (colon != absl::string_view::npos) {
    out.port = std::string(rest.substr(colon + 1));
    int port = 0;
    if (!absl::SimpleAtoi(out.port, &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("url '", url, "': bad port"));
    }
  }
  if (out.host.empty()) return absl::InvalidArgumentError(absl::StrCat("url '", url, "': no host"));
  return out;
}

struct HttpClient::Connection {
  asio::io_context io;
  beast::tcp_stream stream{io};
  beast::flat_buffer buffer;
};

namespace {

// The longest timeout honoured: far beyond any request, short enough that now + it fits the
// steady clock (an absurd --timeout must not overflow into the past).
constexpr absl::Duration kMaxTimeout = absl::Hours(24 * 365);

// Runs one asynchronous operation on `c`'s stream to completion on the calling thread, under
// the stream's expiry (Beast's timeouts only bound asynchronous operations; a blocking read
// retries after SO_RCVTIMEO's EAGAIN for ever). `start` starts it with the handler it is given.
// Returns the operation's error; beast::error::timeout when the deadline passed first.
template <typename Start>
boost::system::error_code RunOne(asio::io_context& io, Start&& start) {
  boost::system::error_code result = asio::error::would_block;
  start([&result](boost::system::error_code ec, std::size_t /*bytes*/ = 0) { result = ec; });
  io.restart();
  io.run();
  return result;
}

bool IsTimeout(const boost::system::error_code& ec) { return ec == beast::error::timeout; }

}  // namespace

HttpClient::HttpClient(HttpUrl url, absl::Duration timeout)
    : url_(std::move(url)), timeout_(std::clamp(timeout, absl::ZeroDuration(), kMaxTimeout)) {}

HttpClient::~HttpClient() = default;

absl::StatusOr<HttpResult> HttpClient::Get(const std::string& path) {
  return Send("GET", path, "", {});
}

absl::StatusOr<HttpResult> HttpClient::Post(const std::string& path, const std::string& json,
                                            const std::function<void(absl::string_view)>& on_data) {
  return Send("POST", path, json, on_data);
}

absl::StatusOr<HttpResult> HttpClient::Send(const std::string& method, const std::string& path,
                                            const std::string& body,
                                            const std::function<void(absl::string_view)>& on_data) {
  // One deadline for the whole exchange: connecting, sending, and reading the last byte.
  const std::chrono::steady_clock::time_point deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout_);
  const auto timed_out = [&](absl::string_view what) {
    connection_.reset();
    return absl::DeadlineExceededError(absl::StrCat(
        what, " ", path, " took longer than the timeout (", absl::FormatDuration(timeout_), ")"));
  };
  // A kept-alive connection the server closed meanwhile fails on the first write or read; one
  // fresh connection is tried before giving up.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = connection_ != nullptr;
    boost::system::error_code ec;
    if (connection_ == nullptr) {
      auto c = std::make_unique<Connection>();
      // Resolving is not bounded by the deadline (getaddrinfo cannot be interrupted); the
      // gateway is given as an address or a local name.
      tcp::resolver resolver(c->io);
      tcp::resolver::results_type endpoints = resolver.resolve(url_.host, url_.port, ec);
      if (ec)
        return absl::UnavailableError(absl::StrCat("resolving ", url_.host, ": ", ec.message()));
      c->stream.expires_at(deadline);
      ec = RunOne(c->io, [&](auto handler) {
        c->stream.async_connect(endpoints, [handler](boost::system::error_code e,
                                                     const tcp::endpoint&) { handler(e); });
      });
      if (IsTimeout(ec)) return timed_out("connecting for");
      if (ec) {
        return absl::UnavailableError(
            absl::StrCat("connecting to ", url_.host, ":", url_.port, ": ", ec.message()));
      }
      connection_ = std::move(c);
    }
    Connection& c = *connection_;
    http::request<http::string_body> req(method == "GET" ? http::verb::get : http::verb::post,
                                         url_.prefix + path, 11);
    req.set(http::field::host, url_.host);
    req.set(http::field::user_agent, "cairnctl");
    req.keep_alive(true);
    if (method != "GET") {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
      req.prepare_payload();
    }
    c.stream.expires_at(deadline);
    ec = RunOne(c.io, [&](auto handler) { http::async_write(c.stream, req, handler); });
    if (IsTimeout(ec)) return timed_out("sending");
    if (ec) {
      connection_.reset();
      if (reused) continue;
      return absl::UnavailableError(absl::StrCat("sending ", path, ": ", ec.message()));
    }
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    ec = RunOne(
        c.io, [&](auto handler) { http::async_read_header(c.stream, c.buffer, parser, handler); });
    if (IsTimeout(ec)) return timed_out("waiting for the response to");
    if (ec) {
      connection_.reset();
      if (reused) continue;
      return absl::UnavailableError(absl::StrCat("reading ", path, ": ", ec.message()));
    }
    HttpResult result;
    result.status = static_cast<int>(parser.get().result_int());
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof chunk;
      ec = RunOne(
          c.io, [&](auto handler) { http::async_read_some(c.stream, c.buffer, parser, handler); });
      if (ec == http::error::need_buffer) ec = {};
      if (IsTimeout(ec)) return timed_out("reading the response to");
      if (ec) {
        connection_.reset();
        return absl::UnavailableError(absl::StrCat("reading ", path, ": ", ec.message()));
      }
      const size_t n = sizeof chunk - parser.get().body().size;
      if (n == 0) continue;
      if (on_data) {
        on_data(absl::string_view(chunk, n));
      } else {
        result.body.append(chunk, n);
      }
    }
    if (!parser.get().keep_alive()) connection_.reset();
    return result;
  }
  return absl::UnavailableError(absl::StrCat("sending ", path, ": connection closed"));
}

}  // namespace cairn::cairnctl
