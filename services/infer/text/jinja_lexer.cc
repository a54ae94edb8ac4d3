#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/infer/text/jinja_syntax.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text::jinja::internal {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  Lexer(std::string_view source, const TemplateOptions& options) : src_(source), options_(options) {
    // Jinja2's default keep_trailing_newline=False drops one trailing newline.
    if (!src_.empty() && src_.back() == '\n') {
      src_.remove_suffix(1);
      if (!src_.empty() && src_.back() == '\r') src_.remove_suffix(1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    std::string pending_text;
    bool strip_next = false;  // A `-` on the previous tag's end.
    while (pos_ < src_.size()) {
      const size_t tag = FindTag(pos_);
      std::string text(src_.substr(pos_, tag - pos_));
      const size_t text_start = pos_;
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && IsAsciiSpace(text[k])) ++k;
        text.erase(0, k);
      }
      strip_next = false;
      if (tag == src_.size()) {
        EmitText(text, text_start);
        pos_ = tag;
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'.
      const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && IsAsciiSpace(text.back())) text.pop_back();
      } else if (modifier != '+' && options_.lstrip_blocks && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
        const bool at_line_start =
            nl != std::string::npos || text_start == 0 || src_[text_start - 1] == '\n';
        if (at_line_start && text.find_first_not_of(" \t", line_start) == std::string::npos) {
          text.erase(line_start);
        }
      }
      EmitText(text, text_start);
      line_ += CountNewlines(src_.substr(text_start, tag - text_start));
      pos_ = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      bool trim_end = false;
      bool plus_end = false;
      if (kind == '#') {
        const size_t end = src_.find("#}", pos_);
        if (end == std::string::npos) return Error("unterminated comment");
        trim_end = end > pos_ && src_[end - 1] == '-';
        plus_end = end > pos_ && src_[end - 1] == '+';
        line_ += CountNewlines(src_.substr(pos_, end - pos_));
        pos_ = end + 2;
      } else {
        tokens_.push_back(
            {kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", line_});
        ASSIGN_OR_RETURN(auto end, LexTag(kind == '{' ? '}' : '%'));
        trim_end = end.first;
        plus_end = end.second;
        if (kind == '%' && IsRawBlock()) {
          return Error("{% raw %} blocks are not supported");
        }
      }
      if (trim_end) {
        strip_next = true;
      } else if (!plus_end && options_.trim_blocks && kind != '{' && pos_ < src_.size()) {
        if (src_[pos_] == '\n') {
          ++pos_;
          ++line_;
        } else if (src_[pos_] == '\r' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '\n') {
          pos_ += 2;
          ++line_;
        }
      }
    }
    tokens_.push_back({Token::Type::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  absl::Status Error(std::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat("template line ", line_, ": ", Av(msg)));
  }

  static int CountNewlines(std::string_view s) {
    return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
  }

  size_t FindTag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  // Jinja2 normalises template newlines to "\n".
  void EmitText(const std::string& text, size_t /*start*/) {
    if (text.empty()) return;
    std::string norm;
    norm.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\r') {
        norm.push_back('\n');
        if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
      } else {
        norm.push_back(text[i]);
      }
    }
    tokens_.push_back({Token::Type::kText, std::move(norm), line_});
  }

  bool IsRawBlock() const {
    // The tokens since the last kBlockBegin are [name "raw", kBlockEnd].
    const size_t n = tokens_.size();
    return n >= 3 && tokens_[n - 1].type == Token::Type::kBlockEnd &&
           tokens_[n - 2].type == Token::Type::kName && tokens_[n - 2].value == "raw" &&
           tokens_[n - 3].type == Token::Type::kBlockBegin;
  }

  // Lexes expression tokens up to the closing `close`} (with optional -/+). Returns
  // (closing had '-', closing had '+').
  absl::StatusOr<std::pair<bool, bool>> LexTag(char close) {
    const Token::Type end_type = close == '}' ? Token::Type::kVarEnd : Token::Type::kBlockEnd;
    while (true) {
      while (pos_ < src_.size() && IsAsciiSpace(src_[pos_])) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) return Error("unterminated tag");
      const char c = src_[pos_];
      auto closes_at = [&](size_t p) {
        return p + 1 < src_.size() && src_[p] == close && src_[p + 1] == '}';
      };
      if (closes_at(pos_)) {
        pos_ += 2;
        tokens_.push_back({end_type, "", line_});
        return std::make_pair(false, false);
      }
      if ((c == '-' || c == '+') && closes_at(pos_ + 1)) {
        pos_ += 3;
        tokens_.push_back({end_type, "", line_});
        return std::make_pair(c == '-', c == '+');
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) {
          ++e;
        }
        tokens_.push_back({Token::Type::kName, std::string(src_.substr(pos_, e - pos_)), line_});
        pos_ = e;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = pos_;
        bool is_float = false;
        while (e < src_.size() &&
               (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) {
          ++e;
        }
        if (e + 1 < src_.size() && src_[e] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
          is_float = true;
          ++e;
          while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
        }
        if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
          size_t f = e + 1;
          if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
          if (f < src_.size() && std::isdigit(static_cast<unsigned char>(src_[f]))) {
            is_float = true;
            e = f;
            while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
          }
        }
        std::string num(src_.substr(pos_, e - pos_));
        num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
        tokens_.push_back({is_float ? Token::Type::kFloat : Token::Type::kInt, num, line_});
        pos_ = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        ASSIGN_OR_RETURN(std::string s, LexString(c));
        tokens_.push_back({Token::Type::kString, std::move(s), line_});
        continue;
      }
      static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                         "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                                         "{",  "}",  ".",  ",",  ":",  "|",  "="};
      bool matched = false;
      for (const char* op : kOps) {
        const size_t len = std::char_traits<char>::length(op);
        if (src_.substr(pos_, len) == op) {
          tokens_.push_back({Token::Type::kOp, op, line_});
          pos_ += len;
          matched = true;
          break;
        }
      }
      if (!matched) return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
  }

  absl::StatusOr<std::string> LexString(char quote) {
    std::string out;
    size_t p = pos_ + 1;
    while (p < src_.size() && src_[p] != quote) {
      char c = src_[p];
      if (c == '\n') ++line_;
      if (c != '\\') {
        out.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) break;
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case '0':
          out.push_back('\0');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case '\n':
          ++line_;
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (p + n > src_.size()) return Error("truncated escape in string literal");
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = src_[p + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) {
              return Error("bad escape in string literal");
            }
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                     ? h - '0'
                                                     : (std::tolower(h) - 'a' + 10));
          }
          p += n;
          unicode::AppendUtf8(cp, &out);
          break;
        }
        default:
          // Python keeps unknown escapes verbatim.
          out.push_back('\\');
          out.push_back(e);
      }
    }
    if (p >= src_.size()) return Error("unterminated string literal");
    pos_ = p + 1;
    return out;
  }

  std::string_view src_;
  const TemplateOptions& options_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const TemplateOptions& options) {
  Lexer lexer(source, options);
  return lexer.Run();
}

}  // namespace cairn::infer::text::jinja::internal
