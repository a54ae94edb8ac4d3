#include "common/config/flags.h"

#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn {
namespace {

using ::cairn::testing::StatusIs;

struct DemoOptions {
  std::string listen = "unix:/run/cairn/cache.sock";
  bool verbose = false;
  int64_t max_checkpoints = 128;
  int slots = 1;
  double ratio = 8.0;
  uint64_t ram_bytes = 1ull << 30;
  absl::Duration yield = absl::Milliseconds(500);
  std::vector<std::string> tags;
};

class FlagsTest : public ::testing::Test {
 protected:
  FlagsTest() : flags_("demo", "a demo") {
    flags_.Add("listen", &opts_.listen, "address");
    flags_.Add("verbose", &opts_.verbose, "chatty");
    flags_.Add("max-checkpoints", &opts_.max_checkpoints, "cap");
    flags_.Add("sessions", &opts_.slots, "slots");
    flags_.Add("cheap-ratio", &opts_.ratio, "ratio");
    flags_.AddBytes("cache-ram-bytes", &opts_.ram_bytes, "budget");
    flags_.Add("yield", &opts_.yield, "yield");
    flags_.Add("tag", &opts_.tags, "tags");
  }

  std::string WriteConfig(const std::string& text) {
    std::string path = ::testing::TempDir() + "/flags_test_" +
                       ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".conf";
    std::ofstream(path) << text;
    return path;
  }

  DemoOptions opts_;
  FlagSet flags_;
};

TEST_F(FlagsTest, DefaultsSurviveAnEmptyCommandLine) {
  auto rest = flags_.Parse(std::vector<std::string>{});

  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(opts_.max_checkpoints, 128);
  EXPECT_EQ(opts_.ram_bytes, 1ull << 30);
  EXPECT_FALSE(flags_.WasSet("max-checkpoints"));
}

TEST_F(FlagsTest, ParsesEveryTypeInBothSpellings) {
  auto rest = flags_.Parse({"--listen=127.0.0.1:0", "--verbose", "--max-checkpoints", "64",
                            "--sessions=4", "--cheap-ratio", "2.5", "--cache-ram-bytes=32Gi",
                            "--yield=250ms", "--tag=a,b", "--tag", "c", "pos1", "--", "--pos2"});

  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(opts_.listen, "127.0.0.1:0");
  EXPECT_TRUE(opts_.verbose);
  EXPECT_EQ(opts_.max_checkpoints, 64);
  EXPECT_EQ(opts_.slots, 4);
  EXPECT_DOUBLE_EQ(opts_.ratio, 2.5);
  EXPECT_EQ(opts_.ram_bytes, 32ull << 30);
  EXPECT_EQ(opts_.yield, absl::Milliseconds(250));
  EXPECT_EQ(opts_.tags, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(*rest, (std::vector<std::string>{"pos1", "--pos2"}));
  EXPECT_TRUE(flags_.WasSet("sessions"));
}

TEST_F(FlagsTest, NegatedBooleans) {
  opts_.verbose = true;

  ASSERT_TRUE(flags_.Parse({"--noverbose"}).ok());

  EXPECT_FALSE(opts_.verbose);
}

TEST_F(FlagsTest, BadInputIsAnErrorNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string fragment;
  };
  std::vector<Case> cases = {
      {{"--bogus=1"}, "unknown flag --bogus"},
      {{"--max-checkpoints=ten"}, "max-checkpoints"},
      {{"--max-checkpoints"}, "needs a value"},
      {{"--sessions=99999999999"}, "sessions"},
      {{"--cache-ram-bytes=12Q"}, "unknown suffix"},
      {{"--cache-ram-bytes=99999999999999999999"}, "too large"},
      {{"--cache-ram-bytes=20000000Ti"}, "overflows"},
      {{"--verbose=maybe"}, "not a boolean"},
      {{"--yield=soon"}, "malformed"},
      {{"--config"}, "needs a file"},
  };
  for (const Case& c : cases) {
    FlagSet fresh("demo", "");
    DemoOptions o;
    fresh.Add("max-checkpoints", &o.max_checkpoints, "");
    fresh.Add("sessions", &o.slots, "");
    fresh.AddBytes("cache-ram-bytes", &o.ram_bytes, "");
    fresh.Add("verbose", &o.verbose, "");
    fresh.Add("yield", &o.yield, "");

    auto r = fresh.Parse(c.args);

    ASSERT_FALSE(r.ok()) << c.args[0];
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find(c.fragment), absl::string_view::npos)
        << r.status() << " lacks " << c.fragment;
  }
}

TEST(FlagRangeTest, ValuesOutsideTheRangeAreErrorsNamingTheFlag) {
  struct Case {
    std::string arg;
    std::string fragment;
  };
  std::vector<Case> cases = {
      {"--threads=0", "--threads: \"0\" is out of range (must be between 1 and 1024)"},
      {"--threads=100000", "between 1 and 1024"},
      {"--context=-5", "--context: \"-5\" is out of range (must be at least 0)"},
      {"--share=1.5", "--share"},
      {"--share=nan", "--share"},
      {"--interval=0s", "--interval: \"0s\" is below the least allowed, 1ms"},
      {"--interval=-1s", "--interval"},
  };
  for (const Case& c : cases) {
    FlagSet flags("demo", "");
    int threads = 4;
    int64_t context = 0;
    double share = 0.5;
    absl::Duration interval = absl::Seconds(2);
    flags.Add("threads", &threads, "", 1, 1024);
    flags.Add("context", &context, "", 0, std::numeric_limits<int64_t>::max());
    flags.Add("share", &share, "", 0.0, 1.0);
    flags.Add("interval", &interval, "", absl::Milliseconds(1));

    auto r = flags.Parse({c.arg});

    EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << c.arg;
    EXPECT_NE(r.status().message().find(c.fragment), absl::string_view::npos)
        << r.status() << " lacks " << c.fragment;
    EXPECT_EQ(threads, 4);
    EXPECT_EQ(context, 0);
    EXPECT_EQ(share, 0.5);
    EXPECT_EQ(interval, absl::Seconds(2));
  }
}

TEST(FlagRangeTest, ValuesInsideTheRangeAndFromAConfigFile) {
  FlagSet flags("demo", "");
  int threads = 4;
  absl::Duration interval = absl::Seconds(2);
  flags.Add("threads", &threads, "", 1, 1024);
  flags.Add("interval", &interval, "", absl::Milliseconds(1));

  ASSERT_TRUE(flags.Parse({"--threads=1024", "--interval=1ms"}).ok());
  absl::Status from_file = flags.ApplyConfigText("threads = 0\n", "x.conf");

  EXPECT_EQ(threads, 1024);
  EXPECT_EQ(interval, absl::Milliseconds(1));
  // The command line wins, so the file's bad value is not applied (nor checked).
  EXPECT_TRUE(from_file.ok()) << from_file;
  FlagSet file_only("demo", "");
  file_only.Add("threads", &threads, "", 1, 1024);
  EXPECT_THAT(file_only.ApplyConfigText("threads = 0\n", "x.conf"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A validator as a daemon's main passes one: no spaces, and "none" refused.
absl::Status NoSpaceNorNone(absl::string_view v) {
  if (v == "none") return absl::InvalidArgumentError("\"none\" is not a peer");
  if (absl::StrContains(v, ' ')) return absl::InvalidArgumentError("holds a space");
  return absl::OkStatus();
}

TEST(FlagValidatorTest, ARefusedValueIsAnErrorNamingTheFlagAndLeavesTheField) {
  FlagSet flags("demo", "");
  std::string peer = "unix:/run/cairn/cache.sock";
  std::vector<std::string> peers = {"a"};
  flags.Add("cache", &peer, "", NoSpaceNorNone);
  flags.Add("infer", &peers, "", NoSpaceNorNone);

  auto one = flags.Parse({"--cache=none"});
  auto listed = flags.Parse({"--infer=b,none"});

  EXPECT_THAT(one, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(one.status().message(), "--cache: \"none\" is not a peer");
  EXPECT_THAT(listed, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(listed.status().message(), "--infer: \"none\" is not a peer");
  EXPECT_EQ(peer, "unix:/run/cairn/cache.sock");
  EXPECT_EQ(peers, std::vector<std::string>({"a"}));
}

TEST(FlagValidatorTest, AcceptedValuesAreSetAndEachListElementIsCheckedTrimmed) {
  FlagSet flags("demo", "");
  std::string peer;
  std::vector<std::string> peers;
  flags.Add("cache", &peer, "", NoSpaceNorNone);
  flags.Add("infer", &peers, "", NoSpaceNorNone);

  auto rest = flags.Parse({"--cache=unix:c.sock", "--infer", "a, b", "--infer=c"});

  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(peer, "unix:c.sock");
  EXPECT_EQ(peers, std::vector<std::string>({"a", "b", "c"}));
}

TEST(FlagValidatorTest, ARefusedConfigValueNamesFileLineAndFlag) {
  FlagSet flags("demo", "");
  std::string peer;
  flags.Add("cache", &peer, "", NoSpaceNorNone);

  absl::Status s = flags.ApplyConfigText("\ncache = none\n", "gateway.conf");

  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(s.message(), "gateway.conf:2: --cache: \"none\" is not a peer");
}

TEST_F(FlagsTest, ConfigFileSetsValuesAndTheCommandLineWins) {
  std::string path = WriteConfig(
      "# cache settings\n"
      "max-checkpoints = 32\n"
      "\n"
      "listen = \"unix:/tmp/x # not a comment.sock\"\n"
      "cache-ram-bytes = 2Gi  # two gibibytes\n");

  auto rest = flags_.Parse({"--max-checkpoints=7", "--config", path});

  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(opts_.max_checkpoints, 7);
  EXPECT_EQ(opts_.listen, "unix:/tmp/x # not a comment.sock");
  EXPECT_EQ(opts_.ram_bytes, 2ull << 30);
}

TEST_F(FlagsTest, ConfigErrorsNameFileAndLine) {
  std::string path = WriteConfig("sessions = 2\nno-equals-sign\n");

  auto rest = flags_.Parse({"--config=" + path});

  ASSERT_THAT(rest, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(rest.status().message().find(path + ":2"), absl::string_view::npos) << rest.status();
}

TEST_F(FlagsTest, ConfigRejectsUnknownAndRepeatedKeys) {
  EXPECT_THAT(flags_.ApplyConfigText("nope = 1\n", "x.conf"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(flags_.ApplyConfigText("sessions = 1\nsessions = 2\n", "x.conf"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(flags_.ApplyConfigText("sessions = lots\n", "x.conf"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(FlagsTest, MissingConfigFileIsNotFound) {
  EXPECT_THAT(flags_.Parse({"--config=/nonexistent/cairn.conf"}),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(FlagsTest, HelpReturnsUsage) {
  auto r = flags_.Parse({"--help"});

  ASSERT_THAT(r, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_NE(r.status().message().find("--cache-ram-bytes"), absl::string_view::npos);
  EXPECT_NE(r.status().message().find("default 128"), absl::string_view::npos);
}

TEST(ParseByteSizeTest, Suffixes) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("1K"), 1000u);
  EXPECT_EQ(*ParseByteSize("1Ki"), 1024u);
  EXPECT_EQ(*ParseByteSize("3MiB"), 3u << 20);
  EXPECT_EQ(*ParseByteSize("9G"), 9'000'000'000u);
  EXPECT_EQ(*ParseByteSize("16Ti"), 16ull << 40);
  EXPECT_THAT(ParseByteSize(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseByteSize("-1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseByteSize("Gi"), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn
