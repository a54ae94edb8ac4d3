#ifndef CAIRN_SERVICES_INFER_TEXT_JINJA_H_
#define CAIRN_SERVICES_INFER_TEXT_JINJA_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "services/infer/text/jinja_value.h"

namespace cairn::infer::text::jinja {

struct TemplateOptions {
  // Jinja2's trim_blocks and lstrip_blocks; transformers renders chat templates with both on.
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  // Rendering fails with ResourceExhausted past this much output (a runaway template).
  size_t max_output_bytes = size_t{64} << 20;
  // Rendering fails with ResourceExhausted past this many loop iterations in total.
  size_t max_loop_iterations = size_t{1} << 22;
  // Rendering fails with ResourceExhausted past this macro call depth.
  int max_call_depth = 64;
  // Parse fails with InvalidArgument where statements and expressions nest deeper than this
  // (the parse tree's height, and the parser's own recursion: parentheses, `not`, signs). Both
  // the parser and the renderer recurse a level at a time; a template from a model folder
  // could otherwise nest deep enough to overflow the stack. Qwen3's template and ours parse
  // with a bound of 24.
  int max_nesting = 128;
};

struct Node;

// A parsed Jinja2 template, for the subset of Jinja2 that real chat templates use:
//   statements: if/elif/else, for (tuple targets, `if` filter, else, loop.index/index0/revindex/
//     revindex0/first/last/length/previtem/nextitem/cycle), set (names, namespace attributes,
//     block set), macro (defaults, keyword arguments), break/continue, generation (rendered as
//     its body), comments, whitespace control (-, +, trim_blocks, lstrip_blocks);
//   expressions: literals, lists, tuples, dicts, attribute and item access, slices, calls,
//     filters, tests, `in`/`not in`, arithmetic, comparison, `~`, and/or/not, conditional
//     expressions; str methods startswith, endswith, strip, lstrip, rstrip, split, rsplit,
//     upper, lower (ASCII case mapping), replace, title, capitalize, find, count, splitlines,
//     join; dict methods items, keys, values, get;
//   filters: abs capitalize count d default dictsort e escape first float int items join last
//     length list lower map reject rejectattr replace reverse safe select selectattr sort string
//     title tojson trim unique upper;
//   globals: raise_exception, namespace, range, dict, strftime_now.
// Anything outside the subset (an unknown statement, filter, test, function or method) is an
// InvalidArgument error from Parse, so a template that would render wrongly fails at model
// load. Semantics follow
// Jinja2 with Python values (str() of None is "None", tojson is json.dumps with
// ensure_ascii=False, undefined attributes of undefined values are errors, ...).
//
// Thread-safe: Render may be called concurrently; the template is immutable after Parse.
class Template {
 public:
  // Parses `source`. Errors: InvalidArgument with the line of the first problem.
  static absl::StatusOr<std::unique_ptr<Template>> Parse(std::string_view source,
                                                         const TemplateOptions& options = {});
  ~Template();
  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;

  // Renders with the variables in `context`. Errors: InvalidArgument for type errors and
  // undefined values used as objects, FailedPrecondition for raise_exception (its message is
  // the status message), ResourceExhausted past the limits in TemplateOptions.
  absl::StatusOr<std::string> Render(const ValueDict& context) const;

 private:
  Template(const TemplateOptions& options, std::unique_ptr<Node> root);

  const TemplateOptions options_;
  std::unique_ptr<Node> root_;
};

}  // namespace cairn::infer::text::jinja

#endif  // CAIRN_SERVICES_INFER_TEXT_JINJA_H_
