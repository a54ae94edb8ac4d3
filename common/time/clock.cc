#include "common/time/clock.h"

#include <chrono>

#include "absl/time/clock.h"

namespace cairn {

absl::Time RealClock::Now() const { return absl::Now(); }

absl::Duration RealClock::MonotonicNow() const {
  return absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

RealClock* RealClock::Get() {
  static RealClock* clock = new RealClock();  // Never destroyed: no static destructor.
  return clock;
}

absl::Time FakeClock::Now() const {
  MutexLock lock(&mu_);
  return now_;
}

absl::Duration FakeClock::MonotonicNow() const {
  MutexLock lock(&mu_);
  return now_ - absl::UnixEpoch();
}

void FakeClock::Advance(absl::Duration d) {
  MutexLock lock(&mu_);
  now_ += d;
}

void FakeClock::SetTime(absl::Time t) {
  MutexLock lock(&mu_);
  now_ = t;
}

}  // namespace cairn
