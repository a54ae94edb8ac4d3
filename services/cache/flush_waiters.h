#ifndef CAIRN_SERVICES_CACHE_FLUSH_WAITERS_H_
#define CAIRN_SERVICES_CACHE_FLUSH_WAITERS_H_

#include <cstdint>
#include <functional>
#include <map>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "common/time/clock.h"
#include "services/cache/disk/background_writer.h"

namespace cairn::cache {

// The Flush calls waiting for the disk writer to drain. A flush holds no thread while it
// waits: the writer answers it when its queue empties (BackgroundWriter::NotifyWhenIdle), the
// daemon's periodic tick answers it when its deadline passes, and a draining daemon answers
// every one at once.
//
// Thread-safe, with its own mutex; `done` callbacks always run without it, on the thread of
// the call that settles them (the caller of Start, the writer thread, or the tick). Lock
// order: this table's lock is never held while calling into the writer.
class FlushWaiters {
 public:
  // Called once per flush: OK with the checkpoints published while it waited, or the
  // reason it ended without waiting for the queue (DeadlineExceeded, Unavailable).
  using Done = std::function<void(absl::Status status, uint64_t persisted)>;

  // `writer` (nullptr: no disk tier) and `clock` must outlive this object; Shutdown() must
  // be called before the writer is destroyed.
  FlushWaiters(BackgroundWriter* writer, const Clock* clock) : writer_(writer), clock_(clock) {}
  FlushWaiters(const FlushWaiters&) = delete;
  FlushWaiters& operator=(const FlushWaiters&) = delete;

  // Starts a flush that ends when every write queued so far is done or `timeout` passes
  // (seen at the next ExpireDue). Without a disk tier `done` runs at once with 0. Returns an
  // id for Cancel (0 when `done` already ran).
  uint64_t Start(absl::Duration timeout, Done done) ABSL_LOCKS_EXCLUDED(mu_);
  // Answers flush `id` Cancelled if it still waits (the caller went away).
  void Cancel(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Answers DeadlineExceeded to every flush whose deadline has passed.
  void ExpireDue() ABSL_LOCKS_EXCLUDED(mu_);
  // Answers every waiting flush with `why` (the daemon is draining). Later Starts are
  // answered `why` at once.
  void Shutdown(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  size_t waiting() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    uint64_t published_before = 0;  // The writer's count when the flush began.
    absl::Duration deadline;        // Monotonic.
    uint64_t writer_token = 0;      // For CancelIdleWait; 0 until known.
    Done done;
  };

  // Ends flush `id` with `status` if it still waits (the first settlement wins).
  void Finish(uint64_t id, const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t Published() const;

  BackgroundWriter* const writer_;
  const Clock* const clock_;
  mutable Mutex mu_;
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status shut_down_ ABSL_GUARDED_BY(mu_) = absl::OkStatus();  // Not OK once shut down.
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_FLUSH_WAITERS_H_
