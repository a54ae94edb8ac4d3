#include <algorithm>
#include <set>
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

const std::set<std::string>& KnownFilters() {
  static const auto* filters = new std::set<std::string>{
      "abs",    "capitalize", "count",   "d",       "default", "dictsort", "first",      "float",
      "int",    "items",      "join",    "last",    "length",  "list",     "lower",      "map",
      "reject", "rejectattr", "replace", "reverse", "safe",    "select",   "selectattr", "sort",
      "string", "title",      "tojson",  "trim",    "unique",  "upper",    "e",          "escape"};
  return *filters;
}

const std::set<std::string>& KnownTests() {
  static const auto* tests = new std::set<std::string>{
      "boolean", "callable", "defined",   "divisibleby", "eq",     "equalto",
      "even",    "false",    "float",     "ge",          "gt",     "in",
      "integer", "iterable", "le",        "lower",       "lt",     "mapping",
      "ne",      "none",     "number",    "odd",         "sameas", "sequence",
      "string",  "true",     "undefined", "upper",       "=="};
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
      "startswith", "endswith", "strip",  "lstrip",     "rstrip", "split", "rsplit",     "upper",
      "lower",      "replace",  "title",  "capitalize", "find",   "count", "splitlines", "join",
      "items",      "keys",     "values", "get",        "cycle",  "format"};
  return *methods;
}

namespace {

// The height of the tree under `root` (a leaf is 1), found without recursion.
int TreeHeight(const Node& root) {
  int height = 0;
  std::vector<std::pair<const Node*, int>> pending = {{&root, 1}};
  while (!pending.empty()) {
    const auto [n, depth] = pending.back();
    pending.pop_back();
    height = std::max(height, depth);
    for (const NodePtr& k : n->kids) {
      if (k != nullptr) pending.emplace_back(k.get(), depth + 1);
    }
  }
  return height;
}

// The deepest line of the tree under `root` whose depth passes `limit`, for the error.
int LineDeeperThan(const Node& root, int limit) {
  std::vector<std::pair<const Node*, int>> pending = {{&root, 1}};
  while (!pending.empty()) {
    const auto [n, depth] = pending.back();
    pending.pop_back();
    if (depth > limit) return n->line;
    for (const NodePtr& k : n->kids) {
      if (k != nullptr) pending.emplace_back(k.get(), depth + 1);
    }
  }
  return root.line;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_nesting)
      : toks_(std::move(tokens)), max_nesting_(max_nesting) {}

  absl::StatusOr<NodePtr> ParseTemplate() {
    std::string end_tag;
    ASSIGN_OR_RETURN(NodePtr body, ParseBody({}, &end_tag));
    if (!end_tag.empty()) return Error(absl::StrCat("unexpected {% ", end_tag, " %}"));
    // Chains of operators, filters and attributes deepen the tree in loops the recursion
    // bound does not see; the renderer recurses once a level of the tree.
    if (TreeHeight(*body) > max_nesting_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "template line ", LineDeeperThan(*body, max_nesting_),
          ": statements and expressions nested deeper than ", max_nesting_, " levels"));
    }
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
    return absl::InvalidArgumentError(absl::StrCat("template line ", Peek().line, ": ", Av(msg)));
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
  // Counts a level of the parser's recursion while in scope.
  class Nesting {
   public:
    explicit Nesting(int* depth) : depth_(depth) { ++*depth_; }
    ~Nesting() { --*depth_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    int* depth_;
  };
  absl::Status CheckNesting() const {
    if (depth_ <= max_nesting_) return absl::OkStatus();
    return Error(
        absl::StrCat("statements and expressions nested deeper than ", max_nesting_, " levels"));
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
    const Nesting nesting(&depth_);
    RETURN_IF_ERROR(CheckNesting());
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
    const Nesting nesting(&depth_);
    RETURN_IF_ERROR(CheckNesting());
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
    const Nesting nesting(&depth_);
    RETURN_IF_ERROR(CheckNesting());
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
    const Nesting nesting(&depth_);
    RETURN_IF_ERROR(CheckNesting());
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
          n->kids.push_back(
              Literal(Value::Int(std::strtoll(Next().value.c_str(), nullptr, 10)), line));
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
  const int max_nesting_;
  int depth_ = 0;  // Levels of ParseBody, ParseOr, ParseNot and ParseUnary on the stack.
  std::vector<std::pair<std::string, int>> called_functions_;  // Name and line of each call.
  std::set<std::string> macros_;
};

}  // namespace

absl::StatusOr<NodePtr> ParseTokens(std::vector<Token> tokens, const TemplateOptions& options) {
  Parser parser(std::move(tokens), options.max_nesting);
  return parser.ParseTemplate();
}

}  // namespace cairn::infer::text::jinja::internal
