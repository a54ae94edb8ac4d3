#include "common/status/check.h"

#include <cstdio>
#include <cstdlib>

namespace cairn::check_internal {

void CheckFailed(const char* file, int line, const char* condition) {
  std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, condition);
  std::fflush(stderr);
  std::abort();
}

}  // namespace cairn::check_internal
