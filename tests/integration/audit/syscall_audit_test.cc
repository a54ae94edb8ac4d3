// The syscall audit (reliability plan A5, F2): the real cairn-cache runs under strace while a
// client publishes checkpoints to its disk tier, deletes some and restarts it; the recorded
// calls must follow the publication order of docs/disk-format.md (data fsynced, their
// directories fsynced, manifest written, fsynced, renamed, manifests/ fsynced, catalog written
// with sync, then acknowledged) and the deletion order (catalog entry, then manifest, then
// manifests/ fsynced), and nothing may be opened outside the state and runtime directories
// but the system files any process reads.
//
// CI runs CAIRN_AUDIT_PUBLISHES (default 24) publishes and deletes all but 4 of them; skipped
// where strace is not installed (tools/bootstrap installs it).

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/process/child_process.h"
#include "common/status/status_macros.h"
#include "gtest/gtest.h"
#include "tests/integration/audit/strace_audit.h"
#include "tests/integration/services/cache/fake_infer.h"

namespace cairn::audit {
namespace {

using cache::testing::FakeInfer;
using cache::testing::Tokens;
namespace v1 = cache::v1;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}

double NowSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

// cairn-cache under strace. The daemon is strace's child: it is stopped with SIGTERM to its
// own pid, after which strace exits too.
class TracedDaemon {
 public:
  TracedDaemon(const std::string& runtime_dir, const std::string& state_dir,
               const std::string& log_prefix)
      : process_(Argv(runtime_dir, state_dir, log_prefix), "unix:" + runtime_dir + "/grpc.sock") {}
  // After a failed assertion: the daemon must not outlive strace.
  ~TracedDaemon() {
    if (!process_.running()) return;
    if (const pid_t daemon = DaemonPid(); daemon > 0) ::kill(daemon, SIGKILL);
    process_.Kill();
  }

  absl::Status Start() {
    RETURN_IF_ERROR(process_.Start());
    return process_.WaitServing(absl::Seconds(60));
  }
  const std::string& address() const { return process_.address(); }

  // SIGTERMs the daemon and waits for strace to finish. Returns the daemon's pid (0 if none).
  pid_t Stop() {
    const pid_t daemon = DaemonPid();
    if (daemon > 0) ::kill(daemon, SIGTERM);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (daemon > 0 && ::kill(daemon, 0) == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));  // Polling another process's exit.
    }
    process_.Terminate();
    return daemon;
  }

 private:
  static std::vector<std::string> Argv(const std::string& runtime_dir, const std::string& state_dir,
                                       const std::string& log) {
    std::vector<std::string> argv = StraceArgs(log);
    argv.push_back("--");
    for (std::string a :
         {std::string(CAIRN_BINARY_DIR) + "/services/cache/cairn-cache",
          "--listen=unix:" + runtime_dir + "/grpc.sock",
          "--arena-socket=" + runtime_dir + "/arena.sock", std::string("--cache-ram-bytes=64Mi"),
          "--cache-disk=" + state_dir, std::string("--cache-disk-bytes=1Gi"),
          std::string("--log-level=warning")}) {
      argv.push_back(a);
    }
    return argv;
  }

  // strace's child: the daemon.
  pid_t DaemonPid() const {
    const std::string path =
        absl::StrCat("/proc/", process_.pid(), "/task/", process_.pid(), "/children");
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) return 0;
    long pid = 0;
    const int n = std::fscanf(f, "%ld", &pid);
    std::fclose(f);
    return n == 1 ? static_cast<pid_t>(pid) : 0;
  }

  ChildProcess process_;
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

void PrintReport(const std::string& what, const AuditReport& r) {
  std::cout << "syscall audit (" << what << "): " << r.publishes << " publishes, " << r.deletes
            << " deletes, " << r.directory_syncs << " directory fsyncs; " << r.violations.size()
            << " order violations, " << r.outside.size()
            << " paths outside the state and runtime directories\n";
  for (const std::string& v : r.violations) std::cout << "  " << v << "\n";
  for (const std::string& v : r.outside) std::cout << "  outside: " << v << "\n";
}

TEST(SyscallAuditTest, PublishDeleteAndRestartFollowThePublicationOrder) {
  if (FindStrace().empty()) GTEST_SKIP() << "strace is not installed (tools/bootstrap installs it)";
  const int publishes = EnvInt("CAIRN_AUDIT_PUBLISHES", 24);
  const int deletes = std::max(1, publishes - 4);
  const std::string dir = std::filesystem::weakly_canonical(::testing::TempDir()).string() +
                          "/cairn-audit-" + std::to_string(::getpid());
  const std::string run = dir + "/run";
  const std::string state = dir + "/state";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  ASSERT_TRUE(std::filesystem::create_directories(run, ec)) << ec.message();
  AuditOptions options;
  options.state_dir = state;
  options.runtime_dir = run;

  // Run 1: publishes, each acknowledged by a Flush, then deletes.
  {
    TracedDaemon daemon(run, state, dir + "/first");
    const absl::Status started = daemon.Start();
    ASSERT_TRUE(started.ok()) << started;
    FakeInfer infer(daemon.address());
    ASSERT_NO_FATAL_FAILURE(infer.Open());
    infer.set_capture_kind(v1::CAPTURE_KIND_END);
    for (int i = 0; i < publishes; ++i) {
      const uint32_t conv = static_cast<uint32_t>(i + 1);
      const size_t n = 40 + 17 * static_cast<size_t>(i % 7);
      infer.PrefillCold(static_cast<uint32_t>(i % 2), Tokens(conv, n), {n}, conv);
      // Another conversation takes the slot: the borrowed rows are spilled, so the checkpoint
      // can be written.
      infer.PrefillCold(static_cast<uint32_t>(i % 2), Tokens(1000 + conv, 5), {}, 1000 + conv);
      v1::FlushResponse flushed;
      ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::Flush, v1::FlushRequest(), &flushed).ok());
      const double now = NowSeconds();
      for (uint64_t id : OnDisk(infer)) options.acknowledged.emplace(id, now);
    }
    // Nearly every capture reaches the disk (the tier may skip one it finds redundant).
    ASSERT_GE(options.acknowledged.size(), static_cast<size_t>(publishes * 3 / 4));
    for (const auto& [id, when] : options.acknowledged) {
      (void)when;
      if (options.deleted.size() >= static_cast<size_t>(deletes)) break;
      v1::EvictRequest evict;
      evict.set_checkpoint_id(id);
      evict.set_include_disk(true);
      v1::EvictResponse evicted;
      ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::Evict, evict, &evicted).ok());
      options.deleted.emplace(id, NowSeconds());
    }
    infer.EndSession();
    ASSERT_GT(daemon.Stop(), 0);
  }
  absl::StatusOr<std::vector<Syscall>> first = ReadStraceLogs(dir + "/first");
  ASSERT_TRUE(first.ok()) << first.status();
  const AuditReport published = Audit(*first, options);
  PrintReport("publish and delete", published);

  // Run 2: a restart reads the tier back, and still touches nothing else.
  std::set<uint64_t> kept;
  {
    TracedDaemon daemon(run, state, dir + "/restart");
    const absl::Status started = daemon.Start();
    ASSERT_TRUE(started.ok()) << started;
    FakeInfer infer(daemon.address());
    ASSERT_NO_FATAL_FAILURE(infer.Open());
    kept = OnDisk(infer);
    infer.EndSession();
    ASSERT_GT(daemon.Stop(), 0);
  }
  absl::StatusOr<std::vector<Syscall>> second = ReadStraceLogs(dir + "/restart");
  ASSERT_TRUE(second.ok()) << second.status();
  const AuditReport restarted = Audit(*second, AuditOptions{state, run, {}, {}});
  PrintReport("restart", restarted);

  EXPECT_GE(published.publishes, static_cast<int>(options.acknowledged.size()));
  EXPECT_EQ(published.deletes, static_cast<int>(options.deleted.size()));
  EXPECT_TRUE(published.violations.empty()) << absl::StrJoin(published.violations, "\n");
  EXPECT_TRUE(published.outside.empty()) << absl::StrJoin(published.outside, "\n");
  EXPECT_TRUE(restarted.violations.empty()) << absl::StrJoin(restarted.violations, "\n");
  EXPECT_TRUE(restarted.outside.empty()) << absl::StrJoin(restarted.outside, "\n");
  for (const auto& [id, when] : options.acknowledged) {
    (void)when;
    EXPECT_EQ(kept.contains(id), !options.deleted.contains(id)) << "checkpoint " << id;
  }
  if (!HasFailure()) std::filesystem::remove_all(dir, ec);  // Else kept for diagnosis.
}

}  // namespace
}  // namespace cairn::audit
