#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_ECMA_REGEX_REFERENCE_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_ECMA_REGEX_REFERENCE_H_

#include <string>

namespace cairn::infer::text::testing {

// Whether ECMA-262 `pattern` matches somewhere in `text` (both UTF-8), by std::regex's
// ECMAScript grammar over code points (std::wregex on UTF-32): JSON Schema's reading of
// `pattern`, as a reference for json_pattern.h in tests only.
bool EcmaRegexSearch(const std::string& pattern, const std::string& text);

}  // namespace cairn::infer::text::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_ECMA_REGEX_REFERENCE_H_
