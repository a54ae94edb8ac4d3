#ifndef CAIRN_SERVICES_INFER_TEXT_BOUNDED_JSON_H_
#define CAIRN_SERVICES_INFER_TEXT_BOUNDED_JSON_H_

#include <string_view>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace cairn::infer::text {

// The deepest nesting of arrays and objects accepted in JSON that arrives from outside as text
// (tool definitions, tool-call arguments, what the model writes in a call). Why a bound:
// nlohmann's copy, dump and comparison and the templates' values (jinja::Value::FromJson)
// recurse a level at a time, and a string of 120 KB nests 60,000 levels, enough to overflow a
// thread's stack. Real tool schemas and arguments nest a handful of levels.
inline constexpr int kMaxTextJsonNesting = 64;

// OK if `text` nests at most kMaxTextJsonNesting deep and no object of it has more than
// kMaxOrderedJsonObjectMembers members (common/json/json_scan.h); else InvalidArgument saying
// which. Checks the bounds only, not that `text` is JSON.
absl::Status CheckJsonTextBounds(std::string_view text);

// `text` parsed with its objects' members in order; discarded (is_discarded()) when it is not
// JSON or CheckJsonTextBounds refuses it.
nlohmann::ordered_json ParseBoundedJson(std::string_view text);

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_BOUNDED_JSON_H_
