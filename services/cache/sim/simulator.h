#ifndef CAIRN_SERVICES_CACHE_SIM_SIMULATOR_H_
#define CAIRN_SERVICES_CACHE_SIM_SIMULATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/cache/sim/policy.h"
#include "services/cache/sim/trace.h"

namespace cairn::cache::sim {

struct SimOptions {
  PolicyOptions policy;
  TraceOptions trace;
};

struct RequestReport {
  int index = 0;
  int line = 0;
  std::string conv;
  double t = 0;
  int64_t prompt_tokens = 0;
  RequestResult result;
  double restore_ms = 0;
  double prefill_ms = 0;
  double capture_ms = 0;
  double ttft_ms = 0;        // restore + prefill + capture (decode not modelled).
  int64_t bytes_in_use = 0;  // After the request.
};

struct Totals {
  std::string policy;
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t prefilled = 0;
  int64_t reused = 0;    // prompt_tokens - prefilled.
  double hit_ratio = 0;  // reused / prompt_tokens.
  int64_t restored_live = 0;
  int64_t restored_ram = 0;
  int64_t restored_disk = 0;
  int64_t cold = 0;
  int64_t captures = 0;
  int64_t evictions = 0;
  double ttft_ms_total = 0;
  double ttft_ms_mean = 0;
  double ttft_ms_p50 = 0;
  double ttft_ms_p95 = 0;
  int64_t peak_bytes = 0;
  // The infinite-memory bound on the same requests (policy "oracle") and prefilled / it.
  int64_t oracle_prefilled = 0;
  double vs_oracle = 0;  // 0 when the bound prefills nothing.
};

struct SimResult {
  std::vector<RequestReport> requests;
  Totals totals;
};

// Resolves every request's tokens and the tokens its model generates: the `gen` tokens after a
// prompt are the next tokens of the conversation's next request when that request repeats
// this prompt in full (the trace records what the client sent back); otherwise they are fresh
// ids no prompt contains (the client re-rendered or dropped them).
std::vector<SimRequest> PrepareRequests(const std::vector<TraceRequest>& trace,
                                        const TraceOptions& options);

// Runs policy `policy` over `requests` (from PrepareRequests), and the oracle over them for
// the totals' bound. InvalidArgument for an unknown policy or bad options.
absl::StatusOr<SimResult> Simulate(const std::vector<SimRequest>& requests,
                                   absl::string_view policy, const SimOptions& options);

}  // namespace cairn::cache::sim

#endif  // CAIRN_SERVICES_CACHE_SIM_SIMULATOR_H_
