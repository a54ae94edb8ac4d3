#ifndef CAIRN_SERVICES_CACHE_RESTORE_LEASES_H_
#define CAIRN_SERVICES_CACHE_RESTORE_LEASES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "services/cache/arena_residency.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

// The arena regions a restore from disk filled; owned by its lease and freed on release.
struct DiskLoad {
  StateBytes state;
  absl::flat_hash_map<ChunkId, HeldRegion> chunks;
};

// One restore lease as the daemon keeps it.
struct Lease {
  uint64_t session = 0;
  CheckpointId checkpoint = 0;
  SlotKey slot;
  int64_t kept_rows = 0;
  std::vector<ChunkId> chunks;  // Read from the arena: past kept_rows.
  absl::Duration duration;      // Granted; counted from when the lease becomes ready.
  absl::Duration expires;       // On the monotonic clock; meaningful once ready.
  absl::Duration ready_by;      // On the monotonic clock: not ready by then, it fails.
  bool ready = true;
  absl::flat_hash_set<uint64_t> awaiting;  // Spills to finish before it is ready.
  std::unique_ptr<DiskLoad> loaded;        // Regions a disk restore filled.
  // A restore from RAM: the arena regions it hands out, held in ArenaResidency until release.
  std::vector<HeldRegion> holds;
};

// What a waiting lease needs to be answered: the checkpoint and the chunks the client reads.
struct LeaseView {
  uint64_t session = 0;
  CheckpointId checkpoint = 0;
  SlotKey slot;
  int64_t kept_rows = 0;
  std::vector<ChunkId> chunks;
  bool ready = true;
};

// The restore leases the daemon has granted, by id: which are ready, which wait for spills,
// when each expires, and which waited too long. Holds no bytes (a disk load's regions travel with
// its lease and are freed by whoever takes the lease out) and calls nothing.
//
// Thread-safe: its own lock, never held while calling out. The daemon changes leases under its
// coordinating lock too (so the core's pins agree with them); Expired and size need neither.
// Invariants: (1) a lease is ready iff it awaits no spill and was marked ready (or granted
// ready); (2) `expires` is set when a lease becomes ready and never moves after.
class RestoreLeases {
 public:
  RestoreLeases() = default;
  RestoreLeases(const RestoreLeases&) = delete;
  RestoreLeases& operator=(const RestoreLeases&) = delete;

  // Records `lease` under `id`; a lease granted ready expires at `lease.expires`. Returns
  // false (dropping nothing) when `id` is taken already.
  bool Add(uint64_t id, Lease lease) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes lease `id` and hands it over (its disk load with it), or nullopt.
  std::optional<Lease> Take(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // A copy of lease `id` without its disk load, or nullopt.
  std::optional<LeaseView> Find(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);

  // The leases not yet ready that wait for spill `spill`, in id order.
  std::vector<uint64_t> AwaitingSpill(uint64_t spill) const ABSL_LOCKS_EXCLUDED(mu_);
  // Spill `spill` finished well: no lease waits for it any more. Returns the leases (in id
  // order) that waited for it and now wait for nothing; they are not ready until MarkReady.
  std::vector<uint64_t> SpillDone(uint64_t spill) ABSL_LOCKS_EXCLUDED(mu_);
  // Lease `id` (not ready) also waits for `spills`. No-op for an unknown or ready lease.
  void Await(uint64_t id, const std::vector<uint64_t>& spills) ABSL_LOCKS_EXCLUDED(mu_);
  // Lease `id` is ready from `now`: it expires its duration later. Returns false for an
  // unknown lease or one that still awaits spills.
  bool MarkReady(uint64_t id, absl::Duration now) ABSL_LOCKS_EXCLUDED(mu_);

  // Lease `id` also holds those of `regions` it does not hold yet (by offset); returns them,
  // for ArenaResidency::Hold. Empty for an unknown lease.
  std::vector<HeldRegion> AddHolds(uint64_t id, const std::vector<HeldRegion>& regions)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The ready leases whose expiry is at or before `now`, in id order.
  std::vector<uint64_t> Expired(absl::Duration now) const ABSL_LOCKS_EXCLUDED(mu_);
  // The leases still not ready whose `ready_by` is at or before `now`, in id order.
  std::vector<uint64_t> Overdue(absl::Duration now) const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_RESTORE_LEASES_H_
