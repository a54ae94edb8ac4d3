#ifndef CAIRN_TESTS_UNIT_TOOLS_CAIRNCTL_RUN_CAIRNCTL_H_
#define CAIRN_TESTS_UNIT_TOOLS_CAIRNCTL_RUN_CAIRNCTL_H_

// cairnctl's entry point run in-process on a command line, for the unit tests of its verbs.

#include <sstream>
#include <string>
#include <vector>

#include "tools/cairnctl/command.h"

namespace cairn::cairnctl::testing {

struct Outcome {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs `cairnctl ARGS...` and returns its exit code and what it printed.
inline Outcome Cairnctl(std::vector<std::string> args) {
  args.insert(args.begin(), "cairnctl");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = RunCairnctl(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

}  // namespace cairn::cairnctl::testing

#endif  // CAIRN_TESTS_UNIT_TOOLS_CAIRNCTL_RUN_CAIRNCTL_H_
