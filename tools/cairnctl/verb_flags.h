#ifndef CAIRN_TOOLS_CAIRNCTL_VERB_FLAGS_H_
#define CAIRN_TOOLS_CAIRNCTL_VERB_FLAGS_H_

#include <iosfwd>
#include <string>
#include <vector>

#include "common/config/flags.h"

namespace cairn::cairnctl {

// Parses an offline verb's `args` into `flags`; on --help prints usage and sets `*exit_code`
// to 0, on an error (or a positional argument) prints it and sets 2. Returns true when the
// verb should go on.
bool ParseVerbFlags(FlagSet& flags, const std::vector<std::string>& args, std::ostream& out,
                    std::ostream& err, int* exit_code);

}  // namespace cairn::cairnctl

#endif  // CAIRN_TOOLS_CAIRNCTL_VERB_FLAGS_H_
