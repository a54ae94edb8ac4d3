// cairn-gateway: the HTTP gateway. Wiring only (style.md §2): options, the upstream pool, the
// routes, the HTTP server, readiness, and an orderly drain on SIGTERM.

#include <systemd/sd-daemon.h>

#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config/daemon_command_line.h"
#include "common/config/flags.h"
#include "common/grpc/peer_address.h"
#include "common/grpc/signals.h"
#include "common/log/log.h"
#include "services/gateway/dashboard/cache_monitor.h"
#include "services/gateway/gateway_service.h"
#include "services/gateway/http/http_server.h"
#include "services/gateway/upstream/infer_pool.h"

namespace cairn::gateway {
namespace {

struct GatewayMainOptions {
  std::string listen = "127.0.0.1:8080";
  std::vector<std::string> infer;
  std::string cache;
  std::string api_key_file;
  int64_t max_output_tokens = 0;
  std::string log_level = "info";
  bool strict_model_names = false;
};

// Reads API keys: one per line; blank lines and lines starting with '#' are skipped.
absl::StatusOr<std::vector<std::string>> ReadApiKeys(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read API key file ", path));
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> keys;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    keys.emplace_back(line);
  }
  if (keys.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " holds no API key"));
  return keys;
}

int Run(int argc, char** argv) {
  BlockTerminationSignals();
  GatewayMainOptions main_options;
  HttpServerOptions http;
  InferPoolOptions upstream;
  GatewayServiceOptions service_options;
  RequestLimits& limits = service_options.limits;
  uint64_t max_body = http.max_body_bytes;
  FlagSet flags("cairn-gateway", "The Cairn HTTP gateway: OpenAI- and Anthropic-compatible APIs.");
  flags.Add("listen", &main_options.listen, "HTTP address HOST:PORT (an IP literal)");
  flags.Add("infer", &main_options.infer,
            "cairn-infer gRPC address (unix:PATH or HOST:PORT); repeat for several daemons",
            ValidatePeerAddress);
  flags.Add("cache", &main_options.cache,
            "cairn-cache gRPC address (unix:PATH or HOST:PORT) for /metrics and the dashboard's "
            "budget, tree and events (optional; its control methods only)",
            ValidateOptionalPeerAddress);
  flags.Add("api-key-file", &main_options.api_key_file,
            "file of API keys, one per line (required off loopback)");
  flags.AddBytes("max-body-bytes", &max_body, "largest request body; larger get 413");
  flags.AddBytes("max-body-bytes-in-flight", &http.max_body_bytes_in_flight,
                 "request bodies held at once (each charged its Content-Length, or "
                 "--max-body-bytes when chunked, until answered); more get 503 with Retry-After");
  flags.Add("max-inflight", &http.max_inflight,
            "generation requests in progress at once; more get 503 with Retry-After", 1, kNoMax);
  flags.Add("max-connections", &http.max_connections, "open connections; more get 503", 1, kNoMax);
  flags.Add("max-output-tokens", &main_options.max_output_tokens,
            "server-side cap on each request's output tokens (0: none); reported as length", 0,
            int64_t{1} << 30);
  flags.Add("http-threads", &http.threads, "threads running the HTTP server", 1, kMaxThreadsFlag);
  flags.Add("read-timeout", &http.read_timeout, "time to receive a request, or keep-alive idle",
            absl::Milliseconds(1));
  flags.Add("write-timeout", &http.write_timeout, "time for one write to the client",
            absl::Milliseconds(1));
  flags.Add("socket-send-buffer-bytes", &http.socket_send_buffer_bytes,
            "kernel send buffer of each connection (0: autotuned); bounds what a client that "
            "stops reading holds",
            0, kNoMax);
  flags.Add("drain-timeout", &http.drain_timeout, "how long SIGTERM lets requests finish",
            absl::ZeroDuration());
  flags.Add("linger-timeout", &http.linger_timeout,
            "how long a connection refused before its body was read drops what the client "
            "still sends before it closes (so that the client reads the answer)",
            absl::ZeroDuration());
  flags.Add("retry-after", &http.retry_after_seconds, "Retry-After seconds on 429 and 503", 0,
            kNoMax);
  flags.Add("sse-ping-interval", &service_options.sse_ping_interval,
            "silence after which a stream gets an SSE comment (0: never)", absl::ZeroDuration());
  flags.Add("rpc-timeout", &upstream.rpc_timeout, "deadline of unary calls to the daemons",
            absl::Milliseconds(1));
  flags.Add("generate-timeout", &upstream.generate_timeout, "deadline of one generation",
            absl::Milliseconds(1));
  flags.Add("refresh-interval", &upstream.refresh_interval,
            "how often the daemons' model and slots are read", absl::Milliseconds(10));
  flags.Add("strict-model-names", &main_options.strict_model_names,
            "refuse model names no daemon serves (else a single served model takes any name)");
  flags.Add("log-level", &main_options.log_level, "info, warning or error");

  if (std::optional<int> exit_code = ParseDaemonCommandLine(
          flags, CommandLineArgs(argc, argv), "cairn-gateway", main_options.log_level)) {
    return *exit_code;
  }
  if (max_body == 0) {
    std::cerr << "cairn-gateway: --max-body-bytes must be positive\n";
    return 2;
  }
  http.max_body_bytes = max_body;
  if (http.max_body_bytes_in_flight < max_body) {
    std::cerr << "cairn-gateway: --max-body-bytes-in-flight must be at least --max-body-bytes\n";
    return 2;
  }
  limits.max_output_tokens = static_cast<uint32_t>(main_options.max_output_tokens);
  service_options.errors.retry_after_seconds = http.retry_after_seconds;
  upstream.addresses = main_options.infer;
  upstream.any_model_name = !main_options.strict_model_names;
  absl::StatusOr<HttpListenAddress> listen = ParseHttpListenAddress(main_options.listen);
  if (!listen.ok()) {
    std::cerr << "cairn-gateway: " << listen.status().message() << "\n";
    return 2;
  }
  http.host = listen->host;
  http.port = listen->port;
  if (!main_options.api_key_file.empty()) {
    absl::StatusOr<std::vector<std::string>> keys = ReadApiKeys(main_options.api_key_file);
    if (!keys.ok()) {
      std::cerr << "cairn-gateway: " << keys.status().message() << "\n";
      return 2;
    }
    http.api_keys = std::move(*keys);
  }

  absl::StatusOr<std::unique_ptr<InferPool>> pool = InferPool::Create(upstream);
  if (!pool.ok()) {
    std::cerr << "cairn-gateway: " << pool.status().message() << "\n";
    return 2;
  }
  std::unique_ptr<CacheMonitor> cache;
  if (!main_options.cache.empty()) {
    CacheMonitorOptions cache_options;
    cache_options.address = main_options.cache;
    cache_options.refresh_interval = upstream.refresh_interval;
    cache_options.rpc_timeout = upstream.refresh_timeout;
    absl::StatusOr<std::unique_ptr<CacheMonitor>> monitor = CacheMonitor::Create(cache_options);
    if (!monitor.ok()) {
      std::cerr << "cairn-gateway: " << monitor.status().message() << "\n";
      (*pool)->Shutdown();
      return 2;
    }
    cache = std::move(*monitor);
  }
  GatewayService service(pool->get(), service_options, cache.get());
  Router router;
  service.Register(&router);
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(http, std::move(router), service.error_renderer());
  if (!server.ok()) {
    CAIRN_LOG(ERROR) << "starting the HTTP server: " << server.status();
    (*pool)->Shutdown();
    return 1;
  }
  HttpServer* raw_server = server->get();
  service.SetHttpStatsSource([raw_server] { return raw_server->stats(); });
  // Readiness for systemd's Type=notify (a no-op outside systemd): the gateway answers from
  // now on; /health says whether a daemon is ready behind it.
  sd_notify(0, "READY=1");
  CAIRN_LOG(INFO) << "cairn-gateway listening on http://"
                  << main_options.listen.substr(0, main_options.listen.rfind(':')) << ":"
                  << (*server)->port() << " with " << upstream.addresses.size()
                  << " inference daemon(s)" << (http.api_keys.empty() ? "" : ", API keys on");

  int sig = WaitForTerminationSignal();
  // Shutdown order (style.md §5): stop taking requests and drain them, cancel what the
  // daemons still run, then free the server (its io_context) and the pool.
  CAIRN_LOG(INFO) << "signal " << sig << ": draining";
  sd_notify(0, "STOPPING=1");
  (*server)->Shutdown();
  (*pool)->Shutdown();
  if (cache != nullptr) cache->Shutdown();
  server->reset();
  pool->reset();
  CAIRN_LOG(INFO) << "cairn-gateway stopped";
  return 0;
}

}  // namespace
}  // namespace cairn::gateway

int main(int argc, char** argv) { return cairn::gateway::Run(argc, argv); }
