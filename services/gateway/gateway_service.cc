#include "services/gateway/gateway_service.h"

#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log/log.h"
#include "common/status/status_macros.h"
#include "services/gateway/dashboard/dashboard_state.h"
#include "services/gateway/dashboard/embedded_assets.h"
#include "services/gateway/openai/anthropic_mapping.h"
#include "services/gateway/openai/chat_mapping.h"
#include "services/gateway/openai/responses_mapping.h"

namespace cairn::gateway {

namespace {

HttpResponse JsonResponse(const Json& body, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = DumpJson(body);
  return r;
}

// One generation request from HTTP to the daemon and back. Shared by the upstream call (as
// its observer, until OnDone) and the exchange's callbacks. Its state is confined to the
// exchange's strand: the observer methods, called on gRPC threads, only post there.
class GenerationRun : public GenerateObserver, public std::enable_shared_from_this<GenerationRun> {
 public:
  GenerationRun(std::shared_ptr<HttpExchange> exchange, std::string route, GenerationSpec spec,
                std::unique_ptr<ResponseFormatter> formatter, GatewayMetrics* metrics,
                std::function<void(int)> count)
      : exchange_(std::move(exchange)),
        route_(std::move(route)),
        stream_(spec.stream),
        content_type_(spec.content_type),
        formatter_(std::move(formatter)),
        metrics_(metrics),
        count_(std::move(count)) {}

  void Start(InferPool* pool, const std::string& model, infer_v1::GenerateRequest request,
             absl::Duration ping_interval) {
    call_ = pool->Generate(model, std::move(request), shared_from_this());
    exchange_->OnClientGone([self = shared_from_this()] { self->ClientGone(); });
    if (stream_ && ping_interval > absl::ZeroDuration()) {
      exchange_->StartHeartbeat(ping_interval, [self = shared_from_this()] { self->Ping(); });
    }
  }

  // gRPC threads.
  void OnMessage(infer_v1::GenerateResponse message) override {
    exchange_->Post([self = shared_from_this(), m = std::move(message)] { self->Handle(m); });
  }
  void OnDone(absl::Status status) override {
    exchange_->Post([self = shared_from_this(), s = std::move(status)] { self->Done(s); });
  }

 private:
  // Strand.
  void StartStreamOnce() {
    if (started_stream_) return;
    exchange_->StartStream(content_type_);
    count_(200);
    started_stream_ = true;
  }

  // Sends the formatter's heartbeat (an SSE comment, or an event) when nothing was sent since
  // the last tick.
  void Ping() {
    if (client_gone_ || finished_) return;
    if (active_) {
      active_ = false;
      return;
    }
    StartStreamOnce();
    exchange_->Write(formatter_->StreamHeartbeat(), nullptr);
  }

  void Handle(const infer_v1::GenerateResponse& m) {
    if (client_gone_) {
      call_->ReadNext();  // Drains to the end; the call is cancelled.
      return;
    }
    switch (m.body_case()) {
      case infer_v1::GenerateResponse::kStarted:
        if (!stream_) {
          call_->ReadNext();
          return;
        }
        StartStreamOnce();
        Send(formatter_->StreamStarted(m.started()));
        return;
      case infer_v1::GenerateResponse::kDelta: {
        absl::Time now = absl::Now();
        if (last_delta_ != absl::InfinitePast()) {
          metrics_->ObserveInterToken(absl::ToDoubleMilliseconds(now - last_delta_));
        }
        last_delta_ = now;
        if (!stream_) {
          formatter_->Collect(m.delta());
          call_->ReadNext();
          return;
        }
        Send(formatter_->StreamDelta(m.delta()));
        return;
      }
      case infer_v1::GenerateResponse::kFinished:
        finished_ = true;
        metrics_->ObserveFinished(m.finished());
        if (stream_) {
          StartStreamOnce();  // A daemon that skipped Started.
          exchange_->Write(formatter_->StreamFinished(m.finished()), nullptr);
          exchange_->EndStream();
        } else {
          HttpResponse r = JsonResponse(formatter_->Body(m.finished()));
          count_(200);
          exchange_->Respond(std::move(r));
        }
        call_->ReadNext();  // Lets the stream report its end.
        return;
      default:
        call_->ReadNext();
        return;
    }
  }

  // Writes `data` (if any), then asks for the next message.
  void Send(std::string data) {
    if (data.empty()) {
      // Nothing to show (a tool call's tokens are held until it closes): the pings go on, or a
      // long call would leave the stream silent past clients' and proxies' idle timeouts.
      call_->ReadNext();
      return;
    }
    active_ = true;
    exchange_->Write(std::move(data), [self = shared_from_this()](bool ok) {
      if (ok) {
        self->call_->ReadNext();
      } else {
        self->ClientGone();
      }
    });
  }

  void Done(const absl::Status& status) {
    if (client_gone_ || finished_) return;  // Answered already, or nobody to answer.
    absl::Status s = status;
    if (s.ok()) s = absl::InternalError("the inference stream ended without Finished");
    if (!started_stream_) {
      exchange_->RespondError(s);  // Counted by the error renderer.
      return;
    }
    exchange_->Write(formatter_->StreamError(s), nullptr);
    exchange_->EndStream();
  }

  void ClientGone() {
    if (client_gone_ || finished_) return;
    client_gone_ = true;
    metrics_->CountCancelled();
    // nginx's "client closed request", for a client gone before any answer; a stream already
    // started was counted as the 200 it answered (once per request).
    if (!started_stream_) count_(499);
    call_->Cancel();
  }

  const std::shared_ptr<HttpExchange> exchange_;
  const std::string route_;
  const bool stream_;
  const std::string content_type_;
  std::unique_ptr<ResponseFormatter> formatter_;
  GatewayMetrics* const metrics_;
  std::function<void(int)> count_;
  std::shared_ptr<GenerateCall> call_;
  bool started_stream_ = false;
  bool finished_ = false;
  bool client_gone_ = false;
  bool active_ = false;  // Bytes were sent since the last ping tick.
  absl::Time last_delta_ = absl::InfinitePast();
};

// The dashboard's pages load only their own files and may not be framed; nothing is cached,
// since the state changes every second and the page may sit behind a key.
void AddDashboardHeaders(HttpResponse* r) {
  r->headers.emplace_back("Content-Security-Policy",
                          "default-src 'none'; script-src 'self'; style-src 'self'; "
                          "connect-src 'self'; img-src 'self'; base-uri 'none'; "
                          "form-action 'none'; frame-ancestors 'none'");
  r->headers.emplace_back("X-Content-Type-Options", "nosniff");
  r->headers.emplace_back("X-Frame-Options", "DENY");
  r->headers.emplace_back("Referrer-Policy", "no-referrer");
  r->headers.emplace_back("Cache-Control", "no-store");
}

// The model object of GET /v1/models and GET /v1/models/{id}.
Json ModelObject(const ModelEntry& m) {
  return {{"id", m.name},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "cairn"},
          {"max_model_len", m.context_length}};
}

// Returns `s` with its %XX escapes decoded, or nullopt for a malformed escape.
std::optional<std::string> PercentDecode(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size() || !absl::ascii_isxdigit(s[i + 1]) || !absl::ascii_isxdigit(s[i + 2])) {
      return std::nullopt;
    }
    out += absl::HexStringToBytes(s.substr(i + 1, 2));
    i += 2;
  }
  return out;
}

// Reads an optional "model" field.
absl::StatusOr<std::string> ModelField(const Json& body) {
  ASSIGN_OR_RETURN(std::optional<std::string> model, JsonFields(body, "").String("model", 256));
  return model.value_or("");
}

}  // namespace

GatewayService::GatewayService(InferPool* pool, GatewayServiceOptions options, CacheMonitor* cache)
    : pool_(pool), options_(std::move(options)), cache_(cache) {}

ErrorRenderer GatewayService::error_renderer() {
  // Every error answer passes here, from the handlers and from the HTTP layer (401, 413,
  // 503...), so it is counted here, under its route or "other" (the label set stays bounded
  // whatever paths clients send).
  ErrorRendering rendering = options_.errors;
  return [this, rendering](const absl::Status& s, absl::string_view path) {
    HttpResponse r = RenderError(s, path, rendering);
    metrics_.CountRequest(RouteLabel(path), r.status);
    return r;
  };
}

std::string GatewayService::RouteLabel(absl::string_view path) const {
  if (routes_.contains(path)) return std::string(path);
  if (absl::StartsWith(path, kModelPrefix)) return kModelRoute;
  return "other";
}

void GatewayService::SetHttpStatsSource(std::function<HttpServerStats()> source) {
  MutexLock lock(&mu_);
  http_stats_ = std::move(source);
}

void GatewayService::Respond(const std::shared_ptr<HttpExchange>& exchange,
                             const std::string& route, HttpResponse response) {
  metrics_.CountRequest(route, response.status);
  exchange->Respond(std::move(response));
}

void GatewayService::RespondError(const std::shared_ptr<HttpExchange>& exchange,
                                  const absl::Status& status) {
  exchange->RespondError(status);  // Counted by the error renderer.
}

absl::StatusOr<Json> GatewayService::Body(const HttpExchange& exchange) const {
  return ParseJsonObject(exchange.request().body(), options_.limits.max_json_depth);
}

absl::StatusOr<GatewayService::ModelRequest> GatewayService::BodyAndModel(
    const HttpExchange& exchange) const {
  ModelRequest r;
  ASSIGN_OR_RETURN(r.body, Body(exchange));
  ASSIGN_OR_RETURN(std::string requested, ModelField(r.body));
  ASSIGN_OR_RETURN(r.model, pool_->ResolveModel(requested));
  return r;
}

void GatewayService::Register(Router* router) {
  router->Add(HttpVerb::get, "/health", {.public_route = true},
              [this](std::shared_ptr<HttpExchange> ex) { Health(ex); });
  router->Add(HttpVerb::head, "/", {.public_route = true}, [](std::shared_ptr<HttpExchange> ex) {
    ex->Respond(HttpResponse{200, "", "", {}});
  });
  router->Add(HttpVerb::get, "/v1/models", {},
              [this](std::shared_ptr<HttpExchange> ex) { Models(ex); });
  router->AddPrefix(HttpVerb::get, kModelPrefix, {},
                    [this](std::shared_ptr<HttpExchange> ex) { Model(ex); });
  router->Add(HttpVerb::get, "/metrics", {},
              [this](std::shared_ptr<HttpExchange> ex) { Metrics(ex); });
  for (const auto& [path, asset] : {std::pair<const char*, const char*>{"/", "index.html"},
                                    {"/dashboard/dashboard.js", "dashboard.js"},
                                    {"/dashboard/dashboard.css", "dashboard.css"}}) {
    router->Add(HttpVerb::get, path, {.browser = true},
                [this, route = std::string(path), name = std::string(asset)](
                    std::shared_ptr<HttpExchange> ex) { DashboardAsset(ex, route, name); });
  }
  router->Add(HttpVerb::get, "/dashboard/state.json", {.browser = true},
              [this](std::shared_ptr<HttpExchange> ex) { DashboardStateJson(ex); });
  router->Add(HttpVerb::post, "/tokenize", {},
              [this](std::shared_ptr<HttpExchange> ex) { Tokenize(ex); });
  router->Add(HttpVerb::post, "/detokenize", {},
              [this](std::shared_ptr<HttpExchange> ex) { Detokenize(ex); });
  router->Add(HttpVerb::post, "/v1/messages/count_tokens", {},
              [this](std::shared_ptr<HttpExchange> ex) { CountTokens(ex); });
  AddGenerationRoute(router, "/v1/chat/completions", ParseChatCompletionRequest);
  AddGenerationRoute(router, "/v1/completions", ParseCompletionRequest);
  AddGenerationRoute(router, "/v1/messages", ParseAnthropicMessagesRequest);
  AddGenerationRoute(router, "/v1/responses", ParseResponsesRequest);
  for (const Router::Route& route : router->routes()) {
    if (!route.prefix) routes_.insert(route.path);
  }
}

void GatewayService::AddGenerationRoute(Router* router, std::string path, ParseFn parse) {
  router->Add(HttpVerb::post, path, {.admission = true},
              [this, path, parse = std::move(parse)](std::shared_ptr<HttpExchange> ex) {
                absl::StatusOr<Json> body = Body(*ex);
                if (!body.ok()) {
                  RespondError(ex, body.status());
                  return;
                }
                Generate(ex, path, parse(*body, options_.limits));
              });
}

void GatewayService::Generate(const std::shared_ptr<HttpExchange>& exchange,
                              const std::string& route, absl::StatusOr<GenerationSpec> spec) {
  if (!spec.ok()) {
    RespondError(exchange, spec.status());
    return;
  }
  absl::StatusOr<ModelEntry> model = pool_->ResolveModel(spec->model);
  if (!model.ok()) {
    RespondError(exchange, model.status());
    return;
  }
  if (absl::Status s = CheckAgainstVocabulary(*spec, model->vocab_size); !s.ok()) {
    RespondError(exchange, s);
    return;
  }
  std::unique_ptr<ResponseFormatter> formatter = spec->make_formatter(model->name);
  infer_v1::GenerateRequest request = std::move(spec->request);
  auto run = std::make_shared<GenerationRun>(
      exchange, route, std::move(*spec), std::move(formatter), &metrics_,
      [this, route](int status) { metrics_.CountRequest(route, status); });
  run->Start(pool_, model->name, std::move(request), options_.sse_ping_interval);
}

void GatewayService::Health(const std::shared_ptr<HttpExchange>& exchange) {
  int ready = 0;
  std::vector<DaemonStatus> daemons = pool_->Daemons();
  for (const DaemonStatus& d : daemons) ready += d.ready ? 1 : 0;
  Json body = {{"status", ready > 0 ? "ok" : "unavailable"},
               {"daemons_ready", ready},
               {"daemons", daemons.size()}};
  HttpResponse r = JsonResponse(body, ready > 0 ? 200 : 503);
  if (ready == 0)
    r.headers.emplace_back("Retry-After", absl::StrCat(options_.errors.retry_after_seconds));
  Respond(exchange, "/health", std::move(r));
}

void GatewayService::Models(const std::shared_ptr<HttpExchange>& exchange) {
  Json data = Json::array();
  for (const ModelEntry& m : pool_->Models()) data.push_back(ModelObject(m));
  Respond(exchange, "/v1/models", JsonResponse({{"object", "list"}, {"data", data}}));
}

void GatewayService::Model(const std::shared_ptr<HttpExchange>& exchange) {
  absl::string_view rest = exchange->path().substr(std::strlen(kModelPrefix));
  // Ids may hold '/' (Hugging Face names); a client may send it escaped.
  const std::optional<std::string> id = PercentDecode(rest);
  for (const ModelEntry& m : pool_->Models()) {
    if (id.has_value() && m.name == *id) {
      Respond(exchange, kModelRoute, JsonResponse(ModelObject(m)));
      return;
    }
  }
  // Only the names the daemons serve, also where any name reaches the only model.
  RespondError(exchange, absl::NotFoundError(absl::StrCat(
                             "model \"", id.value_or(std::string(rest)), "\" is not served")));
}

HttpServerStats GatewayService::HttpStats() const {
  MutexLock lock(&mu_);
  return http_stats_ ? http_stats_() : HttpServerStats{};
}

void GatewayService::Metrics(const std::shared_ptr<HttpExchange>& exchange) {
  std::optional<CacheSnapshot> cache;
  if (cache_ != nullptr) cache = cache_->Snapshot();
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.Render(pool_->Daemons(), HttpStats(), cache ? &*cache : nullptr);
  Respond(exchange, "/metrics", std::move(r));
}

void GatewayService::DashboardAsset(const std::shared_ptr<HttpExchange>& exchange,
                                    const std::string& route, const std::string& name) {
  const EmbeddedAsset* asset = FindEmbeddedAsset(name);
  if (asset == nullptr) {
    RespondError(exchange, absl::NotFoundError(absl::StrCat("no dashboard file ", name)));
    return;
  }
  HttpResponse r;
  r.content_type = std::string(AssetContentType(name));
  r.body.assign(reinterpret_cast<const char*>(asset->data), asset->size);
  AddDashboardHeaders(&r);
  Respond(exchange, route, std::move(r));
}

void GatewayService::DashboardStateJson(const std::shared_ptr<HttpExchange>& exchange) {
  std::optional<CacheSnapshot> cache;
  if (cache_ != nullptr) cache = cache_->Snapshot();
  DashboardInputs in;
  in.daemons = pool_->Daemons();
  in.cache = cache ? &*cache : nullptr;
  in.ttft_by_tier = metrics_.TtftByTier();
  in.http = HttpStats();
  HttpResponse r = JsonResponse(DashboardState(in));
  AddDashboardHeaders(&r);
  Respond(exchange, "/dashboard/state.json", std::move(r));
}

void GatewayService::Tokenize(const std::shared_ptr<HttpExchange>& exchange) {
  const std::string route = "/tokenize";
  absl::StatusOr<ModelRequest> parsed = BodyAndModel(*exchange);
  if (!parsed.ok()) {
    RespondError(exchange, parsed.status());
    return;
  }
  const ModelEntry* model = &parsed->model;
  JsonFields f(parsed->body, "");
  auto reply = [this, exchange, route,
                context = model->context_length](absl::StatusOr<std::vector<uint32_t>> ids) {
    exchange->Post([this, exchange, route, context, ids = std::move(ids)] {
      if (!ids.ok()) {
        RespondError(exchange, ids.status());
        return;
      }
      Respond(exchange, route,
              JsonResponse({{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", context}}));
    });
  };
  if (const Json* messages = f.Get("messages"); messages != nullptr) {
    infer_v1::ApplyTemplateRequest req;
    absl::Status s = ParseChatMessages(*messages, "messages", options_.limits, req.mutable_chat());
    if (!s.ok()) {
      RespondError(exchange, s);
      return;
    }
    absl::StatusOr<std::optional<bool>> gen = f.Bool("add_generation_prompt");
    if (!gen.ok()) {
      RespondError(exchange, gen.status());
      return;
    }
    req.mutable_chat()->mutable_options()->set_add_generation_prompt(gen->value_or(true));
    pool_->ApplyTemplate(model->name, std::move(req),
                         [reply](absl::StatusOr<infer_v1::ApplyTemplateResponse> r) {
                           if (!r.ok()) return reply(r.status());
                           reply(std::vector<uint32_t>(r->ids().begin(), r->ids().end()));
                         });
    return;
  }
  absl::StatusOr<std::optional<std::string>> text =
      f.String("prompt", options_.limits.max_string_bytes);
  if (text.ok() && !text->has_value()) text = f.String("text", options_.limits.max_string_bytes);
  if (!text.ok() || !text->has_value()) {
    RespondError(exchange, text.ok()
                               ? absl::InvalidArgumentError("prompt (or messages) is required")
                               : text.status());
    return;
  }
  absl::StatusOr<std::optional<bool>> special = f.Bool("add_special_tokens");
  if (!special.ok()) {
    RespondError(exchange, special.status());
    return;
  }
  infer_v1::TokenizeRequest req;
  req.set_text(**text);
  req.set_parse_special(special->value_or(true));
  pool_->Tokenize(model->name, std::move(req),
                  [reply](absl::StatusOr<infer_v1::TokenizeResponse> r) {
                    if (!r.ok()) return reply(r.status());
                    reply(std::vector<uint32_t>(r->ids().begin(), r->ids().end()));
                  });
}

void GatewayService::Detokenize(const std::shared_ptr<HttpExchange>& exchange) {
  const std::string route = "/detokenize";
  absl::StatusOr<ModelRequest> parsed = BodyAndModel(*exchange);
  if (!parsed.ok()) {
    RespondError(exchange, parsed.status());
    return;
  }
  const ModelEntry* model = &parsed->model;
  JsonFields f(parsed->body, "");
  absl::StatusOr<const Json*> tokens = f.Array("tokens", options_.limits.max_prompt_token_ids);
  if (tokens.ok() && *tokens == nullptr) tokens = InvalidField("tokens", "is required");
  if (!tokens.ok()) {
    RespondError(exchange, tokens.status());
    return;
  }
  infer_v1::DetokenizeRequest req;
  const int64_t max_id =
      model->vocab_size > 0 ? int64_t{model->vocab_size} - 1 : std::numeric_limits<uint32_t>::max();
  for (size_t i = 0; i < (*tokens)->size(); ++i) {
    absl::StatusOr<int64_t> id =
        JsonInteger((**tokens)[i], absl::StrCat("tokens[", i, "]"), 0, max_id);
    if (!id.ok()) {
      RespondError(exchange, id.status());
      return;
    }
    req.add_ids(static_cast<uint32_t>(*id));
  }
  pool_->Detokenize(model->name, std::move(req),
                    [this, exchange, route](absl::StatusOr<infer_v1::DetokenizeResponse> r) {
                      exchange->Post([this, exchange, route, r = std::move(r)] {
                        if (!r.ok()) {
                          RespondError(exchange, r.status());
                          return;
                        }
                        Respond(exchange, route, JsonResponse({{"prompt", r->text()}}));
                      });
                    });
}

void GatewayService::CountTokens(const std::shared_ptr<HttpExchange>& exchange) {
  const std::string route = "/v1/messages/count_tokens";
  absl::StatusOr<Json> body = Body(*exchange);
  absl::StatusOr<GenerationSpec> spec =
      body.ok() ? ParseAnthropicCountTokensRequest(*body, options_.limits) : body.status();
  absl::StatusOr<ModelEntry> model = spec.ok() ? pool_->ResolveModel(spec->model) : spec.status();
  if (!model.ok()) {
    RespondError(exchange, model.status());
    return;
  }
  infer_v1::ApplyTemplateRequest req;
  *req.mutable_chat() = spec->request.chat();
  pool_->ApplyTemplate(
      model->name, std::move(req),
      [this, exchange, route](absl::StatusOr<infer_v1::ApplyTemplateResponse> r) {
        exchange->Post([this, exchange, route, r = std::move(r)] {
          if (!r.ok()) {
            RespondError(exchange, r.status());
            return;
          }
          Respond(exchange, route, JsonResponse({{"input_tokens", r->ids_size()}}));
        });
      });
}

}  // namespace cairn::gateway
