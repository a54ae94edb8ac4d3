#ifndef CAIRN_SERVICES_GATEWAY_HTTP_HTTP_SERVER_H_
#define CAIRN_SERVICES_GATEWAY_HTTP_HTTP_SERVER_H_

// The gateway's HTTP/1.1 server on Boost.Beast: one io_context run by a small fixed pool of
// threads, one strand per connection, no thread per connection. It knows HTTP only: routing,
// keep-alive, size limits, timeouts, API keys, bounded admission and a graceful drain. What a
// route means and how errors are shaped belong to the handlers and the ErrorRenderer.
//
// Everything that can refuse a request without its body (the route, the method, the API key,
// the Host and Origin checks, a content coding, admission, a drain) is decided once its header
// is in, and a refused request is answered before its body is read (and without "100 Continue").

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "boost/beast/http.hpp"

namespace cairn::gateway {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpVerb = boost::beast::http::verb;

// A whole response.
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // Extra headers.
};

// Attaches an explicit HTTP status to `status` (e.g. 413 on an InvalidArgument), for the
// cases the status-code table cannot express. The ErrorRenderer honours it.
absl::Status WithHttpStatus(absl::Status status, int http_status);
// Returns the HTTP status attached by WithHttpStatus, or 0.
int HttpStatusOf(const absl::Status& status);

// Renders an error as a response (the body shape may depend on the route).
using ErrorRenderer = std::function<HttpResponse(const absl::Status&, absl::string_view path)>;

// One request being answered. Handlers get it as a shared_ptr and may keep it while they
// wait for upstream work.
//
// Thread safety: every method must be called on the exchange's strand: handlers are invoked
// there, and other threads get there with Post(). Methods on an exchange that is finished
// (answered, or its connection gone) do nothing.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  // The request. Valid until the exchange has answered.
  virtual const HttpRequest& request() const = 0;
  // The request path without its query string.
  virtual absl::string_view path() const = 0;
  // Answers with a whole response. At most once, and not after StartStream.
  virtual void Respond(HttpResponse response) = 0;
  // Answers with an error rendered by the server's ErrorRenderer.
  virtual void RespondError(const absl::Status& status) = 0;
  // Starts a chunked 200 response with `content_type` (the headers are sent at once).
  virtual void StartStream(std::string content_type) = 0;
  // Sends `data` as one chunk. `done(ok)` runs on the strand once it is written (true) or
  // the connection failed (false); the caller should wait for it before writing more.
  virtual void Write(std::string data, std::function<void(bool ok)> done) = 0;
  // Ends the stream.
  virtual void EndStream() = 0;
  // Sets `on_gone` to run on the strand if the client disconnects before the exchange has
  // finished (a failed write, a reset or EOF). Runs at once if the client is already gone.
  virtual void OnClientGone(std::function<void()> on_gone) = 0;
  // Runs `fn` on the strand (later, never inline).
  virtual void Post(std::function<void()> fn) = 0;
  // Runs `tick` on the strand every `interval` until the exchange finishes (keep-alive
  // pings during long waits). A second call replaces the first.
  virtual void StartHeartbeat(absl::Duration interval, std::function<void()> tick) = 0;
  // True once the exchange has answered or its client is gone.
  virtual bool finished() const = 0;
};

using HttpHandler = std::function<void(std::shared_ptr<HttpExchange>)>;

// Without keys (the listener is then on loopback), every route answers only requests whose
// Host header, when present, names a loopback host, and whose Origin header, when present, is
// a loopback origin (403 otherwise): a web page can neither reach the API through DNS
// rebinding nor send it requests from its own origin (a form's or fetch's cross-site POST).
struct RouteOptions {
  // Needs no API key. Only "/health" and "/" may be public (GW1: deny by default); the
  // router aborts on any other public route.
  bool public_route = false;
  bool admission = false;  // Counts against max_inflight (generation routes).
  // A page a browser opens (the dashboard). With keys, the key may also come as the password
  // of HTTP Basic authentication (any user name), and a 401 asks the browser for it
  // (WWW-Authenticate), since a browser cannot add a Bearer header to a page it navigates to.
  bool browser = false;
};

// Maps (verb, path) to handlers. Thread-compatible: fill it before Start.
class Router {
 public:
  struct Route {
    HttpVerb verb;
    std::string path;
    RouteOptions options;
    HttpHandler handler;
    bool prefix = false;  // `path` ends in '/' and the route serves every path under it.
  };
  void Add(HttpVerb verb, std::string path, RouteOptions options, HttpHandler handler);
  // Adds a route for every path that starts with `prefix` (which ends in '/'): "/v1/models/"
  // serves "/v1/models/ID", and the handler reads the rest of the path. Exact routes win.
  void AddPrefix(HttpVerb verb, std::string prefix, RouteOptions options, HttpHandler handler);
  // Returns the route for `verb` and `path`, or nullptr. HEAD finds the GET route where no HEAD
  // route is registered (the server answers it as GET, without the body). Sets `*path_known`
  // when another verb is registered for `path` (405 rather than 404).
  const Route* Find(HttpVerb verb, absl::string_view path, bool* path_known) const;
  // Returns the methods registered for `path`, as a 405's Allow header lists them ("GET, HEAD";
  // HEAD wherever GET is), or "" when none is.
  std::string AllowedMethods(absl::string_view path) const;
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";                    // Literal IP address to bind.
  int port = 8080;                                   // 0 picks a free port.
  int threads = 4;                                   // Threads running the io_context.
  uint64_t max_body_bytes = 8 << 20;                 // Larger bodies get 413 (GW3).
  // Bytes of request bodies held at once, every route's: each request is charged at its header
  // (its Content-Length, or max_body_bytes for a chunked body) until its exchange ends; one
  // that would pass this gets 503 + Retry-After before its body is read. Without it a
  // thousand connections could each hold a body of max_body_bytes.
  uint64_t max_body_bytes_in_flight = uint64_t{128} << 20;
  uint32_t max_header_bytes = 64 << 10;              // Larger headers get 431.
  absl::Duration read_timeout = absl::Seconds(30);   // A whole request, or keep-alive idle.
  absl::Duration write_timeout = absl::Seconds(60);  // One write.
  int max_connections = 1024;                        // Further connections get 503.
  int max_inflight = 64;                             // Admission routes in progress (GW5).
  int retry_after_seconds = 1;                       // Retry-After on 429/503.
  absl::Duration drain_timeout = absl::Seconds(10);  // Shutdown() waits this long.
  uint64_t max_pipelined_bytes = 64 << 10;           // Read ahead while answering.
  // SO_SNDBUF of every accepted connection (0: the kernel's autotuning, up to its
  // tcp_wmem maximum, 4 MiB by default). A client that stops reading holds at most this much
  // kernel memory before its writes stall and --write-timeout ends it.
  int socket_send_buffer_bytes = 256 << 10;
  // How long a connection answered before its request was read whole (a refusal at header
  // time, a 413) keeps reading and dropping what the client still sends before it closes:
  // closing with unread bytes resets the connection, which can destroy the answer before the
  // client reads it.
  absl::Duration linger_timeout = absl::Seconds(2);
  std::vector<std::string> api_keys;  // Empty: no keys (loopback only).
};

// Counters the server keeps; read with stats().
struct HttpServerStats {
  int64_t connections = 0;    // Open connections.
  int64_t exchanges = 0;      // Requests being answered.
  int64_t inflight = 0;       // Admitted requests in progress.
  int64_t body_bytes = 0;     // Bytes of request bodies charged (max_body_bytes_in_flight).
  int64_t rejected_busy = 0;  // Answered 503 by admission or the connection cap.
};

class HttpServerState;

// Thread-safe. Handlers run on the io_context's threads.
class HttpServer {
 public:
  // Binds and starts serving. InvalidArgument for a bad host, or for a non-loopback host
  // without API keys (GW2); Unavailable if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           Router router, ErrorRenderer errors);
  ~HttpServer();  // Shutdown(), then frees everything.
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  HttpServerStats stats() const;
  // Stops accepting, answers new requests with 503, waits up to the drain timeout for
  // requests in progress, then closes every connection and joins the threads. Idempotent.
  // Upstream callbacks must not Post to exchanges after this returns: stop them first or
  // let them finish (the exchanges are finished by then, so posting is harmless only while
  // the server object lives).
  void Shutdown();

 private:
  HttpServer() = default;
  std::unique_ptr<HttpServerState> state_;
  int port_ = 0;
};

// Splits a listen address "HOST:PORT" or "[IPV6]:PORT" (HOST an IP literal). InvalidArgument
// naming the problem.
struct HttpListenAddress {
  std::string host;
  int port = 0;
};
absl::StatusOr<HttpListenAddress> ParseHttpListenAddress(absl::string_view listen);

// Returns true if `presented` equals one of `keys`, comparing in constant time per key.
bool ApiKeyMatches(absl::string_view presented, const std::vector<std::string>& keys);

// Returns the password of an HTTP Basic `authorization` header value ("Basic base64(user:pw)"),
// or "" when it is not one.
std::string BasicAuthPassword(absl::string_view authorization);

// Returns true if `header` carries an API key of `keys`: "Authorization: Bearer KEY", the
// password of Basic authentication where `basic` (browser routes), or "x-api-key: KEY"
// (Anthropic clients).
bool RequestHasApiKey(const HttpRequest& header, bool basic, const std::vector<std::string>& keys);

// Returns true if `header` has no `field`, or one whose value `ok` accepts.
bool HeaderAbsentOr(const HttpRequest& header, boost::beast::http::field field,
                    bool (*ok)(absl::string_view));

// Returns InvalidArgument where `header` breaks RFC 9112 3.2's Host rule: more than one Host
// header (any version), none in an HTTP/1.1 request, or one whose value is not a host with an
// optional port (IsValidHostValue). HTTP/1.0 may omit it, and a target in absolute form does
// not excuse it (the server then goes by the target's host, not Host's).
absl::Status CheckHostHeader(const HttpRequest& header);
// Whether `value` is RFC 3986's host [":" port]: a reg-name (unreserved and sub-delims
// characters, percent-encoded octets; an IPv4 address is one), or an IP literal in brackets,
// then an optional port of digits; or empty (a target without an authority).
bool IsValidHostValue(absl::string_view value);

// Returns true if the Host header value `host` names the loopback interface ("localhost",
// "127.0.0.1", "[::1]", with or without a port).
bool IsLoopbackHost(absl::string_view host);

// The path of request target `target` without its query ("/" where it names none), in origin
// form ("/v1/models?x") or absolute form ("http://localhost:8080/v1/models", RFC 9112 3.2.2,
// which a server must accept). Where `authority` is not null it is set to the absolute form's
// host and port (the request's host in place of its Host header), or to nullopt.
std::string RequestTargetPath(absl::string_view target,
                              std::optional<std::string>* authority = nullptr);

// Returns true if the Content-Encoding header value `coding` names no coding: "identity" in any
// case, or an empty value, which some clients send.
bool IsIdentityCoding(absl::string_view coding);

// OK where every Transfer-Encoding header of `header` is "chunked" alone (any case), the only
// transfer coding the gateway decodes, or there is none; else Unimplemented with HTTP status
// 501 (RFC 9112 6.1) naming the coding.
absl::Status CheckTransferCoding(const HttpRequest& header);

// Returns true if the Origin header value `origin` is an http or https origin on a loopback
// host ("http://localhost:3000", "https://127.0.0.1", "http://[::1]:8080"); false for any other
// origin, "null" included.
bool IsLoopbackOrigin(absl::string_view origin);

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_HTTP_HTTP_SERVER_H_
