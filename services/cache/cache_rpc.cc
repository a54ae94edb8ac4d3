#include "services/cache/cache_rpc.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status/status_macros.h"
#include "services/cache/proto_convert.h"

namespace cairn::cache {

namespace {

void FillBudget(const BudgetView& b, v1::Budget* out) {
  out->set_capacity_bytes(b.capacity_bytes);
  out->set_used_bytes(b.used_bytes);
  out->set_reserved_bytes(b.reserved_bytes);
  out->set_row_bytes(b.row_bytes);
  out->set_private_bytes(b.private_bytes);
  out->set_full_copy_bytes(b.full_copy_bytes);
  out->set_checkpoints(b.checkpoints);
  out->set_max_checkpoints(b.max_checkpoints);
}

// Runs `run` once per (session, `request_id`): a retry with the same id gets the first
// successful answer in `resp` instead of a second effect (SM14). `request_id` 0: always runs.
template <typename Resp, typename Run>
absl::Status Once(CacheDaemon& daemon, uint64_t session_id, uint64_t request_id, const char* method,
                  Resp* resp, Run run) {
  if (request_id == 0) return run();
  RequestReplies& replies = daemon.replies();
  ASSIGN_OR_RETURN(std::optional<std::string> first, replies.Begin(session_id, request_id, method));
  if (first.has_value()) {
    if (!resp->ParseFromString(*first)) return absl::InternalError("stored reply does not parse");
    return absl::OkStatus();
  }
  absl::Status status = run();
  replies.Finish(
      session_id, request_id,
      status.ok() ? std::optional<std::string>(resp->SerializeAsString()) : std::nullopt);
  return status;
}

}  // namespace

absl::Status HandleSessionMessage(CacheDaemon& daemon, uint64_t session,
                                  const v1::SessionClientMessage& message) {
  switch (message.body_case()) {
    case v1::SessionClientMessage::kHeartbeat:
      return daemon.Touch(session);
    case v1::SessionClientMessage::kSpillDone:
      return daemon.SpillDone(session, SpillReportFromProto(message.spill_done()));
    case v1::SessionClientMessage::kSlotIdle:
      return daemon.SlotIdle(session, message.slot_idle().slot());
    case v1::SessionClientMessage::kSlotBusy:
      return daemon.SlotBusy(session, message.slot_busy().slot());
    case v1::SessionClientMessage::kHello:
      return absl::FailedPreconditionError("hello sent twice on one session");
    case v1::SessionClientMessage::BODY_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("empty session message");
}

namespace rpc {

absl::Status RegisterModel(CacheDaemon& daemon, const v1::RegisterModelRequest& req,
                           v1::RegisterModelResponse* resp) {
  ASSIGN_OR_RETURN(ModelRegistration registration, ModelRegistrationFromProto(req));
  ASSIGN_OR_RETURN(RegisteredModel model, daemon.RegisterModel(registration));
  *resp = ToProtoRegistered(model);
  return absl::OkStatus();
}

absl::Status Lookup(CacheDaemon& daemon, const v1::LookupRequest& req, v1::LookupResponse* resp) {
  ASSIGN_OR_RETURN(PromptLookup lookup, PromptLookupFromProto(req));
  ASSIGN_OR_RETURN(LookupAnswer answer, daemon.Lookup(lookup));
  *resp = ToProtoLookup(answer);
  return absl::OkStatus();
}

absl::Status Explain(CacheDaemon& daemon, const v1::ExplainRequest& req,
                     v1::ExplainResponse* resp) {
  ASSIGN_OR_RETURN(ExplainQuery query, ExplainQueryFromProto(req));
  ASSIGN_OR_RETURN(Explanation explanation, daemon.Explain(query));
  *resp = ToProtoExplanation(explanation);
  return absl::OkStatus();
}

absl::Status Evict(CacheDaemon& daemon, const v1::EvictRequest& req, v1::EvictResponse* resp) {
  ASSIGN_OR_RETURN(std::vector<CheckpointId> evicted, daemon.Evict(EvictOrderFromProto(req)));
  for (CheckpointId id : evicted) resp->add_evicted(id);
  return absl::OkStatus();
}

absl::Status GetStatus(CacheDaemon& daemon, const v1::GetStatusRequest& /*req*/,
                       v1::GetStatusResponse* resp) {
  const DaemonStatus s = daemon.Status();
  resp->set_cache_incarnation(s.cache_incarnation);
  resp->set_uptime_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(s.uptime)));
  FillBudget(s.ram, resp->mutable_ram());
  resp->set_disk_enabled(s.disk_enabled);
  if (s.disk_enabled) {
    resp->set_disk_healthy(s.disk_healthy);
    resp->set_quarantined(s.quarantined);
    resp->set_disk_queue_bytes(s.disk_queue_bytes);
    FillBudget(s.disk, resp->mutable_disk());
    resp->set_disk_free_bytes(s.disk_free_bytes);
  }
  resp->set_sessions(s.sessions);
  resp->set_lookups(s.counts.lookups);
  resp->set_hits_live(s.counts.hits[static_cast<int>(Tier::kLive)]);
  resp->set_hits_ram(s.counts.hits[static_cast<int>(Tier::kRam)]);
  resp->set_hits_disk(s.counts.hits[static_cast<int>(Tier::kDisk)]);
  resp->set_tokens_restored(s.counts.tokens_restored);
  for (const DaemonCounters::Eviction& count : s.counts.evictions) {
    v1::EvictionCount* e = resp->add_evictions();
    e->set_tier(ToProtoTier(count.tier));
    e->set_reason(count.reason);
    e->set_count(count.count);
  }
  return absl::OkStatus();
}

absl::Status ListCheckpoints(CacheDaemon& daemon, const v1::ListCheckpointsRequest& req,
                             v1::ListCheckpointsResponse* resp) {
  Tier tier = Tier::kNone;
  // No checkpoint is listed under another tier (live frontiers are slots, not checkpoints);
  // the model id is still checked.
  const bool listed = req.tier() == v1::TIER_UNSPECIFIED || req.tier() == v1::TIER_RAM ||
                      req.tier() == v1::TIER_DISK;
  if (req.tier() == v1::TIER_RAM) tier = Tier::kRam;
  if (req.tier() == v1::TIER_DISK) tier = Tier::kDisk;
  ASSIGN_OR_RETURN(std::vector<CheckpointRow> rows, daemon.Checkpoints(req.model_id(), tier));
  if (!listed) return absl::OkStatus();
  for (const CheckpointRow& c : rows) {
    v1::CheckpointInfo* out = resp->add_checkpoints();
    out->set_checkpoint_id(c.id);
    out->set_depth(static_cast<uint64_t>(c.depth));
    out->set_tier(ToProtoTier(c.tier));
    out->set_kind(ToProtoKind(c.kind));
    out->set_on_disk(c.on_disk);
    out->set_borrowed(c.borrowed);
    out->set_private_bytes(c.private_bytes);
    if (c.row_bytes > 0) out->set_row_bytes(c.row_bytes);
    out->set_conversation(c.conversation);
    out->set_compat_digest(c.compat_digest);
  }
  return absl::OkStatus();
}

absl::Status GetTree(CacheDaemon& daemon, const v1::GetTreeRequest& req,
                     v1::GetTreeResponse* resp) {
  const uint32_t max_nodes = req.max_nodes() == 0
                                 ? kDefaultTreeNodes
                                 : std::min(req.max_nodes(), WireLimits::kMaxTreeNodes);
  ASSIGN_OR_RETURN(TreeView tree, daemon.Tree(req.model_id(), max_nodes));
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    const TreeView::Node& n = tree.nodes[i];
    const int64_t parent_depth = n.parent < 0 ? 0 : tree.nodes[n.parent].depth;
    v1::TreeNode* out = resp->add_nodes();
    out->set_node_id(i + 1);  // 0 is the root.
    out->set_parent_id(n.parent < 0 ? 0 : static_cast<uint64_t>(n.parent) + 1);
    out->set_depth(static_cast<uint64_t>(n.depth));
    out->set_edge_tokens(static_cast<uint64_t>(n.depth - parent_depth));
    for (const auto& [id, tier] : n.checkpoints) {
      v1::Candidate* c = out->add_candidates();
      c->set_tier(ToProtoTier(tier));
      c->set_depth(static_cast<uint64_t>(n.depth));
      c->set_checkpoint_id(id);
    }
  }
  resp->set_truncated(tree.truncated);
  return absl::OkStatus();
}

absl::Status StartSlot(CacheDaemon& daemon, const v1::StartSlotRequest& req,
                       v1::StartSlotResponse* resp) {
  return Once(daemon, req.session_id(), req.client_request_id(), "StartSlot", resp,
              [&]() -> absl::Status {
                ASSIGN_OR_RETURN(SlotStart start, SlotStartFromProto(req));
                ASSIGN_OR_RETURN(std::vector<uint64_t> spills, daemon.StartSlot(start));
                for (uint64_t spill : spills) resp->add_preserve_spills(spill);
                return absl::OkStatus();
              });
}

absl::Status UpdateFrontier(CacheDaemon& daemon, const v1::UpdateFrontierRequest& req,
                            v1::UpdateFrontierResponse* resp) {
  return Once(daemon, req.session_id(), req.client_request_id(), "UpdateFrontier", resp,
              [&]() -> absl::Status {
                ASSIGN_OR_RETURN(FrontierUpdate update, FrontierUpdateFromProto(req));
                ASSIGN_OR_RETURN(uint64_t depth, daemon.UpdateFrontier(update));
                resp->set_depth(depth);
                return absl::OkStatus();
              });
}

absl::Status AcquireRestore(CacheDaemon& daemon, const v1::AcquireRestoreRequest& req,
                            v1::RestoreLease* resp) {
  return Once(daemon, req.session_id(), req.client_request_id(), "AcquireRestore", resp,
              [&]() -> absl::Status {
                ASSIGN_OR_RETURN(RestoreRequest restore, RestoreRequestFromProto(req));
                ASSIGN_OR_RETURN(RestoreGrant grant, daemon.AcquireRestore(restore));
                *resp = ToProtoLease(grant);
                return absl::OkStatus();
              });
}

void AcquireRestoreAsync(CacheDaemon& daemon, const v1::AcquireRestoreRequest& req,
                         absl::Time deadline, LeaseDone done) {
  const uint64_t session = req.session_id();
  const uint64_t request_id = req.client_request_id();
  if (request_id != 0) {
    absl::StatusOr<std::optional<std::string>> first =
        daemon.replies().Begin(session, request_id, "AcquireRestore");
    v1::RestoreLease lease;
    if (!first.ok() || first->has_value()) {
      absl::Status status = first.status();
      if (status.ok() && !lease.ParseFromString(**first)) {
        status = absl::InternalError("stored reply does not parse");
      }
      std::move(done)(std::move(status), std::move(lease));
      return;
    }
  }
  // Records the answer for retries (as Once does), then hands it over.
  auto finish = [&daemon, session, request_id,
                 done = std::move(done)](absl::StatusOr<RestoreGrant> grant) mutable {
    v1::RestoreLease lease;
    if (grant.ok()) lease = ToProtoLease(*grant);
    if (request_id != 0) {
      daemon.replies().Finish(
          session, request_id,
          grant.ok() ? std::optional<std::string>(lease.SerializeAsString()) : std::nullopt);
    }
    std::move(done)(grant.status(), std::move(lease));
  };
  absl::StatusOr<RestoreRequest> restore = RestoreRequestFromProto(req);
  if (!restore.ok()) {
    finish(restore.status());
    return;
  }
  daemon.AcquireRestoreAsync(*restore, deadline, std::move(finish));
}

absl::Status ReleaseLease(CacheDaemon& daemon, const v1::ReleaseLeaseRequest& req,
                          v1::ReleaseLeaseResponse* /*resp*/) {
  ASSIGN_OR_RETURN(LeaseRelease release, LeaseReleaseFromProto(req));
  return daemon.ReleaseLease(release);
}

absl::Status ReserveCapture(CacheDaemon& daemon, const v1::ReserveCaptureRequest& req,
                            v1::CaptureReservation* resp) {
  return Once(daemon, req.session_id(), req.client_request_id(), "ReserveCapture", resp,
              [&]() -> absl::Status {
                ASSIGN_OR_RETURN(CaptureRequest capture, CaptureRequestFromProto(req));
                ASSIGN_OR_RETURN(CaptureGrant grant, daemon.ReserveCapture(capture));
                *resp = ToProtoReservation(grant);
                return absl::OkStatus();
              });
}

absl::Status CommitCapture(CacheDaemon& daemon, const v1::CommitCaptureRequest& req,
                           v1::CommitCaptureResponse* resp) {
  ASSIGN_OR_RETURN(CommitResult result, daemon.CommitCapture(CaptureCommitFromProto(req)));
  *resp = ToProtoCommit(result);
  return absl::OkStatus();
}

absl::Status AbortCapture(CacheDaemon& daemon, const v1::AbortCaptureRequest& req,
                          v1::AbortCaptureResponse* /*resp*/) {
  ASSIGN_OR_RETURN(CaptureAbort abort, CaptureAbortFromProto(req));
  return daemon.AbortCapture(abort);
}

}  // namespace rpc
}  // namespace cairn::cache
