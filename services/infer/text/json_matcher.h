#ifndef CAIRN_SERVICES_INFER_TEXT_JSON_MATCHER_H_
#define CAIRN_SERVICES_INFER_TEXT_JSON_MATCHER_H_

#include <compare>
#include <cstdint>
#include <string_view>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "services/infer/text/json_grammar.h"

namespace cairn::infer::text::json {

// The content of a JSON string, one byte at a time: the states between its quotes. Valid
// UTF-8 only (a character's bytes may arrive separately); escapes \" \\ \/ \b \f \n \r \t and
// \uXXXX, where a \u escape of a surrogate must be a high one directly followed by a \u escape
// of a low one (lone surrogates are refused); no raw control characters (< 0x20).
enum class StrPhase : uint8_t {
  kBody,    // Between characters.
  kEscape,  // After '\'.
  kHex0,
  kHex1,
  kHex1AfterD,
  kHex2,
  kHex3,  // \u digits of a non-surrogate (or the first, 'D').
  kHighHex2,
  kHighHex3,  // The last two digits of a high surrogate.
  kLowBackslash,
  kLowU,
  kLowHex0,
  kLowHex1,
  kLowHex2,
  kLowHex3,  // The low surrogate after it.
  kCont1,    // One UTF-8 continuation byte to go.
  kCont2,    // Two to go.
  kCont2E0,  // Two to go, the first in A0..BF.
  kCont2ED,  // Two to go, the first in 80..9F.
  kCont3,    // Three to go.
  kCont3F0,  // Three to go, the first in 90..BF.
  kCont3F4,  // Three to go, the first in 80..8F.
  kCount,
};
inline constexpr int kStrPhaseCount = static_cast<int>(StrPhase::kCount);

struct StrStep {
  enum Result : uint8_t { kReject, kStay, kClose } result = kReject;
  StrPhase next = StrPhase::kBody;
  bool char_start = false;  // The byte starts a character (code points are counted here).
};

// Returns what byte `b` does in phase `phase` of a string's content. With `!allow_escapes` a
// backslash is refused.
StrStep StringStep(StrPhase phase, uint8_t b, bool allow_escapes = true);

// One level of a matcher stack: a value of grammar node `node` being read.
struct Frame {
  int32_t node = 0;
  uint8_t phase = 0;   // Per node kind (json_matcher.cc); StrPhase + 1 for strings (0: before '"').
  uint8_t blanks = 0;  // Spaces and tabs in the current run of whitespace.
  uint8_t newlines = 0;  // Newlines in it.
  uint8_t pad = 0;
  int32_t count = 0;  // String code points, array items, object's next property index, digits.
  int32_t aux = 0;    // Trie node, chosen property, exclusion-trie node (-1: left the trie).

  friend bool operator==(const Frame&, const Frame&) = default;
  friend auto operator<=>(const Frame&, const Frame&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const Frame& f) {
    return H::combine(std::move(h), f.node, f.phase, f.blanks, f.newlines, f.count, f.aux);
  }
};

using Stack = absl::InlinedVector<Frame, 8>;

// A position in a CompiledGrammar: the set of stacks (alternatives still open) that the bytes
// so far can have led to. An empty stack is a complete top-level value. Every state a matcher
// reaches can be completed (the grammar's min_depth keeps stacks completable within
// kMaxValueNesting), so a byte refused here can never be part of a valid text.
//
// Thread-compatible; a small value type (copy, compare, hash). `grammar` must outlive it.
class ByteMatcher {
 public:
  // The position before the first byte of a value of `grammar`.
  explicit ByteMatcher(const CompiledGrammar* grammar);
  // The position of one stack of `grammar` (used by JsonConstraint per stack).
  ByteMatcher(const CompiledGrammar* grammar, Stack stack);

  // Advances over `b`; returns false and stays unchanged when no stack accepts it.
  bool Advance(uint8_t b);
  // Advances over every byte of `bytes`, stack by stack; returns false (and may be left
  // part-way: use a copy) when no stack accepts them all.
  bool AdvanceAll(std::string_view bytes);
  // Whether the bytes so far are one complete value.
  bool Complete() const;
  // Whether no byte can follow (complete, and nothing extends the value).
  bool AtEnd() const;

  const absl::InlinedVector<Stack, 2>& stacks() const { return stacks_; }
  const CompiledGrammar* grammar() const { return grammar_; }

  friend bool operator==(const ByteMatcher& a, const ByteMatcher& b) {
    return a.stacks_ == b.stacks_;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ByteMatcher& m) {
    return H::combine(std::move(h), m.stacks_);
  }

 private:
  const CompiledGrammar* grammar_;
  absl::InlinedVector<Stack, 2> stacks_;  // Sorted, no duplicates, at most kMaxParallelStacks.
};

}  // namespace cairn::infer::text::json

#endif  // CAIRN_SERVICES_INFER_TEXT_JSON_MATCHER_H_
