#include "services/infer/engine/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/status/check.h"

namespace cairn::infer {
namespace {

// How long the idle loop sleeps before it looks at cancellations and the cache again.
constexpr absl::Duration kIdleWait = absl::Milliseconds(50);

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

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
  enum class Phase { kPrefill, kDecode, kDone } phase = Phase::kPrefill;
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
  CacheReport report;
  absl::Time start;
  absl::Time first_token;
};

Scheduler::Scheduler(Model* model, KvMemory* memory, StateCache* cache,
                     const SchedulerOptions& options)
    : model_(model),
      memory_(memory),
      cache_(cache),
      options_(options),
      context_tokens_(memory->num_slots() > 0 ? memory->slot(0)->max_rows() : 0),
      slots_(memory->num_slots()) {
  PublishSnapshot();
}

Scheduler::~Scheduler() { Shutdown(absl::Now()); }

void Scheduler::Start() {
  CAIRN_CHECK(!thread_.joinable());
  thread_ = std::thread([this] { Loop(); });
}

absl::Status Scheduler::Submit(GenerateRequest request) {
  MutexLock lock(&mu_);
  if (!fault_.ok()) return fault_;
  if (stopping_) return absl::UnavailableError("the inference daemon is draining");
  // The idle slots take as many requests as they are; max_queue more may wait for one.
  if (static_cast<int64_t>(queue_.size()) >=
      static_cast<int64_t>(options_.max_queue) + idle_slots_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request queue is full (", options_.max_queue, " waiting); retry later"));
  }
  queue_.push_back(std::move(request));
  cv_.SignalAll();
  return absl::OkStatus();
}

void Scheduler::Wake() {
  MutexLock lock(&mu_);
  woken_ = true;
  cv_.SignalAll();
}

void Scheduler::Shutdown(absl::Time deadline) {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cancel_at_ = std::min(cancel_at_, deadline);
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

std::vector<SlotSnapshot> Scheduler::Snapshot() const {
  MutexLock lock(&mu_);
  return snapshot_;
}

int Scheduler::queued() const {
  MutexLock lock(&mu_);
  // Requests an idle slot is about to take do not wait for one.
  return std::max(0, static_cast<int>(queue_.size()) - idle_slots_);
}

void Scheduler::PublishSnapshot() {
  std::vector<SlotSnapshot> snap;
  int idle = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    snap.push_back({static_cast<int>(i), s.busy ? s.state : SlotSnapshot::State::kIdle,
                    static_cast<int64_t>(s.tokens.size()), s.request_id, s.conversation});
    if (!s.busy) ++idle;
  }
  MutexLock lock(&mu_);
  snapshot_ = std::move(snap);
  idle_slots_ = idle;
}

void Scheduler::Loop() {
  while (true) {
    absl::Time cancel_at;
    std::deque<GenerateRequest> refused;
    bool exit = false;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty() && active_.empty() && !woken_ &&
             !(cache_ != nullptr && cache_->HasBackgroundWork())) {
        // The cache client wakes us when work arrives or a new session starts; the timeout
        // only bounds how stale a missed wake-up can leave us.
        cv_.WaitWithTimeout(&mu_, kIdleWait);
      }
      woken_ = false;
      if (stopping_) {
        refused.swap(queue_);
        exit = active_.empty();
      }
      cancel_at = cancel_at_;
    }
    for (GenerateRequest& r : refused) {
      r.sink->OnFinished(absl::UnavailableError("the inference daemon is draining"), {});
    }
    if (exit) break;
    SyncFrontiers();
    DropCancelledQueued();
    bool did = Admit();
    CheckCancellations(cancel_at);
    did |= PrefillStep();
    did |= DecodeStep();
    if (CheckFault()) did = false;
    ReapFinished();
    PublishSnapshot();
    // Urgent spills every step (another daemon may wait for them); idle ones only when the
    // slots have nothing else to do.
    if (cache_ != nullptr && cache_->HasBackgroundWork()) {
      cache_->RunBackgroundWork(memory_, did ? absl::ZeroDuration() : options_.background_slice);
    }
  }
  // Spills copying in the background are answered before the slots go.
  if (cache_ != nullptr) cache_->FinishBackgroundCopies(memory_);
  PublishSnapshot();
}

absl::Status Scheduler::PassFailure(const absl::Status& failed) const {
  const absl::Status fault = model_->Fault();
  if (fault.ok()) return failed;
  return absl::UnavailableError(
      absl::StrCat("the inference backend failed and can run nothing more (the daemon restarts): ",
                   fault.message()));
}

bool Scheduler::CheckFault() {
  {
    MutexLock lock(&mu_);
    if (!fault_.ok()) return true;
  }
  const absl::Status fault = model_->Fault();
  if (fault.ok()) return false;
  const absl::Status ended = PassFailure(fault);
  CAIRN_LOG(ERROR) << "the model faulted; ending every request: " << fault;
  std::deque<GenerateRequest> refused;
  {
    MutexLock lock(&mu_);
    fault_ = ended;
    stopping_ = true;
    refused.swap(queue_);
  }
  for (GenerateRequest& r : refused) r.sink->OnFinished(ended, {});
  for (std::unique_ptr<Active>& a : active_) Finish(*a, ended, FinishReason::kStop);
  if (options_.on_fault) options_.on_fault(fault);
  return true;
}

void Scheduler::CacheFailed(const absl::Status& status, const char* what) {
  CAIRN_LOG(WARNING) << "cache " << what << " failed, continuing without it: " << status;
}

void Scheduler::SyncFrontiers() {
  if (!StateCacheUsable()) return;
  const uint64_t generation = cache_->generation();
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.busy || s.registered_generation == generation) continue;
    s.registered_generation = generation;
    if (s.tokens.empty()) continue;
    absl::Status st =
        cache_->StartSlot(static_cast<int>(i), /*cold=*/true, s.conversation, memory_);
    if (st.ok()) st = cache_->UpdateFrontier(static_cast<int>(i), s.tokens, 0);
    if (!st.ok()) {
      CacheFailed(st, "frontier re-registration");
      s.registered_generation = 0;
      return;
    }
    cache_->SlotIdle(static_cast<int>(i));
  }
}

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

void Scheduler::DropCancelledQueued() {
  std::deque<GenerateRequest> queued;
  {
    MutexLock lock(&mu_);
    if (queue_.empty()) return;
    queued.swap(queue_);
  }
  // The sinks are asked outside the lock (they may take locks of their own).
  const absl::Time now = absl::Now();
  std::deque<GenerateRequest> keep;
  std::vector<std::pair<GenerateRequest, absl::Status>> dropped;
  for (GenerateRequest& r : queued) {
    if (r.sink->Cancelled()) {
      dropped.emplace_back(std::move(r), absl::CancelledError("request cancelled while queued"));
    } else if (now >= r.deadline) {
      dropped.emplace_back(std::move(r),
                           absl::DeadlineExceededError("request deadline passed while queued"));
    } else {
      keep.push_back(std::move(r));
    }
  }
  {
    MutexLock lock(&mu_);
    // Requests submitted meanwhile queue behind the ones that were waiting.
    while (!keep.empty()) {
      queue_.push_front(std::move(keep.back()));
      keep.pop_back();
    }
  }
  for (auto& [r, status] : dropped) {
    FinishInfo info;
    info.reason = FinishReason::kCancelled;
    info.prompt_tokens = static_cast<int64_t>(r.prompt.size());
    r.sink->OnFinished(status, info);
  }
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
  if (a.use_cache) cache_->SlotBusy(slot);

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
      if (absl::IsUnavailable(st)) a.use_cache = false;
    }
  }

  int64_t start = 0;
  bool restored = false;
  if (restore != nullptr && a.use_cache) {
    s.state = SlotSnapshot::State::kRestoring;
    PublishSnapshot();
    const absl::Time t0 = absl::Now();
    // A restore waiting for other slots' rows holds this thread, so every other request, up
    // to the cache client's lease wait; it ends sooner when this request's does.
    RestoreLimits limits;
    limits.deadline = a.req.deadline;
    const RequestSink* sink = a.req.sink.get();
    limits.cancelled = [sink] { return sink->Cancelled(); };
    absl::StatusOr<RestoreStats> r =
        cache_->Restore(restore->checkpoint_id, slot, a.req.conversation, memory_, limits);
    a.report.restore_ms = Ms(absl::Now() - t0);
    if (r.ok() && r->depth != restore->depth) {
      // A cache that restored another depth than it offered: the slot's state does not match
      // what the plan says the prompt's prefix is, so it is not used.
      r = absl::InternalError(absl::StrCat("the cache restored depth ", r->depth, " of checkpoint ",
                                           restore->checkpoint_id, ", offered at depth ",
                                           restore->depth));
    }
    if (r.ok()) {
      restored = true;
      start = r->depth;
      s.tokens.assign(prompt.begin(), prompt.begin() + start);
      a.report.tier = r->tier;
      a.report.restored_depth = start;
    } else {
      // A restore the request's own end stopped (its client went, its deadline passed) is no
      // failure, and no prefill follows: the request ends at the next check.
      const bool client_gone = absl::IsCancelled(r.status()) && sink->Cancelled();
      const bool expired = absl::IsDeadlineExceeded(r.status()) && absl::Now() >= limits.deadline;
      if (client_gone) {
        CAIRN_LOG(INFO) << "restoring checkpoint " << restore->checkpoint_id << " into slot "
                        << slot << " stopped: the client cancelled request " << a.req.id;
      } else if (expired) {
        CAIRN_LOG(WARNING) << "restoring checkpoint " << restore->checkpoint_id << " into slot "
                           << slot << " stopped: the deadline of request " << a.req.id
                           << " passed while it waited for the cache";
      } else {
        CAIRN_LOG(WARNING) << "restoring checkpoint " << restore->checkpoint_id << " into slot "
                           << slot << " failed, prefilling cold: " << r.status();
      }
      s.tokens.clear();
      // The restore began by overwriting the slot, so a live frontier it had is gone too.
      live_depth = 0;
      if (absl::IsUnavailable(r.status())) a.use_cache = false;
      a.report.miss_reason = absl::StrCat(
          client_gone || expired ? "restore stopped: " : "restore failed: ", r.status().message());
    }
    s.state = SlotSnapshot::State::kPrefill;
  }
  if (!restored && live_depth > 0) {
    start = live_depth;
    a.report.tier = StateTier::kLive;
    a.report.restored_depth = start;
    if (a.use_cache) {
      absl::Status st = cache_->StartSlot(slot, /*cold=*/false, a.req.conversation, memory_);
      if (!st.ok()) {
        CacheFailed(st, "start slot");
        a.use_cache = false;
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
    CAIRN_CHECK(reset.ok());  // The slot index is ours.
    s.tokens.clear();
    a.report.tier = StateTier::kCold;
  }
  a.prefilled = start;
  a.frontier_reported = start;
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

bool Scheduler::PrefillStep() {
  Active* a = nullptr;
  for (auto& p : active_) {
    if (p->phase == Active::Phase::kPrefill) {
      a = p.get();
      break;
    }
  }
  if (a == nullptr) return false;
  Slot& s = slots_[a->slot];
  const std::vector<int32_t>& prompt = a->req.prompt;
  const int64_t n = static_cast<int64_t>(prompt.size());

  auto capture_here = [&] {
    while (a->next_capture < a->captures.size() &&
           a->captures[a->next_capture].position <= a->prefilled) {
      const PlannedCapture c = a->captures[a->next_capture++];
      if (c.position != a->prefilled || !a->use_cache) continue;
      ReportFrontier(*a);
      const absl::Time t0 = absl::Now();
      absl::Status st = cache_->Capture(a->slot, a->prefilled, c.kind, a->req.conversation,
                                        a->req.stable_boundary, memory_);
      a->report.capture_ms += Ms(absl::Now() - t0);
      if (st.ok()) {
        ++a->report.captures;
      } else {
        CAIRN_LOG(WARNING) << "capture at " << c.position << " in slot " << a->slot
                           << " failed: " << st;
        if (absl::IsUnavailable(st)) a->use_cache = false;
      }
    }
  };
  capture_here();

  int64_t end = std::min(n, a->prefilled + options_.max_pass_tokens);
  if (a->next_capture < a->captures.size()) {
    end = std::min(end, a->captures[a->next_capture].position);
  }
  while (a->next_pass_end < a->pass_ends.size() && a->pass_ends[a->next_pass_end] <= a->prefilled) {
    ++a->next_pass_end;
  }
  if (a->next_pass_end < a->pass_ends.size()) end = std::min(end, a->pass_ends[a->next_pass_end]);
  CAIRN_CHECK(end > a->prefilled);

  const SequencePass pass{memory_->slot(a->slot),
                          absl::MakeConstSpan(prompt).subspan(a->prefilled, end - a->prefilled),
                          false};
  absl::StatusOr<std::vector<std::vector<float>>> logits =
      model_->ForwardBatch(absl::MakeConstSpan(&pass, 1));
  if (!logits.ok()) {
    DropSlotState(*a);
    Finish(*a, PassFailure(logits.status()), FinishReason::kStop);
    return true;
  }
  s.tokens.insert(s.tokens.end(), prompt.begin() + a->prefilled, prompt.begin() + end);
  a->prefilled = end;
  a->report.pass_ends.push_back(end);
  capture_here();
  if (end < n) return true;

  // The prompt is in the slot: report, then the first token.
  ReportFrontier(*a);
  a->first_token = absl::Now();
  a->report.ttft_ms = Ms(a->first_token - a->start);
  a->phase = Active::Phase::kDecode;
  s.state = SlotSnapshot::State::kDecode;
  a->req.sink->OnStarted({a->slot, n, a->report});
  SampleNext(*a, logits->front());
  return true;
}

bool Scheduler::DecodeStep() {
  std::vector<Active*> batch;
  std::vector<SequencePass> passes;
  for (auto& p : active_) {
    if (p->phase != Active::Phase::kDecode) continue;
    batch.push_back(p.get());
  }
  if (batch.empty()) return false;
  passes.reserve(batch.size());
  for (Active* a : batch) {
    passes.push_back({memory_->slot(a->slot), absl::MakeConstSpan(&a->pending, 1), false});
  }
  const absl::Status run = model_->ForwardBatchViews(passes, decode_logits_);
  if (!run.ok()) {
    const absl::Status ended = PassFailure(run);
    for (Active* a : batch) {
      DropSlotState(*a);
      Finish(*a, ended, FinishReason::kStop);
    }
    return true;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    Active& a = *batch[i];
    slots_[a.slot].tokens.push_back(a.pending);
    a.pending = -1;
    SampleNext(a, decode_logits_[i]);
  }
  return true;
}

void Scheduler::SampleNext(Active& a, absl::Span<const float> logits) {
  if (a.req.constraint == nullptr) {
    EmitToken(a, a.sampler->Sample(logits));
    return;
  }
  if (a.req.constraint->Unconstrained()) {
    const SampledToken token = a.sampler->Sample(logits);
    if (absl::Status st = a.req.constraint->Accept(token.id); !st.ok()) {
      Finish(a, st, FinishReason::kStop);
      return;
    }
    EmitToken(a, token);
    return;
  }
  // Sized for the model's vocabulary in Setup; logits rows are that long.
  a.allowed.resize((logits.size() + 63) / 64);
  absl::Status st = a.req.constraint->Allowed(absl::MakeSpan(a.allowed));
  if (!st.ok()) {
    Finish(a, st, FinishReason::kStop);
    return;
  }
  // The sampler needs one allowed id inside the logits; bits past them do not count.
  bool any = false;
  const size_t full_words = logits.size() / 64;
  for (size_t w = 0; w < full_words && !any; ++w) any = a.allowed[w] != 0;
  if (!any && logits.size() % 64 != 0) {
    any = (a.allowed[full_words] & ((uint64_t{1} << (logits.size() % 64)) - 1)) != 0;
  }
  if (!any) {
    Finish(a,
           absl::InternalError("the request's token constraint allowed no token of the "
                               "model's vocabulary"),
           FinishReason::kStop);
    return;
  }
  const SampledToken token = a.sampler->Sample(logits, a.allowed);
  st = a.req.constraint->Accept(token.id);
  if (!st.ok()) {
    Finish(a, st, FinishReason::kStop);
    return;
  }
  EmitToken(a, token);
}

void Scheduler::EmitToken(Active& a, const SampledToken& token) {
  ++a.generated;
  const bool stop_id =
      std::find(a.req.stop_ids.begin(), a.req.stop_ids.end(), token.id) != a.req.stop_ids.end();
  if (stop_id) {
    Finish(a, absl::OkStatus(), FinishReason::kStop);
    return;
  }
  const bool more = a.req.sink->OnToken(token);
  if (!more) {
    Finish(a, absl::OkStatus(), FinishReason::kStop);
    return;
  }
  const int64_t position = static_cast<int64_t>(slots_[a.slot].tokens.size());
  if (a.generated >= a.req.max_tokens || position + 1 > context_tokens_) {
    Finish(a, absl::OkStatus(), FinishReason::kLength);
    return;
  }
  a.pending = token.id;
}

void Scheduler::ReportFrontier(Active& a) {
  if (!a.use_cache) return;
  const std::vector<int32_t>& tokens = slots_[a.slot].tokens;
  const int64_t have = static_cast<int64_t>(tokens.size());
  if (have <= a.frontier_reported) return;
  absl::Status st = cache_->UpdateFrontier(
      a.slot, absl::MakeConstSpan(tokens).subspan(a.frontier_reported), a.frontier_reported);
  if (!st.ok()) {
    CacheFailed(st, "frontier update");
    a.use_cache = false;
    slots_[a.slot].registered_generation = 0;
    return;
  }
  a.frontier_reported = have;
}

void Scheduler::DropSlotState(Active& a) {
  Slot& s = slots_[a.slot];
  CAIRN_LOG(WARNING) << "slot " << a.slot << " dropped its " << s.tokens.size()
                     << " tokens after a failed forward pass";
  // The pass may have advanced the slot's private state (conv windows, recurrent state) before
  // it failed, so nothing in the slot is continued. Rows below the frontier are still what the
  // cache was told: the cold start preserves the ones it borrowed before the reset.
  if (a.use_cache) {
    absl::Status st = cache_->StartSlot(a.slot, /*cold=*/true, a.req.conversation, memory_);
    if (!st.ok()) {
      CacheFailed(st, "start slot after a failed pass");
      a.use_cache = false;
      s.registered_generation = 0;
    }
  }
  absl::Status reset = memory_->Reset(a.slot);
  if (!reset.ok()) CAIRN_LOG(ERROR) << "slot " << a.slot << " reset failed: " << reset;
  s.tokens.clear();
  a.frontier_reported = 0;
}

void Scheduler::Finish(Active& a, const absl::Status& status, FinishReason reason) {
  if (a.phase == Active::Phase::kDone) return;
  ReportFrontier(a);
  a.phase = Active::Phase::kDone;
  FinishInfo info;
  info.reason = reason;
  info.prompt_tokens = static_cast<int64_t>(a.req.prompt.size());
  info.completion_tokens = a.generated;
  info.cache = a.report;
  if (a.generated > 1 && a.first_token != absl::Time()) {
    const double s = absl::ToDoubleSeconds(absl::Now() - a.first_token);
    if (s > 0) info.decode_tokens_per_s = static_cast<double>(a.generated - 1) / s;
  }
  Slot& s = slots_[a.slot];
  s.busy = false;
  s.last_used = ++clock_;
  s.state = SlotSnapshot::State::kIdle;
  s.request_id.clear();
  if (a.use_cache) cache_->SlotIdle(a.slot);
  // Clients that see the end of their request see the slot free in ListSlots.
  PublishSnapshot();
  a.req.sink->OnFinished(status, info);
}

void Scheduler::CheckCancellations(absl::Time cancel_at) {
  const absl::Time now = absl::Now();
  for (auto& p : active_) {
    Active& a = *p;
    if (a.phase == Active::Phase::kDone) continue;
    if (a.req.sink->Cancelled() || now >= cancel_at) {
      Finish(a, absl::CancelledError("request cancelled"), FinishReason::kCancelled);
    } else if (now >= a.req.deadline) {
      Finish(a, absl::DeadlineExceededError("request deadline passed"), FinishReason::kCancelled);
    }
  }
}

void Scheduler::ReapFinished() {
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const std::unique_ptr<Active>& a) {
                                 return a->phase == Active::Phase::kDone;
                               }),
                active_.end());
}

}  // namespace cairn::infer
