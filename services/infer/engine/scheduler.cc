#include "services/infer/engine/scheduler.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/status/check.h"
#include "common/status/status_macros.h"
#include "services/infer/engine/scheduler_slots.h"

namespace cairn::infer {
namespace {

// How long the idle loop sleeps before it looks at cancellations and the cache again.
constexpr absl::Duration kIdleWait = absl::Milliseconds(50);
// How long the loop sleeps when its only requests wait for restore leases.
constexpr absl::Duration kRestorePoll = absl::Milliseconds(20);

}  // namespace

Scheduler::Scheduler(Model* model, KvMemory* memory, StateCache* cache,
                     const SchedulerOptions& options)
    : model_(model),
      memory_(memory),
      cache_(cache),
      options_(options),
      context_tokens_(memory->num_slots() > 0 ? memory->slot(0)->max_rows() : 0),
      slots_(memory->num_slots()) {
  int threads = options.sampling_threads;
  if (threads <= 0) {
    threads =
        std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kMaxSamplingThreads);
  }
  if (threads > 1) {
    sampling_helpers_ = threads - 1;
    sampling_pool_ = std::make_unique<ThreadPool>(sampling_helpers_);
  }
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
    did |= PollRestores();
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
    if (!did && !active_.empty()) WaitForRestores();
  }
  // Spills copying in the background are answered before the slots go.
  if (cache_ != nullptr) cache_->FinishBackgroundCopies(memory_);
  PublishSnapshot();
}

void Scheduler::WaitForRestores() {
  bool free_slot = false;
  for (const Slot& s : slots_) free_slot |= !s.busy;
  MutexLock lock(&mu_);
  if (woken_ || (free_slot && !queue_.empty())) return;
  if (cache_ != nullptr && cache_->HasBackgroundWork()) return;
  // The cache client wakes us when a lease's answer or a spill request arrives; the timeout
  // bounds how late a cancellation or a deadline is seen. A drain lets the restores go on
  // waiting until its deadline (CheckCancellations then ends them), at the same pace.
  absl::Duration timeout = kRestorePoll;
  if (stopping_) timeout = std::min(timeout, cancel_at_ - absl::Now());
  if (timeout <= absl::ZeroDuration()) return;
  cv_.WaitWithTimeout(&mu_, timeout);
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

void Scheduler::DropCancelledQueued() {
  // The sinks are asked outside the lock (they may take locks of their own), with the queue
  // left whole meanwhile: Submit bounds the queue by its length, and only this thread takes
  // requests out of it, so the first `asked` entries are the same ones when the lock is back.
  std::vector<std::pair<const RequestSink*, absl::Time>> asked;
  {
    MutexLock lock(&mu_);
    if (queue_.empty()) return;
    asked.reserve(queue_.size());
    for (const GenerateRequest& r : queue_) asked.emplace_back(r.sink.get(), r.deadline);
  }
  const absl::Time now = absl::Now();
  std::vector<absl::Status> verdicts(asked.size());
  bool any = false;
  for (size_t i = 0; i < asked.size(); ++i) {
    if (asked[i].first->Cancelled()) {
      verdicts[i] = absl::CancelledError("request cancelled while queued");
    } else if (now >= asked[i].second) {
      verdicts[i] = absl::DeadlineExceededError("request deadline passed while queued");
    }
    any |= !verdicts[i].ok();
  }
  if (!any) return;
  std::vector<std::pair<GenerateRequest, absl::Status>> dropped;
  {
    MutexLock lock(&mu_);
    std::deque<GenerateRequest> keep;
    for (size_t i = 0; i < queue_.size(); ++i) {
      if (i < verdicts.size() && !verdicts[i].ok()) {
        dropped.emplace_back(std::move(queue_[i]), std::move(verdicts[i]));
      } else {
        keep.push_back(std::move(queue_[i]));
      }
    }
    queue_.swap(keep);
  }
  for (auto& [r, status] : dropped) {
    FinishInfo info;
    info.reason = FinishReason::kCancelled;
    info.prompt_tokens = static_cast<int64_t>(r.prompt.size());
    r.sink->OnFinished(status, info);
  }
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
  if (!a->reset_failure.ok()) {
    // BeginPrefill emptied the slot's tokens and told the cache of the cold start already.
    Finish(*a, PassFailure(a->reset_failure), FinishReason::kStop);
    return true;
  }
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
        if (absl::IsUnavailable(st)) StopCaching(*a);
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
  for (Active* a : batch) {
    slots_[a->slot].tokens.push_back(a->pending);
    a->pending = -1;
  }
  // The choices side by side (each touches only its own request), then emitted in batch order:
  // the scheduler thread and the sampling workers take the next unchosen request until none is
  // left.
  std::vector<absl::StatusOr<SampledToken>> chosen(batch.size(), absl::UnknownError("unchosen"));
  std::atomic<size_t> next{0};
  const auto choose_rest = [&] {
    for (size_t i = next.fetch_add(1); i < batch.size(); i = next.fetch_add(1)) {
      chosen[i] = ChooseNext(*batch[i], decode_logits_[i]);
    }
  };
  const int helpers =
      sampling_pool_ == nullptr
          ? 0
          : static_cast<int>(std::min(batch.size() - 1, static_cast<size_t>(sampling_helpers_)));
  if (helpers > 0) {
    // cairn::Mutex rather than absl's counters, which ThreadSanitizer cannot see into.
    Mutex done_mu;
    CondVar done_cv;
    int running = helpers;
    for (int h = 0; h < helpers; ++h) {
      auto work = [&] {
        choose_rest();
        MutexLock lock(&done_mu);
        if (--running == 0) done_cv.SignalAll();
      };
      if (!sampling_pool_->Schedule(work)) work();
    }
    choose_rest();
    MutexLock lock(&done_mu);
    while (running > 0) done_cv.Wait(&done_mu);
  } else {
    choose_rest();
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!chosen[i].ok()) {
      Finish(*batch[i], chosen[i].status(), FinishReason::kStop);
    } else {
      EmitToken(*batch[i], *chosen[i]);
    }
  }
  return true;
}

void Scheduler::SampleNext(Active& a, absl::Span<const float> logits) {
  absl::StatusOr<SampledToken> token = ChooseNext(a, logits);
  if (!token.ok()) {
    Finish(a, token.status(), FinishReason::kStop);
    return;
  }
  EmitToken(a, *token);
}

absl::StatusOr<SampledToken> Scheduler::ChooseNext(Active& a, absl::Span<const float> logits) {
  if (a.req.constraint == nullptr) return a.sampler->Sample(logits);
  if (a.req.constraint->Unconstrained()) {
    SampledToken token = a.sampler->Sample(logits);
    RETURN_IF_ERROR(a.req.constraint->Accept(token.id));
    return token;
  }
  // Sized for the model's vocabulary in Setup; logits rows are that long.
  a.allowed.resize((logits.size() + 63) / 64);
  RETURN_IF_ERROR(a.req.constraint->Allowed(absl::MakeSpan(a.allowed)));
  // The sampler needs one allowed id inside the logits; bits past them do not count.
  bool any = false;
  const size_t full_words = logits.size() / 64;
  for (size_t w = 0; w < full_words && !any; ++w) any = a.allowed[w] != 0;
  if (!any && logits.size() % 64 != 0) {
    any = (a.allowed[full_words] & ((uint64_t{1} << (logits.size() % 64)) - 1)) != 0;
  }
  if (!any) {
    return absl::InternalError(
        "the request's token constraint allowed no token of the model's vocabulary");
  }
  SampledToken token = a.sampler->Sample(logits, a.allowed);
  RETURN_IF_ERROR(a.req.constraint->Accept(token.id));
  return token;
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
    StopCaching(a);
    return;
  }
  a.frontier_reported = have;
}

void Scheduler::StopCaching(Active& a) {
  a.use_cache = false;
  // The cache's record of the slot stops where the request left it: the slot registers its
  // frontier again once it is idle (SyncFrontiers), or when its next request starts.
  slots_[a.slot].registered_generation = 0;
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
  if (a.phase == Active::Phase::kRestoring) {
    // Its lease is given back and the slot emptied; the slot then starts cold with the cache,
    // as after a failed restore, so that its frontier is what the cache knows.
    cache_->AbandonRestore(a.slot, memory_, status);
    RestoreEnded(a, status, /*request_ended=*/true);
  }
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
  // A request that stopped using the cache part way (a capture or frontier update failed with
  // the session still up) still clears the busy mark it set: the cache daemon's disk writer
  // yields to busy slots, and would for good.
  if (a.use_cache ||
      (a.busy_generation != 0 && StateCacheUsable() && a.busy_generation == cache_->generation())) {
    cache_->SlotIdle(a.slot);
  }
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
