#include "common/config/daemon_command_line.h"

#include <iostream>

#include "common/log/log.h"

namespace cairn {

std::optional<int> ParseDaemonCommandLine(FlagSet& flags, const std::vector<std::string>& args,
                                          const std::string& program,
                                          const std::string& log_level) {
  absl::StatusOr<std::vector<std::string>> rest = flags.Parse(args);
  if (absl::IsCancelled(rest.status())) {  // --help
    std::cout << rest.status().message();
    return 0;
  }
  if (!rest.ok()) {
    std::cerr << program << ": " << rest.status().message() << "\n";
    return 2;
  }
  if (!rest->empty()) {
    std::cerr << program << ": unexpected argument \"" << rest->front() << "\"\n";
    return 2;
  }
  LogLevel level;
  if (!ParseLogLevel(log_level, &level)) {
    std::cerr << program << ": --log-level must be info, warning or error\n";
    return 2;
  }
  SetMinLogLevel(level);
  return std::nullopt;
}

std::vector<std::string> CommandLineArgs(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return args;
}

}  // namespace cairn
