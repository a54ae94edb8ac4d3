#ifndef CAIRN_TESTS_INTEGRATION_CHAOS_CHAOS_HARNESS_H_
#define CAIRN_TESTS_INTEGRATION_CHAOS_CHAOS_HARNESS_H_

// The chaos harness (reliability plan D2, SM10-SM13): cairn-cache, cairn-infer and
// cairn-gateway run as real processes under a replayed multi-conversation agent load that a
// small client of its own drives over HTTP through the gateway (chat completions rendered by
// the model's chat template, and token-id completions, each sent streamed and not in turn,
// greedy decoding), while one daemon at a time is killed with SIGKILL at a random point
// (during a restore, a capture, a disk publish, a spill or mid-stream) and restarted. The
// oracle:
//   - every completed request's tokens and logprobs equal the uncached greedy run of the
//     same rendered prompt (the daemons run pass-invariant numerics, so a restore at any
//     depth must give exactly that);
//   - every failed request failed with a clear retriable error within a bound: HTTP 503 with
//     Retry-After and an "unavailable" error body, an "unavailable" error event in a stream,
//     or (only when the gateway itself was killed during the request, or was down when it
//     was sent) a connection error; never another status, never a hang;
//   - no checkpoint the cache reported on disk is missing after a cache restart;
//   - the surviving daemons' resident memory and open descriptors stay flat across cycles,
//     no slot of cairn-infer stays busy once the load stops, and each daemon exits 0 when
//     stopped at the end (under a sanitizer: LeakSanitizer found no leak);
//   - the restarted system completes a request before the next kill.
// Phase one kills cairn-cache `cache_kills` times, phase two cairn-infer `infer_kills` times,
// phase three cairn-gateway `gateway_kills` times; the other two survive each phase.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cairn::chaos {

struct ChaosOptions {
  std::string work_dir;  // Sockets, the disk tier and the model folder go here.
  int cache_kills = 20;
  int infer_kills = 20;
  int gateway_kills = 20;
  uint64_t seed = 1;
  // Concurrent agent conversations (more than the slots): even ones send chat completions,
  // odd ones token-id completions.
  int conversations = 3;
  int turns = 3;  // Turns per conversation, replayed again and again.
  int slots = 2;
  uint32_t answer_tokens = 8;
  // A kill lands this long after the restarted daemon serves again, uniformly at random (a
  // request takes a few hundred milliseconds, so kills land in every part of one), but never
  // before the load has completed a request since that restart: a slower build (a sanitizer's,
  // where cairn-infer restarts in about 3 s at -O1, 10 s at -O0, and a request takes seconds)
  // then gets longer cycles instead of kills that no request ever outlives. The wait for that
  // request is bounded by `request_bound`; a kill it gave up on counts as one without progress.
  absl::Duration min_run = absl::Milliseconds(200);
  absl::Duration max_run = absl::Milliseconds(1500);
  // A request must succeed or fail within this bound (its deadline is twice as long).
  absl::Duration request_bound = absl::Seconds(30);
};

// Resident memory and open descriptors of a process.
struct ProcessUsage {
  int64_t rss_bytes = 0;
  int fds = 0;
};

// A daemon that survived a phase: its usage after the first cycles and at the phase's end.
struct SurvivorUsage {
  std::string phase;   // The daemon killed in that phase.
  std::string daemon;  // The survivor.
  ProcessUsage start, end;
};

struct ChaosReport {
  int cache_kills = 0;  // Kills survived: the daemon was restarted and served again.
  int infer_kills = 0;
  int gateway_kills = 0;
  int kills_mid_stream = 0;  // Kills that landed while some request was in flight.
  // Cache kills aimed at the moment an answer completed (when its captures go to disk), and
  // cache kills that left a manifest under its temporary name (inside a disk publish).
  int cache_kills_after_answer = 0;
  int cache_kills_mid_publish = 0;
  // Kills held back past their random point until the load completed a request since the last
  // restart, and kills after `request_bound` without one (a restarted system that completes
  // nothing: a failure).
  int kills_held_for_progress = 0;
  int kills_without_progress = 0;
  int64_t completed = 0;  // Requests that finished, each compared with the reference.
  int64_t completed_streamed = 0;
  int64_t completed_chat = 0;
  int64_t retried = 0;   // Requests that failed with a retriable error (then sent again).
  int64_t restored = 0;  // Completed requests that restored cached state (RAM or disk).
  int64_t restored_from_disk = 0;
  int64_t checkpoints_on_disk = 0;  // The most the cache reported on disk at once.
  absl::Duration slowest_failure;   // The longest a failed request took.
  // Retriable failures by phase ("cache", "infer", "gateway") and kind: "http 503: <message
  // cut at the first colon>", "stream: <message>" or "connection: <error>".
  std::map<std::string, std::map<std::string, int>> failures;
  // Oracle failures, one line each (empty when the run passed).
  std::vector<std::string> wrong_outputs;
  std::vector<std::string> bad_errors;  // Another status or code, or over the bound.
  std::vector<std::string> lost_checkpoints;
  // Usage that grew, a slot left busy, or a daemon that did not exit 0 on SIGTERM.
  std::vector<std::string> leaks;
  std::vector<SurvivorUsage> usage;
  // Per killed daemon: the time from SIGKILL until it served again (cairn-infer: with its cache
  // session; cairn-gateway: /health 200), summed and the slowest; and each phase's length.
  std::map<std::string, absl::Duration> restart_total, restart_slowest, phase_length;
};

// Runs the whole experiment. Errors: the setup failed (a daemon never started, the model
// folder could not be written, the Qwen3 tokenizer is missing); oracle failures are in the
// report.
absl::StatusOr<ChaosReport> RunChaos(const ChaosOptions& options);

// The figures, for the test's output and the soak's record.
std::string FormatReport(const ChaosReport& report);

}  // namespace cairn::chaos

#endif  // CAIRN_TESTS_INTEGRATION_CHAOS_CHAOS_HARNESS_H_
