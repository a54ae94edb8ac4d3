#include "tests/integration/chaos/chaos_harness.h"

#include <dirent.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/concurrency/mutex.h"
#include "common/grpc/client.h"
#include "common/process/child_process.h"
#include "common/status/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/services/infer/infer_harness.h"
#include "tests/unit/services/infer/models/model_test_util.h"

namespace cairn::chaos {
namespace {

namespace infer_v1 = ::cairn::infer::v1;
namespace cache_v1 = ::cairn::cache::v1;
using infer::testing::ReferenceRun;

constexpr int64_t kVocab = 1024;        // The random "dense" preset's vocabulary.
constexpr int64_t kSharedPrefix = 256;  // A system prompt every conversation starts with.
constexpr int kWarmupCycles = 3;        // Usage is compared from here to the end of a phase.
constexpr int kMaxFdGrowth = 16;
constexpr int64_t kMaxRssGrowth = int64_t{96} << 20;
constexpr absl::Duration kStartTimeout = absl::Seconds(60);
constexpr absl::Duration kRetryPause = absl::Milliseconds(50);

// One turn of a conversation and what the uncached greedy run of its prompt gives.
struct Turn {
  std::vector<int32_t> prompt;
  ReferenceRun expected;
};
using Script = std::vector<std::vector<Turn>>;  // [conversation][turn].

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Agent conversations: a shared system prompt, a task, then turns that append the answer and
// a tool result of ~100 tokens. Each prompt's expected answer comes from an uncached run.
absl::StatusOr<Script> MakeScript(const std::string& model_dir, const ChaosOptions& o) {
  const std::vector<int32_t> system = infer::testing::RandomTokens(kSharedPrefix, kVocab, o.seed);
  Script script(static_cast<size_t>(o.conversations));
  for (int c = 0; c < o.conversations; ++c) {
    std::vector<int32_t> prompt =
        Concat(system, infer::testing::RandomTokens(200 + 90 * c, kVocab, o.seed * 1000 + 10 * c));
    for (int t = 0; t < o.turns; ++t) {
      ASSIGN_OR_RETURN(
          ReferenceRun expected,
          infer::testing::RunReference(model_dir, {prompt}, static_cast<int>(o.answer_tokens),
                                       /*pass_invariant=*/true));
      script[c].push_back(Turn{prompt, expected});
      std::vector<int32_t> answer(expected.tokens.begin(), expected.tokens.end());
      prompt = Concat(Concat(prompt, answer),
                      infer::testing::RandomTokens(50, kVocab, o.seed * 1000 + 10 * c + t + 1));
    }
  }
  return script;
}

ProcessUsage UsageOf(pid_t pid) {
  ProcessUsage u;
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream in(line.substr(6));
      int64_t kib = 0;
      in >> kib;
      u.rss_bytes = kib * 1024;
    }
  }
  if (DIR* d = ::opendir(absl::StrCat("/proc/", pid, "/fd").c_str())) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++u.fds;
    }
    ::closedir(d);
  }
  return u;
}

bool SameLogprobs(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The two daemons, their addresses and restarts.
class Daemons {
 public:
  Daemons(const std::string& dir, const std::string& model_dir, const ChaosOptions& o)
      : cache_({std::string(CAIRN_BINARY_DIR) + "/services/cache/cairn-cache",
                "--listen=unix:" + dir + "/cache.sock", "--arena-socket=" + dir + "/arena.sock",
                "--cache-ram-bytes=16Mi", "--cache-disk=" + dir + "/disk", "--cache-disk-bytes=1Gi",
                "--log-level=error"},
               "unix:" + dir + "/cache.sock"),
        infer_({std::string(CAIRN_BINARY_DIR) + "/services/infer/daemon/cairn-infer",
                "--model=" + model_dir, "--sessions=" + std::to_string(o.slots),
                "--cache=unix:" + dir + "/cache.sock", "--listen=unix:" + dir + "/infer.sock",
                "--threads=1", "--context=4096", "--numerics=pass-invariant",
                "--max-pass-tokens=256", "--log-level=error"},
               "unix:" + dir + "/infer.sock") {}

  ChildProcess& cache() { return cache_; }
  ChildProcess& infer() { return infer_; }

  absl::Status Start(ChildProcess& p) {
    RETURN_IF_ERROR(p.Start());
    return p.WaitServing(kStartTimeout);
  }

  // Waits until cairn-infer reports its cache session (after either restarts).
  absl::Status WaitCacheConnected() {
    auto stub = infer_v1::InferService::NewStub(NewLocalChannel(infer_.address()));
    const absl::Time deadline = absl::Now() + kStartTimeout;
    while (absl::Now() < deadline) {
      auto ctx = NewClientContext(absl::Seconds(2));
      infer_v1::GetModelInfoResponse info;
      if (stub->GetModelInfo(ctx.get(), {}, &info).ok() && info.cache_connected()) {
        return absl::OkStatus();
      }
      absl::SleepFor(absl::Milliseconds(50));  // Polling another process's reconnect.
    }
    return absl::DeadlineExceededError("cairn-infer never reconnected to cairn-cache");
  }

  // The checkpoints cairn-cache reports on disk.
  absl::StatusOr<std::set<uint64_t>> OnDisk() {
    auto stub = cache_v1::CacheService::NewStub(NewLocalChannel(cache_.address()));
    auto ctx = NewClientContext(absl::Seconds(10));
    cache_v1::ListCheckpointsResponse list;
    grpc::Status s = stub->ListCheckpoints(ctx.get(), {}, &list);
    if (!s.ok()) return absl::UnavailableError(s.error_message());
    std::set<uint64_t> out;
    for (const auto& c : list.checkpoints()) {
      if (c.on_disk()) out.insert(c.checkpoint_id());
    }
    return out;
  }

 private:
  ChildProcess cache_;
  ChildProcess infer_;
};

// The replayed agent load: one thread per conversation, each sending its turns in order and
// starting over after the last; a failed turn is sent again.
class Load {
 public:
  Load(const Script& script, const ChaosOptions& o, const std::string& infer_address)
      : script_(script), options_(o), address_(infer_address) {}
  ~Load() { Stop(); }

  void Start() {
    for (size_t c = 0; c < script_.size(); ++c) {
      threads_.emplace_back([this, c] { Run(c); });
    }
  }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  int streaming() const { return streaming_.load(); }
  // Failures from now on count for phase two.
  void BeginInferPhase() { infer_phase_ = true; }
  // Adds this load's counts and findings to `report`.
  void AddTo(ChaosReport* report) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    report->completed += report_.completed;
    report->retried += report_.retried;
    report->restored += report_.restored;
    report->restored_from_disk += report_.restored_from_disk;
    report->slowest_failure = std::max(report->slowest_failure, report_.slowest_failure);
    for (auto& s : report_.wrong_outputs) report->wrong_outputs.push_back(s);
    for (auto& s : report_.bad_errors) report->bad_errors.push_back(s);
    report->cache_phase_failures = report_.cache_phase_failures;
    report->infer_phase_failures = report_.infer_phase_failures;
  }

 private:
  void Run(size_t c) {
    auto stub = infer_v1::InferService::NewStub(NewLocalChannel(address_));
    size_t t = 0;
    while (!stop_) {
      const Turn& turn = script_[c][t];
      infer_v1::GenerateRequest req =
          infer::testing::TokenRequest(turn.prompt, options_.answer_tokens);
      req.set_conversation(absl::StrCat("agent-", c));
      const absl::Time start = absl::Now();
      ++streaming_;
      const infer::testing::GenerateResult r =
          infer::testing::Generate(*stub, req, 2 * options_.request_bound);
      --streaming_;
      const absl::Duration took = absl::Now() - start;
      const bool ok = r.status.ok();
      Record(r, turn, took,
             absl::StrCat("conversation ", c, " turn ", t, " (", turn.prompt.size(),
                          " prompt tokens)"));
      if (ok) {
        t = (t + 1) % script_[c].size();
      } else {
        absl::SleepFor(kRetryPause);  // A client's pause before retrying, not synchronisation.
      }
    }
  }

  // Checks one answer against the oracle.
  void Record(const infer::testing::GenerateResult& r, const Turn& turn, absl::Duration took,
              const std::string& what) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (r.status.ok()) {
      ++report_.completed;
      const auto tier = r.started.cache().restored_from();
      if (tier == infer_v1::CacheResult::TIER_RAM || tier == infer_v1::CacheResult::TIER_DISK) {
        ++report_.restored;
      }
      if (tier == infer_v1::CacheResult::TIER_DISK) ++report_.restored_from_disk;
      if (r.tokens != turn.expected.tokens || !SameLogprobs(r.logprobs, turn.expected.logprobs)) {
        report_.wrong_outputs.push_back(
            absl::StrCat(what, ": the answer differs from the uncached run (restored from tier ",
                         tier, " at depth ", r.started.cache().restored_depth(), ")"));
      }
    } else if (r.status.error_code() == grpc::StatusCode::UNAVAILABLE &&
               took <= options_.request_bound) {
      ++report_.retried;
      report_.slowest_failure = std::max(report_.slowest_failure, took);
      const std::string reason =
          r.status.error_message().substr(0, r.status.error_message().find(':'));
      ++(infer_phase_ ? report_.infer_phase_failures : report_.cache_phase_failures)[reason];
    } else {
      report_.bad_errors.push_back(absl::StrCat(what, ": code ", r.status.error_code(), " \"",
                                                r.status.error_message(), "\" after ",
                                                absl::FormatDuration(took)));
    }
  }

  const Script& script_;
  const ChaosOptions options_;
  const std::string address_;
  std::atomic<bool> stop_{false};
  std::atomic<int> streaming_{0};
  std::atomic<bool> infer_phase_{false};
  std::vector<std::thread> threads_;
  Mutex mu_;
  ChaosReport report_ ABSL_GUARDED_BY(mu_);
};

// Checks that the surviving daemon's usage stayed flat over its phase.
void CheckFlat(const char* who, const ProcessUsage& start, const ProcessUsage& end,
               ChaosReport* report) {
  if (end.fds > start.fds + kMaxFdGrowth) {
    report->leaks.push_back(
        absl::StrCat(who, ": open descriptors grew from ", start.fds, " to ", end.fds));
  }
  if (end.rss_bytes > start.rss_bytes + kMaxRssGrowth) {
    report->leaks.push_back(absl::StrCat(who, ": resident memory grew from ", start.rss_bytes >> 20,
                                         " MiB to ", end.rss_bytes >> 20, " MiB"));
  }
}

}  // namespace

absl::StatusOr<ChaosReport> RunChaos(const ChaosOptions& o) {
  const std::string dir = o.work_dir;
  if (std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot create ", dir));
  }
  ASSIGN_OR_RETURN(std::string model_dir,
                   infer::testing::MakeModelFolder("dense", false, "chaos-model"));
  ASSIGN_OR_RETURN(Script script, MakeScript(model_dir, o));

  Daemons daemons(dir, model_dir, o);
  RETURN_IF_ERROR(daemons.Start(daemons.cache()));
  RETURN_IF_ERROR(daemons.Start(daemons.infer()));
  RETURN_IF_ERROR(daemons.WaitCacheConnected());

  ChaosReport report;
  std::mt19937_64 rng(o.seed);
  auto random_run = [&] {
    std::uniform_int_distribution<int64_t> ms(absl::ToInt64Milliseconds(o.min_run),
                                              absl::ToInt64Milliseconds(o.max_run));
    return absl::Milliseconds(ms(rng));
  };
  Load load(script, o, daemons.infer().address());
  load.Start();

  // Phase one: cairn-cache dies; cairn-infer must keep serving and reconnect.
  for (int k = 0; k < o.cache_kills; ++k) {
    absl::SleepFor(random_run());  // The random point of the kill.
    absl::StatusOr<std::set<uint64_t>> acknowledged = daemons.OnDisk();
    if (load.streaming() > 0) ++report.kills_mid_stream;
    daemons.cache().Kill();
    RETURN_IF_ERROR(daemons.Start(daemons.cache()));
    RETURN_IF_ERROR(daemons.WaitCacheConnected());
    ++report.cache_kills;
    absl::StatusOr<std::set<uint64_t>> after = daemons.OnDisk();
    if (acknowledged.ok() && after.ok()) {
      report.checkpoints_on_disk =
          std::max<int64_t>(report.checkpoints_on_disk, static_cast<int64_t>(after->size()));
      for (uint64_t id : *acknowledged) {
        if (!after->contains(id)) {
          report.lost_checkpoints.push_back(absl::StrCat("checkpoint ", id,
                                                         " was on disk before cache kill ", k + 1,
                                                         " and missing after the restart"));
        }
      }
    }
    const ProcessUsage usage = UsageOf(daemons.infer().pid());
    if (k == std::min(kWarmupCycles, o.cache_kills - 1)) report.infer_start = usage;
    report.infer_end = usage;
  }
  CheckFlat("cairn-infer", report.infer_start, report.infer_end, &report);

  // Phase two: cairn-infer dies; cairn-cache keeps its checkpoints and reclaims the sessions.
  load.BeginInferPhase();
  for (int k = 0; k < o.infer_kills; ++k) {
    absl::SleepFor(random_run());
    if (load.streaming() > 0) ++report.kills_mid_stream;
    daemons.infer().Kill();
    RETURN_IF_ERROR(daemons.Start(daemons.infer()));
    RETURN_IF_ERROR(daemons.WaitCacheConnected());
    ++report.infer_kills;
    const ProcessUsage usage = UsageOf(daemons.cache().pid());
    if (k == std::min(kWarmupCycles, o.infer_kills - 1)) report.cache_start = usage;
    report.cache_end = usage;
  }
  CheckFlat("cairn-cache", report.cache_start, report.cache_end, &report);
  load.Stop();
  load.AddTo(&report);
  daemons.infer().Terminate();
  daemons.cache().Terminate();
  return report;
}

namespace {

// The figures, on one line.
std::string Summary(const ChaosReport& r) {
  return absl::StrFormat(
      "chaos: %d cache kills and %d infer kills survived (%d mid-stream); %d requests "
      "completed, all compared with the uncached run: %d wrong; %d restored cached state "
      "(%d from disk); %d failed with UNAVAILABLE and were retried (slowest %s); %d other "
      "errors or overruns; up to %d checkpoints on disk, %d lost; cairn-infer %d->%d fds, "
      "%d->%d MiB; cairn-cache %d->%d fds, %d->%d MiB; %d leaks",
      r.cache_kills, r.infer_kills, r.kills_mid_stream, r.completed, r.wrong_outputs.size(),
      r.restored, r.restored_from_disk, r.retried, absl::FormatDuration(r.slowest_failure),
      r.bad_errors.size(), r.checkpoints_on_disk, r.lost_checkpoints.size(), r.infer_start.fds,
      r.infer_end.fds, r.infer_start.rss_bytes >> 20, r.infer_end.rss_bytes >> 20,
      r.cache_start.fds, r.cache_end.fds, r.cache_start.rss_bytes >> 20,
      r.cache_end.rss_bytes >> 20, r.leaks.size());
}

}  // namespace

std::string FormatReport(const ChaosReport& r) {
  std::string reasons;
  for (const auto& [phase, failures] :
       {std::pair{"cache", &r.cache_phase_failures}, std::pair{"infer", &r.infer_phase_failures}}) {
    for (const auto& [reason, n] : *failures) {
      absl::StrAppend(&reasons, "\n  UNAVAILABLE while killing ", phase, ": ", n, " x \"", reason,
                      "\"");
    }
  }
  return reasons.empty() ? Summary(r) : Summary(r) + reasons;
}

}  // namespace cairn::chaos
