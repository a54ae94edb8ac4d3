#ifndef CAIRN_SERVICES_CACHE_DEADLINE_POOL_H_
#define CAIRN_SERVICES_CACHE_DEADLINE_POOL_H_

#include <cstddef>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/thread_pool.h"
#include "common/time/clock.h"

namespace cairn::cache {

struct DeadlinePoolOptions {
  int threads = 2;
  // Tasks waiting for a thread beyond this are refused (ResourceExhausted): an overload is
  // answered, not absorbed.
  size_t max_queued = 64;
};

// A bounded pool for slow work that serves a request with a deadline (the cache daemon's disk
// loads), apart from the general I/O pool so that slow loads never hold the threads that
// answer quick calls. A task that waits past its deadline is not run for nothing: it is
// called with DeadlineExceeded instead.
//
// Thread-safe. Every task is called exactly once: on a pool thread with OK when a thread takes
// it before its deadline, DeadlineExceeded when the deadline had passed by then, Unavailable
// when the pool shut down before it started; or, when Schedule refuses it, on the caller's
// thread before Schedule returns. No lock is held while a task runs.
class DeadlinePool {
 public:
  using Task = absl::AnyInvocable<void(absl::Status) &&>;

  // `clock` (deadlines are read on its Now()) must outlive the pool.
  DeadlinePool(DeadlinePoolOptions options, const Clock* clock);
  ~DeadlinePool();
  DeadlinePool(const DeadlinePool&) = delete;
  DeadlinePool& operator=(const DeadlinePool&) = delete;

  // Queues `task` for `deadline` (InfiniteFuture: none) and returns OK; or, when max_queued
  // tasks wait already (ResourceExhausted) or after Shutdown (Unavailable), calls `task` with
  // that refusal at once and returns it.
  absl::Status Schedule(absl::Time deadline, Task task) ABSL_LOCKS_EXCLUDED(mu_);
  // Calls every task not yet started with Unavailable, lets running ones finish, joins the
  // threads. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // Tasks accepted and not yet started.
  size_t queued() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const DeadlinePoolOptions options_;
  const Clock* const clock_;
  mutable Mutex mu_;
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  ThreadPool pool_;  // Last: its threads stop before the fields above go.
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_DEADLINE_POOL_H_
