// cairnctl: wiring only; the verbs live in cairn::cairnctl_commands.
#include <iostream>

#include "tools/cairnctl/command.h"

int main(int argc, char** argv) {
  return cairn::cairnctl::RunCairnctl(argc, argv, std::cout, std::cerr);
}
