#ifndef CAIRN_COMMON_CONFIG_DAEMON_COMMAND_LINE_H_
#define CAIRN_COMMON_CONFIG_DAEMON_COMMAND_LINE_H_

#include <optional>
#include <string>
#include <vector>

#include "common/config/flags.h"

namespace cairn {

// What every daemon's main does with its command line (`args` without the program name):
// parses `flags`; `--help` prints the usage to stdout (exit 0); a parse error, a positional
// argument or a bad `log_level` (the value bound to --log-level, read after parsing) prints
// "PROGRAM: why" to stderr (exit 2); otherwise sets the minimum log level. Returns the exit code
// when main should return now, nullopt when it should go on.
std::optional<int> ParseDaemonCommandLine(FlagSet& flags, const std::vector<std::string>& args,
                                          const std::string& program, const std::string& log_level);

// The arguments of argv[1..argc).
std::vector<std::string> CommandLineArgs(int argc, const char* const* argv);

}  // namespace cairn

#endif  // CAIRN_COMMON_CONFIG_DAEMON_COMMAND_LINE_H_
