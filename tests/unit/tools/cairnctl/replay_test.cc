#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tools/cairnctl/completion_stream.h"
#include "tools/cairnctl/http_client.h"

namespace cairn::cairnctl {
namespace {

using ::cairn::testing::StatusIs;

TEST(CompletionStreamTest, FirstTokenAndFinalCairnObjectAcrossSplitReads) {
  const std::string body =
      ": ping\n\n"
      "data: {\"choices\": [{\"text\": \"\", \"finish_reason\": null}]}\n\n"
      "data: {\"choices\": [{\"text\": \"hi\", \"finish_reason\": null}]}\n\n"
      "data: {\"choices\": [{\"text\": \"\", \"finish_reason\": \"length\"}], \"cairn\": "
      "{\"tier\": \"ram\", \"depth\": 4096, \"prefilled_tokens\": 52, \"restore_ms\": 3.5, "
      "\"capture_ms\": 1.0, \"ttft_ms\": 80.0, \"captures\": 2}, \"usage\": "
      "{\"completion_tokens\": 8, \"prompt_tokens_details\": {\"cached_tokens\": 4096}}}\n\n"
      "data: [DONE]\n\n";
  CompletionStream stream;
  int first_at = -1;

  for (size_t i = 0; i < body.size(); i += 7) {
    if (stream.Feed(body.substr(i, 7)) && first_at < 0) first_at = static_cast<int>(i);
  }
  cache::sim::ReplayRecord r;
  stream.Fill(&r);

  // The first event with text ends inside the piece that holds its blank line.
  const int hi_end = static_cast<int>(body.find("null}]}\n\n", body.find("\"hi\"")) + 9);
  EXPECT_EQ(first_at, (hi_end - 1) / 7 * 7);
  EXPECT_EQ(r.tier, "ram");
  EXPECT_EQ(r.depth, 4096);
  EXPECT_EQ(r.prefilled, 52);
  EXPECT_EQ(r.reused, 4096);
  EXPECT_EQ(r.captures, 2);
  EXPECT_EQ(r.completion_tokens, 8);
  EXPECT_DOUBLE_EQ(r.restore_ms, 3.5);
  EXPECT_DOUBLE_EQ(r.server_ttft_ms, 80);
  EXPECT_TRUE(r.error.empty()) << r.error;
}

TEST(CompletionStreamTest, ErrorEventsAndTruncatedStreamsAreErrors) {
  CompletionStream failed;
  failed.Feed(
      "data: {\"error\": {\"message\": \"queue full\", \"type\": \"x\"}}\n\ndata: [DONE]\n\n");
  CompletionStream cut;
  cut.Feed("data: {\"choices\": [{\"text\": \"a\", \"finish_reason\": null}]}\n\n");
  CompletionStream garbage;
  garbage.Feed("data: {not json\n\n");

  cache::sim::ReplayRecord a, b, c;
  failed.Fill(&a);
  cut.Fill(&b);
  garbage.Fill(&c);

  EXPECT_EQ(a.error, "queue full");
  EXPECT_FALSE(b.error.empty());
  EXPECT_FALSE(c.error.empty());
}

TEST(HttpUrlTest, ParsesHostPortAndPrefix) {
  absl::StatusOr<HttpUrl> a = ParseHttpUrl("http://127.0.0.1:8080");
  absl::StatusOr<HttpUrl> b = ParseHttpUrl("http://gateway/api/");
  absl::StatusOr<HttpUrl> c = ParseHttpUrl("http://[::1]:9000/x");

  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, "8080");
  EXPECT_EQ(a->prefix, "");
  EXPECT_EQ(b->host, "gateway");
  EXPECT_EQ(b->port, "80");
  EXPECT_EQ(b->prefix, "/api");
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, "9000");
  EXPECT_EQ(c->prefix, "/x");
  for (const char* bad :
       {"https://x", "127.0.0.1:80", "http://", "http://x:0", "http://x:99999", "http://x:port"}) {
    EXPECT_THAT(ParseHttpUrl(bad).status(), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(HttpClientTest, UnreachableServerIsUnavailable) {
  // Port 1 on loopback: nothing listens there in a test sandbox.
  HttpClient client({"127.0.0.1", "1", ""}, absl::Seconds(5));

  EXPECT_THAT(client.Get("/health").status(), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace cairn::cairnctl
