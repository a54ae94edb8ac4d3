#ifndef CAIRN_SERVICES_CACHE_SESSION_LIVENESS_H_
#define CAIRN_SERVICES_CACHE_SESSION_LIVENESS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"

namespace cairn::cache {

// When each open session last showed a sign of life. Heartbeats touch only this table, so a
// heartbeat answered inside a gRPC reaction never waits on the daemon's lock.
//
// Thread-safe, with its own mutex; the daemon may call it with its own lock held (daemon,
// then liveness: the only order).
class SessionLiveness {
 public:
  // `now` is a monotonic time (Clock::MonotonicNow).
  void Open(uint64_t session, absl::Duration now) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    last_seen_[session] = now;
  }
  // NotFound for a session that is not open (closed, expired or never opened).
  absl::Status Touch(uint64_t session, absl::Duration now) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    auto it = last_seen_.find(session);
    if (it == last_seen_.end()) {
      return absl::NotFoundError(absl::StrCat("session ", session, " is not open"));
    }
    it->second = std::max(it->second, now);
    return absl::OkStatus();
  }
  void Close(uint64_t session) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    last_seen_.erase(session);
  }
  // Sessions silent for more than `timeout` at `now`.
  std::vector<uint64_t> Silent(absl::Duration now, absl::Duration timeout) const
      ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<uint64_t> out;
    MutexLock lock(&mu_);
    for (const auto& [id, seen] : last_seen_) {
      if (now - seen > timeout) out.push_back(id);
    }
    return out;
  }

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, absl::Duration> last_seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_SESSION_LIVENESS_H_
