#include "tools/cairnctl/verb_flags.h"

#include <ostream>

#include "absl/status/status.h"

namespace cairn::cairnctl {

bool ParseVerbFlags(FlagSet& flags, const std::vector<std::string>& args, std::ostream& out,
                    std::ostream& err, int* exit_code) {
  absl::StatusOr<std::vector<std::string>> rest = flags.Parse(args);
  if (absl::IsCancelled(rest.status())) {
    out << rest.status().message();
    *exit_code = 0;
    return false;
  }
  if (!rest.ok()) {
    err << rest.status().message() << "\n";
    *exit_code = 2;
    return false;
  }
  if (!rest->empty()) {
    err << "unexpected argument '" << rest->front() << "'\n";
    *exit_code = 2;
    return false;
  }
  return true;
}

}  // namespace cairn::cairnctl
