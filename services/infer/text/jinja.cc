#include "services/infer/text/jinja.h"

#include <utility>
#include <vector>

#include "common/status/status_macros.h"
#include "services/infer/text/jinja_syntax.h"

namespace cairn::infer::text::jinja {

Template::Template(const TemplateOptions& options, std::unique_ptr<Node> root)
    : options_(options), root_(std::move(root)) {}

Template::~Template() = default;

Node::~Node() {
  std::vector<NodePtr> pending;
  for (NodePtr& k : kids) {
    if (k != nullptr) pending.push_back(std::move(k));
  }
  while (!pending.empty()) {
    NodePtr n = std::move(pending.back());
    pending.pop_back();
    for (NodePtr& k : n->kids) {
      if (k != nullptr) pending.push_back(std::move(k));
    }
    // `n` goes here with no children left to free.
  }
}

absl::StatusOr<std::unique_ptr<Template>> Template::Parse(std::string_view source,
                                                          const TemplateOptions& options) {
  ASSIGN_OR_RETURN(std::vector<internal::Token> tokens, internal::Lex(source, options));
  ASSIGN_OR_RETURN(NodePtr root, internal::ParseTokens(std::move(tokens), options));
  return std::unique_ptr<Template>(new Template(options, std::move(root)));
}

absl::StatusOr<std::string> Template::Render(const ValueDict& context) const {
  return internal::RenderTree(*root_, options_, context);
}

}  // namespace cairn::infer::text::jinja
