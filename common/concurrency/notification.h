#ifndef CAIRN_COMMON_CONCURRENCY_NOTIFICATION_H_
#define CAIRN_COMMON_CONCURRENCY_NOTIFICATION_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"

namespace cairn {

// A one-shot event. Thread-safe.
class Notification {
 public:
  void Notify() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    notified_ = true;
    cv_.SignalAll();
  }
  bool HasBeenNotified() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return notified_;
  }
  void WaitForNotification() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    while (!notified_) cv_.Wait(&mu_);
  }
  // Returns true if notified within `timeout`.
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::Time deadline = absl::Now() + timeout;
    MutexLock lock(&mu_);
    while (!notified_) {
      absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      cv_.WaitWithTimeout(&mu_, left);
    }
    return true;
  }

 private:
  mutable Mutex mu_;
  mutable CondVar cv_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cairn

#endif  // CAIRN_COMMON_CONCURRENCY_NOTIFICATION_H_
