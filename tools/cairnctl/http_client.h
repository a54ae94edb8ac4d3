#ifndef CAIRN_TOOLS_CAIRNCTL_HTTP_CLIENT_H_
#define CAIRN_TOOLS_CAIRNCTL_HTTP_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cairn::cairnctl {

// `http://HOST:PORT[/PREFIX]` split into its parts (no TLS: the gateway's HTTP listener).
struct HttpUrl {
  std::string host;
  std::string port = "80";
  std::string prefix;  // Path prefix without the trailing slash; empty for the root.
};
// InvalidArgument for anything but an http:// URL with a host.
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url);

struct HttpResult {
  int status = 0;
  std::string body;  // Empty when the body went to `on_data`.
};

// A blocking HTTP/1.1 client on one keep-alive connection (Boost.Beast), reconnecting when the
// server closed it. Each request (connecting, sending, and reading the whole response, a
// stream's last event included) must finish within `timeout` of its start, else it fails with
// DeadlineExceeded and the connection is dropped. A timeout beyond a year counts as a year.
// Thread-compatible: one client per thread.
class HttpClient {
 public:
  HttpClient(HttpUrl url, absl::Duration timeout);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // GET `path` (appended to the URL's prefix). Unavailable when the server cannot be reached or
  // closes the connection, DeadlineExceeded on a timeout.
  absl::StatusOr<HttpResult> Get(const std::string& path);
  // POST `json` to `path`. When `on_data` is set, every piece of the response body is passed to
  // it as it arrives (for server-sent events) instead of being collected.
  absl::StatusOr<HttpResult> Post(const std::string& path, const std::string& json,
                                  const std::function<void(absl::string_view)>& on_data = {});

 private:
  struct Connection;
  absl::StatusOr<HttpResult> Send(const std::string& method, const std::string& path,
                                  const std::string& body,
                                  const std::function<void(absl::string_view)>& on_data);

  const HttpUrl url_;
  const absl::Duration timeout_;
  std::unique_ptr<Connection> connection_;  // Null until the first request or after a failure.
};

}  // namespace cairn::cairnctl

#endif  // CAIRN_TOOLS_CAIRNCTL_HTTP_CLIENT_H_
