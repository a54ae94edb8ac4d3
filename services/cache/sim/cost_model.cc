#include "services/cache/sim/cost_model.h"

namespace cairn::cache::sim {

double CostModel::PassMs(int64_t begin, int64_t end) const {
  if (end <= begin) return 0;
  const double n = static_cast<double>(end - begin);
  // Sum over tokens t in [begin, end) of (a + b * t / 1000).
  const double depth_sum = (static_cast<double>(begin) + static_cast<double>(end - 1)) * n / 2;
  return options_.pass_overhead_ms + options_.prefill_ms_per_token * n +
         options_.prefill_ms_per_token_per_1k * depth_sum / 1000.0;
}

double CostModel::PassesMs(const std::vector<PrefillPass>& passes) const {
  double ms = 0;
  for (const PrefillPass& p : passes) ms += PassMs(p.begin, p.end);
  return ms;
}

double CostModel::RestoreMs(Tier tier, int64_t bytes) const {
  switch (tier) {
    case Tier::kRam:
      return 1000.0 * static_cast<double>(bytes) / options_.ram_restore_bytes_per_s;
    case Tier::kDisk:
      return 1000.0 * static_cast<double>(bytes) / options_.disk_restore_bytes_per_s;
    case Tier::kNone:
    case Tier::kLive:
      return 0;
  }
  return 0;
}

double CostModel::CaptureMs(int64_t bytes) const {
  return 1000.0 * static_cast<double>(bytes) / options_.capture_bytes_per_s;
}

ModelLayout CostModel::Layout() const {
  ModelLayout layout;
  layout.chunk_rows = options_.chunk_rows;
  layout.components.push_back({"rows", ComponentKind::kRows, options_.bytes_per_row, 0});
  layout.components.push_back({"private", ComponentKind::kPrivate, 0, options_.private_bytes});
  return layout;
}

}  // namespace cairn::cache::sim
