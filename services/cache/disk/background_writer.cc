#include "services/cache/disk/background_writer.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cairn::cache {
namespace {

uint64_t JobBytes(const WriteJob& job) {
  uint64_t bytes = job.request.state.size();
  for (const ChunkWrite& c : job.request.new_chunks) bytes += c.bytes.size();
  return bytes;
}

// Moves into `newer` the chunks `older` would have written that `newer` shares, so that
// dropping `older` loses nothing `newer` needs.
void MergeInto(WriteJob& older, WriteJob& newer) {
  std::set<uint64_t> shared(newer.request.shared_chunk_ids.begin(),
                            newer.request.shared_chunk_ids.end());
  for (ChunkWrite& c : older.request.new_chunks) {
    if (shared.erase(c.id.chunk_id) == 0) continue;
    newer.request.new_chunks.push_back(c);
  }
  newer.request.shared_chunk_ids.assign(shared.begin(), shared.end());
}

}  // namespace

BackgroundWriter::BackgroundWriter(DiskStore* store, ModelActivity* activity,
                                   BackgroundWriterOptions options)
    : store_(store), activity_(activity), options_(options), thread_([this] { Run(); }) {}

BackgroundWriter::~BackgroundWriter() { Shutdown(); }

void BackgroundWriter::Expect() {
  MutexLock lock(&mu_);
  ++expected_;
}

absl::Status BackgroundWriter::Enqueue(WriteJob job, bool expected) {
  std::vector<WriteJob> superseded;
  // A refused expected job may leave the writer idle: its waiters run here, after the lock.
  std::vector<std::function<void()>> idle;
  absl::Status admitted;
  {
    MutexLock lock(&mu_);
    admitted = Admit(job, superseded);
    if (expected) {
      --expected_;
      cv_.SignalAll();
      idle = TakeIdleWaitersLocked();  // None where the job was queued: not idle then.
    }
  }
  for (auto& fn : idle) fn();
  if (!admitted.ok()) return admitted;
  for (WriteJob& s : superseded) {
    if (s.done) {
      s.done(absl::CancelledError(
          absl::StrCat("checkpoint ", s.request.checkpoint_id, " superseded by a newer write")));
    }
  }
  return absl::OkStatus();
}

absl::Status BackgroundWriter::Admit(WriteJob& job, std::vector<WriteJob>& superseded) {
  if (stopping_) return absl::FailedPreconditionError("disk writer is shut down");
  auto supersedes = [&](const WriteJob& pending) {
    return std::find(job.supersedes.begin(), job.supersedes.end(), pending.request.checkpoint_id) !=
           job.supersedes.end();
  };
  const size_t merging =
      static_cast<size_t>(std::count_if(queue_.begin(), queue_.end(), supersedes));
  if (queue_.size() - merging >= options_.max_queue) {
    return absl::ResourceExhaustedError(
        absl::StrCat("disk write queue holds ", options_.max_queue, " jobs"));
  }
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (supersedes(*it)) {
      MergeInto(*it, job);
      superseded.push_back(std::move(*it));
      it = queue_.erase(it);
      ++stats_.merged;
    } else {
      ++it;
    }
  }
  queue_.push_back(std::move(job));
  cv_.SignalAll();
  return absl::OkStatus();
}

bool BackgroundWriter::WaitIdle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (!IdleLocked()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    cv_.WaitWithTimeout(&mu_, left);
  }
  return true;
}

uint64_t BackgroundWriter::NotifyWhenIdle(std::function<void()> idle) {
  {
    MutexLock lock(&mu_);
    if (!IdleLocked()) {
      const uint64_t token = next_waiter_++;
      idle_waiters_.emplace(token, std::move(idle));
      return token;
    }
  }
  idle();
  return 0;
}

bool BackgroundWriter::CancelIdleWait(uint64_t token) {
  MutexLock lock(&mu_);
  return idle_waiters_.erase(token) > 0;
}

std::vector<std::function<void()>> BackgroundWriter::TakeIdleWaitersLocked() {
  std::vector<std::function<void()>> due;
  if (!IdleLocked()) return due;
  for (auto& [token, fn] : idle_waiters_) due.push_back(std::move(fn));
  idle_waiters_.clear();
  return due;
}

void BackgroundWriter::Shutdown() {
  std::deque<WriteJob> cancelled;
  {
    MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    cancelled.swap(queue_);
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  for (WriteJob& job : cancelled) {
    if (job.done) job.done(absl::CancelledError("disk writer shut down"));
  }
  // Nothing is queued or running any more: whoever waits for idleness is answered.
  std::vector<std::function<void()>> idle;
  {
    MutexLock lock(&mu_);
    idle = TakeIdleWaitersLocked();
  }
  for (auto& fn : idle) fn();
}

BackgroundWriterStats BackgroundWriter::stats() const {
  MutexLock lock(&mu_);
  BackgroundWriterStats out = stats_;
  out.queued_bytes = running_bytes_;
  for (const WriteJob& job : queue_) out.queued_bytes += JobBytes(job);
  return out;
}

void BackgroundWriter::Yield() {
  if (activity_ == nullptr) return;
  if (!activity_->WaitUntilIdle(absl::ZeroDuration())) {
    {
      MutexLock lock(&mu_);
      ++stats_.yields;
    }
    // At most max_yield, then one more staging piece regardless (docs/architecture.md §4).
    activity_->WaitUntilIdle(options_.max_yield);
  }
}

void BackgroundWriter::Run() {
  while (true) {
    WriteJob job;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) cv_.Wait(&mu_);
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      running_job_ = true;
      running_bytes_ = JobBytes(job);
    }
    Yield();
    absl::Status s = store_->Publish(job.request, [this] { Yield(); });
    if (job.done) job.done(s);
    std::vector<std::function<void()>> idle;
    {
      MutexLock lock(&mu_);
      running_job_ = false;
      running_bytes_ = 0;
      ++(s.ok() ? stats_.published : stats_.failed);
      cv_.SignalAll();
      idle = TakeIdleWaitersLocked();
    }
    for (auto& fn : idle) fn();
  }
}

}  // namespace cairn::cache
