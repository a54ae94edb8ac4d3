#ifndef CAIRN_SERVICES_INFER_TEXT_JSON_PATTERN_SYNTAX_H_
#define CAIRN_SERVICES_INFER_TEXT_JSON_PATTERN_SYNTAX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// The insides of PatternCompiler (json_pattern.h): a pattern's text parsed into a syntax tree
// (json_pattern_syntax.cc), which json_pattern.cc builds into automata.
namespace cairn::infer::text::json::pattern_syntax {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateFirst = 0xD800;
constexpr uint32_t kSurrogateLast = 0xDFFF;

// A set of code points: sorted, disjoint closed intervals.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

// `r` (normalized) without the surrogates, which no JSON string's decoded content holds.
Ranges Scalars(const Ranges& r);

// A pattern's syntax tree.
struct Ast {
  enum class Kind : uint8_t { kEmpty, kChars, kConcat, kAlt, kRepeat, kBol, kEol, kLookahead };
  Kind kind = Kind::kEmpty;
  Ranges chars;           // kChars (normalized).
  std::vector<Ast> kids;  // kConcat and kAlt; kRepeat and kLookahead: one.
  int32_t min = 0;        // kRepeat.
  int32_t max = 0;        // kRepeat (-1: unbounded).
  bool negative = false;  // kLookahead: (?!...).
  size_t offset = 0;      // kLookahead: where it starts in the pattern (error messages).
};

// Parses `source` (code points) with ECMA-262's pattern grammar (the u flag's code point
// semantics). InvalidArgument naming what the subset refuses and its offset in code points.
absl::StatusOr<Ast> ParsePattern(std::u32string source);

// Fails for a lookahead anywhere in `a` (the places this subset supports one are taken out
// before this is called).
absl::Status NoLookahead(const Ast& a);

}  // namespace cairn::infer::text::json::pattern_syntax

#endif  // CAIRN_SERVICES_INFER_TEXT_JSON_PATTERN_SYNTAX_H_
