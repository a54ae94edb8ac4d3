#ifndef CAIRN_SERVICES_CACHE_CACHE_RPC_H_
#define CAIRN_SERVICES_CACHE_CACHE_RPC_H_

// The wire side of the daemon's calls that take the daemon's own types: each converts the
// cache.proto request (with the wire checks), calls CacheDaemon and converts the answer. It
// also de-duplicates retries: a request with a client_request_id runs once per session, and a
// retry gets the first successful answer (SM14; InvalidArgument when the id was used for
// another method, Unavailable while the first attempt still runs). The gRPC reactors
// (cache_service.cc) and the RPC fuzzer call these. Stateless; thread-safe as the daemon is;
// `daemon` must outlive each call.

#include <cstdint>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cairn/cache/v1/cache.pb.h"
#include "services/cache/cache_daemon.h"

namespace cairn::cache {

// Hands one client message of session `session`'s stream to `daemon`: a heartbeat (Touch), a
// spill report, an idle or busy slot. InvalidArgument for an empty message,
// FailedPrecondition for a second hello, and whatever the daemon answers. Messages of one
// session must be handed over in the order they arrived.
absl::Status HandleSessionMessage(CacheDaemon& daemon, uint64_t session,
                                  const v1::SessionClientMessage& message);

namespace rpc {

inline constexpr uint32_t kDefaultTreeNodes = 4096;  // GetTree answer size when not asked.

// Registration and lookup.
absl::Status RegisterModel(CacheDaemon& daemon, const v1::RegisterModelRequest& req,
                           v1::RegisterModelResponse* resp);
absl::Status Lookup(CacheDaemon& daemon, const v1::LookupRequest& req, v1::LookupResponse* resp);

// Explain and Evict (cairnctl's verbs).
absl::Status Explain(CacheDaemon& daemon, const v1::ExplainRequest& req, v1::ExplainResponse* resp);
absl::Status Evict(CacheDaemon& daemon, const v1::EvictRequest& req, v1::EvictResponse* resp);

absl::Status GetStatus(CacheDaemon& daemon, const v1::GetStatusRequest& req,
                       v1::GetStatusResponse* resp);
// NotFound for an unknown model.
absl::Status ListCheckpoints(CacheDaemon& daemon, const v1::ListCheckpointsRequest& req,
                             v1::ListCheckpointsResponse* resp);
// At most max_nodes nodes (0: kDefaultTreeNodes; never more than the wire limit). NotFound for
// an unknown model.
absl::Status GetTree(CacheDaemon& daemon, const v1::GetTreeRequest& req, v1::GetTreeResponse* resp);

// Slots and frontiers.
absl::Status StartSlot(CacheDaemon& daemon, const v1::StartSlotRequest& req,
                       v1::StartSlotResponse* resp);
absl::Status UpdateFrontier(CacheDaemon& daemon, const v1::UpdateFrontierRequest& req,
                            v1::UpdateFrontierResponse* resp);

// Restores: AcquireRestore reads a disk restore on this thread; AcquireRestoreAsync as
// CacheDaemon::AcquireRestoreAsync (`done` runs exactly once, without any daemon lock).
absl::Status AcquireRestore(CacheDaemon& daemon, const v1::AcquireRestoreRequest& req,
                            v1::RestoreLease* resp);
using LeaseDone = absl::AnyInvocable<void(absl::Status, v1::RestoreLease) &&>;
void AcquireRestoreAsync(CacheDaemon& daemon, const v1::AcquireRestoreRequest& req,
                         absl::Time deadline, LeaseDone done);
absl::Status ReleaseLease(CacheDaemon& daemon, const v1::ReleaseLeaseRequest& req,
                          v1::ReleaseLeaseResponse* resp);

// Captures.
absl::Status ReserveCapture(CacheDaemon& daemon, const v1::ReserveCaptureRequest& req,
                            v1::CaptureReservation* resp);
absl::Status CommitCapture(CacheDaemon& daemon, const v1::CommitCaptureRequest& req,
                           v1::CommitCaptureResponse* resp);
absl::Status AbortCapture(CacheDaemon& daemon, const v1::AbortCaptureRequest& req,
                          v1::AbortCaptureResponse* resp);

}  // namespace rpc
}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CACHE_RPC_H_
