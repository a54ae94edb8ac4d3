#include "common/json/json_scan.h"

#include <algorithm>
#include <vector>

namespace cairn {

int64_t LargestJsonObjectMembers(absl::string_view text) {
  // One entry per open array or object: the members seen so far, or -1 for an array.
  std::vector<int64_t> open;
  int64_t largest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // The escaped byte, whatever it is, does not end the string.
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '{':
        open.push_back(0);
        break;
      case '[':
        open.push_back(-1);
        break;
      case '}':
      case ']':
        if (!open.empty()) open.pop_back();
        break;
      case ':':
        // A member's key ends here: one more member of the innermost open object.
        if (!open.empty() && open.back() >= 0) largest = std::max(largest, ++open.back());
        break;
      default:
        break;
    }
  }
  return largest;
}

int JsonNestingDepth(absl::string_view text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // The escaped byte does not end the string.
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace cairn
