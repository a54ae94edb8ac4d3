#include <atomic>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "common/concurrency/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/cache/sim/replay_log.h"
#include "tests/support/status_matchers.h"
#include "tools/cairnctl/command.h"
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

TEST(CompletionStreamTest, FieldsOfTheWrongTypeAreTheRequestsErrorNotAnAbort) {
  // Each final event carries one bad field; nlohmann's value() threw on all but the last, and
  // converting 1e300 to int64 was undefined.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("cairn": {"tier": 1})", "cairn.tier is not a string"},
      {R"("cairn": {"tier": "ram"}, "usage": {"completion_tokens": null})",
       "usage.completion_tokens is not a number"},
      {R"("cairn": {"tier": "ram"}, "usage": {"prompt_tokens_details": {"cached_tokens": "5"}})",
       "usage.prompt_tokens_details.cached_tokens is not a number"},
      {R"("cairn": {"depth": 1e300})", "cairn.depth is not a count"},
      {R"("cairn": {"depth": -1e300})", "cairn.depth is not a count"},
      {R"("cairn": {"depth": 2.5})", "cairn.depth is not a count"},
      {R"("cairn": {"depth": 18446744073709551615})", "cairn.depth is out of range"},
      {R"("cairn": {"restore_ms": "fast"})", "cairn.restore_ms is not a number"},
      {R"("cairn": {"captures": [1]})", "cairn.captures is not a number"},
  };
  for (const auto& [fields, message] : cases) {
    CompletionStream stream;
    stream.Feed(
        absl::StrCat("data: {\"choices\": [{\"text\": \"a\", \"finish_reason\": \"length\"}], ",
                     fields, "}\n\ndata: [DONE]\n\n"));
    cache::sim::ReplayRecord r;
    stream.Fill(&r);

    EXPECT_EQ(r.error, absl::StrCat("malformed event: ", message)) << fields;
  }
}

TEST(CompletionStreamTest, IntegralFloatsAreCounts) {
  CompletionStream stream;
  stream.Feed(
      "data: {\"choices\": [{\"text\": \"a\", \"finish_reason\": \"length\"}], \"cairn\": "
      "{\"tier\": \"ram\", \"depth\": 4096.0, \"ttft_ms\": 7}, \"usage\": "
      "{\"completion_tokens\": 3}}\n\n");
  cache::sim::ReplayRecord r;
  stream.Fill(&r);

  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.depth, 4096);
  EXPECT_DOUBLE_EQ(r.server_ttft_ms, 7);
  EXPECT_EQ(r.completion_tokens, 3);
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
       {"https://x", "127.0.0.1:80", "http://", "http://x:0", "http://x:99999", "http://x:port",
        "http://[::1]junk:47180", "http://[::1]junk", "http://::1:80", "http://[::1"}) {
    EXPECT_THAT(ParseHttpUrl(bad).status(), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(HttpClientTest, UnreachableServerIsUnavailable) {
  // Port 1 on loopback: nothing listens there in a test sandbox.
  HttpClient client({"127.0.0.1", "1", ""}, absl::Seconds(5));

  EXPECT_THAT(client.Get("/health").status(), StatusIs(absl::StatusCode::kUnavailable));
}

// A TCP listener on 127.0.0.1 that never accepts: the kernel completes connections into its
// backlog, so a client connects and sends, and then no answer ever comes.
class SilentServer {
 public:
  SilentServer() : acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {}
  std::string port() const { return absl::StrCat(acceptor_.local_endpoint().port()); }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port()); }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
};

TEST(HttpClientTest, ASilentServerIsDeadlineExceededWithinTheTimeout) {
  SilentServer server;
  // Sub-second: SO_RCVTIMEO took whole seconds, so 300ms used to mean no timeout at all.
  HttpClient client({"127.0.0.1", server.port(), ""}, absl::Milliseconds(300));
  const absl::Time start = absl::Now();

  absl::StatusOr<HttpResult> get = client.Get("/v1/models");
  absl::StatusOr<HttpResult> post = client.Post("/v1/completions", "{}", [](absl::string_view) {});

  EXPECT_THAT(get.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(post.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(HttpClientTest, AStreamThatStallsIsDeadlineExceeded) {
  // Answers the headers and one event of a chunked stream, then says nothing more.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const std::string port = absl::StrCat(acceptor.local_endpoint().port());
  std::thread server([&] {
    boost::asio::ip::tcp::socket socket(io);
    boost::system::error_code ec;
    acceptor.accept(socket, ec);
    if (ec) return;
    char buffer[4096];
    socket.read_some(boost::asio::buffer(buffer), ec);
    const std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        "6\r\ndata: \r\n";
    boost::asio::write(socket, boost::asio::buffer(head), ec);
    // Hold the connection until the client gives up and closes it.
    socket.read_some(boost::asio::buffer(buffer), ec);
  });
  HttpClient client({"127.0.0.1", port, ""}, absl::Milliseconds(300));
  std::string seen;

  absl::StatusOr<HttpResult> r = client.Post(
      "/v1/completions", "{}", [&](absl::string_view b) { seen.append(b.data(), b.size()); });
  server.join();

  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(seen, "data: ");
}

// A stand-in for cairn-gateway on 127.0.0.1: /v1/models and streamed /v1/completions whose
// `cairn` object says "cold" for a conversation's first request and "ram" at the previous
// prompt's length after that. Records what it saw. One thread per connection.
class FakeGateway {
 public:
  FakeGateway() : acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~FakeGateway() {
    // A blocked accept() does not return when the acceptor closes; one last connection wakes it.
    stopping_ = true;
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket wake(io);
    boost::system::error_code ec;
    wake.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_)}, ec);
    accept_thread_.join();
    for (std::thread& t : connections_) t.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

  struct Seen {
    std::string conv;
    int64_t prompt_tokens = 0;
    int64_t max_id = 0;
    int64_t max_tokens = 0;
  };
  std::vector<Seen> seen() {
    MutexLock lock(&mu_);
    return seen_;
  }
  int max_in_flight_per_conv() {
    MutexLock lock(&mu_);
    return max_in_flight_;
  }

 private:
  void AcceptLoop() {
    while (true) {
      boost::asio::ip::tcp::socket socket(io_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec || stopping_) return;
      connections_.emplace_back([this, s = std::make_shared<boost::asio::ip::tcp::socket>(
                                           std::move(socket))] { Serve(*s); });
    }
  }

  void Serve(boost::asio::ip::tcp::socket& socket) {
    namespace http = boost::beast::http;
    boost::beast::flat_buffer buffer;
    while (true) {
      http::request<http::string_body> req;
      boost::system::error_code ec;
      http::read(socket, buffer, req, ec);
      if (ec) return;
      http::response<http::string_body> res(http::status::ok, 11);
      res.keep_alive(true);
      if (req.target() == "/v1/models") {
        res.body() = R"({"object": "list", "data": [{"id": "fake"}]})";
      } else {
        res.body() = Complete(req.body());
        res.set(http::field::content_type, "text/event-stream");
      }
      res.prepare_payload();
      http::write(socket, res, ec);
      if (ec) return;
    }
  }

  std::string Complete(const std::string& body) {
    nlohmann::json j = nlohmann::json::parse(body);
    Seen s;
    s.conv = j.value("prompt_cache_key", "");
    s.prompt_tokens = static_cast<int64_t>(j["prompt"].size());
    for (const auto& id : j["prompt"]) s.max_id = std::max(s.max_id, id.get<int64_t>());
    s.max_tokens = j.value("max_tokens", int64_t{0});
    int64_t depth = 0;
    {
      MutexLock lock(&mu_);
      depth = last_prompt_[s.conv];
      last_prompt_[s.conv] = s.prompt_tokens;
      max_in_flight_ = std::max(max_in_flight_, ++in_flight_[s.conv]);
      seen_.push_back(s);
    }
    // Long enough for a second request of the conversation to overlap if the client let it.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    {
      MutexLock lock(&mu_);
      --in_flight_[s.conv];
    }
    nlohmann::json last = {{"choices", {{{"text", ""}, {"finish_reason", "length"}}}},
                           {"cairn",
                            {{"tier", depth > 0 ? "ram" : "cold"},
                             {"depth", depth},
                             {"prefilled_tokens", s.prompt_tokens - depth},
                             {"restore_ms", depth > 0 ? 1.0 : 0.0},
                             {"capture_ms", 0.5},
                             {"ttft_ms", 10.0},
                             {"captures", 1}}},
                           {"usage",
                            {{"completion_tokens", s.max_tokens},
                             {"prompt_tokens_details", {{"cached_tokens", depth}}}}}};
    return absl::StrCat(
        ": ping\n\ndata: {\"choices\": [{\"text\": \"x\", \"finish_reason\": null}]}\n\n",
        "data: ", last.dump(), "\n\ndata: [DONE]\n\n");
  }

  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::vector<std::thread> connections_;  // Touched by the accept thread only, then joined.
  Mutex mu_;
  std::vector<Seen> seen_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> last_prompt_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);
  int max_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(ReplayCommandTest, ReplaysATraceInOrderAndWritesCsvAndSummary) {
  FakeGateway gateway;
  const std::string dir = ::testing::TempDir();
  const std::string trace = dir + "/replay_command_trace.jsonl";
  const std::string csv = dir + "/replay_command.csv";
  std::ofstream(trace)
      << "{\"conv\": \"A\", \"t\": 0, \"segments\": [{\"rand\": 1, \"len\": 100}], \"gen\": 50}\n"
         "{\"conv\": \"B\", \"t\": 0, \"segments\": [{\"rand\": 2, \"len\": 80}], \"gen\": 3}\n"
         "{\"conv\": \"A\", \"t\": 0, \"segments\": [{\"rand\": 1, \"len\": 150}], \"gen\": 3}\n"
         "{\"conv\": \"A\", \"t\": 0, \"segments\": [{\"rand\": 1, \"len\": 170}]}\n"
         "{\"conv\": \"B\", \"t\": 0, \"segments\": [{\"ids\": [5, 1000000]}], \"gen\": 1}\n";
  std::vector<std::string> args = {
      "cairnctl",      "replay", "--trace",   trace, "--gateway",   gateway.url(),
      "--concurrency", "3",      "--speedup", "0",   "--vocab",     "1000",
      "--max-gen",     "8",      "--csv",     csv,   "--noprogress"};
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;

  const int code = RunCairnctl(static_cast<int>(argv.size()), argv.data(), out, err);

  ASSERT_EQ(code, 0) << err.str();
  EXPECT_EQ(gateway.max_in_flight_per_conv(), 1);
  std::vector<FakeGateway::Seen> seen = gateway.seen();
  ASSERT_EQ(seen.size(), 5u);
  for (const FakeGateway::Seen& s : seen) {
    EXPECT_LT(s.max_id, 1000) << s.conv;
    EXPECT_GE(s.max_tokens, 1);
    EXPECT_LE(s.max_tokens, 8);
  }
  absl::StatusOr<std::vector<cache::sim::ReplayRecord>> records = cache::sim::ReadReplayCsv(csv);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 5u);
  // Conversation A's requests went out in trace order, each after the previous one.
  EXPECT_EQ((*records)[0].tier, "cold");
  EXPECT_EQ((*records)[2].tier, "ram");
  EXPECT_EQ((*records)[2].depth, 100);
  EXPECT_EQ((*records)[3].reused, 150);
  EXPECT_EQ((*records)[3].gen_tokens, 1);  // No gen: one token, for a first token.
  EXPECT_EQ((*records)[0].gen_tokens, 8);  // Capped by --max-gen.
  EXPECT_GE((*records)[2].sent_s, (*records)[0].sent_s + (*records)[0].total_ms / 1000 - 1e-3);
  for (const cache::sim::ReplayRecord& r : *records) {
    EXPECT_TRUE(r.error.empty()) << r.error;
    EXPECT_GT(r.ttft_ms, 0);
    EXPECT_LE(r.ttft_ms, r.total_ms);
  }
  EXPECT_THAT(out.str(), ::testing::HasSubstr("5 ok, 0 failed"));
}

TEST(ReplayCommandTest, UnreachableGatewayFailsClearly) {
  const std::string trace = ::testing::TempDir() + "/replay_command_unreachable.jsonl";
  std::ofstream(trace) << "{\"conv\": \"A\", \"segments\": [{\"ids\": [1]}]}\n";
  std::vector<std::string> args = {
      "cairnctl", "replay", "--trace", trace, "--gateway", "http://127.0.0.1:1", "--noprogress"};
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;

  EXPECT_EQ(RunCairnctl(static_cast<int>(argv.size()), argv.data(), out, err), 1);
  EXPECT_THAT(err.str(), ::testing::HasSubstr("/v1/models"));
}

struct Outcome {
  int code = -1;
  std::string out;
  std::string err;
};

Outcome Replay(std::vector<std::string> args) {
  args.insert(args.begin(), {"cairnctl", "replay", "--noprogress"});
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = RunCairnctl(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

std::string WriteTrace(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ReplayCommandTest, TheTimeoutBoundsEveryRequestAndTheModelsProbe) {
  SilentServer gateway;
  const std::string trace =
      WriteTrace("replay_timeout.jsonl", "{\"conv\": \"A\", \"segments\": [{\"ids\": [1]}]}\n");
  const absl::Time start = absl::Now();

  const Outcome probe =
      Replay({"--trace", trace, "--gateway", gateway.url(), "--timeout", "300ms"});
  const Outcome request =
      Replay({"--trace", trace, "--gateway", gateway.url(), "--timeout", "300ms", "--model", "m"});

  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(probe.code, 1);
  EXPECT_THAT(probe.err, ::testing::HasSubstr("/v1/models"));
  EXPECT_THAT(probe.err, ::testing::HasSubstr("longer than the timeout (300ms)"));
  EXPECT_EQ(request.code, 1);
  EXPECT_THAT(request.err, ::testing::HasSubstr("longer than the timeout (300ms)"));
}

TEST(ReplayCommandTest, AMalformedEventFailsItsRequestAndTheReplayGoesOn) {
  // A gateway whose final events carry a field of the wrong type ("tier": 1) used to abort the
  // whole replay with an uncaught nlohmann::type_error.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const std::string url = absl::StrCat("http://127.0.0.1:", acceptor.local_endpoint().port());
  std::thread server([&] {
    namespace http = boost::beast::http;
    boost::asio::ip::tcp::socket socket(io);
    boost::system::error_code ec;
    acceptor.accept(socket, ec);
    boost::beast::flat_buffer buffer;
    for (int i = 0; i < 2 && !ec; ++i) {
      http::request<http::string_body> req;
      http::read(socket, buffer, req, ec);
      if (ec) return;
      http::response<http::string_body> res(http::status::ok, 11);
      res.keep_alive(true);
      res.body() =
          "data: {\"choices\": [{\"text\": \"a\", \"finish_reason\": \"length\"}], \"cairn\": "
          "{\"tier\": 1}, \"usage\": {\"completion_tokens\": null}}\n\ndata: [DONE]\n\n";
      res.prepare_payload();
      http::write(socket, res, ec);
    }
  });
  const std::string trace = WriteTrace("replay_malformed.jsonl",
                                       "{\"conv\": \"A\", \"segments\": [{\"ids\": [1]}]}\n"
                                       "{\"conv\": \"A\", \"segments\": [{\"ids\": [1, 2]}]}\n");

  const Outcome o = Replay(
      {"--trace", trace, "--gateway", url, "--model", "m", "--speedup", "0", "--concurrency", "1"});
  server.join();

  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_THAT(o.out, ::testing::HasSubstr("0 ok, 2 failed"));
  EXPECT_THAT(o.err, ::testing::HasSubstr("malformed event: cairn.tier is not a string"));
}

TEST(ReplayCommandTest, BadFlagsAreExitTwoBeforeAnyRequest) {
  const std::string trace = WriteTrace(
      "replay_flags.jsonl", "{\"conv\": \"A\", \"t\": 14.5, \"segments\": [{\"ids\": [1]}]}\n");
  const std::string far = WriteTrace(
      "replay_far.jsonl", "{\"conv\": \"A\", \"t\": 1e300, \"segments\": [{\"ids\": [1]}]}\n");
  // Port 1: nothing listens, so reaching the network would be exit 1, not 2.
  const std::vector<std::string> base = {"--trace", trace, "--gateway", "http://127.0.0.1:1"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--model", "\xff"}, "--model is not valid UTF-8"},
      {{"--concurrency", "1000000"}, "--concurrency: \"1000000\" is out of range"},
      {{"--concurrency", "0"}, "--concurrency"},
      {{"--speedup", "1e-300"}, "more than 30 days after the start"},
      {{"--speedup", "inf"}, "--speedup"},
      {{"--speedup", "nan"}, "--speedup: \"nan\" is not a number"},
      {{"--timeout", "0"}, "--timeout"},
      {{"--timeout", "-1s"}, "--timeout"},
      {{"--timeout", "inf"}, "--timeout"},
      {{"--vocab", "1"}, "--vocab"},
      {{"--gateway", "http://[::1]junk:47180"}, "junk after ]"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), flags.begin(), flags.end());

    const Outcome o = Replay(args);

    EXPECT_EQ(o.code, 2) << flags[0] << " " << flags[1] << ": " << o.err;
    EXPECT_THAT(o.err, ::testing::HasSubstr(message)) << flags[0];
  }
  const Outcome infinite = Replay({"--trace", far, "--gateway", "http://127.0.0.1:1"});
  EXPECT_EQ(infinite.code, 2) << infinite.err;
  EXPECT_THAT(infinite.err, ::testing::HasSubstr("replay_far.jsonl:1: arrival time"));
}

}  // namespace
}  // namespace cairn::cairnctl
