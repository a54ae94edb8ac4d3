#ifndef CAIRN_SERVICES_CACHE_CORE_CAPTURE_PLANNER_H_
#define CAIRN_SERVICES_CACHE_CORE_CAPTURE_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

// Capture planning knobs (docs/architecture.md §3, seed §5). Every default is the seed's number.
struct PlannerOptions {
  int64_t grid_step = 2048;           // Grid points sit on multiples of this.
  int max_grid_points = 4;            // At most this many grid points per request.
  int64_t grid_snap_tokens = 128;     // A grid point moves to a pass end this close.
  int64_t learned_min_tokens = 512;   // A learned point must extend reuse this far.
  int64_t learned_merge_tokens = 64;  // A learned point merges with a capture this close.
  int64_t max_pass_tokens = 2048;     // Longest prefill pass.
  // The small-budget rule: the grid points of one request may together hold at most this
  // share of the RAM budget in private state, so k = min(max_grid_points,
  // floor(budget * share / private_bytes)) (no limit when private_bytes is 0).
  double grid_budget_share = 0.125;
  // Before a slot's live frontier (prompt plus generated tokens) is overwritten by another
  // conversation, capture it (kind "reused", ranked a retry copy past its request's stable
  // boundary), so that conversation's next turn resumes after its answer instead of before it
  // (docs/cache-policy.md). Its rows are being preserved anyway; the private state is extra.
  bool preserve_frontier = true;
  // Preserve a frontier only when it lies at least this many tokens past the deepest
  // checkpoint already on its path (what it saves must pay for its private state). 0: always.
  int64_t preserve_frontier_min_tokens = 0;
  // A request that restores a checkpoint runs in the slot whose frontier shares the most of
  // its prompt, when that reaches the restore depth (the slot holds the restored rows, so they
  // are kept, not copied, and no other conversation's frontier is overwritten), instead of the
  // least recently used slot (RequestRunner; the inference scheduler chooses the same way).
  bool restore_in_holding_slot = true;
  // Among slots that hold the restore depth equally far (the shared preamble, say), the one
  // whose overwrite spills the fewest bytes (its rows already in the arena), then the least
  // recently used; false: the first such slot. Keeps a long session's frontier in its slot
  // when a short request could as well take the slot of a state the arena already holds.
  bool holding_slot_cheapest = true;
  // When no slot holds the restore depth: the slot whose overwrite spills the fewest bytes
  // instead of the least recently used (ties: the least recently used).
  bool cheapest_slot = true;
  // Capture the request's shared boundary (the end of a preamble other conversations are
  // expected to send too: system prompt and tool definitions), as a learned point, when the
  // client names one. The learned-point rule finds such a branch only when a second
  // conversation diverges there, so the second conversation would restore from the nearest
  // grid point below it; naming it lets the first conversation capture it.
  bool capture_shared_boundary = true;
};

struct PlanInput {
  int64_t prompt_tokens = 0;     // N.
  int64_t restore_depth = 0;     // Where prefill starts (0 when cold).
  bool restored_live = false;    // The state at restore_depth is a live frontier, no checkpoint.
  int64_t stable_boundary = -1;  // Tokens the client will resend unchanged; -1 if unknown.
  int64_t shared_prefix = 0;     // Longest prefix shared with cached history (lookup).
  int64_t shared_boundary = -1;  // End of a preamble other conversations share; -1 if unknown.
  // The client's longest prefill pass (it runs the passes); 0: PlannerOptions::max_pass_tokens.
  int64_t max_pass_tokens = 0;
  int64_t ram_budget_bytes = 0;
  int64_t private_bytes = 0;      // Per checkpoint.
  std::vector<int64_t> existing;  // Depths on this prompt's path that already hold a checkpoint.
};

struct PlannedCapture {
  int64_t pos = 0;
  CaptureKind kind = CaptureKind::kEnd;
  friend bool operator==(const PlannedCapture& a, const PlannedCapture& b) {
    return a.pos == b.pos && a.kind == b.kind;
  }
};

struct PrefillPass {
  int64_t begin = 0;
  int64_t end = 0;
  friend bool operator==(const PrefillPass& a, const PrefillPass& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

struct CapturePlan {
  std::vector<PlannedCapture> captures;  // Sorted by position, one per position.
  std::vector<PrefillPass> passes;       // Contiguous from restore_depth to prompt_tokens.
  int grid_points = 0;                   // k used for the grid (after the budget rule).
};

// Splits prefill [begin, end) into passes that stop at every position of `stops` inside it and
// are at most `max_pass_tokens` long (greedy from each stop). `max_pass_tokens` must be > 0.
std::vector<PrefillPass> SplitPasses(int64_t begin, int64_t end, std::vector<int64_t> stops,
                                     int64_t max_pass_tokens);

// Plans where one request leaves checkpoints and how its prefill is split into passes.
// Stateless and thread-safe.
//
// The plan: always the prompt end, the reused-history end (only when restoring a live
// frontier, which has no checkpoint yet) and the stable boundary, when they lie in
// [restore_depth, N]; grid points ⌊(i·N/k)/grid_step⌋·grid_step for i = 1..k that fall in
// (restore_depth, N), each moved to a pass end within grid_snap_tokens; the learned point
// (shared_prefix) when it is at least learned_min_tokens past restore_depth, merged into any
// always point within learned_merge_tokens (and absorbing grid points that close); the shared
// boundary the client names, under the same rules, as a second learned point. Captures
// at `existing` depths are dropped. Passes stop at every capture and are at most
// max_pass_tokens long.
class CapturePlanner {
 public:
  explicit CapturePlanner(PlannerOptions options = {}) : options_(options) {}

  // Returns InvalidArgument for inconsistent input (negative sizes, restore past the end,
  // non-positive pass or grid sizes).
  absl::StatusOr<CapturePlan> Plan(const PlanInput& input) const;

  // The grid positions for an N-token prompt with k points (before filtering and snapping).
  std::vector<int64_t> GridPositions(int64_t prompt_tokens, int k) const;
  // k after the small-budget rule.
  int GridPointsFor(int64_t ram_budget_bytes, int64_t private_bytes) const;

  const PlannerOptions& options() const { return options_; }

 private:
  PlannerOptions options_;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CORE_CAPTURE_PLANNER_H_
