// CacheDaemon's restores: RAM and disk leases, their readiness and release.

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "common/status/check.h"
#include "common/status/status_macros.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/proto_convert.h"

namespace cairn::cache {

absl::Status CacheDaemon::AcquireRestoreOnce(const v1::AcquireRestoreRequest& req,
                                             v1::RestoreLease* resp) {
  ASSIGN_OR_RETURN(bool from_disk, BeginRestore(req, resp));
  return from_disk ? RestoreFromDisk(req, resp) : absl::OkStatus();
}

void CacheDaemon::AcquireRestoreAsync(const v1::AcquireRestoreRequest& req, absl::Time deadline,
                                      RestoreDone done) {
  const uint64_t session = req.session_id();
  const uint64_t request_id = req.client_request_id();
  if (request_id != 0) {
    absl::StatusOr<std::optional<std::string>> first =
        replies_.Begin(session, request_id, "AcquireRestore");
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
  auto finish = [this, session, request_id, done = std::move(done)](
                    absl::Status status, v1::RestoreLease lease) mutable {
    if (request_id != 0) {
      replies_.Finish(
          session, request_id,
          status.ok() ? std::optional<std::string>(lease.SerializeAsString()) : std::nullopt);
    }
    std::move(done)(std::move(status), std::move(lease));
  };
  v1::RestoreLease resp;
  absl::StatusOr<bool> from_disk = BeginRestore(req, &resp);
  if (!from_disk.ok() || !*from_disk) {
    finish(from_disk.status(), std::move(resp));
    return;
  }
  // A refusal (queue full, shutting down) calls the task at once with it.
  disk_loads_
      ->Schedule(deadline,
                 [this, req, finish = std::move(finish)](absl::Status start) mutable {
                   v1::RestoreLease lease;
                   if (start.ok()) start = RestoreFromDisk(req, &lease);
                   finish(std::move(start), std::move(lease));
                 })
      .IgnoreError();  // The task was answered with the refusal.
}

absl::StatusOr<bool> CacheDaemon::BeginRestore(const v1::AcquireRestoreRequest& req,
                                               v1::RestoreLease* resp) {
  RETURN_IF_ERROR(CheckLength("conversation", req.conversation(), WireLimits::kMaxNameBytes));
  RETURN_IF_ERROR(InputDigest("input_identity", req.input_identity()).status());
  {
    Lock lock(this);
    ASSIGN_OR_RETURN(int32_t slot, sessions_.Slot(req.session_id(), req.slot()));
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
    RETURN_IF_ERROR(sessions_.CheckCanLease(req.session_id(), slot));
    ASSIGN_OR_RETURN(CheckpointInfo info, core_->GetCheckpoint(req.checkpoint_id()));
    if (info.compatibility != model->compatibility) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", req.checkpoint_id(), " belongs to another compatibility identity"));
    }
    sessions_.UseSlot(req.session_id(), slot);
    activity_->Busy(SlotKey{req.session_id(), slot});
    if (info.in_ram && regions_->FindCheckpoint(req.checkpoint_id()) != nullptr) {
      RETURN_IF_ERROR(RestoreFromRamLocked(req, *model, resp));
      return false;
    }
    if (!info.on_disk || store_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", req.checkpoint_id(), " is in no tier that can restore"));
    }
  }
  return true;
}

absl::Status CacheDaemon::RestoreFromRamLocked(const v1::AcquireRestoreRequest& req,
                                               const Model& model, v1::RestoreLease* resp) {
  // Chunks whose rows still sit in a slot (of any session) are spilled urgently; the lease
  // answers at once with ready = false and is settled by LeaseReady when the spills finish.
  const SlotKey key{req.session_id(), static_cast<int32_t>(req.slot())};
  ASSIGN_OR_RETURN(std::string input, InputDigest("input_identity", req.input_identity()));
  const Identities ids{model.compatibility, input};
  ASSIGN_OR_RETURN(RestorePlan plan,
                   core_->Restore(req.checkpoint_id(), key, ids, req.conversation()));
  slot_models_[key] = req.model_id();
  RETURN_IF_ERROR(core_->Pin(req.checkpoint_id()));
  FillLeaseLocked(req, model, plan, *regions_->FindCheckpoint(req.checkpoint_id()),
                  regions_->chunks(), Tier::kRam, nullptr, resp);
  return absl::OkStatus();
}

absl::Status CacheDaemon::RestoreFromDisk(const v1::AcquireRestoreRequest& req,
                                          v1::RestoreLease* resp) {
  const CheckpointId id = req.checkpoint_id();
  auto load = std::make_unique<DiskLoad>();
  absl::flat_hash_map<ChunkId, absl::Span<uint8_t>> chunk_dest;
  absl::Span<uint8_t> state_dest;
  {
    // Phase 1, locked: pin the checkpoint and give every missing byte a region.
    Lock lock(this);
    ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
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
  // Phase 3, locked: hand the bytes to the slot, or give everything back.
  Lock lock(this);
  absl::StatusOr<const Model*> model = FindModelLocked(req.model_id());
  if (!read.ok() || !model.ok()) {
    DropDiskLoadLocked(id, load.get());
    if (!model.ok()) return model.status();
    if (absl::IsDataLoss(read)) ForgetQuarantinedLocked(id, read);
    AfterCoreLocked();
    return read;
  }
  if (load->state.region.bytes > 0) {
    load->state.private_checksum = Xxh3(state_dest.data(), load->state.private_bytes);
    load->state.tail_checksum =
        Xxh3(state_dest.data() + load->state.private_bytes, load->state.tail_bytes);
  }
  for (auto& [c, held] : load->chunks) {
    held.checksum = Xxh3(chunk_dest[c].data(), chunk_dest[c].size());
  }
  const SlotKey key{req.session_id(), static_cast<int32_t>(req.slot())};
  // The lock was released while reading: the session may have ended, or taken another lease
  // on this slot, meanwhile.
  if (absl::Status can = sessions_.CheckCanLease(req.session_id(), key.slot); !can.ok()) {
    DropDiskLoadLocked(id, load.get());
    return can;
  }
  ASSIGN_OR_RETURN(std::string input, InputDigest("input_identity", req.input_identity()));
  const Identities ids{(*model)->compatibility, input};
  absl::StatusOr<RestorePlan> plan = core_->Restore(id, key, ids, req.conversation());
  if (!plan.ok()) {
    DropDiskLoadLocked(id, load.get());
    return plan.status();
  }
  slot_models_[key] = req.model_id();
  const StateBytes state = load->state;
  const absl::flat_hash_map<ChunkId, HeldRegion> regions = load->chunks;
  FillLeaseLocked(req, **model, *plan, state, regions, Tier::kDisk, std::move(load), resp);
  return absl::OkStatus();
}

void CacheDaemon::DropDiskLoadLocked(CheckpointId id, DiskLoad* load) {
  regions_->Free(&load->state.region);
  for (auto& [c, held] : load->chunks) regions_->Free(&held);
  core_->Unpin(id).IgnoreError();  // Only fails for a checkpoint already gone.
}

void CacheDaemon::FillLeaseLocked(const v1::AcquireRestoreRequest& req, const Model& model,
                                  const RestorePlan& plan, const StateBytes& state,
                                  const absl::flat_hash_map<ChunkId, HeldRegion>& chunk_regions,
                                  Tier tier, std::unique_ptr<DiskLoad> loaded,
                                  v1::RestoreLease* resp) {
  absl::Duration duration =
      req.lease_ms() == 0 ? options_.default_lease : absl::Milliseconds(req.lease_ms());
  duration = std::min(duration, options_.max_lease);
  const uint64_t lease_id = next_id_++;
  const int64_t chunk_rows = model.layout.chunk_rows;
  Lease lease;
  lease.session = req.session_id();
  lease.checkpoint = req.checkpoint_id();
  lease.slot = SlotKey{req.session_id(), static_cast<int32_t>(req.slot())};
  lease.kept_rows = plan.kept_rows;
  lease.duration = duration;
  lease.expires = Now() + duration;
  lease.loaded = std::move(loaded);
  lease.awaiting.insert(plan.awaiting_spills.begin(), plan.awaiting_spills.end());
  lease.ready = lease.awaiting.empty();
  resp->set_lease_id(lease_id);
  resp->set_expires_unix_ms(UnixMs(Now() + duration));
  resp->set_checkpoint_id(req.checkpoint_id());
  resp->set_depth(static_cast<uint64_t>(plan.depth));
  resp->set_loaded_from(ToProtoTier(tier));
  resp->set_kept_rows(static_cast<uint64_t>(plan.kept_rows));
  resp->set_ready(lease.ready);
  for (uint64_t spill : plan.awaiting_spills) resp->add_awaiting_spills(spill);
  for (uint64_t spill : plan.preserve_spills) resp->add_preserve_spills(spill);
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const int64_t first_row = static_cast<int64_t>(i) * chunk_rows;
    if (first_row < plan.kept_rows) continue;
    lease.chunks.push_back(plan.chunks[i]);
    auto held = chunk_regions.find(plan.chunks[i]);
    v1::ChunkRegion* cr = resp->add_chunks();
    cr->set_chunk_id(plan.chunks[i]);
    cr->set_first_row(static_cast<uint64_t>(first_row));
    cr->set_rows(static_cast<uint32_t>(chunk_rows));
    if (held == chunk_regions.end()) continue;  // Cannot happen: regions come with the refs.
    FillHandle(held->second.handle(), cr->mutable_region());
    // Known only once the bytes are there: 0 until then (LeaseReady carries it).
    if (lease.ready || tier == Tier::kDisk) cr->set_checksum(held->second.checksum);
  }
  if (!lease.ready) {
    // The checksum of a chunk already resident is known now; others come with LeaseReady.
    for (v1::ChunkRegion& cr : *resp->mutable_chunks()) {
      absl::StatusOr<ChunkInfo> chunk = core_->GetChunk(cr.chunk_id());
      auto held = chunk_regions.find(cr.chunk_id());
      if (chunk.ok() && chunk->residency == Residency::kResident && held != chunk_regions.end()) {
        cr.set_checksum(held->second.checksum);
      }
    }
  }
  // Cannot fail: CheckCanLease said OK under this hold of mu_, and leases are added only
  // under mu_.
  CAIRN_CHECK(sessions_.AddLease(lease.session, lease.slot.slot, lease_id).ok());
  leases_[lease_id] = std::move(lease);
  FillHandle(state.private_handle(), resp->mutable_private_state()->mutable_region());
  resp->mutable_private_state()->set_checksum(state.private_checksum);
  if (state.tail_bytes > 0) {
    v1::StateRegion* tail = resp->mutable_tail();
    tail->set_first_row(static_cast<uint64_t>(plan.depth / chunk_rows * chunk_rows));
    tail->set_rows(static_cast<uint32_t>(plan.depth % chunk_rows));
    FillHandle(state.tail_handle(), tail->mutable_region());
    tail->set_checksum(state.tail_checksum);
  }
  counters_.CountHit(tier, plan.depth);
  AfterCoreLocked();
}

void CacheDaemon::ReleaseLeaseLocked(uint64_t id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  sessions_.RemoveLease(id);
  // Unpin can only fail for a checkpoint the core already dropped; nothing is left to release.
  core_->Unpin(it->second.checkpoint).IgnoreError();
  if (it->second.loaded != nullptr) {
    regions_->Free(&it->second.loaded->state.region);
    for (auto& [c, held] : it->second.loaded->chunks) regions_->Free(&held);
  }
  leases_.erase(it);
}

absl::Status CacheDaemon::ReleaseLease(const v1::ReleaseLeaseRequest& req,
                                       v1::ReleaseLeaseResponse* /*resp*/) {
  RETURN_IF_ERROR(CheckLength("failure", req.failure(), WireLimits::kMaxTextBytes));
  Lock lock(this);
  RETURN_IF_ERROR(sessions_.CheckOpen(req.session_id()));
  auto it = leases_.find(req.lease_id());
  if (it == leases_.end() || !sessions_.HoldsLease(req.session_id(), req.lease_id())) {
    return absl::NotFoundError(absl::StrCat("lease ", req.lease_id(), " is not held"));
  }
  if (!req.restored()) {
    CAIRN_LOG(WARNING) << "restore of checkpoint " << it->second.checkpoint
                       << " failed in the client: " << req.failure();
  }
  // Given up before it was ready: the slot never received the restored rows.
  if (!it->second.ready) core_->AbandonRestore(it->second.slot, it->second.kept_rows);
  ReleaseLeaseLocked(req.lease_id());
  AfterCoreLocked();
  return absl::OkStatus();
}

}  // namespace cairn::cache
