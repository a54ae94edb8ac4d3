#include "services/infer/text/json_pattern.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text::json {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateFirst = 0xD800;
constexpr uint32_t kSurrogateLast = 0xDFFF;
constexpr uint32_t kNoChar = 0xFFFFFFFF;

// A set of code points: sorted, disjoint closed intervals.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges Normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.push_back({lo, hi});
    }
  }
  return out;
}

// The code points not in `r` (normalized).
Ranges Complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

// `r` (normalized) without the surrogates, which no JSON string's decoded content holds.
Ranges Scalars(const Ranges& r) {
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (lo < kSurrogateFirst) out.push_back({lo, std::min(hi, kSurrogateFirst - 1)});
    if (hi > kSurrogateLast) out.push_back({std::max(lo, kSurrogateLast + 1), hi});
  }
  return out;
}

Ranges Single(uint32_t cp) { return {{cp, cp}}; }

// ECMA-262's \d, \w and \s (WhiteSpace and LineTerminator); \d and \w are ASCII only, also
// with the u flag.
Ranges Digits() { return {{'0', '9'}}; }
Ranges WordChars() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
Ranges Spaces() {
  return {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}
// What '.' matches without the s flag: anything but a line terminator.
Ranges Dot() { return Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}); }

bool IsDigit(uint32_t c) { return c >= '0' && c <= '9'; }
bool IsAsciiLetter(uint32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
uint32_t HexValue(uint32_t c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 16;
}

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

Ast CharsAst(Ranges r) {
  Ast a;
  a.kind = Ast::Kind::kChars;
  a.chars = Normalized(std::move(r));
  return a;
}

// Recursive descent over ECMA-262's pattern grammar (with the u flag's code point semantics).
// What the subset refuses is refused here, with its offset in code points. Single use.
class RegexParser {
 public:
  explicit RegexParser(std::u32string source) : src_(std::move(source)) {}

  absl::StatusOr<Ast> Parse() {
    ASSIGN_OR_RETURN(Ast ast, Disjunction(0));
    if (pos_ < src_.size()) return Error("an unmatched ')'", pos_);
    return ast;
  }

 private:
  uint32_t Peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : kNoChar;
  }
  bool Eat(uint32_t c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  static absl::Status Error(std::string_view what, size_t at) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " at offset ", at));
  }

  absl::StatusOr<Ast> Disjunction(int depth) {
    if (depth > kMaxPatternNesting) {
      return Error(absl::StrCat("groups nested deeper than ", kMaxPatternNesting), pos_);
    }
    Ast alt;
    alt.kind = Ast::Kind::kAlt;
    do {
      ASSIGN_OR_RETURN(Ast a, Alternative(depth));
      alt.kids.push_back(std::move(a));
    } while (Eat('|'));
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  absl::StatusOr<Ast> Alternative(int depth) {
    Ast seq;
    seq.kind = Ast::Kind::kConcat;
    while (pos_ < src_.size() && Peek() != '|' && Peek() != ')') {
      const size_t at = pos_;
      Ast term;
      bool assertion = true;
      if (Eat('^')) {
        term.kind = Ast::Kind::kBol;
      } else if (Eat('$')) {
        term.kind = Ast::Kind::kEol;
      } else if (Peek() == '(' && Peek(1) == '?' && (Peek(2) == '=' || Peek(2) == '!')) {
        term.kind = Ast::Kind::kLookahead;
        term.negative = Peek(2) == '!';
        term.offset = at;
        pos_ += 3;
        ASSIGN_OR_RETURN(Ast body, Disjunction(depth + 1));
        if (!Eat(')')) return Error("an unterminated group", at);
        term.kids.push_back(std::move(body));
      } else {
        assertion = false;
        ASSIGN_OR_RETURN(term, Atom(depth));
      }
      RETURN_IF_ERROR(Quantifier(&term, assertion));
      seq.kids.push_back(std::move(term));
    }
    if (seq.kids.empty()) return Ast();
    if (seq.kids.size() == 1) return std::move(seq.kids[0]);
    return seq;
  }

  // Reads a decimal number (saturating far above any bound); false when there is none.
  bool Number(int32_t* n) {
    if (!IsDigit(Peek())) return false;
    int64_t v = 0;
    while (IsDigit(Peek())) v = std::min<int64_t>(v * 10 + (src_[pos_++] - '0'), 1 << 30);
    *n = static_cast<int32_t>(v);
    return true;
  }

  // Wraps `*term` in the quantifier that follows it, if any.
  absl::Status Quantifier(Ast* term, bool assertion) {
    const size_t at = pos_;
    int32_t min = 0, max = -1;
    if (Eat('*')) {
    } else if (Eat('+')) {
      min = 1;
    } else if (Eat('?')) {
      max = 1;
    } else if (Eat('{')) {
      // ECMA-262 (Annex B) reads a '{' that starts no quantifier as itself and Python reads
      // "{,n}" as one: refused rather than guessed.
      if (!Number(&min)) return Error("a '{' that starts no quantifier (escape it: \\{)", at);
      max = min;
      if (Eat(',')) {
        max = -1;
        Number(&max);
      }
      if (!Eat('}')) return Error("a '{' that starts no quantifier (escape it: \\{)", at);
      if (max >= 0 && max < min) return Error("a quantifier {m,n} with n < m", at);
      if (std::max(min, max) > kMaxPatternRepeat) {
        return Error(absl::StrCat("a repeat count above ", kMaxPatternRepeat), at);
      }
    } else {
      return absl::OkStatus();
    }
    if (assertion) return Error("a quantifier on an assertion", at);
    Eat('?');  // Lazy: the same strings match.
    Ast rep;
    rep.kind = Ast::Kind::kRepeat;
    rep.min = min;
    rep.max = max;
    rep.kids.push_back(std::move(*term));
    *term = std::move(rep);
    return absl::OkStatus();
  }

  absl::StatusOr<Ast> Atom(int depth) {
    const size_t at = pos_;
    const uint32_t c = src_[pos_++];
    switch (c) {
      case '.':
        return CharsAst(Dot());
      case '(':
        return Group(depth, at);
      case '[':
        return Class(at);
      case '\\':
        return AtomEscape(at);
      case '*':
      case '+':
      case '?':
        return Error("a quantifier with nothing to repeat", at);
      case '{':
        return Error("a '{' that starts no quantifier (escape it: \\{)", at);
      default:
        return CharsAst(Single(c));  // ']' and '}' too, as ECMA-262 (Annex B) and Python read them.
    }
  }

  absl::StatusOr<Ast> Group(int depth, size_t at) {
    if (Eat('?')) {
      if (Eat(':')) {
      } else if (Peek() == '<' && (Peek(1) == '=' || Peek(1) == '!')) {
        return Error("a lookbehind (?<= or (?<!", at);
      } else if (Eat('<')) {  // A named group: captures do not matter here.
        size_t n = 0;
        for (; Peek() != kNoChar && (IsAsciiLetter(Peek()) || IsDigit(Peek()) || Peek() == '_' ||
                                     Peek() == '$' || Peek() >= 0x80);
             ++n) {
          ++pos_;
        }
        if (n == 0 || !Eat('>')) return Error("a malformed group name", at);
      } else if (Peek() == 'P') {
        return Error("a Python group (?P...), which ECMA-262 does not have", at);
      } else {
        return Error("inline flags or modifiers (?...)", at);
      }
    }
    ASSIGN_OR_RETURN(Ast body, Disjunction(depth + 1));
    if (!Eat(')')) return Error("an unterminated group", at);
    return body;
  }

  absl::StatusOr<Ast> AtomEscape(size_t at) {
    const uint32_t c = Peek();
    if (c == 'b' || c == 'B') return Error("a word boundary assertion (\\b, \\B)", at);
    if (c >= '1' && c <= '9') return Error("a backreference (\\1 to \\9)", at);
    if (c == 'k') return Error("a named backreference (\\k<name>)", at);
    ASSIGN_OR_RETURN(Ranges r, CharEscape(at, /*in_class=*/false));
    return CharsAst(std::move(r));
  }

  // Reads exactly `n` hex digits into `*v`.
  bool Hex(int n, uint32_t* v) {
    uint32_t r = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t h = HexValue(Peek());
      if (h > 15) return false;
      r = r * 16 + h;
      ++pos_;
    }
    *v = r;
    return true;
  }

  // After "\u": one code point (a surrogate pair of escapes is one, as with the u flag).
  absl::StatusOr<Ranges> UnicodeEscape(size_t at) {
    uint32_t v = 0;
    if (Eat('{')) {
      size_t n = 0;
      for (; HexValue(Peek()) < 16 && v <= kMaxCodePoint; ++n) v = v * 16 + HexValue(src_[pos_++]);
      if (n == 0 || v > kMaxCodePoint || !Eat('}')) return Error("a malformed \\u{...}", at);
      return Single(v);
    }
    if (!Hex(4, &v)) return Error("a malformed \\u escape", at);
    if (v >= 0xD800 && v <= 0xDBFF && Peek() == '\\' && Peek(1) == 'u') {
      const size_t save = pos_;
      pos_ += 2;
      uint32_t low = 0;
      if (Hex(4, &low) && low >= 0xDC00 && low <= 0xDFFF) {
        return Single(0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00));
      }
      pos_ = save;
    }
    return Single(v);  // A lone surrogate matches nothing a JSON string holds.
  }

  // After '\' (at `at`): the code points the escape stands for.
  absl::StatusOr<Ranges> CharEscape(size_t at, bool in_class) {
    if (pos_ >= src_.size()) return Error("a trailing backslash", at);
    const uint32_t c = src_[pos_++];
    switch (c) {
      case 'd':
        return Digits();
      case 'D':
        return Complement(Digits());
      case 'w':
        return WordChars();
      case 'W':
        return Complement(WordChars());
      case 's':
        return Spaces();
      case 'S':
        return Complement(Spaces());
      case 't':
        return Single('\t');
      case 'n':
        return Single('\n');
      case 'v':
        return Single(0x0B);
      case 'f':
        return Single(0x0C);
      case 'r':
        return Single('\r');
      case 'c':
        if (!IsAsciiLetter(Peek())) return Error("a \\c escape without a letter", at);
        return Single(src_[pos_++] % 32);
      case '0':
        if (IsDigit(Peek())) return Error("an octal escape", at);
        return Single(0);
      case 'x': {
        uint32_t v = 0;
        if (!Hex(2, &v)) return Error("a malformed \\x escape", at);
        return Single(v);
      }
      case 'u':
        return UnicodeEscape(at);
      case 'p':
      case 'P':
        return Error("a Unicode property escape (\\p{...}, \\P{...})", at);
      case 'b':
        if (in_class) return Single(0x08);
        break;
      default:
        break;
    }
    // An identity escape (\. \/ \- \" ...): every dialect reads ASCII punctuation as itself.
    if (c < 0x80 && !IsAsciiLetter(c) && !IsDigit(c)) return Single(c);
    std::string shown;
    unicode::AppendUtf8(c, &shown);
    return Error(absl::StrCat("an escape \\", shown, " that this subset does not know"), at);
  }

  struct ClassAtom {
    Ranges set;
    bool single = false;  // One code point, which a range may start or end.
  };

  absl::StatusOr<ClassAtom> ReadClassAtom() {
    const size_t at = pos_;
    const uint32_t c = src_[pos_++];
    if (c != '\\') return ClassAtom{Single(c), true};
    const uint32_t e = Peek();
    const bool class_escape = e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's' || e == 'S';
    ASSIGN_OR_RETURN(Ranges r, CharEscape(at, /*in_class=*/true));
    return ClassAtom{std::move(r), !class_escape};
  }

  absl::StatusOr<Ast> Class(size_t at) {
    const bool negate = Eat('^');
    Ranges set;
    while (true) {
      if (pos_ >= src_.size()) return Error("an unterminated character class", at);
      if (Eat(']')) break;
      const size_t atom_at = pos_;
      ASSIGN_OR_RETURN(ClassAtom lo, ReadClassAtom());
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != kNoChar) {
        ++pos_;
        ASSIGN_OR_RETURN(ClassAtom hi, ReadClassAtom());
        if (!lo.single || !hi.single) {
          return Error("a class range with a class escape ([\\d-z])", atom_at);
        }
        if (lo.set[0].first > hi.set[0].first) return Error("a class range out of order", atom_at);
        set.push_back({lo.set[0].first, hi.set[0].first});
      } else {
        set.insert(set.end(), lo.set.begin(), lo.set.end());
      }
    }
    set = Normalized(std::move(set));
    return CharsAst(negate ? Complement(set) : set);
  }

  std::u32string src_;
  size_t pos_ = 0;
};

// Fails for a lookahead anywhere in `a` (the places this subset supports one are taken out
// before this is called).
absl::Status NoLookahead(const Ast& a) {
  if (a.kind == Ast::Kind::kLookahead) {
    return absl::InvalidArgumentError(
        absl::StrCat("a lookahead other than right after a leading ^ at offset ", a.offset));
  }
  for (const Ast& k : a.kids) RETURN_IF_ERROR(NoLookahead(k));
  return absl::OkStatus();
}

// A Thompson NFA: edges that read nothing, one code point of a set, or assert the start or the
// end of the string. Accepts where `final` is reached with the input consumed.
struct NfaEdge {
  enum Kind : uint8_t { kEps, kChar, kBol, kEol };
  Kind kind = kEps;
  int32_t set = -1;  // kChar: index into the compile's sets.
  int32_t to = 0;
};

struct Nfa {
  std::vector<std::vector<NfaEdge>> out;
  int32_t start = 0;
  int32_t final = 0;  // Reads any code point back to itself: what follows a match is free.
};

class NfaBuilder {
 public:
  // `sets` collects the code point sets of every NFA of one compile; must outlive this object.
  explicit NfaBuilder(std::vector<Ranges>* sets) : sets_(sets) {}

  // Returns the NFA of the strings that `a` matches: anywhere (`search`, JSON Schema's pattern)
  // or at the start (a lookahead); either way anything may follow the match.
  absl::StatusOr<Nfa> Build(const Ast& a, bool search) {
    const int32_t any = AddSet({{0, kMaxCodePoint}});
    ASSIGN_OR_RETURN(nfa_.start, New());
    int32_t body = nfa_.start;
    if (search) {
      Edge(nfa_.start, NfaEdge::kChar, nfa_.start, any);
      ASSIGN_OR_RETURN(body, New());
      Edge(nfa_.start, NfaEdge::kEps, body);
    }
    ASSIGN_OR_RETURN(int32_t end, Add(a, body));
    ASSIGN_OR_RETURN(nfa_.final, New());
    Edge(end, NfaEdge::kEps, nfa_.final);
    Edge(nfa_.final, NfaEdge::kChar, nfa_.final, any);
    return std::move(nfa_);
  }

 private:
  absl::StatusOr<int32_t> New() {
    if (nfa_.out.size() >= static_cast<size_t>(kMaxPatternNfaStates)) {
      return absl::InvalidArgumentError(absl::StrCat("it needs more than ", kMaxPatternNfaStates,
                                                     " NFA states (its repeats expanded)"));
    }
    nfa_.out.emplace_back();
    return static_cast<int32_t>(nfa_.out.size() - 1);
  }

  int32_t AddSet(const Ranges& r) {
    sets_->push_back(Scalars(r));
    return static_cast<int32_t>(sets_->size() - 1);
  }

  void Edge(int32_t from, NfaEdge::Kind kind, int32_t to, int32_t set = -1) {
    nfa_.out[static_cast<size_t>(from)].push_back({kind, set, to});
  }

  // Adds the states that read `a` from state `in`; returns the state reached after it. Edges
  // added from `in` keep their meaning when `in` is a loop's state: they continue after it.
  absl::StatusOr<int32_t> Add(const Ast& a, int32_t in) {
    switch (a.kind) {
      case Ast::Kind::kEmpty:
        return in;
      case Ast::Kind::kChars: {
        ASSIGN_OR_RETURN(int32_t out, New());
        Edge(in, NfaEdge::kChar, out, AddSet(a.chars));
        return out;
      }
      case Ast::Kind::kBol:
      case Ast::Kind::kEol: {
        ASSIGN_OR_RETURN(int32_t out, New());
        Edge(in, a.kind == Ast::Kind::kBol ? NfaEdge::kBol : NfaEdge::kEol, out);
        return out;
      }
      case Ast::Kind::kConcat:
        for (const Ast& k : a.kids) {
          ASSIGN_OR_RETURN(in, Add(k, in));
        }
        return in;
      case Ast::Kind::kAlt: {
        ASSIGN_OR_RETURN(int32_t out, New());
        for (const Ast& k : a.kids) {
          ASSIGN_OR_RETURN(int32_t s, New());
          Edge(in, NfaEdge::kEps, s);
          ASSIGN_OR_RETURN(int32_t e, Add(k, s));
          Edge(e, NfaEdge::kEps, out);
        }
        return out;
      }
      case Ast::Kind::kRepeat: {
        const Ast& k = a.kids[0];
        for (int32_t i = 0; i < a.min; ++i) {
          ASSIGN_OR_RETURN(in, Add(k, in));
        }
        if (a.max < 0) {
          ASSIGN_OR_RETURN(int32_t loop, New());
          Edge(in, NfaEdge::kEps, loop);
          ASSIGN_OR_RETURN(int32_t e, Add(k, loop));
          Edge(e, NfaEdge::kEps, loop);
          return loop;
        }
        // The optional copies as x(x(x)?)?: each may skip straight to the end, so that a
        // state's closure does not walk the copies after it (x{0,n} would cost n^2).
        if (a.max == a.min) return in;
        ASSIGN_OR_RETURN(int32_t end, New());
        for (int32_t i = a.min; i < a.max; ++i) {
          ASSIGN_OR_RETURN(int32_t s, New());  // Fresh: only this copy's edges leave it.
          Edge(in, NfaEdge::kEps, s);
          Edge(s, NfaEdge::kEps, end);
          ASSIGN_OR_RETURN(in, Add(k, s));
        }
        Edge(in, NfaEdge::kEps, end);
        return end;
      }
      case Ast::Kind::kLookahead:
        break;  // Taken out before (NoLookahead).
    }
    return absl::InternalError("pattern: a lookahead reached the NFA builder");
  }

  std::vector<Ranges>* sets_;
  Nfa nfa_;
};

// The classes of code points that no set of a compile tells apart: class k is
// [starts[k], starts[k + 1]); surrogates are a class of their own, which no set holds.
struct Classes {
  std::vector<uint32_t> starts;
  std::vector<std::vector<int32_t>> of_set;  // Per set, the classes it holds.

  int32_t count() const { return static_cast<int32_t>(starts.size()) - 1; }
  bool surrogate(int32_t k) const { return starts[static_cast<size_t>(k)] == kSurrogateFirst; }
};

absl::StatusOr<Classes> Partition(const std::vector<Ranges>& sets) {
  Classes c;
  c.starts = {0, kSurrogateFirst, kSurrogateLast + 1, kMaxCodePoint + 1};
  for (const Ranges& r : sets) {
    for (const auto& [lo, hi] : r) {
      c.starts.push_back(lo);
      c.starts.push_back(hi + 1);
    }
  }
  std::sort(c.starts.begin(), c.starts.end());
  c.starts.erase(std::unique(c.starts.begin(), c.starts.end()), c.starts.end());
  if (c.count() > kMaxPatternClasses) {
    return absl::InvalidArgumentError(
        absl::StrCat("its character sets divide code points into "
                     "more than ",
                     kMaxPatternClasses, " classes"));
  }
  auto index = [&](uint32_t cp) {
    return static_cast<int32_t>(std::upper_bound(c.starts.begin(), c.starts.end(), cp) -
                                c.starts.begin() - 1);
  };
  for (const Ranges& r : sets) {
    std::vector<int32_t> ks;
    for (const auto& [lo, hi] : r) {
      for (int32_t k = index(lo); k <= index(hi); ++k) ks.push_back(k);
    }
    c.of_set.push_back(std::move(ks));
  }
  return c;
}

// A DFA over the classes of a Classes, transitions dense: next[s * classes + k] (-1: none).
struct Dfa {
  int32_t classes = 0;
  std::vector<int32_t> next;
  std::vector<uint8_t> accepting;
  int32_t start = 0;

  int32_t size() const { return static_cast<int32_t>(accepting.size()); }
  int32_t Next(int32_t s, int32_t k) const {
    return next[static_cast<size_t>(s) * static_cast<size_t>(classes) + static_cast<size_t>(k)];
  }
};

absl::Status TooManyStates() {
  return absl::InvalidArgumentError(absl::StrCat("it needs more than ", kMaxPatternStates,
                                                 " DFA states (or the schema's patterns more than ",
                                                 kMaxPatternStatesPerSchema, " in all)"));
}

absl::Status TooMuchWork() {
  return absl::InvalidArgumentError(absl::StrCat("the schema's patterns take more than ",
                                                 kMaxPatternStepsPerSchema,
                                                 " steps to build into DFAs"));
}

// Subset construction. A DFA state is the set of NFA states the input so far can have led to
// (closed over edges that read nothing), plus whether the input is empty so far: only then are
// ^ edges taken. $ edges are taken only to decide whether a state accepts.
absl::StatusOr<Dfa> Determinize(const Nfa& nfa, const Classes& cls, PatternBudget* budget) {
  Dfa dfa;
  dfa.classes = cls.count();
  absl::flat_hash_map<std::vector<int32_t>, int32_t> ids;  // Key: the set, -1 first at start.
  std::vector<std::vector<int32_t>> sets;
  std::vector<uint32_t> mark(nfa.out.size(), 0);
  uint32_t stamp = 0;
  std::vector<int32_t> stack;

  // Visits the NFA states reachable from `seeds` over the edges `follow` allows; returns
  // whether `final` is among them, and the states in `*seen` when given. Sets `*bol` when a
  // state visited has a ^ edge.
  bool bol = false;
  auto walk = [&](const std::vector<int32_t>& seeds, auto follow,
                  std::vector<int32_t>* seen) -> absl::StatusOr<bool> {
    ++stamp;
    bool found = false;
    stack.assign(seeds.begin(), seeds.end());
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (mark[static_cast<size_t>(s)] == stamp) continue;
      mark[static_cast<size_t>(s)] = stamp;
      if (--budget->steps < 0) return TooMuchWork();
      found |= s == nfa.final;
      if (seen != nullptr) seen->push_back(s);
      for (const NfaEdge& e : nfa.out[static_cast<size_t>(s)]) {
        bol |= e.kind == NfaEdge::kBol;
        if (follow(e.kind)) stack.push_back(e.to);
      }
    }
    return found;
  };
  auto intern = [&](const std::vector<int32_t>& seeds, bool at_start) -> absl::StatusOr<int32_t> {
    std::vector<int32_t> set;
    bol = false;
    ASSIGN_OR_RETURN(
        bool has_final,
        walk(
            seeds,
            [&](NfaEdge::Kind k) { return k == NfaEdge::kEps || (at_start && k == NfaEdge::kBol); },
            &set));
    // `final` reads anything back to itself and accepts: the set's language is every string.
    if (has_final) {
      set = {nfa.final};
      at_start = false;
    }
    std::sort(set.begin(), set.end());
    // Where no ^ is in reach, the start is the same state as the set reached later.
    if (at_start && !bol) {
      ASSIGN_OR_RETURN(
          bool unused,
          walk(
              set, [](NfaEdge::Kind k) { return k == NfaEdge::kEps || k == NfaEdge::kEol; },
              nullptr));
      static_cast<void>(unused);
      at_start = bol;
    }
    std::vector<int32_t> key = set;
    if (at_start) key.insert(key.begin(), -1);
    if (auto it = ids.find(key); it != ids.end()) return it->second;
    if (sets.size() >= static_cast<size_t>(kMaxPatternStates) || --budget->states < 0) {
      return TooManyStates();
    }
    ASSIGN_OR_RETURN(bool accepts, walk(
                                       set,
                                       [&](NfaEdge::Kind k) {
                                         return k == NfaEdge::kEps || k == NfaEdge::kEol ||
                                                (at_start && k == NfaEdge::kBol);
                                       },
                                       nullptr));
    const int32_t id = static_cast<int32_t>(sets.size());
    ids.emplace(std::move(key), id);
    sets.push_back(std::move(set));
    dfa.accepting.push_back(accepts ? 1 : 0);
    return id;
  };

  ASSIGN_OR_RETURN(dfa.start, intern({nfa.start}, /*at_start=*/true));
  std::vector<std::vector<int32_t>> bucket(static_cast<size_t>(dfa.classes));
  for (size_t d = 0; d < sets.size(); ++d) {
    for (int32_t s : sets[d]) {
      for (const NfaEdge& e : nfa.out[static_cast<size_t>(s)]) {
        if (e.kind != NfaEdge::kChar) continue;
        for (int32_t k : cls.of_set[static_cast<size_t>(e.set)]) {
          bucket[static_cast<size_t>(k)].push_back(e.to);
        }
      }
    }
    dfa.next.resize((d + 1) * static_cast<size_t>(dfa.classes), -1);
    for (int32_t k = 0; k < dfa.classes; ++k) {
      std::vector<int32_t>& b = bucket[static_cast<size_t>(k)];
      if (b.empty()) continue;
      std::sort(b.begin(), b.end());
      b.erase(std::unique(b.begin(), b.end()), b.end());
      ASSIGN_OR_RETURN(int32_t t, intern(b, /*at_start=*/false));
      dfa.next[d * static_cast<size_t>(dfa.classes) + static_cast<size_t>(k)] = t;
      b.clear();
    }
  }
  return dfa;
}

// The product of `a` and `b` (over the same classes): the strings both accept, or with
// `subtract` those `a` accepts and `b` does not.
absl::StatusOr<Dfa> Product(const Dfa& a, const Dfa& b, bool subtract, PatternBudget* budget) {
  Dfa out;
  out.classes = a.classes;
  absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs;  // -1 for b: b refused (only with subtract).
  auto intern = [&](int32_t x, int32_t y) -> absl::StatusOr<int32_t> {
    if (auto it = ids.find({x, y}); it != ids.end()) return it->second;
    if (pairs.size() >= static_cast<size_t>(kMaxPatternStates) || --budget->states < 0) {
      return TooManyStates();
    }
    const bool b_accepts = y >= 0 && b.accepting[static_cast<size_t>(y)] != 0;
    out.accepting.push_back(a.accepting[static_cast<size_t>(x)] != 0 && b_accepts != subtract);
    const int32_t id = static_cast<int32_t>(pairs.size());
    ids.emplace(std::make_pair(x, y), id);
    pairs.push_back({x, y});
    return id;
  };
  ASSIGN_OR_RETURN(out.start, intern(a.start, b.start));
  for (size_t d = 0; d < pairs.size(); ++d) {
    const auto [x, y] = pairs[d];
    out.next.resize((d + 1) * static_cast<size_t>(out.classes), -1);
    for (int32_t k = 0; k < out.classes; ++k) {
      const int32_t nx = a.Next(x, k);
      const int32_t ny = y < 0 ? -1 : b.Next(y, k);
      if (nx < 0 || (ny < 0 && !subtract)) continue;
      if (--budget->steps < 0) return TooMuchWork();
      ASSIGN_OR_RETURN(int32_t t, intern(nx, ny));
      out.next[d * static_cast<size_t>(out.classes) + static_cast<size_t>(k)] = t;
    }
  }
  return out;
}

}  // namespace

struct PatternCompiler::Piece {
  Ast main;
  std::vector<Ast> lookaheads;  // Right after the leading ^: the string must (not) start so.
  std::vector<bool> negative;
};

PatternCompiler::PatternCompiler(PatternBudget* budget) : budget_(budget) {}
PatternCompiler::~PatternCompiler() = default;

absl::Status PatternCompiler::Add(std::string_view pattern) {
  std::u32string source;
  for (size_t i = 0; i < pattern.size();) {
    int len = 1;
    source.push_back(unicode::DecodeUtf8(pattern, i, &len));
    i += static_cast<size_t>(len);
  }
  ASSIGN_OR_RETURN(Ast ast, RegexParser(std::move(source)).Parse());
  auto piece = std::make_unique<Piece>();
  if (ast.kind == Ast::Kind::kConcat && ast.kids[0].kind == Ast::Kind::kBol) {
    size_t i = 1;
    for (; i < ast.kids.size() && ast.kids[i].kind == Ast::Kind::kLookahead; ++i) {
      RETURN_IF_ERROR(NoLookahead(ast.kids[i].kids[0]));
      piece->lookaheads.push_back(std::move(ast.kids[i].kids[0]));
      piece->negative.push_back(ast.kids[i].negative);
    }
    ast.kids.erase(ast.kids.begin() + 1, ast.kids.begin() + static_cast<std::ptrdiff_t>(i));
  }
  RETURN_IF_ERROR(NoLookahead(ast));
  piece->main = std::move(ast);
  pieces_.push_back(std::move(piece));
  return absl::OkStatus();
}

absl::StatusOr<PatternAutomaton> PatternCompiler::Compile() {
  // Every NFA first, so that one partition of the code points serves all their DFAs.
  std::vector<Ranges> sets;
  std::vector<Nfa> nfas;
  std::vector<bool> subtract;  // Per NFA after the first: its DFA is subtracted, not intersected.
  for (const std::unique_ptr<Piece>& p : pieces_) {
    NfaBuilder main(&sets);
    ASSIGN_OR_RETURN(Nfa n, main.Build(p->main, /*search=*/true));
    nfas.push_back(std::move(n));
    subtract.push_back(false);
    for (size_t i = 0; i < p->lookaheads.size(); ++i) {
      NfaBuilder look(&sets);
      ASSIGN_OR_RETURN(Nfa l, look.Build(p->lookaheads[i], /*search=*/false));
      nfas.push_back(std::move(l));
      subtract.push_back(p->negative[i]);
    }
  }
  ASSIGN_OR_RETURN(Classes cls, Partition(sets));
  Dfa dfa;
  for (size_t i = 0; i < nfas.size(); ++i) {
    ASSIGN_OR_RETURN(Dfa d, Determinize(nfas[i], cls, budget_));
    if (i == 0) {
      dfa = std::move(d);
    } else {
      ASSIGN_OR_RETURN(dfa, Product(dfa, d, subtract[i], budget_));
    }
  }

  // Live states: those from which an accepting one is reachable.
  const int32_t n = dfa.size();
  const int32_t kc = dfa.classes;
  std::vector<std::vector<int32_t>> preds(static_cast<size_t>(n));
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t k = 0; k < kc; ++k) {
      if (dfa.Next(s, k) >= 0) preds[static_cast<size_t>(dfa.Next(s, k))].push_back(s);
    }
  }
  std::vector<uint8_t> live(static_cast<size_t>(n), 0);
  std::vector<int32_t> work;
  for (int32_t s = 0; s < n; ++s) {
    if (dfa.accepting[static_cast<size_t>(s)] != 0) {
      live[static_cast<size_t>(s)] = 1;
      work.push_back(s);
    }
  }
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    for (int32_t p : preds[static_cast<size_t>(s)]) {
      if (live[static_cast<size_t>(p)] == 0) {
        live[static_cast<size_t>(p)] = 1;
        work.push_back(p);
      }
    }
  }
  auto target = [&](int32_t s, int32_t k) {
    const int32_t t = dfa.Next(s, k);
    return t >= 0 && live[static_cast<size_t>(t)] != 0 ? t : -1;
  };

  // Universal states (every string accepted from them): accepting, every scalar value leading
  // to another such state. The greatest such set, by removing states that lead outside it.
  std::vector<uint8_t> universal(static_cast<size_t>(n), 0);
  for (int32_t s = 0; s < n; ++s) {
    bool all = dfa.accepting[static_cast<size_t>(s)] != 0;
    for (int32_t k = 0; k < kc && all; ++k) all = cls.surrogate(k) || target(s, k) >= 0;
    universal[static_cast<size_t>(s)] = all ? 1 : 0;
  }
  for (int32_t s = 0; s < n; ++s) {
    if (universal[static_cast<size_t>(s)] != 0) work.push_back(s);
  }
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    if (universal[static_cast<size_t>(s)] == 0) continue;
    bool inside = true;
    for (int32_t k = 0; k < kc && inside; ++k) {
      inside = cls.surrogate(k) || universal[static_cast<size_t>(target(s, k))] != 0;
    }
    if (inside) continue;
    universal[static_cast<size_t>(s)] = 0;
    for (int32_t p : preds[static_cast<size_t>(s)]) {
      if (universal[static_cast<size_t>(p)] != 0) work.push_back(p);
    }
  }
  int32_t rep = -1;  // The one universal state kept.
  for (int32_t s = 0; s < n && rep < 0; ++s) {
    if (universal[static_cast<size_t>(s)] != 0) rep = s;
  }
  auto canonical = [&](int32_t s) {
    return s >= 0 && universal[static_cast<size_t>(s)] != 0 ? rep : s;
  };

  // Renumber the live states reachable from the start, breadth first.
  PatternAutomaton a;
  if (live[static_cast<size_t>(dfa.start)] == 0) return a;  // start_ -1: nothing matches.
  std::vector<int32_t> id(static_cast<size_t>(n), -1);
  std::vector<int32_t> order{canonical(dfa.start)};
  id[static_cast<size_t>(order[0])] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t s = order[i];
    for (int32_t k = 0; k < kc; ++k) {
      const int32_t t = canonical(target(s, k));
      if (t < 0 || cls.surrogate(k) || id[static_cast<size_t>(t)] >= 0) continue;
      id[static_cast<size_t>(t)] = static_cast<int32_t>(order.size());
      order.push_back(t);
    }
  }
  for (const int32_t s : order) {
    const bool uni = s == rep;
    a.flags_.push_back(static_cast<uint8_t>(
        (dfa.accepting[static_cast<size_t>(s)] != 0 ? PatternAutomaton::kAccepting : 0) |
        (uni ? PatternAutomaton::kUniversal : 0)));
    for (int32_t k = 0; k < kc; ++k) {
      const int32_t t = canonical(target(s, k));
      if (t < 0 || cls.surrogate(k)) continue;
      const int32_t to = id[static_cast<size_t>(t)];
      const uint32_t lo = cls.starts[static_cast<size_t>(k)];
      const uint32_t hi = cls.starts[static_cast<size_t>(k) + 1] - 1;
      if (a.edges_.size() > static_cast<size_t>(a.first_edge_.back()) && a.edges_.back().to == to &&
          a.edges_.back().hi + 1 == lo) {
        a.edges_.back().hi = hi;
      } else {
        a.edges_.push_back({lo, hi, to});
      }
    }
    a.first_edge_.push_back(static_cast<int32_t>(a.edges_.size()));
  }

  a.start_ = 0;
  a.ExtendLengthTable(0);
  return a;
}

void PatternAutomaton::ExtendLengthTable(int32_t min_length) {
  // Column 0 by a breadth-first search back from the accepting states; column j from column
  // j - 1 (a path of at least j code points is one step, then at least j - 1).
  const int32_t m = state_count();
  const int32_t cols = min_length + 1;
  if (cols <= columns_) return;
  columns_ = cols;
  shortest_.assign(static_cast<size_t>(m) * static_cast<size_t>(cols), kNever);
  auto at = [&](int32_t s, int32_t j) -> int32_t& {
    return shortest_[static_cast<size_t>(s) * static_cast<size_t>(cols) + static_cast<size_t>(j)];
  };
  std::vector<std::vector<int32_t>> back(static_cast<size_t>(m));
  for (int32_t s = 0; s < m; ++s) {
    for (const Edge& e : edges(s)) back[static_cast<size_t>(e.to)].push_back(s);
  }
  std::vector<int32_t> queue;
  for (int32_t s = 0; s < m; ++s) {
    if (accepting(s)) {
      at(s, 0) = 0;
      queue.push_back(s);
    }
  }
  for (size_t i = 0; i < queue.size(); ++i) {
    const int32_t s = queue[i];
    for (int32_t p : back[static_cast<size_t>(s)]) {
      if (at(p, 0) == kNever) {
        at(p, 0) = at(s, 0) + 1;
        queue.push_back(p);
      }
    }
  }
  for (int32_t j = 1; j < cols; ++j) {
    for (int32_t s = 0; s < m; ++s) {
      int32_t best = kNever;
      for (const Edge& e : edges(s)) best = std::min(best, at(e.to, j - 1));
      at(s, j) = best >= kNever ? kNever : best + 1;
    }
  }
}

int32_t PatternAutomaton::Next(int32_t s, uint32_t cp) const {
  for (const Edge& e : edges(s)) {
    if (cp < e.lo) return -1;
    if (cp <= e.hi) return e.to;
  }
  return -1;
}

bool PatternAutomaton::Viable(int32_t s, int32_t count, int32_t min_length,
                              int32_t max_length) const {
  const int32_t need = std::max(0, min_length - count);
  const int32_t len =
      shortest_[static_cast<size_t>(s) * static_cast<size_t>(columns_) + static_cast<size_t>(need)];
  return len < kNever && (max_length < 0 || count + len <= max_length);
}

bool PatternAutomaton::AnyViable(int32_t s, uint32_t lo, uint32_t hi, int32_t count,
                                 int32_t min_length, int32_t max_length) const {
  for (const Edge& e : edges(s)) {
    if (e.hi < lo) continue;
    if (e.lo > hi) break;
    if (Viable(e.to, count, min_length, max_length)) return true;
  }
  return false;
}

bool PatternAutomaton::Matches(std::string_view utf8) const {
  if (start_ < 0) return false;
  int32_t s = start_;
  for (size_t i = 0; i < utf8.size();) {
    int len = 1;
    s = Next(s, unicode::DecodeUtf8(utf8, i, &len));
    if (s < 0) return false;
    i += static_cast<size_t>(len);
  }
  return accepting(s);
}

// The formats, written as patterns. RFC 3339 (date-time, date, time, duration: its Appendix A),
// RFC 1123 and RFC 5890 (hostname), RFC 5321 (email, a subset), RFC 2673 / RFC 4291 in
// RFC 3986's ABNF (ipv4, ipv6), RFC 4122 (uuid, pydantic's uuid1 to uuid8), RFC 6901
// (json-pointer).
// Years divisible by 4 and not 100, or by 400 (0000 included).
#define CAIRN_LEAP_YEAR \
  "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
#define CAIRN_DATE                                                                            \
  "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]" \
  "[0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|" CAIRN_LEAP_YEAR "-02-29)"
#define CAIRN_OFFSET "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
// A leap second only where it is 23:59:60 in UTC without converting (see the README).
#define CAIRN_TIME                                                           \
  "(?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?" CAIRN_OFFSET \
  "|23:59:60(?:\\.[0-9]+)?(?:[Zz]|[+-]00:00))"
#define CAIRN_DUR_TIME "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
#define CAIRN_DUR_DATE "(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
// A DNS label of 1 to 63 letters, digits and hyphens, neither first nor last a hyphen, and not
// "--" in its third and fourth places (RFC 5891 keeps those for A-labels, "xn--", whose
// Punycode a pattern cannot check).
#define CAIRN_LABEL                                                                    \
  "(?:[A-Za-z0-9](?:[A-Za-z0-9-]?[A-Za-z0-9])?|[A-Za-z0-9][A-Za-z0-9-]{2}[A-Za-z0-9]|" \
  "[A-Za-z0-9][A-Za-z0-9-](?:[A-Za-z0-9][A-Za-z0-9-]|-[A-Za-z0-9])[A-Za-z0-9-]{0,58}"  \
  "[A-Za-z0-9])"
#define CAIRN_ATEXT "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
#define CAIRN_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define CAIRN_IPV4 "(?:" CAIRN_OCTET "\\.){3}" CAIRN_OCTET
#define CAIRN_H16 "[0-9A-Fa-f]{1,4}"
#define CAIRN_LS32 "(?:" CAIRN_H16 ":" CAIRN_H16 "|" CAIRN_IPV4 ")"
#define CAIRN_H16S(n) "(?:(?:" CAIRN_H16 ":){0," #n "}" CAIRN_H16 ")?::"
#define CAIRN_REFERENCE "(?:/(?:[^~/]|~[01])*)*"
#define CAIRN_UUID(v) \
  "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-" v "[0-9A-Fa-f]{3}-[89ABab][0-9A-Fa-f]{3}-[0-9A-Fa-f]{12}$"

constexpr StringFormat kFormats[] = {
    {"date-time", "^" CAIRN_DATE "[Tt]" CAIRN_TIME "$"},
    {"date", "^" CAIRN_DATE "$"},
    {"time", "^" CAIRN_TIME "$"},
    {"duration", "^P(?:" CAIRN_DUR_DATE "(?:" CAIRN_DUR_TIME ")?|" CAIRN_DUR_TIME "|[0-9]+W)$"},
    // RFC 5321's limits: 64 octets before the @, 254 in all (a path holds 256 with its <>).
    {"email",
     "^(?=[^@]{1,64}@)" CAIRN_ATEXT "+(?:\\." CAIRN_ATEXT "+)*@(?:" CAIRN_LABEL
     "\\.)+[A-Za-z]{2,63}$",
     254},
    {"hostname", "^" CAIRN_LABEL "(?:\\." CAIRN_LABEL ")*$", 253},
    {"ipv4", "^" CAIRN_IPV4 "$"},
    {"ipv6", "^(?:(?:" CAIRN_H16 ":){6}" CAIRN_LS32 "|::(?:" CAIRN_H16 ":){5}" CAIRN_LS32
             "|(?:" CAIRN_H16 ")?::(?:" CAIRN_H16 ":){4}" CAIRN_LS32
             "|" CAIRN_H16S(1) "(?:" CAIRN_H16 ":){3}" CAIRN_LS32 "|" CAIRN_H16S(
                 2) "(?:" CAIRN_H16 ":){2}" CAIRN_LS32 "|" CAIRN_H16S(3) CAIRN_H16
     ":" CAIRN_LS32 "|" CAIRN_H16S(4) CAIRN_LS32 "|" CAIRN_H16S(5) CAIRN_H16
     "|" CAIRN_H16S(6) ")$"},
    {"uuid", "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"},
    // pydantic's UUID1 to UUID8: the version digit, and RFC 4122's variant (10xx), without
    // which Python's uuid.UUID has no version.
    {"uuid1", CAIRN_UUID("1")},
    {"uuid2", CAIRN_UUID("2")},
    {"uuid3", CAIRN_UUID("3")},
    {"uuid4", CAIRN_UUID("4")},
    {"uuid5", CAIRN_UUID("5")},
    {"uuid6", CAIRN_UUID("6")},
    {"uuid7", CAIRN_UUID("7")},
    {"uuid8", CAIRN_UUID("8")},
    {"json-pointer", "^" CAIRN_REFERENCE "$"},
    {"relative-json-pointer", "^(?:0|[1-9][0-9]*)(?:#|" CAIRN_REFERENCE ")$"},
};

#undef CAIRN_LEAP_YEAR
#undef CAIRN_DATE
#undef CAIRN_OFFSET
#undef CAIRN_TIME
#undef CAIRN_DUR_TIME
#undef CAIRN_DUR_DATE
#undef CAIRN_LABEL
#undef CAIRN_ATEXT
#undef CAIRN_OCTET
#undef CAIRN_IPV4
#undef CAIRN_H16
#undef CAIRN_LS32
#undef CAIRN_H16S
#undef CAIRN_REFERENCE
#undef CAIRN_UUID

const StringFormat* FindStringFormat(std::string_view name) {
  for (const StringFormat& f : kFormats) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace cairn::infer::text::json
