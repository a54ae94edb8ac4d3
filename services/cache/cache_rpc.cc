#include "services/cache/cache_rpc.h"

#include <algorithm>

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

}  // namespace rpc
}  // namespace cairn::cache
