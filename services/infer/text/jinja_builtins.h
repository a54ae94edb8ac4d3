#ifndef CAIRN_SERVICES_INFER_TEXT_JINJA_BUILTINS_H_
#define CAIRN_SERVICES_INFER_TEXT_JINJA_BUILTINS_H_

// What the Jinja renderer computes on values without walking the tree: Python's string methods
// and slicing, ordering, dict methods and the global functions (not part of the API: include
// jinja.h).

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/infer/text/jinja_syntax.h"
#include "services/infer/text/jinja_value.h"

namespace cairn::infer::text::jinja::internal {

// One level of variables, in the order they were set.
using Scope = std::vector<std::pair<std::string, Value>>;

// InvalidArgument naming the template line of `n`.
absl::Status TypeError(const Node& n, absl::string_view msg);

// Python's name of the type of `v` ("str", "NoneType", ...), for messages.
const char* KindName(const Value& v);

// Python's str.isspace for one code point.
bool IsPySpace(uint32_t cp);

// Code point boundaries of `s`: offsets of each code point, plus s.size().
std::vector<size_t> CodePointOffsets(const std::string& s);

// Python's slice index adjustment; fills the selected indices of a sequence of `len` items.
absl::StatusOr<std::vector<int64_t>> SliceIndices(int64_t len, const Value& start,
                                                  const Value& stop, const Value& step);

// Python's str.strip / lstrip / rstrip (`chars_arg` null or None: whitespace).
std::string PyStrip(const std::string& s, const Value* chars_arg, bool left, bool right);

// Python's str.split / rsplit (`sep_arg` null or None: runs of whitespace).
std::vector<std::string> PySplit(const std::string& s, const Value* sep_arg, int64_t maxsplit,
                                 bool from_right);

Value StringList(const std::vector<std::string>& parts);

// ASCII upper or lower case, as Jinja's filters on the templates we render need.
std::string AsciiCase(std::string s, bool upper);

std::string HtmlEscape(const std::string& s);

// Python ordering for sort and comparisons: numbers with numbers, strings with strings, lists
// item by item. -1, 0 or 1; InvalidArgument for values Python cannot order.
absl::StatusOr<int> Compare(const Value& a, const Value& b);

// The bound method `name` of a dict (get, keys, values, items).
absl::StatusOr<Value> DictMethod(const Value& obj, const std::string& name);

// The bound method `name` of a string; Undefined for a method str lacks.
absl::StatusOr<Value> StringMethod(const Node& n, const Value& obj, const std::string& name);

// `s` with the first `count` occurrences of `from` replaced (count < 0: all).
std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count);

// Adds raise_exception, namespace, dict, range and strftime_now to `globals`.
void AddGlobals(Scope* globals);

}  // namespace cairn::infer::text::jinja::internal

#endif  // CAIRN_SERVICES_INFER_TEXT_JINJA_BUILTINS_H_
