// The only file that includes <regex>: GCC 12 with -fsanitize=address warns, falsely, that
// std::function members of its NFA states may be used uninitialized (-Wmaybe-uninitialized,
// inside libstdc++), so this file is compiled without that warning (CMakeLists.txt).
#include "tests/unit/services/infer/text/ecma_regex_reference.h"

#include <regex>
#include <string>

#include "services/infer/text/unicode.h"

namespace cairn::infer::text::testing {
namespace {

std::wstring Utf32(const std::string& utf8) {
  std::wstring w;
  for (size_t i = 0; i < utf8.size();) {
    int len = 1;
    w.push_back(static_cast<wchar_t>(unicode::DecodeUtf8(utf8, i, &len)));
    i += static_cast<size_t>(len);
  }
  return w;
}

}  // namespace

bool EcmaRegexSearch(const std::string& pattern, const std::string& text) {
  const std::wregex re(Utf32(pattern), std::regex::ECMAScript);
  return std::regex_search(Utf32(text), re);
}

}  // namespace cairn::infer::text::testing
