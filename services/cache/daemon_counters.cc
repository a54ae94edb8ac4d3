#include "services/cache/daemon_counters.h"

namespace cairn::cache {

void DaemonCounters::CountLookup() {
  MutexLock lock(&mu_);
  ++counts_.lookups;
}

void DaemonCounters::CountHit(Tier tier, int64_t tokens) {
  MutexLock lock(&mu_);
  ++counts_.hits[static_cast<int>(tier)];
  if (tier != Tier::kLive && tokens > 0) counts_.tokens_restored += static_cast<uint64_t>(tokens);
}

void DaemonCounters::CountEviction(Tier tier, absl::string_view reason) {
  if (size_t comma = reason.rfind(", "); comma != absl::string_view::npos) {
    reason = reason.substr(comma + 2);
  }
  if (reason.empty()) reason = "unspecified";
  std::pair<Tier, std::string> key{tier, std::string(reason)};
  MutexLock lock(&mu_);
  if (evictions_.find(key) == evictions_.end()) {
    size_t reasons = 0;
    for (const auto& [k, n] : evictions_) reasons += k.first == tier ? 1 : 0;
    if (reasons >= kMaxEvictionReasons) key.second = "other";
  }
  ++evictions_[key];
}

DaemonCounters::Snapshot DaemonCounters::Take() const {
  MutexLock lock(&mu_);
  Snapshot out = counts_;
  for (const auto& [key, n] : evictions_)
    out.evictions.push_back(Eviction{key.first, key.second, n});
  return out;
}

}  // namespace cairn::cache
