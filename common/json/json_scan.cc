#include "common/json/json_scan.h"

#include <algorithm>
#include <vector>

namespace cairn {

int64_t LargestJsonObjectMembers(absl::string_view text) {
  return ScanJsonObjects(text).largest_members;
}

JsonObjectScan ScanJsonObjects(absl::string_view text) {
  // One entry per open array or object: the members seen so far, or -1 for an array.
  std::vector<int64_t> open;
  JsonObjectScan scan;
  auto close = [&] {
    if (open.back() > 0) scan.squared_members += open.back() * open.back();
    open.pop_back();
  };
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
        ++scan.values_bound;
        break;
      case '[':
        open.push_back(-1);
        ++scan.values_bound;
        break;
      case ',':
        ++scan.values_bound;
        break;
      case '}':
      case ']':
        if (!open.empty()) close();
        break;
      case ':':
        // A member's key ends here: one more member of the innermost open object.
        if (!open.empty() && open.back() >= 0) {
          scan.largest_members = std::max(scan.largest_members, ++open.back());
        }
        break;
      default:
        break;
    }
  }
  while (!open.empty()) close();  // Unterminated objects are parsed as far as they go.
  ++scan.values_bound;            // The last value of each list has no comma after it.
  return scan;
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
