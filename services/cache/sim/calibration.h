#ifndef CAIRN_SERVICES_CACHE_SIM_CALIBRATION_H_
#define CAIRN_SERVICES_CACHE_SIM_CALIBRATION_H_

// Fits the simulator's cost model to a replay (`cairnctl simulate --calibrate CSV`,
// docs/benchmarks.md "Calibration").

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/cache/sim/cost_model.h"
#include "services/cache/sim/replay_log.h"
#include "services/cache/sim/simulator.h"

namespace cairn::cache::sim {

struct CalibrationFit {
  CostModelOptions cost;  // The base options with the fitted fields replaced.
  int64_t prefill_samples = 0;
  int64_t ram_samples = 0;  // RAM restores the bandwidth was fitted on (0: base value kept).
  int64_t disk_samples = 0;
  int64_t capture_samples = 0;
  double prefill_rms_ms = 0;  // Root mean square residual of the prefill fit.
};

// Fits, from the successful records of a replay:
// - prefill: server TTFT minus restore and capture time = pass_overhead_ms x passes +
//   prefill_ms_per_token x prefilled + prefill_ms_per_token_per_1k x (sum of the prefilled
//   positions) / 1000, by least squares with non-negative coefficients (every subset of the
//   three terms is solved and the best non-negative one kept). The replay does not see pass
//   boundaries, so passes = ceil(prefilled / `max_pass_tokens`) + the captures but one.
// - restore bandwidths: bytes (depth x bytes_per_row + private_bytes of `base`) over the
//   measured restore time, summed over every RAM (and every disk) restore;
// - capture bandwidth: captures x private_bytes over the measured capture time.
// A term without samples keeps its `base` value. InvalidArgument when no record prefilled a
// token, or when `max_pass_tokens` < 1.
absl::StatusOr<CalibrationFit> Calibrate(const std::vector<ReplayRecord>& records,
                                         const CostModelOptions& base, int64_t max_pass_tokens);

// A table of the fitted values beside the base ones.
std::string FormatCalibration(const CalibrationFit& fit, const CostModelOptions& base);

// Measured (a replay) against predicted (the simulator on the same trace) for the requests
// both have: the replay's successful records matched by trace index.
struct PredictionComparison {
  int64_t requests = 0;
  Totals measured;            // From the records: prompt tokens, prefilled, hit ratio, tiers, TTFT.
  Totals predicted;           // The simulator's, over the same requests.
  double tier_agreement = 0;  // Share of requests restored from the same tier.
  double prefilled_abs_error = 0;  // Sum |measured - predicted| / sum measured (tokens).
  double ttft_abs_error = 0;       // Sum |measured - predicted| / sum measured (server TTFT).
};

// Compares `records` with `predicted` (InvalidArgument when a record's index is outside it).
absl::StatusOr<PredictionComparison> ComparePrediction(const std::vector<ReplayRecord>& records,
                                                       const SimResult& predicted);
// "quantity | measured | predicted" rows.
std::string FormatPrediction(const PredictionComparison& comparison);
// Tab-separated per-request data for plots: index, tiers, prefilled and server TTFT, measured
// and predicted, with a header line.
std::string PredictionTsv(const std::vector<ReplayRecord>& records, const SimResult& predicted);

// "cold", "live", "ram" or "disk", as the gateway's `cairn` object names tiers.
std::string TierLabel(Tier tier);

}  // namespace cairn::cache::sim

#endif  // CAIRN_SERVICES_CACHE_SIM_CALIBRATION_H_
