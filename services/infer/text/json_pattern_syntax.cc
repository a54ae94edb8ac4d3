#include "services/infer/text/json_pattern_syntax.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text::json::pattern_syntax {
namespace {

constexpr uint32_t kNoChar = 0xFFFFFFFF;

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

}  // namespace

Ranges Scalars(const Ranges& r) {
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (lo < kSurrogateFirst) out.push_back({lo, std::min(hi, kSurrogateFirst - 1)});
    if (hi > kSurrogateLast) out.push_back({std::max(lo, kSurrogateLast + 1), hi});
  }
  return out;
}

absl::StatusOr<Ast> ParsePattern(std::u32string source) {
  return RegexParser(std::move(source)).Parse();
}

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

}  // namespace cairn::infer::text::json::pattern_syntax
