#include "services/gateway/http/http_server.h"

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace cairn::gateway {
namespace {

TEST(HttpServerTest, ParsesListenAddresses) {
  absl::StatusOr<HttpListenAddress> v4 = ParseHttpListenAddress("127.0.0.1:8080");
  absl::StatusOr<HttpListenAddress> v6 = ParseHttpListenAddress("[::1]:0");

  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 8080);
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
}

TEST(HttpServerTest, RejectsMalformedListenAddresses) {
  for (const char* bad :
       {"", "8080", ":8080", "host:", "host:x", "host:65536", "host:-1", "[::1:80"}) {
    EXPECT_EQ(ParseHttpListenAddress(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(HttpServerTest, ApiKeyMatchesOnlyWholeKeys) {
  std::vector<std::string> keys = {"alpha-key", "beta"};

  EXPECT_TRUE(ApiKeyMatches("alpha-key", keys));
  EXPECT_TRUE(ApiKeyMatches("beta", keys));
  EXPECT_FALSE(ApiKeyMatches("alpha", keys));
  EXPECT_FALSE(ApiKeyMatches("alpha-key2", keys));
  EXPECT_FALSE(ApiKeyMatches("", keys));
  EXPECT_FALSE(ApiKeyMatches("beta", {}));
}

TEST(HttpServerTest, BasicAuthPasswordIsTheKey) {
  // "user:sk-1" and ":sk:2" (a password may hold colons) in base64.
  EXPECT_EQ(BasicAuthPassword("Basic dXNlcjpzay0x"), "sk-1");
  EXPECT_EQ(BasicAuthPassword("basic OnNrOjI="), "sk:2");
  EXPECT_EQ(BasicAuthPassword("Bearer sk-1"), "");
  EXPECT_EQ(BasicAuthPassword("Basic !!!"), "");
  EXPECT_EQ(BasicAuthPassword("Basic dXNlcg=="), "");  // "user": no colon.
  EXPECT_EQ(BasicAuthPassword(""), "");
}

TEST(HttpServerTest, AnApiKeyIsReadFromBearerBasicOrXApiKey) {
  const std::vector<std::string> keys = {"k1"};
  auto with = [](boost::beast::http::field field, const std::string& value) {
    HttpRequest r;
    r.set(field, value);
    return r;
  };
  HttpRequest x_api_key;
  x_api_key.set("x-api-key", "k1");
  // Basic: user "u", password "k1".
  const HttpRequest basic = with(boost::beast::http::field::authorization, "Basic dTprMQ==");

  EXPECT_TRUE(
      RequestHasApiKey(with(boost::beast::http::field::authorization, "Bearer k1"), false, keys));
  EXPECT_FALSE(
      RequestHasApiKey(with(boost::beast::http::field::authorization, "Bearer k2"), false, keys));
  EXPECT_TRUE(RequestHasApiKey(x_api_key, false, keys));
  EXPECT_TRUE(RequestHasApiKey(basic, true, keys));
  EXPECT_FALSE(RequestHasApiKey(basic, false, keys));  // Basic only on browser routes.
  EXPECT_FALSE(RequestHasApiKey(HttpRequest(), false, keys));
  // Both headers (Anthropic's SDKs send both where both their variables are set): either may
  // hold the key.
  HttpRequest wrong_bearer = x_api_key;
  wrong_bearer.set(boost::beast::http::field::authorization, "Bearer some-other-token");
  HttpRequest wrong_x_api_key = with(boost::beast::http::field::authorization, "Bearer k1");
  wrong_x_api_key.set("x-api-key", "k2");
  HttpRequest both_wrong = wrong_bearer;
  both_wrong.set("x-api-key", "k2");
  EXPECT_TRUE(RequestHasApiKey(wrong_bearer, false, keys));
  EXPECT_TRUE(RequestHasApiKey(wrong_x_api_key, false, keys));
  EXPECT_FALSE(RequestHasApiKey(both_wrong, false, keys));
  EXPECT_TRUE(HeaderAbsentOr(HttpRequest(), boost::beast::http::field::origin, IsLoopbackOrigin));
  EXPECT_TRUE(HeaderAbsentOr(with(boost::beast::http::field::origin, "http://localhost:3000"),
                             boost::beast::http::field::origin, IsLoopbackOrigin));
  EXPECT_FALSE(HeaderAbsentOr(with(boost::beast::http::field::origin, "https://example.com"),
                              boost::beast::http::field::origin, IsLoopbackOrigin));
}

TEST(HttpServerTest, LoopbackHostsAreRecognised) {
  for (const char* host : {"localhost", "LOCALHOST:8080", "127.0.0.1", "127.0.0.1:80",
                           "127.1.2.3:9", "[::1]", "[::1]:8080"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"", "example.com", "localhost.example.com", "10.0.0.1:80", "[::2]",
                           "[::1", "[::1]x", "127.0.0.1.nip.io", "0.0.0.0"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(HttpServerTest, HostIsRequiredOnceInHttp11AndAtMostOnceInHttp10) {
  namespace http = boost::beast::http;
  auto request = [](unsigned version, const std::string& target, int hosts) {
    HttpRequest r(http::verb::get, target, version);
    for (int i = 0; i < hosts; ++i) r.insert(http::field::host, "localhost");
    return r;
  };

  EXPECT_TRUE(CheckHostHeader(request(11, "/health", 1)).ok());
  EXPECT_TRUE(CheckHostHeader(request(10, "/health", 0)).ok());
  EXPECT_TRUE(CheckHostHeader(request(10, "/health", 1)).ok());
  for (const HttpRequest& bad :
       {request(11, "/health", 0), request(11, "http://localhost/health", 0),
        request(11, "/health", 2), request(10, "/health", 2)}) {
    absl::Status s = CheckHostHeader(bad);

    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("Host header"), absl::string_view::npos) << s;
  }
}

TEST(HttpServerTest, AHostValueMustBeAHostWithAnOptionalPort) {
  for (const char* good : {"localhost", "localhost:8080", "127.0.0.1:80", "[::1]:8080", "[::1]",
                           "example.com", "", " localhost ", "a.b-c_d~", "xn--bcher-kva.example",
                           "localhost:", "[fe80::1%25eth0]", "caf%C3%A9.example"}) {
    EXPECT_TRUE(IsValidHostValue(good)) << good;
  }
  for (const char* bad :
       {"local host", "user@localhost", "localhost/x", "[::1", "[::1]x", "::1", "localhost:80x",
        "h:1:2", "a?b", "a#b", "%zz", "a%4", "\x01", "[]", "\"localhost\"", "localhost\r\n"}) {
    EXPECT_FALSE(IsValidHostValue(bad)) << bad;
  }
  namespace http = boost::beast::http;
  HttpRequest r(http::verb::get, "/health", 11);
  r.insert(http::field::host, "evil host");
  const absl::Status s = CheckHostHeader(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("evil host"), absl::string_view::npos) << s;
}

TEST(HttpServerTest, LoopbackOriginsAreRecognised) {
  for (const char* origin : {"http://localhost", "http://localhost:3000", "https://127.0.0.1",
                             "HTTP://[::1]:8080", "http://127.0.0.1:8080"}) {
    EXPECT_TRUE(IsLoopbackOrigin(origin)) << origin;
  }
  for (const char* origin :
       {"", "null", "localhost", "https://attacker.example", "http://localhost.attacker.example",
        "file://", "ftp://localhost", "http://127.0.0.1/path", "http://user@127.0.0.1",
        "http://127.0.0.1.nip.io"}) {
    EXPECT_FALSE(IsLoopbackOrigin(origin)) << origin;
  }
}

TEST(HttpServerTest, ARequestTargetsPathIsReadInOriginAndAbsoluteForm) {
  std::optional<std::string> authority = "stale";
  EXPECT_EQ(RequestTargetPath("/v1/models?limit=2", &authority), "/v1/models");
  EXPECT_EQ(authority, std::nullopt);
  EXPECT_EQ(RequestTargetPath("?x", &authority), "/");
  EXPECT_EQ(RequestTargetPath("*"), "*");
  EXPECT_EQ(RequestTargetPath("http://localhost:8080/v1/models?x=1", &authority), "/v1/models");
  EXPECT_EQ(authority, "localhost:8080");
  EXPECT_EQ(RequestTargetPath("HTTPS://[::1]", &authority), "/");
  EXPECT_EQ(authority, "[::1]");
  EXPECT_EQ(RequestTargetPath("http://127.0.0.1?q", &authority), "/");
  EXPECT_EQ(authority, "127.0.0.1");
  EXPECT_EQ(RequestTargetPath("http:///health", &authority), "/health");
  EXPECT_EQ(authority, "");  // No host: not a loopback name, so refused without keys.
  // Only the scheme prefix makes the absolute form; a path that merely contains one is a path.
  EXPECT_EQ(RequestTargetPath("/a/http://b", &authority), "/a/http://b");
  EXPECT_EQ(authority, std::nullopt);
}

TEST(HttpServerTest, OnlyIdentityOrAnEmptyValueIsNoContentCoding) {
  for (const char* coding : {"identity", "Identity", " IDENTITY ", ""}) {
    EXPECT_TRUE(IsIdentityCoding(coding)) << coding;
  }
  for (const char* coding : {"gzip", "br", "identity, gzip", "x-identity"}) {
    EXPECT_FALSE(IsIdentityCoding(coding)) << coding;
  }
}

TEST(HttpServerTest, ExplicitHttpStatusRidesOnTheStatus) {
  absl::Status s = WithHttpStatus(absl::InvalidArgumentError("too big"), 413);

  EXPECT_EQ(HttpStatusOf(s), 413);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpStatusOf(absl::InvalidArgumentError("x")), 0);
}

TEST(HttpServerTest, RouterDistinguishesUnknownPathsFromWrongMethods) {
  Router router;
  router.Add(HttpVerb::post, "/v1/x", {}, [](std::shared_ptr<HttpExchange>) {});
  bool known = false;

  EXPECT_NE(router.Find(HttpVerb::post, "/v1/x", &known), nullptr);
  EXPECT_EQ(router.Find(HttpVerb::get, "/v1/x", &known), nullptr);
  EXPECT_TRUE(known);
  EXPECT_EQ(router.Find(HttpVerb::post, "/v1/y", &known), nullptr);
  EXPECT_FALSE(known);
}

TEST(HttpServerTest, HeadFindsTheGetRouteAndAllowListsTheMethods) {
  Router router;
  router.Add(HttpVerb::get, "/v1/models", {}, [](std::shared_ptr<HttpExchange>) {});
  router.Add(HttpVerb::post, "/v1/x", {}, [](std::shared_ptr<HttpExchange>) {});
  router.Add(HttpVerb::get, "/", {}, [](std::shared_ptr<HttpExchange>) {});
  router.Add(HttpVerb::head, "/", {.public_route = true}, [](std::shared_ptr<HttpExchange>) {});
  bool known = false;

  const Router::Route* head = router.Find(HttpVerb::head, "/v1/models", &known);
  const Router::Route* root = router.Find(HttpVerb::head, "/", &known);

  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->verb, HttpVerb::get);
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->verb, HttpVerb::head);
  EXPECT_EQ(router.Find(HttpVerb::head, "/v1/x", &known), nullptr);
  EXPECT_TRUE(known);
  EXPECT_EQ(router.AllowedMethods("/v1/models"), "GET, HEAD");
  EXPECT_EQ(router.AllowedMethods("/v1/x"), "POST");
  EXPECT_EQ(router.AllowedMethods("/"), "GET, HEAD");
  EXPECT_EQ(router.AllowedMethods("/v1/y"), "");
}

TEST(HttpServerTest, PrefixRoutesServeThePathsUnderThemAndExactRoutesWin) {
  Router router;
  router.AddPrefix(HttpVerb::get, "/v1/models/", {}, [](std::shared_ptr<HttpExchange>) {});
  router.Add(HttpVerb::get, "/v1/models/special", {}, [](std::shared_ptr<HttpExchange>) {});
  bool known = false;

  const Router::Route* id = router.Find(HttpVerb::get, "/v1/models/Qwen/Qwen3-8B", &known);
  const Router::Route* special = router.Find(HttpVerb::get, "/v1/models/special", &known);

  ASSERT_NE(id, nullptr);
  EXPECT_TRUE(id->prefix);
  ASSERT_NE(special, nullptr);
  EXPECT_FALSE(special->prefix);
  EXPECT_EQ(router.Find(HttpVerb::get, "/v1/models", &known), nullptr);
  EXPECT_FALSE(known);
  EXPECT_EQ(router.Find(HttpVerb::post, "/v1/models/x", &known), nullptr);
  EXPECT_TRUE(known);
  EXPECT_EQ(router.AllowedMethods("/v1/models/x"), "GET, HEAD");
}

// CPU time this process has used, all threads.
absl::Duration ProcessCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

// A process out of file descriptors (RLIMIT_NOFILE reached) cannot accept the connection that
// waits in the backlog: accept fails at once with EMFILE, again and again, until a descriptor is
// freed. The listener must wait between tries rather than spin a thread on them, and accept the
// connection once it can.
TEST(HttpServerTest, AcceptWaitsOutAFullDescriptorTableAndThenServes) {
  Router router;
  router.Add(HttpVerb::get, "/health", {.public_route = true},
             [](std::shared_ptr<HttpExchange> ex) {
               ex->Respond(HttpResponse{200, "", "ok", {}});
             });
  HttpServerOptions options;
  options.port = 0;
  options.threads = 2;
  auto server =
      HttpServer::Start(options, std::move(router), [](const absl::Status& s, absl::string_view) {
        return HttpResponse{500, "", std::string(s.message()), {}};
      });
  ASSERT_TRUE(server.ok()) << server.status();
  // Fills the descriptor table under a lowered limit, leaving one for the client's socket.
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 256);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fillers;
  for (int fd; (fd = dup(STDERR_FILENO)) >= 0;) fillers.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  ASSERT_FALSE(fillers.empty());
  close(fillers.back());
  fillers.pop_back();
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(client, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);

  const absl::Duration cpu_before = ProcessCpuTime();
  absl::SleepFor(absl::Milliseconds(500));
  const absl::Duration cpu_spent = ProcessCpuTime() - cpu_before;
  for (int fd : fillers) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  timeval timeout{.tv_sec = 10, .tv_usec = 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const std::string request =
      "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(send(client, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string answer;
  char buf[1024];
  for (ssize_t n; (n = recv(client, buf, sizeof(buf), 0)) > 0;) answer.append(buf, n);
  close(client);

  EXPECT_LT(cpu_spent, absl::Milliseconds(100)) << "the accept loop spun";
  EXPECT_EQ(answer.substr(0, 15), "HTTP/1.1 200 OK") << answer;
}

TEST(HttpServerDeathTest, RouterRefusesPublicRoutesOutsideTheAllowlist) {
  Router router;
  router.Add(HttpVerb::get, "/health", {.public_route = true}, nullptr);

  EXPECT_DEATH(router.Add(HttpVerb::post, "/tokenize", {.public_route = true}, nullptr), "");
}

}  // namespace
}  // namespace cairn::gateway
