// cairn-cache: the cache daemon. Wiring only (style.md §2): options, the daemon, the gRPC
// server, and an orderly drain on SIGTERM.

#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/concurrency/thread_pool.h"
#include "common/config/daemon_command_line.h"
#include "common/config/flags.h"
#include "common/config/runtime_dir.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/signals.h"
#include "common/log/log.h"
#include "common/time/clock.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/cache_service.h"

namespace cairn::cache {
namespace {

struct CacheMainOptions {
  std::string listen;        // Default: unix:<runtime dir>/cache.sock.
  std::string arena_socket;  // Default: <runtime dir>/cache-arena.sock.
  uint64_t ram_bytes = 0;    // 0: half the free RAM, at most 32 GiB.
  std::string disk;          // Disk tier directory; empty: no disk tier.
  uint64_t disk_bytes = 0;   // Disk tier budget; 0: a share of what the file system can give.
  int io_threads = 4;
  int max_queued_calls = static_cast<int>(CacheServiceOptions().max_queued_calls);
  uint64_t scrub_bytes_per_second = DiskScrubberOptions().bytes_per_second;
  absl::Duration drain_timeout = absl::Seconds(10);
  // How long SIGTERM waits for the Draining message to reach each session before ending it.
  absl::Duration session_drain_grace = absl::Seconds(1);
  // Once no call is in flight, how long the gRPC server may wait for clients to close their
  // idle connections before it closes them (it would wait about 5 s for a connected client).
  absl::Duration connection_drain = absl::Milliseconds(250);
  std::string log_level = "info";
  std::vector<std::string> arena_uids;  // Uids allowed to receive the arena; empty: our own.
};

int Run(int argc, char** argv) {
  BlockTerminationSignals();
  CacheMainOptions main_options;
  CacheDaemonOptions options;
  options.tick_interval = absl::Milliseconds(250);  // The daemon's maintenance thread.
  FlagSet flags("cairn-cache", "The Cairn cache daemon: checkpoints of hybrid-model state.");
  flags.Add("listen", &main_options.listen, "gRPC address: unix:PATH or HOST:PORT");
  flags.Add("arena-socket", &main_options.arena_socket,
            "Unix socket that hands the arena memfd to inference daemons");
  flags.Add("arena-uid", &main_options.arena_uids,
            "uids allowed to receive the arena (comma-separated); default: our own uid");
  flags.AddBytes("cache-ram-bytes", &main_options.ram_bytes,
                 "RAM budget (0: half the free RAM, at most 32 GiB)");
  flags.Add("cache-disk", &main_options.disk,
            "directory of the crash-safe disk tier (empty: RAM only)");
  flags.AddBytes("cache-disk-bytes", &main_options.disk_bytes,
                 "disk tier budget (0: half of the file system's free space under --cache-disk "
                 "plus what the tier holds; more than that is reported and bounded)");
  int max_checkpoints = options.cache.retention.max_checkpoints;
  flags.Add("max-checkpoints", &max_checkpoints,
            "most checkpoints kept in RAM (0: automatic, the budget over one private state, at "
            "least --min-checkpoints)",
            0, kNoMax);
  flags.Add("min-checkpoints", &options.cache.retention.min_checkpoints,
            "floor of the automatic checkpoint cap", 0, kNoMax);
  flags.Add("superseded-first", &options.cache.retention.superseded_first,
            "evict a conversation's superseded checkpoints before other conversations' states");
  flags.Add("edit-reach-turns", &options.cache.retention.edit_reach_turns,
            "superseded checkpoints at message boundaries of the latest request and this many "
            "before it go last among the superseded (0: off)",
            0, kNoMax);
  flags.Add("edit-reach-share", &options.cache.retention.edit_reach_share,
            "share of the RAM budget in private state of checkpoints within edit reach that "
            "keep their conversation's rank (the most tokens saved first)",
            0.0, 1.0);
  flags.Add("continue-reuse", &options.cache.retention.continue_reuse,
            "edit reach: likelihood that the next turn continues from the latest preserved "
            "frontier",
            0.0, 1.0);
  flags.Add("edit-reuse", &options.cache.retention.edit_reuse,
            "edit reach: likelihood that an edit comes back to a checkpoint", 0.0, 1.0);
  flags.Add("admission-by-rank", &options.cache.retention.admission_by_rank,
            "a capture evicts only checkpoints ranked at or below it");
  flags.Add("frontier-with-superseded", &options.cache.retention.frontier_with_superseded,
            "rank preserved frontiers with superseded checkpoints, not with retry copies");
  flags.Add("shallow-first", &options.cache.retention.shallow_first,
            "shallower checkpoints go first inside the idle and reused ranks");
  flags.Add("overdue-gaps", &options.cache.retention.overdue_gaps,
            "a conversation not used for this many of its mean gaps between requests is overdue "
            "and goes earlier inside the idle and reused ranks (0: off)",
            0.0, kNoMaxReal);
  flags.Add("overdue-depth-weight", &options.cache.retention.overdue_depth_weight,
            "with --shallow-first: an overdue conversation's depth counts this much (0: it goes "
            "first)",
            0.0, kNoMaxReal);
  flags.Add("charge-on-spill", &options.cache.retention.charge_on_spill,
            "charge borrowed rows to the RAM budget when they are spilled, not at admission");
  flags.Add("value-per-byte", &options.cache.retention.value_per_byte,
            "inside a rank, evict the least tokens saved per byte freed first");
  flags.Add("value-across-ranks", &options.cache.retention.value_across_ranks,
            "with --value-per-byte: value weighed by each rank's likelihood of reuse decides");
  flags.Add("preserve-frontier", &options.cache.planner.preserve_frontier,
            "plan a capture of a slot's frontier before another conversation overwrites it");
  flags.Add("cheap-ratio", &options.cache.retention.cheap_ratio,
            "a checkpoint is cheap when its private state exceeds this many times its rows", 0.0,
            kNoMaxReal);
  flags.Add("near-duplicate-tokens", &options.cache.retention.near_duplicate_tokens,
            "a checkpoint this close below another on its path is a near-duplicate", 0, kNoMax64);
  flags.Add("disk-spacing-tokens", &options.cache.retention.disk_spacing_tokens,
            "prompt checkpoints closer than this to a written one are not written to disk", 0,
            kNoMax64);
  flags.Add("grid-step", &options.cache.planner.grid_step, "grid points sit on multiples", 1,
            kNoMax64);
  flags.Add("max-grid-points", &options.cache.planner.max_grid_points,
            "at most this many grid captures per request", 0, kNoMax);
  flags.Add("grid-snap-tokens", &options.cache.planner.grid_snap_tokens,
            "a grid point moves to a pass end this close", 0, kNoMax64);
  flags.Add("learned-min-tokens", &options.cache.planner.learned_min_tokens,
            "a learned point must extend reuse at least this far", 0, kNoMax64);
  flags.Add("learned-merge-tokens", &options.cache.planner.learned_merge_tokens,
            "a learned point merges with another capture this close", 0, kNoMax64);
  flags.Add("max-pass-tokens", &options.cache.planner.max_pass_tokens,
            "longest planned prefill pass where the client does not give its own", 1, kNoMax64);
  flags.Add("grid-budget-share", &options.cache.planner.grid_budget_share,
            "share of the RAM budget one request's grid points may take", 0.0, 1.0);
  flags.Add("heartbeat-interval", &options.heartbeat_interval, "asked of session clients",
            absl::Milliseconds(1));
  flags.Add("session-timeout", &options.session_timeout, "silence that ends a session",
            absl::Milliseconds(1));
  flags.Add("lease-timeout", &options.default_lease, "restore lease and reservation duration",
            absl::Milliseconds(1));
  flags.Add("max-lease-wait", &options.max_lease_wait,
            "a restore lease still waiting for spills after this long fails (its client is told)",
            absl::Milliseconds(1));
  flags.Add("io-threads", &main_options.io_threads, "threads serving unary calls", 1,
            kMaxThreadsFlag);
  flags.Add("max-queued-calls", &main_options.max_queued_calls,
            "unary calls waiting for a thread beyond this are refused (RESOURCE_EXHAUSTED)", 1,
            kNoMax);
  flags.Add("disk-load-threads", &options.disk_loads.threads,
            "threads reading restores from the disk tier (apart from --io-threads)", 1,
            kMaxThreadsFlag);
  int max_queued_disk_loads = static_cast<int>(options.disk_loads.max_queued);
  flags.Add("max-queued-disk-loads", &max_queued_disk_loads,
            "restores from disk waiting for a loader beyond this are refused (RESOURCE_EXHAUSTED)",
            1, kNoMax);
  flags.Add("checkpoint-id-block", &options.checkpoint_id_block,
            "checkpoint ids the disk tier's catalog reserves at a time, before handing any out, "
            "so that a restart never hands one out again (one synced write per block)",
            1, int64_t{1} << 40);
  flags.Add("chunk-id-block", &options.chunk_id_block,
            "chunk ids the disk tier's catalog reserves at a time, the same way (a capture that "
            "needs more reserves what it needs)",
            1, int64_t{1} << 40);
  flags.AddBytes("scrub-bytes-per-second", &main_options.scrub_bytes_per_second,
                 "read rate of the background scrubber that verifies the disk tier (0: off)");
  flags.Add("scrub-interval", &options.scrub.pass_interval,
            "pause between two scrub passes over the disk tier", absl::ZeroDuration());
  flags.Add("tick", &options.tick_interval,
            "how often leases, reservations, sessions and flushes are checked for expiry",
            absl::Milliseconds(1));
  flags.Add("drain-timeout", &main_options.drain_timeout,
            "how long SIGTERM lets in-flight calls finish", absl::ZeroDuration());
  flags.Add("connection-drain", &main_options.connection_drain,
            "after the calls drained, how long SIGTERM waits for idle connections to close",
            absl::ZeroDuration());
  flags.Add("session-drain-grace", &main_options.session_drain_grace,
            "how long SIGTERM waits for Draining to reach a session before ending its stream",
            absl::ZeroDuration());
  flags.Add("log-level", &main_options.log_level, "info, warning or error");

  if (std::optional<int> exit_code = ParseDaemonCommandLine(
          flags, CommandLineArgs(argc, argv), "cairn-cache", main_options.log_level)) {
    return *exit_code;
  }
  options.cache.retention.max_checkpoints = max_checkpoints;
  options.disk_loads.max_queued = static_cast<size_t>(std::max(1, max_queued_disk_loads));
  options.disk_loads.threads = std::max(1, options.disk_loads.threads);

  const std::string runtime_dir = DefaultRuntimeDir();
  if (main_options.listen.empty() || main_options.arena_socket.empty()) {
    if (::mkdir(runtime_dir.c_str(), 0750) != 0 && errno != EEXIST) {
      CAIRN_LOG(ERROR) << "cannot create runtime directory " << runtime_dir;
      return 1;
    }
  }
  if (main_options.listen.empty()) main_options.listen = "unix:" + runtime_dir + "/cache.sock";
  if (main_options.arena_socket.empty()) {
    main_options.arena_socket = runtime_dir + "/cache-arena.sock";
  }
  uint64_t ram = main_options.ram_bytes;
  // The arena is sparse: a budget beyond the machine's RAM (64Ti for 64Gi) starts, then ends in
  // the OOM killer as checkpoints fill it.
  const double physical =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (physical > 0 && static_cast<double>(ram) > physical) {
    std::cerr << "cairn-cache: --cache-ram-bytes " << ram << " is more than this machine's "
              << static_cast<uint64_t>(physical) << " bytes of RAM\n";
    return 2;
  }
  if (ram == 0) {
    absl::StatusOr<uint64_t> d =
        DefaultArenaBytes(options.arena.default_free_ram_fraction, options.arena.max_default_bytes);
    if (!d.ok()) {
      CAIRN_LOG(ERROR) << "sizing the RAM budget: " << d.status();
      return 1;
    }
    ram = *d;
  }
  options.cache.ram_bytes = static_cast<int64_t>(ram);
  options.fd_server.socket_path = main_options.arena_socket;
  options.scrub.bytes_per_second = main_options.scrub_bytes_per_second;
  if (!main_options.disk.empty()) {
    options.disk_root = main_options.disk;
    options.cache.disk_bytes = static_cast<int64_t>(main_options.disk_bytes);
  }
  for (const std::string& uid : main_options.arena_uids) {
    int value;
    if (!absl::SimpleAtoi(uid, &value) || value < 0) {
      std::cerr << "cairn-cache: --arena-uid \"" << uid << "\" is not a uid\n";
      return 2;
    }
    options.fd_server.arena_uids.push_back(static_cast<uid_t>(value));
  }

  // Recovering the disk tier can take long; it is crash-safe, so a signal may end it.
  std::optional<ExitOnTerminationSignal> exit_during_recovery;
  exit_during_recovery.emplace("the cache's start-up");
  absl::StatusOr<std::unique_ptr<CacheDaemon>> daemon =
      CacheDaemon::Create(options, RealClock::Get());
  exit_during_recovery.reset();  // From here a signal drains (WaitForTerminationSignal).
  if (!daemon.ok()) {
    CAIRN_LOG(ERROR) << "starting the cache: " << daemon.status();
    return 1;
  }
  ThreadPool pool(main_options.io_threads);
  CacheServiceOptions service_options;
  service_options.max_queued_calls =
      static_cast<size_t>(std::max(1, main_options.max_queued_calls));
  CacheServiceImpl service(daemon->get(), &pool, service_options);
  ServerRunnerOptions server_options;
  server_options.listen = main_options.listen;
  // In-flight calls are drained by the service first (DrainCalls), so the server's own
  // deadline only bounds the wait for idle connections.
  server_options.drain_timeout = main_options.connection_drain;
  server_options.health_services = {"cairn.cache.v1.CacheService"};
  absl::StatusOr<std::unique_ptr<ServerRunner>> server =
      ServerRunner::Start(server_options, {&service});
  if (!server.ok()) {
    CAIRN_LOG(ERROR) << "starting the gRPC server: " << server.status();
    return 1;
  }
  (*server)->SetAllServing(true);
  // Readiness for systemd's Type=notify (a no-op outside systemd).
  sd_notify(0, "READY=1");
  CAIRN_LOG(INFO) << "cairn-cache serving on " << (*server)->address() << ", arena "
                  << (*daemon)->arena().size() << " bytes at " << main_options.arena_socket;

  int sig = WaitForTerminationSignal();
  // Shutdown order (style.md §5): sessions told and ended, unary calls drained, health
  // NOT_SERVING and server shutdown, workers.
  CAIRN_LOG(INFO) << "signal " << sig << ": draining";
  sd_notify(0, "STOPPING=1");
  // Session streams never end on their own: tell the inference daemons and end them first.
  service.DrainSessions(main_options.session_drain_grace);
  if (!service.DrainCalls(main_options.drain_timeout)) {
    CAIRN_LOG(WARNING) << "calls still in flight after " << main_options.drain_timeout
                       << ": cancelling them";
  }
  (*server)->Drain();
  (*server)->Wait();
  pool.Shutdown();
  server->reset();
  daemon->reset();
  CAIRN_LOG(INFO) << "cairn-cache stopped";
  return 0;
}

}  // namespace
}  // namespace cairn::cache

int main(int argc, char** argv) { return cairn::cache::Run(argc, argv); }
