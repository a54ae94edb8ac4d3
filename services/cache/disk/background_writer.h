#ifndef CAIRN_SERVICES_CACHE_DISK_BACKGROUND_WRITER_H_
#define CAIRN_SERVICES_CACHE_DISK_BACKGROUND_WRITER_H_

// The disk tier's background writer (docs/architecture.md §4): one thread publishes queued
// checkpoints in order, through 1 MiB staging pieces, yielding to model work for at most 0.5 s at a
// time, and merges a pending write into a newer one that covers it.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "services/cache/disk/disk_store.h"

namespace cairn::cache {

// The "model is busy" signal. Implemented by the daemon from the inference side's reports.
// Thread-safe.
class ModelActivity {
 public:
  virtual ~ModelActivity() = default;
  // Waits until the model has no work or `timeout` passes; returns true if idle.
  virtual bool WaitUntilIdle(absl::Duration timeout) = 0;
};

struct BackgroundWriterOptions {
  absl::Duration max_yield =
      absl::Milliseconds(500);  // docs/architecture.md §4: at most 0.5 s per yield.
  size_t max_queue = 256;       // Pending jobs before Enqueue refuses.
};

// One checkpoint to publish. Every span in `request` must stay valid until `done` runs.
struct WriteJob {
  PublishRequest request;
  // Checkpoints whose pending jobs this one covers, as the caller's policy decided (the cache
  // core: a checkpoint whose tokens are a prefix of this one's). They are dropped, and the
  // chunks they would have written that this job shares move into it.
  std::vector<uint64_t> supersedes;
  std::function<void(absl::Status)> done;  // Runs on the writer thread; OK = acknowledged.
};

struct BackgroundWriterStats {
  uint64_t published = 0;
  uint64_t failed = 0;
  uint64_t merged = 0;  // Pending jobs dropped because a newer job covered them.
  uint64_t yields = 0;  // Waits for the model (each at most max_yield).
  // Bytes still to write: the pending jobs' new chunks and state, and the running job's.
  uint64_t queued_bytes = 0;
};

// Thread-safe. Shutdown() (or the destructor) finishes the job in progress, then completes
// every pending job with Cancelled.
class BackgroundWriter {
 public:
  // `store` and `activity` (nullptr = never busy) must outlive the writer.
  BackgroundWriter(DiskStore* store, ModelActivity* activity, BackgroundWriterOptions options);
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  // Queues `job`. A pending job of a checkpoint in `job.supersedes` is dropped (its `done` gets
  // Cancelled) and the chunks it would have written that `job` shares move into `job`.
  // ResourceExhausted when the queue is full, FailedPrecondition after Shutdown; `job.done` is not
  // called then. `expected`: the job Expect() announced (its expectation ends here, queued or
  // refused).
  absl::Status Enqueue(WriteJob job, bool expected = false) ABSL_LOCKS_EXCLUDED(mu_);
  // Announces a job the caller has decided to write and will Enqueue(job, true) shortly, once
  // it may (the daemon queues its jobs after releasing its own lock, since Enqueue can run a
  // superseded job's callback): until then the writer is not idle, so a flush that starts in
  // between waits for that job too. Takes only the writer's lock and calls nothing back, so it
  // may be called under the caller's locks.
  void Expect() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the queue is empty, no job runs and none is expected; false if `timeout`
  // passed first.
  bool WaitIdle(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `idle` once, without the writer's lock, as soon as the queue is empty, no job runs
  // and none is expected: at once on this thread if that is so now (returning 0), else on the
  // thread that makes it so (the writer's, an expected Enqueue's, or the one calling Shutdown).
  // Returns a token for CancelIdleWait. Blocks nobody: Flush waits this way without holding a
  // thread. `idle` must be quick.
  uint64_t NotifyWhenIdle(std::function<void()> idle) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops a waiter registered by NotifyWhenIdle. Returns false if it already ran (or is
  // running now: it completes on its own thread).
  bool CancelIdleWait(uint64_t token) ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  BackgroundWriterStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run();
  void Yield();
  // Enqueue's part under the lock: refuses `job` (stopping, full queue) or queues it, moving the
  // jobs it supersedes into `superseded`.
  absl::Status Admit(WriteJob& job, std::vector<WriteJob>& superseded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No job queued or running, and none expected (after Shutdown an expected job would be
  // refused: it is not waited for).
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.empty() && !running_job_ && (expected_ == 0 || stopping_);
  }
  // Takes the idle waiters when the writer is idle (queue empty, no job running or expected).
  std::vector<std::function<void()>> TakeIdleWaitersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DiskStore* const store_;
  ModelActivity* const activity_;
  const BackgroundWriterOptions options_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<WriteJob> queue_ ABSL_GUARDED_BY(mu_);
  bool running_job_ ABSL_GUARDED_BY(mu_) = false;
  int64_t expected_ ABSL_GUARDED_BY(mu_) = 0;  // Expect()ed jobs not yet Enqueue()d.
  uint64_t running_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  BackgroundWriterStats stats_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::function<void()>> idle_waiters_ ABSL_GUARDED_BY(mu_);  // By token.
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  std::thread thread_;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_DISK_BACKGROUND_WRITER_H_
