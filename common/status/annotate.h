#ifndef CAIRN_COMMON_STATUS_ANNOTATE_H_
#define CAIRN_COMMON_STATUS_ANNOTATE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cairn {

// Returns `status` with `context` prepended to its message ("context: message"), keeping the
// code and payloads. An ok status is returned unchanged.
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok() || context.empty()) return status;
  absl::Status annotated(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&annotated](absl::string_view url, const absl::Cord& payload) {
    annotated.SetPayload(url, payload);
  });
  return annotated;
}

}  // namespace cairn

#endif  // CAIRN_COMMON_STATUS_ANNOTATE_H_
