#ifndef CAIRN_SERVICES_INFER_ENGINE_REQUEST_H_
#define CAIRN_SERVICES_INFER_ENGINE_REQUEST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "services/infer/engine/sampler.h"
#include "services/infer/engine/state_cache.h"
#include "services/infer/engine/token_constraint.h"

namespace cairn::infer {

// What the cache did for one request (the `cairn` object of the HTTP API).
struct CacheReport {
  StateTier tier = StateTier::kCold;
  int64_t restored_depth = 0;
  int64_t prefilled_tokens = 0;
  double restore_ms = 0;
  double capture_ms = 0;
  double ttft_ms = 0;
  std::string miss_reason;
  int captures = 0;
  bool cache_available = false;
  std::vector<int64_t> pass_ends;  // Absolute positions where prefill passes ended.
};

enum class FinishReason { kStop, kLength, kCancelled };

struct StartInfo {
  int slot = 0;
  int64_t prompt_tokens = 0;
  CacheReport cache;
};

struct FinishInfo {
  FinishReason reason = FinishReason::kStop;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  CacheReport cache;
  double decode_tokens_per_s = 0;
};

// Receives one request's results. Called on the scheduler thread: every method must return
// quickly (queue, never block on the network).
//
// Thread roles: OnStarted, OnToken and OnFinished on the scheduler thread; Cancelled() may be
// read from any thread.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // The prompt has been prefilled; the first token follows.
  virtual void OnStarted(const StartInfo& info) = 0;
  // A generated token. Returns false to stop generating (a stop string was found); the token
  // is then the last one.
  virtual bool OnToken(const SampledToken& token) = 0;
  // The request ended: `status` OK with `info`, or the error that ended it.
  virtual void OnFinished(const absl::Status& status, const FinishInfo& info) = 0;
  // Whether the client has gone away.
  virtual bool Cancelled() const = 0;
};

// One generation request as the scheduler runs it.
struct GenerateRequest {
  std::string id;
  std::vector<int32_t> prompt;  // Non-empty, ids inside the vocabulary.
  SamplingOptions sampling;
  int64_t max_tokens = 0;         // > 0; the scheduler also stops at the context limit.
  std::vector<int32_t> stop_ids;  // Generation stops after one of these (EOS included).
  int64_t stable_boundary = 0;    // 0 = unknown.
  int64_t shared_boundary = 0;    // End of a preamble other conversations share; 0 = unknown.
  std::string conversation;       // Label for cache events.
  absl::Time deadline = absl::InfiniteFuture();
  std::unique_ptr<RequestSink> sink;
  // Null: any token may come next. Else asked for the allowed tokens before each token is
  // sampled and told the one chosen (structured outputs); its errors end the request. It must
  // allow one of `stop_ids` where the answer may end.
  std::unique_ptr<TokenConstraint> constraint;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_REQUEST_H_
