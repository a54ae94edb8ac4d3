#include <ostream>
#include <string>
#include <vector>

#include "tools/cairnctl/command.h"

namespace cairn::cairnctl {

const std::vector<Command>& Commands() {
  static const auto* commands = [] {
    auto* all = new std::vector<Command>(OnlineCommands());
    all->insert(all->end(), InferCommands().begin(), InferCommands().end());
    all->push_back(
        {"simulate", "replay a trace through the cache policy and the baselines", &RunSimulate});
    all->push_back({"gen-trace", "write a synthetic coding-agent trace (JSONL)", &RunGenTrace});
    all->push_back({"evaluate", "cairn vs every peer model and the oracle over traces x budgets",
                    &RunEvaluate});
    all->push_back(
        {"compare", "every policy at several RAM budgets, with and without disk", &RunCompare});
    all->push_back({"replay", "send a trace through the gateway and record TTFT, tier and tokens",
                    &RunReplay});
    return all;
  }();
  return *commands;
}

int RunCairnctl(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  auto usage = [&](std::ostream& os) {
    os << "usage: cairnctl VERB [flags]\n\nverbs:\n";
    for (const Command& c : Commands()) os << "  " << c.name << "  " << c.summary << "\n";
    os << "\n'cairnctl VERB --help' describes a verb's flags.\n";
  };
  if (argc < 2) {
    usage(out);
    return 0;
  }
  const std::string verb = argv[1];
  if (verb == "help" || verb == "--help" || verb == "-h") {
    usage(out);
    return 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const Command& c : Commands()) {
    if (verb == c.name) return c.run(args, out, err);
  }
  err << "cairnctl: unknown verb '" << verb << "'\n";
  usage(err);
  return 2;
}

}  // namespace cairn::cairnctl
