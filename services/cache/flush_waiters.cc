#include "services/cache/flush_waiters.h"

#include <utility>
#include <vector>

namespace cairn::cache {

uint64_t FlushWaiters::Published() const {
  return writer_ == nullptr ? 0 : writer_->stats().published;
}

uint64_t FlushWaiters::Start(absl::Duration timeout, Done done) {
  if (writer_ == nullptr) {
    done(absl::OkStatus(), 0);  // Nothing is ever queued without a disk tier.
    return 0;
  }
  const uint64_t before = Published();
  uint64_t id = 0;
  absl::Status refused = absl::OkStatus();
  {
    MutexLock lock(&mu_);
    if (shut_down_.ok()) {
      id = next_id_++;
      waiters_.emplace(id, Waiter{before, clock_->MonotonicNow() + timeout, 0, std::move(done)});
    } else {
      refused = shut_down_;
    }
  }
  if (!refused.ok()) {
    done(refused, 0);
    return 0;
  }
  // Runs at once when the writer is idle already, else on the writer thread later.
  const uint64_t token = writer_->NotifyWhenIdle([this, id] { Finish(id, absl::OkStatus()); });
  if (token == 0) return 0;
  MutexLock lock(&mu_);
  auto it = waiters_.find(id);
  if (it != waiters_.end()) it->second.writer_token = token;
  return id;
}

void FlushWaiters::Cancel(uint64_t id) {
  Finish(id, absl::CancelledError("the flush was cancelled by its caller"));
}

void FlushWaiters::Finish(uint64_t id, const absl::Status& status) {
  Waiter w;
  {
    MutexLock lock(&mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;  // Settled already.
    w = std::move(it->second);
    waiters_.erase(it);
  }
  // A writer waiter that is running right now finds its entry gone and does nothing.
  if (!status.ok() && w.writer_token != 0) writer_->CancelIdleWait(w.writer_token);
  w.done(status, Published() - w.published_before);
}

void FlushWaiters::ExpireDue() {
  std::vector<Waiter> due;
  {
    MutexLock lock(&mu_);
    const absl::Duration now = clock_->MonotonicNow();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      due.push_back(std::move(it->second));
      it = waiters_.erase(it);
    }
  }
  for (Waiter& w : due) {
    // A waiter the writer is running right now finds its entry gone and does nothing.
    if (w.writer_token != 0) writer_->CancelIdleWait(w.writer_token);
    w.done(absl::DeadlineExceededError("the disk writer did not drain in time"),
           Published() - w.published_before);
  }
}

void FlushWaiters::Shutdown(const absl::Status& why) {
  const absl::Status reason = why.ok() ? absl::UnavailableError("shut down") : why;
  std::map<uint64_t, Waiter> all;
  {
    MutexLock lock(&mu_);
    shut_down_ = reason;
    all.swap(waiters_);
  }
  for (auto& [id, w] : all) {
    if (w.writer_token != 0) writer_->CancelIdleWait(w.writer_token);
    w.done(reason, 0);
  }
}

size_t FlushWaiters::waiting() const {
  MutexLock lock(&mu_);
  return waiters_.size();
}

}  // namespace cairn::cache
