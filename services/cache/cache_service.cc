#include "services/cache/cache_service.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/concurrency/mutex.h"
#include "common/log/log.h"
#include "common/status/grpc_status.h"
#include "services/cache/cache_rpc.h"
#include "services/cache/proto_convert.h"

namespace cairn::cache {

// Hands each session's stream messages to the daemon one at a time and in arrival order, on
// the pool (a spill report hashes arena bytes: never in a reaction). The end of a session is
// queued behind its messages, so a SpillDone sent just before the stream closed still counts.
//
// Thread-safe. Tasks reference only this object and session ids, never a reactor.
class CacheServiceImpl::SessionWork {
 public:
  SessionWork(CacheDaemon* daemon, ThreadPool* pool) : daemon_(daemon), pool_(pool) {}

  void Message(uint64_t session, v1::SessionClientMessage message) {
    Enqueue(session, Item{std::move(message), "", nullptr});
  }
  // Ends the session after its queued messages, then runs `then` (if any), unlocked.
  void Close(uint64_t session, std::string reason, std::function<void()> then) {
    Enqueue(session, Item{std::nullopt, std::move(reason), std::move(then)});
  }

 private:
  struct Item {
    std::optional<v1::SessionClientMessage> message;  // Absent: the session ends.
    std::string close_reason;
    std::function<void()> then;
  };

  void Enqueue(uint64_t session, Item item) ABSL_LOCKS_EXCLUDED(mu_) {
    bool start = false;
    {
      MutexLock lock(&mu_);
      std::deque<Item>& q = queues_[session];
      start = q.empty();
      q.push_back(std::move(item));
    }
    // After Shutdown began (the daemon is stopping) the work runs here instead.
    if (start && !pool_->Schedule([this, session] { Run(session); })) Run(session);
  }

  void Run(uint64_t session) ABSL_LOCKS_EXCLUDED(mu_) {
    while (true) {
      Item item;
      {
        MutexLock lock(&mu_);
        item = std::move(queues_.at(session).front());
      }
      if (item.message.has_value()) {
        absl::Status s = HandleSessionMessage(*daemon_, session, *item.message);
        if (!s.ok()) CAIRN_LOG(WARNING) << "session " << session << " message: " << s;
      } else {
        daemon_->CloseSession(session, item.close_reason);
        if (item.then) item.then();
      }
      MutexLock lock(&mu_);
      std::deque<Item>& q = queues_.at(session);
      q.pop_front();
      if (q.empty()) {
        queues_.erase(session);
        return;
      }
    }
  }

  CacheDaemon* const daemon_;
  ThreadPool* const pool_;
  Mutex mu_;
  // Per session: the item being handled (front) and those behind it. A queue exists while a
  // task runs it.
  absl::flat_hash_map<uint64_t, std::deque<Item>> queues_ ABSL_GUARDED_BY(mu_);
};

// One inference daemon's session stream. Reads run on gRPC's threads and hand work to
// SessionWork; writes are queued and issued one at a time. Deletes itself in OnDone, unless
// DrainSessions holds it then (the last Release deletes it). A session the daemon expired (no
// heartbeat) is ended at the client's next message, or by the transport when the peer is gone.
//
// Thread-safe: gRPC callbacks, the daemon (Send under the session table's lock) and
// DrainSessions may race; `mu_` guards the write queue, the finished flag and the holds. gRPC
// may run a reaction inline inside StartWrite or Finish, so neither is called with `mu_` held,
// and Finish is called only from reactions and DrainSessions, never from Send (which runs
// under the session table's lock, and OnDone takes that lock to detach the session).
class CacheServiceImpl::SessionReactor final
    : public grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>,
      public SessionSink {
 public:
  explicit SessionReactor(CacheServiceImpl* service)
      : service_(service), daemon_(service->daemon_) {
    {
      MutexLock lock(&service_->sessions_mu_);
      service_->sessions_.insert(this);
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client closed its side or the stream broke: the session is over. The stream ends
      // once the daemon has closed the session, so a client that sees the end of its stream
      // sees the session's leases, spills and slots already settled. The hold keeps this
      // reactor alive until then (OnDone cannot run before this reaction returns).
      if (session_id_ == 0 || ended_) {
        Close(absl::OkStatus());
        return;
      }
      Hold();
      EndSession("stream closed by the client", [this] {
        Close(absl::OkStatus());
        Release();
      });
      return;
    }
    if (session_id_ == 0) {
      if (!in_.has_hello()) {
        Close(absl::InvalidArgumentError("the first session message must be hello"));
        return;
      }
      absl::StatusOr<SessionHello> hello = HelloFromProto(in_.hello());
      absl::StatusOr<SessionWelcome> welcome =
          hello.ok() ? daemon_->OpenSession(*hello, this) : hello.status();
      if (!welcome.ok()) {
        Close(welcome.status());
        return;
      }
      session_id_ = welcome->session_id;
      v1::SessionServerMessage out;
      *out.mutable_welcome() = ToProtoWelcome(*welcome);
      Send(std::move(out));
    } else if (in_.has_heartbeat()) {
      // Cheap, no I/O: answered in the reaction. A session the daemon expired ends here.
      absl::Status s = daemon_->Touch(session_id_);
      if (!s.ok()) {
        Close(absl::UnavailableError(absl::StrCat("session ended: ", s.message())));
        return;
      }
    } else {
      service_->work_->Message(session_id_, in_);
    }
    StartRead(&in_);
  }

  // Queues `message`. StartWrite is issued without holding mu_: gRPC may run OnWriteDone
  // inline, and it takes mu_. std::deque keeps the address of queued elements stable.
  void Send(v1::SessionServerMessage message) override ABSL_LOCKS_EXCLUDED(mu_) {
    const v1::SessionServerMessage* next = nullptr;
    {
      MutexLock lock(&mu_);
      if (finished_) return;
      queue_.push_back(std::move(message));
      if (writing_) return;
      writing_ = true;
      next = &queue_.front();
    }
    StartWrite(next);
  }

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_) {
    const v1::SessionServerMessage* next = nullptr;
    {
      MutexLock lock(&mu_);
      queue_.pop_front();
      if (!ok || finished_ || queue_.empty()) {
        writing_ = false;
        written_.SignalAll();
        return;
      }
      next = &queue_.front();
    }
    StartWrite(next);
  }

  void OnDone() override {
    EndSession("stream done", nullptr);
    {
      MutexLock lock(&service_->sessions_mu_);
      service_->sessions_.erase(this);
    }
    bool last = false;
    {
      MutexLock lock(&mu_);
      done_ = true;
      last = holds_ == 0;
    }
    if (last) delete this;
  }

  // Keeps the reactor alive past OnDone until Release. REQUIRES: OnDone has not run yet: the
  // caller is a reaction, or holds the service's sessions_mu_ with this reactor registered.
  void Hold() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    ++holds_;
  }
  void Release() ABSL_LOCKS_EXCLUDED(mu_) {
    bool last = false;
    {
      MutexLock lock(&mu_);
      last = --holds_ == 0 && done_;
    }
    if (last) delete this;
  }

  // Sends Draining, waits up to `grace` for the queued messages to be written, and ends the
  // stream. Called by DrainSessions with a hold and no lock.
  void Drain(absl::Duration grace) ABSL_LOCKS_EXCLUDED(mu_) {
    v1::SessionServerMessage m;
    m.mutable_draining()->set_reason("the cache daemon is shutting down");
    Send(std::move(m));
    {
      const absl::Time deadline = absl::Now() + grace;
      MutexLock lock(&mu_);
      while (writing_ && !finished_) {
        const absl::Duration left = deadline - absl::Now();
        if (left <= absl::ZeroDuration()) break;
        written_.WaitWithTimeout(&mu_, left);
      }
    }
    Close(absl::UnavailableError("the cache daemon is draining"));
  }

 private:
  // Ends the stream with `status`. Finish runs without mu_: OnDone may follow at once.
  void Close(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(ToGrpcStatus(status));
  }

  // Nothing more reaches this reactor from the daemon once DetachSession returns; the rest of
  // the session's end runs in order behind its queued messages.
  void EndSession(const std::string& reason, std::function<void()> then) {
    if (session_id_ == 0 || ended_) return;
    ended_ = true;
    daemon_->DetachSession(session_id_);
    service_->work_->Close(session_id_, reason, std::move(then));
  }

  CacheServiceImpl* const service_;
  CacheDaemon* const daemon_;
  v1::SessionClientMessage in_;  // Touched only by the read chain.
  uint64_t session_id_ = 0;      // Set once by the read chain.
  bool ended_ = false;           // Read chain and OnDone, which never overlap.
  Mutex mu_;
  CondVar written_;  // Signalled when the write queue empties.
  std::deque<v1::SessionServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  int holds_ ABSL_GUARDED_BY(mu_) = 0;
};

namespace {

// Streams events, then (with follow) waits for new ones.
//
// Thread-safe. gRPC may run a reaction inline inside StartWrite or Finish, so neither is ever
// called with `state_->mu` held. A wake-up registered with the daemon may run after the stream
// is gone, so the reactor and its wake-ups share `State` (the one shared_ptr here, because
// that lifetime is truly shared with the daemon's pending callback); a wake-up that is pumping
// when OnDone runs deletes the reactor when it finishes.
class EventsReactor final : public grpc::ServerWriteReactor<v1::Event> {
 public:
  EventsReactor(CacheDaemon* daemon, const v1::StreamEventsRequest& request)
      : daemon_(daemon),
        follow_(request.follow()),
        limit_(request.limit()),
        state_(std::make_shared<State>()) {
    {
      MutexLock lock(&state_->mu);
      state_->reactor = this;
      after_ = request.after_seq();
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    bool cancelled = false;
    {
      MutexLock lock(&state_->mu);
      writing_ = false;
      if (!ok) {
        cancelled = !finished_;
        finished_ = true;
      } else {
        after_ = batch_[index_].seq();
        ++sent_;
        ++index_;
      }
    }
    if (cancelled) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    Pump();
  }

  void OnCancel() override {
    bool finish = false;
    {
      MutexLock lock(&state_->mu);
      if (wait_token_ != 0) daemon_->CancelEventWait(wait_token_);
      wait_token_ = 0;
      if (!writing_ && !finished_) {
        finished_ = true;
        finish = true;
      }
    }
    if (finish) Finish(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    bool last = false;
    {
      MutexLock lock(&state_->mu);
      state_->reactor = nullptr;
      if (wait_token_ != 0) daemon_->CancelEventWait(wait_token_);
      wait_token_ = 0;
      last = state_->pumping == 0;
    }
    if (last) delete this;
  }

 private:
  struct State {
    Mutex mu;
    EventsReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;  // Null once OnDone ran.
    int pumping ABSL_GUARDED_BY(mu) = 0;                   // Wake-ups inside Pump().
  };

  // Writes the next event, or registers for the next one, or finishes.
  void Pump() {
    while (true) {
      const v1::Event* write = nullptr;
      bool finish = false;
      {
        MutexLock lock(&state_->mu);
        if (finished_ || writing_) return;
        if (limit_ != 0 && sent_ >= limit_) {
          finished_ = finish = true;
        } else {
          if (index_ >= batch_.size()) {
            batch_ = daemon_->EventsAfter(after_, kBatch);
            index_ = 0;
          }
          if (index_ < batch_.size()) {
            writing_ = true;
            write = &batch_[index_];
          } else if (!follow_) {
            finished_ = finish = true;
          } else {
            wait_token_ = daemon_->WaitForEvents(after_, Waker());
            if (wait_token_ != 0) return;
            continue;  // An event arrived between the fetch and the registration.
          }
        }
      }
      if (write != nullptr) StartWrite(write);
      if (finish) Finish(grpc::Status::OK);
      return;
    }
  }

  // The wake-up runs on whichever thread logs the next event, without the daemon's lock.
  std::function<void()> Waker() {
    std::weak_ptr<State> weak = state_;
    return [weak] {
      std::shared_ptr<State> state = weak.lock();
      if (state == nullptr) return;
      EventsReactor* reactor = nullptr;
      {
        MutexLock lock(&state->mu);
        reactor = state->reactor;
        if (reactor == nullptr) return;
        reactor->wait_token_ = 0;
        ++state->pumping;
      }
      reactor->Pump();
      bool orphaned = false;
      {
        MutexLock lock(&state->mu);
        --state->pumping;
        orphaned = state->reactor == nullptr && state->pumping == 0;
      }
      if (orphaned) delete reactor;  // OnDone ran while this wake-up was pumping.
    };
  }

  static constexpr size_t kBatch = 256;

  CacheDaemon* const daemon_;
  const bool follow_;
  const uint32_t limit_;
  std::shared_ptr<State> state_;
  // Guarded by state_->mu (not expressible to the analysis through the shared pointer).
  uint64_t after_ = 0;
  uint64_t sent_ = 0;
  std::vector<v1::Event> batch_;
  size_t index_ = 0;
  bool writing_ = false;
  bool finished_ = false;
  uint64_t wait_token_ = 0;
};

}  // namespace

namespace {

// `context`'s deadline; InfiniteFuture when it has none.
absl::Time Deadline(const grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

// The time left before `context`'s deadline; InfiniteDuration when it has none.
absl::Duration TimeLeft(const grpc::CallbackServerContext* context) {
  return Deadline(context) - absl::Now();
}

}  // namespace

bool CacheServiceImpl::Admit(grpc::ServerUnaryReactor* reactor) {
  if (!BeginCall()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the cache daemon is draining"));
    return false;
  }
  return true;
}

grpc::Status CacheServiceImpl::Enqueue(absl::AnyInvocable<void() &&> fn) {
  return ToGrpcStatus(
      pool_->ScheduleCall(std::move(fn), options_.max_queued_calls, "the cache daemon"));
}

grpc::ServerUnaryReactor* CacheServiceImpl::RunOnPool(grpc::CallbackServerContext* context,
                                                      PoolBody body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!Admit(reactor)) return reactor;
  grpc::Status queued = Enqueue([this, context, reactor, body = std::move(body)]() mutable {
    if (TimeLeft(context) <= absl::ZeroDuration()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                   "the call's deadline passed while it waited for a thread"));
      EndCall();
      return;
    }
    std::move(body)(reactor);
  });
  if (!queued.ok()) {
    reactor->Finish(queued);
    EndCall();
  }
  return reactor;
}

template <typename Req, typename Resp, typename Method>
grpc::ServerUnaryReactor* CacheServiceImpl::Dispatch(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response, Method method) {
  // `context`, `request` and `response` stay valid until Finish(). Parsing runs on the pool.
  return RunOnPool(context, [this, method, request, response](grpc::ServerUnaryReactor* reactor) {
    Req req;
    Resp resp;
    absl::Status status = Parse(request, &req);
    if (status.ok()) status = std::invoke(method, *daemon_, req, &resp);
    FinishWith(status, resp, response, reactor);
  });
}

template <typename Req>
absl::Status CacheServiceImpl::Parse(const grpc::ByteBuffer* request, Req* req) {
  grpc::ByteBuffer bytes = *request;  // Shares the slices; parsing consumes the copy.
  if (!grpc::SerializationTraits<Req>::Deserialize(&bytes, req).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request does not parse as ", Req::descriptor()->full_name()));
  }
  return absl::OkStatus();
}

template <typename Resp>
void CacheServiceImpl::FinishWith(absl::Status status, const Resp& resp, grpc::ByteBuffer* response,
                                  grpc::ServerUnaryReactor* reactor) {
  bool own = false;
  if (status.ok() && !grpc::SerializationTraits<Resp>::Serialize(resp, response, &own).ok()) {
    status = absl::InternalError("the answer does not serialize");
  }
  reactor->Finish(ToGrpcStatus(status));
  EndCall();
}

// A Flush call. It holds no thread while it waits: the pool parses the request and registers
// the flush with the daemon, which finishes the call from the writer thread, its tick or its
// drain; a cancelled call (client gone, server shutting down) ends the flush at once. The
// reactor is freed when both gRPC (OnDone) and the pool task are done with it.
class CacheServiceImpl::FlushReactor final : public grpc::ServerUnaryReactor {
 public:
  FlushReactor(CacheServiceImpl* service, grpc::CallbackServerContext* context,
               const grpc::ByteBuffer* request, grpc::ByteBuffer* response)
      : service_(service), context_(context), request_(request), response_(response) {}

  // On the pool.
  void Start() {
    v1::FlushRequest req;
    absl::Status parsed = Parse(request_, &req);
    if (!parsed.ok()) {
      service_->FinishWith(parsed, v1::FlushResponse(), response_, this);
    } else {
      const uint64_t id = service_->daemon_->StartFlush(
          TimeLeft(context_), [this](absl::Status status, uint64_t persisted) {
            v1::FlushResponse resp;
            resp.set_persisted(persisted);
            service_->FinishWith(std::move(status), resp, response_, this);
          });
      bool cancelled;
      {
        MutexLock lock(&mu_);
        id_ = id;
        cancelled = cancelled_;
      }
      if (cancelled && id != 0) service_->daemon_->CancelFlush(id);
    }
    Release();
  }
  // Gives up the pool task's share (Start does so itself).
  void Release() { Unref(); }
  void OnCancel() override {
    uint64_t id;
    {
      MutexLock lock(&mu_);
      cancelled_ = true;
      id = id_;
    }
    if (id != 0) service_->daemon_->CancelFlush(id);
  }
  void OnDone() override { Unref(); }

 private:
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  CacheServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  const grpc::ByteBuffer* const request_;
  grpc::ByteBuffer* const response_;
  std::atomic<int> refs_{2};  // gRPC's (until OnDone) and the pool task's.
  Mutex mu_;
  uint64_t id_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::ServerUnaryReactor* CacheServiceImpl::Flush(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  auto* reactor = new FlushReactor(this, context, request, response);
  if (!Admit(reactor)) {
    reactor->Release();  // Finished already: only gRPC's OnDone remains.
    return reactor;
  }
  if (grpc::Status queued = Enqueue([reactor] { reactor->Start(); }); !queued.ok()) {
    reactor->Finish(queued);
    EndCall();
    reactor->Release();
  }
  return reactor;
}

bool CacheServiceImpl::BeginCall() {
  MutexLock lock(&calls_mu_);
  if (refusing_calls_) return false;
  ++calls_;
  return true;
}

void CacheServiceImpl::EndCall() {
  MutexLock lock(&calls_mu_);
  if (--calls_ == 0) calls_done_.SignalAll();
}

bool CacheServiceImpl::DrainCalls(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  {
    MutexLock lock(&calls_mu_);
    refusing_calls_ = true;
  }
  daemon_->AbortFlushes();  // Waiting flushes end now (UNAVAILABLE) instead of holding the drain.
  MutexLock lock(&calls_mu_);
  refusing_calls_ = true;
  while (calls_ > 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    calls_done_.WaitWithTimeout(&calls_mu_, left);
  }
  return true;
}

CacheServiceImpl::CacheServiceImpl(CacheDaemon* daemon, ThreadPool* pool,
                                   CacheServiceOptions options)
    : daemon_(daemon),
      pool_(pool),
      options_(options),
      work_(std::make_unique<SessionWork>(daemon, pool)) {}

CacheServiceImpl::~CacheServiceImpl() = default;

void CacheServiceImpl::DrainSessions(absl::Duration grace) {
  daemon_->BeginDrain();
  std::vector<SessionReactor*> open;
  {
    MutexLock lock(&sessions_mu_);
    for (SessionReactor* r : sessions_) {
      r->Hold();
      open.push_back(r);
    }
  }
  for (SessionReactor* r : open) {
    r->Drain(grace);
    r->Release();
  }
}

grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>*
CacheServiceImpl::Session(grpc::CallbackServerContext* /*context*/) {
  return new SessionReactor(this);
}

grpc::ServerWriteReactor<v1::Event>* CacheServiceImpl::StreamEvents(
    grpc::CallbackServerContext* /*context*/, const v1::StreamEventsRequest* request) {
  return new EventsReactor(daemon_, *request);
}

// Like the other unary calls, but a restore from disk is read on the daemon's disk-load pool
// and answered from there: it never holds an I/O thread for the read.
grpc::ServerUnaryReactor* CacheServiceImpl::AcquireRestore(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return RunOnPool(context, [this, context, request, response](grpc::ServerUnaryReactor* reactor) {
    v1::AcquireRestoreRequest req;
    absl::Status parsed = Parse(request, &req);
    if (!parsed.ok()) {
      FinishWith(parsed, v1::RestoreLease(), response, reactor);
      return;
    }
    rpc::AcquireRestoreAsync(*daemon_, req, Deadline(context),
                             [this, response, reactor](absl::Status s, v1::RestoreLease lease) {
                               FinishWith(std::move(s), lease, response, reactor);
                             });
  });
}

// `Handler` is &rpc::Method: the conversion of the request, the daemon's call, the answer's.
#define CAIRN_CACHE_UNARY(Method, Req, Resp, Handler)                                      \
  grpc::ServerUnaryReactor* CacheServiceImpl::Method(grpc::CallbackServerContext* context, \
                                                     const grpc::ByteBuffer* request,      \
                                                     grpc::ByteBuffer* response) {         \
    return Dispatch<v1::Req, v1::Resp>(context, request, response, Handler);               \
  }

CAIRN_CACHE_UNARY(RegisterModel, RegisterModelRequest, RegisterModelResponse, &rpc::RegisterModel)
CAIRN_CACHE_UNARY(Lookup, LookupRequest, LookupResponse, &rpc::Lookup)
CAIRN_CACHE_UNARY(StartSlot, StartSlotRequest, StartSlotResponse, &rpc::StartSlot)
CAIRN_CACHE_UNARY(ReleaseLease, ReleaseLeaseRequest, ReleaseLeaseResponse, &rpc::ReleaseLease)
CAIRN_CACHE_UNARY(ReserveCapture, ReserveCaptureRequest, CaptureReservation, &rpc::ReserveCapture)
CAIRN_CACHE_UNARY(CommitCapture, CommitCaptureRequest, CommitCaptureResponse, &rpc::CommitCapture)
CAIRN_CACHE_UNARY(AbortCapture, AbortCaptureRequest, AbortCaptureResponse, &rpc::AbortCapture)
CAIRN_CACHE_UNARY(UpdateFrontier, UpdateFrontierRequest, UpdateFrontierResponse,
                  &rpc::UpdateFrontier)
CAIRN_CACHE_UNARY(GetStatus, GetStatusRequest, GetStatusResponse, &rpc::GetStatus)
CAIRN_CACHE_UNARY(ListCheckpoints, ListCheckpointsRequest, ListCheckpointsResponse,
                  &rpc::ListCheckpoints)
CAIRN_CACHE_UNARY(GetTree, GetTreeRequest, GetTreeResponse, &rpc::GetTree)
CAIRN_CACHE_UNARY(Explain, ExplainRequest, ExplainResponse, &rpc::Explain)
CAIRN_CACHE_UNARY(Evict, EvictRequest, EvictResponse, &rpc::Evict)

#undef CAIRN_CACHE_UNARY

}  // namespace cairn::cache
