#ifndef CAIRN_SERVICES_CACHE_SIM_POLICY_H_
#define CAIRN_SERVICES_CACHE_SIM_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/time/clock.h"
#include "services/cache/core/capture_planner.h"
#include "services/cache/core/checkpoint_cache.h"
#include "services/cache/core/retention.h"
#include "services/cache/core/types.h"
#include "services/cache/sim/cost_model.h"

namespace cairn::cache::sim {

// One request as a policy sees it (tokens materialised, generated tokens resolved).
struct SimRequest {
  int index = 0;
  int line = 0;  // In the trace file.
  std::string conv;
  double t = 0;
  std::vector<TokenId> tokens;
  std::vector<int64_t> segment_starts;  // Message starts (llama.cpp places checkpoints there).
  int64_t stable = -1;
  std::vector<TokenId> generated;
};

struct SimCapture {
  int64_t pos = 0;
  CaptureKind kind = CaptureKind::kEnd;
};

struct SimEviction {
  uint64_t id = 0;
  std::string reason;
  // What the evicted state held, where the policy knows it (cairn: from the event): its
  // conversation and depth; empty and -1 otherwise.
  std::string conv;
  int64_t depth = -1;
};

struct RequestResult {
  Tier restored_tier = Tier::kNone;
  int64_t restored_depth = 0;
  int64_t prefilled = 0;
  std::vector<SimCapture> captures;
  std::vector<SimEviction> evicted;
  std::vector<PrefillPass> passes;
  int64_t restore_bytes = 0;  // Copied into the slot (charged at the tier's bandwidth).
  int64_t capture_bytes = 0;  // Copied out of the slot at captures.
};

// Knobs of every policy. Peers' numbers are documented in tools/cairnctl/README.md (baselines).
struct PolicyOptions {
  int64_t ram_bytes = CacheOptions::kMaxDefaultRamBytes;  // RAM budget of every policy.
  int64_t disk_bytes = 0;                                 // Cairn's disk tier (0: none).
  int slots = 1;  // Execution slots (cairn, live-only, llama.cpp).
  CostModelOptions cost;
  PlannerOptions planner;  // Cairn; max_pass_tokens is every policy's pass size.
  RetentionOptions retention;
  int llamacpp_ctx_checkpoints = 32;  // --ctx-checkpoints per slot (upstream default).
  // llama.cpp's slot checkpoints sit in host RAM outside --cache-ram, bounded only by their
  // count, so a server held to `ram_bytes` is configured with at most this share of the
  // budget in slot checkpoints (--ctx-checkpoints lowered to fit) and --cache-ram set to the
  // rest. The share that serves the evaluation set best (docs/cache-policy.md).
  double llamacpp_checkpoint_share = 0.25;
  int64_t llamacpp_min_step = 8192;           // --checkpoint-min-step.
  int64_t llamacpp_ubatch = 512;              // n_ubatch: a checkpoint 4 + n_ubatch before the end.
  int64_t llamacpp_end_offset = 4;            // ... and one 4 tokens before the end.
  double llamacpp_slot_similarity = 0.10;     // --slot-prompt-similarity.
  double llamacpp_min_cache_fraction = 0.25;  // RAM entries reused only above this fraction.
  int64_t block_tokens = 528;                 // vLLM hybrid block size (Qwen3.5-4B, #40696).
  double marconi_recency_weight = 0.5;        // Eviction: recency vs FLOPs saved per byte.
};

// A caching policy under simulation. Thread-compatible.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual absl::StatusOr<RequestResult> Serve(const SimRequest& request) = 0;
  // Bytes the policy holds in RAM now (checkpoints, cached rows and states).
  virtual int64_t BytesInUse() const = 0;
  virtual int64_t PeakBytes() const = 0;
};

// "cairn", "none", "live-only", "llamacpp", "block-aligned", "marconi", "oracle" (the
// infinite-memory bound, not a peer).
const std::vector<std::string>& PolicyNames();

// Creates policy `name`. InvalidArgument for an unknown name or bad options. `clock` must
// outlive the policy (the simulator moves it to each request's time).
absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(absl::string_view name,
                                                   const PolicyOptions& options,
                                                   const Clock* clock);

}  // namespace cairn::cache::sim

#endif  // CAIRN_SERVICES_CACHE_SIM_POLICY_H_
