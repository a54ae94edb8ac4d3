#ifndef CAIRN_SERVICES_CACHE_SIM_COMPARISON_H_
#define CAIRN_SERVICES_CACHE_SIM_COMPARISON_H_

// Policy comparison over RAM budgets, with and without cairn's disk tier (`cairnctl compare`):
// the table of the benchmark report and the data behind its plots.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/cache/sim/simulator.h"

namespace cairn::cache::sim {

struct ComparisonOptions {
  SimOptions base;  // Every option but the budgets.
  std::vector<int64_t> ram_budgets;
  // Cairn's disk tier for the extra "cairn+disk" rows (0: no such rows). The peer models have
  // no disk tier, so they run once per RAM budget.
  int64_t disk_bytes = 0;
  std::vector<std::string> policies;  // Empty: every policy (PolicyNames()).
};

struct ComparisonRow {
  std::string policy;  // "cairn+disk" for cairn with the disk tier.
  int64_t ram_bytes = 0;
  int64_t disk_bytes = 0;
  Totals totals;
  std::vector<double> ttft_ms;  // Per request, in trace order.
};

// Runs every policy at every budget. Errors from Simulate are returned.
absl::StatusOr<std::vector<ComparisonRow>> ComparePolicies(const std::vector<SimRequest>& requests,
                                                           const ComparisonOptions& options);

// A Markdown table, one row per policy and budget: tokens recomputed (prefilled), hit ratio,
// estimated TTFT mean / p50 / p95, peak bytes and the ratio to the oracle.
std::string ComparisonMarkdown(const std::vector<ComparisonRow>& rows);
// gnuplot data: one block per policy (separated by two blank lines, first line the policy
// name), rows "ram_gib prefilled hit_ratio ttft_mean_ms" in budget order.
std::string RecomputedVsBudgetData(const std::vector<ComparisonRow>& rows);
// gnuplot data: the TTFT CDF of every policy at `ram_bytes`: one block per policy (first line
// its name), rows "ttft_ms fraction_at_or_below".
std::string TtftCdfData(const std::vector<ComparisonRow>& rows, int64_t ram_bytes);

}  // namespace cairn::cache::sim

#endif  // CAIRN_SERVICES_CACHE_SIM_COMPARISON_H_
