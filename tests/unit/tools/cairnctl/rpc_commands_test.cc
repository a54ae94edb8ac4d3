// cairnctl's argument handling for its online verbs (ParseFlags in rpc_commands.cc and the verbs'
// own checks): a bad --addr or a bad default from the environment, a bad --timeout, a bad config
// file, and every malformed argument are refused before any call, with exit status 2.

#include <stdlib.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "cairn/infer/v1/infer.pb.h"
#include "common/config/flags.h"
#include "common/grpc/client.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/unit/tools/cairnctl/run_cairnctl.h"
#include "tools/cairnctl/command.h"
#include "tools/cairnctl/rpc_util.h"
#include "tools/cairnctl/verb_flags.h"

namespace cairn::cairnctl {
namespace {

using testing::Cairnctl;
using testing::Outcome;

// Sets an environment variable for the life of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

TEST(ParseFlagsTest, ABadAddrIsExitTwoNamingTheFlag) {
  FlagSet flags("cairnctl status", "");
  CommonFlags common;
  std::ostringstream out, err;
  int code = 0;

  ParseFlags(flags, common, {"--addr=garbage"}, out, err, &code);

  EXPECT_EQ(code, 2);
  EXPECT_EQ(err.str(),
            "cairnctl: --addr: peer address \"garbage\" has no port (want unix:PATH or "
            "HOST:PORT)\n");
}

TEST(ParseFlagsTest, AGoodAddrGoesOn) {
  FlagSet flags("cairnctl status", "");
  CommonFlags common;
  std::ostringstream out, err;
  int code = 0;

  ParseFlags(flags, common, {"--addr", "unix:///run/cairn/cache.sock"}, out, err, &code);

  EXPECT_EQ(code, -1) << err.str();
  EXPECT_EQ(common.addr, "unix:///run/cairn/cache.sock");
}

TEST(CairnctlAddressTest, EveryOnlineVerbRefusesABadAddrBeforeCalling) {
  for (const char* verb : {"list", "status", "events", "flush", "slots", "model"}) {
    for (const char* addr : {"--addr=garbage", "--addr=unix:", "--addr=localhost:0"}) {
      const Outcome o = Cairnctl({verb, addr});

      EXPECT_EQ(o.code, 2) << verb << " " << addr << ": " << o.err;
      EXPECT_TRUE(absl::StrContains(o.err, "--addr: peer address")) << verb << ": " << o.err;
    }
  }
}

TEST(CairnctlAddressTest, ABadDefaultFromTheEnvironmentIsRefused) {
  ScopedEnv cache("CAIRN_CACHE_ADDR", "garbage");
  ScopedEnv infer("CAIRN_INFER_ADDR", "unix:");

  const Outcome status = Cairnctl({"status"});
  const Outcome slots = Cairnctl({"slots"});

  EXPECT_EQ(status.code, 2) << status.err;
  EXPECT_TRUE(absl::StrContains(status.err, "default --addr (from CAIRN_CACHE_ADDR")) << status.err;
  EXPECT_TRUE(absl::StrContains(status.err, "\"garbage\" has no port")) << status.err;
  EXPECT_EQ(slots.code, 2) << slots.err;
  EXPECT_TRUE(absl::StrContains(slots.err, "\"unix:\" has an empty unix socket path")) << slots.err;
}

TEST(CairnctlAddressTest, AGoodAddrThatNobodyServesIsACallFailureNotABadArgument) {
  ScopedEnv cache("CAIRN_CACHE_ADDR", "garbage");  // Unused: --addr wins.

  const Outcome o = Cairnctl({"status", "--addr=unix:/nonexistent/cache.sock", "--timeout=2s"});

  EXPECT_EQ(o.code, 1) << o.err;
}

// No daemon listens here: an argument that got as far as a call would be exit 1, not 2.
constexpr char kNobody[] = "--addr=unix:/nonexistent/cairnctl-test.sock";

TEST(CairnctlTimeoutTest, ZeroNegativeAndAbsurdTimeoutsAreExitTwo) {
  // "inf" and "2562047h" overflowed now + timeout (undefined behaviour in NewClientContext).
  for (const char* verb : {"status", "events", "slots", "list"}) {
    for (const char* timeout : {"inf", "2562047h", "721h", "-1s", "0", "0s"}) {
      const Outcome o = Cairnctl({verb, kNobody, "--timeout", timeout});

      EXPECT_EQ(o.code, 2) << verb << " --timeout " << timeout << ": " << o.err;
      EXPECT_TRUE(absl::StrContains(o.err, "--timeout: ")) << o.err;
    }
  }
}

TEST(CairnctlTimeoutTest, DeadlinesSaturateInsteadOfOverflowing) {
  using Clock = std::chrono::system_clock;
  const Clock::time_point before = Clock::now();

  EXPECT_EQ(DeadlineAfter(absl::InfiniteDuration()), Clock::time_point::max());
  EXPECT_EQ(DeadlineAfter(absl::Hours(2562047)), Clock::time_point::max());
  const Clock::time_point never = DeadlineAfter(-absl::InfiniteDuration());
  const Clock::time_point negative = DeadlineAfter(absl::Seconds(-1));
  const Clock::time_point in_a_minute = DeadlineAfter(absl::Minutes(1));
  const Clock::time_point after = Clock::now();
  EXPECT_LE(never, after);
  EXPECT_GE(never, before);
  EXPECT_LE(negative, after);
  EXPECT_GE(in_a_minute, before + std::chrono::seconds(60));
  EXPECT_LE(in_a_minute, after + std::chrono::seconds(60));
  EXPECT_EQ(NewClientContext(absl::InfiniteDuration())->deadline(), Clock::time_point::max());
}

TEST(CairnctlConfigTest, ADeviceADirectoryOrAHugeFileIsRefused) {
  const std::string big = ::testing::TempDir() + "/cairnctl_big.conf";
  std::ofstream(big) << "# " << std::string(kMaxConfigFileBytes, 'x') << "\n";
  const std::string ok = ::testing::TempDir() + "/cairnctl_ok.conf";
  std::ofstream(ok) << "timeout = 0\n";

  const Outcome zero = Cairnctl({"status", kNobody, "--config", "/dev/zero"});
  const Outcome dir = Cairnctl({"status", kNobody, "--config", ::testing::TempDir()});
  const Outcome huge = Cairnctl({"status", kNobody, "--config", big});
  const Outcome small = Cairnctl({"status", kNobody, "--config", ok});

  EXPECT_EQ(zero.code, 2) << zero.err;
  EXPECT_TRUE(absl::StrContains(zero.err, "/dev/zero: not a regular file")) << zero.err;
  EXPECT_EQ(dir.code, 2) << dir.err;
  EXPECT_TRUE(absl::StrContains(dir.err, "not a regular file (a directory)")) << dir.err;
  EXPECT_EQ(huge.code, 2) << huge.err;
  EXPECT_TRUE(absl::StrContains(huge.err, "larger than 1048576 bytes")) << huge.err;
  // A small regular file is still read: its bad timeout is the error.
  EXPECT_EQ(small.code, 2) << small.err;
  EXPECT_TRUE(absl::StrContains(small.err, "cairnctl_ok.conf:1: --timeout")) << small.err;
}

TEST(CairnctlArgumentsTest, EvictRefusesAnIdTogetherWithAll) {
  const Outcome both = Cairnctl({"evict", kNobody, "5", "--all"});
  const Outcome two = Cairnctl({"evict", kNobody, "5", "6"});

  EXPECT_EQ(both.code, 2) << both.err;
  EXPECT_TRUE(absl::StrContains(both.err, "not both (unexpected '5')")) << both.err;
  EXPECT_EQ(two.code, 2) << two.err;
}

TEST(CairnctlArgumentsTest, FilesThatCannotBeReadAreNamedAsSuch) {
  const std::string dir = ::testing::TempDir();

  const Outcome call_dir =
      Cairnctl({"call", kNobody, "cairn.cache.v1.CacheService/GetStatus", "@" + dir});
  const Outcome call_missing =
      Cairnctl({"call", kNobody, "cairn.cache.v1.CacheService/GetStatus", "@/nonexistent/x"});
  const Outcome ids_missing = Cairnctl({"generate", kNobody, "--prompt-ids", "/nonexistent/ids"});
  const Outcome ids_dir = Cairnctl({"generate", kNobody, "--prompt-ids", dir});
  const Outcome tokens_dir = Cairnctl({"explain", kNobody, "--tokens-file", dir});

  EXPECT_EQ(call_dir.code, 2) << call_dir.err;
  EXPECT_TRUE(absl::StrContains(call_dir.err, "is a directory")) << call_dir.err;
  EXPECT_EQ(call_missing.code, 2) << call_missing.err;
  EXPECT_TRUE(absl::StrContains(call_missing.err, "cannot read /nonexistent/x: No such file"))
      << call_missing.err;
  EXPECT_EQ(ids_missing.code, 2) << ids_missing.err;
  EXPECT_TRUE(absl::StrContains(ids_missing.err, "--prompt-ids: cannot read /nonexistent/ids"))
      << ids_missing.err;
  EXPECT_EQ(ids_dir.code, 2) << ids_dir.err;
  EXPECT_TRUE(absl::StrContains(ids_dir.err, "is a directory")) << ids_dir.err;
  EXPECT_EQ(tokens_dir.code, 2) << tokens_dir.err;
  EXPECT_TRUE(absl::StrContains(tokens_dir.err, "is a directory")) << tokens_dir.err;
}

TEST(CairnctlGenerateTest, BadArgumentsAreExitTwoBeforeAnyCall) {
  const std::string ids = ::testing::TempDir() + "/cairnctl_big_ids.json";
  std::ofstream(ids) << "[1, 4294967296]";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--max-tokens", "-5", "hi"}, "--max-tokens: \"-5\" is out of range"},
      {{"--seed", "-2", "hi"}, "--seed: \"-2\" is out of range"},
      {{"--temperature", "nan", "hi"}, "--temperature: \"nan\" is not a number"},
      {{"--prompt-ids", ids}, "holds 4294967296, which is not a token id"},
      {{"\xffhi"}, "PROMPT is not valid UTF-8 (at byte 0)"},
      {{"--stop", "a,\xc3", "hi"}, "--stop is not valid UTF-8"},
      {{"--conversation", "\xed\xa0\x80", "hi"}, "--conversation is not valid UTF-8"},
      {{"--chat", "[]"}, "--chat: holds no message"},
      {{"--chat", "{}"}, "--chat: must be a JSON array of messages"},
      {{"--chat", R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])"},
       "[0].content[0] is a \"image_url\" part"},
      {{"--chat", R"([{"role": "assistant", "tool_calls": []}])"},
       "[0].tool_calls is not supported by --chat"},
      {{"--chat", R"([{"role": "user", "content": 5}])"},
       "[0].content must be a string or an array of text parts"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> full = {"generate", kNobody};
    full.insert(full.end(), args.begin(), args.end());

    const Outcome o = Cairnctl(full);

    EXPECT_EQ(o.code, 2) << args[0] << ": " << o.err;
    EXPECT_TRUE(absl::StrContains(o.err, message)) << args[0] << ": " << o.err;
  }
}

TEST(ParseChatTest, TextPartsAreJoinedAndKnownFieldsKept) {
  infer::v1::ChatPrompt chat;

  absl::Status s = ParseChat(
      R"([{"role": "system", "content": "be brief"},
          {"role": "user", "name": "ann", "content": [{"type": "text", "text": "one"},
                                                      "two", {"type": "input_text", "text": "3"}]},
          {"role": "assistant", "content": null, "reasoning_content": "hm"},
          {"role": "tool", "tool_call_id": "c1", "content": "42"}])",
      &chat);

  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(chat.messages_size(), 4);
  EXPECT_EQ(chat.messages(0).content(), "be brief");
  EXPECT_EQ(chat.messages(1).content(), "one\ntwo\n3");
  EXPECT_EQ(chat.messages(1).name(), "ann");
  EXPECT_EQ(chat.messages(2).content(), "");
  EXPECT_EQ(chat.messages(2).reasoning_content(), "hm");
  EXPECT_EQ(chat.messages(3).tool_call_id(), "c1");
  EXPECT_EQ(chat.messages(3).content(), "42");
}

TEST(CheckUtf8Test, AcceptsUtf8AndRefusesEverythingElse) {
  for (const char* good : {"", "abc", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"}) {
    EXPECT_TRUE(CheckUtf8(good, "x").ok()) << good;
  }
  for (const char* bad :
       {"\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\x80"}) {
    EXPECT_EQ(CheckUtf8(bad, "x").code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace cairn::cairnctl
