// A3 (docs/reliability.md): kill -9 the real cairn-cache while it writes checkpoints to disk,
// restart it, and check the oracle every time: every acknowledged checkpoint (published and
// reported on disk after a Flush) is still there and restores byte for byte, every
// checkpoint the daemon lists restores with valid bytes (nothing torn is visible), and every
// restart reaches SERVING.
//
// CI runs CAIRN_KILL_LOOP_KILLS (default 5) kills; the long soak sets it higher. The seed
// (CAIRN_SEED, default 1) is printed for replay.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/services/cache/fake_infer.h"

namespace cairn::cache {
namespace {

using testing::FakeInfer;
using testing::Tokens;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}

// One cairn-cache process.
class DaemonProcess {
 public:
  DaemonProcess(const std::string& dir, const std::string& disk_root) : dir_(dir) {
    std::vector<std::string> args = {std::string(CAIRN_BINARY_DIR) + "/services/cache/cairn-cache",
                                     "--listen=unix:" + dir + "/grpc.sock",
                                     "--arena-socket=" + dir + "/arena.sock",
                                     "--cache-ram-bytes=64Mi",
                                     "--cache-disk=" + disk_root,
                                     "--cache-disk-bytes=1Gi",
                                     "--log-level=warning"};
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> raw;
      for (std::string& a : args) raw.push_back(a.data());
      raw.push_back(nullptr);
      ::execv(raw[0], raw.data());
      ::_exit(127);
    }
  }
  ~DaemonProcess() {
    if (pid_ > 0) Kill();
  }

  // Waits up to `timeout` for SERVING.
  bool WaitServing(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      auto stub = grpc::health::v1::Health::NewStub(NewLocalChannel(address()));
      grpc::health::v1::HealthCheckRequest req;
      grpc::health::v1::HealthCheckResponse resp;
      auto ctx = NewClientContext(absl::Milliseconds(200));
      if (stub->Check(ctx.get(), req, &resp).ok() &&
          resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(50));  // Polling a child process start.
    }
    return false;
  }

  // SIGKILL; returns false if the process had already exited (a failure: it must be alive).
  bool Kill() {
    int status = 0;
    bool alive = ::waitpid(pid_, &status, WNOHANG) == 0;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return alive;
  }

  // SIGTERM, then waits up to `timeout` for the exit. Returns the time it took, or an error
  // if the process did not exit in time (it is killed then) or exited non-zero.
  absl::StatusOr<absl::Duration> Terminate(absl::Duration timeout) {
    const absl::Time start = absl::Now();
    ::kill(pid_, SIGTERM);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() - start > timeout) {
        Kill();
        return absl::DeadlineExceededError("no exit after SIGTERM");
      }
      absl::SleepFor(absl::Milliseconds(10));  // Polling a child process exit.
    }
    pid_ = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return absl::InternalError(absl::StrCat("exit status ", status));
    }
    return absl::Now() - start;
  }

  std::string address() const { return "unix:" + dir_ + "/grpc.sock"; }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

std::set<uint64_t> OnDisk(FakeInfer& infer) {
  v1::ListCheckpointsResponse list;
  grpc::Status s =
      infer.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list);
  EXPECT_TRUE(s.ok()) << s.error_message();
  std::set<uint64_t> out;
  for (const auto& c : list.checkpoints()) {
    if (c.on_disk()) out.insert(c.checkpoint_id());
  }
  return out;
}

TEST(CacheKillLoopTest, AcknowledgedCheckpointsSurviveKillNine) {
  const int kills = EnvInt("CAIRN_KILL_LOOP_KILLS", 5);
  const int seed = EnvInt("CAIRN_SEED", 1);
  std::cout << "kill loop: " << kills << " kills, --seed " << seed << "\n";
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const std::string dir = ::testing::TempDir() + "/cairn-kill-" + std::to_string(::getpid());
  const std::string root = dir + "/disk";
  ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);

  std::map<uint64_t, FakeInfer::SlotState> captured;  // Everything ever captured.
  std::set<uint64_t> acknowledged;
  int restarts = 0;
  size_t unacknowledged_found = 0;  // Published but killed before the flush answered.
  absl::Duration slowest_start;
  for (int cycle = 0; cycle <= kills; ++cycle) {
    const absl::Time started = absl::Now();
    DaemonProcess daemon(dir, root);
    ASSERT_TRUE(daemon.WaitServing(absl::Seconds(20))) << "restart " << cycle << " never served";
    slowest_start = std::max(slowest_start, absl::Now() - started);
    ++restarts;
    FakeInfer infer(daemon.address());
    ASSERT_NO_FATAL_FAILURE(infer.Open());
    infer.set_capture_kind(v1::CAPTURE_KIND_END);
    infer.set_captured(captured);

    // The oracle.
    std::set<uint64_t> listed = OnDisk(infer);
    for (uint64_t id : acknowledged) {
      EXPECT_TRUE(listed.contains(id))
          << "cycle " << cycle << ": acknowledged checkpoint " << id << " lost";
    }
    for (uint64_t id : listed) {
      if (!acknowledged.contains(id)) ++unacknowledged_found;
      ASSERT_TRUE(captured.contains(id)) << "cycle " << cycle << ": unknown checkpoint " << id;
      ASSERT_NO_FATAL_FAILURE(infer.RestoreAndVerify(0, id))
          << "cycle " << cycle << ": checkpoint " << id;
    }
    if (cycle == kills) break;

    // Acknowledged work: two conversations captured, spilled (their slots change hands),
    // flushed, and reported on disk.
    for (int i = 0; i < 2; ++i) {
      const uint32_t conv = static_cast<uint32_t>(cycle * 10 + i + 1);
      const size_t n = 40 + rng() % 200;
      infer.PrefillCold(static_cast<uint32_t>(i), Tokens(conv, n), {n}, conv);
    }
    infer.PrefillCold(0, Tokens(9000 + cycle, 5), {}, 1);
    infer.PrefillCold(1, Tokens(9100 + cycle, 5), {}, 2);
    v1::FlushResponse flushed;
    ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::Flush, v1::FlushRequest(), &flushed).ok());
    for (uint64_t id : OnDisk(infer)) acknowledged.insert(id);
    for (const auto& [id, st] : infer.captured()) captured[id] = st;

    // Unacknowledged work in flight when the kill lands.
    for (int i = 0; i < 3; ++i) {
      const uint32_t conv = static_cast<uint32_t>(cycle * 10 + i + 5);
      const size_t n = 300 + rng() % 300;
      infer.PrefillCold(static_cast<uint32_t>(i % 2), Tokens(conv, n), {n}, conv);
    }
    infer.PrefillCold(0, Tokens(9200 + cycle, 5), {}, 3);
    infer.PrefillCold(1, Tokens(9300 + cycle, 5), {}, 4);
    // The slots hold no borrowed rows now; once idle, the writer runs without yielding.
    infer.ReportIdle(0);
    infer.ReportIdle(1);
    for (const auto& [id, st] : infer.captured()) captured[id] = st;
    absl::SleepFor(absl::Milliseconds(rng() % 400));  // A random point in or after the writes.
    EXPECT_TRUE(daemon.Kill()) << "cycle " << cycle << ": the daemon died before the kill";
  }
  std::cout << "kill loop: " << restarts << " starts (slowest to SERVING "
            << absl::FormatDuration(slowest_start) << "), " << acknowledged.size()
            << " acknowledged checkpoints, all kept; " << unacknowledged_found
            << " unacknowledged ones found complete after a kill\n";
  EXPECT_EQ(restarts, kills + 1);
  EXPECT_GE(acknowledged.size(), static_cast<size_t>(2 * kills));
}

TEST(CacheShutdownTest, SigtermWithASessionConnectedTellsItAndExitsWithinFiveSeconds) {
  const std::string dir = ::testing::TempDir() + "/cairn-term-" + std::to_string(::getpid());
  ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  DaemonProcess daemon(dir, dir + "/disk");
  ASSERT_TRUE(daemon.WaitServing(absl::Seconds(20)));
  FakeInfer infer(daemon.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  infer.PrefillCold(0, Tokens(1, 40), {40}, 1);  // A checkpoint borrowing rows of slot 0.

  absl::StatusOr<absl::Duration> took = daemon.Terminate(absl::Seconds(15));

  ASSERT_TRUE(took.ok()) << took.status();
  EXPECT_LT(*took, absl::Seconds(5));
  EXPECT_EQ(infer.AwaitSessionEnd().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(infer.SawDraining());
}

}  // namespace
}  // namespace cairn::cache
