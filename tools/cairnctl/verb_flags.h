#ifndef CAIRN_TOOLS_CAIRNCTL_VERB_FLAGS_H_
#define CAIRN_TOOLS_CAIRNCTL_VERB_FLAGS_H_

#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/flags.h"

namespace cairn::cairnctl {

// Parses an offline verb's `args` into `flags`; on --help prints usage and sets `*exit_code`
// to 0, on an error (or a positional argument) prints it and sets 2. Returns true when the
// verb should go on.
bool ParseVerbFlags(FlagSet& flags, const std::vector<std::string>& args, std::ostream& out,
                    std::ostream& err, int* exit_code);

// OK when `text` is valid UTF-8, else InvalidArgument naming `what` and the byte offset. A
// string the user gives that travels in a protobuf string or a JSON document must pass: the
// server cannot parse it otherwise, and nlohmann's dump() throws on it.
absl::Status CheckUtf8(absl::string_view text, absl::string_view what);

// The contents of the file a user named (`what` names the flag in messages): InvalidArgument
// for a directory, NotFound (with the system's reason) for a file that cannot be opened,
// DataLoss when reading fails.
absl::StatusOr<std::string> ReadUserFile(const std::string& path, absl::string_view what);

}  // namespace cairn::cairnctl

#endif  // CAIRN_TOOLS_CAIRNCTL_VERB_FLAGS_H_
