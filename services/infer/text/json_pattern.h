#ifndef CAIRN_SERVICES_INFER_TEXT_JSON_PATTERN_H_
#define CAIRN_SERVICES_INFER_TEXT_JSON_PATTERN_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

// JSON Schema's `pattern` and `format` on strings: ECMA-262 regular expressions (a subset)
// compiled into a deterministic automaton over Unicode scalar values, which ByteMatcher
// (json_matcher.h) steps once per code point of a string's decoded content.
namespace cairn::infer::text::json {

// A string's content as a DFA over Unicode scalar values (code points other than surrogates).
// Shared by the string nodes of one schema that have the same patterns; each checks its own
// lengths (in code points) through Viable.
//
// Invariants: every state can reach an accepting one (dead states are removed, so a missing
// transition is a refusal); at most one state is `universal` (accepting, and every scalar value
// leads back to it); each state's edges are sorted, disjoint and name live states.
//
// Immutable once its schema is compiled; thread-safe.
class PatternAutomaton {
 public:
  static constexpr int32_t kNever = std::numeric_limits<int32_t>::max() / 4;

  struct Edge {
    uint32_t lo = 0;  // Code points [lo, hi] lead to state `to`.
    uint32_t hi = 0;
    int32_t to = 0;
  };

  PatternAutomaton() = default;

  // The state before the first code point; -1 when no string matches.
  int32_t start() const { return start_; }
  int32_t state_count() const { return static_cast<int32_t>(flags_.size()); }
  bool accepting(int32_t s) const { return (flags_[static_cast<size_t>(s)] & kAccepting) != 0; }
  bool universal(int32_t s) const { return (flags_[static_cast<size_t>(s)] & kUniversal) != 0; }
  absl::Span<const Edge> edges(int32_t s) const {
    const size_t b = static_cast<size_t>(first_edge_[static_cast<size_t>(s)]);
    const size_t e = static_cast<size_t>(first_edge_[static_cast<size_t>(s) + 1]);
    return absl::MakeConstSpan(edges_).subspan(b, e - b);
  }
  // The largest minLength the length table answers for.
  int32_t max_min_length() const { return columns_ - 1; }

  // Returns the state after code point `cp` from state `s`, or -1 when `cp` is refused there.
  int32_t Next(int32_t s, uint32_t cp) const;
  // Whether a string that reached state `s` after `count` code points can still be completed
  // to one that matches and has [min_length, max_length] code points (max -1: unbounded).
  // REQUIRES: min_length <= max_min_length().
  bool Viable(int32_t s, int32_t count, int32_t min_length, int32_t max_length) const;
  // Whether some code point in [lo, hi] leads from `s` to a state Viable at `count`.
  bool AnyViable(int32_t s, uint32_t lo, uint32_t hi, int32_t count, int32_t min_length,
                 int32_t max_length) const;
  // Whether `utf8` (a string's decoded content, valid UTF-8) matches, of any length.
  bool Matches(std::string_view utf8) const;

  // Makes the length table answer for minLength up to `min_length`: state_count() x
  // (min_length + 1) entries, which the caller bounds.
  void ExtendLengthTable(int32_t min_length);

 private:
  friend class PatternCompiler;
  static constexpr uint8_t kAccepting = 1;
  static constexpr uint8_t kUniversal = 2;

  int32_t start_ = -1;
  std::vector<uint8_t> flags_;
  std::vector<int32_t> first_edge_{0};  // State s: edges_[first_edge_[s], first_edge_[s + 1]).
  std::vector<Edge> edges_;
  // shortest_[s * columns_ + need]: the fewest code points that lead from `s` to an accepting
  // state along a path of at least `need` of them (kNever: none).
  int32_t columns_ = 0;
  std::vector<int32_t> shortest_;
};

// What one schema's patterns may still cost (kMaxPatternStatesPerSchema and
// kMaxPatternStepsPerSchema in json_grammar.h), shared by its PatternCompilers.
struct PatternBudget {
  int64_t states;  // DFA states built.
  int64_t steps;   // NFA states visited while building them.
};

// Compiles the patterns a string must all match into one PatternAutomaton. Single use;
// thread-compatible.
//
// How: each pattern is parsed into a syntax tree, built into a Thompson NFA over sets of code
// points (^ and $ are assertion edges, taken only at the string's start and end, so they are
// exact wherever they stand), and determinized by subset construction over the classes of code
// points that the patterns' sets divide the scalar values into. A DFA rather than an NFA run
// at match time, so that the matcher's state inside a string is one state id (state sets are
// computed once per schema, never per byte) and the lengths' viability is a table lookup. A
// lookahead right after a leading ^ (zod's email pattern has two) is a DFA of its own,
// intersected with the rest (or, negative, subtracted); so are several patterns (`pattern` and
// `format`). Dead states are then removed, and the states whose language is every string are
// merged into one (so that an unanchored pattern, once matched, stays in one state).
class PatternCompiler {
 public:
  // `budget` must outlive this object; Compile takes what it builds from it.
  explicit PatternCompiler(PatternBudget* budget);
  ~PatternCompiler();

  // Adds an ECMA-262 pattern (JSON Schema's `pattern`: not anchored, so it matches if it
  // matches anywhere; code point semantics, as with the u flag). InvalidArgument saying what
  // and where for syntax this subset refuses (backreferences, lookbehind, lookahead other than
  // right after a leading ^, \b, inline flags, property escapes, ...) or bounds it exceeds;
  // never a looser automaton.
  absl::Status Add(std::string_view pattern);
  // Returns the automaton of the strings that match every pattern added (its length table
  // for minLength 0). InvalidArgument when that exceeds the bounds in json_grammar.h.
  absl::StatusOr<PatternAutomaton> Compile();

 private:
  struct Piece;  // One parsed pattern (json_pattern.cc).

  PatternBudget* budget_;
  std::vector<std::unique_ptr<Piece>> pieces_;
};

// A `format` this grammar implements: an ECMA-262 pattern, and a bound on the length in code
// points that the format implies (-1: none).
struct StringFormat {
  std::string_view name;
  std::string_view pattern;
  int32_t max_length = -1;
};

// Returns the format named `name`, or nullptr when it is not one of those implemented.
const StringFormat* FindStringFormat(std::string_view name);

}  // namespace cairn::infer::text::json

#endif  // CAIRN_SERVICES_INFER_TEXT_JSON_PATTERN_H_
