#include "services/infer/text/pre_tokenizer.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text {
namespace {

constexpr std::string_view kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen35Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// A decoded code point of the input with its byte offset.
struct Cp {
  uint32_t cp;
  uint8_t cls;
  uint32_t len;
};

class Matcher {
 public:
  Matcher(PreTokenizerPattern pattern, std::string_view text) : text_(text) {
    letter_run_ = pattern == PreTokenizerPattern::kQwen35 ? (unicode::kLetter | unicode::kMark)
                                                          : unicode::kLetter;
  }

  // Returns the byte length of the match at `pos` (> 0).
  size_t MatchAt(size_t pos) const {
    const Cp c0 = At(pos);
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c0.cp == '\'' && pos + 1 < text_.size()) {
      size_t n = Contraction(pos + 1);
      if (n > 0) return 1 + n;
    }
    // [^\r\n\p{L}\p{N}]?RUN+ where RUN is \p{L} (or [\p{L}\p{M}]).
    if (c0.cls & letter_run_) return pos + c0.len + RunLength(pos + c0.len, letter_run_) - pos;
    if (!IsNewline(c0.cp) && !(c0.cls & (unicode::kLetter | unicode::kNumber)) &&
        pos + c0.len < text_.size()) {
      const Cp c1 = At(pos + c0.len);
      if (c1.cls & letter_run_) {
        size_t start = pos + c0.len;
        return c0.len + c1.len + RunLength(start + c1.len, letter_run_);
      }
    }
    // \p{N}
    if (c0.cls & unicode::kNumber) return c0.len;
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    {
      size_t p = pos;
      if (c0.cp == ' ' && pos + 1 < text_.size()) ++p;
      size_t punct = PunctRun(p);
      if (punct > 0) {
        size_t end = p + punct;
        while (end < text_.size() && IsNewline(static_cast<unsigned char>(text_[end]))) ++end;
        return end - pos;
      }
    }
    // The remaining alternatives start with whitespace.
    if (c0.cls & unicode::kSpace) {
      // Whitespace run [pos, ws_end) and the end of its last newline.
      size_t ws_end = pos;
      size_t last_newline_end = 0;
      size_t last_start = pos;
      while (ws_end < text_.size()) {
        const Cp c = At(ws_end);
        if (!(c.cls & unicode::kSpace)) break;
        last_start = ws_end;
        ws_end += c.len;
        if (IsNewline(c.cp)) last_newline_end = ws_end;
      }
      // \s*[\r\n]+
      if (last_newline_end > 0) return last_newline_end - pos;
      // \s+(?!\S): the whole run at the end of the text, else all but its last character.
      if (ws_end == text_.size()) return ws_end - pos;
      if (last_start > pos) return last_start - pos;
      // \s+
      return ws_end - pos;
    }
    // Not reachable for valid input: every code point is a letter, number, space or in the
    // punctuation class. Consume one code point so that the split always advances.
    return c0.len;
  }

 private:
  Cp At(size_t pos) const {
    const auto b = static_cast<unsigned char>(text_[pos]);
    if (b < 0x80) return Cp{b, unicode::ClassOf(b), 1};
    int len = 1;
    uint32_t cp = unicode::DecodeUtf8(text_, pos, &len);
    return Cp{cp, unicode::ClassOf(cp), static_cast<uint32_t>(len)};
  }

  static bool IsNewline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

  // Length in bytes of the run of code points at `pos` whose class intersects `mask`.
  size_t RunLength(size_t pos, uint8_t mask) const {
    size_t p = pos;
    while (p < text_.size()) {
      const Cp c = At(p);
      if (!(c.cls & mask)) break;
      p += c.len;
    }
    return p - pos;
  }

  // Length of the run of [^\s\p{L}\p{N}] (and not \p{M} for Qwen3.5) at `pos`.
  size_t PunctRun(size_t pos) const {
    const uint8_t excluded = unicode::kSpace | unicode::kLetter | unicode::kNumber |
                             (letter_run_ & unicode::kMark);
    size_t p = pos;
    while (p < text_.size()) {
      const Cp c = At(p);
      if (c.cls & excluded) break;
      p += c.len;
    }
    return p - pos;
  }

  // Matches s|t|re|ve|m|ll|d case-insensitively at `pos`; returns the byte length or 0.
  size_t Contraction(size_t pos) const {
    auto lower = [&](size_t p) -> int {
      if (p >= text_.size()) return 0;
      const auto b = static_cast<unsigned char>(text_[p]);
      if (b >= 'A' && b <= 'Z') return b + ('a' - 'A');
      return b;
    };
    const int a = lower(pos);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1;
    // U+017F LATIN SMALL LETTER LONG S case-folds to 's'.
    if (a == 0xC5 && pos + 1 < text_.size() && static_cast<unsigned char>(text_[pos + 1]) == 0xBF) {
      return 2;
    }
    const int b = lower(pos + 1);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 2;
    return 0;
  }

  std::string_view text_;
  uint8_t letter_run_;
};

}  // namespace

absl::StatusOr<PreTokenizerPattern> PreTokenizerPatternFromRegex(std::string_view regex) {
  if (regex == kQwen2Regex) return PreTokenizerPattern::kQwen2;
  if (regex == kQwen35Regex) return PreTokenizerPattern::kQwen35;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported pre-tokenizer regex ", Av(regex),
                   " (supported: the Qwen2/Qwen3 and Qwen3.5 patterns)"));
}

void SplitPreTokens(PreTokenizerPattern pattern, std::string_view text,
                    std::vector<std::string_view>* pieces) {
  Matcher matcher(pattern, text);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t n = matcher.MatchAt(pos);
    pieces->push_back(text.substr(pos, n));
    pos += n;
  }
}

}  // namespace cairn::infer::text
