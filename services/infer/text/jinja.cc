#include "services/infer/text/jinja.h"

#include <utility>
#include <vector>

#include "common/status/status_macros.h"
#include "services/infer/text/jinja_syntax.h"

namespace cairn::infer::text::jinja {

Template::Template(const TemplateOptions& options, std::unique_ptr<Node> root)
    : options_(options), root_(std::move(root)) {}

Template::~Template() = default;

absl::StatusOr<std::unique_ptr<Template>> Template::Parse(std::string_view source,
                                                          const TemplateOptions& options) {
  ASSIGN_OR_RETURN(std::vector<internal::Token> tokens, internal::Lex(source, options));
  ASSIGN_OR_RETURN(NodePtr root, internal::ParseTokens(std::move(tokens)));
  return std::unique_ptr<Template>(new Template(options, std::move(root)));
}

absl::StatusOr<std::string> Template::Render(const ValueDict& context) const {
  return internal::RenderTree(*root_, options_, context);
}

}  // namespace cairn::infer::text::jinja
