#ifndef CAIRN_SERVICES_CACHE_SIM_REPLAY_LOG_H_
#define CAIRN_SERVICES_CACHE_SIM_REPLAY_LOG_H_

// What `cairnctl replay` measured, one record per trace request, as CSV; and the summary of a
// replay (hit ratio, TTFT percentiles overall and by tier, throughput). `cairnctl simulate
// --calibrate` reads the same CSV (docs/benchmarks.md).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn::cache::sim {

struct ReplayRecord {
  int index = 0;  // 0-based position in the trace (the simulator's request index).
  int line = 0;   // Line in the trace file.
  std::string conv;
  double t = 0;       // Arrival time in the trace (seconds).
  double sent_s = 0;  // When the request was sent, seconds after the replay started.
  int64_t prompt_tokens = 0;
  int64_t gen_tokens = 0;         // max_tokens asked for.
  int64_t completion_tokens = 0;  // usage.completion_tokens.
  std::string tier;               // The `cairn` object's tier: cold, live, ram, disk.
  int64_t depth = 0;              // Restored depth.
  int64_t reused = 0;             // usage.prompt_tokens_details.cached_tokens.
  int64_t prefilled = 0;
  int64_t captures = 0;
  double restore_ms = 0;  // As the daemon measured them.
  double capture_ms = 0;
  double server_ttft_ms = 0;
  double ttft_ms = 0;   // At the client: request sent -> first streamed token (or the end).
  double total_ms = 0;  // Request sent -> response complete.
  std::string error;    // Empty when the request succeeded.
};

// The header line and one line per record (RFC 4180 quoting where needed).
std::string ReplayCsvHeader();
std::string ReplayCsvLine(const ReplayRecord& record);
// Parses a whole CSV written by the functions above (columns found by name, so extra columns
// are ignored). InvalidArgument naming the line on a malformed row or a missing column.
absl::StatusOr<std::vector<ReplayRecord>> ParseReplayCsv(absl::string_view text);
absl::StatusOr<std::vector<ReplayRecord>> ReadReplayCsv(const std::string& path);

// The `q`-quantile (0 < q <= 1) of `values` by the nearest-rank method; 0 when empty.
double Percentile(std::vector<double> values, double q);

struct LatencyStats {
  int64_t requests = 0;
  double p50 = 0;
  double p95 = 0;
  double p99 = 0;
  double mean = 0;
};
LatencyStats Latencies(const std::vector<double>& ms);

struct ReplaySummary {
  int64_t requests = 0;  // Succeeded; `errors` did not.
  int64_t errors = 0;
  int64_t prompt_tokens = 0;
  int64_t reused = 0;
  int64_t prefilled = 0;
  int64_t completion_tokens = 0;
  double hit_ratio = 0;  // reused / prompt tokens.
  double wall_s = 0;     // First send -> last completion.
  double requests_per_s = 0;
  double prompt_tokens_per_s = 0;      // Prompt tokens served per wall-clock second.
  double completion_tokens_per_s = 0;  // Generated tokens per wall-clock second.
  LatencyStats ttft;                   // Client TTFT.
  LatencyStats server_ttft;
  std::map<std::string, LatencyStats> ttft_by_tier;  // Client TTFT per tier.
  std::map<std::string, LatencyStats> server_ttft_by_tier;
};

// Summarises the successful records; errors are counted, not timed.
ReplaySummary Summarize(const std::vector<ReplayRecord>& records);
// A human table: totals, then TTFT (client and server) overall and per tier.
std::string FormatReplaySummary(const ReplaySummary& summary);
// The same as one JSON object (no newline).
std::string ReplaySummaryJson(const ReplaySummary& summary);

}  // namespace cairn::cache::sim

#endif  // CAIRN_SERVICES_CACHE_SIM_REPLAY_LOG_H_
