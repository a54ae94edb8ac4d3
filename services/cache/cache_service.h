#ifndef CAIRN_SERVICES_CACHE_CACHE_SERVICE_H_
#define CAIRN_SERVICES_CACHE_CACHE_SERVICE_H_

// The gRPC adapter of the cache daemon: moves messages between the wire and CacheDaemon.
// Reactions never block: unary calls run on an I/O pool (style.md §5, gRFC L67).

#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/thread_pool.h"
#include "services/cache/cache_daemon.h"

namespace cairn::cache {

namespace internal {

// The generated service with every unary method taking raw bytes: the adapter parses the
// request itself, so a request that does not parse is answered INVALID_ARGUMENT naming the
// message type (gRPC's own parsing answers UNIMPLEMENTED with no message).
using CacheServiceBase = v1::CacheService::WithCallbackMethod_Session<
    v1::CacheService::WithCallbackMethod_StreamEvents<v1::CacheService::WithRawCallbackMethod_RegisterModel<
        v1::CacheService::WithRawCallbackMethod_Lookup<
            v1::CacheService::WithRawCallbackMethod_StartSlot<
                v1::CacheService::WithRawCallbackMethod_AcquireRestore<
                    v1::CacheService::WithRawCallbackMethod_ReleaseLease<
                        v1::CacheService::WithRawCallbackMethod_ReserveCapture<
                            v1::CacheService::WithRawCallbackMethod_CommitCapture<
                                v1::CacheService::WithRawCallbackMethod_AbortCapture<
                                    v1::CacheService::WithRawCallbackMethod_UpdateFrontier<
                                        v1::CacheService::WithRawCallbackMethod_GetStatus<
                                            v1::CacheService::WithRawCallbackMethod_ListCheckpoints<
                                                v1::CacheService::WithRawCallbackMethod_GetTree<
                                                    v1::CacheService::WithRawCallbackMethod_Explain<
                                                        v1::CacheService::
                                                            WithRawCallbackMethod_Evict<
                                                                v1::CacheService::
                                                                    WithRawCallbackMethod_Flush<
                                                                        v1::CacheService::
                                                                            Service>>>>>>>>>>>>>>>>>;

}  // namespace internal

struct CacheServiceOptions {
  // Unary calls waiting for an I/O thread beyond this are refused at once
  // (RESOURCE_EXHAUSTED): the queue is bounded, so an overload is answered, not absorbed.
  size_t max_queued_calls = 1024;
};

// Thread-safe. `daemon` and `pool` must outlive the service and the server it is registered
// with (shut the server down first).
class CacheServiceImpl final : public internal::CacheServiceBase {
 public:
  CacheServiceImpl(CacheDaemon* daemon, ThreadPool* pool,
                   CacheServiceOptions options = CacheServiceOptions());
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
  class FlushReactor;

  grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>* Session(
      grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* RegisterModel(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* StartSlot(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* AcquireRestore(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReleaseLease(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReserveCapture(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CommitCapture(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* AbortCapture(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UpdateFrontier(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetTree(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Explain(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Evict(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Flush(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<v1::Event>* StreamEvents(
      grpc::CallbackServerContext* context, const v1::StreamEventsRequest* request) override;

 private:
  // Admits a unary call (on context's DefaultReactor) and runs `body` with its reactor on the
  // pool; `body` must finish the call (FinishWith), there or later. A call whose deadline
  // passed while it waited for a thread is answered DEADLINE_EXCEEDED without running `body`;
  // one that finds max_queued_calls waiting, RESOURCE_EXHAUSTED.
  using PoolBody = absl::AnyInvocable<void(grpc::ServerUnaryReactor*) &&>;
  grpc::ServerUnaryReactor* RunOnPool(grpc::CallbackServerContext* context, PoolBody body);
  // Parses the request, runs `method` (a cache_rpc.h adapter: it takes the daemon first) on
  // the pool, serializes the answer and finishes the call with its status, as RunOnPool.
  template <typename Req, typename Resp, typename Method>
  grpc::ServerUnaryReactor* Dispatch(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
                                     Method method);
  template <typename Req>
  static absl::Status Parse(const grpc::ByteBuffer* request, Req* req);
  // Serializes `resp` (when `status` is OK), finishes the call and ends it (EndCall).
  template <typename Resp>
  void FinishWith(absl::Status status, const Resp& resp, grpc::ByteBuffer* response,
                  grpc::ServerUnaryReactor* reactor);
  // Admits a unary call (BeginCall), or finishes it with the refusal.
  bool Admit(grpc::ServerUnaryReactor* reactor);
  // Queues an admitted call's work on the pool; RESOURCE_EXHAUSTED where max_queued_calls wait
  // already, UNAVAILABLE once the pool stops (the work is dropped then).
  grpc::Status Enqueue(absl::AnyInvocable<void() &&> fn);

  CacheDaemon* const daemon_;
  ThreadPool* const pool_;
  const CacheServiceOptions options_;
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
