#include "services/cache/core/capture_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace cairn::cache {

std::vector<int64_t> CapturePlanner::GridPositions(int64_t prompt_tokens, int k) const {
  std::vector<int64_t> out;
  for (int i = 1; i <= k; ++i) {
    int64_t evenly = (static_cast<int64_t>(i) * prompt_tokens) / k;
    out.push_back((evenly / options_.grid_step) * options_.grid_step);
  }
  return out;
}

int CapturePlanner::GridPointsFor(int64_t ram_budget_bytes, int64_t private_bytes) const {
  if (private_bytes <= 0) return options_.max_grid_points;
  double share = static_cast<double>(ram_budget_bytes) * options_.grid_budget_share;
  double fit = std::floor(share / static_cast<double>(private_bytes));
  return static_cast<int>(std::clamp(fit, 0.0, static_cast<double>(options_.max_grid_points)));
}

std::vector<PrefillPass> SplitPasses(int64_t begin, int64_t end, std::vector<int64_t> stops,
                                     int64_t max_pass_tokens) {
  std::sort(stops.begin(), stops.end());
  std::vector<PrefillPass> passes;
  int64_t at = begin;
  auto emit_until = [&](int64_t stop) {
    while (at < stop) {
      int64_t next = std::min(stop, at + max_pass_tokens);
      passes.push_back({at, next});
      at = next;
    }
  };
  for (int64_t stop : stops) {
    if (stop > at && stop <= end) emit_until(stop);
  }
  emit_until(end);
  return passes;
}

absl::StatusOr<CapturePlan> CapturePlanner::Plan(const PlanInput& in) const {
  if (options_.grid_step <= 0 || options_.max_pass_tokens <= 0 || options_.max_grid_points < 0) {
    return absl::InvalidArgumentError("grid step, pass size and grid points must be positive");
  }
  if (in.prompt_tokens < 0 || in.restore_depth < 0 || in.restore_depth > in.prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("restore depth ", in.restore_depth,
                                                   " outside a prompt of ", in.prompt_tokens));
  }
  if (in.max_pass_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max pass tokens ", in.max_pass_tokens, " is negative"));
  }
  const int64_t max_pass = in.max_pass_tokens > 0 ? in.max_pass_tokens : options_.max_pass_tokens;
  const int64_t n = in.prompt_tokens;
  const int64_t r = in.restore_depth;
  std::vector<PlannedCapture> caps;
  if (n > r) caps.push_back({n, CaptureKind::kEnd});
  if (in.restored_live && r > 0) caps.push_back({r, CaptureKind::kReused});
  if (in.stable_boundary >= r && in.stable_boundary <= n && in.stable_boundary > 0) {
    caps.push_back({in.stable_boundary, CaptureKind::kStable});
  }
  auto near_capture = [&caps](int64_t pos, int64_t distance) {
    return std::any_of(caps.begin(), caps.end(), [&](const PlannedCapture& c) {
      return std::llabs(c.pos - pos) <= distance;
    });
  };
  int64_t learned = in.shared_prefix;
  bool has_learned = learned <= n && learned - r >= options_.learned_min_tokens &&
                     !near_capture(learned, options_.learned_merge_tokens);
  if (has_learned) caps.push_back({learned, CaptureKind::kLearned});
  // The named shared boundary: a learned point the client announces before any branch exists.
  const int64_t named = in.shared_boundary;
  const bool has_named = options_.capture_shared_boundary && named > 0 && named < n &&
                         named - r >= options_.learned_min_tokens &&
                         !near_capture(named, options_.learned_merge_tokens);
  if (has_named) caps.push_back({named, CaptureKind::kLearned});

  // Grid points snap to the ends of passes planned around the captures above.
  std::vector<int64_t> stops;
  for (const PlannedCapture& c : caps) stops.push_back(c.pos);
  std::sort(stops.begin(), stops.end());
  std::vector<PrefillPass> base_passes = SplitPasses(r, n, stops, max_pass);
  CapturePlan plan;
  plan.grid_points = GridPointsFor(in.ram_budget_bytes, in.private_bytes);
  for (int64_t g : GridPositions(n, plan.grid_points)) {
    if (g <= r || g >= n) continue;
    if (has_learned && std::llabs(g - learned) <= options_.learned_merge_tokens) continue;
    if (has_named && std::llabs(g - named) <= options_.learned_merge_tokens) continue;
    int64_t best = g;
    int64_t best_distance = options_.grid_snap_tokens + 1;
    for (const PrefillPass& p : base_passes) {
      int64_t d = std::llabs(p.end - g);
      if (d < best_distance) {
        best_distance = d;
        best = p.end;
      }
    }
    caps.push_back({best, CaptureKind::kGrid});
  }

  // One capture per position, named by the strongest reason; drop existing checkpoints.
  std::sort(caps.begin(), caps.end(), [](const PlannedCapture& a, const PlannedCapture& b) {
    return a.pos != b.pos ? a.pos < b.pos : a.kind < b.kind;
  });
  absl::flat_hash_set<int64_t> existing(in.existing.begin(), in.existing.end());
  for (const PlannedCapture& c : caps) {
    if (!plan.captures.empty() && plan.captures.back().pos == c.pos) continue;
    if (existing.contains(c.pos)) continue;
    plan.captures.push_back(c);
  }
  stops.clear();
  for (const PlannedCapture& c : plan.captures) stops.push_back(c.pos);
  plan.passes = SplitPasses(r, n, stops, max_pass);
  return plan;
}

}  // namespace cairn::cache
