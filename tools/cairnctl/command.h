#ifndef CAIRN_TOOLS_CAIRNCTL_COMMAND_H_
#define CAIRN_TOOLS_CAIRNCTL_COMMAND_H_

// cairnctl's verbs. Each verb is one entry of the table in commands.cc with a function that
// takes the arguments after the verb and writes to `out` / `err`, returning the exit code.
// Adding a verb (list, describe, call, status, events, ...) = one function + one table row.

#include <iosfwd>
#include <string>
#include <vector>

namespace cairn::cairnctl {

using CommandFn = int (*)(const std::vector<std::string>& args, std::ostream& out,
                          std::ostream& err);

struct Command {
  const char* name;
  const char* summary;
  CommandFn run;
};

// Every verb, in help order.
const std::vector<Command>& Commands();

// Dispatches `argv[1]` to its verb. `cairnctl`, `cairnctl help` and `cairnctl --help` list the
// verbs (exit 0); an unknown verb is exit 2.
int RunCairnctl(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

// Online verbs over the daemons' gRPC APIs (rpc_commands.cc, infer_commands.cc).
const std::vector<Command>& OnlineCommands();
const std::vector<Command>& InferCommands();

// Offline verbs (simulate_command.cc).
int RunSimulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunGenTrace(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunEvaluate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunCompare(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// `cairnctl replay` (replay_command.cc).
int RunReplay(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace cairn::cairnctl

#endif  // CAIRN_TOOLS_CAIRNCTL_COMMAND_H_
