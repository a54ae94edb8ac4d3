#include "common/grpc/signals.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "common/log/log.h"

namespace cairn {
namespace {
sigset_t TerminationSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}
}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t set = TerminationSet();
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

ExitOnTerminationSignal::ExitOnTerminationSignal(const char* phase) {
  sigset_t set = TerminationSet();
  signal_fd_ = ::signalfd(-1, &set, SFD_CLOEXEC);
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (signal_fd_ < 0 || stop_fd_ < 0) {
    // Without the watcher the signal waits for the start-up to end, as it did before.
    CAIRN_LOG(WARNING) << "no early exit on SIGTERM during " << phase << ": errno " << errno;
    return;
  }
  watcher_ = std::thread([this, phase] {
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    while (true) {
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      // The stop request wins over a signal that came with it: that one stays pending.
      if (fds[1].revents != 0) return;
      if (fds[0].revents == 0) continue;
      signalfd_siginfo info;
      if (::read(signal_fd_, &info, sizeof(info)) != static_cast<ssize_t>(sizeof(info))) continue;
      CAIRN_LOG(INFO) << "signal " << info.ssi_signo << " during " << phase << ": exiting";
      std::fflush(nullptr);
      std::_Exit(0);
    }
  });
}

ExitOnTerminationSignal::~ExitOnTerminationSignal() {
  if (watcher_.joinable()) {
    const uint64_t one = 1;
    while (::write(stop_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    watcher_.join();
  }
  if (signal_fd_ >= 0) ::close(signal_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

}  // namespace cairn
