#ifndef CAIRN_SERVICES_CACHE_SLOT_ACTIVITY_H_
#define CAIRN_SERVICES_CACHE_SLOT_ACTIVITY_H_

#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "services/cache/core/types.h"
#include "services/cache/disk/background_writer.h"

namespace cairn::cache {

// The "model is busy" signal the disk writer yields to: busy while any slot has started work
// (StartSlot, AcquireRestore, SlotBusy) and not reported SlotIdle since. Thread-safe.
class SlotActivity final : public ModelActivity {
 public:
  void Busy(SlotKey slot) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    busy_.insert(slot);
  }
  void Idle(SlotKey slot) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    busy_.erase(slot);
    if (busy_.empty()) cv_.SignalAll();
  }
  void SessionGone(uint64_t session) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    absl::erase_if(busy_, [session](const SlotKey& k) { return k.daemon_session == session; });
    if (busy_.empty()) cv_.SignalAll();
  }
  bool WaitUntilIdle(absl::Duration timeout) override ABSL_LOCKS_EXCLUDED(mu_) {
    const absl::Time deadline = absl::Now() + timeout;
    MutexLock lock(&mu_);
    while (!busy_.empty()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      cv_.WaitWithTimeout(&mu_, left);
    }
    return true;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  absl::flat_hash_set<SlotKey> busy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_SLOT_ACTIVITY_H_
