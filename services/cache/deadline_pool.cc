#include "services/cache/deadline_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status/check.h"

namespace cairn::cache {

DeadlinePool::DeadlinePool(DeadlinePoolOptions options, const Clock* clock)
    : options_(options), clock_(clock), pool_(options.threads) {}

DeadlinePool::~DeadlinePool() { Shutdown(); }

absl::Status DeadlinePool::Schedule(absl::Time deadline, Task task) {
  absl::Status refused = absl::OkStatus();
  {
    MutexLock lock(&mu_);
    if (stopping_) {
      refused = absl::UnavailableError("the pool is shutting down");
    } else if (queued_ >= options_.max_queued) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat(queued_, " slow tasks wait for a thread already; retry later"));
    } else {
      ++queued_;
      // Under mu_: Shutdown sets stopping_ under it before stopping the threads, so the pool
      // still accepts this closure.
      const bool scheduled = pool_.Schedule([this, deadline, task = std::move(task)]() mutable {
        absl::Status start = absl::OkStatus();
        {
          MutexLock inner(&mu_);
          --queued_;
          if (stopping_)
            start = absl::UnavailableError("the pool shut down before the task started");
        }
        if (start.ok() && clock_->Now() >= deadline) {
          start =
              absl::DeadlineExceededError("the deadline passed while the task waited for a thread");
        }
        std::move(task)(std::move(start));
      });
      CAIRN_CHECK(scheduled);
      return absl::OkStatus();
    }
  }
  std::move(task)(refused);
  return refused;
}

void DeadlinePool::Shutdown() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  pool_.Shutdown();  // Runs the queued closures, which see stopping_ and answer Unavailable.
}

size_t DeadlinePool::queued() const {
  MutexLock lock(&mu_);
  return queued_;
}

}  // namespace cairn::cache
