#ifndef CAIRN_COMMON_PROCESS_CHILD_PROCESS_H_
#define CAIRN_COMMON_PROCESS_CHILD_PROCESS_H_

// A daemon started as a child process (tests and bench commands run the real binaries this
// way): start, wait for its gRPC health to report SERVING, kill or terminate it.

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace cairn {

// Owns one child process; the destructor kills it (SIGKILL) if it still runs.
// Thread-compatible.
class ChildProcess {
 public:
  // `argv[0]` is the binary's path. `address` is the gRPC address its health service answers
  // on.
  ChildProcess(std::vector<std::string> argv, std::string address);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts the process (again, after Kill or Terminate). Internal if fork fails.
  absl::Status Start();
  // Waits until the health service reports SERVING. DeadlineExceeded after `timeout`,
  // FailedPrecondition if the process exited.
  absl::Status WaitServing(absl::Duration timeout);
  // SIGKILL, then reaps it. No-op when not running.
  void Kill();
  // SIGTERM, then reaps it; returns the exit code (-1 if it died of a signal or was not running).
  int Terminate();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }

 private:
  std::vector<std::string> argv_;
  std::string address_;
  pid_t pid_ = -1;
};

}  // namespace cairn

#endif  // CAIRN_COMMON_PROCESS_CHILD_PROCESS_H_
