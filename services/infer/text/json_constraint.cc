#include "services/infer/text/json_constraint.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/check.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/json_matcher.h"
#include "services/infer/text/json_pattern_mask.h"
#include "services/infer/text/token_index.h"

namespace cairn::infer::text {
namespace {

// Masks kept per constraint, keyed by the full matcher state (about 19 KB each for Qwen3).
constexpr size_t kMaskCacheEntries = 16;
void SetBit(std::vector<uint64_t>& words, TokenId id) {
  words[static_cast<size_t>(id) / 64] |= uint64_t{1} << (static_cast<uint32_t>(id) % 64);
}

// JsonConstraint as a walk of the TrieTokenIndex with a ByteMatcher. Thread-compatible.
class TrieJsonConstraint : public JsonConstraint {
 public:
  TrieJsonConstraint(std::shared_ptr<const JsonGrammar> owner, const json::CompiledGrammar* grammar,
                     const TrieTokenIndex* index, std::vector<TokenId> end_ids)
      : owner_(std::move(owner)),
        grammar_(grammar),
        index_(index),
        end_ids_(std::move(end_ids)),
        matcher_(grammar) {}

  absl::Status Allowed(absl::Span<uint64_t> allowed) override {
    std::fill(allowed.begin(), allowed.end(), 0);
    if (finished_) {
      return absl::FailedPreconditionError("json constraint: the value already ended");
    }
    const std::vector<uint64_t>& mask = Mask();
    bool any = false;
    const size_t n = std::min(allowed.size(), mask.size());
    for (size_t i = 0; i < n; ++i) {
      allowed[i] = mask[i];
      any |= mask[i] != 0;
    }
    if (!any) {
      return absl::InternalError(
          "json constraint: no token can continue the value (the vocabulary cannot spell any "
          "byte the grammar allows here)");
    }
    return absl::OkStatus();
  }

  absl::Status Accept(TokenId token) override {
    if (finished_) {
      return absl::FailedPreconditionError(
          absl::StrCat("json constraint: token ", token, " after the value ended"));
    }
    if (std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end()) {
      if (!matcher_.Complete()) {
        return absl::FailedPreconditionError(
            absl::StrCat("json constraint: end token ", token, " before the value is complete"));
      }
      finished_ = true;
      return absl::OkStatus();
    }
    const std::string_view bytes = index_->bytes(token);
    if (bytes.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("json constraint: token ", token, " is special, unknown or has no bytes"));
    }
    json::ByteMatcher next = matcher_;
    if (!next.AdvanceAll(bytes)) {
      return absl::FailedPreconditionError(
          absl::StrCat("json constraint: token ", token, " does not fit the grammar here"));
    }
    matcher_ = std::move(next);
    return absl::OkStatus();
  }

  bool Complete() const override { return finished_ || matcher_.Complete(); }

 private:
  // Returns the mask of the current state, from the cache or computed.
  const std::vector<uint64_t>& Mask() {
    auto it = cache_.find(matcher_);
    if (it != cache_.end()) return it->second;
    std::vector<uint64_t> words(index_->mask_words(), 0);
    for (const json::Stack& s : matcher_.stacks()) StackMask(s, words);
    // An end id is the end wherever it comes (Accept), also one whose bytes would fit the
    // value (an EOS token the tokenizer does not mark special): only where the value is complete.
    const bool complete = matcher_.Complete();
    for (TokenId e : end_ids_) {
      if (e < 0 || static_cast<size_t>(e) >= words.size() * 64) continue;
      if (complete) {
        SetBit(words, e);
      } else {
        words[static_cast<size_t>(e) / 64] &= ~(uint64_t{1} << (static_cast<uint32_t>(e) % 64));
      }
    }
    if (cache_.size() >= kMaskCacheEntries) {
      cache_.erase(order_.front());
      order_.pop_front();
    }
    order_.push_back(matcher_);
    return cache_.emplace(matcher_, std::move(words)).first->second;
  }

  // ORs into `words` the ids whose bytes one stack accepts.
  void StackMask(const json::Stack& s, std::vector<uint64_t>& words) {
    if (!s.empty()) {
      const json::Frame& top = s.back();
      const json::Node& node = grammar_->node(top.node);
      if (node.kind == json::NodeKind::kString && node.raw) {
        if (node.pattern < 0 && node.max_length < 0) return RawMask(s, node, words);
      } else if (node.kind == json::NodeKind::kString && top.phase != 0) {
        if (node.forbid.empty()) return StringMask(s, node, words);
        // The string's own classes know nothing of forbidden texts: its mask apart, then the
        // few tokens that would complete one here checked by the matcher.
        std::vector<uint64_t> own(words.size(), 0);
        StringMask(s, node, own);
        for (TokenId id : index_->ForbidHits(node.forbid, top.progress)) {
          json::ByteMatcher m(grammar_, s);
          const uint64_t bit = uint64_t{1} << (static_cast<uint32_t>(id) % 64);
          own[static_cast<size_t>(id) / 64] &= ~bit;
          if (m.AdvanceAll(index_->bytes(id))) own[static_cast<size_t>(id) / 64] |= bit;
        }
        for (size_t i = 0; i < words.size(); ++i) words[i] |= own[i];
        return;
      }
    }
    Walk(json::ByteMatcher(grammar_, s), 0, words);
  }

  // Inside a string, the tokens that stay in it do not depend on the rest of the stack: they
  // come precomputed from the index; only those that close it are run through the matcher.
  // (A key that must differ from the named properties is checked only where it closes, so the
  // tokens that stay inside it are allowed too.)
  void StringMask(const json::Stack& s, const json::Node& node, std::vector<uint64_t>& words) {
    const json::Frame& top = s.back();
    if (node.pattern >= 0 &&
        !grammar_->pattern(node.pattern).universal(json::PatternStateOf(top.aux))) {
      return PatternStringMask(s, node, words);
    }
    const StringTokenClass& c =
        index_->StringClass(static_cast<json::StrPhase>(top.phase - 1), node.exclude_trie < 0);
    if (node.max_length < 0) {
      for (size_t i = 0; i < words.size(); ++i) words[i] |= c.inside_mask[i];
    } else {
      const int32_t room = node.max_length - top.count;
      for (size_t i = 0; i < c.inside_ids.size(); ++i) {
        if (c.inside_chars[i] <= room) SetBit(words, c.inside_ids[i]);
      }
    }
    for (TokenId id : c.leaving_ids) {
      json::ByteMatcher m(grammar_, s);
      if (m.AdvanceAll(index_->bytes(id))) SetBit(words, id);
    }
  }

  // Inside raw text without maxLength or a pattern (a tool call's XML parameter, a file's text
  // in it perhaps): the tokens that stay in it come from the index's class of its phase and
  // forbidden-text progress (minLength matters only where the text ends); those that may leave
  // it are run through the matcher. (With maxLength or a pattern the walk below does it all:
  // such values are short.)
  void RawMask(const json::Stack& s, const json::Node& node, std::vector<uint64_t>& words) {
    const json::Frame& top = s.back();
    const RawTokenClass& c = index_->RawClass(static_cast<json::StrPhase>(top.phase - 1),
                                              top.progress, node.forbid, node.raw_exit);
    for (size_t i = 0; i < words.size(); ++i) words[i] |= c.inside_mask[i];
    for (TokenId id : c.leaving_ids) {
      json::ByteMatcher m(grammar_, s);
      if (m.AdvanceAll(index_->bytes(id))) SetBit(words, id);
    }
  }

  // Inside a string with a pattern (in a state that does not accept everything), from the
  // class of its frame: the lengths checked per run, the tokens that may close it run through
  // the matcher.
  void PatternStringMask(const json::Stack& s, const json::Node& node,
                         std::vector<uint64_t>& words) {
    const json::Frame& top = s.back();
    const PatternTokenClass& c = pattern_classes_.Get(node, top);
    const bool counted = node.min_length > 0 || node.max_length >= 0;
    for (const PatternTokenClass::Run& r : c.runs) {
      if (counted && !json::PatternViable(*grammar_, node, r.aux, r.phase, top.count + r.chars)) {
        continue;
      }
      for (size_t i = r.begin; i < r.end; ++i) SetBit(words, c.ids[i]);
    }
    for (TokenId id : c.leaving_ids) {
      json::ByteMatcher m(grammar_, s);
      if (m.AdvanceAll(index_->bytes(id))) SetBit(words, id);
    }
  }

  // Depth-first walk of the index's trie below `node`, `m` having read the node's bytes.
  void Walk(const json::ByteMatcher& m, int32_t node, std::vector<uint64_t>& words) const {
    const TrieTokenIndex::TrieNode& n = index_->node(node);
    for (int32_t c = n.first_child; c < n.first_child + n.child_count; ++c) {
      const TrieTokenIndex::TrieNode& child = index_->node(c);
      json::ByteMatcher next = m;
      if (!next.Advance(child.byte)) continue;
      for (TokenId id : index_->ids_at(child)) SetBit(words, id);
      Walk(next, c, words);
    }
  }

  std::shared_ptr<const JsonGrammar> owner_;  // Keeps grammar_ alive.
  const json::CompiledGrammar* grammar_;
  const TrieTokenIndex* index_;
  const std::vector<TokenId> end_ids_;
  json::ByteMatcher matcher_;
  bool finished_ = false;
  absl::flat_hash_map<json::ByteMatcher, std::vector<uint64_t>> cache_;
  std::deque<json::ByteMatcher> order_;  // Cache keys, oldest first.
  PatternTokenClasses pattern_classes_{grammar_, index_};
};

}  // namespace

std::unique_ptr<JsonConstraint> JsonConstraint::Create(std::shared_ptr<const JsonGrammar> grammar,
                                                       const TokenIndex* index,
                                                       std::vector<TokenId> end_ids) {
  const auto* compiled = dynamic_cast<const json::CompiledGrammar*>(grammar.get());
  const auto* trie = dynamic_cast<const TrieTokenIndex*>(index);
  CAIRN_CHECK(compiled != nullptr);
  CAIRN_CHECK(trie != nullptr);
  return std::make_unique<TrieJsonConstraint>(std::move(grammar), compiled, trie,
                                              std::move(end_ids));
}

}  // namespace cairn::infer::text
