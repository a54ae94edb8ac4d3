#ifndef CAIRN_SERVICES_INFER_ENGINE_TOKEN_CONSTRAINT_H_
#define CAIRN_SERVICES_INFER_ENGINE_TOKEN_CONSTRAINT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace cairn::infer {

// Restricts which tokens one request may generate next (structured outputs: an answer that
// must follow a JSON schema). The scheduler asks for the allowed set before each token it
// samples for the request and reports the token chosen; it knows nothing of what the
// constraint means. The constraint decides when the request may end: it allows the
// end-of-turn tokens only where the answer is complete, and then nothing else.
//
// Thread-compatible: one request's. The scheduler calls it from its own thread or, for a
// decode step's token, from one of its sampling workers (SchedulerOptions::sampling_threads),
// never from two threads at once.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // Sets bit (id % 64) of word id / 64 of `allowed` for each token id that may come next and
  // clears every other bit (`allowed` covers the model's logits, which may be more than the
  // tokenizer's ids: those stay clear). An error (no token can continue, which a correct
  // constraint never reaches) ends the request with it.
  virtual absl::Status Allowed(absl::Span<uint64_t> allowed) = 0;

  // Records the token generated next (one that Allowed allowed). An error ends the request.
  virtual absl::Status Accept(int32_t token) = 0;

  // Whether the next token is free: the scheduler then samples it exactly as for a request
  // without a constraint (no mask, the same choice and logprobs) and still reports it to
  // Accept, without asking Allowed. For constraints that hold only parts of an answer (a tool
  // call, once one opens).
  virtual bool Unconstrained() const { return false; }
};

// Bit `id` of a mask laid out as TokenConstraint::Allowed fills it.
inline bool TokenAllowed(absl::Span<const uint64_t> allowed, int32_t id) {
  return (allowed[static_cast<size_t>(id) / 64] >> (static_cast<uint32_t>(id) % 64)) & 1;
}

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_TOKEN_CONSTRAINT_H_
