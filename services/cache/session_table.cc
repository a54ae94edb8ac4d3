#include "services/cache/session_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cairn::cache {

namespace {

absl::Status NotOpen(uint64_t id) {
  return absl::NotFoundError(absl::StrCat("session ", id, " is not open"));
}

template <typename Map>
std::vector<typename Map::mapped_type> SortedValues(const Map& map) {
  std::vector<typename Map::mapped_type> out;
  out.reserve(map.size());
  for (const auto& [key, value] : map) out.push_back(value);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

absl::Status SessionTable::Open(uint64_t id, std::string name, uint32_t slot_count,
                                SessionSink* sink, absl::Duration now) {
  MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("the cache daemon is draining");
  if (sessions_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("session ", id, " is open already"));
  }
  Session& s = sessions_[id];
  s.name = std::move(name);
  s.sink = sink;
  s.slot_count = slot_count;
  s.last_seen = now;
  return absl::OkStatus();
}

void SessionTable::BeginDrain() {
  MutexLock lock(&mu_);
  draining_ = true;
}

bool SessionTable::draining() const {
  MutexLock lock(&mu_);
  return draining_;
}

absl::Status SessionTable::Touch(uint64_t id, absl::Duration now) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return NotOpen(id);
  it->second.last_seen = std::max(it->second.last_seen, now);
  return absl::OkStatus();
}

std::vector<uint64_t> SessionTable::Silent(absl::Duration now, absl::Duration timeout) const {
  std::vector<uint64_t> out;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, s] : sessions_) {
      if (now - s.last_seen > timeout) out.push_back(id);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

const SessionTable::Session* SessionTable::FindLocked(uint64_t id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : &it->second;
}

absl::Status SessionTable::CheckOpen(uint64_t id) const {
  MutexLock lock(&mu_);
  return FindLocked(id) == nullptr ? NotOpen(id) : absl::OkStatus();
}

absl::StatusOr<int32_t> SessionTable::Slot(uint64_t id, uint32_t slot) const {
  MutexLock lock(&mu_);
  const Session* s = FindLocked(id);
  if (s == nullptr) return NotOpen(id);
  const uint32_t slots = s->slot_count > 0 ? s->slot_count : options_.max_slots;
  if (slot >= slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot ", slot, " is out of range: the session has ", slots, " slots"));
  }
  return static_cast<int32_t>(slot);
}

void SessionTable::UseSlot(uint64_t id, int32_t slot) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it != sessions_.end()) it->second.slots.insert(slot);
}

std::vector<int32_t> SessionTable::UsedSlots(uint64_t id) const {
  MutexLock lock(&mu_);
  std::vector<int32_t> out;
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return out;
  out.assign(it->second.slots.begin(), it->second.slots.end());
  std::sort(out.begin(), out.end());
  return out;
}

bool SessionTable::UsedSlot(uint64_t id, int32_t slot) const {
  MutexLock lock(&mu_);
  const Session* s = FindLocked(id);
  return s != nullptr && s->slots.contains(slot);
}

void SessionTable::Detach(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it != sessions_.end()) it->second.sink = nullptr;
}

bool SessionTable::Attached(uint64_t id) const {
  MutexLock lock(&mu_);
  const Session* s = FindLocked(id);
  return s != nullptr && s->sink != nullptr;
}

bool SessionTable::WithSink(uint64_t id, absl::FunctionRef<void(SessionSink&)> send) {
  MutexLock lock(&mu_);
  const Session* s = FindLocked(id);
  if (s == nullptr || s->sink == nullptr) return false;
  send(*s->sink);
  return true;
}

absl::Status SessionTable::CheckCanHoldLocked(uint64_t id, int32_t slot, bool lease) const {
  const Session* s = FindLocked(id);
  if (s == nullptr) return NotOpen(id);
  const auto& held = lease ? s->leases : s->reservations;
  if (auto it = held.find(slot); it != held.end()) {
    return absl::FailedPreconditionError(
        lease ? absl::StrCat("slot ", slot, " already holds restore lease ", it->second,
                             "; release it first")
              : absl::StrCat("slot ", slot, " already holds capture reservation ", it->second,
                             "; commit or abort it"));
  }
  const int quota = lease ? options_.max_leases_per_session : options_.max_reservations_per_session;
  if (static_cast<int64_t>(held.size()) >= quota) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session holds ", held.size(),
                     lease ? " restore leases" : " capture reservations", ", the limit"));
  }
  return absl::OkStatus();
}

absl::Status SessionTable::AddHeld(uint64_t id, int32_t slot, uint64_t item, bool lease) {
  MutexLock lock(&mu_);
  if (absl::Status s = CheckCanHoldLocked(id, slot, lease); !s.ok()) return s;
  auto& holders = lease ? lease_holders_ : reservation_holders_;
  if (holders.contains(item)) {
    return absl::AlreadyExistsError(
        absl::StrCat(lease ? "lease " : "capture reservation ", item, " is held already"));
  }
  Session& s = sessions_.at(id);
  (lease ? s.leases : s.reservations)[slot] = item;
  holders[item] = Holder{id, slot};
  return absl::OkStatus();
}

bool SessionTable::Holds(uint64_t id, uint64_t item, bool lease) const {
  MutexLock lock(&mu_);
  const auto& holders = lease ? lease_holders_ : reservation_holders_;
  auto it = holders.find(item);
  return it != holders.end() && it->second.session == id;
}

void SessionTable::RemoveHeld(uint64_t item, bool lease) {
  MutexLock lock(&mu_);
  auto& holders = lease ? lease_holders_ : reservation_holders_;
  auto it = holders.find(item);
  if (it == holders.end()) return;
  auto s = sessions_.find(it->second.session);
  if (s != sessions_.end())
    (lease ? s->second.leases : s->second.reservations).erase(it->second.slot);
  holders.erase(it);
}

absl::Status SessionTable::CheckCanLease(uint64_t id, int32_t slot) const {
  MutexLock lock(&mu_);
  return CheckCanHoldLocked(id, slot, /*lease=*/true);
}

absl::Status SessionTable::CheckCanReserve(uint64_t id, int32_t slot) const {
  MutexLock lock(&mu_);
  return CheckCanHoldLocked(id, slot, /*lease=*/false);
}

std::optional<SessionTable::Closed> SessionTable::Close(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  Session& s = it->second;
  Closed out;
  out.name = std::move(s.name);
  out.leases = SortedValues(s.leases);
  out.reservations = SortedValues(s.reservations);
  out.slots.assign(s.slots.begin(), s.slots.end());
  std::sort(out.slots.begin(), out.slots.end());
  for (uint64_t lease : out.leases) lease_holders_.erase(lease);
  for (uint64_t r : out.reservations) reservation_holders_.erase(r);
  sessions_.erase(it);
  return out;
}

size_t SessionTable::size() const {
  MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace cairn::cache
