#ifndef CAIRN_SERVICES_CACHE_CAPTURE_RESERVATIONS_H_
#define CAIRN_SERVICES_CACHE_CAPTURE_RESERVATIONS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/concurrency/mutex.h"
#include "services/cache/arena_residency.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

// One capture reservation as the daemon keeps it: the core's ticket and the region the client
// copies the private state and tail into.
struct Reservation {
  uint64_t session = 0;
  SlotKey slot;
  CheckpointId ticket = 0;
  absl::Duration expires;  // On the monotonic clock.
  StateBytes state;
  std::vector<ChunkId> new_chunk_regions;  // Borrowed-chunk regions this reservation made.
};

// The capture reservations the daemon has granted, by id, and when each expires. Holds no
// bytes itself (a reservation's region travels with it and is freed by whoever takes it out)
// and calls nothing.
//
// Thread-safe: its own lock, never held while calling out. The daemon adds and takes
// reservations under its coordinating lock too (so the core's tickets agree with them);
// Expired and size need neither.
class CaptureReservations {
 public:
  CaptureReservations() = default;
  CaptureReservations(const CaptureReservations&) = delete;
  CaptureReservations& operator=(const CaptureReservations&) = delete;

  // Records `r` under `id`. Returns false (keeping the first) when `id` is taken already.
  bool Add(uint64_t id, Reservation r) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes reservation `id` and hands it over, or nullopt.
  std::optional<Reservation> Take(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  bool Contains(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The reservations whose expiry is at or before `now`, in id order.
  std::vector<uint64_t> Expired(absl::Duration now) const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, Reservation> reservations_ ABSL_GUARDED_BY(mu_);
};

// Checks a committed capture against what the arena holds: `bytes` is the reservation's
// region (private state then tail, as `state` says). Sets the checksums of `state` from the
// bytes (the copy the cache will serve is what later restores verify, SM9) and compares them
// with the client's `private_checksum` and `tail_checksum` (0: not given). DataLoss naming the
// part that differs; InvalidArgument when `bytes` is shorter than `state` says.
absl::Status VerifyCapture(absl::Span<const uint8_t> bytes, uint64_t private_checksum,
                           uint64_t tail_checksum, StateBytes* state);

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CAPTURE_RESERVATIONS_H_
