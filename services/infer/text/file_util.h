#ifndef CAIRN_SERVICES_INFER_TEXT_FILE_UTIL_H_
#define CAIRN_SERVICES_INFER_TEXT_FILE_UTIL_H_

#include <string>

#include "absl/status/statusor.h"

namespace cairn::infer::text {

// Returns the whole content of the file at `path`. Errors: NotFound when it does not exist,
// Unavailable / DataLoss when it cannot be read. Thread-safe.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace cairn::infer::text

#endif  // CAIRN_SERVICES_INFER_TEXT_FILE_UTIL_H_
