#ifndef CAIRN_SERVICES_CACHE_SIM_COST_MODEL_H_
#define CAIRN_SERVICES_CACHE_SIM_COST_MODEL_H_

#include <cstdint>
#include <vector>

#include "services/cache/core/capture_planner.h"
#include "services/cache/core/model_layout.h"
#include "services/cache/core/types.h"

namespace cairn::cache::sim {

// What the simulator charges for work, calibrated on the seed's measured run (Flash-Next on
// Strix Halo, §1): a 95,439-token cold prefill takes ~56 s here (57.8 s measured), a 50-token
// append at depth 95K ~140 ms (~150 ms), a 2.75 GB restore from RAM 38 ms and from disk 0.86 s.
// Every field is a `cairnctl simulate` flag.
struct CostModelOptions {
  double prefill_ms_per_token = 0.30;       // Per token at depth 0.
  double prefill_ms_per_token_per_1k = 0.005;  // Extra per token per 1,000 tokens of depth.
  double pass_overhead_ms = 100;            // Fixed cost of each prefill pass.
  double ram_restore_bytes_per_s = 72e9;    // Arena -> slot.
  double disk_restore_bytes_per_s = 3.2e9;  // Disk -> slot, checksums included.
  double capture_bytes_per_s = 55e9;        // Slot -> arena (private state and tail).
  int64_t bytes_per_row = 27460;            // Rows of one token, all row components.
  int64_t private_bytes = 133000000;        // Private state of one checkpoint.
  int64_t chunk_rows = ModelLayout::kDefaultChunkRows;
};

// Thread-safe (immutable).
class CostModel {
 public:
  explicit CostModel(CostModelOptions options = {}) : options_(options) {}

  // Prefill of tokens [begin, end) in one pass, overhead included.
  double PassMs(int64_t begin, int64_t end) const;
  double PassesMs(const std::vector<PrefillPass>& passes) const;
  double RestoreMs(Tier tier, int64_t bytes) const;
  double CaptureMs(int64_t bytes) const;
  // The model layout the options describe.
  ModelLayout Layout() const;

  const CostModelOptions& options() const { return options_; }

 private:
  CostModelOptions options_;
};

}  // namespace cairn::cache::sim

#endif  // CAIRN_SERVICES_CACHE_SIM_COST_MODEL_H_
