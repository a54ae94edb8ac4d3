#include "services/infer/text/bounded_json.h"

#include "absl/strings/str_cat.h"
#include "common/json/json_scan.h"

namespace cairn::infer::text {

absl::Status CheckJsonTextBounds(std::string_view text_in) {
  const absl::string_view text(text_in.data(), text_in.size());
  if (JsonNestingDepth(text, kMaxTextJsonNesting) > kMaxTextJsonNesting) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON nested deeper than ", kMaxTextJsonNesting, " levels"));
  }
  // An ordered parse is quadratic in an object's members.
  if (LargestJsonObjectMembers(text) > kMaxOrderedJsonObjectMembers) {
    return absl::InvalidArgumentError(absl::StrCat("JSON with an object of more than ",
                                                   kMaxOrderedJsonObjectMembers, " members"));
  }
  return absl::OkStatus();
}

nlohmann::ordered_json ParseBoundedJson(std::string_view text) {
  if (!CheckJsonTextBounds(text).ok()) return nlohmann::ordered_json::value_t::discarded;
  return nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace cairn::infer::text
