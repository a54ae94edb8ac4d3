#include "services/gateway/upstream/infer_pool.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/grpc/client.h"
#include "common/grpc/peer_address.h"
#include "common/log/log.h"
#include "common/status/annotate.h"
#include "common/status/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace cairn::gateway {

// One daemon: its channel and what the last refresh learned. Thread-safe.
class InferDaemon {
 public:
  explicit InferDaemon(std::string address)
      : address_(std::move(address)),
        stub_(infer_v1::InferService::NewStub(NewLocalChannel(address_))) {}

  const std::string& address() const { return address_; }
  infer_v1::InferService::Stub* stub() { return stub_.get(); }
  std::atomic<int64_t> inflight{0};

  // Asks the daemon for its model and slots (blocking; called by the refresher only).
  void Refresh(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_) {
    infer_v1::GetModelInfoResponse model;
    infer_v1::ListSlotsResponse slots;
    auto ctx = NewClientContext(timeout);
    grpc::Status s = stub_->GetModelInfo(ctx.get(), infer_v1::GetModelInfoRequest(), &model);
    if (s.ok()) {
      auto slots_ctx = NewClientContext(timeout);
      s = stub_->ListSlots(slots_ctx.get(), infer_v1::ListSlotsRequest(), &slots);
    }
    MutexLock lock(&mu_);
    const bool was_ready = status_.ready;
    status_.ready = s.ok();
    if (s.ok()) {
      status_.error.clear();
      status_.model = std::move(model);
      status_.slots = std::move(slots);
      if (!was_ready) {
        CAIRN_LOG(INFO) << "inference daemon " << address_ << " serves " << status_.model.name();
      }
    } else {
      status_.error = s.error_message();
      if (was_ready) {
        CAIRN_LOG(WARNING) << "inference daemon " << address_
                           << " unreachable: " << s.error_message();
      }
    }
  }

  DaemonStatus Status() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    DaemonStatus s = status_;
    s.address = address_;
    s.inflight = inflight.load();
    return s;
  }

 private:
  const std::string address_;
  std::unique_ptr<infer_v1::InferService::Stub> stub_;
  mutable Mutex mu_;
  DaemonStatus status_ ABSL_GUARDED_BY(mu_);
};

namespace {

absl::Duration Remaining(absl::Time deadline) {
  return std::max(absl::Milliseconds(1), deadline - absl::Now());
}

}  // namespace

// One attempt of a Generate stream on one daemon. Owned by itself (through `self_`) from
// start until OnDone, and shared with its GenerateRun for ReadNext and Cancel.
//
// A hold keeps OnDone from running until the consumer stops reading: it is released when
// a read reports the end of the stream, or on Cancel when no read is pending.
class GenerateReactor : public grpc::ClientReadReactor<infer_v1::GenerateResponse> {
 public:
  GenerateReactor(std::shared_ptr<GenerateRun> run, InferDaemon* daemon,
                  const infer_v1::GenerateRequest& request, absl::Time deadline)
      : run_(std::move(run)),
        daemon_(daemon),
        request_(request),
        context_(NewClientContext(Remaining(deadline))) {}

  void Start(std::shared_ptr<GenerateReactor> self) {
    self_ = std::move(self);
    ++daemon_->inflight;
    daemon_->stub()->async()->Generate(context_.get(), &request_, this);
    AddHold();
    {
      MutexLock lock(&mu_);
      reading_ = true;
    }
    StartRead(&message_);
    StartCall();
  }

  void ReadNext() ABSL_LOCKS_EXCLUDED(mu_) {
    bool release = false;
    {
      MutexLock lock(&mu_);
      if (hold_released_) return;
      if (cancelled_) {
        hold_released_ = release = true;
      } else {
        reading_ = true;
      }
    }
    if (release) {
      RemoveHold();
    } else {
      StartRead(&message_);
    }
  }

  void Cancel() ABSL_LOCKS_EXCLUDED(mu_) {
    bool release = false;
    {
      MutexLock lock(&mu_);
      if (cancelled_) return;
      cancelled_ = true;
      if (!reading_ && !hold_released_) hold_released_ = release = true;
    }
    context_->TryCancel();
    if (release) RemoveHold();
  }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  std::shared_ptr<GenerateRun> run_;
  InferDaemon* const daemon_;  // Owned by the pool, which outlives every call.
  infer_v1::GenerateRequest request_;
  std::unique_ptr<grpc::ClientContext> context_;
  infer_v1::GenerateResponse message_;
  std::shared_ptr<GenerateReactor> self_;  // Released in OnDone.
  Mutex mu_;
  // A read is pending. True from the start: Cancel can reach the reactor (GenerateRun's
  // `current_`) before Start has added the hold and started the first read, and must then
  // leave the hold to that read rather than release a hold not yet added.
  bool reading_ ABSL_GUARDED_BY(mu_) = true;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
};

// One Generate request across its attempts. Thread-safe; shared by the caller (to read and
// cancel), the current attempt, and the pool's registry (weakly, for Shutdown).
class GenerateRun : public GenerateCall, public std::enable_shared_from_this<GenerateRun> {
 public:
  GenerateRun(InferPool* pool, std::vector<InferDaemon*> candidates,
              infer_v1::GenerateRequest request, std::shared_ptr<GenerateObserver> observer)
      : pool_(pool),
        candidates_(std::move(candidates)),
        request_(std::move(request)),
        observer_(std::move(observer)),
        deadline_(absl::Now() + pool->options().generate_timeout) {}

  void StartAttempt() ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<GenerateReactor> reactor;
    bool cancelled = false;
    {
      MutexLock lock(&mu_);
      reactor = std::make_shared<GenerateReactor>(shared_from_this(), candidates_[attempt_],
                                                  request_, deadline_);
      current_ = reactor;
      // A Cancel after the last attempt ended and before `current_` was set found no attempt
      // to cancel (AttemptDone checked `cancelled_` before it): this one takes it.
      cancelled = cancelled_;
    }
    reactor->Start(reactor);
    if (cancelled) reactor->Cancel();
  }

  void ReadNext() override ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<GenerateReactor> r;
    {
      MutexLock lock(&mu_);
      r = current_;
    }
    if (r != nullptr) r->ReadNext();
  }

  void Cancel() override ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<GenerateReactor> r;
    {
      MutexLock lock(&mu_);
      cancelled_ = true;
      r = current_;
    }
    if (r != nullptr) r->Cancel();
  }

  void OnMessage(infer_v1::GenerateResponse message) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      got_message_ = true;
    }
    observer_->OnMessage(std::move(message));
  }

  // The attempt on `daemon` ended with `status`: retry on the next daemon if nothing was
  // streamed yet and the daemon was unavailable, else report.
  void AttemptDone(InferDaemon* daemon, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    bool retry = false;
    {
      MutexLock lock(&mu_);
      current_.reset();
      retry = absl::IsUnavailable(status) && !got_message_ && !cancelled_ &&
              attempt_ + 1 < candidates_.size() && absl::Now() < deadline_;
      if (retry) ++attempt_;
    }
    if (retry) {
      CAIRN_LOG(WARNING) << "generate on " << daemon->address() << " unavailable ("
                         << status.message() << "); retrying on another daemon";
      if (pool_->options().before_retry_for_test) pool_->options().before_retry_for_test(this);
      StartAttempt();
      return;
    }
    {
      std::shared_ptr<GenerateObserver> observer = std::move(observer_);
      observer->OnDone(std::move(status));
    }
    // After the observer is released (it may hold the last reference to the caller's state,
    // which the caller frees once Shutdown() returns).
    pool_->RunEnded(this);
  }

 private:
  InferPool* const pool_;
  const std::vector<InferDaemon*> candidates_;
  const infer_v1::GenerateRequest request_;
  std::shared_ptr<GenerateObserver> observer_;  // Moved out once, at the end.
  const absl::Time deadline_;
  Mutex mu_;
  size_t attempt_ ABSL_GUARDED_BY(mu_) = 0;
  bool got_message_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<GenerateReactor> current_ ABSL_GUARDED_BY(mu_);
};

void GenerateReactor::OnReadDone(bool ok) {
  bool release = false;
  {
    MutexLock lock(&mu_);
    reading_ = false;
    // After Cancel the consumer may never ask again (its executor can be gone at shutdown),
    // so a message that was already on its way is dropped and the hold released here.
    if ((!ok || cancelled_) && !hold_released_) hold_released_ = release = true;
    ok = ok && !cancelled_;
  }
  if (release) RemoveHold();
  if (!ok) return;
  infer_v1::GenerateResponse m = std::move(message_);
  message_.Clear();
  run_->OnMessage(std::move(m));
}

void GenerateReactor::OnDone(const grpc::Status& status) {
  --daemon_->inflight;
  std::shared_ptr<GenerateReactor> keep = std::move(self_);
  std::shared_ptr<GenerateRun> run = std::move(run_);
  run->AttemptDone(daemon_, FromGrpcStatus(status));
}

InferPool::InferPool(InferPoolOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<InferPool>> InferPool::Create(const InferPoolOptions& options) {
  if (options.addresses.empty()) {
    return absl::InvalidArgumentError("no inference daemon address (--infer)");
  }
  std::set<std::string> seen;
  for (const std::string& a : options.addresses) {
    if (absl::Status s = ValidatePeerAddress(a); !s.ok()) {
      return Annotate(s, "inference daemon");
    }
    if (!seen.insert(a).second) {
      return absl::InvalidArgumentError(absl::StrCat("inference daemon ", a, " given twice"));
    }
  }
  auto pool = std::unique_ptr<InferPool>(new InferPool(options));
  for (const std::string& a : options.addresses) {
    pool->daemons_.push_back(std::make_unique<InferDaemon>(a));
  }
  InferPool* p = pool.get();
  pool->refresher_ = std::thread([p] {
    do {
      p->RefreshNow();
    } while (!p->stop_.WaitForNotificationWithTimeout(p->options_.refresh_interval));
  });
  return pool;
}

InferPool::~InferPool() { Shutdown(); }

void InferPool::Shutdown() {
  std::vector<std::shared_ptr<GenerateRun>> runs;
  {
    MutexLock lock(&mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
    for (auto& [raw, weak] : runs_) {
      if (auto r = weak.lock()) runs.push_back(std::move(r));
    }
  }
  for (auto& r : runs) r->Cancel();
  runs.clear();
  {
    MutexLock lock(&mu_);
    // Bounded: cancelled streams end promptly and unary calls carry deadlines.
    while (open_calls_ > 0) cv_.Wait(&mu_);
  }
  stop_.Notify();
  if (refresher_.joinable()) refresher_.join();
}

void InferPool::RefreshNow() {
  bool any_ready = false;
  for (auto& d : daemons_) {
    d->Refresh(options_.refresh_timeout);
    any_ready |= d->Status().ready;
  }
  if (any_ready) {
    MutexLock lock(&mu_);
    cv_.SignalAll();
  }
}

bool InferPool::WaitForReady(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    for (auto& d : daemons_) {
      if (d->Status().ready) return true;
    }
    MutexLock lock(&mu_);
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    cv_.WaitWithTimeout(&mu_, std::min(left, absl::Milliseconds(100)));
  }
}

std::vector<DaemonStatus> InferPool::Daemons() const {
  std::vector<DaemonStatus> out;
  for (const auto& d : daemons_) out.push_back(d->Status());
  return out;
}

std::vector<ModelEntry> InferPool::Models() const {
  std::vector<ModelEntry> models;
  for (const auto& d : daemons_) {
    DaemonStatus s = d->Status();
    if (!s.ready) continue;
    auto it = std::find_if(models.begin(), models.end(),
                           [&](const ModelEntry& m) { return m.name == s.model.name(); });
    if (it == models.end()) {
      models.push_back(
          ModelEntry{s.model.name(), s.model.context_length(), s.model.vocab_size(), 1});
    } else {
      ++it->daemons;
    }
  }
  return models;
}

absl::StatusOr<ModelEntry> InferPool::ResolveModel(absl::string_view requested) const {
  std::vector<ModelEntry> models = Models();
  if (models.empty()) {
    return absl::UnavailableError("no inference daemon is ready; try again shortly");
  }
  for (const ModelEntry& m : models) {
    if (m.name == requested) return m;
  }
  if (models.size() == 1 && (requested.empty() || options_.any_model_name)) return models[0];
  std::vector<std::string> names;
  for (const ModelEntry& m : models) names.push_back(m.name);
  return absl::NotFoundError(absl::StrCat(
      "model \"", requested, "\" is not served; served: ", absl::StrJoin(names, ", ")));
}

std::vector<InferDaemon*> InferPool::Candidates(const std::string& model,
                                                const std::string& conversation) const {
  struct Scored {
    InferDaemon* daemon;
    bool affinity;
    double load;
  };
  std::vector<Scored> scored;
  for (const auto& d : daemons_) {
    DaemonStatus s = d->Status();
    if (!s.ready || s.model.name() != model) continue;
    int64_t busy = 0;
    bool affinity = false;
    for (const auto& slot : s.slots.slots()) {
      if (slot.state() != infer_v1::SlotInfo::STATE_IDLE) ++busy;
      if (!conversation.empty() && slot.conversation() == conversation) affinity = true;
    }
    // Our own open calls are current; the slot table is as of the last refresh.
    busy = std::max(busy, s.inflight) + s.slots.queued_requests();
    double slots = std::max<uint32_t>(1, s.model.slots());
    double load = static_cast<double>(busy) / slots;
    scored.push_back(Scored{d.get(), affinity && load < 1.0, load});
  }
  std::stable_sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    if (a.affinity != b.affinity) return a.affinity;
    return a.load < b.load;
  });
  std::vector<InferDaemon*> out;
  for (const Scored& s : scored) out.push_back(s.daemon);
  return out;
}

void InferPool::CallStarted() {
  MutexLock lock(&mu_);
  ++open_calls_;
}

void InferPool::CallEnded() {
  MutexLock lock(&mu_);
  if (--open_calls_ == 0) cv_.SignalAll();
}

void InferPool::RunEnded(GenerateRun* run) {
  MutexLock lock(&mu_);
  runs_.erase(run);
  if (--open_calls_ == 0) cv_.SignalAll();
}

std::shared_ptr<GenerateCall> InferPool::Generate(const std::string& model,
                                                  infer_v1::GenerateRequest request,
                                                  std::shared_ptr<GenerateObserver> observer) {
  std::vector<InferDaemon*> candidates = Candidates(model, request.conversation());
  absl::Status refused;
  if (candidates.empty()) {
    refused = absl::UnavailableError(
        absl::StrCat("no inference daemon serving ", model, " is ready; try again shortly"));
  }
  auto run =
      std::make_shared<GenerateRun>(this, std::move(candidates), std::move(request), observer);
  {
    MutexLock lock(&mu_);
    if (shutting_down_) refused = absl::UnavailableError("the gateway is shutting down");
    if (refused.ok()) {
      runs_[run.get()] = run;
      ++open_calls_;
    }
  }
  if (!refused.ok()) {
    observer->OnDone(refused);
    return run;
  }
  run->StartAttempt();
  return run;
}

namespace {

// One unary call across its attempts; deletes itself when done.
template <typename Request, typename Response, typename Method>
class UnaryAttempts {
 public:
  UnaryAttempts(InferPool* pool, std::vector<InferDaemon*> candidates, absl::Time deadline,
                Request request, Method method, UnaryCallback<Response> done)
      : pool_(pool),
        candidates_(std::move(candidates)),
        deadline_(deadline),
        request_(std::move(request)),
        method_(method),
        done_(std::move(done)) {}

  // Starts the current attempt; retries on UNAVAILABLE while daemons and time remain.
  void Start() {
    context_ = NewClientContext(Remaining(deadline_));
    response_.Clear();
    InferDaemon* daemon = candidates_[attempt_];
    method_(daemon->stub()->async(), context_.get(), &request_, &response_,
            [this, daemon](grpc::Status s) { OnDone(daemon, s); });
  }

 private:
  void OnDone(InferDaemon* daemon, const grpc::Status& s) {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE && attempt_ + 1 < candidates_.size() &&
        absl::Now() < deadline_) {
      CAIRN_LOG(WARNING) << "call to " << daemon->address() << " unavailable (" << s.error_message()
                         << "); retrying on another daemon";
      ++attempt_;
      Start();
      return;
    }
    InferPool* pool = pool_;
    absl::Status error = FromGrpcStatus(s);
    if (absl::IsResourceExhausted(error)) {
      // Unary calls are never queued, so this is a size limit (an answer over the channel's
      // receive limit, a template's output), which a retry cannot pass: not a 429.
      error = absl::OutOfRangeError(absl::StrCat(
          error.message(), "; the request is over a size limit, retrying cannot help"));
    }
    {
      UnaryCallback<Response> cb = std::move(done_);
      absl::StatusOr<Response> result =
          s.ok() ? absl::StatusOr<Response>(std::move(response_)) : absl::StatusOr<Response>(error);
      delete this;
      cb(std::move(result));
    }
    // Only now, with the callback and whatever it held gone, may Shutdown() return: the
    // callback can hold the last reference to state its caller frees after Shutdown.
    pool->CallEnded();
  }

  InferPool* const pool_;
  const std::vector<InferDaemon*> candidates_;
  const absl::Time deadline_;
  size_t attempt_ = 0;
  Request request_;
  Response response_;
  Method method_;
  std::unique_ptr<grpc::ClientContext> context_;
  UnaryCallback<Response> done_;
};

}  // namespace

template <typename Request, typename Response, typename Method>
void InferPool::Unary(const std::string& model, Request request, Method method,
                      UnaryCallback<Response> done) {
  std::vector<InferDaemon*> candidates = Candidates(model, "");
  if (candidates.empty()) {
    done(absl::UnavailableError(
        absl::StrCat("no inference daemon serving ", model, " is ready; try again shortly")));
    return;
  }
  bool refused = false;
  {
    MutexLock lock(&mu_);
    refused = shutting_down_;
    if (!refused) ++open_calls_;
  }
  if (refused) {
    done(absl::UnavailableError("the gateway is shutting down"));
    return;
  }
  (new UnaryAttempts<Request, Response, Method>(this, std::move(candidates),
                                                absl::Now() + options_.rpc_timeout,
                                                std::move(request), method, std::move(done)))
      ->Start();
}

void InferPool::Tokenize(const std::string& model, infer_v1::TokenizeRequest request,
                         UnaryCallback<infer_v1::TokenizeResponse> done) {
  Unary<infer_v1::TokenizeRequest, infer_v1::TokenizeResponse>(
      model, std::move(request),
      [](auto* a, grpc::ClientContext* c, const auto* req, auto* resp, auto cb) {
        a->Tokenize(c, req, resp, std::move(cb));
      },
      std::move(done));
}

void InferPool::Detokenize(const std::string& model, infer_v1::DetokenizeRequest request,
                           UnaryCallback<infer_v1::DetokenizeResponse> done) {
  Unary<infer_v1::DetokenizeRequest, infer_v1::DetokenizeResponse>(
      model, std::move(request),
      [](auto* a, grpc::ClientContext* c, const auto* req, auto* resp, auto cb) {
        a->Detokenize(c, req, resp, std::move(cb));
      },
      std::move(done));
}

void InferPool::ApplyTemplate(const std::string& model, infer_v1::ApplyTemplateRequest request,
                              UnaryCallback<infer_v1::ApplyTemplateResponse> done) {
  Unary<infer_v1::ApplyTemplateRequest, infer_v1::ApplyTemplateResponse>(
      model, std::move(request),
      [](auto* a, grpc::ClientContext* c, const auto* req, auto* resp, auto cb) {
        a->ApplyTemplate(c, req, resp, std::move(cb));
      },
      std::move(done));
}

}  // namespace cairn::gateway
