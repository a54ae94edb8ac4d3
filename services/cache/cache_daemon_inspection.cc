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

// ---------------------------------------------------------------------------------------
// Inspection.

DaemonStatus CacheDaemon::Status() const {
  DaemonStatus out;
  out.cache_incarnation = incarnation_;
  out.uptime = Now() - started_;
  out.sessions = static_cast<uint32_t>(sessions_.size());
  out.counts = counters_.Take();
  out.disk_enabled = store_ != nullptr;
  if (store_ != nullptr) {
    // A statvfs and the store's own lock: before taking the daemon's.
    out.disk_free_bytes = store_->UsableFreeBytes().value_or(0);
    const DiskStoreStats ds = store_->stats();
    out.disk_healthy = !ds.read_only;
    out.quarantined = ds.quarantined;
  }
  if (writer_ != nullptr) out.disk_queue_bytes = writer_->stats().queued_bytes;
  Lock lock(this);
  const Accounting a = core_->RamAccounting();
  out.ram.capacity_bytes = static_cast<uint64_t>(a.budget);
  out.ram.used_bytes = static_cast<uint64_t>(a.used);
  out.ram.reserved_bytes = static_cast<uint64_t>(core_->ram_ledger().reserved());
  out.ram.row_bytes = static_cast<uint64_t>(a.chunk_bytes);
  out.ram.private_bytes = static_cast<uint64_t>(a.private_bytes + a.tail_bytes);
  out.ram.full_copy_bytes = static_cast<uint64_t>(a.full_copy_bytes);
  out.ram.checkpoints = static_cast<uint64_t>(a.checkpoints);
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
  out.ram.max_checkpoints = static_cast<uint64_t>(cap);
  if (store_ != nullptr) {
    const Accounting d = core_->DiskAccounting();
    out.disk.capacity_bytes = static_cast<uint64_t>(core_->disk_ledger().budget());
    out.disk.used_bytes = static_cast<uint64_t>(core_->disk_ledger().used());
    out.disk.reserved_bytes = static_cast<uint64_t>(core_->disk_ledger().reserved());
    out.disk.row_bytes = static_cast<uint64_t>(d.chunk_bytes);
    out.disk.private_bytes = static_cast<uint64_t>(d.private_bytes + d.tail_bytes);
    out.disk.full_copy_bytes = static_cast<uint64_t>(d.full_copy_bytes);
    out.disk.checkpoints = static_cast<uint64_t>(d.checkpoints);
  }
  return out;
}

absl::StatusOr<std::vector<CheckpointRow>> CacheDaemon::Checkpoints(uint64_t model_id,
                                                                    Tier tier) const {
  Lock lock(this);
  std::string compatibility;
  if (model_id != 0) {
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(model_id));
    compatibility = model->compatibility;
  }
  std::vector<CheckpointRow> out;
  for (const CheckpointInfo& c : core_->Checkpoints()) {
    if (!compatibility.empty() && c.compatibility != compatibility) continue;
    CheckpointRow row;
    row.tier = c.in_ram ? Tier::kRam : Tier::kDisk;
    if (tier != Tier::kNone && tier != row.tier) continue;
    row.id = c.id;
    row.depth = c.depth;
    row.kind = c.kind;
    row.on_disk = c.on_disk;
    for (ChunkId chunk : c.chunks) {
      absl::StatusOr<ChunkInfo> ci = core_->GetChunk(chunk);
      if (ci.ok() && ci->borrowed) row.borrowed = true;
    }
    row.private_bytes = static_cast<uint64_t>(c.private_bytes + c.tail_bytes);
    if (const Model* model = ModelForLocked(c.compatibility); model != nullptr) {
      row.row_bytes = static_cast<uint64_t>(c.chunks.size()) *
                      static_cast<uint64_t>(model->layout.ChunkBytes());
    }
    row.conversation = c.conversation;
    row.compat_digest = c.compatibility;
    out.push_back(std::move(row));
  }
  return out;
}

absl::StatusOr<TreeView> CacheDaemon::Tree(uint64_t model_id, uint32_t max_nodes) const {
  Lock lock(this);
  std::string compatibility;
  if (model_id != 0) {
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(model_id));
    compatibility = model->compatibility;
  } else if (!models_.empty()) {
    uint64_t first = std::numeric_limits<uint64_t>::max();
    for (const auto& [id, m] : models_) first = std::min(first, id);
    compatibility = models_.at(first).compatibility;
  }
  // Exported from the core's radix index: ids and depths only, no token copies.
  const RadixPrefixIndex::Export tree = core_->CheckpointTree(compatibility, max_nodes);
  TreeView out;
  out.truncated = tree.truncated;
  out.nodes.reserve(tree.nodes.size());
  for (const RadixPrefixIndex::ExportedNode& n : tree.nodes) {
    TreeView::Node node;
    node.parent = n.parent;
    node.depth = n.depth;
    for (const IndexEntry& e : n.entries) {
      node.checkpoints.emplace_back(e.id, core_->InRam(e.id) ? Tier::kRam : Tier::kDisk);
    }
    out.nodes.push_back(std::move(node));
  }
  return out;
}

absl::StatusOr<Explanation> CacheDaemon::Explain(const ExplainQuery& req) {
  if (req.tokens.empty()) return absl::InvalidArgumentError("explain of an empty prompt");
  Lock lock(this);
  uint64_t model_id = req.model_id;
  if (model_id == 0) {  // The first registered model, as GetTree.
    for (const auto& [id, m] : models_) model_id = model_id == 0 ? id : std::min(model_id, id);
  }
  ASSIGN_OR_RETURN(const Model* model, FindModelLocked(model_id));
  LookupRequest lr;
  lr.identities = Identities{model->compatibility, ""};
  lr.tokens = req.tokens;
  Explanation out;
  ASSIGN_OR_RETURN(out.result, core_->Lookup(lr));
  const LookupResult& r = out.result;
  absl::flat_hash_set<CheckpointId> on_path;
  on_path.insert(r.best.checkpoint);
  for (const Candidate& c : r.others) on_path.insert(c.checkpoint);
  for (const Event& e : core_->events().recent()) {
    if (e.checkpoint != 0 && on_path.contains(e.checkpoint)) out.related.push_back(e);
  }
  if (r.best.tier == Tier::kNone) {
    out.summary = absl::StrCat("cold: no compatible checkpoint on the path; longest shared prefix ",
                               r.shared_prefix, " tokens");
  } else {
    out.summary = absl::StrCat("restores ", r.best.depth, " of ", req.tokens.size(),
                               " tokens from ", TierName(r.best.tier),
                               r.best.depth < r.shared_prefix
                                   ? absl::StrCat("; history matches up to token ", r.shared_prefix)
                                   : "");
  }
  return out;
}

absl::StatusOr<std::vector<CheckpointId>> CacheDaemon::Evict(const EvictOrder& req) {
  if (req.include_disk && store_ == nullptr) {
    return absl::FailedPreconditionError("this daemon runs without a disk tier");
  }
  if (!req.all && req.checkpoint_id == 0) {
    return absl::InvalidArgumentError("evict needs an id or all");
  }
  CoreLock lock(this);
  std::vector<CheckpointId> targets;
  if (req.all) {
    for (const CheckpointInfo& c : core_->Checkpoints()) {
      if (c.pins == 0 && (c.in_ram || (req.include_disk && c.on_disk))) targets.push_back(c.id);
    }
  } else {
    targets.push_back(req.checkpoint_id);
  }
  std::vector<CheckpointId> evicted;
  for (CheckpointId id : targets) {
    absl::StatusOr<CheckpointInfo> info = core_->GetCheckpoint(id);
    if (!info.ok()) {
      if (!req.all) return info.status();
      continue;
    }
    absl::Status s = absl::OkStatus();
    if (info->in_ram) s = core_->Evict(id, "explicit");
    // The disk copy goes too when asked; the kDiskEvict event deletes its files off the lock.
    if (s.ok() && req.include_disk && info->on_disk) s = core_->EvictDisk(id, "explicit");
    if (s.ok() && !info->in_ram && !req.include_disk) {
      s = absl::NotFoundError(
          absl::StrCat("checkpoint ", id, " is only on disk (evict with include_disk)"));
    }
    if (!s.ok() && !req.all) return s;
    if (s.ok()) evicted.push_back(id);
  }
  return evicted;
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
