#include "common/config/runtime_dir.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace cairn {

std::string DefaultRuntimeDir() {
  if (const char* d = std::getenv("RUNTIME_DIRECTORY"); d != nullptr && *d != '\0') return d;
  if (const char* d = std::getenv("XDG_RUNTIME_DIR"); d != nullptr && *d != '\0') {
    return absl::StrCat(d, "/cairn");
  }
  return absl::StrCat("/tmp/cairn-", ::getuid());
}

}  // namespace cairn
