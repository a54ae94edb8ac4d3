// The write timeout bounds writes, not silence: a stream whose daemon pauses longer than the
// write timeout between tokens (a long prefill, a slow step, pings off) still completes.
// The connection's one timer also bounds its read-ahead watch, which used to inherit the last
// write's deadline and then cancel a healthy stream as a gone client.
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/integration/services/gateway/gateway_harness.h"
#include "tests/integration/services/gateway/http_test_client.h"

namespace cairn::gateway::testing {
namespace {

TEST(GatewayStreamTimeoutTest, QuietStreamOutlivesTheWriteTimeout) {
  HarnessOptions options;
  options.http.write_timeout = absl::Milliseconds(300);
  options.sse_ping_interval = absl::ZeroDuration();
  GatewayHarness h(options);
  h.fake().SetScript([](const infer_v1::GenerateRequest&) {
    Script s;
    s.Started(4).Text("before").Pause(absl::Seconds(1)).Text(" after");
    s.Finished(Script::MakeFinished(infer_v1::Finished::REASON_STOP, 2));
    return s;
  });
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/completions", R"({"prompt":"x","stream":true})");

  EXPECT_EQ(r.status, 200) << r.error;
  EXPECT_TRUE(absl::StrContains(r.body, "before")) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, " after")) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, "[DONE]")) << r.body;
  EXPECT_EQ(h.fake().cancelled_calls(), 0);
}

}  // namespace
}  // namespace cairn::gateway::testing
