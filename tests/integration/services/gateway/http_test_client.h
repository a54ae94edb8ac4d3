#ifndef CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_HTTP_TEST_CLIENT_H_
#define CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_HTTP_TEST_CLIENT_H_

// A blocking HTTP/1.1 client for gateway tests (Beast, error codes only), plus an SSE
// parser. Every operation has a deadline, so a broken server fails a test instead of
// hanging it.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "boost/asio/io_context.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "nlohmann/json.hpp"

namespace cairn::gateway::testing {

struct HttpResult {
  int status = 0;  // 0 when the exchange failed (see error).
  std::string error;
  std::map<std::string, std::string> headers;  // Lower-case names.
  std::string body;
  nlohmann::json json() const;  // The body parsed; discarded when not JSON.
};

struct SseEvent {
  std::string event;  // "" when the event has no name.
  std::string data;
};
// Splits an SSE body into events.
std::vector<SseEvent> ParseSse(const std::string& body);

// One keep-alive connection to 127.0.0.1:`port`. Thread-compatible: one thread at a time,
// Close() included.
class HttpTestClient {
 public:
  explicit HttpTestClient(int port, absl::Duration timeout = absl::Seconds(20));
  ~HttpTestClient();

  HttpResult Request(boost::beast::http::verb verb, const std::string& target,
                     const std::string& body = "",
                     const std::map<std::string, std::string>& headers = {});
  HttpResult Post(const std::string& target, const std::string& body,
                  const std::map<std::string, std::string>& headers = {}) {
    return Request(boost::beast::http::verb::post, target, body, headers);
  }
  HttpResult Get(const std::string& target,
                 const std::map<std::string, std::string>& headers = {}) {
    return Request(boost::beast::http::verb::get, target, "", headers);
  }

  // Sends raw bytes and returns whatever response comes back (for malformed requests).
  HttpResult Raw(const std::string& bytes);
  // Sends raw bytes on the open connection without reading; false if it failed.
  bool Send(const std::string& bytes);
  // Reads one more response on the connection (after an interim 100 Continue, say); `head`:
  // the answer to a HEAD request, which has no body whatever its Content-Length says.
  HttpResult ReadResponse(bool head = false);
  // Sends the head of a streaming request and reads until `min_bytes` of body arrived;
  // returns the bytes read. The connection stays open (Close() drops it).
  std::string StartStream(const std::string& target, const std::string& body, size_t min_bytes);
  // Shuts down the sending side only (a TCP half-close: the server reads EOF, and the client
  // can still read); false if it failed.
  bool ShutdownSend();
  void Close();
  bool connected() const { return connected_; }

 private:
  bool Connect();

  int port_;
  absl::Duration timeout_;
  boost::asio::io_context ioc_;
  std::unique_ptr<boost::beast::tcp_stream> stream_;
  boost::beast::flat_buffer buffer_;
  bool connected_ = false;
};

}  // namespace cairn::gateway::testing

#endif  // CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_HTTP_TEST_CLIENT_H_
