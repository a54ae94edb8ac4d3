// CacheDaemon's inspection calls: status, checkpoints, tree, explain, evict, flush, events.

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "common/status/status_macros.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/proto_convert.h"

namespace cairn::cache {

namespace {

constexpr uint32_t kDefaultTreeNodes = 4096;  // GetTree answer size when not asked.

}  // namespace

// ---------------------------------------------------------------------------------------
// Inspection.

absl::Status CacheDaemon::GetStatus(const v1::GetStatusRequest& /*req*/,
                                    v1::GetStatusResponse* resp) {
  // A statvfs: measured before taking the lock.
  const uint64_t disk_free = store_ != nullptr ? store_->UsableFreeBytes().value_or(0) : 0;
  Lock lock(this);
  resp->set_cache_incarnation(incarnation_);
  resp->set_uptime_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(Now() - started_)));
  Accounting a = core_->RamAccounting();
  v1::Budget* ram = resp->mutable_ram();
  ram->set_capacity_bytes(static_cast<uint64_t>(a.budget));
  ram->set_used_bytes(static_cast<uint64_t>(a.used));
  ram->set_reserved_bytes(static_cast<uint64_t>(core_->ram_ledger().reserved()));
  ram->set_row_bytes(static_cast<uint64_t>(a.chunk_bytes));
  ram->set_private_bytes(static_cast<uint64_t>(a.private_bytes + a.tail_bytes));
  ram->set_full_copy_bytes(static_cast<uint64_t>(a.full_copy_bytes));
  ram->set_checkpoints(static_cast<uint64_t>(a.checkpoints));
  // The effective cap: the configured one, or the automatic one of the registered model with
  // the largest private state (the tightest); 0 while no model is registered.
  int64_t cap = options_.cache.retention.max_checkpoints;
  if (cap == 0) {
    for (const auto& [id, model] : models_) {
      const int64_t model_cap =
          core_->retention().CheckpointCap(a.budget, model.layout.PrivateBytes());
      cap = cap == 0 ? model_cap : std::min(cap, model_cap);
    }
  }
  ram->set_max_checkpoints(static_cast<uint64_t>(cap));
  resp->set_disk_enabled(store_ != nullptr);
  if (store_ != nullptr) {
    const DiskStoreStats ds = store_->stats();
    resp->set_disk_healthy(!ds.read_only);
    resp->set_quarantined(ds.quarantined);
    v1::Budget* disk = resp->mutable_disk();
    const Accounting d = core_->DiskAccounting();
    disk->set_capacity_bytes(static_cast<uint64_t>(core_->disk_ledger().budget()));
    disk->set_used_bytes(static_cast<uint64_t>(core_->disk_ledger().used()));
    disk->set_reserved_bytes(static_cast<uint64_t>(core_->disk_ledger().reserved()));
    disk->set_row_bytes(static_cast<uint64_t>(d.chunk_bytes));
    disk->set_private_bytes(static_cast<uint64_t>(d.private_bytes + d.tail_bytes));
    disk->set_full_copy_bytes(static_cast<uint64_t>(d.full_copy_bytes));
    disk->set_checkpoints(static_cast<uint64_t>(d.checkpoints));
    resp->set_disk_free_bytes(disk_free);
  }
  resp->set_sessions(static_cast<uint32_t>(sessions_.size()));
  const DaemonCounters::Snapshot counts = counters_.Take();
  resp->set_lookups(counts.lookups);
  resp->set_hits_live(counts.hits[static_cast<int>(Tier::kLive)]);
  resp->set_hits_ram(counts.hits[static_cast<int>(Tier::kRam)]);
  resp->set_hits_disk(counts.hits[static_cast<int>(Tier::kDisk)]);
  resp->set_tokens_restored(counts.tokens_restored);
  for (const DaemonCounters::Eviction& count : counts.evictions) {
    v1::EvictionCount* e = resp->add_evictions();
    e->set_tier(ToProtoTier(count.tier));
    e->set_reason(count.reason);
    e->set_count(count.count);
  }
  return absl::OkStatus();
}

absl::Status CacheDaemon::ListCheckpoints(const v1::ListCheckpointsRequest& req,
                                          v1::ListCheckpointsResponse* resp) {
  Lock lock(this);
  std::string compatibility;
  if (req.model_id() != 0) {
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
    compatibility = model->compatibility;
  }
  for (const CheckpointInfo& c : core_->Checkpoints()) {
    if (!compatibility.empty() && c.compatibility != compatibility) continue;
    const Tier tier = c.in_ram ? Tier::kRam : Tier::kDisk;
    if (req.tier() != v1::TIER_UNSPECIFIED && req.tier() != ToProtoTier(tier)) continue;
    v1::CheckpointInfo* out = resp->add_checkpoints();
    out->set_checkpoint_id(c.id);
    out->set_depth(static_cast<uint64_t>(c.depth));
    out->set_tier(ToProtoTier(tier));
    out->set_kind(ToProtoKind(c.kind));
    out->set_on_disk(c.on_disk);
    bool borrowed = false;
    for (ChunkId chunk : c.chunks) {
      absl::StatusOr<ChunkInfo> ci = core_->GetChunk(chunk);
      if (ci.ok() && ci->borrowed) borrowed = true;
    }
    out->set_borrowed(borrowed);
    out->set_private_bytes(static_cast<uint64_t>(c.private_bytes + c.tail_bytes));
    const Model* model = nullptr;
    auto mid = model_ids_.find(c.compatibility);
    if (mid != model_ids_.end()) model = &models_.at(mid->second);
    if (model != nullptr) {
      out->set_row_bytes(static_cast<uint64_t>(c.chunks.size()) *
                         static_cast<uint64_t>(model->layout.ChunkBytes()));
    }
    out->set_conversation(c.conversation);
    out->set_compat_digest(c.compatibility);
  }
  return absl::OkStatus();
}

absl::Status CacheDaemon::GetTree(const v1::GetTreeRequest& req, v1::GetTreeResponse* resp) {
  Lock lock(this);
  std::string compatibility;
  if (req.model_id() != 0) {
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
    compatibility = model->compatibility;
  } else if (!models_.empty()) {
    uint64_t first = std::numeric_limits<uint64_t>::max();
    for (const auto& [id, m] : models_) first = std::min(first, id);
    compatibility = models_.at(first).compatibility;
  }
  const uint32_t max_nodes = req.max_nodes() == 0
                                 ? kDefaultTreeNodes
                                 : std::min(req.max_nodes(), WireLimits::kMaxTreeNodes);
  // Exported from the core's radix index: ids and depths only, no token copies.
  const RadixPrefixIndex::Export tree = core_->CheckpointTree(compatibility, max_nodes);
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    const RadixPrefixIndex::ExportedNode& n = tree.nodes[i];
    const int64_t parent_depth = n.parent < 0 ? 0 : tree.nodes[n.parent].depth;
    v1::TreeNode* out = resp->add_nodes();
    out->set_node_id(i + 1);  // 0 is the root.
    out->set_parent_id(n.parent < 0 ? 0 : static_cast<uint64_t>(n.parent) + 1);
    out->set_depth(static_cast<uint64_t>(n.depth));
    out->set_edge_tokens(static_cast<uint64_t>(n.depth - parent_depth));
    for (const IndexEntry& e : n.entries) {
      v1::Candidate* c = out->add_candidates();
      c->set_tier(ToProtoTier(core_->InRam(e.id) ? Tier::kRam : Tier::kDisk));
      c->set_depth(static_cast<uint64_t>(n.depth));
      c->set_checkpoint_id(e.id);
    }
  }
  resp->set_truncated(tree.truncated);
  return absl::OkStatus();
}

absl::Status CacheDaemon::Explain(const v1::ExplainRequest& req, v1::ExplainResponse* resp) {
  ASSIGN_OR_RETURN(std::vector<TokenId> tokens, TokensFromProto("tokens", req.tokens()));
  if (tokens.empty()) return absl::InvalidArgumentError("explain of an empty prompt");
  Lock lock(this);
  uint64_t model_id = req.model_id();
  if (model_id == 0) {  // The first registered model, as GetTree.
    for (const auto& [id, m] : models_) model_id = model_id == 0 ? id : std::min(model_id, id);
  }
  ASSIGN_OR_RETURN(const Model* model, FindModelLocked(model_id));
  LookupRequest lr;
  lr.identities = Identities{model->compatibility, ""};
  lr.tokens = tokens;
  ASSIGN_OR_RETURN(LookupResult r, core_->Lookup(lr));
  v1::LookupResponse* out = resp->mutable_lookup();
  for (const PlannedCapture& p : r.plan.captures) {
    v1::CapturePoint* cp = out->mutable_plan()->add_captures();
    cp->set_position(static_cast<uint64_t>(p.pos));
    cp->set_kind(ToProtoKind(p.kind));
  }
  out->mutable_best()->set_tier(ToProtoTier(r.best.tier));
  out->mutable_best()->set_depth(static_cast<uint64_t>(r.best.depth));
  out->mutable_best()->set_checkpoint_id(r.best.checkpoint);
  out->set_shared_prefix(static_cast<uint64_t>(r.shared_prefix));
  absl::flat_hash_set<CheckpointId> on_path;
  on_path.insert(r.best.checkpoint);
  for (const Candidate& c : r.others) on_path.insert(c.checkpoint);
  for (const v1::Event& e : events_.After(0, 0)) {
    if (e.checkpoint_id() != 0 && on_path.contains(e.checkpoint_id())) *resp->add_related() = e;
  }
  if (r.best.tier == Tier::kNone) {
    resp->set_summary(
        absl::StrCat("cold: no compatible checkpoint on the path; longest shared "
                     "prefix ",
                     r.shared_prefix, " tokens"));
  } else {
    resp->set_summary(absl::StrCat(
        "restores ", r.best.depth, " of ", tokens.size(), " tokens from ", TierName(r.best.tier),
        r.best.depth < r.shared_prefix
            ? absl::StrCat("; history matches up to token ", r.shared_prefix)
            : ""));
  }
  return absl::OkStatus();
}

absl::Status CacheDaemon::Evict(const v1::EvictRequest& req, v1::EvictResponse* resp) {
  if (req.include_disk() && store_ == nullptr) {
    return absl::FailedPreconditionError("this daemon runs without a disk tier");
  }
  Lock lock(this);
  std::vector<CheckpointId> targets;
  if (req.all()) {
    for (const CheckpointInfo& c : core_->Checkpoints()) {
      if (c.pins == 0 && (c.in_ram || (req.include_disk() && c.on_disk))) targets.push_back(c.id);
    }
  } else {
    if (req.checkpoint_id() == 0) return absl::InvalidArgumentError("evict needs an id or all");
    targets.push_back(req.checkpoint_id());
  }
  for (CheckpointId id : targets) {
    absl::StatusOr<CheckpointInfo> info = core_->GetCheckpoint(id);
    if (!info.ok()) {
      if (!req.all()) return info.status();
      continue;
    }
    absl::Status s = absl::OkStatus();
    if (info->in_ram) s = core_->Evict(id, "explicit");
    // The disk copy goes too when asked; the kDiskEvict event deletes its files off the lock.
    if (s.ok() && req.include_disk() && info->on_disk) s = core_->EvictDisk(id, "explicit");
    if (s.ok() && !info->in_ram && !req.include_disk()) {
      s = absl::NotFoundError(
          absl::StrCat("checkpoint ", id, " is only on disk (evict with include_disk)"));
    }
    if (!s.ok() && !req.all()) return s;
    if (s.ok()) resp->add_evicted(id);
  }
  AfterCoreLocked();
  return absl::OkStatus();
}

uint64_t CacheDaemon::StartFlush(absl::Duration timeout, FlushWaiters::Done done) {
  return flushes_->Start(std::min(timeout, options_.flush_timeout), std::move(done));
}

void CacheDaemon::CancelFlush(uint64_t id) { flushes_->Cancel(id); }

void CacheDaemon::AbortFlushes() {
  flushes_->Shutdown(absl::UnavailableError("the cache daemon is draining"));
}

std::vector<v1::Event> CacheDaemon::EventsAfter(uint64_t after_seq, size_t limit) const {
  return events_.After(after_seq, limit);
}

uint64_t CacheDaemon::WaitForEvents(uint64_t after_seq, std::function<void()> wake) {
  return events_.Wait(after_seq, std::move(wake));
}

size_t CacheDaemon::DeferredPersistsForTest() const {
  Lock lock(this);
  return deferred_persists_.size();
}

void CacheDaemon::CancelEventWait(uint64_t token) { events_.Cancel(token); }

}  // namespace cairn::cache
