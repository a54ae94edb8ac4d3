#include "services/cache/disk_scrubber.h"

#include <optional>
#include <utility>

#include "common/log/log.h"

namespace cairn::cache {

DiskScrubber::DiskScrubber(DiskStore* store, DiskScrubberOptions options, OnCorrupt on_corrupt)
    : store_(store), options_(options), on_corrupt_(std::move(on_corrupt)) {}

DiskScrubber::~DiskScrubber() { Shutdown(); }

uint64_t DiskScrubber::Step() {
  uint64_t after;
  {
    MutexLock lock(&mu_);
    after = cursor_;
  }
  std::optional<DiskCheckpointInfo> next = store_->NextCheckpointAfter(after);
  if (!next.has_value()) {
    MutexLock lock(&mu_);
    cursor_ = 0;
    ++stats_.passes;
    return 0;
  }
  // Reads without any lock held; a checkpoint deleted meanwhile is NotFound (skipped), one
  // being restored is read concurrently (readers share).
  absl::Status s = store_->Verify(next->checkpoint_id);
  {
    MutexLock lock(&mu_);
    cursor_ = next->checkpoint_id;
    if (s.ok()) {
      ++stats_.verified;
      stats_.bytes_read += next->file_bytes;
    } else if (absl::IsDataLoss(s)) {
      ++stats_.corrupt;
    }
  }
  if (absl::IsDataLoss(s)) {
    CAIRN_LOG(ERROR) << "scrub: checkpoint " << next->checkpoint_id << " is damaged: " << s;
    if (on_corrupt_) on_corrupt_(next->checkpoint_id, s);
  } else if (!s.ok() && !absl::IsNotFound(s)) {
    CAIRN_LOG(WARNING) << "scrub: verifying checkpoint " << next->checkpoint_id << ": " << s;
  }
  // At least one byte, so that a pass over empty checkpoints still ends.
  return next->file_bytes > 0 ? next->file_bytes : 1;
}

void DiskScrubber::Start() {
  if (options_.bytes_per_second == 0 || thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    if (stopping_) return;
  }
  thread_ = std::thread([this] { Run(); });
}

void DiskScrubber::Shutdown() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

DiskScrubberStats DiskScrubber::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

bool DiskScrubber::Pause(absl::Duration d) {
  const absl::Time deadline = absl::Now() + d;
  MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    cv_.WaitWithTimeout(&mu_, left);
  }
  return !stopping_;
}

void DiskScrubber::Run() {
  if (!Pause(options_.first_pass_delay)) return;
  while (true) {
    const uint64_t bytes = Step();
    // The rate cap: a checkpoint of n bytes is followed by n / rate seconds of rest.
    const absl::Duration rest = bytes == 0
                                    ? options_.pass_interval
                                    : absl::Seconds(static_cast<double>(bytes) /
                                                    static_cast<double>(options_.bytes_per_second));
    if (!Pause(rest)) return;
  }
}

}  // namespace cairn::cache
