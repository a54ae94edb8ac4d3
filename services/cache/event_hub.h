#ifndef CAIRN_SERVICES_CACHE_EVENT_HUB_H_
#define CAIRN_SERVICES_CACHE_EVENT_HUB_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cairn/cache/v1/cache.pb.h"
#include "common/concurrency/mutex.h"

namespace cairn::cache {

// The cache's decision events as StreamEvents serves them: a bounded history and the
// followers waiting for the next event. It reports decisions and drives nothing.
//
// Thread-safe, with its own mutex (never held while calling out), so followers never wait on
// the daemon's lock. The daemon appends under its own lock; that order (daemon, then hub) is
// the only one.
class EventHub {
 public:
  // Keeps the latest `capacity` events (at least one).
  explicit EventHub(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}
  EventHub(const EventHub&) = delete;
  EventHub& operator=(const EventHub&) = delete;

  // Stores `event` (its seq must exceed every earlier one) and returns the wake-ups of the
  // followers waiting for it, which the caller runs after releasing any lock it holds.
  std::vector<std::function<void()>> Append(v1::Event event) ABSL_LOCKS_EXCLUDED(mu_);

  // Events with seq > `after_seq` still held, oldest first, at most `limit` (0 = all).
  std::vector<v1::Event> After(uint64_t after_seq, size_t limit) const ABSL_LOCKS_EXCLUDED(mu_);
  // The seq of the newest event, 0 before the first.
  uint64_t LastSeq() const ABSL_LOCKS_EXCLUDED(mu_);

  // Registers `wake` to be returned by the next Append. Returns a token for Cancel, or 0
  // (dropping `wake`) when an event newer than `after_seq` already exists: fetch again.
  uint64_t Wait(uint64_t after_seq, std::function<void()> wake) ABSL_LOCKS_EXCLUDED(mu_);
  void Cancel(uint64_t token) ABSL_LOCKS_EXCLUDED(mu_);
  size_t waiting() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  std::deque<v1::Event> history_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::function<void()>> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_EVENT_HUB_H_
