// The dashboard's routes over real HTTP against the fake daemon: the embedded page and its
// state, the browser-route rules (Basic authentication with keys, a loopback Host without),
// and the headers that keep the page to itself.
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/integration/services/gateway/gateway_harness.h"
#include "tests/integration/services/gateway/http_test_client.h"

namespace cairn::gateway::testing {
namespace {

TEST(DashboardHttpTest, PageAndFilesComeFromTheBinaryWithStrictHeaders) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult page = client.Get("/");
  HttpResult js = client.Get("/dashboard/dashboard.js");
  HttpResult css = client.Get("/dashboard/dashboard.css");

  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_TRUE(absl::StartsWith(page.headers["content-type"], "text/html"));
  EXPECT_TRUE(absl::StrContains(page.body, "id=\"budget\""));
  EXPECT_TRUE(absl::StrContains(page.headers["content-security-policy"], "default-src 'none'"));
  EXPECT_EQ(page.headers["x-frame-options"], "DENY");
  EXPECT_EQ(page.headers["x-content-type-options"], "nosniff");
  EXPECT_EQ(js.status, 200);
  EXPECT_TRUE(absl::StartsWith(js.headers["content-type"], "text/javascript"));
  EXPECT_TRUE(absl::StrContains(js.body, "/dashboard/state.json"));
  EXPECT_EQ(css.status, 200);
  EXPECT_TRUE(absl::StartsWith(css.headers["content-type"], "text/css"));
}

TEST(DashboardHttpTest, StateListsTheDaemonsSlotsAndNoCacheWithoutOne) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r = client.Get("/dashboard/state.json");

  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json state = r.json();
  ASSERT_EQ(state["daemons"].size(), 1u) << r.body;
  EXPECT_TRUE(state["daemons"][0]["ready"].get<bool>());
  EXPECT_TRUE(state["daemons"][0]["slots"].is_array());
  EXPECT_TRUE(state["cache"].is_null());
  EXPECT_EQ(r.headers["cache-control"], "no-store");
}

TEST(DashboardHttpTest, UnreachableCacheShowsAsDown) {
  HarnessOptions options;
  options.cache_address = "unix:/nonexistent/cairn-cache.sock";
  GatewayHarness h(options);
  HttpTestClient client(h.port());

  // The first refresh runs at start; its call fails at once on a missing socket.
  nlohmann::json state;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    state = client.Get("/dashboard/state.json").json();
  } while (state["cache"].is_object() && state["cache"]["error"] == "" && absl::Now() < deadline);
  HttpResult metrics = client.Get("/metrics");

  ASSERT_TRUE(state["cache"].is_object()) << state.dump();
  EXPECT_FALSE(state["cache"]["up"].get<bool>());
  EXPECT_NE(state["cache"]["error"], "");
  EXPECT_TRUE(absl::StrContains(metrics.body, "cairn_cache_up 0\n")) << metrics.body;
}

TEST(DashboardHttpTest, WithKeysTheBrowserIsAskedForTheKeyAsAPassword) {
  HarnessOptions options;
  options.http.api_keys = {"secret-key-1"};
  GatewayHarness h(options);
  HttpTestClient client(h.port());

  HttpResult anonymous = client.Get("/");
  HttpResult wrong = client.Get("/", {{"Authorization", "Basic dXNlcjp3cm9uZw=="}});  // user:wrong
  // "user:secret-key-1" in base64.
  HttpResult basic = client.Get("/", {{"Authorization", "Basic dXNlcjpzZWNyZXQta2V5LTE="}});
  HttpResult state =
      client.Get("/dashboard/state.json", {{"Authorization", "Basic dXNlcjpzZWNyZXQta2V5LTE="}});
  HttpResult bearer =
      client.Get("/dashboard/state.json", {{"Authorization", "Bearer secret-key-1"}});
  // Basic authentication is for the browser routes only: the API still wants the Bearer key.
  HttpResult api = client.Get("/v1/models", {{"Authorization", "Basic dXNlcjpzZWNyZXQta2V5LTE="}});

  EXPECT_EQ(anonymous.status, 401);
  EXPECT_TRUE(absl::StartsWith(anonymous.headers["www-authenticate"], "Basic realm="));
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(basic.status, 200) << basic.body;
  EXPECT_EQ(state.status, 200);
  EXPECT_EQ(bearer.status, 200);
  EXPECT_EQ(api.status, 401);
  EXPECT_EQ(api.headers["www-authenticate"], "Bearer");
}

TEST(DashboardHttpTest, WithoutKeysOnlyALoopbackHostIsAnswered) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  // A page on another site that rebinds its name to 127.0.0.1 still sends its own Host.
  HttpResult rebound =
      client.Raw("GET /dashboard/state.json HTTP/1.1\r\nHost: attacker.example:8080\r\n\r\n");
  HttpTestClient again(h.port());
  HttpResult local =
      again.Raw("GET /dashboard/state.json HTTP/1.1\r\nHost: localhost:8080\r\n\r\n");

  EXPECT_EQ(rebound.status, 403) << rebound.body;
  EXPECT_EQ(local.status, 200) << local.body;
}

}  // namespace
}  // namespace cairn::gateway::testing
