// cairnctl's online verbs against a live cache daemon (in this process).

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/services/cache/fake_infer.h"
#include "tools/cairnctl/command.h"

namespace cairn::cache {
namespace {

using testing::FakeInfer;
using testing::Server;
using testing::Tokens;

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result Ctl(const std::string& address, std::vector<std::string> args) {
  args.insert(args.begin(), "cairnctl");
  args.push_back("--addr=" + address);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  int code = cairnctl::RunCairnctl(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

class CairnctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    infer_ = std::make_unique<FakeInfer>(server_.address());
    ASSERT_NO_FATAL_FAILURE(infer_->Open());
    ids_ = infer_->PrefillCold(0, Tokens(1, 80), {32, 80}, 5);
    ASSERT_EQ(ids_.size(), 2u);
  }

  Server server_;
  std::unique_ptr<FakeInfer> infer_;
  std::vector<uint64_t> ids_;
};

TEST_F(CairnctlTest, ListAndDescribeGoThroughReflection) {
  Result list = Ctl(server_.address(), {"list"});
  Result methods = Ctl(server_.address(), {"list", "cairn.cache.v1.CacheService"});
  Result describe = Ctl(server_.address(), {"describe", "cairn.cache.v1.EvictRequest"});

  EXPECT_EQ(list.code, 0) << list.err;
  EXPECT_NE(list.out.find("cairn.cache.v1.CacheService"), std::string::npos);
  EXPECT_NE(list.out.find("grpc.health.v1.Health"), std::string::npos);
  EXPECT_NE(methods.out.find("cairn.cache.v1.CacheService.Lookup"), std::string::npos);
  EXPECT_EQ(describe.code, 0) << describe.err;
  EXPECT_NE(describe.out.find("bool include_disk = 3;"), std::string::npos);
}

TEST_F(CairnctlTest, CallSendsJsonAndPrintsJson) {
  Result r = Ctl(server_.address(), {"call", "cairn.cache.v1.CacheService/ListCheckpoints",
                                     "{\"tier\": \"TIER_RAM\"}"});

  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"checkpoint_id\": \"" + std::to_string(ids_[1]) + "\""), std::string::npos)
      << r.out;
}

TEST_F(CairnctlTest, CallRejectsBadInputClearly) {
  Result bad_json =
      Ctl(server_.address(), {"call", "cairn.cache.v1.CacheService/Evict", "{\"nope\": 1}"});
  Result no_method = Ctl(server_.address(), {"call", "cairn.cache.v1.CacheService/Nope"});
  Result client_streaming = Ctl(server_.address(), {"call", "cairn.cache.v1.CacheService/Session"});
  Result server_streaming =
      Ctl(server_.address(), {"call", "cairn.cache.v1.CacheService/StreamEvents"});
  Result server_error = Ctl(
      server_.address(), {"call", "cairn.cache.v1.CacheService/Evict", "{\"checkpointId\": 999}"});

  EXPECT_EQ(bad_json.code, 2);
  EXPECT_NE(bad_json.err.find("bad JSON"), std::string::npos);
  EXPECT_EQ(no_method.code, 1);
  EXPECT_EQ(client_streaming.code, 2);
  EXPECT_EQ(server_streaming.code, 0) << server_streaming.err;
  EXPECT_EQ(server_error.code, 1);
  EXPECT_NE(server_error.err.find("NOT_FOUND"), std::string::npos) << server_error.err;
}

// grpcurl takes "pkg.Service.Method" as well as "pkg.Service/Method", and a request too large for
// the command line from a file or standard input ("-d @").
TEST_F(CairnctlTest, CallTakesTheDottedMethodNameAndARequestFromAFile) {
  const std::string file = ::testing::TempDir() + "/cairnctl-request.json";
  std::ofstream(file) << "{\"tier\": \"TIER_RAM\"}";

  Result dotted = Ctl(server_.address(), {"call", "cairn.cache.v1.CacheService.GetStatus"});
  Result from_file =
      Ctl(server_.address(), {"call", "cairn.cache.v1.CacheService/ListCheckpoints", "@" + file});
  Result missing = Ctl(server_.address(),
                       {"call", "cairn.cache.v1.CacheService/ListCheckpoints", "@/nonexistent"});
  Result no_method = Ctl(server_.address(), {"call", "GetStatus"});

  EXPECT_EQ(dotted.code, 0) << dotted.err;
  EXPECT_NE(dotted.out.find("cache_incarnation"), std::string::npos) << dotted.out;
  EXPECT_EQ(from_file.code, 0) << from_file.err;
  EXPECT_NE(from_file.out.find(std::to_string(ids_[1])), std::string::npos) << from_file.out;
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("cannot read /nonexistent"), std::string::npos) << missing.err;
  EXPECT_EQ(no_method.code, 2);
}

TEST_F(CairnctlTest, AStrayArgumentIsAnErrorNotIgnored) {
  for (const char* verb : {"status", "checkpoints", "tree", "events", "flush"}) {
    Result r = Ctl(server_.address(), {verb, "stray"});

    EXPECT_EQ(r.code, 2) << verb << ": " << r.out;
    EXPECT_NE(r.err.find("unexpected argument 'stray'"), std::string::npos)
        << verb << ": " << r.err;
  }
  Result list = Ctl(server_.address(), {"list", "cairn.cache.v1.CacheService", "stray"});
  EXPECT_EQ(list.code, 2) << list.out;
}

TEST_F(CairnctlTest, AVerbSentToTheWrongDaemonSaysSo) {
  // The cache daemon does not serve cairn-infer's ListSlots.
  Result r = Ctl(server_.address(), {"slots"});

  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("UNIMPLEMENTED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--addr"), std::string::npos) << r.err;
}

TEST_F(CairnctlTest, FriendlyVerbsShowTheCache) {
  Result status = Ctl(server_.address(), {"status"});
  Result checkpoints = Ctl(server_.address(), {"checkpoints"});
  Result tree = Ctl(server_.address(), {"tree"});
  Result events = Ctl(server_.address(), {"events", "--limit=1"});

  EXPECT_EQ(status.code, 0) << status.err;
  EXPECT_NE(status.out.find("2 checkpoints"), std::string::npos) << status.out;
  EXPECT_EQ(checkpoints.code, 0);
  EXPECT_NE(checkpoints.out.find("conv-5"), std::string::npos) << checkpoints.out;
  EXPECT_NE(tree.out.find("@32"), std::string::npos) << tree.out;
  EXPECT_NE(tree.out.find("@80"), std::string::npos) << tree.out;
  EXPECT_EQ(events.code, 0);
  EXPECT_NE(events.out.find("admit"), std::string::npos) << events.out;
}

TEST_F(CairnctlTest, EvictRemovesACheckpoint) {
  Result evict = Ctl(server_.address(), {"evict", std::to_string(ids_[0])});
  Result again = Ctl(server_.address(), {"evict", std::to_string(ids_[0])});
  Result usage = Ctl(server_.address(), {"evict"});

  EXPECT_EQ(evict.code, 0) << evict.err;
  EXPECT_NE(evict.out.find("evicted 1"), std::string::npos);
  EXPECT_EQ(again.code, 1);
  EXPECT_EQ(usage.code, 2);
}

TEST_F(CairnctlTest, AnUnreachableDaemonIsAClearError) {
  Result r = Ctl("unix:/nonexistent/cairn.sock", {"status", "--timeout=500ms"});

  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
}

TEST_F(CairnctlTest, ExplainSaysWhatAPromptWouldRestore) {
  std::vector<std::string> args = {"explain"};
  for (uint32_t t : Tokens(1, 81)) args.push_back(std::to_string(t));
  std::vector<std::string> cold = {"explain", "1", "2", "3"};

  Result hit = Ctl(server_.address(), args);
  Result miss = Ctl(server_.address(), cold);
  Result bad = Ctl(server_.address(), {"explain", "x1"});

  EXPECT_EQ(hit.code, 0) << hit.err;
  EXPECT_NE(hit.out.find("restores 80 of 81 tokens"), std::string::npos) << hit.out;
  EXPECT_NE(hit.out.find("#" + std::to_string(ids_[1])), std::string::npos) << hit.out;
  EXPECT_EQ(miss.code, 0) << miss.err;
  EXPECT_NE(miss.out.find("cold"), std::string::npos) << miss.out;
  EXPECT_EQ(bad.code, 2);
}

TEST_F(CairnctlTest, JsonIsHonouredByListDescribeEvictAndFlush) {
  using Json = nlohmann::json;
  Result list = Ctl(server_.address(), {"list", "--json"});
  Result methods = Ctl(server_.address(), {"list", "--json", "cairn.cache.v1.CacheService"});
  Result describe = Ctl(server_.address(), {"describe", "--json", "cairn.cache.v1.EvictRequest"});
  Result evict = Ctl(server_.address(), {"evict", "--json", std::to_string(ids_[0])});
  Result flush = Ctl(server_.address(), {"flush", "--json"});

  ASSERT_EQ(list.code, 0) << list.err;
  const Json services = Json::parse(list.out, nullptr, false);
  ASSERT_TRUE(services.is_array()) << list.out;
  EXPECT_NE(std::find(services.begin(), services.end(), Json("cairn.cache.v1.CacheService")),
            services.end())
      << list.out;
  const Json method_names = Json::parse(methods.out, nullptr, false);
  ASSERT_TRUE(method_names.is_array()) << methods.out;
  EXPECT_NE(std::find(method_names.begin(), method_names.end(),
                      Json("cairn.cache.v1.CacheService.Lookup")),
            method_names.end());
  ASSERT_EQ(describe.code, 0) << describe.err;
  const Json message = Json::parse(describe.out, nullptr, false);
  ASSERT_TRUE(message.is_object()) << describe.out;
  EXPECT_EQ(message.value("name", ""), "EvictRequest") << describe.out;
  ASSERT_EQ(evict.code, 0) << evict.err;
  EXPECT_TRUE(Json::parse(evict.out, nullptr, false).is_object()) << evict.out;
  ASSERT_EQ(flush.code, 0) << flush.err;
  EXPECT_TRUE(Json::parse(flush.out, nullptr, false).is_object()) << flush.out;
}

TEST_F(CairnctlTest, FollowingEventsEndsAtTheGivenTimeout) {
  const absl::Time start = absl::Now();

  Result follow = Ctl(server_.address(), {"events", "--follow", "--timeout=1s"});

  EXPECT_EQ(follow.code, 0) << follow.err;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_NE(follow.out.find("admit"), std::string::npos) << follow.out;
}

TEST_F(CairnctlTest, EvictWithAnIdAndAllIsRefused) {
  Result both = Ctl(server_.address(), {"evict", std::to_string(ids_[0]), "--all"});
  Result status = Ctl(server_.address(), {"status"});

  EXPECT_EQ(both.code, 2) << both.err;
  EXPECT_NE(status.out.find("2 checkpoints"), std::string::npos) << status.out;
}

}  // namespace
}  // namespace cairn::cache
