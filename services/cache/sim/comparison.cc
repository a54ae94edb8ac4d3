#include "services/cache/sim/comparison.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status/status_macros.h"
#include "services/cache/sim/policy.h"

namespace cairn::cache::sim {
namespace {

constexpr char kCairn[] = "cairn";
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string Gib(int64_t bytes) {
  return absl::StrFormat("%g GiB", static_cast<double>(bytes) / kGiB);
}

// Policies in first-seen order.
std::vector<std::string> PolicyOrder(const std::vector<ComparisonRow>& rows) {
  std::vector<std::string> order;
  for (const ComparisonRow& r : rows) {
    if (std::find(order.begin(), order.end(), r.policy) == order.end()) order.push_back(r.policy);
  }
  return order;
}

}  // namespace

absl::StatusOr<std::vector<ComparisonRow>> ComparePolicies(const std::vector<SimRequest>& requests,
                                                           const ComparisonOptions& options) {
  const std::vector<std::string>& policies =
      options.policies.empty() ? PolicyNames() : options.policies;
  std::vector<ComparisonRow> rows;
  for (int64_t ram : options.ram_budgets) {
    for (const std::string& policy : policies) {
      std::vector<int64_t> disks = {0};
      if (policy == kCairn && options.disk_bytes > 0) disks.push_back(options.disk_bytes);
      for (int64_t disk : disks) {
        SimOptions sim = options.base;
        sim.policy.ram_bytes = ram;
        sim.policy.disk_bytes = disk;
        ASSIGN_OR_RETURN(SimResult result, Simulate(requests, policy, sim));
        ComparisonRow row;
        row.policy = disk > 0 ? absl::StrCat(policy, "+disk") : policy;
        row.ram_bytes = ram;
        row.disk_bytes = disk;
        row.totals = result.totals;
        for (const RequestReport& r : result.requests) row.ttft_ms.push_back(r.ttft_ms);
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

std::string ComparisonMarkdown(const std::vector<ComparisonRow>& rows) {
  std::string out =
      "| policy | RAM | disk | tokens recomputed | hit ratio | est. TTFT mean | p50 | p95 | "
      "peak RAM | / oracle |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const ComparisonRow& r : rows) {
    const Totals& t = r.totals;
    absl::StrAppend(&out, "| ", r.policy, " | ", Gib(r.ram_bytes), " | ",
                    r.disk_bytes > 0 ? Gib(r.disk_bytes) : "-", " | ", t.prefilled, " | ",
                    absl::StrFormat("%.3f", t.hit_ratio), " | ",
                    absl::StrFormat("%.2f s", t.ttft_ms_mean / 1000), " | ",
                    absl::StrFormat("%.2f s", t.ttft_ms_p50 / 1000), " | ",
                    absl::StrFormat("%.2f s", t.ttft_ms_p95 / 1000), " | ",
                    absl::StrFormat("%.2f GB", static_cast<double>(t.peak_bytes) / 1e9), " | ",
                    absl::StrFormat("%.2fx", t.vs_oracle), " |\n");
  }
  return out;
}

std::string RecomputedVsBudgetData(const std::vector<ComparisonRow>& rows) {
  std::string out;
  for (const std::string& policy : PolicyOrder(rows)) {
    absl::StrAppend(&out, "\"", policy, "\"\n");
    for (const ComparisonRow& r : rows) {
      if (r.policy != policy) continue;
      absl::StrAppend(
          &out, absl::StrFormat("%g %d %.4f %.1f\n", static_cast<double>(r.ram_bytes) / kGiB,
                                r.totals.prefilled, r.totals.hit_ratio, r.totals.ttft_ms_mean));
    }
    out += "\n\n";
  }
  return out;
}

std::string TtftCdfData(const std::vector<ComparisonRow>& rows, int64_t ram_bytes) {
  std::string out;
  for (const ComparisonRow& r : rows) {
    if (r.ram_bytes != ram_bytes) continue;
    std::vector<double> ms = r.ttft_ms;
    std::sort(ms.begin(), ms.end());
    absl::StrAppend(&out, "\"", r.policy, "\"\n");
    for (size_t i = 0; i < ms.size(); ++i) {
      absl::StrAppend(&out,
                      absl::StrFormat("%.3f %.5f\n", ms[i],
                                      static_cast<double>(i + 1) / static_cast<double>(ms.size())));
    }
    out += "\n\n";
  }
  return out;
}

}  // namespace cairn::cache::sim
