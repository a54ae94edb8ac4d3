#ifndef CAIRN_COMMON_CONCURRENCY_THREAD_POOL_H_
#define CAIRN_COMMON_CONCURRENCY_THREAD_POOL_H_

#include <cstddef>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/concurrency/mutex.h"

namespace cairn {

// A fixed pool of worker threads running scheduled closures in FIFO order.
// Thread-safe. Shutdown() (or the destructor) runs every closure already scheduled, then joins.
class ThreadPool {
 public:
  // Starts `num_threads` (at least 1) workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `fn`. Returns false (and drops `fn`) after Shutdown() has begun.
  bool Schedule(absl::AnyInvocable<void() &&> fn) ABSL_LOCKS_EXCLUDED(mu_);
  // What TrySchedule did with its closure.
  enum class Queued { kYes, kFull, kStopping };
  // As Schedule, but drops `fn` and returns kFull where `max_queued` closures already wait: the
  // bound is checked and the closure queued in one step, so concurrent callers never pass it.
  Queued TrySchedule(absl::AnyInvocable<void() &&> fn, size_t max_queued) ABSL_LOCKS_EXCLUDED(mu_);
  // TrySchedule for a daemon's calls, as the status a caller answers with: OK;
  // ResourceExhausted "<who> has N calls waiting for a thread; retry later" where `max_queued`
  // wait; Unavailable "<who> is draining" after Shutdown() has begun.
  absl::Status ScheduleCall(absl::AnyInvocable<void() &&> fn, size_t max_queued,
                            absl::string_view who) ABSL_LOCKS_EXCLUDED(mu_);
  // Finishes queued work and joins the workers. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  size_t queued() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;  // Written only by the constructor and Shutdown().
};

}  // namespace cairn

#endif  // CAIRN_COMMON_CONCURRENCY_THREAD_POOL_H_
