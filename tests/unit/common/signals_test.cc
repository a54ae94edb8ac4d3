#include "common/grpc/signals.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace cairn {
namespace {

// Runs `child` in a forked process (signals blocked as a daemon's main blocks them), waits for
// its "ready" byte, sends SIGTERM and returns the child's wait status. The child must exit on
// its own within about ten seconds of the signal; past that it is killed (status SIGKILL).
template <typename Child>
int StatusAfterSigterm(Child child) {
  int ready[2];
  EXPECT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    BlockTerminationSignals();
    child(ready[1]);
    std::_Exit(3);  // Not reached by the cases below.
  }
  ::close(ready[1]);
  char byte = 0;
  EXPECT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  EXPECT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  for (int i = 0; i < 1000; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    ::usleep(10000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return status;
}

void SignalReady(int fd) {
  const char byte = 1;
  (void)::write(fd, &byte, 1);
}

TEST(ExitOnTerminationSignalTest, SigtermDuringStartUpExitsAtOnceWithStatusZero) {
  const int status = StatusAfterSigterm([](int ready) {
    ExitOnTerminationSignal guard("a test's start-up");
    SignalReady(ready);
    ::sleep(60);  // Start-up work that would hold the signal for a minute.
    std::_Exit(4);
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ExitOnTerminationSignalTest, SignalsAfterTheGuardAreLeftForWaitForTerminationSignal) {
  const int status = StatusAfterSigterm([](int ready) {
    { ExitOnTerminationSignal guard("a test's start-up"); }
    SignalReady(ready);
    std::_Exit(100 + WaitForTerminationSignal());
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 100 + SIGTERM);
}

TEST(ExitOnTerminationSignalTest, ASignalPendingBeforeTheGuardEndsTheStartUp) {
  const int status = StatusAfterSigterm([](int ready) {
    SignalReady(ready);
    // Wait for the signal to be pending before the guard exists.
    sigset_t pending;
    for (int i = 0; i < 1000; ++i) {
      sigpending(&pending);
      if (sigismember(&pending, SIGTERM) == 1) break;
      ::usleep(10000);
    }
    ExitOnTerminationSignal guard("a test's start-up");
    ::sleep(60);
    std::_Exit(4);
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace cairn
