#ifndef CAIRN_TESTS_INTEGRATION_CHAOS_CHAOS_HARNESS_H_
#define CAIRN_TESTS_INTEGRATION_CHAOS_CHAOS_HARNESS_H_

// The chaos harness (reliability plan D2, SM10-SM13): cairn-cache and cairn-infer run as real
// processes under a replayed multi-conversation agent load from a small client of its own
// (token-id prompts, greedy decoding), while one daemon at a time is killed with SIGKILL at a
// random point (during a restore, a capture, a disk publish, a spill or mid-stream) and
// restarted. The oracle:
//   - every completed request's tokens and logprobs equal the uncached greedy run of the
//     same prompt (the daemons run pass-invariant numerics, so a restore at any depth must
//     give exactly that);
//   - every failed request failed with UNAVAILABLE within a bound, never another code, never
//     a hang;
//   - no checkpoint the cache reported on disk is missing after a cache restart;
//   - the surviving daemon's resident memory and open descriptors stay flat across cycles.
// Phase one kills cairn-cache `cache_kills` times (cairn-infer survives), phase two kills
// cairn-infer `infer_kills` times (cairn-cache survives).

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
  uint64_t seed = 1;
  int conversations = 3;  // Concurrent agent conversations (more than the slots).
  int turns = 3;          // Turns per conversation, replayed again and again.
  int slots = 2;
  uint32_t answer_tokens = 8;
  // A kill lands this long after the restarted daemon serves again, uniformly at random.
  absl::Duration min_run = absl::Milliseconds(300);
  absl::Duration max_run = absl::Milliseconds(2500);
  // A request must succeed or fail within this bound (its deadline is twice as long).
  absl::Duration request_bound = absl::Seconds(30);
};

// Resident memory and open descriptors of a process.
struct ProcessUsage {
  int64_t rss_bytes = 0;
  int fds = 0;
};

struct ChaosReport {
  int cache_kills = 0;  // Kills survived: the daemon was restarted and served again.
  int infer_kills = 0;
  int kills_mid_stream = 0;  // Kills that landed while some request was streaming.
  int64_t completed = 0;     // Requests that finished, each compared with the reference.
  int64_t retried = 0;       // Requests that failed with UNAVAILABLE (then retried).
  int64_t restored = 0;      // Completed requests that restored cached state (RAM or disk).
  int64_t restored_from_disk = 0;
  int64_t checkpoints_on_disk = 0;  // The most the cache reported on disk at once.
  absl::Duration slowest_failure;   // The longest a failed request took.
  // Why requests failed with UNAVAILABLE, by message (cut at the first colon), in each phase.
  std::map<std::string, int> cache_phase_failures;
  std::map<std::string, int> infer_phase_failures;
  // Oracle failures, one line each (empty when the run passed).
  std::vector<std::string> wrong_outputs;
  std::vector<std::string> bad_errors;  // Another code, or over the bound.
  std::vector<std::string> lost_checkpoints;
  std::vector<std::string> leaks;
  // The surviving daemon's usage after the first cycles and at the end of its phase.
  ProcessUsage infer_start, infer_end, cache_start, cache_end;
};

// Runs the whole experiment. Errors: the setup failed (a daemon never started, the model
// folder could not be written); oracle failures are in the report.
absl::StatusOr<ChaosReport> RunChaos(const ChaosOptions& options);

// One line per figure, for the test's output and the soak's record.
std::string FormatReport(const ChaosReport& report);

}  // namespace cairn::chaos

#endif  // CAIRN_TESTS_INTEGRATION_CHAOS_CHAOS_HARNESS_H_
