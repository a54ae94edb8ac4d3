// cairnctl's offline verbs (simulate_command.cc): flags outside what a trace or a cost model can
// be are exit 2 naming the flag, and a replay CSV that does not match its trace is an error.

#include <climits>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "services/cache/sim/replay_log.h"
#include "tests/unit/tools/cairnctl/run_cairnctl.h"
#include "tools/cairnctl/command.h"

namespace cairn::cairnctl {
namespace {

using testing::Cairnctl;
using testing::Outcome;

std::string OneRequestTrace() {
  const std::string path = ::testing::TempDir() + "/simulate_command_one.jsonl";
  std::ofstream(path) << "{\"conv\": \"A\", \"t\": 1, \"segments\": [{\"ids\": [1, 2, 3]}]}\n";
  return path;
}

TEST(SimulateFlagsTest, OutOfRangeCostsSlotsAndVocabAreExitTwo) {
  const std::string trace = OneRequestTrace();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--vocab", "0"}, "--vocab: \"0\" is out of range"},
      {{"--slots", "0"}, "--slots"},
      {{"--slots", "100000000"}, "--slots: \"100000000\" is out of range"},
      {{"--prefill-ms-per-token", "-1"}, "--prefill-ms-per-token"},
      {{"--prefill-ms-per-token", "nan"}, "--prefill-ms-per-token: \"nan\" is not a number"},
      {{"--pass-overhead-ms", "inf"}, "--pass-overhead-ms"},
      {{"--ram-restore-bytes-per-s", "0"}, "--ram-restore-bytes-per-s"},
      {{"--disk-restore-bytes-per-s", "-5"}, "--disk-restore-bytes-per-s"},
      {{"--capture-bytes-per-s", "0"}, "--capture-bytes-per-s"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"simulate", "--trace", trace, "--policy", "cairn"};
    args.insert(args.end(), flags.begin(), flags.end());

    const Outcome o = Cairnctl(args);

    EXPECT_EQ(o.code, 2) << flags[0] << " " << flags[1] << ": " << o.err;
    EXPECT_TRUE(absl::StrContains(o.err, message)) << o.err;
  }
}

TEST(GenTraceFlagsTest, AbsurdTimesAndSizesAreExitTwo) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--step-seconds", "-1"}, "--step-seconds"},
      {{"--step-seconds", "inf"}, "--step-seconds"},
      {{"--idle-seconds", "1e300"}, "--idle-seconds"},
      {{"--idle-seconds", "-600"}, "--idle-seconds"},
      {{"--system-prompt-tokens", "100000000000"}, "--system-prompt-tokens"},
      {{"--append-tokens", "0"}, "--append-tokens"},
      {{"--conversations", "0"}, "--conversations"},
      {{"--idle-probability", "1.5"}, "--idle-probability"},
      {{"--seed", "-1"}, "--seed"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"gen-trace", "--out", "/dev/null"};
    args.insert(args.end(), flags.begin(), flags.end());

    const Outcome o = Cairnctl(args);

    EXPECT_EQ(o.code, 2) << flags[0] << " " << flags[1] << ": " << o.err;
    EXPECT_TRUE(absl::StrContains(o.err, message)) << o.err;
  }
}

TEST(CompareFlagsTest, TheCdfBudgetMustBeOneOfTheBudgets) {
  const Outcome o = Cairnctl(
      {"compare", "--trace", OneRequestTrace(), "--budgets", "2Gi,8Gi", "--cdf-budget", "3Gi"});

  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_TRUE(absl::StrContains(o.err, "--cdf-budget 3Gi is not one of --budgets")) << o.err;
}

TEST(SimulateCalibrateTest, ARowBeyondTheTraceIsAnErrorNotAnOverflow) {
  // index + 1 overflowed an int for a row of request 2147483647.
  const std::string csv = ::testing::TempDir() + "/simulate_command_overflow.csv";
  cache::sim::ReplayRecord r;
  r.index = INT_MAX;
  r.line = 1;
  r.conv = "A";
  r.prompt_tokens = 3;
  r.prefilled = 3;
  r.server_ttft_ms = 10;
  std::ofstream(csv) << cache::sim::ReplayCsvHeader() << "\n"
                     << cache::sim::ReplayCsvLine(r) << "\n";

  const Outcome o = Cairnctl({"simulate", "--trace", OneRequestTrace(), "--calibrate", csv});

  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_TRUE(absl::StrContains(o.err, "row of request 2147483647")) << o.err;
  EXPECT_TRUE(absl::StrContains(o.err, "outside the trace's 1 requests")) << o.err;
}

}  // namespace
}  // namespace cairn::cairnctl
