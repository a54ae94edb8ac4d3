#ifndef CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_GATEWAY_HARNESS_H_
#define CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_GATEWAY_HARNESS_H_

// The gateway in-process against the scripted fake daemon: InferPool -> GatewayService ->
// HttpServer on 127.0.0.1:0, shut down in main.cc's order. A test against the real
// cairn-infer passes its address instead of starting the fake.

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "services/gateway/gateway_service.h"
#include "services/gateway/http/http_server.h"
#include "services/gateway/upstream/infer_pool.h"
#include "tests/integration/services/gateway/fake_infer_service.h"

namespace cairn::gateway::testing {

struct HarnessOptions {
  HttpServerOptions http = [] {
    HttpServerOptions o;
    o.port = 0;
    o.threads = 2;
    o.read_timeout = absl::Seconds(10);
    o.drain_timeout = absl::Seconds(2);
    return o;
  }();
  RequestLimits limits;
  absl::Duration sse_ping_interval = absl::Seconds(15);
  std::string infer_address;  // Empty: start the fake.
  std::string cache_address;  // Empty: no cache daemon (--cache).
};

class GatewayHarness {
 public:
  explicit GatewayHarness(HarnessOptions options = {}) {
    if (options.infer_address.empty()) {
      fake_ = std::make_unique<FakeInferServer>();
      options.infer_address = fake_->address();
    }
    InferPoolOptions pool_options;
    pool_options.addresses = {options.infer_address};
    pool_options.refresh_interval = absl::Milliseconds(200);
    auto pool = InferPool::Create(pool_options);
    EXPECT_TRUE(pool.ok()) << pool.status();
    pool_ = std::move(*pool);
    EXPECT_TRUE(pool_->WaitForReady(absl::Seconds(10))) << "the inference daemon never answered";
    if (!options.cache_address.empty()) {
      CacheMonitorOptions cache_options;
      cache_options.address = options.cache_address;
      cache_options.refresh_interval = absl::Milliseconds(200);
      auto cache = CacheMonitor::Create(cache_options);
      EXPECT_TRUE(cache.ok()) << cache.status();
      cache_ = std::move(*cache);
    }
    GatewayServiceOptions service_options;
    service_options.limits = options.limits;
    service_options.sse_ping_interval = options.sse_ping_interval;
    service_ = std::make_unique<GatewayService>(pool_.get(), service_options, cache_.get());
    Router router;
    service_->Register(&router);
    routes_ = router.routes();
    auto server = HttpServer::Start(options.http, std::move(router), service_->error_renderer());
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    HttpServer* raw = server_.get();
    service_->SetHttpStatsSource([raw] { return raw->stats(); });
  }

  ~GatewayHarness() {
    server_->Shutdown();
    pool_->Shutdown();
    if (cache_ != nullptr) cache_->Shutdown();
    server_.reset();
    pool_.reset();
  }

  int port() const { return server_->port(); }
  FakeInferService& fake() { return fake_->service(); }
  HttpServer& server() { return *server_; }
  GatewayService& service() { return *service_; }
  const std::vector<Router::Route>& routes() const { return routes_; }

 private:
  std::unique_ptr<FakeInferServer> fake_;
  std::unique_ptr<InferPool> pool_;
  std::unique_ptr<CacheMonitor> cache_;
  std::unique_ptr<GatewayService> service_;
  std::unique_ptr<HttpServer> server_;
  std::vector<Router::Route> routes_;
};

}  // namespace cairn::gateway::testing

#endif  // CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_GATEWAY_HARNESS_H_
