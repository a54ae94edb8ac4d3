#ifndef CAIRN_COMMON_GRPC_SIGNALS_H_
#define CAIRN_COMMON_GRPC_SIGNALS_H_

#include <thread>

namespace cairn {

// Blocks SIGTERM and SIGINT in the calling thread (and threads it starts later). Call first
// thing in main(), before any thread starts.
void BlockTerminationSignals();
// Waits for SIGTERM or SIGINT (blocked by BlockTerminationSignals) and returns its number.
int WaitForTerminationSignal();

// While it lives, SIGTERM or SIGINT (blocked by BlockTerminationSignals) ends the process at
// once with exit status 0, after a log line naming `phase`. For a daemon's start-up work that
// has nothing to drain and may take minutes (loading a model's weights, recovering the disk
// tier, which is crash-safe by design): without it the blocked signal waits until that work is
// done, and systemd's stop waits with it until TimeoutStopSec ends in SIGKILL. Destroying it
// hands the signals back: one that arrives later stays pending for WaitForTerminationSignal.
//
// Thread roles: created and destroyed by one thread (main's); owns a watcher thread that only
// waits for the signal or for the destructor.
class ExitOnTerminationSignal {
 public:
  explicit ExitOnTerminationSignal(const char* phase);
  ~ExitOnTerminationSignal();
  ExitOnTerminationSignal(const ExitOnTerminationSignal&) = delete;
  ExitOnTerminationSignal& operator=(const ExitOnTerminationSignal&) = delete;

 private:
  int signal_fd_ = -1;  // The watcher's: reads a signal only when one is pending.
  int stop_fd_ = -1;    // An eventfd the destructor writes to end the watcher.
  std::thread watcher_;
};

}  // namespace cairn

#endif  // CAIRN_COMMON_GRPC_SIGNALS_H_
