#ifndef CAIRN_COMMON_TIME_CLOCK_H_
#define CAIRN_COMMON_TIME_CLOCK_H_

#include "absl/time/time.h"
#include "common/concurrency/mutex.h"

namespace cairn {

// Time as a seam: production code reads a Clock, tests and simulators drive a FakeClock.
// Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // Monotonic time for durations and deadlines.
  virtual absl::Duration MonotonicNow() const = 0;
};

// The system clock. Thread-safe.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override;
  absl::Duration MonotonicNow() const override;
  // A process-wide instance (trivially destructible, never freed).
  static RealClock* Get();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}
  absl::Time Now() const override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Duration MonotonicNow() const override ABSL_LOCKS_EXCLUDED(mu_);
  void Advance(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  void SetTime(absl::Time t) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cairn

#endif  // CAIRN_COMMON_TIME_CLOCK_H_
