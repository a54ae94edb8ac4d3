#ifndef CAIRN_SERVICES_CACHE_SESSION_TABLE_H_
#define CAIRN_SERVICES_CACHE_SESSION_TABLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "services/cache/session_sink.h"

namespace cairn::cache {

// The inference daemons' sessions: who is connected, when each last showed a sign of life,
// the slot count each declared, the slots it used, where its messages go, and which restore
// leases and capture reservations it holds (with the per-session quotas and the one lease
// and one reservation per slot rule). Spills a session owes are the core's (its residency
// state machine keys them by session); the table only says which slots to drop.
//
// Thread-safe, with its own mutex. Heartbeats (Touch), detaching a stream and the session
// count take only this lock, never the daemon's. The daemon calls the other methods with its
// coordinating lock held (daemon, then table: the only order); the table calls nothing outside
// itself except SessionSink::Send inside WithSink, which must only queue.
//
// Invariants: (1) a lease or reservation id is held by at most one open session, once;
// (2) a session holds at most one lease and one reservation per slot, and at most the
// options' quotas.
class SessionTable {
 public:
  struct Options {
    int max_leases_per_session = 64;
    int max_reservations_per_session = 64;
    uint32_t max_slots = 1 << 16;  // Slots of a session that declared none.
  };
  // What a closed session held, for its owner to release.
  struct Closed {
    std::string name;
    std::vector<uint64_t> leases;        // Ascending.
    std::vector<uint64_t> reservations;  // Ascending.
    std::vector<int32_t> slots;          // Ascending.
  };

  explicit SessionTable(Options options) : options_(options) {}
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // Opens session `id` (a fresh id) named `name`, declaring `slot_count` slots
  // (0: undeclared, any slot below max_slots), whose messages go to `sink` until Detach.
  // `now` is a monotonic time. Unavailable once draining; AlreadyExists for an open id.
  absl::Status Open(uint64_t id, std::string name, uint32_t slot_count, SessionSink* sink,
                    absl::Duration now) ABSL_LOCKS_EXCLUDED(mu_);
  // Refuses new sessions from now on. Idempotent.
  void BeginDrain() ABSL_LOCKS_EXCLUDED(mu_);
  bool draining() const ABSL_LOCKS_EXCLUDED(mu_);

  // Records a sign of life of `id` at `now`. NotFound for a session that is not open.
  absl::Status Touch(uint64_t id, absl::Duration now) ABSL_LOCKS_EXCLUDED(mu_);
  // Open sessions silent for more than `timeout` at `now`, ascending.
  std::vector<uint64_t> Silent(absl::Duration now, absl::Duration timeout) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // NotFound unless `id` is open.
  absl::Status CheckOpen(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The slot index `slot` of session `id`: NotFound for a session that is not open,
  // InvalidArgument when `slot` is not below the slot count it declared (or max_slots).
  absl::StatusOr<int32_t> Slot(uint64_t id, uint32_t slot) const ABSL_LOCKS_EXCLUDED(mu_);
  // Remembers that session `id` used `slot` (dropped from the core when the session ends).
  // No-op for a session that is not open.
  void UseSlot(uint64_t id, int32_t slot) ABSL_LOCKS_EXCLUDED(mu_);
  // The slots session `id` has used, ascending (empty for a session that is not open).
  std::vector<int32_t> UsedSlots(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  bool UsedSlot(uint64_t id, int32_t slot) const ABSL_LOCKS_EXCLUDED(mu_);

  // Nothing more is sent to `id`'s sink once this returns. Idempotent.
  void Detach(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `id` is open with its sink attached.
  bool Attached(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `send` with `id`'s sink, under this table's lock (which keeps the sink alive against
  // Detach). Returns false, without running it, when the session is closed or detached.
  bool WithSink(uint64_t id, absl::FunctionRef<void(SessionSink&)> send) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether session `id` may take a lease on `slot`: NotFound for a session that is not
  // open; FailedPrecondition when the slot holds a lease already; ResourceExhausted at the
  // quota. AddLease checks the same and records lease `lease` as held there.
  absl::Status CheckCanLease(uint64_t id, int32_t slot) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AddLease(uint64_t id, int32_t slot, uint64_t lease) ABSL_LOCKS_EXCLUDED(mu_) {
    return AddHeld(id, slot, lease, /*lease=*/true);
  }
  // Whether session `id` holds `lease`.
  bool HoldsLease(uint64_t id, uint64_t lease) const ABSL_LOCKS_EXCLUDED(mu_) {
    return Holds(id, lease, /*lease=*/true);
  }
  // Forgets `lease` (no-op when no session holds it).
  void RemoveLease(uint64_t lease) ABSL_LOCKS_EXCLUDED(mu_) { RemoveHeld(lease, /*lease=*/true); }

  // The same for capture reservations.
  absl::Status CheckCanReserve(uint64_t id, int32_t slot) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AddReservation(uint64_t id, int32_t slot, uint64_t reservation)
      ABSL_LOCKS_EXCLUDED(mu_) {
    return AddHeld(id, slot, reservation, /*lease=*/false);
  }
  bool HoldsReservation(uint64_t id, uint64_t reservation) const ABSL_LOCKS_EXCLUDED(mu_) {
    return Holds(id, reservation, /*lease=*/false);
  }
  void RemoveReservation(uint64_t reservation) ABSL_LOCKS_EXCLUDED(mu_) {
    RemoveHeld(reservation, /*lease=*/false);
  }

  // Closes `id` and returns what it held (nullopt when it was not open). Its leases and
  // reservations are forgotten here; the caller releases them.
  std::optional<Closed> Close(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Session {
    std::string name;
    SessionSink* sink = nullptr;  // Null once detached.
    uint32_t slot_count = 0;
    absl::Duration last_seen;
    absl::flat_hash_set<int32_t> slots;
    absl::flat_hash_map<int32_t, uint64_t> leases;        // By slot.
    absl::flat_hash_map<int32_t, uint64_t> reservations;  // By slot.
  };
  // Where a lease or reservation is held.
  struct Holder {
    uint64_t session = 0;
    int32_t slot = 0;
  };

  const Session* FindLocked(uint64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The shared rule of leases and reservations (`lease` false): one per slot, at most the
  // quota per session.
  absl::Status CheckCanHoldLocked(uint64_t id, int32_t slot, bool lease) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Add, Holds and Remove of leases (`lease`) or reservations.
  absl::Status AddHeld(uint64_t id, int32_t slot, uint64_t item, bool lease)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool Holds(uint64_t id, uint64_t item, bool lease) const ABSL_LOCKS_EXCLUDED(mu_);
  void RemoveHeld(uint64_t item, bool lease) ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Holder> lease_holders_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Holder> reservation_holders_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_SESSION_TABLE_H_
