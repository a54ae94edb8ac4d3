#ifndef CAIRN_SERVICES_CACHE_CACHE_SERVICE_H_
#define CAIRN_SERVICES_CACHE_CACHE_SERVICE_H_

// The gRPC adapter of the cache daemon: moves messages between the wire and CacheDaemon.
// Reactions never block: unary calls run on an I/O pool (style.md §5, gRFC L67).

#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/concurrency/thread_pool.h"
#include "services/cache/cache_daemon.h"

namespace cairn::cache {

// Thread-safe. `daemon` and `pool` must outlive the service and the server it is registered
// with (shut the server down first).
class CacheServiceImpl final : public v1::CacheService::CallbackService {
 public:
  CacheServiceImpl(CacheDaemon* daemon, ThreadPool* pool) : daemon_(daemon), pool_(pool) {}

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
  grpc::ServerUnaryReactor* CompleteSpill(grpc::CallbackServerContext* context,
                                          const v1::CompleteSpillRequest* request,
                                          v1::CompleteSpillResponse* response) override;
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
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CACHE_SERVICE_H_
