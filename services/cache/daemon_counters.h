#ifndef CAIRN_SERVICES_CACHE_DAEMON_COUNTERS_H_
#define CAIRN_SERVICES_CACHE_DAEMON_COUNTERS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/concurrency/mutex.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

// What GetStatus reports of the daemon's traffic: lookups, hits by tier, tokens restored, and
// evictions by tier and reason. Counted as things happen and read as one snapshot, so the
// status never needs the daemon's lock for them.
//
// Thread-safe, with its own mutex; it calls nothing outside itself, so the daemon may count
// with its own lock held (daemon, then counters).
// Invariants: at most kMaxEvictionReasons distinct reasons per tier, the rest under "other".
class DaemonCounters {
 public:
  // Distinct eviction reasons counted per tier (a label set that stays bounded whatever
  // reasons an explicit eviction names).
  static constexpr size_t kMaxEvictionReasons = 16;

  struct Eviction {
    Tier tier = Tier::kNone;
    std::string reason;
    uint64_t count = 0;
  };
  struct Snapshot {
    uint64_t lookups = 0;
    uint64_t hits[4] = {0, 0, 0, 0};  // By Tier.
    uint64_t tokens_restored = 0;
    std::vector<Eviction> evictions;  // By tier, then reason.
  };

  void CountLookup() ABSL_LOCKS_EXCLUDED(mu_);
  // A restore served from `tier` (kLive: a slot continued in place) of `tokens` tokens.
  void CountHit(Tier tier, int64_t tokens) ABSL_LOCKS_EXCLUDED(mu_);
  // An eviction from `tier` (kRam or kDisk) for `reason`. A ranked eviction's reason ends
  // with its rank ("budget, idle"): the rank is what is counted.
  void CountEviction(Tier tier, absl::string_view reason) ABSL_LOCKS_EXCLUDED(mu_);

  Snapshot Take() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  Snapshot counts_ ABSL_GUARDED_BY(mu_);  // Its evictions are kept in evictions_ instead.
  std::map<std::pair<Tier, std::string>, uint64_t> evictions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_DAEMON_COUNTERS_H_
