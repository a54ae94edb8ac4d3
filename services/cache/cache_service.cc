#include "services/cache/cache_service.h"

#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/concurrency/mutex.h"
#include "common/log/log.h"
#include "common/status/grpc_status.h"

namespace cairn::cache {
namespace {

// One inference daemon's session stream. Reads run on gRPC's threads and only hand work to
// the pool; writes are queued and issued one at a time. Deletes itself in OnDone. A session
// the daemon expired (no heartbeat) is ended at the client's next message, or by the transport
// when the peer is gone.
//
// Thread-safe: gRPC callbacks, the daemon (Send/Close under its lock) and pool tasks may
// race; `mu_` guards the write queue and the finished flag.
class SessionReactor final
    : public grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>,
      public SessionSink {
 public:
  SessionReactor(CacheDaemon* daemon, ThreadPool* pool) : daemon_(daemon), pool_(pool) {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client closed its side or the stream broke: the session is over.
      EndSession("stream closed by the client");
      Close(absl::OkStatus());
      return;
    }
    if (session_id_ == 0) {
      if (!in_.has_hello()) {
        Close(absl::InvalidArgumentError("the first session message must be hello"));
        return;
      }
      absl::StatusOr<v1::Welcome> welcome = daemon_->OpenSession(in_.hello(), this);
      if (!welcome.ok()) {
        Close(welcome.status());
        return;
      }
      session_id_ = welcome->session_id();
      v1::SessionServerMessage out;
      *out.mutable_welcome() = std::move(*welcome);
      Send(std::move(out));
    } else if (in_.has_heartbeat()) {
      // Cheap, no I/O: answered in the reaction. A session the daemon expired ends here.
      absl::Status s = daemon_->Touch(session_id_);
      if (!s.ok()) {
        Close(absl::UnavailableError(absl::StrCat("session ended: ", s.message())));
        return;
      }
    } else {
      // Work that may hash arena bytes runs on the pool, never in the reaction.
      uint64_t id = session_id_;
      v1::SessionClientMessage message = in_;
      CacheDaemon* daemon = daemon_;
      pool_->Schedule([daemon, id, message = std::move(message)] {
        absl::Status s = daemon->OnSessionMessage(id, message);
        if (!s.ok()) CAIRN_LOG(WARNING) << "session " << id << " message: " << s;
      });
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
        return;
      }
      next = &queue_.front();
    }
    StartWrite(next);
  }

  void OnDone() override {
    EndSession("stream done");
    delete this;
  }

 private:
  // Ends the stream with `status`. Finish runs without mu_: OnDone (which deletes this) may
  // follow at once.
  void Close(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(ToGrpcStatus(status));
  }

  void EndSession(const std::string& reason) {
    if (session_id_ != 0) daemon_->CloseSession(session_id_, reason);
  }

  CacheDaemon* const daemon_;
  ThreadPool* const pool_;
  v1::SessionClientMessage in_;  // Touched only by the read chain.
  uint64_t session_id_ = 0;      // Set once by the read chain.
  Mutex mu_;
  std::deque<v1::SessionServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

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

template <typename Req, typename Resp>
grpc::ServerUnaryReactor* CacheServiceImpl::Dispatch(grpc::CallbackServerContext* context,
                                                     const Req* request, Resp* response,
                                                     absl::Status (CacheDaemon::*method)(const Req&,
                                                                                         Resp*)) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  CacheDaemon* daemon = daemon_;
  // `request` and `response` stay valid until Finish().
  bool scheduled = pool_->Schedule([daemon, method, request, response, reactor] {
    reactor->Finish(ToGrpcStatus((daemon->*method)(*request, response)));
  });
  if (!scheduled) reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining"));
  return reactor;
}

grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>*
CacheServiceImpl::Session(grpc::CallbackServerContext* /*context*/) {
  return new SessionReactor(daemon_, pool_);
}

grpc::ServerWriteReactor<v1::Event>* CacheServiceImpl::StreamEvents(
    grpc::CallbackServerContext* /*context*/, const v1::StreamEventsRequest* request) {
  return new EventsReactor(daemon_, *request);
}

#define CAIRN_CACHE_UNARY(Method, Req, Resp)                                                       \
  grpc::ServerUnaryReactor* CacheServiceImpl::Method(grpc::CallbackServerContext* context,         \
                                                     const v1::Req* request, v1::Resp* response) { \
    return Dispatch(context, request, response, &CacheDaemon::Method);                             \
  }

CAIRN_CACHE_UNARY(RegisterModel, RegisterModelRequest, RegisterModelResponse)
CAIRN_CACHE_UNARY(Lookup, LookupRequest, LookupResponse)
CAIRN_CACHE_UNARY(StartSlot, StartSlotRequest, StartSlotResponse)
CAIRN_CACHE_UNARY(AcquireRestore, AcquireRestoreRequest, RestoreLease)
CAIRN_CACHE_UNARY(ReleaseLease, ReleaseLeaseRequest, ReleaseLeaseResponse)
CAIRN_CACHE_UNARY(ReserveCapture, ReserveCaptureRequest, CaptureReservation)
CAIRN_CACHE_UNARY(CommitCapture, CommitCaptureRequest, CommitCaptureResponse)
CAIRN_CACHE_UNARY(AbortCapture, AbortCaptureRequest, AbortCaptureResponse)
CAIRN_CACHE_UNARY(CompleteSpill, CompleteSpillRequest, CompleteSpillResponse)
CAIRN_CACHE_UNARY(UpdateFrontier, UpdateFrontierRequest, UpdateFrontierResponse)
CAIRN_CACHE_UNARY(GetStatus, GetStatusRequest, GetStatusResponse)
CAIRN_CACHE_UNARY(ListCheckpoints, ListCheckpointsRequest, ListCheckpointsResponse)
CAIRN_CACHE_UNARY(GetTree, GetTreeRequest, GetTreeResponse)
CAIRN_CACHE_UNARY(Explain, ExplainRequest, ExplainResponse)
CAIRN_CACHE_UNARY(Evict, EvictRequest, EvictResponse)
CAIRN_CACHE_UNARY(Flush, FlushRequest, FlushResponse)

#undef CAIRN_CACHE_UNARY

}  // namespace cairn::cache
