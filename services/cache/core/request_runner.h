#ifndef CAIRN_SERVICES_CACHE_CORE_REQUEST_RUNNER_H_
#define CAIRN_SERVICES_CACHE_CORE_REQUEST_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/cache/core/checkpoint_cache.h"

namespace cairn::cache {

struct ServeRequest {
  Identities identities;
  std::string conversation;
  absl::Span<const TokenId> tokens;
  int64_t stable_boundary = -1;
  absl::Span<const TokenId> generated;  // Tokens the model generates after the prompt.
};

struct CaptureOutcome {
  int64_t pos = 0;
  CaptureKind kind = CaptureKind::kEnd;
  CheckpointId id = 0;  // 0 when not admitted.
  bool admitted = false;
  bool persisted = false;
  std::string rejected;  // Why it was not admitted (empty when admitted or duplicate).
};

struct ServeOutcome {
  Candidate used;  // Where the prompt resumed (tier kNone: cold).
  int64_t shared_prefix = 0;
  int64_t prefilled = 0;  // Tokens computed for the prompt.
  int32_t slot = 0;
  RestorePlan restore;  // For RAM and disk candidates.
  std::vector<PrefillPass> passes;
  std::vector<CaptureOutcome> captures;
  // The frontier another conversation left in the chosen slot, captured before the overwrite
  // (PlannerOptions::preserve_frontier); `admitted` false when none was captured.
  CaptureOutcome preserved_frontier;
  std::vector<Event> evictions;      // kEvict, kDiskEvict and kQuarantine events of this request.
  std::vector<ChunkCopy> preserved;  // Borrowed chunks copied out before a slot overwrite.
};

// The reference sequence for one request (docs/architecture.md §5) over a CheckpointCache, with no
// bytes: look up, pick a slot (the live candidate's, else an empty one, else the least recently
// used), capture the frontier another conversation left there (when the planner says so),
// continue / restore / start cold, prefill up to each planned capture and capture it,
// persist what ShouldPersist selects, then extend the frontier with the generated tokens. The
// simulator runs exactly this; the daemons run the same steps with real copies in between.
// Thread-compatible; `cache` must outlive the runner.
class RequestRunner {
 public:
  RequestRunner(CheckpointCache* cache, int slots, uint64_t daemon_session = 1);

  // Errors from the cache (unregistered identity, ...) are returned as they are; a capture
  // that does not fit is reported in the outcome, not as an error.
  absl::StatusOr<ServeOutcome> Serve(const ServeRequest& request);

  int slots() const { return static_cast<int>(last_use_.size()); }

 private:
  // The live candidate's slot; else (PlannerOptions::restore_in_holding_slot) the slot whose
  // frontier shares at least the restore depth of `prompt`, the most; else the least
  // recently used.
  int32_t ChooseSlot(const Candidate& best, absl::Span<const TokenId> prompt);
  // What overwriting `slot` would spill (CheckpointCache::SlotSpillBytes); 0 for an unused
  // slot.
  int64_t SpillBytes(int32_t slot) const;
  // Captures the frontier of `slot` before `request` overwrites it, if another conversation
  // left it there. The restore candidate `keep` (0: none) is pinned meanwhile.
  absl::StatusOr<CaptureOutcome> PreserveFrontier(int32_t slot, const ServeRequest& request,
                                                  CheckpointId keep);
  // Completes every spill the cache asked for (copies are instantaneous here) and returns the
  // chunks of those in `preserve`.
  std::vector<ChunkCopy> CompleteSpills(absl::Span<const uint64_t> preserve);

  CheckpointCache* cache_;
  uint64_t daemon_session_;
  std::vector<int64_t> last_use_;  // Per slot: request counter at last use; -1 never used.
  // Per slot: the conversation and stable boundary of the request that left its frontier.
  std::vector<std::string> last_conversation_;
  std::vector<int64_t> last_stable_;
  int64_t served_ = 0;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CORE_REQUEST_RUNNER_H_
