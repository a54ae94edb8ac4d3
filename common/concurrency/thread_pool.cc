#include "common/concurrency/thread_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cairn {

ThreadPool::ThreadPool(int num_threads) {
  int n = std::max(1, num_threads);
  workers_.reserve(n);
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() { Shutdown(); }

bool ThreadPool::Schedule(absl::AnyInvocable<void() &&> fn) {
  MutexLock lock(&mu_);
  if (stopping_) return false;
  queue_.push_back(std::move(fn));
  cv_.Signal();
  return true;
}

ThreadPool::Queued ThreadPool::TrySchedule(absl::AnyInvocable<void() &&> fn, size_t max_queued) {
  MutexLock lock(&mu_);
  if (stopping_) return Queued::kStopping;
  if (queue_.size() >= max_queued) return Queued::kFull;
  queue_.push_back(std::move(fn));
  cv_.Signal();
  return Queued::kYes;
}

absl::Status ThreadPool::ScheduleCall(absl::AnyInvocable<void() &&> fn, size_t max_queued,
                                      absl::string_view who) {
  switch (TrySchedule(std::move(fn), max_queued)) {
    case Queued::kYes:
      return absl::OkStatus();
    case Queued::kFull:
      return absl::ResourceExhaustedError(
          absl::StrCat(who, " has ", max_queued, " calls waiting for a thread; retry later"));
    case Queued::kStopping:
      break;
  }
  return absl::UnavailableError(absl::StrCat(who, " is draining"));
}

void ThreadPool::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    cv_.SignalAll();
  }
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
}

size_t ThreadPool::queued() const {
  MutexLock lock(&mu_);
  return queue_.size();
}

void ThreadPool::WorkerLoop() {
  while (true) {
    absl::AnyInvocable<void() &&> fn;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) cv_.Wait(&mu_);
      if (queue_.empty()) return;  // Stopping and drained.
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(fn)();
  }
}

}  // namespace cairn
