#ifndef CAIRN_SERVICES_INFER_ENGINE_STATE_CACHE_H_
#define CAIRN_SERVICES_INFER_ENGINE_STATE_CACHE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "services/infer/engine/kv_memory.h"

namespace cairn::infer {

// Where a request's starting state came from.
enum class StateTier { kCold, kLive, kRam, kDisk };

// Why a capture point was planned (docs/architecture.md §3).
enum class CapturePointKind { kEnd, kReused, kStable, kGrid, kLearned };

struct PlannedCapture {
  int64_t position = 0;
  CapturePointKind kind = CapturePointKind::kEnd;
};

// A place a prompt could resume from.
struct StateCandidate {
  StateTier tier = StateTier::kCold;
  int64_t depth = 0;           // Tokens it covers.
  uint64_t checkpoint_id = 0;  // kRam / kDisk.
  int live_slot = -1;          // kLive: one of this daemon's slots.
};

// The cache's answer for one prompt.
struct StatePlan {
  // Usable candidates on the prompt's path, deepest first (live candidates only for this
  // daemon's own slots).
  std::vector<StateCandidate> candidates;
  int64_t shared_prefix = 0;             // Longest prefix shared with any cached history.
  std::vector<PlannedCapture> captures;  // Sorted by position.
  std::vector<int64_t> pass_ends;        // Where prefill passes end (captures included).
  std::string miss_reason;
  // Bytes overwriting each slot would first spill into the cache's arena, by slot (a slot
  // beyond the vector's end, or without a cache, spills nothing).
  std::vector<int64_t> slot_spill_bytes;
};

// What a restore did.
struct RestoreStats {
  StateTier tier = StateTier::kRam;
  int64_t depth = 0;
  int64_t rows_copied = 0;
  absl::Duration wait;  // From StartRestore until the lease was ready (other slots' rows spilled).
  absl::Duration copy;  // Copying and verifying the bytes.
};

// What bounds a restore's wait for its lease besides the cache's own limits: the request's
// deadline, and whether its client has gone away (asked at every PollRestore, so it must be
// cheap and take no lock; null: never).
struct RestoreLimits {
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> cancelled;
};

// The inference side of the checkpoint cache (docs/architecture.md §5), as the scheduler sees it:
// the cache daemon's client implements it; without a cache daemon there is none. Every call runs on
// the scheduler thread, which owns `memory`, and may block for a bounded time (an RPC deadline);
// none waits for a restore's lease (StartRestore, PollRestore).
// A call that fails with Unavailable means the cache is gone: the scheduler carries on without
// it (cold prefill, live slots only).
//
// Thread roles: every method is called on the scheduler thread except `connected()`, which is
// thread-safe.
class StateCache {
 public:
  virtual ~StateCache() = default;

  // Whether the cache daemon is connected now (with a registered model).
  virtual bool connected() const = 0;
  // Changes whenever a new cache session starts (a reconnect, or a restarted cache daemon).
  // Slots registered under another generation are unknown to the cache: the scheduler
  // re-registers their frontiers (StartSlot cold, then UpdateFrontier with every token).
  virtual uint64_t generation() const = 0;

  // Looks up `prompt` and plans its captures. `stable_boundary` and `shared_boundary` (the end
  // of a preamble other conversations also send) 0 = unknown.
  virtual absl::StatusOr<StatePlan> Lookup(absl::Span<const int32_t> prompt,
                                           int64_t stable_boundary, int64_t shared_boundary,
                                           const std::string& conversation) = 0;

  // Announces that `slot` starts a request: `cold` (its rows are rewritten from row 0) or
  // continuing its live frontier in place. Before returning, preserves every borrowed row of the
  // slot that a cold start would overwrite (copies it into the arena).
  virtual absl::Status StartSlot(int slot, bool cold, const std::string& conversation,
                                 KvMemory* memory) = 0;

  // A restore runs in three calls, so that waiting for its lease never holds the scheduler
  // thread (the other slots keep stepping meanwhile): StartRestore, then PollRestore once a
  // scheduler iteration until it answers, or AbandonRestore when the request ends first.
  //
  // Starts restoring checkpoint `checkpoint_id` into `slot` (which the restore may overwrite
  // after preserving its borrowed rows): leases the checkpoint and preserves the slot's own
  // borrowed rows, without waiting for rows other slots still hold. On error there is no restore
  // to poll, the slot is empty (reset) and the caller prefills cold: Unavailable when the cache
  // went away, NotFound when the checkpoint is gone.
  virtual absl::Status StartRestore(uint64_t checkpoint_id, int slot,
                                    const std::string& conversation, KvMemory* memory) = 0;
  // Advances the restore StartRestore began in `slot`, without blocking for its lease: does the
  // spills of this daemon's slots the lease waits for, and returns nullopt while it is not ready.
  // Once it is, copies and verifies the bytes, validates the slot, gives the lease back and
  // returns what it did. On error the restore is over (its lease given back) and the slot empty:
  // DataLoss for a checksum mismatch, Unavailable when the cache went away or the lease never
  // became ready, NotFound when the checkpoint is gone, and at `limits` DeadlineExceeded at its
  // deadline, Cancelled once its client is gone (the session goes on).
  virtual absl::StatusOr<std::optional<RestoreStats>> PollRestore(int slot, KvMemory* memory,
                                                                  const RestoreLimits& limits) = 0;
  // Ends the restore still running in `slot` because its request ended (`why`): gives its lease
  // back and empties the slot. Does nothing when no restore runs there.
  virtual void AbandonRestore(int slot, KvMemory* memory, const absl::Status& why) = 0;

  // Tells the cache that `slot` computed `appended` tokens past depth `expected_depth`.
  virtual absl::Status UpdateFrontier(int slot, absl::Span<const int32_t> appended,
                                      int64_t expected_depth) = 0;

  // Captures a checkpoint of `slot` at its current position `depth` (private state and tail
  // copied into the arena; full chunks borrowed from the slot).
  virtual absl::Status Capture(int slot, int64_t depth, CapturePointKind kind,
                               const std::string& conversation, int64_t stable_boundary,
                               KvMemory* memory) = 0;

  // The slot ran out of work (its borrowed rows may be spilled in the background) or got
  // work again.
  virtual void SlotIdle(int slot) = 0;
  virtual void SlotBusy(int slot) = 0;

  // Runs background work the cache asked for (idle spills, re-registration after a reconnect)
  // for about `budget`. Returns true when work remains.
  virtual bool RunBackgroundWork(KvMemory* memory, absl::Duration budget) = 0;
  // Whether RunBackgroundWork has anything to do.
  virtual bool HasBackgroundWork() const = 0;
  // Waits for background copies RunBackgroundWork started and answers them (the scheduler's
  // last call before it stops using `memory`). The default has none.
  virtual void FinishBackgroundCopies(KvMemory* memory) { static_cast<void>(memory); }
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_STATE_CACHE_H_
