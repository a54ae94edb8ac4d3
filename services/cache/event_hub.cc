#include "services/cache/event_hub.h"

#include <utility>

namespace cairn::cache {

std::vector<std::function<void()>> EventHub::Append(v1::Event event) {
  std::vector<std::function<void()>> wakes;
  MutexLock lock(&mu_);
  history_.push_back(std::move(event));
  while (history_.size() > capacity_) history_.pop_front();
  wakes.reserve(waiters_.size());
  for (auto& [token, wake] : waiters_) wakes.push_back(std::move(wake));
  waiters_.clear();
  return wakes;
}

std::vector<v1::Event> EventHub::After(uint64_t after_seq, size_t limit) const {
  std::vector<v1::Event> out;
  MutexLock lock(&mu_);
  for (const v1::Event& e : history_) {
    if (e.seq() <= after_seq) continue;
    out.push_back(e);
    if (limit != 0 && out.size() >= limit) break;
  }
  return out;
}

uint64_t EventHub::LastSeq() const {
  MutexLock lock(&mu_);
  return history_.empty() ? 0 : history_.back().seq();
}

uint64_t EventHub::Wait(uint64_t after_seq, std::function<void()> wake) {
  MutexLock lock(&mu_);
  if (!history_.empty() && history_.back().seq() > after_seq) return 0;
  const uint64_t token = next_token_++;
  waiters_[token] = std::move(wake);
  return token;
}

void EventHub::Cancel(uint64_t token) {
  MutexLock lock(&mu_);
  waiters_.erase(token);
}

size_t EventHub::waiting() const {
  MutexLock lock(&mu_);
  return waiters_.size();
}

}  // namespace cairn::cache
