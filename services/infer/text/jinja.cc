#include "services/infer/text/jinja.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "services/infer/text/unicode.h"

namespace cairn::infer::text::jinja {

// ---------------------------------------------------------------------------------------------
// Syntax tree.

struct Node {
  enum class Kind {
    // Expressions.
    kLiteral, kName, kAttr, kItem, kSlice, kCall, kFilter, kTest, kNeg, kPos, kNot, kBinary,
    kAnd, kOr, kCond, kList, kTuple, kDict,
    // Statements.
    kBlock, kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue,
  };
  Kind kind;
  int line = 0;
  std::string name;                          // Identifier, operator, filter/test/attr name, text.
  Value literal;                             // kLiteral.
  std::vector<std::unique_ptr<Node>> kids;   // Operands, arguments, bodies (may hold nullptr).
  std::vector<std::string> names;            // Keyword names of arguments, targets, parameters.
  bool flag = false;                         // kTest: negated; kIf: has else.
};

using NodePtr = std::unique_ptr<Node>;

namespace {

NodePtr MakeNode(Node::Kind kind, int line) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->line = line;
  return n;
}

const std::set<std::string>& KnownFilters() {
  static const auto* filters = new std::set<std::string>{
      "abs", "capitalize", "count", "d", "default", "dictsort", "first", "float", "int", "items",
      "join", "last", "length", "list", "lower", "map", "reject", "rejectattr", "replace",
      "reverse", "safe", "select", "selectattr", "sort", "string", "title", "tojson", "trim",
      "unique", "upper", "e", "escape"};
  return *filters;
}

const std::set<std::string>& KnownTests() {
  static const auto* tests = new std::set<std::string>{
      "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even", "false", "float",
      "ge", "gt", "in", "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none",
      "number", "odd", "sameas", "sequence", "string", "true", "undefined", "upper", "=="};
  return *tests;
}

// Functions the renderer provides (Renderer::AddGlobals).
const std::set<std::string>& KnownGlobals() {
  static const auto* globals =
      new std::set<std::string>{"raise_exception", "namespace", "range", "dict", "strftime_now"};
  return *globals;
}

// Methods callable on values: str (Renderer::StringMethod), dict (Renderer::DictMethod) and
// loop.cycle. `format` is listed so that its use gets a precise error at render.
const std::set<std::string>& KnownMethods() {
  static const auto* methods = new std::set<std::string>{
      "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "upper",
      "lower", "replace", "title", "capitalize", "find", "count", "splitlines", "join",
      "items", "keys", "values", "get", "cycle", "format"};
  return *methods;
}

// ---------------------------------------------------------------------------------------------
// Lexer.

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt,
                    kFloat, kOp, kEof };
  Type type;
  std::string value;
  int line;
};

bool IsPySpace(uint32_t cp) {
  return (unicode::ClassOf(cp) & unicode::kSpace) != 0 || (cp >= 0x1C && cp <= 0x1F);
}

bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  Lexer(std::string_view source, const TemplateOptions& options)
      : src_(source), options_(options) {
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
        tokens_.push_back({kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "",
                           line_});
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
        while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) ||
                                   src_[e] == '_')) {
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
      static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/",
                                         "%", "~", "<", ">", "(", ")", "[", "]", "{", "}", ".",
                                         ",", ":", "|", "="};
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
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case '0': out.push_back('\0'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case 'a': out.push_back('\a'); break;
        case '\n': ++line_; break;
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

// ---------------------------------------------------------------------------------------------
// Parser.

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  absl::StatusOr<NodePtr> ParseTemplate() {
    std::string end_tag;
    ASSIGN_OR_RETURN(NodePtr body, ParseBody({}, &end_tag));
    if (!end_tag.empty()) return Error(absl::StrCat("unexpected {% ", end_tag, " %}"));
    // Calls are resolved now so that a template using a function we lack fails at load.
    for (const auto& [name, line] : called_functions_) {
      if (KnownGlobals().count(name) == 0 && macros_.count(name) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("template line ", line, ": unsupported function '", name, "'"));
      }
    }
    return body;
  }

 private:
  const Token& Peek(size_t k = 0) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  const Token& Next() { return toks_[std::min(i_++, toks_.size() - 1)]; }
  bool IsOp(std::string_view op, size_t k = 0) const {
    return Peek(k).type == Token::Type::kOp && Peek(k).value == op;
  }
  bool IsName(std::string_view name, size_t k = 0) const {
    return Peek(k).type == Token::Type::kName && Peek(k).value == name;
  }
  absl::Status Error(std::string_view msg) const {
    return absl::InvalidArgumentError(
        absl::StrCat("template line ", Peek().line, ": ", Av(msg)));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!IsOp(op)) return Error(absl::StrCat("expected '", Av(op), "', got '", Peek().value, "'"));
    ++i_;
    return absl::OkStatus();
  }
  absl::Status ExpectName(std::string_view name) {
    if (!IsName(name)) {
      return Error(absl::StrCat("expected '", Av(name), "', got '", Peek().value, "'"));
    }
    ++i_;
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Peek().type != Token::Type::kBlockEnd) {
      return Error(absl::StrCat("expected end of statement, got '", Peek().value, "'"));
    }
    ++i_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectIdentifier() {
    if (Peek().type != Token::Type::kName) {
      return Error(absl::StrCat("expected a name, got '", Peek().value, "'"));
    }
    return Next().value;
  }

  // Parses statements until one of `end_tags` starts a block (left unconsumed apart from the
  // tag name, stored in *end_tag) or the input ends.
  absl::StatusOr<NodePtr> ParseBody(const std::vector<std::string>& end_tags,
                                    std::string* end_tag) {
    NodePtr block = MakeNode(Node::Kind::kBlock, Peek().line);
    end_tag->clear();
    while (Peek().type != Token::Type::kEof) {
      const Token& t = Peek();
      if (t.type == Token::Type::kText) {
        NodePtr n = MakeNode(Node::Kind::kText, t.line);
        n->name = t.value;
        block->kids.push_back(std::move(n));
        ++i_;
      } else if (t.type == Token::Type::kVarBegin) {
        ++i_;
        NodePtr n = MakeNode(Node::Kind::kOutput, t.line);
        ASSIGN_OR_RETURN(NodePtr e, ParseTupleOrExpression());
        n->kids.push_back(std::move(e));
        if (Peek().type != Token::Type::kVarEnd) {
          return Error(absl::StrCat("expected '}}', got '", Peek().value, "'"));
        }
        ++i_;
        block->kids.push_back(std::move(n));
      } else if (t.type == Token::Type::kBlockBegin) {
        const Token& kw = Peek(1);
        if (kw.type != Token::Type::kName) return Error("expected a statement name after {%");
        if (std::find(end_tags.begin(), end_tags.end(), kw.value) != end_tags.end()) {
          *end_tag = kw.value;
          i_ += 2;
          return block;
        }
        i_ += 2;
        ASSIGN_OR_RETURN(NodePtr s, ParseStatement(kw.value, kw.line));
        block->kids.push_back(std::move(s));
      } else {
        return Error(absl::StrCat("unexpected '", t.value, "'"));
      }
    }
    if (!end_tags.empty()) {
      return Error(absl::StrCat("missing {% ", end_tags.back(), " %}"));
    }
    return block;
  }

  absl::StatusOr<NodePtr> ParseStatement(const std::string& kw, int line) {
    std::string end_tag;
    if (kw == "if") {
      NodePtr n = MakeNode(Node::Kind::kIf, line);
      while (true) {
        ASSIGN_OR_RETURN(NodePtr cond, ParseExpression());
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(NodePtr body, ParseBody({"elif", "else", "endif"}, &end_tag));
        n->kids.push_back(std::move(cond));
        n->kids.push_back(std::move(body));
        if (end_tag == "elif") continue;
        break;
      }
      if (end_tag == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endif"}, &end_tag));
        n->kids.push_back(std::move(body));
        n->flag = true;
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    }
    if (kw == "for") {
      NodePtr n = MakeNode(Node::Kind::kFor, line);
      do {
        ASSIGN_OR_RETURN(std::string target, ExpectIdentifier());
        n->names.push_back(std::move(target));
      } while (IsOp(",") && (++i_, true));
      RETURN_IF_ERROR(ExpectName("in"));
      ASSIGN_OR_RETURN(NodePtr iter, ParseOr(/*allow_cond=*/false));
      NodePtr filter;
      if (IsName("if")) {
        ++i_;
        ASSIGN_OR_RETURN(filter, ParseExpression());
      }
      if (IsName("recursive")) return Error("recursive for loops are not supported");
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(NodePtr body, ParseBody({"else", "endfor"}, &end_tag));
      NodePtr else_body;
      if (end_tag == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(else_body, ParseBody({"endfor"}, &end_tag));
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      n->kids.push_back(std::move(iter));
      n->kids.push_back(std::move(body));
      n->kids.push_back(std::move(else_body));
      n->kids.push_back(std::move(filter));
      return n;
    }
    if (kw == "set") {
      ASSIGN_OR_RETURN(std::string target, ExpectIdentifier());
      std::vector<std::string> names = {target};
      if (IsOp(".")) {
        ++i_;
        ASSIGN_OR_RETURN(std::string attr, ExpectIdentifier());
        names.push_back(std::move(attr));
      } else if (IsOp(",")) {
        return Error("tuple assignment in set is not supported");
      }
      if (Peek().type == Token::Type::kBlockEnd && names.size() == 1) {
        ++i_;
        NodePtr n = MakeNode(Node::Kind::kSetBlock, line);
        n->names = std::move(names);
        ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endset"}, &end_tag));
        RETURN_IF_ERROR(ExpectBlockEnd());
        n->kids.push_back(std::move(body));
        return n;
      }
      RETURN_IF_ERROR(ExpectOp("="));
      NodePtr n = MakeNode(Node::Kind::kSet, line);
      n->names = std::move(names);
      ASSIGN_OR_RETURN(NodePtr value, ParseTupleOrExpression());
      n->kids.push_back(std::move(value));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return n;
    }
    if (kw == "macro") {
      NodePtr n = MakeNode(Node::Kind::kMacro, line);
      ASSIGN_OR_RETURN(n->name, ExpectIdentifier());
      macros_.insert(n->name);
      RETURN_IF_ERROR(ExpectOp("("));
      std::vector<NodePtr> defaults;
      while (!IsOp(")")) {
        ASSIGN_OR_RETURN(std::string param, ExpectIdentifier());
        n->names.push_back(std::move(param));
        NodePtr def;
        if (IsOp("=")) {
          ++i_;
          ASSIGN_OR_RETURN(def, ParseExpression());
        }
        defaults.push_back(std::move(def));
        if (!IsOp(",")) break;
        ++i_;
      }
      RETURN_IF_ERROR(ExpectOp(")"));
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endmacro"}, &end_tag));
      RETURN_IF_ERROR(ExpectBlockEnd());
      n->kids.push_back(std::move(body));
      for (auto& d : defaults) n->kids.push_back(std::move(d));
      return n;
    }
    if (kw == "break" || kw == "continue") {
      RETURN_IF_ERROR(ExpectBlockEnd());
      return MakeNode(kw == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line);
    }
    if (kw == "generation") {
      // transformers' AssistantTracker extension: marks assistant text; renders its body.
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(NodePtr body, ParseBody({"endgeneration"}, &end_tag));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return body;
    }
    return Error(absl::StrCat("unsupported statement {% ", kw, " %}"));
  }

  // expression (',' expression)* -> a tuple when there is a comma.
  absl::StatusOr<NodePtr> ParseTupleOrExpression() {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(NodePtr first, ParseExpression());
    if (!IsOp(",")) return first;
    NodePtr tuple = MakeNode(Node::Kind::kTuple, line);
    tuple->kids.push_back(std::move(first));
    while (IsOp(",")) {
      ++i_;
      if (Peek().type == Token::Type::kBlockEnd || Peek().type == Token::Type::kVarEnd) break;
      ASSIGN_OR_RETURN(NodePtr e, ParseExpression());
      tuple->kids.push_back(std::move(e));
    }
    return tuple;
  }

  absl::StatusOr<NodePtr> ParseExpression() { return ParseOr(/*allow_cond=*/true); }

  absl::StatusOr<NodePtr> ParseOr(bool allow_cond) {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(NodePtr left, ParseAnd());
    while (IsName("or")) {
      ++i_;
      ASSIGN_OR_RETURN(NodePtr right, ParseAnd());
      NodePtr n = MakeNode(Node::Kind::kOr, line);
      n->kids.push_back(std::move(left));
      n->kids.push_back(std::move(right));
      left = std::move(n);
    }
    if (allow_cond && IsName("if")) {
      ++i_;
      NodePtr n = MakeNode(Node::Kind::kCond, line);
      ASSIGN_OR_RETURN(NodePtr cond, ParseOr(/*allow_cond=*/false));
      NodePtr otherwise;
      if (IsName("else")) {
        ++i_;
        ASSIGN_OR_RETURN(otherwise, ParseExpression());
      }
      n->kids.push_back(std::move(left));
      n->kids.push_back(std::move(cond));
      n->kids.push_back(std::move(otherwise));
      return n;
    }
    return left;
  }

  absl::StatusOr<NodePtr> ParseAnd() {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(NodePtr left, ParseNot());
    while (IsName("and")) {
      ++i_;
      ASSIGN_OR_RETURN(NodePtr right, ParseNot());
      NodePtr n = MakeNode(Node::Kind::kAnd, line);
      n->kids.push_back(std::move(left));
      n->kids.push_back(std::move(right));
      left = std::move(n);
    }
    return left;
  }

  absl::StatusOr<NodePtr> ParseNot() {
    if (IsName("not")) {
      const int line = Next().line;
      ASSIGN_OR_RETURN(NodePtr operand, ParseNot());
      NodePtr n = MakeNode(Node::Kind::kNot, line);
      n->kids.push_back(std::move(operand));
      return n;
    }
    return ParseCompare();
  }

  absl::StatusOr<NodePtr> ParseCompare() {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(NodePtr left, ParseMath1());
    while (true) {
      std::string op;
      if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">=")) {
        op = Next().value;
      } else if (IsName("in")) {
        ++i_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        return left;
      }
      ASSIGN_OR_RETURN(NodePtr right, ParseMath1());
      NodePtr n = MakeNode(Node::Kind::kBinary, line);
      n->name = op;
      n->kids.push_back(std::move(left));
      n->kids.push_back(std::move(right));
      left = std::move(n);
    }
  }

  absl::StatusOr<NodePtr> Binary(NodePtr left, std::string op, NodePtr right, int line) {
    NodePtr n = MakeNode(Node::Kind::kBinary, line);
    n->name = std::move(op);
    n->kids.push_back(std::move(left));
    n->kids.push_back(std::move(right));
    return n;
  }

  absl::StatusOr<NodePtr> ParseMath1() {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(NodePtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      std::string op = Next().value;
      ASSIGN_OR_RETURN(NodePtr right, ParseConcat());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), op, std::move(right), line));
    }
    return left;
  }

  absl::StatusOr<NodePtr> ParseConcat() {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(NodePtr left, ParseMath2());
    while (IsOp("~")) {
      ++i_;
      ASSIGN_OR_RETURN(NodePtr right, ParseMath2());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), "~", std::move(right), line));
    }
    return left;
  }

  absl::StatusOr<NodePtr> ParseMath2() {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(NodePtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Next().value;
      ASSIGN_OR_RETURN(NodePtr right, ParsePow());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), op, std::move(right), line));
    }
    return left;
  }

  absl::StatusOr<NodePtr> ParsePow() {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(NodePtr left, ParseUnary(/*with_filter=*/true));
    while (IsOp("**")) {
      ++i_;
      ASSIGN_OR_RETURN(NodePtr right, ParseUnary(true));
      ASSIGN_OR_RETURN(left, Binary(std::move(left), "**", std::move(right), line));
    }
    return left;
  }

  absl::StatusOr<NodePtr> ParseUnary(bool with_filter) {
    const int line = Peek().line;
    NodePtr node;
    if (IsOp("-") || IsOp("+")) {
      const bool neg = Next().value == "-";
      ASSIGN_OR_RETURN(NodePtr operand, ParseUnary(false));
      node = MakeNode(neg ? Node::Kind::kNeg : Node::Kind::kPos, line);
      node->kids.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<NodePtr> ParsePrimary() {
    const Token& t = Peek();
    NodePtr n;
    switch (t.type) {
      case Token::Type::kName: {
        ++i_;
        if (t.value == "true" || t.value == "True") return Literal(Value::Bool(true), t.line);
        if (t.value == "false" || t.value == "False") return Literal(Value::Bool(false), t.line);
        if (t.value == "none" || t.value == "None") return Literal(Value::None(), t.line);
        n = MakeNode(Node::Kind::kName, t.line);
        n->name = t.value;
        return n;
      }
      case Token::Type::kString: {
        std::string s;
        while (Peek().type == Token::Type::kString) s += Next().value;  // Adjacent literals.
        return Literal(Value::String(std::move(s)), t.line);
      }
      case Token::Type::kInt: {
        ++i_;
        errno = 0;
        const long long v = std::strtoll(t.value.c_str(), nullptr, 10);
        if (errno == ERANGE) return Error("integer literal out of range");
        return Literal(Value::Int(v), t.line);
      }
      case Token::Type::kFloat:
        ++i_;
        return Literal(Value::Float(std::strtod(t.value.c_str(), nullptr)), t.line);
      case Token::Type::kOp:
        if (t.value == "(") {
          ++i_;
          if (IsOp(")")) {
            ++i_;
            return MakeNode(Node::Kind::kTuple, t.line);
          }
          ASSIGN_OR_RETURN(NodePtr first, ParseExpression());
          if (IsOp(")")) {
            ++i_;
            return first;
          }
          n = MakeNode(Node::Kind::kTuple, t.line);
          n->kids.push_back(std::move(first));
          while (IsOp(",")) {
            ++i_;
            if (IsOp(")")) break;
            ASSIGN_OR_RETURN(NodePtr e, ParseExpression());
            n->kids.push_back(std::move(e));
          }
          RETURN_IF_ERROR(ExpectOp(")"));
          return n;
        }
        if (t.value == "[") {
          ++i_;
          n = MakeNode(Node::Kind::kList, t.line);
          while (!IsOp("]")) {
            ASSIGN_OR_RETURN(NodePtr e, ParseExpression());
            n->kids.push_back(std::move(e));
            if (!IsOp(",")) break;
            ++i_;
          }
          RETURN_IF_ERROR(ExpectOp("]"));
          return n;
        }
        if (t.value == "{") {
          ++i_;
          n = MakeNode(Node::Kind::kDict, t.line);
          while (!IsOp("}")) {
            ASSIGN_OR_RETURN(NodePtr k, ParseExpression());
            RETURN_IF_ERROR(ExpectOp(":"));
            ASSIGN_OR_RETURN(NodePtr v, ParseExpression());
            n->kids.push_back(std::move(k));
            n->kids.push_back(std::move(v));
            if (!IsOp(",")) break;
            ++i_;
          }
          RETURN_IF_ERROR(ExpectOp("}"));
          return n;
        }
        break;
      default:
        break;
    }
    return Error(absl::StrCat("unexpected '", t.value, "' in expression"));
  }

  NodePtr Literal(Value v, int line) {
    NodePtr n = MakeNode(Node::Kind::kLiteral, line);
    n->literal = std::move(v);
    return n;
  }

  // Parses `(args)` into `call` (kids from index 1 on, names parallel).
  absl::Status ParseCallArgs(Node* call) {
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      std::string kw;
      if (Peek().type == Token::Type::kName && IsOp("=", 1)) {
        kw = Next().value;
        ++i_;
      }
      ASSIGN_OR_RETURN(NodePtr arg, ParseExpression());
      call->kids.push_back(std::move(arg));
      call->names.push_back(std::move(kw));
      if (!IsOp(",")) break;
      ++i_;
    }
    return ExpectOp(")");
  }

  absl::StatusOr<NodePtr> ParsePostfix(NodePtr node) {
    while (true) {
      const int line = Peek().line;
      if (IsOp(".")) {
        ++i_;
        NodePtr n = MakeNode(Node::Kind::kAttr, line);
        if (Peek().type == Token::Type::kInt) {
          n->kind = Node::Kind::kItem;
          n->kids.push_back(std::move(node));
          n->kids.push_back(Literal(Value::Int(std::strtoll(Next().value.c_str(), nullptr, 10)),
                                    line));
        } else {
          ASSIGN_OR_RETURN(n->name, ExpectIdentifier());
          n->kids.push_back(std::move(node));
        }
        node = std::move(n);
      } else if (IsOp("[")) {
        ++i_;
        NodePtr parts[3];
        bool is_slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!IsOp(":") && !IsOp("]")) {
            ASSIGN_OR_RETURN(parts[k], ParseExpression());
          }
          if (IsOp(":") && k < 2) {
            is_slice = true;
            ++i_;
            continue;
          }
          break;
        }
        RETURN_IF_ERROR(ExpectOp("]"));
        NodePtr n = MakeNode(is_slice ? Node::Kind::kSlice : Node::Kind::kItem, line);
        n->kids.push_back(std::move(node));
        if (is_slice) {
          for (auto& p : parts) n->kids.push_back(std::move(p));
        } else {
          if (!parts[0]) return Error("empty subscript");
          n->kids.push_back(std::move(parts[0]));
        }
        node = std::move(n);
      } else if (IsOp("(")) {
        if (node->kind == Node::Kind::kName) {
          called_functions_.emplace_back(node->name, line);
        } else if (node->kind == Node::Kind::kAttr && KnownMethods().count(node->name) == 0) {
          return Error(absl::StrCat("unsupported method '", node->name, "'"));
        }
        NodePtr n = MakeNode(Node::Kind::kCall, line);
        n->kids.push_back(std::move(node));
        n->names.push_back("");
        RETURN_IF_ERROR(ParseCallArgs(n.get()));
        node = std::move(n);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<NodePtr> ParseFilterExpr(NodePtr node) {
    while (true) {
      const int line = Peek().line;
      if (IsOp("|")) {
        ++i_;
        ASSIGN_OR_RETURN(std::string name, ExpectIdentifier());
        if (KnownFilters().count(name) == 0) {
          return Error(absl::StrCat("unsupported filter '", name, "'"));
        }
        NodePtr n = MakeNode(Node::Kind::kFilter, line);
        n->name = std::move(name);
        n->kids.push_back(std::move(node));
        n->names.push_back("");
        if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(n.get()));
        node = std::move(n);
      } else if (IsName("is")) {
        ++i_;
        NodePtr n = MakeNode(Node::Kind::kTest, line);
        if (IsName("not")) {
          ++i_;
          n->flag = true;
        }
        std::string name;
        if (IsOp("==")) {
          name = Next().value;
        } else {
          ASSIGN_OR_RETURN(name, ExpectIdentifier());
        }
        if (KnownTests().count(name) == 0) {
          return Error(absl::StrCat("unsupported test '", name, "'"));
        }
        n->name = std::move(name);
        n->kids.push_back(std::move(node));
        n->names.push_back("");
        if (IsOp("(")) {
          RETURN_IF_ERROR(ParseCallArgs(n.get()));
        } else if (Peek().type == Token::Type::kString || Peek().type == Token::Type::kInt ||
                   Peek().type == Token::Type::kFloat ||
                   (Peek().type == Token::Type::kName && !IsName("and") && !IsName("or") &&
                    !IsName("else") && !IsName("if") && !IsName("not") && !IsName("in") &&
                    !IsName("is"))) {
          // A single argument without parentheses: `x is sameas y`, `x is divisibleby 3`.
          ASSIGN_OR_RETURN(NodePtr arg, ParsePrimary());
          ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          n->kids.push_back(std::move(arg));
          n->names.push_back("");
        }
        node = std::move(n);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  std::vector<std::pair<std::string, int>> called_functions_;  // Name and line of each call.
  std::set<std::string> macros_;
};


// ---------------------------------------------------------------------------------------------
// Evaluation.

using Scope = std::vector<std::pair<std::string, Value>>;

absl::Status TypeError(const Node& n, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("template line ", n.line, ": ", msg));
}

const char* KindName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kFunction: return "function";
  }
  return "?";
}

// Code point boundaries of `s`: offsets of each code point, plus s.size().
std::vector<size_t> CodePointOffsets(const std::string& s) {
  std::vector<size_t> offs;
  offs.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    offs.push_back(i);
    int len = 1;
    unicode::DecodeUtf8(s, i, &len);
    i += len;
  }
  offs.push_back(s.size());
  return offs;
}

// Python's slice index adjustment; fills the selected indices of a sequence of `len` items.
absl::StatusOr<std::vector<int64_t>> SliceIndices(int64_t len, const Value& start,
                                                  const Value& stop, const Value& step) {
  int64_t st = 1;
  if (!start.is_none() && !start.is_undefined() && !start.is_int()) {
    return absl::InvalidArgumentError("slice indices must be integers");
  }
  if (!stop.is_none() && !stop.is_undefined() && !stop.is_int()) {
    return absl::InvalidArgumentError("slice indices must be integers");
  }
  if (step.is_int()) st = step.as_int();
  if (st == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  auto adjust = [&](const Value& v, int64_t def) -> int64_t {
    if (!v.is_int()) return def;
    int64_t x = v.as_int();
    if (x < 0) {
      x += len;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= len) {
      x = st < 0 ? len - 1 : len;
    }
    return x;
  };
  const int64_t lo = adjust(start, st < 0 ? len - 1 : 0);
  const int64_t hi = adjust(stop, st < 0 ? -1 : len);
  std::vector<int64_t> out;
  if (st > 0) {
    for (int64_t i = lo; i < hi; i += st) out.push_back(i);
  } else {
    for (int64_t i = lo; i > hi; i += st) out.push_back(i);
  }
  return out;
}

bool IsStripChar(uint32_t cp, const std::vector<uint32_t>* chars) {
  if (chars == nullptr) return IsPySpace(cp);
  return std::find(chars->begin(), chars->end(), cp) != chars->end();
}

std::string PyStrip(const std::string& s, const Value* chars_arg, bool left, bool right) {
  std::vector<uint32_t> chars;
  const bool custom = chars_arg != nullptr && chars_arg->is_string();
  if (custom) {
    for (size_t i = 0; i < chars_arg->str().size();) {
      int len = 1;
      chars.push_back(unicode::DecodeUtf8(chars_arg->str(), i, &len));
      i += len;
    }
  }
  const std::vector<uint32_t>* set = custom ? &chars : nullptr;
  const std::vector<size_t> offs = CodePointOffsets(s);
  size_t b = 0, e = offs.size() - 1;  // Code point index range [b, e).
  auto cp_at = [&](size_t k) {
    int len = 1;
    return unicode::DecodeUtf8(s, offs[k], &len);
  };
  if (left) {
    while (b < e && IsStripChar(cp_at(b), set)) ++b;
  }
  if (right) {
    while (e > b && IsStripChar(cp_at(e - 1), set)) --e;
  }
  return s.substr(offs[b], offs[e] - offs[b]);
}

std::vector<std::string> PySplit(const std::string& s, const Value* sep_arg, int64_t maxsplit,
                                 bool from_right) {
  std::vector<std::string> parts;
  if (sep_arg == nullptr || sep_arg->is_none()) {
    // Runs of whitespace; leading and trailing whitespace ignored.
    const std::vector<size_t> offs = CodePointOffsets(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t k = 0;
    const size_t n = offs.size() - 1;
    auto space_at = [&](size_t idx) {
      int len = 1;
      return IsPySpace(unicode::DecodeUtf8(s, offs[idx], &len));
    };
    while (k < n) {
      while (k < n && space_at(k)) ++k;
      if (k >= n) break;
      size_t start = k;
      while (k < n && !space_at(k)) ++k;
      words.emplace_back(offs[start], offs[k]);
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto& w : words) parts.push_back(s.substr(w.first, w.second - w.first));
      return parts;
    }
    if (!from_right) {
      for (int64_t i = 0; i < maxsplit; ++i) {
        parts.push_back(s.substr(words[i].first, words[i].second - words[i].first));
      }
      parts.push_back(PyStrip(s.substr(words[maxsplit].first), nullptr, false, true));
    } else {
      const size_t keep = words.size() - maxsplit;
      parts.push_back(PyStrip(s.substr(0, words[keep - 1].second), nullptr, true, false));
      for (size_t i = keep; i < words.size(); ++i) {
        parts.push_back(s.substr(words[i].first, words[i].second - words[i].first));
      }
    }
    return parts;
  }
  const std::string& sep = sep_arg->str();
  if (!from_right) {
    size_t start = 0;
    int64_t splits = 0;
    while (maxsplit < 0 || splits < maxsplit) {
      const size_t at = s.find(sep, start);
      if (at == std::string::npos) break;
      parts.push_back(s.substr(start, at - start));
      start = at + sep.size();
      ++splits;
    }
    parts.push_back(s.substr(start));
    return parts;
  }
  size_t end = s.size();
  int64_t splits = 0;
  std::vector<std::string> rev;
  while (maxsplit < 0 || splits < maxsplit) {
    if (end < sep.size()) break;
    const size_t at = s.rfind(sep, end - sep.size());
    if (at == std::string::npos) break;
    rev.push_back(s.substr(at + sep.size(), end - at - sep.size()));
    end = at;
    ++splits;
  }
  rev.push_back(s.substr(0, end));
  parts.assign(rev.rbegin(), rev.rend());
  return parts;
}

Value StringList(const std::vector<std::string>& parts) {
  ValueList items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.push_back(Value::String(p));
  return Value::List(std::move(items));
}

std::string AsciiCase(std::string s, bool upper) {
  for (char& c : s) c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                                : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// Python ordering for sort and comparisons: numbers with numbers, strings with strings.
absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.as_double(), y = b.as_double();
    if (!a.is_float() && !b.is_float()) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    for (size_t i = 0; i < a.list().size() && i < b.list().size(); ++i) {
      ASSIGN_OR_RETURN(int c, Compare(a.list()[i], b.list()[i]));
      if (c != 0) return c;
    }
    return a.list().size() < b.list().size() ? -1 : a.list().size() > b.list().size() ? 1 : 0;
  }
  return absl::InvalidArgumentError(absl::StrCat("cannot order ", KindName(a), " and ",
                                                 KindName(b)));
}

class Renderer {
 public:
  Renderer(const TemplateOptions& options, const ValueDict& context) : options_(options) {
    Scope globals;
    AddGlobals(&globals);
    for (const auto& kv : context.items) globals.emplace_back(kv.first, kv.second);
    stack_.push_back(std::move(globals));
  }

  absl::StatusOr<std::string> Run(const Node& root) {
    std::string out;
    out_ = &out;
    ASSIGN_OR_RETURN(Flow flow, Exec(root));
    if (flow != Flow::kNormal) return TypeError(root, "break or continue outside a loop");
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  // --- Scopes.

  Value Lookup(const std::string& name) const {
    for (auto s = stack_.rbegin(); s != stack_.rend(); ++s) {
      for (auto it = s->rbegin(); it != s->rend(); ++it) {
        if (it->first == name) return it->second;
      }
    }
    return Value::Undefined(name);
  }

  void Assign(const std::string& name, Value v) {
    Scope& scope = stack_.back();
    for (auto& kv : scope) {
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    }
    scope.emplace_back(name, std::move(v));
  }

  absl::Status Emit(const Node& n, std::string_view text) {
    out_->append(text);
    if (out_->size() > options_.max_output_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "template line ", n.line, ": output exceeds ", options_.max_output_bytes, " bytes"));
    }
    return absl::OkStatus();
  }

  // --- Statements.

  absl::StatusOr<Flow> Exec(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kBlock:
        for (const NodePtr& k : n.kids) {
          ASSIGN_OR_RETURN(Flow f, Exec(*k));
          if (f != Flow::kNormal) return f;
        }
        return Flow::kNormal;
      case Node::Kind::kText:
        RETURN_IF_ERROR(Emit(n, n.name));
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
        RETURN_IF_ERROR(Emit(n, v.ToString()));
        return Flow::kNormal;
      }
      case Node::Kind::kIf: {
        const size_t pairs = n.kids.size() / 2;
        for (size_t k = 0; k < pairs; ++k) {
          ASSIGN_OR_RETURN(Value c, Eval(*n.kids[2 * k]));
          if (c.Truthy()) return Exec(*n.kids[2 * k + 1]);
        }
        if (n.flag) return Exec(*n.kids.back());
        return Flow::kNormal;
      }
      case Node::Kind::kFor:
        return ExecFor(n);
      case Node::Kind::kSet: {
        ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
        if (n.names.size() == 1) {
          Assign(n.names[0], std::move(v));
          return Flow::kNormal;
        }
        Value ns = Lookup(n.names[0]);
        if (!ns.is_namespace()) {
          return TypeError(n, absl::StrCat("cannot assign attribute on non-namespace object ",
                                           n.names[0]));
        }
        ns.mutable_namespace().Set(n.names[1], std::move(v));
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string captured;
        std::string* saved = out_;
        out_ = &captured;
        absl::StatusOr<Flow> f = Exec(*n.kids[0]);
        out_ = saved;
        if (!f.ok()) return f.status();
        Assign(n.names[0], Value::String(std::move(captured)));
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        Assign(n.name, MakeMacro(n));
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      default: {
        ASSIGN_OR_RETURN(Value v, Eval(n));
        RETURN_IF_ERROR(Emit(n, v.ToString()));
        return Flow::kNormal;
      }
    }
  }

  absl::StatusOr<ValueList> Iterate(const Node& n, const Value& v) {
    switch (v.kind()) {
      case Value::Kind::kList:
        return v.list();
      case Value::Kind::kDict: {
        ValueList keys;
        for (const auto& kv : v.dict().items) keys.push_back(Value::String(kv.first));
        return keys;
      }
      case Value::Kind::kString: {
        ValueList chars;
        const std::vector<size_t> offs = CodePointOffsets(v.str());
        for (size_t k = 0; k + 1 < offs.size(); ++k) {
          chars.push_back(Value::String(v.str().substr(offs[k], offs[k + 1] - offs[k])));
        }
        return chars;
      }
      case Value::Kind::kUndefined:
        return ValueList();
      default:
        return TypeError(n, absl::StrCat("'", KindName(v), "' object is not iterable"));
    }
  }

  absl::StatusOr<Flow> ExecFor(const Node& n) {
    ASSIGN_OR_RETURN(Value seq, Eval(*n.kids[0]));
    ASSIGN_OR_RETURN(ValueList items, Iterate(n, seq));
    const Node* filter = n.kids[3].get();
    if (filter != nullptr) {
      ValueList kept;
      for (Value& item : items) {
        stack_.emplace_back();
        absl::Status s = BindTargets(n, item);
        absl::StatusOr<Value> c = s.ok() ? Eval(*filter) : absl::StatusOr<Value>(s);
        stack_.pop_back();
        if (!c.ok()) return c.status();
        if (c->Truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (n.kids[2] != nullptr) return Exec(*n.kids[2]);
      return Flow::kNormal;
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      if (++iterations_ > options_.max_loop_iterations) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "template line ", n.line, ": more than ", options_.max_loop_iterations,
            " loop iterations"));
      }
      stack_.emplace_back();
      RETURN_IF_ERROR(BindTargets(n, items[i]));
      ValueDict loop;
      loop.items.reserve(10);
      loop.items.emplace_back("index", Value::Int(i + 1));
      loop.items.emplace_back("index0", Value::Int(i));
      loop.items.emplace_back("revindex", Value::Int(len - i));
      loop.items.emplace_back("revindex0", Value::Int(len - i - 1));
      loop.items.emplace_back("first", Value::Bool(i == 0));
      loop.items.emplace_back("last", Value::Bool(i == len - 1));
      loop.items.emplace_back("length", Value::Int(len));
      loop.items.emplace_back("depth", Value::Int(1));
      loop.items.emplace_back("previtem", i > 0 ? items[i - 1] : Value::Undefined("previtem"));
      loop.items.emplace_back("nextitem",
                              i + 1 < len ? items[i + 1] : Value::Undefined("nextitem"));
      loop.items.emplace_back("cycle", Value::Func("cycle", [i](const CallArgs& a) {
                                if (a.positional.empty()) {
                                  return absl::StatusOr<Value>(absl::InvalidArgumentError(
                                      "loop.cycle needs at least one argument"));
                                }
                                return absl::StatusOr<Value>(
                                    a.positional[i % a.positional.size()]);
                              }));
      Assign("loop", Value::Dict(std::move(loop)));
      absl::StatusOr<Flow> f = Exec(*n.kids[1]);
      stack_.pop_back();
      if (!f.ok()) return f.status();
      if (*f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  absl::Status BindTargets(const Node& n, const Value& item) {
    if (n.names.size() == 1) {
      Assign(n.names[0], item);
      return absl::OkStatus();
    }
    if (!item.is_list() || item.list().size() != n.names.size()) {
      return TypeError(n, absl::StrCat("cannot unpack ", item.Repr(), " into ",
                                       n.names.size(), " loop variables"));
    }
    for (size_t k = 0; k < n.names.size(); ++k) Assign(n.names[k], item.list()[k]);
    return absl::OkStatus();
  }

  Value MakeMacro(const Node& n) {
    const Node* macro = &n;
    return Value::Func(n.name, [this, macro](const CallArgs& args) -> absl::StatusOr<Value> {
      return CallMacro(*macro, args);
    });
  }

  absl::StatusOr<Value> CallMacro(const Node& m, const CallArgs& args) {
    if (args.positional.size() > m.names.size()) {
      return TypeError(m, absl::StrCat("macro ", m.name, " takes at most ", m.names.size(),
                                       " arguments"));
    }
    for (const auto& kv : args.keyword) {
      if (std::find(m.names.begin(), m.names.end(), kv.first) == m.names.end()) {
        return TypeError(m, absl::StrCat("macro ", m.name, " has no parameter ", kv.first));
      }
    }
    if (++depth_ > options_.max_call_depth) {
      --depth_;
      return absl::ResourceExhaustedError(absl::StrCat(
          "template line ", m.line, ": macro calls nested deeper than ", options_.max_call_depth));
    }
    // A macro sees the template's top-level scope and its own parameters.
    std::vector<Scope> saved = std::move(stack_);
    stack_.clear();
    stack_.push_back(saved.front());
    stack_.emplace_back();
    absl::Status status;
    for (size_t k = 0; k < m.names.size() && status.ok(); ++k) {
      const Value* v = args.Get(k, m.names[k]);
      if (v != nullptr) {
        Assign(m.names[k], *v);
      } else if (m.kids[k + 1] != nullptr) {
        absl::StatusOr<Value> d = Eval(*m.kids[k + 1]);
        if (d.ok()) {
          Assign(m.names[k], *std::move(d));
        } else {
          status = d.status();
        }
      } else {
        Assign(m.names[k], Value::Undefined(m.names[k]));
      }
    }
    std::string captured;
    std::string* saved_out = out_;
    out_ = &captured;
    if (status.ok()) {
      absl::StatusOr<Flow> f = Exec(*m.kids[0]);
      if (!f.ok()) status = f.status();
    }
    out_ = saved_out;
    stack_ = std::move(saved);
    --depth_;
    RETURN_IF_ERROR(status);
    return Value::String(std::move(captured));
  }

  // --- Expressions.

  absl::StatusOr<Value> Eval(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kLiteral:
        return n.literal;
      case Node::Kind::kName:
        return Lookup(n.name);
      case Node::Kind::kAttr: {
        ASSIGN_OR_RETURN(Value obj, Eval(*n.kids[0]));
        return GetAttr(n, obj, n.name);
      }
      case Node::Kind::kItem: {
        ASSIGN_OR_RETURN(Value obj, Eval(*n.kids[0]));
        ASSIGN_OR_RETURN(Value key, Eval(*n.kids[1]));
        return GetItem(n, obj, key);
      }
      case Node::Kind::kSlice:
        return EvalSlice(n);
      case Node::Kind::kCall: {
        ASSIGN_OR_RETURN(Value callee, Eval(*n.kids[0]));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(n));
        if (callee.is_undefined()) {
          return TypeError(n, absl::StrCat("'", callee.str(), "' is undefined"));
        }
        if (!callee.is_function()) {
          return TypeError(n, absl::StrCat("'", KindName(callee), "' object is not callable"));
        }
        absl::StatusOr<Value> r = callee.func()(args);
        if (!r.ok() && r.status().message().find("template line") == std::string_view::npos &&
            r.status().code() == absl::StatusCode::kInvalidArgument) {
          return TypeError(n, r.status().message());
        }
        return r;
      }
      case Node::Kind::kFilter: {
        ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(n));
        return ApplyFilter(n, n.name, v, args);
      }
      case Node::Kind::kTest: {
        ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(n));
        ASSIGN_OR_RETURN(bool r, ApplyTest(n, n.name, v, args));
        return Value::Bool(r != n.flag);
      }
      case Node::Kind::kNeg:
      case Node::Kind::kPos: {
        ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
        if (!v.is_number()) {
          return TypeError(n, absl::StrCat("bad operand type for unary minus: ", KindName(v)));
        }
        if (n.kind == Node::Kind::kPos) return v.is_bool() ? Value::Int(v.as_int()) : v;
        if (v.is_float()) return Value::Float(-v.as_double());
        if (v.as_int() == INT64_MIN) return TypeError(n, "integer overflow in unary minus");
        return Value::Int(-v.as_int());
      }
      case Node::Kind::kNot: {
        ASSIGN_OR_RETURN(Value v, Eval(*n.kids[0]));
        return Value::Bool(!v.Truthy());
      }
      case Node::Kind::kAnd: {
        ASSIGN_OR_RETURN(Value l, Eval(*n.kids[0]));
        if (!l.Truthy()) return l;
        return Eval(*n.kids[1]);
      }
      case Node::Kind::kOr: {
        ASSIGN_OR_RETURN(Value l, Eval(*n.kids[0]));
        if (l.Truthy()) return l;
        return Eval(*n.kids[1]);
      }
      case Node::Kind::kCond: {
        ASSIGN_OR_RETURN(Value c, Eval(*n.kids[1]));
        if (c.Truthy()) return Eval(*n.kids[0]);
        if (n.kids[2] != nullptr) return Eval(*n.kids[2]);
        return Value::Undefined();
      }
      case Node::Kind::kList:
      case Node::Kind::kTuple: {
        ValueList items;
        for (const NodePtr& k : n.kids) {
          ASSIGN_OR_RETURN(Value v, Eval(*k));
          items.push_back(std::move(v));
        }
        return Value::List(std::move(items));
      }
      case Node::Kind::kDict: {
        ValueDict dict;
        for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
          ASSIGN_OR_RETURN(Value key, Eval(*n.kids[k]));
          ASSIGN_OR_RETURN(Value v, Eval(*n.kids[k + 1]));
          if (!key.is_string()) return TypeError(n, "dict keys must be strings");
          dict.Set(key.str(), std::move(v));
        }
        return Value::Dict(std::move(dict));
      }
      case Node::Kind::kBinary:
        return EvalBinary(n);
      default:
        return TypeError(n, "statement used as an expression");
    }
  }

  absl::StatusOr<CallArgs> EvalArgs(const Node& n) {
    CallArgs args;
    for (size_t k = 1; k < n.kids.size(); ++k) {
      ASSIGN_OR_RETURN(Value v, Eval(*n.kids[k]));
      if (n.names[k].empty()) {
        args.positional.push_back(std::move(v));
      } else {
        args.keyword.emplace_back(n.names[k], std::move(v));
      }
    }
    return args;
  }

  absl::StatusOr<Value> GetAttr(const Node& n, const Value& obj, const std::string& name) {
    switch (obj.kind()) {
      case Value::Kind::kUndefined:
        return TypeError(n, absl::StrCat("'", obj.str().empty() ? "value" : obj.str(),
                                         "' is undefined (reading attribute '", name, "')"));
      case Value::Kind::kDict: {
        if (name == "items" || name == "keys" || name == "values" || name == "get") {
          return DictMethod(obj, name);
        }
        const Value* v = obj.dict().Find(name);
        return v != nullptr ? *v : Value::Undefined(name);
      }
      case Value::Kind::kNamespace: {
        const Value* v = obj.dict().Find(name);
        return v != nullptr ? *v : Value::Undefined(name);
      }
      case Value::Kind::kString:
        return StringMethod(n, obj, name);
      default:
        return Value::Undefined(name);
    }
  }

  absl::StatusOr<Value> GetItem(const Node& n, const Value& obj, const Value& key) {
    switch (obj.kind()) {
      case Value::Kind::kUndefined:
        return TypeError(n, absl::StrCat("'", obj.str().empty() ? "value" : obj.str(),
                                         "' is undefined (reading an item)"));
      case Value::Kind::kDict:
      case Value::Kind::kNamespace: {
        if (!key.is_string()) return Value::Undefined();
        const Value* v = obj.dict().Find(key.str());
        return v != nullptr ? *v : Value::Undefined(key.str());
      }
      case Value::Kind::kList: {
        if (!key.is_int()) return Value::Undefined();
        int64_t i = key.as_int();
        const int64_t len = static_cast<int64_t>(obj.list().size());
        if (i < 0) i += len;
        if (i < 0 || i >= len) return Value::Undefined();
        return obj.list()[i];
      }
      case Value::Kind::kString: {
        if (!key.is_int()) return GetAttr(n, obj, key.ToString());
        const std::vector<size_t> offs = CodePointOffsets(obj.str());
        int64_t i = key.as_int();
        const int64_t len = static_cast<int64_t>(offs.size()) - 1;
        if (i < 0) i += len;
        if (i < 0 || i >= len) return Value::Undefined();
        return Value::String(obj.str().substr(offs[i], offs[i + 1] - offs[i]));
      }
      default:
        return Value::Undefined();
    }
  }

  absl::StatusOr<Value> EvalSlice(const Node& n) {
    ASSIGN_OR_RETURN(Value obj, Eval(*n.kids[0]));
    Value parts[3];
    for (int k = 0; k < 3; ++k) {
      if (n.kids[k + 1] != nullptr) {
        ASSIGN_OR_RETURN(parts[k], Eval(*n.kids[k + 1]));
      } else {
        parts[k] = Value::None();
      }
    }
    if (obj.is_list()) {
      absl::StatusOr<std::vector<int64_t>> idx =
          SliceIndices(static_cast<int64_t>(obj.list().size()), parts[0], parts[1], parts[2]);
      if (!idx.ok()) return TypeError(n, idx.status().message());
      ValueList items;
      for (int64_t i : *idx) items.push_back(obj.list()[i]);
      return Value::List(std::move(items));
    }
    if (obj.is_string()) {
      const std::vector<size_t> offs = CodePointOffsets(obj.str());
      absl::StatusOr<std::vector<int64_t>> idx =
          SliceIndices(static_cast<int64_t>(offs.size()) - 1, parts[0], parts[1], parts[2]);
      if (!idx.ok()) return TypeError(n, idx.status().message());
      std::string out;
      for (int64_t i : *idx) out.append(obj.str(), offs[i], offs[i + 1] - offs[i]);
      return Value::String(std::move(out));
    }
    if (obj.is_undefined()) {
      return TypeError(n, absl::StrCat("'", obj.str(), "' is undefined (slicing)"));
    }
    return TypeError(n, absl::StrCat("'", KindName(obj), "' object is not subscriptable"));
  }

  absl::StatusOr<Value> EvalBinary(const Node& n) {
    ASSIGN_OR_RETURN(Value a, Eval(*n.kids[0]));
    ASSIGN_OR_RETURN(Value b, Eval(*n.kids[1]));
    const std::string& op = n.name;
    if (op == "==") return Value::Bool(a.Equals(b));
    if (op == "!=") return Value::Bool(!a.Equals(b));
    if (op == "~") return Value::String(a.ToString() + b.ToString());
    if (op == "in" || op == "not in") {
      ASSIGN_OR_RETURN(bool in, Contains(n, b, a));
      return Value::Bool(in == (op == "in"));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      absl::StatusOr<int> c = Compare(a, b);
      if (!c.ok()) return TypeError(n, c.status().message());
      if (op == "<") return Value::Bool(*c < 0);
      if (op == ">") return Value::Bool(*c > 0);
      if (op == "<=") return Value::Bool(*c <= 0);
      return Value::Bool(*c >= 0);
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value::String(a.str() + b.str());
      if (a.is_list() && b.is_list()) {
        ValueList items = a.list();
        items.insert(items.end(), b.list().begin(), b.list().end());
        return Value::List(std::move(items));
      }
    }
    if (op == "*" && ((a.is_string() && b.is_int()) || (a.is_int() && b.is_string()))) {
      const Value& s = a.is_string() ? a : b;
      const int64_t times = a.is_string() ? b.as_int() : a.as_int();
      if (times > 0 && !s.str().empty() &&
          static_cast<uint64_t>(times) > options_.max_output_bytes / s.str().size()) {
        return absl::ResourceExhaustedError("string repetition too large");
      }
      std::string out;
      for (int64_t k = 0; k < times; ++k) out += s.str();
      return Value::String(std::move(out));
    }
    if (!a.is_number() || !b.is_number()) {
      return TypeError(n, absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                       KindName(a), "' and '", KindName(b), "'"));
    }
    const bool ints = !a.is_float() && !b.is_float();
    const double x = a.as_double(), y = b.as_double();
    // Python integers do not overflow; ours are 64-bit, so overflow is an error.
    const absl::Status overflow = TypeError(n, absl::StrCat("integer overflow in ", op));
    int64_t r = 0;
    if (op == "+") {
      if (!ints) return Value::Float(x + y);
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return overflow;
      return Value::Int(r);
    }
    if (op == "-") {
      if (!ints) return Value::Float(x - y);
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) return overflow;
      return Value::Int(r);
    }
    if (op == "*") {
      if (!ints) return Value::Float(x * y);
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) return overflow;
      return Value::Int(r);
    }
    if (op == "**") {
      if (ints && b.as_int() >= 0) {
        r = 1;
        for (int64_t k = 0; k < b.as_int(); ++k) {
          if (__builtin_mul_overflow(r, a.as_int(), &r)) return overflow;
          if (r == 0 || r == 1) break;
        }
        return Value::Int(r);
      }
      return Value::Float(std::pow(x, y));
    }
    if (y == 0) return TypeError(n, "division by zero");
    if (ints && b.as_int() == -1 && a.as_int() == INT64_MIN) return overflow;
    if (op == "/") return Value::Float(x / y);
    if (op == "//") {
      if (ints) {
        int64_t q = a.as_int() / b.as_int();
        if ((a.as_int() % b.as_int() != 0) && ((a.as_int() < 0) != (b.as_int() < 0))) --q;
        return Value::Int(q);
      }
      return Value::Float(std::floor(x / y));
    }
    if (op == "%") {
      if (ints) {
        int64_t m = a.as_int() % b.as_int();
        if (m != 0 && ((m < 0) != (b.as_int() < 0))) m += b.as_int();
        return Value::Int(m);
      }
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::Float(m);
    }
    return TypeError(n, absl::StrCat("unsupported operator ", op));
  }

  absl::StatusOr<bool> Contains(const Node& n, const Value& container, const Value& item) {
    switch (container.kind()) {
      case Value::Kind::kString:
        if (!item.is_string()) {
          return TypeError(n, absl::StrCat("'in <string>' requires string as left operand, not ",
                                           KindName(item)));
        }
        return container.str().find(item.str()) != std::string::npos;
      case Value::Kind::kList:
        for (const Value& v : container.list()) {
          if (v.Equals(item)) return true;
        }
        return false;
      case Value::Kind::kDict:
      case Value::Kind::kNamespace:
        return item.is_string() && container.dict().Find(item.str()) != nullptr;
      case Value::Kind::kUndefined:
        return false;
      default:
        return TypeError(n, absl::StrCat("argument of type '", KindName(container),
                                         "' is not iterable"));
    }
  }

  static absl::StatusOr<Value> DictMethod(const Value& obj, const std::string& name) {
    return Value::Func(name, [obj, name](const CallArgs& args) -> absl::StatusOr<Value> {
      if (name == "get") {
        const Value* key = args.Get(0, "key");
        const Value* def = args.Get(1, "default");
        if (key == nullptr) return absl::InvalidArgumentError("get() needs a key");
        const Value* v = key->is_string() ? obj.dict().Find(key->str()) : nullptr;
        if (v != nullptr) return *v;
        return def != nullptr ? *def : Value::None();
      }
      ValueList out;
      for (const auto& kv : obj.dict().items) {
        if (name == "keys") {
          out.push_back(Value::String(kv.first));
        } else if (name == "values") {
          out.push_back(kv.second);
        } else {
          out.push_back(Value::List({Value::String(kv.first), kv.second}));
        }
      }
      return Value::List(std::move(out));
    });
  }

  static absl::StatusOr<Value> StringMethod(const Node& n, const Value& obj,
                                            const std::string& name) {
    static const std::set<std::string>* kMethods = new std::set<std::string>{
        "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "upper",
        "lower", "replace", "title", "capitalize", "find", "count", "splitlines", "join"};
    if (kMethods->count(name) == 0) {
      if (name == "format") return TypeError(n, "str.format is not supported");
      return Value::Undefined(name);
    }
    const std::string s = obj.str();
    return Value::Func(name, [s, name](const CallArgs& args) -> absl::StatusOr<Value> {
      const Value* a0 = args.Get(0, "");
      if (name == "startswith" || name == "endswith") {
        if (a0 == nullptr) return absl::InvalidArgumentError(name + "() needs an argument");
        std::vector<std::string> options;
        if (a0->is_string()) {
          options.push_back(a0->str());
        } else if (a0->is_list()) {
          for (const Value& v : a0->list()) {
            if (!v.is_string()) return absl::InvalidArgumentError(name + "() needs strings");
            options.push_back(v.str());
          }
        } else {
          return absl::InvalidArgumentError(name + "() needs a string or tuple");
        }
        for (const std::string& o : options) {
          const bool hit = name == "startswith"
                               ? s.compare(0, o.size(), o) == 0 && s.size() >= o.size()
                               : s.size() >= o.size() && s.compare(s.size() - o.size(),
                                                                   o.size(), o) == 0;
          if (hit) return Value::Bool(true);
        }
        return Value::Bool(false);
      }
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const Value* chars = args.Get(0, "chars");
        if (chars != nullptr && !chars->is_string() && !chars->is_none()) {
          return absl::InvalidArgumentError(name + "() argument must be a string or None");
        }
        return Value::String(PyStrip(s, chars, name != "rstrip", name != "lstrip"));
      }
      if (name == "split" || name == "rsplit") {
        const Value* sep = args.Get(0, "sep");
        const Value* max = args.Get(1, "maxsplit");
        if (sep != nullptr && !sep->is_none() && (!sep->is_string() || sep->str().empty())) {
          return absl::InvalidArgumentError("split() separator must be a non-empty string");
        }
        return StringList(PySplit(s, sep, max != nullptr && max->is_int() ? max->as_int() : -1,
                                  name == "rsplit"));
      }
      if (name == "upper" || name == "lower") return Value::String(AsciiCase(s, name == "upper"));
      if (name == "title" || name == "capitalize") {
        std::string out = AsciiCase(s, false);
        bool start = true;
        for (char& c : out) {
          const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
          if (alpha && start) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
          if (name == "title") {
            start = !alpha;
          } else {
            start = false;
          }
        }
        return Value::String(out);
      }
      if (name == "replace") {
        const Value* old_s = args.Get(0, "old");
        const Value* new_s = args.Get(1, "new");
        const Value* count = args.Get(2, "count");
        if (old_s == nullptr || new_s == nullptr || !old_s->is_string() || !new_s->is_string()) {
          return absl::InvalidArgumentError("replace() needs two strings");
        }
        return Value::String(
            ReplaceAll(s, old_s->str(), new_s->str(), count != nullptr && count->is_int()
                                                          ? count->as_int()
                                                          : -1));
      }
      if (name == "find" || name == "count") {
        if (a0 == nullptr || !a0->is_string()) {
          return absl::InvalidArgumentError(name + "() needs a string");
        }
        if (name == "find") {
          const size_t at = s.find(a0->str());
          if (at == std::string::npos) return Value::Int(-1);
          return Value::Int(static_cast<int64_t>(unicode::CodePointCount(s.substr(0, at))));
        }
        if (a0->str().empty()) {
          return Value::Int(static_cast<int64_t>(unicode::CodePointCount(s)) + 1);
        }
        int64_t c = 0;
        for (size_t at = s.find(a0->str()); at != std::string::npos;
             at = s.find(a0->str(), at + a0->str().size())) {
          ++c;
        }
        return Value::Int(c);
      }
      if (name == "splitlines") {
        std::vector<std::string> lines;
        size_t start = 0;
        for (size_t k = 0; k < s.size(); ++k) {
          if (s[k] == '\n' || s[k] == '\r') {
            lines.push_back(s.substr(start, k - start));
            if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
            start = k + 1;
          }
        }
        if (start < s.size()) lines.push_back(s.substr(start));
        return StringList(lines);
      }
      // join
      if (a0 == nullptr || !a0->is_list()) return absl::InvalidArgumentError("join() needs a list");
      std::string out;
      for (size_t k = 0; k < a0->list().size(); ++k) {
        if (!a0->list()[k].is_string()) {
          return absl::InvalidArgumentError("join() needs a list of strings");
        }
        if (k > 0) out += s;
        out += a0->list()[k].str();
      }
      return Value::String(std::move(out));
    });
  }

  static std::string ReplaceAll(const std::string& s, const std::string& from,
                                const std::string& to, int64_t count) {
    if (from.empty()) return s;
    std::string out;
    size_t start = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
      const size_t at = s.find(from, start);
      if (at == std::string::npos) break;
      out.append(s, start, at - start);
      out += to;
      start = at + from.size();
      ++done;
    }
    out.append(s, start, std::string::npos);
    return out;
  }

  absl::StatusOr<Value> ApplyFilter(const Node& n, const std::string& name, const Value& v,
                                    const CallArgs& args) {
    const Value* a0 = args.Get(0, "");
    if (name == "tojson") {
      const Value* ensure_ascii = args.Get(0, "ensure_ascii");
      const Value* indent = args.Get(1, "indent");
      const Value* separators = args.Get(2, "separators");
      const Value* sort_keys = args.Get(3, "sort_keys");
      const bool has_indent = indent != nullptr && indent->is_int();
      std::string item_sep = has_indent ? "," : ", ";
      std::string key_sep = ": ";
      if (separators != nullptr && separators->is_list() && separators->list().size() == 2) {
        item_sep = separators->list()[0].ToString();
        key_sep = separators->list()[1].ToString();
      }
      absl::StatusOr<std::string> json =
          v.ToJson(ensure_ascii != nullptr && ensure_ascii->Truthy(),
                   has_indent ? static_cast<int>(indent->as_int()) : -1, item_sep, key_sep,
                   sort_keys != nullptr && sort_keys->Truthy());
      if (!json.ok()) return TypeError(n, json.status().message());
      return Value::String(*std::move(json));
    }
    if (name == "trim") {
      return Value::String(PyStrip(v.ToString(), args.Get(0, "chars"), true, true));
    }
    if (name == "length" || name == "count") {
      switch (v.kind()) {
        case Value::Kind::kString:
          return Value::Int(static_cast<int64_t>(unicode::CodePointCount(v.str())));
        case Value::Kind::kList:
          return Value::Int(static_cast<int64_t>(v.list().size()));
        case Value::Kind::kDict:
        case Value::Kind::kNamespace:
          return Value::Int(static_cast<int64_t>(v.dict().items.size()));
        case Value::Kind::kUndefined:
          return Value::Int(0);
        default:
          return TypeError(n, absl::StrCat("object of type '", KindName(v), "' has no len()"));
      }
    }
    if (name == "items") {
      if (v.is_undefined()) return Value::List({});
      if (!v.is_dict()) return TypeError(n, "can only get item pairs from a mapping");
      ASSIGN_OR_RETURN(Value method, DictMethod(v, "items"));
      return method.func()(CallArgs());
    }
    if (name == "string") return v.is_string() ? v : Value::String(v.ToString());
    if (name == "safe") return Value::String(v.ToString());
    if (name == "e" || name == "escape") return Value::String(HtmlEscape(v.ToString()));
    if (name == "default" || name == "d") {
      const Value* def = args.Get(0, "default_value");
      const Value* boolean = args.Get(1, "boolean");
      const bool use_default =
          v.is_undefined() || (boolean != nullptr && boolean->Truthy() && !v.Truthy());
      if (!use_default) return v;
      return def != nullptr ? *def : Value::String("");
    }
    if (name == "join") {
      const Value* sep = args.Get(0, "d");
      const Value* attr = args.Get(1, "attribute");
      ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
      std::string out;
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0 && sep != nullptr) out += sep->ToString();
        if (attr != nullptr) {
          ASSIGN_OR_RETURN(Value field, GetAttr(n, items[k], attr->ToString()));
          out += field.ToString();
        } else {
          out += items[k].ToString();
        }
      }
      return Value::String(std::move(out));
    }
    if (name == "first" || name == "last") {
      ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
      if (items.empty()) return Value::Undefined(name);
      return name == "first" ? items.front() : items.back();
    }
    if (name == "lower" || name == "upper") {
      return Value::String(AsciiCase(v.ToString(), name == "upper"));
    }
    if (name == "title" || name == "capitalize") {
      ASSIGN_OR_RETURN(Value method, StringMethod(n, Value::String(v.ToString()), name));
      return method.func()(CallArgs());
    }
    if (name == "replace") {
      ASSIGN_OR_RETURN(Value method, StringMethod(n, Value::String(v.ToString()), "replace"));
      return method.func()(args);
    }
    if (name == "list") {
      ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
      return Value::List(std::move(items));
    }
    if (name == "reverse") {
      if (v.is_string()) {
        ASSIGN_OR_RETURN(ValueList chars, Iterate(n, v));
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->str();
        return Value::String(std::move(out));
      }
      ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
      std::reverse(items.begin(), items.end());
      return Value::List(std::move(items));
    }
    if (name == "unique") {
      ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
      ValueList out;
      for (const Value& item : items) {
        if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return o.Equals(item); })) {
          out.push_back(item);
        }
      }
      return Value::List(std::move(out));
    }
    if (name == "sort" || name == "dictsort") {
      ValueList items;
      if (name == "dictsort") {
        if (!v.is_dict()) return TypeError(n, "dictsort needs a mapping");
        ASSIGN_OR_RETURN(Value method, DictMethod(v, "items"));
        ASSIGN_OR_RETURN(Value pairs, method.func()(CallArgs()));
        items = pairs.list();
      } else {
        ASSIGN_OR_RETURN(items, Iterate(n, v));
      }
      const Value* reverse = args.Get(0, "reverse");
      const Value* attr = args.Get(2, "attribute");
      absl::Status status;
      auto key = [&](const Value& item) -> Value {
        if (name == "dictsort") return item.list()[0];
        if (attr == nullptr) return item;
        absl::StatusOr<Value> f = GetAttr(n, item, attr->ToString());
        return f.ok() ? *f : Value::Undefined();
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        absl::StatusOr<int> c = Compare(key(x), key(y));
        if (!c.ok()) {
          status = c.status();
          return false;
        }
        return *c < 0;
      });
      if (!status.ok()) return TypeError(n, status.message());
      if (reverse != nullptr && reverse->Truthy()) std::reverse(items.begin(), items.end());
      return Value::List(std::move(items));
    }
    if (name == "map") {
      ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
      const Value* attr = args.Get(99, "attribute");
      ValueList out;
      for (const Value& item : items) {
        if (attr != nullptr) {
          ASSIGN_OR_RETURN(Value f, GetAttr(n, item, attr->ToString()));
          out.push_back(std::move(f));
          continue;
        }
        if (a0 == nullptr || !a0->is_string() || KnownFilters().count(a0->str()) == 0) {
          return TypeError(n, "map needs attribute= or a known filter name");
        }
        CallArgs rest;
        rest.positional.assign(args.positional.begin() + 1, args.positional.end());
        ASSIGN_OR_RETURN(Value f, ApplyFilter(n, a0->str(), item, rest));
        out.push_back(std::move(f));
      }
      return Value::List(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      ASSIGN_OR_RETURN(ValueList items, Iterate(n, v));
      const bool by_attr = name == "selectattr" || name == "rejectattr";
      const bool keep_if = name == "select" || name == "selectattr";
      const size_t test_index = by_attr ? 1 : 0;
      const Value* test = args.Get(test_index, "");
      if (test != nullptr && (!test->is_string() || KnownTests().count(test->str()) == 0)) {
        return TypeError(n, absl::StrCat(name, " needs a known test name"));
      }
      CallArgs rest;
      if (args.positional.size() > test_index + 1) {
        rest.positional.assign(args.positional.begin() + test_index + 1, args.positional.end());
      }
      ValueList out;
      for (const Value& item : items) {
        Value subject = item;
        if (by_attr) {
          if (a0 == nullptr) return TypeError(n, absl::StrCat(name, " needs an attribute"));
          ASSIGN_OR_RETURN(subject, GetAttr(n, item, a0->ToString()));
        }
        bool r = subject.Truthy();
        if (test != nullptr) {
          ASSIGN_OR_RETURN(r, ApplyTest(n, test->str(), subject, rest));
        }
        if (r == keep_if) out.push_back(item);
      }
      return Value::List(std::move(out));
    }
    if (name == "int") {
      if (v.is_float()) {
        const double d = v.as_double();
        if (!std::isfinite(d) || d >= 9.2e18 || d <= -9.2e18) {
          return TypeError(n, "int filter: value out of range");
        }
        return Value::Int(static_cast<int64_t>(d));
      }
      if (v.is_number()) return Value::Int(v.as_int());
      if (v.is_string()) return Value::Int(std::strtoll(v.str().c_str(), nullptr, 10));
      return Value::Int(0);
    }
    if (name == "float") {
      if (v.is_number()) return Value::Float(v.as_double());
      if (v.is_string()) return Value::Float(std::strtod(v.str().c_str(), nullptr));
      return Value::Float(0);
    }
    if (name == "abs") {
      if (!v.is_number()) return TypeError(n, "abs needs a number");
      return v.is_float() ? Value::Float(std::fabs(v.as_double()))
                          : Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    return TypeError(n, absl::StrCat("unsupported filter '", name, "'"));
  }

  absl::StatusOr<bool> ApplyTest(const Node& n, const std::string& name, const Value& v,
                                 const CallArgs& args) {
    const Value* a0 = args.Get(0, "");
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "boolean") return v.is_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "mapping") return v.is_dict();
    if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
    if (name == "callable") return v.is_function();
    if (name == "lower") return v.is_string() && AsciiCase(v.str(), false) == v.str();
    if (name == "upper") return v.is_string() && AsciiCase(v.str(), true) == v.str();
    if (name == "even" || name == "odd") {
      if (!v.is_int()) return TypeError(n, absl::StrCat("test ", name, " needs an integer"));
      return (v.as_int() % 2 == 0) == (name == "even");
    }
    if (a0 == nullptr) return TypeError(n, absl::StrCat("test ", name, " needs an argument"));
    if (name == "divisibleby") {
      if (!v.is_int() || !a0->is_int() || a0->as_int() == 0) {
        return TypeError(n, "divisibleby needs non-zero integers");
      }
      return v.as_int() % a0->as_int() == 0;
    }
    if (name == "eq" || name == "equalto" || name == "==") return v.Equals(*a0);
    if (name == "ne") return !v.Equals(*a0);
    if (name == "sameas") {
      return v.kind() == a0->kind() && (v.is_none() || v.is_undefined() ||
                                        (v.is_bool() && v.Equals(*a0)));
    }
    if (name == "in") return Contains(n, *a0, v);
    absl::StatusOr<int> c = Compare(v, *a0);
    if (!c.ok()) return TypeError(n, c.status().message());
    if (name == "lt") return *c < 0;
    if (name == "le") return *c <= 0;
    if (name == "gt") return *c > 0;
    if (name == "ge") return *c >= 0;
    return TypeError(n, absl::StrCat("unsupported test '", name, "'"));
  }

  static void AddGlobals(Scope* globals) {
    globals->emplace_back("raise_exception",
                          Value::Func("raise_exception", [](const CallArgs& a) {
                            const Value* msg = a.Get(0, "message");
                            return absl::StatusOr<Value>(absl::FailedPreconditionError(
                                msg != nullptr ? msg->ToString() : "raise_exception"));
                          }));
    globals->emplace_back("namespace", Value::Func("namespace", [](const CallArgs& a) {
                            ValueDict d;
                            for (const Value& p : a.positional) {
                              if (p.is_dict()) {
                                for (const auto& kv : p.dict().items) d.Set(kv.first, kv.second);
                              }
                            }
                            for (const auto& kv : a.keyword) d.Set(kv.first, kv.second);
                            return absl::StatusOr<Value>(Value::Namespace(std::move(d)));
                          }));
    globals->emplace_back("dict", Value::Func("dict", [](const CallArgs& a) {
                            ValueDict d;
                            for (const auto& kv : a.keyword) d.Set(kv.first, kv.second);
                            return absl::StatusOr<Value>(Value::Dict(std::move(d)));
                          }));
    globals->emplace_back("range", Value::Func("range", [](const CallArgs& a)
                                                   -> absl::StatusOr<Value> {
                            int64_t start = 0, stop = 0, step = 1;
                            for (const Value& p : a.positional) {
                              if (!p.is_int()) {
                                return absl::InvalidArgumentError("range() needs integers");
                              }
                            }
                            if (a.positional.size() == 1) {
                              stop = a.positional[0].as_int();
                            } else if (a.positional.size() >= 2) {
                              start = a.positional[0].as_int();
                              stop = a.positional[1].as_int();
                              if (a.positional.size() >= 3) step = a.positional[2].as_int();
                            }
                            if (step == 0) return absl::InvalidArgumentError("range() step is 0");
                            ValueList items;
                            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                              if (items.size() >= (size_t{1} << 20)) {
                                return absl::ResourceExhaustedError("range() too long");
                              }
                              items.push_back(Value::Int(i));
                            }
                            return Value::List(std::move(items));
                          }));
    globals->emplace_back("strftime_now", Value::Func("strftime_now", [](const CallArgs& a)
                                                          -> absl::StatusOr<Value> {
                            const Value* fmt = a.Get(0, "format");
                            if (fmt == nullptr || !fmt->is_string()) {
                              return absl::InvalidArgumentError("strftime_now() needs a format");
                            }
                            const std::time_t now = std::time(nullptr);
                            std::tm tm{};
                            localtime_r(&now, &tm);
                            char buf[256];
                            const size_t len = std::strftime(buf, sizeof(buf), fmt->str().c_str(), &tm);
                            return Value::String(std::string(buf, len));
                          }));
  }

  const TemplateOptions& options_;
  std::vector<Scope> stack_;
  std::string* out_ = nullptr;
  size_t iterations_ = 0;
  int depth_ = 0;
};

}  // namespace

Template::Template(const TemplateOptions& options, std::unique_ptr<Node> root)
    : options_(options), root_(std::move(root)) {}

Template::~Template() = default;

absl::StatusOr<std::unique_ptr<Template>> Template::Parse(std::string_view source,
                                                          const TemplateOptions& options) {
  Lexer lexer(source, options);
  ASSIGN_OR_RETURN(std::vector<Token> tokens, lexer.Run());
  Parser parser(std::move(tokens));
  ASSIGN_OR_RETURN(NodePtr root, parser.ParseTemplate());
  return std::unique_ptr<Template>(new Template(options, std::move(root)));
}

absl::StatusOr<std::string> Template::Render(const ValueDict& context) const {
  Renderer renderer(options_, context);
  return renderer.Run(*root_);
}

}  // namespace cairn::infer::text::jinja
