#include "services/infer/text/grammar_cache.h"

#include <utility>

namespace cairn::infer::text {

absl::StatusOr<std::shared_ptr<const JsonGrammar>> GrammarCache::GetOrCompile(
    const std::string& key,
    absl::FunctionRef<absl::StatusOr<std::shared_ptr<const JsonGrammar>>()> compile) {
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      it->second.last_use = ++clock_;
      return it->second.grammar;
    }
  }
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> compiled = compile();
  if (!compiled.ok() || max_entries_ == 0 || key.size() > max_key_bytes_) return compiled;
  MutexLock lock(&mu_);
  auto [it, inserted] = entries_.try_emplace(key);
  it->second.grammar = *compiled;
  it->second.last_use = ++clock_;
  if (inserted) key_bytes_ += key.size();
  // Evict the least recently used (a scan: the cache holds few entries) until both bounds hold.
  while (entries_.size() > max_entries_ || key_bytes_ > max_key_bytes_) {
    auto oldest = entries_.begin();
    for (auto e = entries_.begin(); e != entries_.end(); ++e) {
      if (e->second.last_use < oldest->second.last_use) oldest = e;
    }
    key_bytes_ -= oldest->first.size();
    entries_.erase(oldest);
  }
  return compiled;
}

size_t GrammarCache::size() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace cairn::infer::text
