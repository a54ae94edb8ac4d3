#include "tools/cairnctl/http_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <cstdint>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"

namespace cairn::cairnctl {

namespace asio = boost::asio;
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
    colon = rest.size() > close + 1 && rest[close + 1] == ':' ? close + 1 : absl::string_view::npos;
  } else {
    out.host = std::string(rest.substr(0, colon));
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
  tcp::socket socket{io};
  boost::beast::flat_buffer buffer;
};

HttpClient::HttpClient(HttpUrl url, absl::Duration timeout)
    : url_(std::move(url)), timeout_(timeout) {}

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
  // A kept-alive connection the server closed meanwhile fails on the first write or read; one
  // fresh connection is tried before giving up.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = connection_ != nullptr;
    boost::system::error_code ec;
    if (connection_ == nullptr) {
      auto c = std::make_unique<Connection>();
      tcp::resolver resolver(c->io);
      tcp::resolver::results_type endpoints = resolver.resolve(url_.host, url_.port, ec);
      if (ec)
        return absl::UnavailableError(absl::StrCat("resolving ", url_.host, ": ", ec.message()));
      asio::connect(c->socket, endpoints, ec);
      if (ec) {
        return absl::UnavailableError(
            absl::StrCat("connecting to ", url_.host, ":", url_.port, ": ", ec.message()));
      }
      timeval tv;
      tv.tv_sec = static_cast<time_t>(absl::ToInt64Seconds(timeout_));
      tv.tv_usec = 0;
      ::setsockopt(c->socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ::setsockopt(c->socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
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
    http::write(c.socket, req, ec);
    if (ec) {
      connection_.reset();
      if (reused) continue;
      return absl::UnavailableError(absl::StrCat("sending ", path, ": ", ec.message()));
    }
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    http::read_header(c.socket, c.buffer, parser, ec);
    if (ec) {
      connection_.reset();
      if (reused && ec != boost::asio::error::would_block) continue;
      if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) {
        return absl::DeadlineExceededError(absl::StrCat("no response to ", path));
      }
      return absl::UnavailableError(absl::StrCat("reading ", path, ": ", ec.message()));
    }
    HttpResult result;
    result.status = static_cast<int>(parser.get().result_int());
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof chunk;
      http::read_some(c.socket, c.buffer, parser, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        connection_.reset();
        if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) {
          return absl::DeadlineExceededError(absl::StrCat("response to ", path, " stalled"));
        }
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
