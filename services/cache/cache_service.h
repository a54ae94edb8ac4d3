#ifndef CAIRN_SERVICES_CACHE_CACHE_SERVICE_H_
#define CAIRN_SERVICES_CACHE_CACHE_SERVICE_H_

// The gRPC adapter of the cache daemon: moves messages between the wire and CacheDaemon.
// Reactions never block: unary calls run on an I/O pool (style.md §5, gRFC L67).

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/thread_pool.h"
#include "services/cache/cache_daemon.h"

namespace cairn::cache {

// Thread-safe. `daemon` and `pool` must outlive the service and the server it is registered
// with (shut the server down first).
class CacheServiceImpl final : public v1::CacheService::CallbackService {
 public:
  CacheServiceImpl(CacheDaemon* daemon, ThreadPool* pool);
  ~CacheServiceImpl() override;

  // Tells every connected inference daemon that the cache is draining (Draining on its
  // session stream), waits up to `grace` for those messages to be written, and ends every
  // session stream; new sessions are refused from now on. Call before the server's Drain so
  // that open session streams do not hold the drain for its whole timeout.
  void DrainSessions(absl::Duration grace) ABSL_LOCKS_EXCLUDED(sessions_mu_);
  // Answers every unary call that arrives from now on with UNAVAILABLE and waits up to
  // `timeout` for those in flight to finish. Returns false on timeout. With no call in flight
  // the gRPC server's own shutdown then needs only a short deadline: it would otherwise wait
  // for idle client connections to close.
  bool DrainCalls(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(calls_mu_);

  // Used by the session reactors (defined in the .cc file).
  class SessionReactor;
  class SessionWork;

  grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>* Session(
      grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* RegisterModel(grpc::CallbackServerContext* context,
                                          const v1::RegisterModelRequest* request,
                                          v1::RegisterModelResponse* response) override;
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const v1::LookupRequest* request,
                                   v1::LookupResponse* response) override;
  grpc::ServerUnaryReactor* StartSlot(grpc::CallbackServerContext* context,
                                      const v1::StartSlotRequest* request,
                                      v1::StartSlotResponse* response) override;
  grpc::ServerUnaryReactor* AcquireRestore(grpc::CallbackServerContext* context,
                                           const v1::AcquireRestoreRequest* request,
                                           v1::RestoreLease* response) override;
  grpc::ServerUnaryReactor* ReleaseLease(grpc::CallbackServerContext* context,
                                         const v1::ReleaseLeaseRequest* request,
                                         v1::ReleaseLeaseResponse* response) override;
  grpc::ServerUnaryReactor* ReserveCapture(grpc::CallbackServerContext* context,
                                           const v1::ReserveCaptureRequest* request,
                                           v1::CaptureReservation* response) override;
  grpc::ServerUnaryReactor* CommitCapture(grpc::CallbackServerContext* context,
                                          const v1::CommitCaptureRequest* request,
                                          v1::CommitCaptureResponse* response) override;
  grpc::ServerUnaryReactor* AbortCapture(grpc::CallbackServerContext* context,
                                         const v1::AbortCaptureRequest* request,
                                         v1::AbortCaptureResponse* response) override;
  grpc::ServerUnaryReactor* UpdateFrontier(grpc::CallbackServerContext* context,
                                           const v1::UpdateFrontierRequest* request,
                                           v1::UpdateFrontierResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;
  grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* context,
                                            const v1::ListCheckpointsRequest* request,
                                            v1::ListCheckpointsResponse* response) override;
  grpc::ServerUnaryReactor* GetTree(grpc::CallbackServerContext* context,
                                    const v1::GetTreeRequest* request,
                                    v1::GetTreeResponse* response) override;
  grpc::ServerWriteReactor<v1::Event>* StreamEvents(
      grpc::CallbackServerContext* context, const v1::StreamEventsRequest* request) override;
  grpc::ServerUnaryReactor* Explain(grpc::CallbackServerContext* context,
                                    const v1::ExplainRequest* request,
                                    v1::ExplainResponse* response) override;
  grpc::ServerUnaryReactor* Evict(grpc::CallbackServerContext* context,
                                  const v1::EvictRequest* request,
                                  v1::EvictResponse* response) override;
  grpc::ServerUnaryReactor* Flush(grpc::CallbackServerContext* context,
                                  const v1::FlushRequest* request,
                                  v1::FlushResponse* response) override;

 private:
  // Runs `method` on the pool and finishes the call with its status.
  template <typename Req, typename Resp>
  grpc::ServerUnaryReactor* Dispatch(grpc::CallbackServerContext* context, const Req* request,
                                     Resp* response,
                                     absl::Status (CacheDaemon::*method)(const Req&, Resp*));

  CacheDaemon* const daemon_;
  ThreadPool* const pool_;
  // Unary calls in flight, for DrainCalls.
  bool BeginCall() ABSL_LOCKS_EXCLUDED(calls_mu_);
  void EndCall() ABSL_LOCKS_EXCLUDED(calls_mu_);
  Mutex calls_mu_;
  CondVar calls_done_;
  int calls_ ABSL_GUARDED_BY(calls_mu_) = 0;
  bool refusing_calls_ ABSL_GUARDED_BY(calls_mu_) = false;
  // Session messages, in order per session, on the pool.
  std::unique_ptr<SessionWork> work_;
  // Open session streams, for DrainSessions. A reactor removes itself in OnDone.
  Mutex sessions_mu_;
  absl::flat_hash_set<SessionReactor*> sessions_ ABSL_GUARDED_BY(sessions_mu_);
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CACHE_SERVICE_H_
