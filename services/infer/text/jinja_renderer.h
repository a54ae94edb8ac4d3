#ifndef CAIRN_SERVICES_INFER_TEXT_JINJA_RENDERER_H_
#define CAIRN_SERVICES_INFER_TEXT_JINJA_RENDERER_H_

// The Jinja engine's tree walker (not part of the API: include jinja.h). Its methods live in
// two files: jinja_render.cc (scopes, statements, expressions) and jinja_render_filters.cc
// (`in`, the filters and the tests).

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/infer/text/jinja.h"
#include "services/infer/text/jinja_builtins.h"
#include "services/infer/text/jinja_syntax.h"
#include "services/infer/text/jinja_value.h"

namespace cairn::infer::text::jinja::internal {

// Renders one syntax tree once. Thread role: one render on the calling thread; an instance is
// never shared (RenderTree makes one a call).
class Renderer {
 public:
  Renderer(const TemplateOptions& options, const ValueDict& context);
  absl::StatusOr<std::string> Run(const Node& root);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  // --- Scopes.
  Value Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value v);
  absl::Status Emit(const Node& n, std::string_view text);

  // --- Statements (jinja_render.cc).
  absl::StatusOr<Flow> Exec(const Node& n);
  absl::StatusOr<ValueList> Iterate(const Node& n, const Value& v);
  absl::StatusOr<Flow> ExecFor(const Node& n);
  absl::Status BindTargets(const Node& n, const Value& item);
  Value MakeMacro(const Node& n);
  absl::StatusOr<Value> CallMacro(const Node& m, const CallArgs& args);

  // --- Expressions (jinja_render.cc).
  absl::StatusOr<Value> Eval(const Node& n);
  absl::StatusOr<CallArgs> EvalArgs(const Node& n);
  absl::StatusOr<Value> GetAttr(const Node& n, const Value& obj, const std::string& name);
  absl::StatusOr<Value> GetItem(const Node& n, const Value& obj, const Value& key);
  absl::StatusOr<Value> EvalSlice(const Node& n);
  absl::StatusOr<Value> EvalBinary(const Node& n);

  // --- `in`, filters and tests (jinja_render_filters.cc).
  absl::StatusOr<bool> Contains(const Node& n, const Value& container, const Value& item);
  absl::StatusOr<Value> ApplyFilter(const Node& n, const std::string& name, const Value& v,
                                    const CallArgs& args);
  absl::StatusOr<bool> ApplyTest(const Node& n, const std::string& name, const Value& v,
                                 const CallArgs& args);

  const TemplateOptions& options_;
  std::vector<Scope> stack_;
  std::string* out_ = nullptr;
  size_t iterations_ = 0;
  int depth_ = 0;
};

}  // namespace cairn::infer::text::jinja::internal

#endif  // CAIRN_SERVICES_INFER_TEXT_JINJA_RENDERER_H_
