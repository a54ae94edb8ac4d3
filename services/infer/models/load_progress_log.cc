#include "services/infer/models/load_progress_log.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cairn::infer {

LoadProgressLog::LoadProgressLog(LoadProgressLogOptions options) : options_(std::move(options)) {}

std::string LoadProgressLog::Line(const LoadProgressStep& step, double rate) {
  const int percent = step.total > 0 ? static_cast<int>(100.0 * static_cast<double>(step.done) /
                                                        static_cast<double>(step.total))
                                     : 100;
  std::string line;
  if (step.unit == "bytes") {
    const bool gib = step.total >= (int64_t{1} << 30);
    const double scale = gib ? 1024.0 * 1024.0 * 1024.0 : 1024.0 * 1024.0;
    const char* const unit = gib ? "GiB" : "MiB";
    line = absl::StrFormat("loading: %s %.1f of %.1f %s (%d %%)", step.phase,
                           static_cast<double>(step.done) / scale,
                           static_cast<double>(step.total) / scale, unit, percent);
    if (rate >= 0) absl::StrAppendFormat(&line, ", %.2f %s/s", rate / scale, unit);
  } else {
    line = absl::StrFormat("loading: %s %d of %d %s (%d %%)", step.phase, step.done, step.total,
                           step.unit, percent);
  }
  return line;
}

void LoadProgressLog::Report(const LoadProgressStep& step) {
  const absl::Time now = options_.now();
  if (step.phase != phase_) {
    phase_ = std::string(step.phase);
    phase_start_ = now;
    last_line_ = now;
    printed_ = false;
  }
  // A phase's last step prints where the phase printed before; others once an interval has
  // passed since the phase began or its last line. A phase shorter than an interval prints
  // nothing.
  const bool last = step.done >= step.total;
  if (!(last && printed_) && now - last_line_ < options_.interval) return;
  last_line_ = now;
  printed_ = true;
  const double seconds = absl::ToDoubleSeconds(now - phase_start_);
  const double rate = seconds > 0 ? static_cast<double>(step.done) / seconds : -1.0;
  const std::string line = Line(step, rate);
  if (options_.write != nullptr) options_.write(line);
  if (options_.notify != nullptr) {
    options_.notify(absl::StrCat("STATUS=", line, "\nEXTEND_TIMEOUT_USEC=",
                                 absl::ToInt64Microseconds(options_.extend_timeout)));
  }
}

LoadProgressFn LoadProgressLog::AsFunction() {
  return [this](const LoadProgressStep& step) { Report(step); };
}

}  // namespace cairn::infer
