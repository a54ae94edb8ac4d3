#include "services/cache/restore_leases.h"

#include <algorithm>
#include <utility>

namespace cairn::cache {

bool RestoreLeases::Add(uint64_t id, Lease lease) {
  MutexLock lock(&mu_);
  return leases_.try_emplace(id, std::move(lease)).second;
}

std::optional<Lease> RestoreLeases::Take(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return std::nullopt;
  std::optional<Lease> out(std::move(it->second));
  leases_.erase(it);
  return out;
}

std::optional<LeaseView> RestoreLeases::Find(uint64_t id) const {
  MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return std::nullopt;
  const Lease& l = it->second;
  return LeaseView{l.session, l.checkpoint, l.slot, l.kept_rows, l.chunks, l.ready};
}

std::vector<uint64_t> RestoreLeases::AwaitingSpill(uint64_t spill) const {
  std::vector<uint64_t> out;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, lease] : leases_) {
      if (!lease.ready && lease.awaiting.contains(spill)) out.push_back(id);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint64_t> RestoreLeases::SpillDone(uint64_t spill) {
  std::vector<uint64_t> out;
  {
    MutexLock lock(&mu_);
    for (auto& [id, lease] : leases_) {
      if (lease.ready || lease.awaiting.erase(spill) == 0) continue;
      if (lease.awaiting.empty()) out.push_back(id);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void RestoreLeases::Await(uint64_t id, const std::vector<uint64_t>& spills) {
  MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.ready) return;
  it->second.awaiting.insert(spills.begin(), spills.end());
}

bool RestoreLeases::MarkReady(uint64_t id, absl::Duration now) {
  MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end() || !it->second.awaiting.empty()) return false;
  if (!it->second.ready) {
    it->second.ready = true;
    it->second.expires = now + it->second.duration;
  }
  return true;
}

std::vector<HeldRegion> RestoreLeases::AddHolds(uint64_t id,
                                                const std::vector<HeldRegion>& regions) {
  std::vector<HeldRegion> added;
  MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return added;
  std::vector<HeldRegion>& holds = it->second.holds;
  for (const HeldRegion& r : regions) {
    const bool held = std::any_of(holds.begin(), holds.end(), [&r](const HeldRegion& h) {
      return h.region.offset == r.region.offset;
    });
    if (held || r.bytes == 0) continue;
    holds.push_back(r);
    added.push_back(r);
  }
  return added;
}

std::vector<uint64_t> RestoreLeases::Expired(absl::Duration now) const {
  std::vector<uint64_t> out;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, lease] : leases_) {
      if (lease.ready && lease.expires <= now) out.push_back(id);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint64_t> RestoreLeases::Overdue(absl::Duration now) const {
  std::vector<uint64_t> out;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, lease] : leases_) {
      if (!lease.ready && lease.ready_by <= now) out.push_back(id);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

size_t RestoreLeases::size() const {
  MutexLock lock(&mu_);
  return leases_.size();
}

}  // namespace cairn::cache
