#ifndef CAIRN_COMMON_LOG_LOG_H_
#define CAIRN_COMMON_LOG_LOG_H_

// One thin logging wrapper (Debian's absl has no logging):
//   CAIRN_LOG(INFO) << "loaded " << n << " tensors";
// Lines go to stderr as "I1129 15:04:05.123456 file.cc:42] message". Levels: INFO, WARNING,
// ERROR. Messages below the threshold set with SetMinLogLevel are not formatted at all.
// Thread-safe: each line is written with one write(2).

#include <sstream>
#include <string>

namespace cairn {

enum class LogLevel { kInfo = 0, kWarning = 1, kError = 2 };

void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
// Parses "info", "warning" or "error" (case-insensitive). Returns false on anything else.
bool ParseLogLevel(const std::string& text, LogLevel* level);

namespace log_internal {

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Lets the macro's ternary have type void on both arms.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace log_internal
}  // namespace cairn

#define CAIRN_LOG_LEVEL_INFO ::cairn::LogLevel::kInfo
#define CAIRN_LOG_LEVEL_WARNING ::cairn::LogLevel::kWarning
#define CAIRN_LOG_LEVEL_ERROR ::cairn::LogLevel::kError

#define CAIRN_LOG(severity)                                                                   \
  (CAIRN_LOG_LEVEL_##severity < ::cairn::MinLogLevel())                                       \
      ? (void)0                                                                               \
      : ::cairn::log_internal::Voidify() &                                                    \
            ::cairn::log_internal::LogMessage(CAIRN_LOG_LEVEL_##severity, __FILE__, __LINE__) \
                .stream()

#endif  // CAIRN_COMMON_LOG_LOG_H_
