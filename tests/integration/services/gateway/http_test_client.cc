#include "tests/integration/services/gateway/http_test_client.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/write.hpp"

namespace cairn::gateway::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;

nlohmann::json HttpResult::json() const {
  return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
}

std::vector<SseEvent> ParseSse(const std::string& body) {
  std::vector<SseEvent> events;
  for (absl::string_view block : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    SseEvent e;
    bool any = false;
    for (absl::string_view line : absl::StrSplit(block, '\n')) {
      if (absl::ConsumePrefix(&line, "event:")) {
        e.event = std::string(absl::StripLeadingAsciiWhitespace(line));
        any = true;
      } else if (absl::ConsumePrefix(&line, "data:")) {
        if (!e.data.empty()) e.data += "\n";
        e.data += std::string(absl::StripLeadingAsciiWhitespace(line));
        any = true;
      }
    }
    if (any) events.push_back(std::move(e));
  }
  return events;
}

HttpTestClient::HttpTestClient(int port, absl::Duration timeout) : port_(port), timeout_(timeout) {}

HttpTestClient::~HttpTestClient() { Close(); }

bool HttpTestClient::Connect() {
  if (connected_) return true;
  stream_ = std::make_unique<beast::tcp_stream>(ioc_);
  buffer_.clear();
  beast::error_code ec;
  stream_->expires_after(absl::ToChronoMilliseconds(timeout_));
  stream_->socket().connect(
      net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_)), ec);
  connected_ = !ec;
  return connected_;
}

bool HttpTestClient::ShutdownSend() {
  if (!connected_) return false;
  beast::error_code ec;
  stream_->socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
  return !ec;
}

void HttpTestClient::Close() {
  if (!connected_) return;
  beast::error_code ec;
  stream_->socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  stream_->socket().close(ec);
  connected_ = false;
}

// Runs one blocking operation with the timeout: Beast's tcp_stream timeouts apply to its
// async operations, so each step is an async call driven by run_for.
template <typename Op>
static beast::error_code RunWithTimeout(net::io_context& ioc, absl::Duration timeout, Op op) {
  beast::error_code result = net::error::would_block;
  op([&result](beast::error_code ec, size_t) { result = ec; });
  ioc.restart();
  ioc.run_for(absl::ToChronoMilliseconds(timeout));
  return result;
}

HttpResult HttpTestClient::ReadResponse(bool head) {
  HttpResult r;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  parser.skip(head);
  stream_->expires_after(absl::ToChronoMilliseconds(timeout_));
  beast::error_code ec = RunWithTimeout(
      ioc_, timeout_, [&](auto handler) { http::async_read(*stream_, buffer_, parser, handler); });
  if (ec) {
    r.error = ec.message();
    Close();
    return r;
  }
  auto& res = parser.get();
  r.status = res.result_int();
  for (const auto& field : res) {
    r.headers[absl::AsciiStrToLower(std::string(field.name_string()))] = std::string(field.value());
  }
  r.body = res.body();
  if (!res.keep_alive()) Close();
  return r;
}

HttpResult HttpTestClient::Request(http::verb verb, const std::string& target,
                                   const std::string& body,
                                   const std::map<std::string, std::string>& headers) {
  HttpResult r;
  if (!Connect()) {
    r.error = "connect failed";
    return r;
  }
  http::request<http::string_body> req(verb, target, 11);
  req.set(http::field::host, "127.0.0.1");
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  for (const auto& [name, value] : headers) req.set(name, value);
  req.body() = body;
  req.prepare_payload();
  req.keep_alive(true);
  stream_->expires_after(absl::ToChronoMilliseconds(timeout_));
  beast::error_code ec = RunWithTimeout(
      ioc_, timeout_, [&](auto handler) { http::async_write(*stream_, req, handler); });
  if (ec) {
    r.error = ec.message();
    Close();
    return r;
  }
  return ReadResponse(verb == http::verb::head);
}

HttpResult HttpTestClient::Raw(const std::string& bytes) {
  HttpResult r;
  if (!Connect()) {
    r.error = "connect failed";
    return r;
  }
  stream_->expires_after(absl::ToChronoMilliseconds(timeout_));
  beast::error_code ec = RunWithTimeout(ioc_, timeout_, [&](auto handler) {
    net::async_write(*stream_, net::buffer(bytes), handler);
  });
  if (ec) {
    r.error = ec.message();
    Close();
    return r;
  }
  return ReadResponse();
}

bool HttpTestClient::Send(const std::string& bytes) {
  if (!connected_) return false;
  stream_->expires_after(absl::ToChronoMilliseconds(timeout_));
  return !RunWithTimeout(ioc_, timeout_, [&](auto handler) {
    net::async_write(*stream_, net::buffer(bytes), handler);
  });
}

std::string HttpTestClient::StartStream(const std::string& target, const std::string& body,
                                        size_t min_bytes) {
  if (!Connect()) return "";
  std::string head = "POST " + target +
                     " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body;
  stream_->expires_after(absl::ToChronoMilliseconds(timeout_));
  beast::error_code ec = RunWithTimeout(ioc_, timeout_, [&](auto handler) {
    net::async_write(*stream_, net::buffer(head), handler);
  });
  if (ec) return "";
  std::string got;
  absl::Time deadline = absl::Now() + timeout_;
  while (got.size() < min_bytes && absl::Now() < deadline) {
    char buf[4096];
    size_t n = 0;
    stream_->expires_after(absl::ToChronoMilliseconds(timeout_));
    ec = RunWithTimeout(ioc_, deadline - absl::Now(), [&](auto handler) {
      stream_->async_read_some(net::buffer(buf), [&n, handler](beast::error_code e, size_t k) {
        n = k;
        handler(e, k);
      });
    });
    got.append(buf, n);
    if (ec) break;
  }
  return got;
}

}  // namespace cairn::gateway::testing
