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
  bool char_end = false;    // The byte ends a character, whose code point is `value`.
  uint32_t value = 0;       // The code point, or before its end the bits of it read so far.
};

// Returns what byte `b` does in phase `phase` of a string's content, where `partial` is the
// `value` of the previous step (the decoded content: escapes and UTF-8, a surrogate pair one
// code point). With `!allow_escapes` a backslash is refused.
StrStep StringStep(StrPhase phase, uint8_t b, bool allow_escapes = true, uint32_t partial = 0);

// The forbidden-text state of a text that was in `state` after byte `b`, or -1 where `b`
// completes a text of `forbid` (Node::forbid). A state is the longest prefix of one of the
// texts that the text so far ends with: bytes (state & 63) of forbid[state >> 6]; 0 none.
int ForbidStep(const std::vector<std::string>& forbid, uint8_t state, uint8_t b);

// Returns what byte `b` does to raw text (Node::raw) in `phase` (kBody or a UTF-8 continuation
// phase; `partial` as for StringStep) in forbidden-text state `*progress`: kStay, with
// `*progress` advanced, or kReject (a control character, malformed UTF-8, or a text of `forbid`
// completed). Never kClose: raw text ends where its parent reads on.
StrStep RawStep(StrPhase phase, uint8_t b, uint32_t partial, const std::vector<std::string>& forbid,
                uint8_t* progress);

// One level of a matcher stack: a value of grammar node `node` being read.
struct Frame {
  int32_t node = 0;
  uint8_t phase = 0;   // Per node kind (json_matcher.cc); StrPhase + 1 for strings (0: before '"').
  uint8_t blanks = 0;  // Spaces and tabs in the current run of whitespace.
  uint8_t newlines = 0;  // Newlines in it.
  // A raw string's forbidden-text state (ForbidStep); a markup object's bytes read of its
  // member_end or close text.
  uint8_t progress = 0;
  int32_t count = 0;  // String code points, array items, object's next property index, digits.
  // Trie node, chosen property, exclusion-trie node (-1: left the trie), or in a string with a
  // pattern its automaton state and the bits of the code point being read (PatternAux).
  int32_t aux = 0;

  friend bool operator==(const Frame&, const Frame&) = default;
  friend auto operator<=>(const Frame&, const Frame&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const Frame& f) {
    return H::combine(std::move(h), f.node, f.phase, f.blanks, f.newlines, f.progress, f.count,
                      f.aux);
  }
};

using Stack = absl::InlinedVector<Frame, 8>;

// A string frame's `aux` with a pattern: automaton state `state` (below kMaxPatternStates) and
// the bits read of the current code point (at most 16: a surrogate pair's high half and 6 bits
// of its low one).
inline int32_t PatternAux(int32_t state, uint32_t partial) {
  return static_cast<int32_t>(partial << 12 | static_cast<uint32_t>(state));
}
inline int32_t PatternStateOf(int32_t aux) { return aux & 0xFFF; }
inline uint32_t PatternPartialOf(int32_t aux) { return static_cast<uint32_t>(aux) >> 12; }
static_assert(kMaxPatternStates <= 0x1000);

// The aux a string frame of node `n` starts with after its opening quote.
int32_t StringStartAux(const CompiledGrammar& g, const Node& n);

// Whether a string of node `n` (which has a pattern) whose frame is in `phase` with `aux` after
// `count` code points (the one begun included) can still be completed within its lengths.
bool PatternViable(const CompiledGrammar& g, const Node& n, int32_t aux, StrPhase phase,
                   int32_t count);

// Counts the character step `st` begins, where node `n` has lengths; false past max_length.
inline bool CountStep(const Node& n, const StrStep& st, int32_t* count) {
  if (st.char_start && (n.min_length > 0 || n.max_length >= 0)) {
    if (n.max_length >= 0 && *count >= n.max_length) return false;
    ++*count;
  }
  return true;
}

// The aux after step `st` of a string of node `n` (which has a pattern) whose aux was `aux`,
// `count` code points begun: false where no completion is left. Every state reached must still
// be completable: a code point only to a state from which the lengths can be met, a part of
// one only where some completion of it leads to one.
inline bool PatternStep(const CompiledGrammar& g, const Node& n, int32_t aux, const StrStep& st,
                        int32_t count, int32_t* next) {
  int32_t state = PatternStateOf(aux);
  if (st.char_end) {
    state = g.pattern(n.pattern).Next(state, st.value);
    if (state < 0) return false;
  }
  *next = PatternAux(state, st.char_end ? 0 : st.value);
  return PatternViable(g, n, *next, st.next, count);
}

// Feeds byte `b` to the content of string node `n` (of grammar `g`) whose frame `f` is past
// its opening quote. Returns kReject, kStay (with `f` advanced) or kClose (`b` is the closing
// quote and the content is complete; `f` unchanged). Bytes that complete a text of `n.forbid`
// are refused (`f.progress` holds its state, ForbidStep). The one definition of a string's content,
// for ByteMatcher and for the masks JsonConstraint computes inside strings. Inline: the
// matcher steps every byte of every string through it.
inline StrStep::Result StringContentStep(const CompiledGrammar& g, const Node& n, Frame& f,
                                         uint8_t b) {
  const bool patterned = n.pattern >= 0;
  const StrStep st = StringStep(static_cast<StrPhase>(f.phase - 1), b, n.exclude_trie < 0,
                                patterned ? PatternPartialOf(f.aux) : 0);
  if (st.result == StrStep::kReject) return StrStep::kReject;
  int32_t count = f.count;
  if (!CountStep(n, st, &count)) return StrStep::kReject;
  if (st.result == StrStep::kClose) {
    if (count < n.min_length) return StrStep::kReject;
    if (n.exclude_trie >= 0 && f.aux >= 0 && g.trie(f.aux).terminal >= 0) return StrStep::kReject;
    if (patterned && !g.pattern(n.pattern).accepting(PatternStateOf(f.aux))) {
      return StrStep::kReject;
    }
    return StrStep::kClose;
  }
  uint8_t progress = f.progress;
  if (!n.forbid.empty()) {
    const int next = ForbidStep(n.forbid, f.progress, b);
    if (next < 0) return StrStep::kReject;
    progress = static_cast<uint8_t>(next);
  }
  if (patterned) {
    int32_t aux = 0;
    if (!PatternStep(g, n, f.aux, st, count, &aux)) return StrStep::kReject;
    f.aux = aux;
  } else if (n.exclude_trie >= 0 && f.aux >= 0) {
    f.aux = g.TrieChild(f.aux, b);
  }
  f.count = count;
  f.progress = progress;
  f.phase = static_cast<uint8_t>(st.next) + 1;
  return StrStep::kStay;
}

// Feeds byte `b` to raw string node `n` (Node::raw) whose frame `f` is inside it; returns kStay
// with `f` advanced, or kReject. RawStep plus lengths and pattern, as StringContentStep.
inline StrStep::Result RawContentStep(const CompiledGrammar& g, const Node& n, Frame& f,
                                      uint8_t b) {
  const bool patterned = n.pattern >= 0;
  uint8_t progress = f.progress;
  const StrStep st = RawStep(static_cast<StrPhase>(f.phase - 1), b,
                             patterned ? PatternPartialOf(f.aux) : 0, n.forbid, &progress);
  if (st.result == StrStep::kReject) return StrStep::kReject;
  int32_t count = f.count;
  if (!CountStep(n, st, &count)) return StrStep::kReject;
  int32_t aux = f.aux;
  if (patterned && !PatternStep(g, n, f.aux, st, count, &aux)) return StrStep::kReject;
  f.aux = aux;
  f.count = count;
  f.progress = progress;
  f.phase = static_cast<uint8_t>(st.next) + 1;
  return StrStep::kStay;
}

// Whether a raw string's frame `f` of node `n` holds complete text (its parent may read on).
inline bool RawComplete(const CompiledGrammar& g, const Node& n, const Frame& f) {
  return f.phase == static_cast<uint8_t>(StrPhase::kBody) + 1 && f.count >= n.min_length &&
         (n.pattern < 0 || g.pattern(n.pattern).accepting(PatternStateOf(f.aux)));
}

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
