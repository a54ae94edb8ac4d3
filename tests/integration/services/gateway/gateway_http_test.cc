// The gateway's HTTP rules over real sockets against the fake daemon: body and header
// limits, bounded admission, API keys on every route but the public ones, client
// disconnects cancelling generation, keep-alive under many concurrent connections, bad
// input answered 4xx with the server healthy after (docs/reliability.md GW1-GW7).

#include <algorithm>
#include <atomic>
#include <iostream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/concurrency/mutex.h"
#include "gtest/gtest.h"
#include "tests/integration/services/gateway/gateway_harness.h"
#include "tests/integration/services/gateway/http_test_client.h"

namespace cairn::gateway::testing {
namespace {

namespace http = boost::beast::http;

constexpr absl::Duration kCancelDeadline = absl::Seconds(5);

const char kChat[] = R"({"model":"fake-model","messages":[{"role":"user","content":"hi"}]})";
const char kStreamChat[] =
    R"({"model":"fake-model","stream":true,"messages":[{"role":"user","content":"hi"}]})";

// Returns true once `done()` holds, polling up to `timeout`: the server releases a request
// on its own threads just after the client has read the last byte.
template <typename Pred>
bool Eventually(Pred done, absl::Duration timeout = absl::Seconds(5)) {
  absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

Script HangAfterStart(const infer_v1::GenerateRequest&) {
  Script s;
  s.Started(3).Text("partial").WaitForCancel();
  return s;
}

TEST(GatewayHttpTest, HealthIsPublicAndReportsTheDaemon) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r = client.Get("/health");

  ASSERT_EQ(r.status, 200) << r.error << r.body;
  EXPECT_EQ(r.json()["status"], "ok");
  EXPECT_EQ(r.json()["daemons_ready"], 1);
}

TEST(GatewayHttpTest, HeadProbeOnRootAnswers200) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r = client.Request(http::verb::head, "/");

  EXPECT_EQ(r.status, 200) << r.error;
}

TEST(GatewayHttpTest, UnknownRouteIs404AndWrongMethodIs405) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult missing = client.Get("/v1/nothing");
  HttpResult wrong = client.Get("/v1/chat/completions");

  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(wrong.status, 405);
  EXPECT_TRUE(wrong.json()["error"].is_object()) << wrong.body;
}

TEST(GatewayHttpTest, OversizedBodyGets413BeforeTheBodyIsSent) {
  HarnessOptions options;
  options.http.max_body_bytes = 1024;
  GatewayHarness h(options);
  HttpTestClient client(h.port());

  // Only the head is sent: the answer must come without the 10 MB body.
  HttpResult r = client.Raw(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: 10000000\r\n\r\n");

  EXPECT_EQ(r.status, 413) << r.error;
  EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("exceeds"), std::string::npos);
  EXPECT_EQ(HttpTestClient(h.port()).Get("/health").status, 200);
}

TEST(GatewayHttpTest, ExpectContinueGetsAnInterimAnswerThenTheResponse) {
  GatewayHarness h;
  const std::string body = kChat;
  HttpTestClient raw(h.port());
  HttpResult interim = raw.Raw(absl::StrCat(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
      "Content-Type: application/json\r\nContent-Length: ",
      body.size(), "\r\n\r\n", body));
  HttpResult final = raw.ReadResponse();

  EXPECT_EQ(interim.status, 100) << interim.error;
  EXPECT_EQ(final.status, 200) << final.error << final.body;
  EXPECT_EQ(final.json()["choices"][0]["message"]["content"], "Hello world");
}

TEST(GatewayHttpTest, Http10StreamsEndByClosingTheConnection) {
  GatewayHarness h;
  HttpTestClient client(h.port());
  const std::string body = kStreamChat;

  HttpResult r = client.Raw(absl::StrCat(
      "POST /v1/chat/completions HTTP/1.0\r\nContent-Length: ", body.size(), "\r\n\r\n", body));

  EXPECT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.headers.count("transfer-encoding"), 0u);
  EXPECT_TRUE(absl::StrContains(r.body, "data: [DONE]")) << r.body;
  EXPECT_FALSE(client.connected());
}

// The head of a POST announcing a megabyte body that never comes: only an answer given before
// the body is read arrives within the client's deadline (the server would wait its read
// timeout for the body).
std::string HeadOnly(const std::string& path, const std::string& headers = "") {
  return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n", headers,
                      "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n");
}

TEST(GatewayHttpTest, RefusedRequestsAreAnsweredBeforeTheirBody) {
  HarnessOptions options;
  options.http.api_keys = {"secret-key"};
  options.http.read_timeout = absl::Seconds(30);
  GatewayHarness h(options);
  const absl::Duration deadline = absl::Seconds(3);

  HttpResult no_key = HttpTestClient(h.port(), deadline).Raw(HeadOnly("/v1/chat/completions"));
  HttpResult no_route = HttpTestClient(h.port(), deadline).Raw(HeadOnly("/v1/nothing"));
  HttpResult wrong_method = HttpTestClient(h.port(), deadline).Raw(HeadOnly("/v1/models"));

  EXPECT_EQ(no_key.status, 401) << no_key.error;
  EXPECT_EQ(no_route.status, 404) << no_route.error;
  EXPECT_EQ(wrong_method.status, 405) << wrong_method.error;
  EXPECT_EQ(no_key.headers["connection"], "close");
  EXPECT_EQ(h.fake().generate_calls(), 0);
}

// The answer is sent while the client is still sending its body; the server reads and drops
// the rest before it closes, since closing with unread bytes would reset the connection and
// could destroy the answer before the client reads it.
// Bodies held at once are bounded over all connections and routes: each request is charged at
// its header (its Content-Length), one that would pass --max-body-bytes-in-flight gets 503 with
// Retry-After before its body is read, and the charge ends with the exchange.
TEST(GatewayHttpTest, BodiesBeyondTheBytesInFlightGet503AtTheirHeader) {
  HarnessOptions options;
  options.http.max_body_bytes = 1 << 20;
  options.http.max_body_bytes_in_flight = 1500000;  // One HeadOnly body (1,000,000) fits.
  options.http.read_timeout = absl::Seconds(3);
  GatewayHarness h(options);

  // A client that sends a header and then nothing holds its charge until the read times out.
  HttpResult waiting;
  std::thread slow([&] {
    waiting = HttpTestClient(h.port(), absl::Seconds(6)).Raw(HeadOnly("/v1/messages/count_tokens"));
  });
  for (int i = 0; i < 200 && h.server().stats().body_bytes == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(h.server().stats().body_bytes, 1000000);

  HttpResult small = HttpTestClient(h.port()).Post("/v1/chat/completions", kChat);
  HttpResult large = HttpTestClient(h.port(), absl::Seconds(3)).Raw(HeadOnly("/tokenize"));
  slow.join();
  HttpResult after = HttpTestClient(h.port()).Post("/v1/chat/completions", kChat);

  EXPECT_EQ(small.status, 200) << small.body;
  EXPECT_EQ(large.status, 503) << large.error;
  EXPECT_FALSE(large.headers["retry-after"].empty());
  EXPECT_NE(waiting.status, 200);
  EXPECT_EQ(after.status, 200) << after.body;
  // The last exchange ends just after its answer is written.
  for (int i = 0; i < 200 && h.server().stats().body_bytes != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(h.server().stats().body_bytes, 0);
}

TEST(GatewayHttpTest, AClientStillSendingARefusedBodyReadsTheAnswer) {
  HarnessOptions options;
  options.http.api_keys = {"secret-key"};
  GatewayHarness h(options);
  const std::string body = absl::StrCat(R"({"messages":[{"role":"user","content":")",
                                        std::string(4 << 20, 'a'), R"("}]})");

  for (int i = 0; i < 3; ++i) {
    HttpResult r = HttpTestClient(h.port()).Post("/v1/chat/completions", body);

    EXPECT_EQ(r.status, 401) << i << " " << r.error;
  }
}

TEST(GatewayHttpTest, ARefusedRequestGetsNo100Continue) {
  HarnessOptions options;
  options.http.api_keys = {"secret-key"};
  GatewayHarness h(options);
  HttpTestClient client(h.port(), absl::Seconds(3));

  HttpResult r = client.Raw(HeadOnly("/v1/chat/completions", "Expect: 100-continue\r\n"));

  EXPECT_EQ(r.status, 401) << r.error;
  EXPECT_EQ(r.json()["error"]["type"], "authentication_error") << r.body;
}

TEST(GatewayHttpTest, AdmissionRefusesBeforeTheBody) {
  HarnessOptions options;
  options.http.max_inflight = 1;
  options.http.read_timeout = absl::Seconds(30);
  GatewayHarness h(options);
  h.fake().SetScript(HangAfterStart);
  HttpTestClient first(h.port());
  ASSERT_FALSE(first.StartStream("/v1/chat/completions", kStreamChat, 1).empty());
  ASSERT_TRUE(h.fake().waiting().WaitForNotificationWithTimeout(kCancelDeadline));

  HttpResult second =
      HttpTestClient(h.port(), absl::Seconds(3)).Raw(HeadOnly("/v1/chat/completions"));

  EXPECT_EQ(second.status, 503) << second.error;
  EXPECT_EQ(second.headers["retry-after"], "1");
  first.Close();
}

TEST(GatewayHttpTest, AHeadRequestLeavesTheNextErrorItsBody) {
  GatewayHarness h;
  HttpTestClient client(h.port(), absl::Seconds(3));
  ASSERT_EQ(client.Request(http::verb::head, "/").status, 200);
  ASSERT_TRUE(client.connected());

  HttpResult r = client.Raw("NOT A REQUEST\r\n\r\n");

  EXPECT_EQ(r.status, 400) << r.error;
  EXPECT_TRUE(r.json()["error"].is_object()) << r.body;
}

TEST(GatewayHttpTest, HttpLayerErrorsTakeTheShapeOfTheRequestsPath) {
  HarnessOptions options;
  options.http.max_header_bytes = 2048;
  GatewayHarness h(options);

  HttpResult big =
      HttpTestClient(h.port()).Get("/v1/messages", {{"X-Big", std::string(8192, 'a')}});
  HttpResult malformed = HttpTestClient(h.port()).Raw(
      "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Length: many\r\n\r\n");
  HttpResult openai =
      HttpTestClient(h.port()).Get("/v1/models", {{"X-Big", std::string(8192, 'a')}});

  EXPECT_EQ(big.status, 431) << big.error;
  EXPECT_EQ(big.json()["type"], "error") << big.body;
  EXPECT_EQ(malformed.status, 400) << malformed.error;
  EXPECT_EQ(malformed.json()["type"], "error") << malformed.body;
  EXPECT_EQ(malformed.json()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(openai.status, 431);
  EXPECT_TRUE(openai.json()["error"].is_object()) << openai.body;
}

TEST(GatewayHttpTest, WithoutKeysForeignHostsAndOriginsAreRefused) {
  GatewayHarness h;
  auto post = [&](std::map<std::string, std::string> headers) {
    return HttpTestClient(h.port()).Post("/v1/chat/completions", kChat, headers);
  };

  HttpResult rebound = post({{"Host", "attacker.example:8080"}});
  HttpResult cross_site = post({{"Origin", "https://attacker.example"}});
  HttpResult sandboxed = post({{"Origin", "null"}});
  HttpResult rebound_health =
      HttpTestClient(h.port()).Get("/health", {{"Host", "attacker.example"}});
  HttpResult local_page = post({{"Origin", "http://localhost:3000"}});
  HttpResult local = post({{"Host", "localhost:8080"}});

  EXPECT_EQ(rebound.status, 403) << rebound.body;
  EXPECT_NE(rebound.json()["error"]["message"].get<std::string>().find("Host"), std::string::npos);
  EXPECT_EQ(cross_site.status, 403) << cross_site.body;
  EXPECT_NE(cross_site.json()["error"]["message"].get<std::string>().find("Origin"),
            std::string::npos);
  EXPECT_EQ(sandboxed.status, 403);
  EXPECT_EQ(rebound_health.status, 403);
  EXPECT_EQ(local_page.status, 200) << local_page.body;
  EXPECT_EQ(local.status, 200) << local.body;
  EXPECT_EQ(h.fake().generate_calls(), 2);
}

// RFC 9112 3.2.2: a server accepts a target in absolute form, and its host, not the Host
// header, is the one the request is for (so without keys that host must be a loopback name).
TEST(GatewayHttpTest, AnAbsoluteFormTargetIsServedAndItsHostChecked) {
  GatewayHarness h;
  const std::string port = absl::StrCat(h.port());

  HttpResult chat = HttpTestClient(h.port()).Post(
      absl::StrCat("http://localhost:", port, "/v1/chat/completions?x=1"), kChat);
  HttpResult health =
      HttpTestClient(h.port()).Get(absl::StrCat("HTTP://127.0.0.1:", port, "/health"));
  HttpResult root = HttpTestClient(h.port()).Get(absl::StrCat("http://[::1]:", port));
  HttpResult rebound = HttpTestClient(h.port()).Post("http://attacker.example/v1/chat/completions",
                                                     kChat, {{"Host", "localhost"}});
  HttpResult unknown = HttpTestClient(h.port()).Get("http://localhost/v1/nothing-here");

  EXPECT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(health.status, 200) << health.body;
  EXPECT_EQ(root.status, 200) << root.body;
  EXPECT_EQ(rebound.status, 403) << rebound.body;
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_NE(unknown.json()["error"]["message"].get<std::string>().find("/v1/nothing-here"),
            std::string::npos)
      << unknown.body;
  EXPECT_EQ(h.fake().generate_calls(), 1);
}

// RFC 9112 3.2: an HTTP/1.1 request without Host, or any request with two, is a 400, and the
// connection closes after it. HTTP/1.0 may leave Host out.
TEST(GatewayHttpTest, AMissingOrRepeatedHostIsA400) {
  GatewayHarness h;
  const std::string port = absl::StrCat(h.port());
  const std::string body = kChat;
  auto raw = [&](const std::string& bytes) { return HttpTestClient(h.port()).Raw(bytes); };

  HttpResult missing = raw("GET /health HTTP/1.1\r\n\r\n");
  HttpResult twice = raw("GET /health HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\n\r\n");
  HttpResult twice_10 = raw("GET /health HTTP/1.0\r\nHost: localhost\r\nHost: 127.0.0.1\r\n\r\n");
  HttpResult absolute =
      raw(absl::StrCat("GET http://localhost:", port, "/health HTTP/1.1\r\n\r\n"));
  HttpResult anthropic = raw(absl::StrCat(
      "POST /v1/messages HTTP/1.1\r\nContent-Length: ", body.size(), "\r\n\r\n", body));
  HttpResult http10 = raw("GET /health HTTP/1.0\r\n\r\n");
  // The target's host is the one the request is for; Host need only be there.
  HttpResult absolute_with_host = raw(absl::StrCat("GET http://localhost:", port,
                                                   "/health HTTP/1.1\r\nHost: attacker.example\r\n"
                                                   "Connection: close\r\n\r\n"));

  for (HttpResult r : {missing, twice, twice_10, absolute}) {
    EXPECT_EQ(r.status, 400) << r.error << r.body;
    EXPECT_NE(r.headers["connection"], "keep-alive");  // HTTP/1.0's answer closes unsaid.
    EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error") << r.body;
    EXPECT_TRUE(absl::StrContains(r.json()["error"]["message"].get<std::string>(), "Host header"))
        << r.body;
  }
  for (HttpResult r : {missing, twice, absolute}) EXPECT_EQ(r.headers["connection"], "close");
  EXPECT_TRUE(absl::StrContains(missing.body, "RFC 9112")) << missing.body;
  EXPECT_TRUE(absl::StrContains(twice.body, "2 Host headers")) << twice.body;
  EXPECT_EQ(anthropic.status, 400) << anthropic.error;
  EXPECT_EQ(anthropic.json()["type"], "error") << anthropic.body;  // Anthropic's shape.
  EXPECT_EQ(http10.status, 200) << http10.error << http10.body;
  EXPECT_EQ(absolute_with_host.status, 200) << absolute_with_host.body;
  EXPECT_EQ(h.fake().generate_calls(), 0);
  EXPECT_EQ(HttpTestClient(h.port()).Get("/health").status, 200);
}

TEST(GatewayHttpTest, WithKeysTheKeyDecidesWhateverTheHostOrOrigin) {
  HarnessOptions options;
  options.http.api_keys = {"secret-key"};
  GatewayHarness h(options);

  HttpResult r = HttpTestClient(h.port()).Post("/v1/chat/completions", kChat,
                                               {{"Host", "gateway.example"},
                                                {"Origin", "https://app.example"},
                                                {"Authorization", "Bearer secret-key"}});

  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(GatewayHttpTest, HeadOnGetRoutesAnswersWithoutTheBodyAnd405SaysWhatIsAllowed) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult health = client.Request(http::verb::head, "/health");
  HttpResult models = client.Request(http::verb::head, "/v1/models");
  HttpResult post_models = client.Post("/v1/models", "{}");
  HttpResult get_chat = client.Get("/v1/chat/completions");
  HttpResult get_models = client.Get("/v1/models");

  EXPECT_EQ(health.status, 200) << health.error;
  EXPECT_TRUE(health.body.empty());
  EXPECT_EQ(models.status, 200) << models.error;
  EXPECT_EQ(models.headers["content-length"], get_models.headers["content-length"]);
  EXPECT_TRUE(models.body.empty());
  EXPECT_EQ(post_models.status, 405);
  EXPECT_EQ(post_models.headers["allow"], "GET, HEAD");
  EXPECT_EQ(get_chat.status, 405);
  EXPECT_EQ(get_chat.headers["allow"], "POST");
  EXPECT_TRUE(client.connected());
}

TEST(GatewayHttpTest, OversizedHeadersGet431) {
  HarnessOptions options;
  options.http.max_header_bytes = 2048;
  GatewayHarness h(options);
  HttpTestClient client(h.port());

  HttpResult r = client.Get("/health", {{"X-Big", std::string(8192, 'a')}});

  EXPECT_EQ(r.status, 431) << r.error;
}

// No content coding is decoded, so a compressed body is refused at its header, with the coding
// named, rather than read whole and answered as JSON that does not parse.
TEST(GatewayHttpTest, ACompressedBodyGets415BeforeTheBodyIsRead) {
  GatewayHarness h;
  HttpTestClient client(h.port(), absl::Seconds(3));

  HttpResult gzip = client.Raw(HeadOnly("/v1/chat/completions", "Content-Encoding: gzip\r\n"));
  HttpResult zstd = HttpTestClient(h.port(), absl::Seconds(3))
                        .Raw(HeadOnly("/v1/messages", "Content-Encoding: zstd\r\n"));
  HttpResult identity = HttpTestClient(h.port()).Post("/v1/chat/completions", kChat,
                                                      {{"Content-Encoding", "Identity"}});
  HttpResult empty =
      HttpTestClient(h.port()).Post("/v1/chat/completions", kChat, {{"Content-Encoding", ""}});

  EXPECT_EQ(gzip.status, 415) << gzip.error;
  EXPECT_EQ(gzip.headers["accept-encoding"], "identity");
  EXPECT_TRUE(absl::StrContains(gzip.body, "Content-Encoding gzip")) << gzip.body;
  EXPECT_EQ(zstd.status, 415) << zstd.error;
  EXPECT_EQ(zstd.json()["type"], "error") << zstd.body;  // Anthropic's shape.
  EXPECT_EQ(identity.status, 200) << identity.body;
  EXPECT_EQ(empty.status, 200) << empty.body;
  EXPECT_EQ(h.fake().generate_calls(), 2);
}

// Nor is a transfer coding other than chunked: "gzip, chunked" would be de-chunked and its
// still-compressed bytes read as JSON. RFC 9112 6.1 answers such a request 501; chunked alone
// is served.
TEST(GatewayHttpTest, ATransferCodingOtherThanChunkedGets501) {
  GatewayHarness h;
  const auto request = [](const std::string& coding) {
    return absl::StrCat("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                        "Content-Type: application/json\r\nTransfer-Encoding: ", coding, "\r\n\r\n",
                        absl::Hex(sizeof(kChat) - 1), "\r\n", kChat, "\r\n0\r\n\r\n");
  };

  HttpResult gzip = HttpTestClient(h.port(), absl::Seconds(3)).Raw(request("gzip, chunked"));
  HttpResult chunked = HttpTestClient(h.port(), absl::Seconds(3)).Raw(request("chunked"));

  EXPECT_EQ(gzip.status, 501) << gzip.error;
  EXPECT_TRUE(absl::StrContains(gzip.body, "Transfer-Encoding gzip, chunked")) << gzip.body;
  EXPECT_EQ(chunked.status, 200) << chunked.body;
  EXPECT_EQ(h.fake().generate_calls(), 1);
}

TEST(GatewayHttpTest, MalformedHttpGets400) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r = client.Raw("NOT A REQUEST\r\n\r\n");

  EXPECT_EQ(r.status, 400) << r.error;
  EXPECT_EQ(HttpTestClient(h.port()).Get("/health").status, 200);
}

TEST(GatewayHttpTest, ApiKeysGuardEveryRouteButThePublicOnes) {
  HarnessOptions options;
  options.http.api_keys = {"secret-key-1", "secret-key-2"};
  GatewayHarness h(options);

  int checked = 0;
  for (const Router::Route& route : h.routes()) {
    if (route.options.public_route) continue;
    for (const std::map<std::string, std::string>& headers :
         std::vector<std::map<std::string, std::string>>{{},
                                                         {{"Authorization", "Bearer "}},
                                                         {{"Authorization", "Bearer wrong"}},
                                                         {{"x-api-key", "secret-key-1x"}}}) {
      HttpTestClient client(h.port());
      HttpResult r = client.Request(route.verb, route.path, "{}", headers);
      EXPECT_EQ(r.status, 401) << route.path;
      ++checked;
    }
  }
  HttpTestClient client(h.port());
  HttpResult bearer = client.Get("/v1/models", {{"Authorization", "Bearer secret-key-2"}});
  HttpResult x_api_key = client.Get("/v1/models", {{"x-api-key", "secret-key-1"}});
  HttpResult health = client.Get("/health");

  EXPECT_GE(checked, 4 * 9);
  EXPECT_EQ(bearer.status, 200) << bearer.body;
  EXPECT_EQ(x_api_key.status, 200) << x_api_key.body;
  EXPECT_EQ(health.status, 200);
}

TEST(GatewayHttpTest, NonLoopbackListenWithoutKeysIsRefused) {
  HttpServerOptions options;
  options.host = "0.0.0.0";
  options.port = 0;

  auto server = HttpServer::Start(
      options, Router(), [](const absl::Status&, absl::string_view) { return HttpResponse{}; });

  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GatewayHttpTest, AdmissionLimitAnswers503WithRetryAfterBeforeAnyUpstreamCall) {
  HarnessOptions options;
  options.http.max_inflight = 1;
  GatewayHarness h(options);
  h.fake().SetScript(HangAfterStart);
  HttpTestClient first(h.port());
  ASSERT_FALSE(first.StartStream("/v1/chat/completions", kStreamChat, 1).empty());
  ASSERT_TRUE(h.fake().waiting().WaitForNotificationWithTimeout(kCancelDeadline));

  HttpResult second = HttpTestClient(h.port()).Post("/v1/chat/completions", kChat);

  EXPECT_EQ(second.status, 503) << second.body;
  EXPECT_EQ(second.headers["retry-after"], "1");
  EXPECT_EQ(h.fake().generate_calls(), 1);
  first.Close();
  EXPECT_TRUE(h.fake().cancelled().WaitForNotificationWithTimeout(kCancelDeadline));
}

TEST(GatewayHttpTest, ClientDisconnectMidStreamCancelsTheGeneration) {
  GatewayHarness h;
  h.fake().SetScript(HangAfterStart);
  HttpTestClient client(h.port());
  std::string got = client.StartStream("/v1/chat/completions", kStreamChat, 1);
  ASSERT_TRUE(h.fake().waiting().WaitForNotificationWithTimeout(kCancelDeadline));

  absl::Time closed = absl::Now();
  client.Close();

  EXPECT_TRUE(h.fake().cancelled().WaitForNotificationWithTimeout(kCancelDeadline));
  std::cout << "disconnect -> upstream cancelled in "
            << absl::ToDoubleMilliseconds(absl::Now() - closed) << " ms\n";
  EXPECT_NE(got.find("200 OK"), std::string::npos) << got;
  // The connection and its exchange are released too, so no ping timer or handler state
  // outlives the client.
  EXPECT_TRUE(Eventually([&] {
    HttpServerStats stats = h.server().stats();
    return stats.exchanges == 0 && stats.connections == 0;
  }));
}

TEST(GatewayHttpTest, ClientDisconnectWhileWaitingForANonStreamedAnswerCancels) {
  GatewayHarness h;
  h.fake().SetScript(HangAfterStart);
  HttpTestClient client(h.port());
  // Non-streaming: nothing is written back until the end, so only the read-ahead sees EOF.
  client.StartStream("/v1/chat/completions", kChat, /*min_bytes=*/0);
  ASSERT_TRUE(h.fake().waiting().WaitForNotificationWithTimeout(kCancelDeadline));

  client.Close();

  EXPECT_TRUE(h.fake().cancelled().WaitForNotificationWithTimeout(kCancelDeadline));
  EXPECT_EQ(h.fake().cancelled_calls(), 1);
}

// RFC 9112 9.6 lets a client half-close after its request, but until the gateway writes, TCP
// shows that and a close alike (the client's FIN): a half-closed client is treated as gone,
// streamed or not, so that a client that closed never leaves its generation running
// (docs/gateway.md, Disconnects).
TEST(GatewayHttpTest, AHalfClosedClientIsTreatedAsGone) {
  for (const char* body : {kChat, kStreamChat}) {
    GatewayHarness h;
    h.fake().SetScript(HangAfterStart);
    HttpTestClient client(h.port());
    client.StartStream("/v1/chat/completions", body, /*min_bytes=*/0);
    ASSERT_TRUE(h.fake().waiting().WaitForNotificationWithTimeout(kCancelDeadline)) << body;

    ASSERT_TRUE(client.ShutdownSend()) << body;

    EXPECT_TRUE(h.fake().cancelled().WaitForNotificationWithTimeout(kCancelDeadline)) << body;
    HttpResult r = client.ReadResponse();  // The answer ends unfinished (or never starts).
    EXPECT_EQ(r.status, 0) << body << " " << r.body;
    EXPECT_TRUE(Eventually([&] { return h.server().stats().connections == 0; })) << body;
  }
}

// Past --max-pipelined-bytes (64 KiB) of read-ahead the socket is no longer read, so the
// client's EOF sits behind bytes nobody reads: the socket's TCP state still shows it.
TEST(GatewayHttpTest, ClientDisconnectBehindAFullReadAheadStillCancels) {
  GatewayHarness h;
  h.fake().SetScript(HangAfterStart);
  HttpTestClient client(h.port());
  client.StartStream("/v1/chat/completions", kChat, /*min_bytes=*/0);
  ASSERT_TRUE(h.fake().waiting().WaitForNotificationWithTimeout(kCancelDeadline));
  // A pipelined request larger than the read-ahead, sent whole before the client leaves.
  const std::string body(80 << 10, ' ');
  ASSERT_TRUE(client.Send(absl::StrCat(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n",
      "Content-Type: application/json\r\nContent-Length: ", body.size(), "\r\n\r\n", body)));

  absl::Time closed = absl::Now();
  client.Close();

  EXPECT_TRUE(h.fake().cancelled().WaitForNotificationWithTimeout(kCancelDeadline));
  std::cout << "disconnect behind a full read-ahead -> upstream cancelled in "
            << absl::ToDoubleMilliseconds(absl::Now() - closed) << " ms\n";
  EXPECT_EQ(h.fake().cancelled_calls(), 1);
  EXPECT_TRUE(Eventually([&] { return h.server().stats().connections == 0; }));
}

TEST(GatewayHttpTest, ARequestWhoseClientLeavesIsCountedOnce) {
  GatewayHarness h;
  h.fake().SetScript(HangAfterStart);
  HttpTestClient streamed(h.port());
  ASSERT_FALSE(streamed.StartStream("/v1/chat/completions", kStreamChat, 1).empty());
  ASSERT_TRUE(h.fake().waiting().WaitForNotificationWithTimeout(kCancelDeadline));
  streamed.Close();
  ASSERT_TRUE(Eventually([&] { return h.fake().cancelled_calls() == 1; }));
  HttpTestClient waiting(h.port());
  waiting.StartStream("/v1/completions", R"({"prompt":"x"})", /*min_bytes=*/0);
  ASSERT_TRUE(Eventually([&] { return h.fake().generate_calls() == 2; }));

  waiting.Close();
  ASSERT_TRUE(Eventually([&] { return h.fake().cancelled_calls() == 2; }));
  HttpResult metrics = HttpTestClient(h.port()).Get("/metrics");

  // The stream answered 200 before its client left; the other client left before any answer.
  const std::string chat = "cairn_gateway_requests_total{route=\"/v1/chat/completions\"";
  EXPECT_TRUE(absl::StrContains(metrics.body, chat + ",status=\"200\"} 1")) << metrics.body;
  EXPECT_FALSE(absl::StrContains(metrics.body, chat + ",status=\"499\"}")) << metrics.body;
  EXPECT_TRUE(absl::StrContains(
      metrics.body, "cairn_gateway_requests_total{route=\"/v1/completions\",status=\"499\"} 1"))
      << metrics.body;
  EXPECT_TRUE(absl::StrContains(metrics.body, "cairn_gateway_cancelled_total 2")) << metrics.body;
}

TEST(GatewayHttpTest, KeepAliveServesManyRequestsOnOneConnection) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  for (int i = 0; i < 20; ++i) {
    HttpResult r = client.Post("/v1/chat/completions", kChat);
    ASSERT_EQ(r.status, 200) << i << " " << r.error;
    EXPECT_TRUE(client.connected());
  }
}

TEST(GatewayHttpTest, ManyConcurrentConnectionsAllComplete) {
  HarnessOptions options;
  options.http.max_inflight = 1000;
  GatewayHarness h(options);
  constexpr int kClients = 48;
  constexpr int kRequestsEach = 4;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  absl::Time start = absl::Now();

  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      HttpTestClient client(h.port());
      for (int i = 0; i < kRequestsEach; ++i) {
        HttpResult r = client.Post("/v1/chat/completions", (t + i) % 2 == 0 ? kChat : kStreamChat);
        if (r.status == 200) ++ok;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);

  EXPECT_EQ(ok.load(), kClients * kRequestsEach);
  std::cout << "concurrency: " << kClients << " connections x " << kRequestsEach << " requests in "
            << seconds * 1000 << " ms (" << kClients * kRequestsEach / seconds << " requests/s)\n";
  EXPECT_TRUE(Eventually([&] { return h.server().stats().inflight == 0; }));
}

TEST(GatewayHttpTest, OverloadGetsBusyAnswersAndEveryAdmittedRequestCompletes) {
  HarnessOptions options;
  options.http.max_inflight = 4;
  GatewayHarness h(options);
  h.fake().SetScript([](const infer_v1::GenerateRequest&) {
    Script s = Script::Reply({"a", "b", "c"});
    s.steps.insert(s.steps.begin() + 1, Script().Pause(absl::Milliseconds(20)).steps[0]);
    return s;
  });
  constexpr int kClients = 32;
  constexpr int kRequestsEach = 5;
  std::atomic<int> completed{0}, busy{0}, other{0};
  Mutex mu;
  std::vector<double> busy_ms;
  std::vector<std::thread> threads;

  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRequestsEach; ++i) {
        HttpTestClient client(h.port());
        absl::Time start = absl::Now();
        HttpResult r = client.Post("/v1/chat/completions", kStreamChat);
        double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
        if (r.status == 200 && absl::StrContains(r.body, "data: [DONE]") &&
            absl::StrContains(r.body, "\"finish_reason\":\"stop\"")) {
          ++completed;
        } else if (r.status == 503 && r.headers.count("retry-after") == 1) {
          ++busy;
          MutexLock lock(&mu);
          busy_ms.push_back(ms);
        } else {
          ++other;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(completed.load() + busy.load(), kClients * kRequestsEach);
  EXPECT_GT(busy.load(), 0);
  EXPECT_EQ(h.fake().generate_calls(), completed.load());  // Refused before any upstream call.
  EXPECT_TRUE(Eventually([&] { return h.server().stats().inflight == 0; }));
  MutexLock lock(&mu);
  std::sort(busy_ms.begin(), busy_ms.end());
  double p99 = busy_ms.empty() ? 0 : busy_ms[busy_ms.size() * 99 / 100];
  std::cout << "overload: " << completed.load() << " completed, " << busy.load()
            << " answered 503, busy answer p99 " << p99 << " ms\n";
}

TEST(GatewayHttpTest, BadInputsGet4xxAndTheServerStaysHealthy) {
  GatewayHarness h;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/v1/chat/completions", ""},
      {"/v1/chat/completions", "{"},
      {"/v1/chat/completions", "[1,2]"},
      {"/v1/chat/completions", std::string(200, '[') + std::string(200, ']')},
      {"/v1/chat/completions", R"({"messages":"hi"})"},
      {"/v1/chat/completions", R"({"messages":[]})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"wizard","content":"x"}]})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"n":2})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"n":1000000})"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"temperature":-1})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-1})"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x"}],"max_tokens":18446744073709551616})"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search"}]})"},
      {"/v1/completions", R"({"prompt":[-1]})"},
      {"/v1/completions", R"({"prompt":[1000]})"},
      {"/v1/completions", R"({"prompt":[4294967296]})"},
      {"/v1/completions", R"({"prompt":[]})"},
      {"/v1/completions", R"({"prompt":[1,"a"]})"},
      {"/v1/completions", R"({"prompt":["a","b"]})"},
      {"/v1/messages", R"({"messages":[{"role":"user","content":"x"}]})"},
      {"/v1/messages",
       R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})"},
      {"/v1/responses", R"({"input":"x","tools":[{"type":"local_shell"}]})"},
      {"/v1/responses", R"({"input":"x","previous_response_id":"resp_1"})"},
      {"/detokenize", R"({"tokens":[-1]})"},
      {"/detokenize", R"({"tokens":[1000]})"},
      {"/tokenize", R"({"prompt":5})"},
  };
  for (const auto& [path, body] : cases) {
    HttpTestClient client(h.port());
    HttpResult r = client.Post(path, body);
    EXPECT_GE(r.status, 400) << path << " " << body << " -> " << r.status << " " << r.body;
    EXPECT_LT(r.status, 500) << path << " " << body << " -> " << r.body;
    EXPECT_FALSE(r.json().is_discarded()) << r.body;
  }

  EXPECT_EQ(HttpTestClient(h.port()).Get("/health").status, 200);
  EXPECT_EQ(h.fake().generate_calls(), 0);
}

TEST(GatewayHttpTest, MalformedFieldsAreNamedInTheError) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/chat/completions",
                             R"({"messages":[{"role":"user","content":"x"}],"top_p":"high"})");
  HttpResult nested = client.Post("/v1/chat/completions",
                                  R"({"messages":[{"role":"user","content":"x"},{"role":"user"},
                                               {"role":"assistant","tool_calls":[{"function":{}}]}]})");

  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error");
  EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("top_p"), std::string::npos);
  EXPECT_NE(nested.json()["error"]["message"].get<std::string>().find("messages[2].tool_calls[0]"),
            std::string::npos)
      << nested.body;
}

TEST(GatewayHttpTest, ShutdownDrainsAndRefusesNewRequests) {
  auto h = std::make_unique<GatewayHarness>();
  int port = h->port();
  HttpTestClient client(port);
  ASSERT_EQ(client.Post("/v1/chat/completions", kChat).status, 200);

  h.reset();

  EXPECT_NE(HttpTestClient(port, absl::Seconds(2)).Get("/health").status, 200);
}

}  // namespace
}  // namespace cairn::gateway::testing
