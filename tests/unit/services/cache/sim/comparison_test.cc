#include "services/cache/sim/comparison.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/cache/sim/policy.h"
#include "services/cache/sim/trace_generator.h"

namespace cairn::cache::sim {
namespace {

using ::testing::HasSubstr;

std::vector<SimRequest> SmallTrace() {
  AgentTraceOptions gen;
  gen.conversations = 2;
  gen.turns_per_conversation = 4;
  absl::StatusOr<std::vector<TraceRequest>> trace = GenerateAgentTrace(gen);
  return trace.ok() ? PrepareRequests(*trace, {}) : std::vector<SimRequest>{};
}

TEST(ComparisonTest, EveryPolicyAtEveryBudgetAndCairnAlsoWithDisk) {
  std::vector<SimRequest> requests = SmallTrace();
  ASSERT_FALSE(requests.empty());
  ComparisonOptions options;
  options.ram_budgets = {int64_t{1} << 30, int64_t{16} << 30};
  options.disk_bytes = int64_t{64} << 30;

  absl::StatusOr<std::vector<ComparisonRow>> rows = ComparePolicies(requests, options);

  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2 * (PolicyNames().size() + 1));
  int with_disk = 0;
  for (const ComparisonRow& r : *rows) {
    EXPECT_EQ(r.ttft_ms.size(), requests.size()) << r.policy;
    EXPECT_EQ(r.totals.policy + (r.disk_bytes > 0 ? "+disk" : ""), r.policy);
    with_disk += r.disk_bytes > 0;
  }
  EXPECT_EQ(with_disk, 2);
  EXPECT_THAT(ComparisonMarkdown(*rows), HasSubstr("| cairn+disk | 1 GiB | 64 GiB |"));
}

TEST(ComparisonTest, PlotDataHasOneBlockPerPolicyAndCdfsEndAtOne) {
  std::vector<SimRequest> requests = SmallTrace();
  ComparisonOptions options;
  options.policies = {"cairn", "none"};
  options.ram_budgets = {int64_t{1} << 30, int64_t{2} << 30, int64_t{4} << 30};

  absl::StatusOr<std::vector<ComparisonRow>> rows = ComparePolicies(requests, options);

  ASSERT_TRUE(rows.ok()) << rows.status();
  std::vector<std::string> blocks =
      absl::StrSplit(RecomputedVsBudgetData(*rows), "\n\n\n", absl::SkipEmpty());
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_TRUE(absl::StartsWith(blocks[0], "\"cairn\"\n1 "));
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(blocks[1], '\n')).size(), 4u);
  std::vector<std::string> cdf =
      absl::StrSplit(TtftCdfData(*rows, int64_t{2} << 30), "\n\n\n", absl::SkipEmpty());
  ASSERT_EQ(cdf.size(), 2u);
  for (const std::string& block : cdf) {
    std::vector<std::string> lines = absl::StrSplit(block, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), requests.size() + 1);
    EXPECT_TRUE(absl::EndsWith(lines.back(), " 1.00000")) << lines.back();
  }
}

}  // namespace
}  // namespace cairn::cache::sim
