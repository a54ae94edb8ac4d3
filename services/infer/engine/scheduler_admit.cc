// The scheduler's admission: the slot a queued request takes, its restore (started, polled
// between steps while the other slots run, ended), and the start of its prefill. The loop,
// passes and ends are in scheduler.cc.

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/status/check.h"
#include "services/infer/engine/scheduler.h"
#include "services/infer/engine/scheduler_slots.h"

namespace cairn::infer {

int Scheduler::ChooseSlot(const std::vector<int32_t>& prompt, int64_t restore_depth,
                          const std::vector<int64_t>& spill_bytes, int64_t* live_depth) {
  auto spill = [&](int slot) {
    return static_cast<size_t>(slot) < spill_bytes.size() ? spill_bytes[slot] : 0;
  };
  int best_live = -1;
  int64_t best_depth = 0;
  int holding = -1;
  int64_t holding_shared = restore_depth - 1;
  int empty = -1;
  int lru = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.busy) continue;
    const int slot = static_cast<int>(i);
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    // A live frontier continues in place only if all of it is a prefix of the prompt and at
    // least one prompt token is left to compute (the last token's logits are not kept).
    if (n > best_depth && n < static_cast<int64_t>(prompt.size()) &&
        std::equal(s.tokens.begin(), s.tokens.end(), prompt.begin())) {
      best_live = slot;
      best_depth = n;
    }
    if (options_.restore_in_holding_slot && restore_depth > 0 && n >= restore_depth) {
      const auto mismatch =
          std::mismatch(s.tokens.begin(), s.tokens.end(), prompt.begin(), prompt.end());
      const int64_t shared = mismatch.first - s.tokens.begin();
      const bool tie = holding >= 0 && shared == holding_shared && options_.holding_slot_cheapest &&
                       (spill(slot) < spill(holding) ||
                        (spill(slot) == spill(holding) && s.last_used < slots_[holding].last_used));
      if (shared > holding_shared || tie) {
        holding = slot;
        holding_shared = shared;
      }
    }
    if (n == 0 && empty < 0) empty = slot;
    if (lru < 0 || s.last_used < slots_[lru].last_used) lru = slot;
  }
  *live_depth = best_depth;
  if (best_live >= 0) return best_live;
  if (holding >= 0) return holding;
  int chosen = empty >= 0 ? empty : lru;
  if (!options_.cheapest_slot) return chosen;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const int slot = static_cast<int>(i);
    if (!slots_[i].busy && spill(slot) < spill(chosen)) chosen = slot;
  }
  return chosen;
}

bool Scheduler::Admit() {
  bool did = false;
  while (true) {
    bool free_slot = false;
    for (const Slot& s : slots_) free_slot |= !s.busy;
    if (!free_slot) return did;
    GenerateRequest req;
    {
      MutexLock lock(&mu_);
      if (queue_.empty() || stopping_) return did;
      req = std::move(queue_.front());
      queue_.pop_front();
      --idle_slots_;  // Setup makes a slot busy; the next snapshot counts it so.
    }
    auto a = std::make_unique<Active>();
    a->req = std::move(req);
    Setup(std::move(a));
    did = true;
  }
}

void Scheduler::Setup(std::unique_ptr<Active> owned) {
  Active& a = *owned;
  active_.push_back(std::move(owned));
  a.start = absl::Now();
  const std::vector<int32_t>& prompt = a.req.prompt;
  const int64_t n = static_cast<int64_t>(prompt.size());
  a.sampler = std::make_unique<Sampler>(a.req.sampling, prompt);
  if (a.req.constraint != nullptr) {
    a.allowed.assign((static_cast<size_t>(model_->info().vocab_size) + 63) / 64, 0);
  }
  a.use_cache = StateCacheUsable();
  a.report.cache_available = a.use_cache;

  StatePlan plan;
  if (a.use_cache) {
    absl::StatusOr<StatePlan> p =
        cache_->Lookup(prompt, a.req.stable_boundary, a.req.shared_boundary, a.req.conversation);
    if (p.ok()) {
      plan = std::move(*p);
    } else {
      CacheFailed(p.status(), "lookup");
      a.use_cache = false;
      a.report.cache_available = false;
    }
  }

  // The deepest usable checkpoint (a resumable one leaves at least one token to compute).
  const StateCandidate* restore = nullptr;
  for (const StateCandidate& c : plan.candidates) {
    if (c.depth >= n) continue;
    if (c.tier == StateTier::kRam || c.tier == StateTier::kDisk) {
      restore = &c;
      break;
    }
    if (c.tier == StateTier::kLive) break;  // Live slots are weighed by ChooseSlot.
  }

  int64_t live_depth = 0;
  const int slot = ChooseSlot(prompt, restore != nullptr ? restore->depth : 0,
                              plan.slot_spill_bytes, &live_depth);
  CAIRN_CHECK(slot >= 0);  // Admit only runs with a free slot.
  if (restore != nullptr && restore->depth <= live_depth) restore = nullptr;
  a.slot = slot;
  Slot& s = slots_[slot];
  const std::string previous_conversation = s.conversation;
  const int64_t previous_stable = s.stable_boundary;
  s.busy = true;
  s.last_used = ++clock_;
  s.request_id = a.req.id;
  s.conversation = a.req.conversation;
  s.stable_boundary = a.req.stable_boundary;
  s.state = SlotSnapshot::State::kPrefill;
  if (a.use_cache) {
    cache_->SlotBusy(slot);
    a.busy_generation = cache_->generation();
  }

  // The cache must know the slot's frontier before it can reason about its rows.
  if (a.use_cache && s.registered_generation != cache_->generation()) {
    s.registered_generation = cache_->generation();
    absl::Status st = cache_->StartSlot(slot, /*cold=*/true, s.conversation, memory_);
    if (st.ok() && !s.tokens.empty()) st = cache_->UpdateFrontier(slot, s.tokens, 0);
    if (!st.ok()) {
      CacheFailed(st, "frontier registration");
      a.use_cache = false;
      s.registered_generation = 0;
    }
  }

  // Another conversation is about to overwrite the slot: keep its frontier (prompt and answer)
  // as a checkpoint first, so that its next turn restores it instead of an earlier point.
  if (a.use_cache && options_.preserve_frontier && live_depth == 0 && !s.tokens.empty() &&
      !previous_conversation.empty() && previous_conversation != a.req.conversation) {
    const absl::Time t0 = absl::Now();
    absl::Status st =
        cache_->Capture(slot, static_cast<int64_t>(s.tokens.size()), CapturePointKind::kReused,
                        previous_conversation, previous_stable, memory_);
    a.report.capture_ms += Ms(absl::Now() - t0);
    if (!st.ok()) {
      // Refused by rank, or the frontier is already a checkpoint: nothing to keep.
      if (absl::IsUnavailable(st)) StopCaching(a);
    }
  }

  const bool restoring = restore != nullptr && a.use_cache;
  if (restoring) a.restoring = *restore;
  a.plan = std::move(plan);
  if (restoring) {
    // Starting the restore only leases the checkpoint: the lease may wait for rows other slots
    // still hold, and those slots keep stepping meanwhile (PollRestores).
    s.state = SlotSnapshot::State::kRestoring;
    a.restore_start = absl::Now();
    absl::Status st =
        cache_->StartRestore(a.restoring.checkpoint_id, slot, a.req.conversation, memory_);
    if (st.ok()) {
      a.phase = Active::Phase::kRestoring;
      PublishSnapshot();
    } else {
      RestoreEnded(a, st, /*request_ended=*/false);
    }
    return;
  }
  BeginPrefill(a, /*restored_depth=*/0, live_depth);
}

bool Scheduler::PollRestores() {
  bool did = false;
  for (auto& p : active_) {
    Active& a = *p;
    if (a.phase != Active::Phase::kRestoring) continue;
    // Its request's end also ends the wait; the shutdown's is seen by CheckCancellations.
    RestoreLimits limits;
    limits.deadline = a.req.deadline;
    const RequestSink* sink = a.req.sink.get();
    limits.cancelled = [sink] { return sink->Cancelled(); };
    absl::StatusOr<std::optional<RestoreStats>> r = cache_->PollRestore(a.slot, memory_, limits);
    if (r.ok() && !r->has_value()) continue;
    did = true;
    if (r.ok()) {
      RestoreEnded(a, **r, /*request_ended=*/false);
    } else {
      RestoreEnded(a, r.status(), /*request_ended=*/false);
    }
  }
  return did;
}

void Scheduler::RestoreEnded(Active& a, absl::StatusOr<RestoreStats> r, bool request_ended) {
  Slot& s = slots_[a.slot];
  const std::vector<int32_t>& prompt = a.req.prompt;
  const StateCandidate* restore = &a.restoring;
  const int slot = a.slot;
  a.report.restore_ms = Ms(absl::Now() - a.restore_start);
  if (r.ok() && r->depth != restore->depth) {
    // A cache that restored another depth than it offered: the slot's state does not match
    // what the plan says the prompt's prefix is, so it is not used.
    r = absl::InternalError(absl::StrCat("the cache restored depth ", r->depth, " of checkpoint ",
                                         restore->checkpoint_id, ", offered at depth ",
                                         restore->depth));
  }
  if (r.ok()) {
    const int64_t start = r->depth;
    s.tokens.assign(prompt.begin(), prompt.begin() + start);
    a.report.tier = r->tier;
    a.report.restored_depth = start;
    BeginPrefill(a, start, /*live_depth=*/0);
    return;
  }
  // A restore the request's own end stopped (its client went, its deadline passed, it was
  // ended otherwise) is no failure, and no prefill pass runs: CheckCancellations, which comes
  // after PollRestores, ends the request first.
  const bool client_gone = absl::IsCancelled(r.status()) && a.req.sink->Cancelled();
  const bool expired = absl::IsDeadlineExceeded(r.status()) && absl::Now() >= a.req.deadline;
  if (client_gone) {
    CAIRN_LOG(INFO) << "restoring checkpoint " << restore->checkpoint_id << " into slot " << slot
                    << " stopped: the client cancelled request " << a.req.id;
  } else if (expired) {
    CAIRN_LOG(WARNING) << "restoring checkpoint " << restore->checkpoint_id << " into slot " << slot
                       << " stopped: the deadline of request " << a.req.id
                       << " passed while it waited for the cache";
  } else if (request_ended) {
    CAIRN_LOG(INFO) << "restoring checkpoint " << restore->checkpoint_id << " into slot " << slot
                    << " stopped: request " << a.req.id << " ended: " << r.status();
  } else {
    CAIRN_LOG(WARNING) << "restoring checkpoint " << restore->checkpoint_id << " into slot " << slot
                       << " failed, prefilling cold: " << r.status();
  }
  const bool stopped = client_gone || expired || request_ended;
  s.tokens.clear();
  if (absl::IsUnavailable(r.status())) a.use_cache = false;
  a.report.miss_reason =
      absl::StrCat(stopped ? "restore stopped: " : "restore failed: ", r.status().message());
  // The restore began by overwriting the slot, so a live frontier it had is gone too.
  BeginPrefill(a, /*restored_depth=*/0, /*live_depth=*/0);
}

void Scheduler::BeginPrefill(Active& a, int64_t restored_depth, int64_t live_depth) {
  Slot& s = slots_[a.slot];
  const int slot = a.slot;
  const std::vector<int32_t>& prompt = a.req.prompt;
  const int64_t n = static_cast<int64_t>(prompt.size());
  const bool restored = restored_depth > 0;
  int64_t start = restored_depth;
  a.phase = Active::Phase::kPrefill;
  s.state = SlotSnapshot::State::kPrefill;
  if (!restored && live_depth > 0) {
    start = live_depth;
    a.report.tier = StateTier::kLive;
    a.report.restored_depth = start;
    if (a.use_cache) {
      absl::Status st = cache_->StartSlot(slot, /*cold=*/false, a.req.conversation, memory_);
      if (!st.ok()) {
        CacheFailed(st, "start slot");
        StopCaching(a);
      }
    }
  } else if (!restored) {
    // The slot's rows are overwritten from row 0. While the cache is connected its checkpoints
    // may borrow them, also where this request goes on without the cache (its lookup failed):
    // the cold start preserves them first (or, failing, ends the session, which drops them).
    if (a.use_cache || StateCacheUsable()) {
      absl::Status st = cache_->StartSlot(slot, /*cold=*/true, a.req.conversation, memory_);
      if (!st.ok()) {
        CacheFailed(st, "start slot");
        a.use_cache = false;
      }
      // A slot the request does not report registers its frontier again once it is idle.
      if (!a.use_cache) s.registered_generation = 0;
    }
    absl::Status reset = memory_->Reset(slot);
    s.tokens.clear();
    a.report.tier = StateTier::kCold;
    if (!reset.ok()) {
      // The backend failed (a faulted device fails every call from then on). The request ends
      // as a failed pass ends it, at its turn to prefill: this may run inside its Finish.
      CAIRN_LOG(ERROR) << "slot " << slot << " reset failed: " << reset;
      a.reset_failure = reset;
    }
  }
  a.prefilled = start;
  a.frontier_reported = start;
  const StatePlan plan = std::exchange(a.plan, StatePlan());
  if (a.report.miss_reason.empty()) a.report.miss_reason = plan.miss_reason;
  if (a.use_cache) {
    for (const PlannedCapture& c : plan.captures) {
      if (c.position > n) continue;
      if (c.position > start || (c.position == start && start > 0 && !restored)) {
        a.captures.push_back(c);
      }
    }
    for (int64_t e : plan.pass_ends) {
      if (e > start && e <= n) a.pass_ends.push_back(e);
    }
  }
  a.report.prefilled_tokens = n - start;
}

}  // namespace cairn::infer
