#ifndef CAIRN_SERVICES_INFER_MODELS_LOAD_PROGRESS_LOG_H_
#define CAIRN_SERVICES_INFER_MODELS_LOAD_PROGRESS_LOG_H_

#include <functional>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "services/infer/models/load_progress.h"

namespace cairn::infer {

struct LoadProgressLogOptions {
  // Shortest time between a phase's start and its first line, and between two of its lines
  // (its last step prints once it has printed any).
  absl::Duration interval = kDefaultInterval;
  // Where the lines go (the daemon's log, cairn-run's stderr); each line without a newline.
  std::function<void(const std::string&)> write;
  // Where each line also goes as systemd's status (sd_notify "STATUS=..." with
  // "EXTEND_TIMEOUT_USEC=" extend_timeout, so a load that keeps moving is not stopped by the
  // unit's start timeout, and one that stops moving still is). Empty: not told.
  std::function<void(const std::string&)> notify;
  absl::Duration extend_timeout = kDefaultExtendTimeout;
  // The clock (tests pass their own).
  std::function<absl::Time()> now = [] { return absl::Now(); };

  // A line every 5 s: often enough to see a load move, rarely enough not to flood the log.
  static constexpr absl::Duration kDefaultInterval = absl::Seconds(5);
  // Each line gives systemd 120 s more: many intervals, so only a load that has stopped
  // moving (a hung disk) runs out of it.
  static constexpr absl::Duration kDefaultExtendTimeout = absl::Seconds(120);
};

// Turns a model load's progress steps (LoadProgressFn) into log lines such as "loading:
// hashing the weights 12.0 of 160.0 GiB (7 %), 1.90 GiB/s" and "loading: placing the weights
// 18 of 48 layers (37 %)", at most one an interval a phase; a phase that ends within its first
// interval (a small model's) prints nothing.
//
// Thread roles: Report is called on the loading thread only (LoadProgressFn's contract); the
// object is not shared.
class LoadProgressLog {
 public:
  explicit LoadProgressLog(LoadProgressLogOptions options);

  void Report(const LoadProgressStep& step);
  // A LoadProgressFn calling Report; this object must outlive the load.
  LoadProgressFn AsFunction();

  // The line Report writes for `step`, given the phase's rate in units a second (< 0: none).
  static std::string Line(const LoadProgressStep& step, double rate);

 private:
  LoadProgressLogOptions options_;
  std::string phase_;
  absl::Time phase_start_ = absl::InfinitePast();
  absl::Time last_line_ = absl::InfinitePast();
  bool printed_ = false;  // Whether the current phase has printed a line.
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_LOAD_PROGRESS_LOG_H_
