// What an operator meets with a wrong value in a flag or config file: each daemon binary must
// exit 2 at once with a message naming the flag, never abort, hang, eat the machine's memory or
// run with a silent fallback; a second instance on a running daemon's sockets must refuse and
// leave the first one serving.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/process/child_process.h"
#include "gtest/gtest.h"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"

namespace cairn {
namespace {

constexpr char kCache[] = "services/cache/cairn-cache";
constexpr char kInfer[] = "services/infer/daemon/cairn-infer";
constexpr char kGateway[] = "services/gateway/cairn-gateway";

struct Outcome {
  int exit_code = -1;  // -1: killed by a signal (an abort, or the time limit).
  std::string output;  // stdout and stderr together.
};

std::string Quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Runs the build tree's `binary` with `args`, killed after 60 s (a hang fails the test).
Outcome RunDaemon(const std::string& binary, const std::vector<std::string>& args) {
  std::string cmd = absl::StrCat("timeout -s KILL 60 ", CAIRN_BINARY_DIR, "/", binary);
  for (const std::string& a : args) absl::StrAppend(&cmd, " ", Quote(a));
  absl::StrAppend(&cmd, " 2>&1 </dev/null");
  Outcome outcome;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return outcome;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) outcome.output.append(buffer, n);
  const int status = ::pclose(pipe);
  // timeout(1) exits 137 after SIGKILL, and a shell reports 128 + N for a child killed by N.
  if (WIFEXITED(status) && WEXITSTATUS(status) < 128) outcome.exit_code = WEXITSTATUS(status);
  return outcome;
}

std::string TestDir(const std::string& name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/cairn-flags-", name, "-", ::getpid());
  EXPECT_EQ(std::system(absl::StrCat("rm -rf ", dir, " && mkdir -p ", dir).c_str()), 0);
  return dir;
}

struct BadFlag {
  const char* binary;
  std::vector<std::string> args;
  std::string fragment;  // The message names the flag.
};

TEST(DaemonFlagsTest, BadValuesExitTwoNamingTheFlag) {
  const std::string dir = TestDir("bad");
  const std::string cache_base = absl::StrCat("--listen=unix:", dir, "/c.sock");
  const std::string arena = absl::StrCat("--arena-socket=", dir, "/a.sock");
  const std::string infer_listen = absl::StrCat("--listen=unix:", dir, "/i.sock");
  const std::string model = absl::StrCat("--model=", dir, "/no-model");
  const std::vector<BadFlag> cases = {
      // std::thread would throw and abort the daemon.
      {kCache, {cache_base, arena, "--io-threads=100000000"}, "--io-threads"},
      // The arena is sparse: a typo of Ti for Gi started, and ended in the OOM killer.
      {kCache, {cache_base, arena, "--cache-ram-bytes=1024Ti"}, "--cache-ram-bytes"},
      {kCache, {cache_base, arena, "--disk-load-threads=0"}, "--disk-load-threads"},
      {kCache, {cache_base, arena, "--max-queued-calls=-1"}, "--max-queued-calls"},
      {kCache, {cache_base, arena, "--heartbeat-interval=0"}, "--heartbeat-interval"},
      {kCache, {cache_base, arena, "--tick=-1s"}, "--tick"},
      {kCache, {cache_base, arena, "--grid-budget-share=nan"}, "--grid-budget-share"},
      {kCache, {cache_base, arena, "--edit-reach-share=-1"}, "--edit-reach-share"},
      {kInfer, {infer_listen, model, "--threads=100000"}, "--threads"},
      {kInfer, {infer_listen, model, "--io-threads=0"}, "--io-threads"},
      // A negative context used to mean the model's default.
      {kInfer, {infer_listen, model, "--context=-5"}, "--context"},
      {kInfer, {infer_listen, model, "--drain-timeout=-1s"}, "--drain-timeout"},
      // The listen address is checked before the model folder is read (loading takes minutes).
      {kInfer, {"--listen=garbage", model}, "--listen"},
      {kGateway, {"--infer=unix:/nonexistent", "--http-threads=1000000"}, "--http-threads"},
      // Polled the daemons in a busy loop.
      {kGateway, {"--infer=unix:/nonexistent", "--refresh-interval=0"}, "--refresh-interval"},
      {kGateway, {"--infer=unix:/nonexistent", "--rpc-timeout=0"}, "--rpc-timeout"},
      {kGateway, {"--infer=unix:/nonexistent", "--retry-after=-1"}, "--retry-after"},
      // Peer addresses: gRPC took these and retried a DNS lookup of "garbage" (port 443) or an
      // empty socket path for ever.
      {kInfer, {infer_listen, model, "--cache=garbage"}, "--cache: peer address"},
      {kInfer, {infer_listen, model, "--cache=unix:"}, "--cache: peer address"},
      {kGateway, {"--infer=garbage"}, "--infer: peer address"},
      {kGateway, {"--infer=unix:/nonexistent,localhost:0"}, "--infer: peer address"},
      {kGateway, {"--infer=unix:/nonexistent", "--cache=garbage"}, "--cache: peer address"},
      {kGateway, {"--infer=unix:/nonexistent", "--cache=unix:"}, "--cache: peer address"},
  };
  for (const BadFlag& c : cases) {
    const Outcome outcome = RunDaemon(c.binary, c.args);

    EXPECT_EQ(outcome.exit_code, 2) << c.binary << " " << c.args.back() << ": " << outcome.output;
    EXPECT_TRUE(absl::StrContains(outcome.output, c.fragment))
        << c.binary << " " << c.args.back() << ": " << outcome.output;
  }
}

TEST(DaemonFlagsTest, MoreSlotMemoryThanTheMachineHoldsIsRefusedBeforeAllocating) {
  const std::string dir = TestDir("slots");
  absl::StatusOr<infer::RandomCheckpointOptions> preset = infer::RandomCheckpointPreset("dense");
  ASSERT_TRUE(preset.ok()) << preset.status();
  ASSERT_TRUE(infer::WriteRandomCheckpoint(dir + "/model", *preset).ok());

  const Outcome outcome = RunDaemon(
      kInfer, {absl::StrCat("--listen=unix:", dir, "/i.sock"),
               absl::StrCat("--model=", dir, "/model"), "--threads=1", "--sessions=100000000"});

  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(absl::StrContains(outcome.output, "--sessions")) << outcome.output;
}

TEST(DaemonFlagsTest, ASecondCacheDaemonOnTheSameSocketsRefusesAndTheFirstKeepsServing) {
  const std::string dir = TestDir("twice");
  const std::vector<std::string> args = {absl::StrCat("--listen=unix:", dir, "/c.sock"),
                                         absl::StrCat("--arena-socket=", dir, "/a.sock"),
                                         "--cache-ram-bytes=64Mi"};
  std::vector<std::string> argv = {absl::StrCat(CAIRN_BINARY_DIR, "/", kCache)};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess first(argv, absl::StrCat("unix:", dir, "/c.sock"));
  ASSERT_TRUE(first.Start().ok());
  ASSERT_TRUE(first.WaitServing(absl::Seconds(30)).ok());

  const Outcome second = RunDaemon(kCache, args);

  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_TRUE(absl::StrContains(second.output, "another process is listening")) << second.output;
  EXPECT_EQ(::access((dir + "/c.sock").c_str(), F_OK), 0);
  EXPECT_EQ(::access((dir + "/a.sock").c_str(), F_OK), 0);
  EXPECT_TRUE(first.WaitServing(absl::Seconds(10)).ok());
  EXPECT_EQ(first.Terminate(), 0);
}

// SIGTERM (systemctl stop) or Ctrl-C while cairn-infer loads a model (minutes for a large one)
// ends it at once, not after the load or systemd's TimeoutStopSec. The load here never ends:
// config.json is a FIFO nobody writes.
TEST(DaemonFlagsTest, ASignalDuringTheModelLoadEndsTheDaemonAtOnce) {
  const std::string dir = TestDir("load");
  ASSERT_EQ(
      std::system(
          absl::StrCat("mkdir -p ", dir, "/model && mkfifo ", dir, "/model/config.json").c_str()),
      0);
  const std::string binary = absl::StrCat(CAIRN_BINARY_DIR, "/", kInfer);
  const std::string listen = absl::StrCat("--listen=unix:", dir, "/i.sock");
  const std::string model = absl::StrCat("--model=", dir, "/model");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl(binary.c_str(), binary.c_str(), listen.c_str(), model.c_str(), "--threads=1",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  absl::SleepFor(absl::Milliseconds(500));  // Into the load (a child process: nothing to poll).

  ::kill(pid, SIGTERM);

  int status = 0;
  pid_t reaped = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((reaped = ::waitpid(pid, &status, WNOHANG)) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (reaped == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  EXPECT_EQ(reaped, pid) << "cairn-infer still loading 10 s after SIGTERM";
  // Nothing was served yet: ended by the signal itself (the kernel hands it to a thread that
  // does not block it, OpenBLAS's) or a clean exit.
  EXPECT_TRUE((WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) ||
              (WIFEXITED(status) && WEXITSTATUS(status) == 0))
      << status;
}

}  // namespace
}  // namespace cairn
