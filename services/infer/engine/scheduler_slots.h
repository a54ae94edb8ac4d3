// The scheduler's per-slot and per-request records, shared by scheduler.cc (the loop, passes and
// ends) and scheduler_admit.cc (slot choice, restores, the prefill's start). Scheduler-thread
// state: nothing here is read elsewhere.
#ifndef CAIRN_SERVICES_INFER_ENGINE_SCHEDULER_SLOTS_H_
#define CAIRN_SERVICES_INFER_ENGINE_SCHEDULER_SLOTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "services/infer/engine/request.h"
#include "services/infer/engine/sampler.h"
#include "services/infer/engine/scheduler.h"
#include "services/infer/engine/state_cache.h"

namespace cairn::infer {

inline double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// The scheduler's view of one execution slot.
// Invariant: when the slot is not busy, its state is valid at tokens.size() (the live
// frontier); while busy, tokens grows with every pass.
struct Scheduler::Slot {
  std::vector<int32_t> tokens;
  bool busy = false;
  uint64_t last_used = 0;
  // The cache generation its frontier was registered under (0: never).
  uint64_t registered_generation = 0;
  SlotSnapshot::State state = SlotSnapshot::State::kIdle;
  std::string request_id;
  std::string conversation;
  int64_t stable_boundary = 0;  // Of the request that left the frontier.
};

// A request that holds a slot.
struct Scheduler::Active {
  GenerateRequest req;
  int slot = -1;
  // kRestoring: its slot is held while its checkpoint's lease waits (the cache's PollRestore);
  // it computes nothing until the bytes are copied and verified.
  enum class Phase { kRestoring, kPrefill, kDecode, kDone } phase = Phase::kPrefill;
  int64_t prefilled = 0;  // Prompt tokens in the slot.
  std::vector<PlannedCapture> captures;
  size_t next_capture = 0;
  std::vector<int64_t> pass_ends;
  size_t next_pass_end = 0;
  std::unique_ptr<Sampler> sampler;
  // The constraint's mask of allowed tokens, a bit per logit (sized in Setup; empty without a
  // constraint).
  std::vector<uint64_t> allowed;
  int64_t generated = 0;
  int32_t pending = -1;           // Sampled, not yet fed.
  int64_t frontier_reported = 0;  // Tokens of the slot the cache knows about.
  bool use_cache = false;
  // The cache generation in which SlotBusy was sent for this request (0: not sent). Its SlotIdle
  // is owed to that generation's session even after the request stopped using the cache.
  uint64_t busy_generation = 0;
  // Emptying the slot for a cold prefill failed (the backend failed): the request ends at its
  // turn to prefill.
  absl::Status reset_failure;
  // The cache's plan, kept until the prefill's start is known (after a restore).
  StatePlan plan;
  StateCandidate restoring;  // kRestoring: the checkpoint being restored.
  absl::Time restore_start;
  CacheReport report;
  absl::Time start;
  absl::Time first_token;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_SCHEDULER_SLOTS_H_
