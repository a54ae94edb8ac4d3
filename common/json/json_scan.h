#ifndef CAIRN_COMMON_JSON_JSON_SCAN_H_
#define CAIRN_COMMON_JSON_JSON_SCAN_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace cairn {

// The most members any one object of the JSON text `text` has, counted by a scan of its bytes
// (strings and escapes skipped, nothing else checked; call it on text about to be parsed).
//
// Why: nlohmann::ordered_json, which keeps objects' members in their order (schemas, tool
// definitions), inserts each member with a linear search of the ones before it, so parsing an
// object of n members takes n^2 / 2 comparisons: 80,000 members take seconds, the 700,000 an
// 8 MiB body can hold take minutes. Callers parsing untrusted text that way check this first.
int64_t LargestJsonObjectMembers(absl::string_view text);

// What one scan of the JSON text `text` finds of its objects (strings and escapes skipped,
// nothing else checked), for callers that bound an ordered parse of untrusted text both per
// object and in all.
struct JsonObjectScan {
  int64_t largest_members = 0;  // LargestJsonObjectMembers(text).
  // The sum over every object of its members squared: what an ordered parse costs (twice its
  // comparisons). Bounding each object alone leaves this to grow with the number of objects:
  // 190 objects of 4000 members each (3 * 10^9) took 3.3 s to parse.
  int64_t squared_members = 0;
  // A bound on the number of values the text parses to, never below it (one more than its
  // commas and opening brackets): what a parse allocates, about 100 bytes a value for
  // `[[],[],...]`.
  int64_t values_bound = 0;
};
JsonObjectScan ScanJsonObjects(absl::string_view text);

// The deepest nesting of arrays and objects in the JSON text `text` (strings and escapes
// skipped), found by a scan of its bytes that stops once past `limit`: checked before parsing
// untrusted text, whose parser recurses once a level.
int JsonNestingDepth(absl::string_view text, int limit);

// The deepest nesting accepted in a JSON file read from a model's folder or a state directory
// (config.json, tokenizer.json, tokenizer_config.json, an index of shards; real ones nest five
// or six levels). nlohmann parses without recursion but copies, dumps and compares a value a
// level at a time, so a file nested a hundred thousand deep would overflow the stack.
inline constexpr int kMaxFileJsonNesting = 64;

// True when the JSON text `text` nests deeper than kMaxFileJsonNesting: refuse it unparsed.
inline bool FileJsonTooDeep(absl::string_view text) {
  return JsonNestingDepth(text, kMaxFileJsonNesting) > kMaxFileJsonNesting;
}

// The largest object an ordered parse of untrusted text accepts: its quadratic insertion then
// stays within about 10^7 comparisons (a few milliseconds).
inline constexpr int64_t kMaxOrderedJsonObjectMembers = 4096;

// The largest JsonObjectScan::squared_members an ordered parse of a whole untrusted text
// accepts: four objects of kMaxOrderedJsonObjectMembers, which parse in about 75 ms on the
// 2-core development machine. Requests hold far less (a hundred tools of twenty-member schemas
// come to about 4 * 10^4).
inline constexpr int64_t kMaxOrderedJsonSquaredMembers =
    4 * kMaxOrderedJsonObjectMembers * kMaxOrderedJsonObjectMembers;

}  // namespace cairn

#endif  // CAIRN_COMMON_JSON_JSON_SCAN_H_
