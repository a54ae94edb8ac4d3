#ifndef CAIRN_SERVICES_INFER_TEXT_JINJA_SYNTAX_H_
#define CAIRN_SERVICES_INFER_TEXT_JINJA_SYNTAX_H_

// The Jinja engine's insides, shared by its lexer, parser and renderer (not part of the API:
// include jinja.h). The lexer turns a template into tokens, the parser tokens into a syntax
// tree, the renderer walks the tree; Template (jinja.cc) runs the three.

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "services/infer/text/jinja.h"
#include "services/infer/text/jinja_value.h"

namespace cairn::infer::text::jinja {

// Syntax tree.
struct Node {
  Node() = default;
  // Frees the subtree in a loop rather than by recursion, so that a tree of any depth (one
  // being built when the parser refuses it, say) cannot overflow the stack.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  enum class Kind {
    // Expressions.
    kLiteral,
    kName,
    kAttr,
    kItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNeg,
    kPos,
    kNot,
    kBinary,
    kAnd,
    kOr,
    kCond,
    kList,
    kTuple,
    kDict,
    // Statements.
    kBlock,
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string name;                         // Identifier, operator, filter/test/attr name, text.
  Value literal;                            // kLiteral.
  std::vector<std::unique_ptr<Node>> kids;  // Operands, arguments, bodies (may hold nullptr).
  std::vector<std::string> names;           // Keyword names of arguments, targets, parameters.
  bool flag = false;                        // kTest: negated; kIf: has else.
};

using NodePtr = std::unique_ptr<Node>;

namespace internal {

inline NodePtr MakeNode(Node::Kind kind, int line) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->line = line;
  return n;
}

// Filters, tests, global functions and value methods the renderer implements; the parser
// rejects anything else at load so that a template we cannot render fails early.
const std::set<std::string>& KnownFilters();
const std::set<std::string>& KnownTests();
const std::set<std::string>& KnownGlobals();
const std::set<std::string>& KnownMethods();

struct Token {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Type type;
  std::string value;
  int line;
};

// Tokens of `source` (jinja_lexer.cc). Errors: InvalidArgument with the line.
absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const TemplateOptions& options);

// The syntax tree of `tokens` (jinja_parser.cc). Errors: InvalidArgument with the line.
absl::StatusOr<NodePtr> ParseTokens(std::vector<Token> tokens, const TemplateOptions& options);

// Renders `root` with `context` (jinja_render.cc); errors as Template::Render.
absl::StatusOr<std::string> RenderTree(const Node& root, const TemplateOptions& options,
                                       const ValueDict& context);

}  // namespace internal
}  // namespace cairn::infer::text::jinja

#endif  // CAIRN_SERVICES_INFER_TEXT_JINJA_SYNTAX_H_
