#include "common/log/log.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cairn {
namespace {
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

void SetMinLogLevel(LogLevel level) { g_min_level.store(static_cast<int>(level)); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(g_min_level.load()); }

bool ParseLogLevel(const std::string& text, LogLevel* level) {
  std::string t = absl::AsciiStrToLower(text);
  if (t == "info") {
    *level = LogLevel::kInfo;
  } else if (t == "warning") {
    *level = LogLevel::kWarning;
  } else if (t == "error") {
    *level = LogLevel::kError;
  } else {
    return false;
  }
  return true;
}

namespace log_internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  static constexpr char kLetters[] = {'I', 'W', 'E'};
  stream_ << kLetters[static_cast<int>(level_)]
          << absl::FormatTime("%m%d %H:%M:%E6S", absl::Now(), absl::LocalTimeZone()) << ' '
          << Basename(file) << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  std::string line = stream_.str();
  // One write per line keeps lines from different threads whole.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace log_internal
}  // namespace cairn
