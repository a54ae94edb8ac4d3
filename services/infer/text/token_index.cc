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

namespace {

// A key naming `forbid`'s texts (none holds a NUL byte; a key's parts after them are bytes).
std::string ForbidKey(const std::vector<std::string>& forbid) {
  std::string key;
  for (const std::string& text : forbid) {
    key += text;
    key.push_back('\0');
  }
  return key;
}

}  // namespace

const std::vector<TokenId>& TrieTokenIndex::ForbidHits(const std::vector<std::string>& forbid,
                                                       uint8_t progress) const {
  std::string key = ForbidKey(forbid);
  key.push_back(static_cast<char>(progress));
  {
    MutexLock lock(&mu_);
    auto it = forbid_hits_.find(key);
    if (it != forbid_hits_.end()) return *it->second;
  }
  // Built outside the lock (a pass over the vocabulary), kept by the first to finish.
  auto hits = std::make_unique<std::vector<TokenId>>();
  for (TokenId id = 0; id < id_limit_; ++id) {
    int state = progress;
    for (char ch : bytes(id)) {
      state = json::ForbidStep(forbid, static_cast<uint8_t>(state), static_cast<uint8_t>(ch));
      if (state < 0) break;
    }
    if (state < 0) hits->push_back(id);
  }
  MutexLock lock(&mu_);
  return *forbid_hits_.try_emplace(key, std::move(hits)).first->second;
}

const RawTokenClass& TrieTokenIndex::RawClass(json::StrPhase phase, uint8_t progress,
                                              const std::vector<std::string>& forbid,
                                              char exit) const {
  std::string key = ForbidKey(forbid);
  key.push_back(exit);
  key.push_back(static_cast<char>(phase));
  key.push_back(static_cast<char>(progress));
  {
    MutexLock lock(&mu_);
    auto it = raw_classes_.find(key);
    if (it != raw_classes_.end()) return *it->second;
  }
  // Built outside the lock (a pass over the vocabulary), kept by the first to finish.
  auto c = std::make_unique<RawTokenClass>();
  c->inside_mask.assign(mask_words(), 0);
  for (TokenId id = 0; id < id_limit_; ++id) {
    const std::string_view b = bytes(id);
    if (b.empty()) continue;
    json::StrPhase p = phase;
    uint8_t at = progress;
    bool inside = true;
    bool leaving = false;
    for (char ch : b) {
      const uint8_t byte = static_cast<uint8_t>(ch);
      leaving |= p == json::StrPhase::kBody && byte == static_cast<uint8_t>(exit);
      const json::StrStep st = json::RawStep(p, byte, 0, forbid, &at);
      if (st.result == json::StrStep::kReject) {
        inside = false;
        break;
      }
      p = st.next;
    }
    if (inside) {
      c->inside_mask[static_cast<size_t>(id) / 64] |= uint64_t{1}
                                                      << (static_cast<uint32_t>(id) % 64);
    } else if (leaving) {
      c->leaving_ids.push_back(id);
    }
  }
  MutexLock lock(&mu_);
  return *raw_classes_.try_emplace(key, std::move(c)).first->second;
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

std::shared_ptr<const CodePointClassTrie> TrieTokenIndex::FindClassTrie(
    const std::vector<uint32_t>& starts) const {
  MutexLock lock(&mu_);
  for (const std::shared_ptr<const CodePointClassTrie>& t : class_tries_) {
    if (t->starts == starts) return t;
  }
  return nullptr;
}

std::shared_ptr<const CodePointClassTrie> TrieTokenIndex::ClassTrie(
    const std::vector<uint32_t>& starts) const {
  if (auto found = FindClassTrie(starts)) return found;
  std::shared_ptr<const CodePointClassTrie> built = BuildClassTrie(starts);
  MutexLock lock(&mu_);
  for (const std::shared_ptr<const CodePointClassTrie>& t : class_tries_) {
    if (t->starts == starts) return t;  // Built meanwhile by another caller.
  }
  if (class_tries_.size() >= kClassTries) class_tries_.pop_front();
  class_tries_.push_back(built);
  return built;
}

std::unique_ptr<CodePointClassTrie> TrieTokenIndex::BuildClassTrie(
    const std::vector<uint32_t>& starts) const {
  auto t = std::make_unique<CodePointClassTrie>();
  t->starts = starts;
  t->nodes.emplace_back();
  auto class_of = [&](uint32_t cp) {
    return static_cast<int32_t>(std::upper_bound(starts.begin(), starts.end(), cp) -
                                starts.begin() - 1);
  };
  int32_t ascii_class[128];
  for (uint32_t c = 0; c < 128; ++c) ascii_class[c] = class_of(c);
  auto child_of = [&](int32_t node, int32_t cls) {
    for (const auto& [k, child] : t->nodes[static_cast<size_t>(node)].children) {
      if (k == cls) return child;
    }
    t->nodes.emplace_back();
    const int32_t child = static_cast<int32_t>(t->nodes.size() - 1);
    t->nodes[static_cast<size_t>(node)].children.push_back({cls, child});
    return child;
  };
  // Depth first over the byte trie, decoding the string's content: (byte trie node, class trie
  // node, phase, bits of the character being read).
  struct Pending {
    int32_t at, node;
    json::StrPhase phase;
    uint32_t partial;
  };
  std::vector<Pending> stack{{0, 0, json::StrPhase::kBody, 0}};
  while (!stack.empty()) {
    const Pending p = stack.back();
    stack.pop_back();
    const TrieNode& n = nodes_[static_cast<size_t>(p.at)];
    const bool body = p.phase == json::StrPhase::kBody;
    for (int32_t k = n.first_child; k < n.first_child + n.child_count; ++k) {
      const TrieNode& child = nodes_[static_cast<size_t>(k)];
      const uint8_t b = child.byte;
      json::StrStep st;
      if (body && b >= 0x20 && b < 0x80 && b != '"' && b != '\\') {  // StringStep's result.
        st.result = json::StrStep::kStay;
        st.char_end = true;
        st.value = b;
      } else {
        st = json::StringStep(p.phase, b, /*allow_escapes=*/true, p.partial);
        if (st.result != json::StrStep::kStay) continue;  // Refused, or closing: not inside.
      }
      const int32_t to = !st.char_end ? p.node
                                      : child_of(p.node, st.value < 128 ? ascii_class[st.value]
                                                                        : class_of(st.value));
      const absl::Span<const TokenId> ids = ids_at(child);
      std::vector<TokenId>& out =
          st.next == json::StrPhase::kBody ? t->nodes[static_cast<size_t>(to)].ids : t->partial_ids;
      out.insert(out.end(), ids.begin(), ids.end());
      stack.push_back({k, to, st.next, st.char_end ? 0 : st.value});
    }
  }
  return t;
}

}  // namespace cairn::infer::text
