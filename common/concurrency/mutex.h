#ifndef CAIRN_COMMON_CONCURRENCY_MUTEX_H_
#define CAIRN_COMMON_CONCURRENCY_MUTEX_H_

// cairn::Mutex, MutexLock and CondVar: std::mutex / std::condition_variable with Clang
// thread-safety annotations, like leveldb's port::Mutex. Not absl::Mutex: Debian's prebuilt
// absl is not TSan-instrumented (style.md §5).

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace cairn {

// Thread-safe.
class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // Documents (for the analysis) that the caller holds the lock; no runtime check.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Scoped lock. Thread-compatible (one per scope).
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Condition variable tied to a cairn::Mutex. Thread-safe.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Atomically releases `mu`, waits for a signal (or a spurious wakeup), reacquires `mu`.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait, for at most `timeout`. Returns true if the wait timed out.
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    std::cv_status s = cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout));
    lock.release();
    return s == std::cv_status::timeout;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace cairn

#endif  // CAIRN_COMMON_CONCURRENCY_MUTEX_H_
