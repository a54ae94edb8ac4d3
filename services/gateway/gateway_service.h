#ifndef CAIRN_SERVICES_GATEWAY_GATEWAY_SERVICE_H_
#define CAIRN_SERVICES_GATEWAY_GATEWAY_SERVICE_H_

// The gateway's routes: HTTP exchanges in, InferService calls out. Parsing and shaping live
// in openai/, transport in http/ and upstream/; this file joins them and keeps the metrics.

#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "services/gateway/dashboard/cache_monitor.h"
#include "services/gateway/http/http_server.h"
#include "services/gateway/metrics.h"
#include "services/gateway/openai/errors.h"
#include "services/gateway/openai/format_util.h"
#include "services/gateway/upstream/infer_pool.h"

namespace cairn::gateway {

struct GatewayServiceOptions {
  RequestLimits limits;
  ErrorRendering errors;
  // A streamed request that has sent nothing for this long (a long prefill, a slow step)
  // gets its headers and an SSE comment, so that proxies keep the connection and a gone
  // client shows as a failed write (GW6). Zero: never.
  absl::Duration sse_ping_interval = absl::Seconds(15);
};

// Thread-safe. `pool` and `cache` (null: no cache daemon configured) must outlive this
// object; handlers run on the HTTP server's threads.
class GatewayService {
 public:
  GatewayService(InferPool* pool, GatewayServiceOptions options, CacheMonitor* cache = nullptr);
  GatewayService(const GatewayService&) = delete;
  GatewayService& operator=(const GatewayService&) = delete;

  // Adds every route to `router`: GET /health and HEAD / public, the rest behind the keys;
  // the dashboard (GET /, /dashboard/*) as browser routes (RouteOptions::browser). HEAD on a
  // GET route answers as GET without the body (Router::Find).
  void Register(Router* router);
  // Renders errors for the HTTP server (OpenAI or Anthropic shape by path) and counts them.
  // Call after Register; the renderer must not outlive this object.
  ErrorRenderer error_renderer();
  // Where /metrics reads the HTTP server's counters; set once the server has started.
  void SetHttpStatsSource(std::function<HttpServerStats()> source) ABSL_LOCKS_EXCLUDED(mu_);

  GatewayMetrics& metrics() { return metrics_; }

 private:
  using ParseFn = std::function<absl::StatusOr<GenerationSpec>(const Json&, const RequestLimits&)>;
  // Registers a generation route whose body `parse` turns into a GenerationSpec.
  void AddGenerationRoute(Router* router, std::string path, ParseFn parse);
  void Generate(const std::shared_ptr<HttpExchange>& exchange, const std::string& route,
                absl::StatusOr<GenerationSpec> spec);

  void Health(const std::shared_ptr<HttpExchange>& exchange);
  void Models(const std::shared_ptr<HttpExchange>& exchange);
  // GET /v1/models/{id}: the model object of a served model's id, else 404.
  void Model(const std::shared_ptr<HttpExchange>& exchange);
  void Metrics(const std::shared_ptr<HttpExchange>& exchange);
  void DashboardAsset(const std::shared_ptr<HttpExchange>& exchange, const std::string& route,
                      const std::string& asset);
  void DashboardStateJson(const std::shared_ptr<HttpExchange>& exchange);
  void Tokenize(const std::shared_ptr<HttpExchange>& exchange);
  void Detokenize(const std::shared_ptr<HttpExchange>& exchange);
  void CountTokens(const std::shared_ptr<HttpExchange>& exchange);

  // The `route` label of a request for `path` in the metrics: a registered path, the model
  // route's pattern, or "other" (the label set stays bounded whatever paths clients send).
  std::string RouteLabel(absl::string_view path) const;

  // GET /v1/models/{id} is a prefix route; its label in the metrics is kModelRoute.
  static constexpr char kModelPrefix[] = "/v1/models/";
  static constexpr char kModelRoute[] = "/v1/models/{id}";

  HttpServerStats HttpStats() const ABSL_LOCKS_EXCLUDED(mu_);
  // Answers and counts the request in the metrics.
  void Respond(const std::shared_ptr<HttpExchange>& exchange, const std::string& route,
               HttpResponse response);
  void RespondError(const std::shared_ptr<HttpExchange>& exchange, const absl::Status& status);
  // Parses the request body as a JSON object (InvalidArgument when it is not one).
  absl::StatusOr<Json> Body(const HttpExchange& exchange) const;
  // Parses the body and resolves its optional "model" field.
  struct ModelRequest {
    Json body;
    ModelEntry model;
  };
  absl::StatusOr<ModelRequest> BodyAndModel(const HttpExchange& exchange) const;

  InferPool* const pool_;
  const GatewayServiceOptions options_;
  CacheMonitor* const cache_;
  GatewayMetrics metrics_;
  absl::flat_hash_set<std::string> routes_;  // Registered paths; written by Register only.
  mutable Mutex mu_;
  std::function<HttpServerStats()> http_stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_GATEWAY_SERVICE_H_
