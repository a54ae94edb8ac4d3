#ifndef CAIRN_SERVICES_CACHE_SIM_REPORT_H_
#define CAIRN_SERVICES_CACHE_SIM_REPORT_H_

// Human and JSON renderings of simulation results (`cairnctl simulate`).

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "services/cache/sim/simulator.h"

namespace cairn::cache::sim {

// Aligned columns: the first left-aligned, the others right-aligned, two spaces apart.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);
// "#3 conv A t 12.5s prompt 12000 restored ram@4096 prefilled 7904 ttft 3.21s
//  captures 6000:learned,8192:grid evicted 5:evict:retry-copy"
std::string FormatRequestLine(const RequestReport& report);
// A two-column table of one policy's totals.
std::string FormatTotals(const Totals& totals);
// One row per policy.
std::string FormatComparison(const std::vector<Totals>& totals);
// One JSON object (no newline) with at least conv, restored_tier, restored_depth, prefilled,
// captures [{pos, kind}], evicted [{id, reason}, and conv and depth where the policy knows
// them]; plus policy, index, line, prompt_tokens,
// ttft_ms and bytes_in_use.
std::string RequestJson(const RequestReport& report, absl::string_view policy);
// {"totals": {...}} (no newline).
std::string TotalsJson(const Totals& totals);

}  // namespace cairn::cache::sim

#endif  // CAIRN_SERVICES_CACHE_SIM_REPORT_H_
