#include "tools/cairnctl/verb_flags.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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

absl::Status CheckUtf8(absl::string_view text, absl::string_view what) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const uint8_t c = p[i];
    size_t len = 0;
    uint32_t min = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, min = 0x80, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min = 0x800, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min = 0x10000, cp = c & 0x07;
    }
    bool ok = len != 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are invalid too.
    if (!ok || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is not valid UTF-8 (at byte ", i, ")"));
    }
    i += len;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadUserFile(const std::string& path, absl::string_view what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat(what, ": cannot read ", path, ": ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, " is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(what, ": cannot read ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(what, ": reading ", path, " failed"));
  return text.str();
}

}  // namespace cairn::cairnctl
