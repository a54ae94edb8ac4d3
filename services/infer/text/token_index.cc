#include "services/infer/text/token_index.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "common/status/check.h"

namespace cairn::infer::text {

std::unique_ptr<TokenIndex> TokenIndex::Build(const Tokenizer& tokenizer) {
  return std::make_unique<TrieTokenIndex>(tokenizer);
}

TrieTokenIndex::TrieTokenIndex(const Tokenizer& tokenizer) : id_limit_(tokenizer.id_limit()) {
  const size_t n = static_cast<size_t>(id_limit_);
  special_.assign(n, 0);
  offset_.reserve(n + 1);
  offset_.push_back(0);
  for (TokenId id = 0; id < id_limit_; ++id) {
    special_[static_cast<size_t>(id)] = tokenizer.IsSpecial(id) ? 1 : 0;
    if (special_[static_cast<size_t>(id)] == 0) {
      const TokenId one[] = {id};
      absl::StatusOr<std::string> b = tokenizer.DecodeBytes(one);
      if (b.ok()) bytes_.insert(bytes_.end(), b->begin(), b->end());
    }
    CAIRN_CHECK(bytes_.size() <= std::numeric_limits<uint32_t>::max());
    offset_.push_back(static_cast<uint32_t>(bytes_.size()));
  }

  // The trie, breadth first so that each node's children are contiguous.
  std::vector<TokenId> sorted;
  for (TokenId id = 0; id < id_limit_; ++id) {
    if (!bytes(id).empty()) sorted.push_back(id);
  }
  std::sort(sorted.begin(), sorted.end(), [&](TokenId a, TokenId b) {
    return std::make_tuple(bytes(a), a) < std::make_tuple(bytes(b), b);
  });
  struct Pending {
    int32_t node;
    size_t lo, hi, depth;  // sorted[lo, hi) share the node's `depth` bytes.
  };
  nodes_.emplace_back();
  std::deque<Pending> queue{{0, 0, sorted.size(), 0}};
  while (!queue.empty()) {
    const Pending p = queue.front();
    queue.pop_front();
    size_t i = p.lo;
    nodes_[p.node].first_id = static_cast<int32_t>(ids_.size());
    while (i < p.hi && bytes(sorted[i]).size() == p.depth) ids_.push_back(sorted[i++]);
    nodes_[p.node].id_count = static_cast<int32_t>(ids_.size()) - nodes_[p.node].first_id;
    nodes_[p.node].first_child = static_cast<int32_t>(nodes_.size());
    while (i < p.hi) {
      const char b = bytes(sorted[i])[p.depth];
      size_t j = i;
      while (j < p.hi && bytes(sorted[j])[p.depth] == b) ++j;
      TrieNode child;
      child.byte = static_cast<uint8_t>(b);
      queue.push_back({static_cast<int32_t>(nodes_.size()), i, j, p.depth + 1});
      nodes_.push_back(child);
      ++nodes_[p.node].child_count;
      i = j;
    }
  }
  // Every class up front, so that no request pays for one on the scheduler thread.
  for (int phase = 0; phase < json::kStrPhaseCount; ++phase) {
    for (bool escapes : {true, false}) StringClass(static_cast<json::StrPhase>(phase), escapes);
  }
}

std::string_view TrieTokenIndex::bytes(TokenId id) const {
  if (id < 0 || id >= id_limit_) return {};
  const uint32_t begin = offset_[static_cast<size_t>(id)];
  const uint32_t end = offset_[static_cast<size_t>(id) + 1];
  return std::string_view(bytes_.data() + begin, end - begin);
}

const StringTokenClass& TrieTokenIndex::StringClass(json::StrPhase phase,
                                                    bool allow_escapes) const {
  MutexLock lock(&mu_);
  std::unique_ptr<StringTokenClass>& slot =
      classes_[static_cast<size_t>(phase) + (allow_escapes ? 0 : json::kStrPhaseCount)];
  if (slot == nullptr) slot = BuildStringClass(phase, allow_escapes);
  return *slot;
}

std::unique_ptr<StringTokenClass> TrieTokenIndex::BuildStringClass(json::StrPhase phase,
                                                                   bool allow_escapes) const {
  auto c = std::make_unique<StringTokenClass>();
  c->inside_mask.assign(mask_words(), 0);
  for (TokenId id = 0; id < id_limit_; ++id) {
    const std::string_view b = bytes(id);
    if (b.empty()) continue;
    json::StrPhase p = phase;
    int chars = 0;
    bool refused = false, closed = false;
    for (char ch : b) {
      const json::StrStep st = json::StringStep(p, static_cast<uint8_t>(ch), allow_escapes);
      if (st.result == json::StrStep::kReject) {
        refused = true;
        break;
      }
      if (st.result == json::StrStep::kClose) {
        closed = true;
        break;
      }
      chars += st.char_start ? 1 : 0;
      p = st.next;
    }
    if (refused) continue;
    if (closed) {
      c->leaving_ids.push_back(id);
      continue;
    }
    c->inside_mask[static_cast<size_t>(id) / 64] |= uint64_t{1} << (static_cast<uint32_t>(id) % 64);
    c->inside_ids.push_back(id);
    c->inside_chars.push_back(
        static_cast<uint16_t>(std::min<int>(chars, std::numeric_limits<uint16_t>::max())));
  }
  return c;
}

}  // namespace cairn::infer::text
