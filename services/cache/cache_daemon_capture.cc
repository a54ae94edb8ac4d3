// CacheDaemon's captures (reserve, commit, abort) and frontier updates.

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "common/status/check.h"
#include "common/status/status_macros.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/proto_convert.h"

namespace cairn::cache {

// ---------------------------------------------------------------------------------------
// Captures.

absl::Status CacheDaemon::ReserveCaptureOnce(const v1::ReserveCaptureRequest& req,
                                             v1::CaptureReservation* resp) {
  ASSIGN_OR_RETURN(CaptureKind kind, FromProtoKind(req.kind()));
  RETURN_IF_ERROR(CheckLength("conversation", req.conversation(), WireLimits::kMaxNameBytes));
  Lock lock(this);
  ASSIGN_OR_RETURN(int32_t slot, sessions_.Slot(req.session_id(), req.slot()));
  ASSIGN_OR_RETURN(const Model* model, FindModelLocked(req.model_id()));
  const SlotKey key{req.session_id(), slot};
  RETURN_IF_ERROR(CheckSlotModelLocked(key, req.model_id()));
  RETURN_IF_ERROR(sessions_.CheckCanReserve(req.session_id(), slot));
  ASSIGN_OR_RETURN(std::vector<TokenId> frontier, core_->SlotTokens(key));
  if (frontier.size() != req.depth()) {
    return absl::FailedPreconditionError(absl::StrCat("capture at depth ", req.depth(),
                                                      " but slot ", slot, "'s frontier is at ",
                                                      frontier.size()));
  }
  const uint64_t before = events_.LastSeq();
  ASSIGN_OR_RETURN(
      CaptureTicket ticket,
      core_->BeginCapture(
          key, kind, req.conversation(),
          req.stable_boundary() == 0 ? -1 : static_cast<int64_t>(req.stable_boundary())));
  Reservation r;
  r.session = req.session_id();
  r.slot = key;
  r.ticket = ticket.id;
  r.expires = Now() + options_.default_lease;
  const ModelLayout& layout = model->layout;
  const int64_t depth = static_cast<int64_t>(req.depth());
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
  // only under mu_.
  CAIRN_CHECK(sessions_.AddReservation(req.session_id(), slot, ticket.id).ok());
  if (!alloc.ok()) {
    const uint64_t id = ticket.id;
    reservations_[id] = std::move(r);
    ReleaseReservationLocked(id, absl::StrCat("arena: ", alloc.message()));
    return absl::ResourceExhaustedError(
        absl::StrCat("arena cannot hold the capture: ", alloc.message()));
  }
  resp->set_reservation_id(ticket.id);
  resp->set_expires_unix_ms(UnixMs(r.expires));
  FillHandle(r.state.private_handle(), resp->mutable_private_state()->mutable_region());
  if (r.state.tail_bytes > 0) {
    resp->mutable_tail()->set_first_row(
        static_cast<uint64_t>(depth / layout.chunk_rows * layout.chunk_rows));
    resp->mutable_tail()->set_rows(static_cast<uint32_t>(depth % layout.chunk_rows));
    FillHandle(r.state.tail_handle(), resp->mutable_tail()->mutable_region());
  }
  for (const v1::Event& e : events_.After(before, 0)) {
    if (e.kind() == v1::EVENT_KIND_EVICT) {
      resp->add_evicted(e.checkpoint_id());
    }
  }
  reservations_[ticket.id] = std::move(r);
  AfterCoreLocked();
  return absl::OkStatus();
}

void CacheDaemon::ReleaseReservationLocked(uint64_t id, const std::string& reason) {
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return;
  Reservation r = std::move(it->second);
  reservations_.erase(it);
  sessions_.RemoveReservation(id);
  regions_->Free(&r.state.region);
  // Abort fails only for a ticket the core already dropped (a chunk it needed was lost).
  core_->AbortCapture(r.ticket, reason).IgnoreError();
}

absl::Status CacheDaemon::CommitCapture(const v1::CommitCaptureRequest& req,
                                        v1::CommitCaptureResponse* resp) {
  Lock lock(this);
  RETURN_IF_ERROR(sessions_.CheckOpen(req.session_id()));
  auto it = reservations_.find(req.reservation_id());
  if (it == reservations_.end() ||
      !sessions_.HoldsReservation(req.session_id(), req.reservation_id())) {
    return absl::NotFoundError(
        absl::StrCat("capture reservation ", req.reservation_id(), " is not held"));
  }
  Reservation r = std::move(it->second);
  reservations_.erase(it);
  sessions_.RemoveReservation(req.reservation_id());
  // Checksums are computed here over the arena bytes rather than trusted from the client: the
  // copy the cache will serve is what gets verified on every later restore (SM9).
  StateBytes& sb = r.state;
  absl::Status s = absl::OkStatus();
  if (sb.region.bytes > 0) {
    absl::StatusOr<absl::Span<uint8_t>> bytes = arena_->Resolve(sb.region.handle());
    s = bytes.status();
    if (s.ok()) {
      sb.private_checksum = Xxh3(bytes->data(), sb.private_bytes);
      sb.tail_checksum = Xxh3(bytes->data() + sb.private_bytes, sb.tail_bytes);
      sb.region.checksum = Xxh3(bytes->data(), bytes->size());
      if (req.private_checksum() != 0 && req.private_checksum() != sb.private_checksum) {
        s = absl::DataLossError("private state checksum mismatch between client and arena");
      } else if (sb.tail_bytes > 0 && req.tail_checksum() != 0 &&
                 req.tail_checksum() != sb.tail_checksum) {
        s = absl::DataLossError("tail checksum mismatch between client and arena");
      }
    }
  }
  if (!s.ok()) {
    regions_->Free(&r.state.region);
    // Abort fails only for a ticket the core already dropped.
    core_->AbortCapture(r.ticket, std::string(s.message())).IgnoreError();
    return s;
  }
  absl::StatusOr<CheckpointId> committed = core_->CommitCapture(r.ticket);
  if (!committed.ok()) {
    // The core rolled the capture back already (a chunk it referenced was lost).
    regions_->Free(&r.state.region);
    AfterCoreLocked();
    return absl::AbortedError(absl::StrCat("capture ", req.reservation_id(),
                                           " was dropped: ", committed.status().message()));
  }
  const CheckpointId id = *committed;
  resp->set_checkpoint_id(id);
  regions_->AdoptCheckpoint(id, r.state);
  const uint64_t queued_before = persists_queued_;
  MaybePersistLocked(id);
  resp->set_queued_for_disk(persists_queued_ != queued_before || deferred_persists_.contains(id));
  AfterCoreLocked();
  return absl::OkStatus();
}

absl::Status CacheDaemon::AbortCapture(const v1::AbortCaptureRequest& req,
                                       v1::AbortCaptureResponse* /*resp*/) {
  RETURN_IF_ERROR(CheckLength("reason", req.reason(), WireLimits::kMaxTextBytes));
  Lock lock(this);
  RETURN_IF_ERROR(sessions_.CheckOpen(req.session_id()));
  auto it = reservations_.find(req.reservation_id());
  if (it == reservations_.end() ||
      !sessions_.HoldsReservation(req.session_id(), req.reservation_id())) {
    return absl::NotFoundError(
        absl::StrCat("capture reservation ", req.reservation_id(), " is not held"));
  }
  ReleaseReservationLocked(req.reservation_id(),
                           req.reason().empty() ? "aborted by client" : req.reason());
  return absl::OkStatus();
}

absl::Status CacheDaemon::UpdateFrontierOnce(const v1::UpdateFrontierRequest& req,
                                             v1::UpdateFrontierResponse* resp) {
  ASSIGN_OR_RETURN(std::vector<TokenId> tokens,
                   TokensFromProto("append_tokens", req.append_tokens()));
  Lock lock(this);
  ASSIGN_OR_RETURN(int32_t slot, sessions_.Slot(req.session_id(), req.slot()));
  RETURN_IF_ERROR(FindModelLocked(req.model_id()).status());
  const SlotKey key{req.session_id(), slot};
  RETURN_IF_ERROR(CheckSlotModelLocked(key, req.model_id()));
  ASSIGN_OR_RETURN(std::vector<TokenId> frontier, core_->SlotTokens(key));
  if (frontier.size() != req.expected_depth()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "slot ", slot, "'s frontier is at ", frontier.size(), ", not ", req.expected_depth()));
  }
  if (static_cast<int64_t>(frontier.size() + tokens.size()) > WireLimits::kMaxTokens) {
    return absl::InvalidArgumentError(absl::StrCat("append_tokens would bring slot ", slot,
                                                   " past ", WireLimits::kMaxTokens, " tokens"));
  }
  RETURN_IF_ERROR(core_->ExtendSlot(key, tokens));
  resp->set_depth(frontier.size() + tokens.size());
  return absl::OkStatus();
}

}  // namespace cairn::cache
