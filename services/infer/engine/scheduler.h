#ifndef CAIRN_SERVICES_INFER_ENGINE_SCHEDULER_H_
#define CAIRN_SERVICES_INFER_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/thread_pool.h"
#include "services/infer/engine/kv_memory.h"
#include "services/infer/engine/request.h"
#include "services/infer/engine/sampler.h"
#include "services/infer/engine/state_cache.h"
#include "services/infer/models/model.h"

namespace cairn::infer {

// SchedulerOptions::sampling_threads' most where it is 0 (one per hardware thread).
inline constexpr int kMaxSamplingThreads = 8;

struct SchedulerOptions {
  // Requests waiting for a slot, beyond those the idle slots take; more are ResourceExhausted.
  int max_queue = 64;
  int64_t max_pass_tokens = 2048;  // Longest prefill pass (captures split passes too).
  // Background cache work (idle spills) runs in slices of this length between steps when no
  // slot has work.
  absl::Duration background_slice = absl::Milliseconds(20);
  // Before another conversation (by its label) overwrites a slot, capture the slot's frontier
  // (prompt and answer) so that the conversation's next turn restores all of it.
  bool preserve_frontier = true;
  // A request that restores a checkpoint runs in the idle slot whose tokens already hold the
  // checkpoint's rows (its frontier shares at least the restore depth with the prompt) rather
  // than the least recently used one, so no other conversation's frontier is overwritten. The
  // cache simulator's request runner chooses the same way (PlannerOptions).
  bool restore_in_holding_slot = true;
  // Among idle slots holding the restore depth equally far, the one whose overwrite spills
  // the fewest bytes into the cache (StatePlan::slot_spill_bytes), then the least recently
  // used (PlannerOptions::holding_slot_cheapest in the simulator).
  bool holding_slot_cheapest = true;
  // With no slot to continue or holding the restore depth: the idle slot whose overwrite
  // spills least, instead of the least recently used (PlannerOptions::cheapest_slot).
  bool cheapest_slot = true;
  // Threads that choose a decode step's tokens (sampling, a constraint's mask) for the step's
  // requests side by side, the scheduler thread being one of them: at 16 sequences of a 248K
  // vocabulary one thread's choices take a visible share of a GPU step. 0: one per hardware
  // thread, at most kMaxSamplingThreads; 1: the scheduler thread alone. Each request's choice
  // is the same whichever thread makes it.
  int sampling_threads = 0;
  // Called once, on the scheduler thread, when the model reports a fault (Model::Fault: it can
  // run no more passes, say its device was lost). By then the scheduler admits nothing more,
  // has ended every running and queued request with UNAVAILABLE naming the fault, and its
  // thread is leaving; Submit refuses with the same. The daemon exits with a failure there, so
  // that its supervisor starts it afresh (the cache daemon keeps the conversations'
  // checkpoints). Null: nothing is called.
  std::function<void(const absl::Status& fault)> on_fault;
};

// A snapshot of one slot for ListSlots.
struct SlotSnapshot {
  enum class State { kIdle, kPrefill, kDecode, kRestoring };
  int slot = 0;
  State state = State::kIdle;
  int64_t tokens = 0;
  std::string request_id;
  std::string conversation;
};

// The one thread that owns the execution slots (docs/architecture.md §6): it admits queued requests
// to slots (a live slot whose tokens the prompt extends, else a free slot, restoring a checkpoint
// when the cache has a deeper one), prefills them in passes that stop at the planned captures,
// and decodes every decoding slot together in one batched forward per step. A long prefill runs
// one pass per step, between decode steps, so it never stalls other slots' streams for more
// than one pass. A restore whose lease waits for rows other slots hold keeps its slot (state
// kRestoring) and is polled between steps, so the wait never stalls them either. gRPC
// handlers only call Submit.
//
// A model that reports a fault (Model::Fault) after which it can run nothing ends the scheduler
// (SchedulerOptions::on_fault): every request ends with UNAVAILABLE, nothing more is admitted.
//
// Thread-safe: Submit, Snapshot, queued and Shutdown may be called from any thread; everything
// else runs on the scheduler thread, which owns the model, the KV memory and the cache client.
class Scheduler {
 public:
  // `model`, `memory` and `cache` (nullable: no cache daemon) must outlive the scheduler.
  Scheduler(Model* model, KvMemory* memory, StateCache* cache, const SchedulerOptions& options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Starts the scheduler thread.
  void Start();
  // Queues `request`. ResourceExhausted when max_queue requests already wait beyond those the
  // idle slots will take, Unavailable after Shutdown; the request's sink is then never called.
  absl::Status Submit(GenerateRequest request) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops admitting requests; requests still running get until `deadline` to finish, then
  // are cancelled. Joins the thread. Idempotent.
  void Shutdown(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // Wakes the scheduler thread (the cache client calls it when work arrives for an idle
  // scheduler).
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<SlotSnapshot> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);
  // Returns the requests waiting for a slot (not those the idle slots are about to take).
  int queued() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t context_tokens() const { return context_tokens_; }

 private:
  struct Active;
  struct Slot;

  void Loop();
  // Moves queued requests into free slots. Returns true if it did anything.
  bool Admit();
  // Takes a slot for `active`: looks its prompt up, chooses the slot, and starts its restore
  // (the request then waits in kRestoring, holding the slot) or its prefill.
  void Setup(std::unique_ptr<Active> active);
  // Polls every restore waiting for its lease (StateCache::PollRestore, which never blocks on
  // it). Returns true if one ended.
  bool PollRestores();
  // After `a`'s restore ended with `r` (the restored stats, or why not): starts its prefill
  // from the restored depth, else cold. `request_ended`: stopped because the request ended.
  void RestoreEnded(Active& a, absl::StatusOr<RestoreStats> r, bool request_ended);
  // Starts `a`'s prefill at `restored_depth` (a checkpoint in its slot), else continuing
  // `live_depth` tokens of its slot's frontier, else cold, with the plan's captures past it.
  void BeginPrefill(Active& a, int64_t restored_depth, int64_t live_depth);
  // With nothing stepped this iteration (its requests wait for restore leases): sleeps until
  // woken or a short poll interval passes, unless there is other work.
  void WaitForRestores() ABSL_LOCKS_EXCLUDED(mu_);
  // Chooses the slot for `prompt`: a free slot whose live tokens are the longest prefix of it
  // (returned in `live_depth`), else a free empty slot, else the least recently used free one.
  // `restore_depth`: the deepest usable RAM or disk checkpoint (0: none).
  int ChooseSlot(const std::vector<int32_t>& prompt, int64_t restore_depth,
                 const std::vector<int64_t>& spill_bytes, int64_t* live_depth);
  // Runs one prefill pass of one prefilling request. Returns true if it did anything.
  bool PrefillStep();
  // Runs one batched decode step of every decoding request.
  bool DecodeStep();
  // Samples `a`'s next token from `logits` (through its constraint's mask when it has one) and
  // emits it; a constraint's error finishes the request with it.
  void SampleNext(Active& a, absl::Span<const float> logits);
  // SampleNext's choice, touching only `a`'s sampler, constraint and mask (so a sampling worker
  // may run it for one request while others run it for others): the token, or the error that
  // ends the request.
  static absl::StatusOr<SampledToken> ChooseNext(Active& a, absl::Span<const float> logits);
  void EmitToken(Active& a, const SampledToken& token);
  void Finish(Active& a, const absl::Status& status, FinishReason reason);
  // The status a request whose pass failed with `failed` ends with: where the model has
  // faulted, UNAVAILABLE naming the fault (a client may retry once the daemon is restarted),
  // else `failed`.
  absl::Status PassFailure(const absl::Status& failed) const;
  // Where the model reports a fault: stops admitting, ends every request, calls on_fault.
  // Returns true once the scheduler has faulted.
  bool CheckFault() ABSL_LOCKS_EXCLUDED(mu_);
  // The request goes on without the cache (a call failed with the session still up).
  void StopCaching(Active& a);
  // After a failed forward pass over `a`'s slot: empties the slot (its private state may be
  // part-way through the pass) and tells the cache, so that no later request continues it.
  void DropSlotState(Active& a);
  // Finishes queued requests that were cancelled or whose deadline passed, without a slot.
  void DropCancelledQueued() ABSL_LOCKS_EXCLUDED(mu_);
  void CheckCancellations(absl::Time cancel_at);
  // Tells the cache what `a`'s slot computed since the last report.
  void ReportFrontier(Active& a);
  // Re-registers slots the cache does not know (after a reconnect).
  void SyncFrontiers();
  void ReapFinished();
  void PublishSnapshot() ABSL_LOCKS_EXCLUDED(mu_);
  bool StateCacheUsable() const { return cache_ != nullptr && cache_->connected(); }
  void CacheFailed(const absl::Status& status, const char* what);

  Model* const model_;
  KvMemory* const memory_;
  StateCache* const cache_;
  const SchedulerOptions options_;
  const int64_t context_tokens_;

  // Scheduler-thread state.
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<Active>> active_;
  uint64_t clock_ = 0;  // Logical time for least-recently-used slot choice.
  // The decode steps' logits, read in place (Model::ForwardBatchViews) until the next step.
  std::vector<absl::Span<const float>> decode_logits_;

  // The sampling workers beside the scheduler thread (SchedulerOptions::sampling_threads less
  // one; null where that is none). With the scheduler thread they take a decode step's requests
  // one at a time and run ChooseNext for each; the scheduler thread then waits for them, so no
  // request's state is touched by two threads at once and it reads the choices after the wait.
  std::unique_ptr<ThreadPool> sampling_pool_;
  int sampling_helpers_ = 0;  // sampling_pool_'s threads.

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<GenerateRequest> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The model's fault (Model::Fault) once seen: Submit refuses with it.
  absl::Status fault_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time cancel_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::vector<SlotSnapshot> snapshot_ ABSL_GUARDED_BY(mu_);
  // Idle slots that no request taken from the queue is bound for: the requests Submit admits
  // beside max_queue. Set by PublishSnapshot, lowered by Admit as it takes a request.
  int idle_slots_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_SCHEDULER_H_
