#ifndef CAIRN_SERVICES_GATEWAY_DASHBOARD_DASHBOARD_STATE_H_
#define CAIRN_SERVICES_GATEWAY_DASHBOARD_DASHBOARD_STATE_H_

// What the dashboard page polls (/dashboard/state.json): the daemons' slots, the cache's
// budget split, checkpoint tree and latest events, and TTFT by tier, in one JSON object. The
// page's script (dashboard/assets/dashboard.js) is its only reader; docs/gateway.md lists the
// fields.

#include <cstdint>
#include <string>
#include <vector>

#include "services/gateway/dashboard/cache_monitor.h"
#include "services/gateway/http/http_server.h"
#include "services/gateway/openai/json_util.h"
#include "services/gateway/upstream/infer_pool.h"

namespace cairn::gateway {
// A cache tier's budget split as the dashboard's bars and /metrics show it. The kinds add up
// to the capacity: rows + private_state + reserved + free.
struct BudgetSplit {
  uint64_t capacity = 0;
  uint64_t rows = 0;           // Shared rows: chunk bytes, each chunk once.
  uint64_t private_state = 0;  // Private state and tails of every checkpoint.
  uint64_t reserved = 0;       // The rest of what the ledger holds (pending captures, spills).
  uint64_t free = 0;
};
BudgetSplit SplitBudget(const cache_v1::Budget& budget);

// Time to first token of the generations restored from one tier ("cold", "live", "ram",
// "disk"), as the dashboard shows it.
struct TierLatency {
  std::string tier;
  uint64_t count = 0;
  double mean_ms = 0;
  double p50_ms = 0;  // Bucket upper bounds (MsHistogram::Quantile).
  double p90_ms = 0;
  double p99_ms = 0;
};

struct DashboardInputs {
  std::vector<DaemonStatus> daemons;
  const CacheSnapshot* cache = nullptr;  // Null without --cache.
  std::vector<TierLatency> ttft_by_tier;
  HttpServerStats http;
};

// Returns the dashboard's state object.
Json DashboardState(const DashboardInputs& inputs);

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_DASHBOARD_DASHBOARD_STATE_H_
