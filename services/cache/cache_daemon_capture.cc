// CacheDaemon's captures (reserve, commit, abort) and frontier updates.

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/status/check.h"
#include "common/status/status_macros.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/proto_convert.h"

namespace cairn::cache {

// ---------------------------------------------------------------------------------------
// Captures.

void CacheDaemon::ReserveIds(const CaptureRequest& req) {
  if (store_ == nullptr) return;  // No limit: nothing survives a restart.
  CheckpointId checkpoints_up_to = 0;
  ChunkId chunks_up_to = 0;
  {
    Lock lock(this);
    const CheckpointId next = core_->next_checkpoint_id();
    if (next > core_->checkpoint_id_limit()) {
      checkpoints_up_to = next - 1 + static_cast<CheckpointId>(options_.checkpoint_id_block);
    }
    // The chunks a capture of the slot would mint (none for a slot not known yet: the
    // capture fails before it mints any).
    absl::StatusOr<int32_t> slot = sessions_.Slot(req.session_id, req.slot);
    const ChunkId needed =
        static_cast<ChunkId>(slot.ok() ? core_->ChunksToMint(SlotKey{req.session_id, *slot}) : 0);
    const ChunkId next_chunk = core_->next_chunk_id();
    if (next_chunk - 1 + needed > core_->chunk_id_limit()) {
      chunks_up_to =
          next_chunk - 1 + std::max(needed, static_cast<ChunkId>(options_.chunk_id_block));
    }
  }
  if (checkpoints_up_to == 0 && chunks_up_to == 0) return;
  // Durable before the core may mint any of them, so before any is handed out. A catalog that
  // cannot take the record (the disk tier failing, or turned read-only) must not stop the RAM
  // tier (IO4): the ids are used all the same, and only they may come back after a restart.
  auto reserve = [](absl::Status reserved, const char* what, uint64_t up_to) {
    if (reserved.ok()) return;
    CAIRN_LOG(WARNING) << "reserving " << what << " ids up to " << up_to << " on disk failed ("
                       << reserved << "); they are used all the same, and a restart may hand "
                       << "them out again";
  };
  if (checkpoints_up_to != 0) {
    reserve(store_->ReserveCheckpointIds(checkpoints_up_to), "checkpoint", checkpoints_up_to);
  }
  if (chunks_up_to != 0) reserve(store_->ReserveChunkIds(chunks_up_to), "chunk", chunks_up_to);
  Lock lock(this);
  core_->LimitCheckpointIds(std::max(core_->checkpoint_id_limit(), checkpoints_up_to));
  core_->LimitChunkIds(std::max(core_->chunk_id_limit(), chunks_up_to));
}

absl::StatusOr<CaptureGrant> CacheDaemon::ReserveCapture(const CaptureRequest& req) {
  // Other captures may use the ids reserved up between the reservation and the capture (a
  // small block, many threads): reserve again, a bounded number of times.
  constexpr int kAttempts = 8;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    ReserveIds(req);
    std::optional<absl::StatusOr<CaptureGrant>> grant = ReserveCaptureWithinIds(req);
    if (grant.has_value()) return *std::move(grant);
  }
  return absl::UnavailableError(
      absl::StrCat("other captures used up every id reserved for this one (", kAttempts,
                   " blocks of ", options_.checkpoint_id_block, " checkpoint ids and of ",
                   options_.chunk_id_block, " chunk ids)"));
}

std::optional<absl::StatusOr<CaptureGrant>> CacheDaemon::ReserveCaptureWithinIds(
    const CaptureRequest& req) {
  CoreLock lock(this);
  ASSIGN_OR_RETURN(int32_t slot, sessions_.Slot(req.session_id, req.slot));
  ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id));
  const SlotKey key{req.session_id, slot};
  RETURN_IF_ERROR(CheckSlotModelLocked(key, req.model_id));
  RETURN_IF_ERROR(sessions_.CheckCanReserve(req.session_id, slot));
  ASSIGN_OR_RETURN(std::vector<TokenId> frontier, core_->SlotTokens(key));
  if (frontier.size() != req.depth) {
    return absl::FailedPreconditionError(absl::StrCat("capture at depth ", req.depth, " but slot ",
                                                      slot, "'s frontier is at ", frontier.size()));
  }
  if (core_->next_checkpoint_id() > core_->checkpoint_id_limit() ||
      core_->next_chunk_id() - 1 + static_cast<ChunkId>(core_->ChunksToMint(key)) >
          core_->chunk_id_limit()) {
    return std::nullopt;
  }
  const uint64_t before = events_.LastSeq();
  ASSIGN_OR_RETURN(CaptureTicket ticket,
                   core_->BeginCapture(key, req.kind, req.conversation, req.stable_boundary));
  Reservation r;
  r.session = req.session_id;
  r.slot = key;
  r.ticket = ticket.id;
  r.expires = Now() + options_.default_lease;
  const ModelLayout& layout = model->layout;
  const int64_t depth = static_cast<int64_t>(req.depth);
  r.state.private_bytes = static_cast<uint64_t>(layout.PrivateBytes());
  r.state.tail_bytes = static_cast<uint64_t>(layout.TailBytes(depth));
  absl::StatusOr<HeldRegion> state_region =
      regions_->Allocate(r.state.private_bytes + r.state.tail_bytes, RegionKind::kPrivateState);
  absl::Status alloc = state_region.status();
  if (alloc.ok()) r.state.region = *state_region;
  // Space for borrowed chunks is reserved now, so preserving them later never allocates.
  for (const ChunkCopy& c : ticket.borrowed) {
    if (!alloc.ok()) break;
    if (regions_->FindChunk(c.id) != nullptr) continue;
    alloc = regions_->ReserveChunk(c.id, static_cast<uint64_t>(layout.ChunkBytes())).status();
    if (!alloc.ok()) break;
    r.new_chunk_regions.push_back(c.id);
  }
  // Cannot fail: CheckCanReserve said OK under this hold of mu_, and reservations are added
  // only under mu_; the core's ticket ids are never reused.
  CAIRN_CHECK(sessions_.AddReservation(req.session_id, slot, ticket.id).ok());
  CaptureGrant grant;
  grant.reservation_id = ticket.id;
  grant.expires_unix_ms = UnixMs(r.expires);
  grant.private_state.region = r.state.private_handle();
  if (r.state.tail_bytes > 0) {
    grant.tail.first_row = static_cast<uint64_t>(depth / layout.chunk_rows * layout.chunk_rows);
    grant.tail.rows = static_cast<uint32_t>(depth % layout.chunk_rows);
    grant.tail.region = r.state.tail_handle();
  }
  CAIRN_CHECK(reservations_.Add(ticket.id, std::move(r)));
  if (!alloc.ok()) {
    ReleaseReservationLocked(ticket.id, absl::StrCat("arena: ", alloc.message()));
    return absl::ResourceExhaustedError(
        absl::StrCat("arena cannot hold the capture: ", alloc.message()));
  }
  for (const v1::Event& e : events_.After(before, 0)) {
    if (e.kind() == v1::EVENT_KIND_EVICT) grant.evicted.push_back(e.checkpoint_id());
  }
  return grant;
}

void CacheDaemon::ReleaseReservationLocked(uint64_t id, const std::string& reason) {
  std::optional<Reservation> r = reservations_.Take(id);
  if (!r.has_value()) return;
  sessions_.RemoveReservation(id);
  regions_->Free(&r->state.region);
  // Abort fails only for a ticket the core already dropped (a chunk it needed was lost).
  core_->AbortCapture(r->ticket, reason).IgnoreError();
}

absl::StatusOr<CommitResult> CacheDaemon::CommitCapture(const CaptureCommit& req) {
  CoreLock lock(this);
  RETURN_IF_ERROR(sessions_.CheckOpen(req.session_id));
  std::optional<Reservation> r;
  if (sessions_.HoldsReservation(req.session_id, req.reservation_id)) {
    r = reservations_.Take(req.reservation_id);
  }
  if (!r.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("capture reservation ", req.reservation_id, " is not held"));
  }
  sessions_.RemoveReservation(req.reservation_id);
  absl::Status s = absl::OkStatus();
  if (r->state.region.bytes > 0) {
    absl::StatusOr<absl::Span<uint8_t>> bytes = arena_->Resolve(r->state.region.handle());
    s = bytes.ok() ? VerifyCapture(*bytes, req.private_checksum, req.tail_checksum, &r->state)
                   : bytes.status();
  }
  if (!s.ok()) {
    regions_->Free(&r->state.region);
    // Abort fails only for a ticket the core already dropped.
    core_->AbortCapture(r->ticket, std::string(s.message())).IgnoreError();
    return s;
  }
  absl::StatusOr<CheckpointId> committed = core_->CommitCapture(r->ticket);
  if (!committed.ok()) {
    // The core rolled the capture back already (a chunk it referenced was lost).
    regions_->Free(&r->state.region);
    return absl::AbortedError(absl::StrCat("capture ", req.reservation_id,
                                           " was dropped: ", committed.status().message()));
  }
  CommitResult result;
  result.checkpoint_id = *committed;
  regions_->AdoptCheckpoint(result.checkpoint_id, r->state);
  const uint64_t queued_before = persists_queued_;
  MaybePersistLocked(result.checkpoint_id);
  result.queued_for_disk =
      persists_queued_ != queued_before || deferred_persists_.contains(result.checkpoint_id);
  return result;
}

absl::Status CacheDaemon::AbortCapture(const CaptureAbort& req) {
  CoreLock lock(this);
  RETURN_IF_ERROR(sessions_.CheckOpen(req.session_id));
  if (!reservations_.Contains(req.reservation_id) ||
      !sessions_.HoldsReservation(req.session_id, req.reservation_id)) {
    return absl::NotFoundError(
        absl::StrCat("capture reservation ", req.reservation_id, " is not held"));
  }
  ReleaseReservationLocked(req.reservation_id,
                           req.reason.empty() ? "aborted by client" : req.reason);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> CacheDaemon::UpdateFrontier(const FrontierUpdate& req) {
  CoreLock lock(this);
  ASSIGN_OR_RETURN(int32_t slot, sessions_.Slot(req.session_id, req.slot));
  RETURN_IF_ERROR(FindModelLocked(req.model_id).status());
  const SlotKey key{req.session_id, slot};
  RETURN_IF_ERROR(CheckSlotModelLocked(key, req.model_id));
  ASSIGN_OR_RETURN(std::vector<TokenId> frontier, core_->SlotTokens(key));
  if (frontier.size() != req.expected_depth) {
    return absl::FailedPreconditionError(absl::StrCat(
        "slot ", slot, "'s frontier is at ", frontier.size(), ", not ", req.expected_depth));
  }
  if (static_cast<int64_t>(frontier.size() + req.tokens.size()) > WireLimits::kMaxTokens) {
    return absl::InvalidArgumentError(absl::StrCat("append_tokens would bring slot ", slot,
                                                   " past ", WireLimits::kMaxTokens, " tokens"));
  }
  RETURN_IF_ERROR(core_->ExtendSlot(key, req.tokens));
  return frontier.size() + req.tokens.size();
}

}  // namespace cairn::cache
