// CacheDaemon's restores: RAM and disk leases, their readiness and release.

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "common/status/check.h"
#include "common/status/status_macros.h"
#include "services/cache/cache_daemon.h"

namespace cairn::cache {

absl::StatusOr<RestoreGrant> CacheDaemon::AcquireRestore(const RestoreRequest& req) {
  ASSIGN_OR_RETURN(std::optional<RestoreGrant> from_ram, BeginRestore(req));
  if (from_ram.has_value()) return *std::move(from_ram);
  return RestoreFromDisk(req);
}

void CacheDaemon::AcquireRestoreAsync(const RestoreRequest& req, absl::Time deadline,
                                      RestoreDone done) {
  absl::StatusOr<std::optional<RestoreGrant>> from_ram = BeginRestore(req);
  if (!from_ram.ok()) {
    std::move(done)(from_ram.status());
    return;
  }
  if (from_ram->has_value()) {
    std::move(done)(**std::move(from_ram));
    return;
  }
  // A refusal (queue full, shutting down) calls the task at once with it.
  disk_loads_
      ->Schedule(deadline,
                 [this, req, done = std::move(done)](absl::Status start) mutable {
                   if (!start.ok()) {
                     std::move(done)(std::move(start));
                     return;
                   }
                   std::move(done)(RestoreFromDisk(req));
                 })
      .IgnoreError();  // The task was answered with the refusal.
}

absl::StatusOr<std::optional<RestoreGrant>> CacheDaemon::BeginRestore(const RestoreRequest& req) {
  {
    CoreLock lock(this);
    ASSIGN_OR_RETURN(int32_t slot, sessions_.Slot(req.session_id, req.slot));
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id));
    RETURN_IF_ERROR(sessions_.CheckCanLease(req.session_id, slot));
    ASSIGN_OR_RETURN(CheckpointInfo info, core_->GetCheckpoint(req.checkpoint_id));
    if (info.compatibility != model->compatibility) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", req.checkpoint_id, " belongs to another compatibility identity"));
    }
    sessions_.UseSlot(req.session_id, slot);
    activity_->Busy(SlotKey{req.session_id, slot});
    if (info.in_ram && regions_->FindCheckpoint(req.checkpoint_id) != nullptr) {
      ASSIGN_OR_RETURN(RestoreGrant grant, RestoreFromRamLocked(req, *model));
      return std::optional<RestoreGrant>(std::move(grant));
    }
    if (!info.on_disk || store_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", req.checkpoint_id, " is in no tier that can restore"));
    }
  }
  return std::optional<RestoreGrant>();
}

absl::StatusOr<RestoreGrant> CacheDaemon::RestoreFromRamLocked(const RestoreRequest& req,
                                                               const Model& model) {
  // Chunks whose rows still sit in a slot (of any session) are spilled urgently; the lease
  // answers at once with ready = false and is settled by LeaseReady when the spills finish.
  const SlotKey key{req.session_id, static_cast<int32_t>(req.slot)};
  const Identities ids{model.compatibility, req.input};
  ASSIGN_OR_RETURN(RestorePlan plan, core_->Restore(req.checkpoint_id, key, ids, req.conversation));
  slot_models_[key] = req.model_id;
  RETURN_IF_ERROR(core_->Pin(req.checkpoint_id));
  return GrantLeaseLocked(req, model, plan, *regions_->FindCheckpoint(req.checkpoint_id),
                          regions_->chunks(), Tier::kRam, nullptr);
}

absl::StatusOr<RestoreGrant> CacheDaemon::RestoreFromDisk(const RestoreRequest& req) {
  const CheckpointId id = req.checkpoint_id;
  auto load = std::make_unique<DiskLoad>();
  absl::flat_hash_map<ChunkId, absl::Span<uint8_t>> chunk_dest;
  absl::Span<uint8_t> state_dest;
  {
    // Phase 1, locked: pin the checkpoint and give every missing byte a region.
    CoreLock lock(this);
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id));
    ASSIGN_OR_RETURN(CheckpointInfo info, core_->GetCheckpoint(id));
    if (!info.on_disk) return absl::NotFoundError(absl::StrCat("checkpoint ", id, " left disk"));
    RETURN_IF_ERROR(core_->Pin(id));
    const ModelLayout& layout = model->layout;
    load->state.private_bytes = static_cast<uint64_t>(layout.PrivateBytes());
    load->state.tail_bytes = static_cast<uint64_t>(layout.TailBytes(info.depth));
    absl::StatusOr<HeldRegion> region = regions_->Allocate(
        load->state.private_bytes + load->state.tail_bytes, RegionKind::kPrivateState);
    absl::Status alloc = region.status();
    if (alloc.ok()) load->state.region = *region;
    for (ChunkId c : info.chunks) {
      if (!alloc.ok()) break;
      region = regions_->Allocate(static_cast<uint64_t>(layout.ChunkBytes()), RegionKind::kChunk);
      alloc = region.status();
      if (alloc.ok()) load->chunks[c] = *region;
    }
    if (!alloc.ok()) {
      DropDiskLoadLocked(id, load.get());
      return absl::ResourceExhaustedError(
          absl::StrCat("arena cannot hold checkpoint ", id, " from disk: ", alloc.message()));
    }
    for (auto& [c, held] : load->chunks) {
      absl::StatusOr<absl::Span<uint8_t>> span = arena_->Resolve(held.handle());
      if (!span.ok()) {
        DropDiskLoadLocked(id, load.get());
        return span.status();
      }
      chunk_dest[c] = *span;
    }
    if (load->state.region.bytes > 0) {
      absl::StatusOr<absl::Span<uint8_t>> span = arena_->Resolve(load->state.region.handle());
      if (!span.ok()) {
        DropDiskLoadLocked(id, load.get());
        return span.status();
      }
      state_dest = *span;
    }
  }
  // Phase 2, unlocked: read and verify every file into the regions (R4).
  absl::Status read =
      store_->Restore(id, [&](const RestorePiece& piece) -> absl::StatusOr<absl::Span<uint8_t>> {
        absl::Span<uint8_t> dest;
        if (piece.kind == FileKind::kState) {
          dest = state_dest;
        } else {
          auto it = chunk_dest.find(piece.chunk.chunk_id);
          if (it == chunk_dest.end()) {
            return absl::DataLossError(absl::StrCat("chunk ", piece.chunk.chunk_id,
                                                    " on disk is not one of the checkpoint's"));
          }
          dest = it->second;
        }
        if (dest.size() != piece.bytes) {
          return absl::DataLossError(
              absl::StrCat("piece of ", piece.bytes, " bytes, expected ", dest.size()));
        }
        return dest;
      });
  // The regions' own checksums (what a restore from RAM hands out), still unlocked: the regions
  // belong to this load alone until it is granted or dropped.
  if (read.ok()) {
    if (load->state.region.bytes > 0) {
      load->state.private_checksum = Xxh3(state_dest.data(), load->state.private_bytes);
      load->state.tail_checksum =
          Xxh3(state_dest.data() + load->state.private_bytes, load->state.tail_bytes);
    }
    for (auto& [c, held] : load->chunks) {
      held.checksum = Xxh3(chunk_dest[c].data(), chunk_dest[c].size());
    }
  }
  // Phase 3, locked: hand the bytes to the slot, or give everything back.
  CoreLock lock(this);
  absl::StatusOr<const Model*> model = FindModelLocked(req.model_id);
  if (!read.ok() || !model.ok()) {
    DropDiskLoadLocked(id, load.get());
    if (!model.ok()) return model.status();
    if (absl::IsDataLoss(read)) ForgetQuarantinedLocked(id, read);
    return read;
  }
  const SlotKey key{req.session_id, static_cast<int32_t>(req.slot)};
  // The lock was released while reading: the session may have ended, or taken another lease
  // on this slot, meanwhile.
  if (absl::Status can = sessions_.CheckCanLease(req.session_id, key.slot); !can.ok()) {
    DropDiskLoadLocked(id, load.get());
    return can;
  }
  const Identities ids{(*model)->compatibility, req.input};
  absl::StatusOr<RestorePlan> plan = core_->Restore(id, key, ids, req.conversation);
  if (!plan.ok()) {
    DropDiskLoadLocked(id, load.get());
    return plan.status();
  }
  slot_models_[key] = req.model_id;
  const StateBytes state = load->state;
  const absl::flat_hash_map<ChunkId, HeldRegion> regions = load->chunks;
  return GrantLeaseLocked(req, **model, *plan, state, regions, Tier::kDisk, std::move(load));
}

void CacheDaemon::DropDiskLoadLocked(CheckpointId id, DiskLoad* load) {
  regions_->Free(&load->state.region);
  for (auto& [c, held] : load->chunks) regions_->Free(&held);
  core_->Unpin(id).IgnoreError();  // Only fails for a checkpoint already gone.
}

RestoreGrant CacheDaemon::GrantLeaseLocked(
    const RestoreRequest& req, const Model& model, const RestorePlan& plan, const StateBytes& state,
    const absl::flat_hash_map<ChunkId, HeldRegion>& chunk_regions, Tier tier,
    std::unique_ptr<DiskLoad> loaded) {
  absl::Duration duration = req.lease == absl::ZeroDuration() ? options_.default_lease : req.lease;
  duration = std::min(duration, options_.max_lease);
  const uint64_t lease_id = next_id_++;
  const int64_t chunk_rows = model.layout.chunk_rows;
  Lease lease;
  lease.session = req.session_id;
  lease.checkpoint = req.checkpoint_id;
  lease.slot = SlotKey{req.session_id, static_cast<int32_t>(req.slot)};
  lease.kept_rows = plan.kept_rows;
  lease.duration = duration;
  lease.expires = Now() + duration;
  lease.ready_by = Now() + options_.max_lease_wait;
  lease.loaded = std::move(loaded);
  lease.awaiting.insert(plan.awaiting_spills.begin(), plan.awaiting_spills.end());
  lease.ready = lease.awaiting.empty();
  RestoreGrant grant;
  grant.lease_id = lease_id;
  grant.expires_unix_ms = UnixMs(Now() + duration);
  grant.checkpoint_id = req.checkpoint_id;
  grant.depth = plan.depth;
  grant.loaded_from = tier;
  grant.kept_rows = plan.kept_rows;
  grant.ready = lease.ready;
  grant.awaiting_spills.assign(plan.awaiting_spills.begin(), plan.awaiting_spills.end());
  grant.preserve_spills.assign(plan.preserve_spills.begin(), plan.preserve_spills.end());
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const int64_t first_row = static_cast<int64_t>(i) * chunk_rows;
    if (first_row < plan.kept_rows) continue;
    lease.chunks.push_back(plan.chunks[i]);
    ChunkGrant& cg = grant.chunks.emplace_back();
    cg.chunk_id = plan.chunks[i];
    cg.first_row = static_cast<uint64_t>(first_row);
    cg.rows = static_cast<uint32_t>(chunk_rows);
    auto held = chunk_regions.find(plan.chunks[i]);
    // A borrowed chunk whose charge waits for its spill gets its region then: LeaseReady
    // carries it.
    if (held == chunk_regions.end()) continue;
    cg.region = held->second.handle();
    if (lease.loaded == nullptr) lease.holds.push_back(held->second);
    // Known only once the bytes are there: 0 until then (LeaseReady carries it). A chunk
    // already resident has its checksum now even when others are still awaited.
    bool known = lease.ready || tier == Tier::kDisk;
    if (!known) {
      absl::StatusOr<ChunkInfo> chunk = core_->GetChunk(cg.chunk_id);
      known = chunk.ok() && chunk->residency == Residency::kResident;
    }
    if (known) cg.checksum = held->second.checksum;
  }
  // The regions a restore from RAM hands out stay allocated until the lease ends, even if the
  // core drops their checkpoint meanwhile (a quarantine ignores pins); a disk restore's own
  // regions go with its lease anyway.
  if (lease.loaded == nullptr) lease.holds.push_back(state.region);
  for (const HeldRegion& held : lease.holds) regions_->Hold(held);
  // Cannot fail: CheckCanLease said OK under this hold of mu_, and leases are added only
  // under mu_.
  CAIRN_CHECK(sessions_.AddLease(lease.session, lease.slot.slot, lease_id).ok());
  CAIRN_CHECK(leases_.Add(lease_id, std::move(lease)));  // Ids are never reused.
  grant.private_state.region = state.private_handle();
  grant.private_state.checksum = state.private_checksum;
  if (state.tail_bytes > 0) {
    grant.tail.first_row = static_cast<uint64_t>(plan.depth / chunk_rows * chunk_rows);
    grant.tail.rows = static_cast<uint32_t>(plan.depth % chunk_rows);
    grant.tail.region = state.tail_handle();
    grant.tail.checksum = state.tail_checksum;
  }
  counters_.CountHit(tier, plan.depth);
  grant.preserve_spills = OutstandingSpillsLocked(std::move(grant.preserve_spills));
  return grant;
}

void CacheDaemon::ReleaseLeaseLocked(uint64_t id) {
  std::optional<Lease> lease = leases_.Take(id);
  if (!lease.has_value()) return;
  sessions_.RemoveLease(id);
  // Unpin can only fail for a checkpoint the core already dropped; nothing is left to release.
  core_->Unpin(lease->checkpoint).IgnoreError();
  for (const HeldRegion& held : lease->holds) regions_->Unhold(held);
  if (lease->loaded != nullptr) {
    regions_->Free(&lease->loaded->state.region);
    for (auto& [c, held] : lease->loaded->chunks) regions_->Free(&held);
  }
}

absl::Status CacheDaemon::ReleaseLease(const LeaseRelease& req) {
  CoreLock lock(this);
  RETURN_IF_ERROR(sessions_.CheckOpen(req.session_id));
  std::optional<LeaseView> lease = leases_.Find(req.lease_id);
  if (!lease.has_value() || !sessions_.HoldsLease(req.session_id, req.lease_id)) {
    return absl::NotFoundError(absl::StrCat("lease ", req.lease_id, " is not held"));
  }
  if (!req.restored) {
    CAIRN_LOG(WARNING) << "restore of checkpoint " << lease->checkpoint
                       << " failed in the client: " << req.failure;
  }
  // Given up before it was ready: the slot never received the restored rows.
  if (!lease->ready) core_->AbandonRestore(lease->slot, lease->kept_rows);
  ReleaseLeaseLocked(req.lease_id);
  return absl::OkStatus();
}

}  // namespace cairn::cache
