#ifndef CAIRN_SERVICES_CACHE_DISK_SCRUBBER_H_
#define CAIRN_SERVICES_CACHE_DISK_SCRUBBER_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "services/cache/disk/disk_store.h"

namespace cairn::cache {

struct DiskScrubberOptions {
  // Read rate cap (R7: the scrubber must not compete with restores for the disk); 0 = off.
  uint64_t bytes_per_second = uint64_t{16} << 20;
  absl::Duration first_pass_delay = absl::Minutes(1);  // After start-up (recovery first).
  absl::Duration pass_interval = absl::Hours(1);       // Pause between full passes.
};

struct DiskScrubberStats {
  uint64_t verified = 0;  // Checkpoints read and found intact.
  uint64_t corrupt = 0;   // Checkpoints found damaged (quarantined by the store).
  uint64_t bytes_read = 0;
  uint64_t passes = 0;  // Full passes completed.
};

// Verifies every checkpoint on disk in id order, one at a time, at a bounded read rate
// (docs/reliability.md R7): DiskStore::Verify reads each file through a staging buffer and
// checks its identity, length and checksum; a damaged checkpoint is quarantined by the store
// (with every other one sharing the bad file) and reported through `on_corrupt`, so the
// daemon's core forgets it and lookups stop offering it.
//
// Thread-safe. Step runs on the caller's thread (tests); Start runs steps on the scrubber's
// own thread until Shutdown. `on_corrupt` runs on that thread without the scrubber's lock and
// may take the daemon's.
class DiskScrubber {
 public:
  using OnCorrupt = std::function<void(uint64_t checkpoint_id, const absl::Status& why)>;

  // `store` must outlive the scrubber.
  DiskScrubber(DiskStore* store, DiskScrubberOptions options, OnCorrupt on_corrupt);
  ~DiskScrubber();
  DiskScrubber(const DiskScrubber&) = delete;
  DiskScrubber& operator=(const DiskScrubber&) = delete;

  // Verifies the checkpoint after the previous step's; returns the bytes it read (0 when the
  // pass ended: the next step starts a new one).
  uint64_t Step() ABSL_LOCKS_EXCLUDED(mu_);
  // Starts the background thread (no-op when bytes_per_second is 0 or already started).
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops and joins the thread. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  DiskScrubberStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits `d` or until Shutdown; false once stopping.
  bool Pause(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);

  DiskStore* const store_;
  const DiskScrubberOptions options_;
  const OnCorrupt on_corrupt_;
  mutable Mutex mu_;
  CondVar cv_;
  uint64_t cursor_ ABSL_GUARDED_BY(mu_) = 0;  // Last checkpoint id verified in this pass.
  DiskScrubberStats stats_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Written by Start and Shutdown only.
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_DISK_SCRUBBER_H_
