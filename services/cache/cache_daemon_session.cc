// CacheDaemon's session calls: open, messages (heartbeats, spill reports, slot activity),
// detach and close, and the periodic expiry tick.

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/log/log.h"
#include "common/status/status_macros.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/proto_convert.h"

namespace cairn::cache {

// ---------------------------------------------------------------------------------------
// Sessions.

absl::StatusOr<v1::Welcome> CacheDaemon::OpenSession(const v1::Hello& hello, SessionSink* sink) {
  if (sink == nullptr) return absl::InvalidArgumentError("session needs a sink");
  if (hello.slots() > WireLimits::kMaxSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello.slots ", hello.slots(), " is more than ", WireLimits::kMaxSlots));
  }
  RETURN_IF_ERROR(
      CheckLength("hello.instance_name", hello.instance_name(), WireLimits::kMaxNameBytes));
  const uint64_t id = next_id_++;
  RETURN_IF_ERROR(sessions_.Open(id, hello.instance_name(), hello.slots(), sink, Now()));
  replies_.OpenSession(id);
  v1::Welcome w;
  w.set_session_id(id);
  w.set_cache_incarnation(incarnation_);
  v1::ArenaInfo* arena = w.mutable_arena();
  arena->set_incarnation(arena_->incarnation());
  arena->set_size_bytes(arena_->size());
  arena->set_fd_socket_path(options_.fd_server.socket_path);
  arena->set_pin_step_bytes(options_.arena.pin_step_bytes);
  arena->set_first_pin_bytes(options_.arena.first_pin_bytes);
  arena->set_alignment(arena_->alignment());
  w.set_heartbeat_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  w.set_session_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.session_timeout)));
  CAIRN_LOG(INFO) << "session " << id << " opened by \"" << hello.instance_name() << "\" pid "
                  << hello.pid();
  return w;
}

absl::Status CacheDaemon::Touch(uint64_t session_id) { return sessions_.Touch(session_id, Now()); }

absl::Status CacheDaemon::OnSessionMessage(uint64_t session_id,
                                           const v1::SessionClientMessage& message) {
  switch (message.body_case()) {
    case v1::SessionClientMessage::kHeartbeat:
      return Touch(session_id);
    case v1::SessionClientMessage::kSpillDone:
      return OnSpillDone(session_id, message.spill_done());
    case v1::SessionClientMessage::kSlotIdle: {
      RETURN_IF_ERROR(Touch(session_id));
      ASSIGN_OR_RETURN(int32_t slot, sessions_.Slot(session_id, message.slot_idle().slot()));
      activity_->Idle(SlotKey{session_id, slot});
      Lock lock(this);
      // Nothing borrowed there (or the session ended meanwhile: its slots are dropped).
      if (!sessions_.UsedSlot(session_id, slot)) return absl::OkStatus();
      core_->SpillIdle(SlotKey{session_id, slot}, options_.idle_spill_chunks);
      AfterCoreLocked();
      return absl::OkStatus();
    }
    case v1::SessionClientMessage::kSlotBusy: {
      RETURN_IF_ERROR(Touch(session_id));
      ASSIGN_OR_RETURN(int32_t slot, sessions_.Slot(session_id, message.slot_busy().slot()));
      activity_->Busy(SlotKey{session_id, slot});
      return absl::OkStatus();
    }
    case v1::SessionClientMessage::kHello:
      return absl::FailedPreconditionError("hello sent twice on one session");
    case v1::SessionClientMessage::BODY_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("empty session message");
}

absl::Status CacheDaemon::OnSpillDone(uint64_t session_id, const v1::SpillDone& done) {
  Lock lock(this);
  RETURN_IF_ERROR(Touch(session_id));
  absl::StatusOr<SpillInfo> spill = core_->GetSpill(done.spill_id());
  if (!spill.ok() || spill->slot.daemon_session != session_id) {
    // Also a duplicate of a SpillDone already handled: nothing left to do.
    return absl::NotFoundError(
        absl::StrCat("spill ", done.spill_id(), " is not outstanding for session ", session_id));
  }
  std::vector<ChunkId> all;
  for (const ChunkCopy& c : spill->chunks) all.push_back(c.id);
  auto in_spill = [&all](ChunkId c) { return std::find(all.begin(), all.end(), c) != all.end(); };
  absl::Status malformed = absl::OkStatus();
  if (done.checksums_size() != 0 && done.checksums_size() != done.chunk_ids_size()) {
    malformed = absl::InvalidArgumentError(absl::StrCat("spill ", done.spill_id(), ": ",
                                                        done.checksums_size(), " checksums for ",
                                                        done.chunk_ids_size(), " chunks"));
  }
  for (uint64_t c : done.chunk_ids()) {
    if (malformed.ok() && !in_spill(c)) {
      malformed = absl::InvalidArgumentError(
          absl::StrCat("chunk ", c, " is not in spill ", done.spill_id()));
    }
  }
  if (!malformed.ok()) {
    // A broken report cannot be trusted for any chunk: the spill fails as a whole.
    RETURN_IF_ERROR(core_->FinishSpill(done.spill_id(), {}, all,
                                       absl::StrCat("bad spill report: ", malformed.message())));
    AfterCoreLocked();
    return malformed;
  }
  std::vector<ChunkId> copied;
  std::vector<ChunkId> failed;
  int mismatches = 0;
  for (int i = 0; i < done.chunk_ids_size(); ++i) {
    const ChunkId c = done.chunk_ids(i);
    HeldRegion* held = regions_->FindChunk(c);
    absl::StatusOr<absl::Span<uint8_t>> bytes =
        held == nullptr ? absl::NotFoundError("no region") : regions_->Resolve(*held);
    if (!bytes.ok()) {
      failed.push_back(c);
      continue;
    }
    const uint64_t sum = Xxh3(bytes->data(), bytes->size());
    if (done.checksums_size() != 0 && done.checksums(i) != sum) {
      CAIRN_LOG(ERROR) << "spilled chunk " << c << " checksum mismatch";
      ++mismatches;
      failed.push_back(c);
      continue;
    }
    held->checksum = sum;
    copied.push_back(c);
  }
  for (uint64_t c : done.failed_chunk_ids()) {
    if (in_spill(c)) failed.push_back(c);
  }
  const std::string reason =
      mismatches > 0 ? "data loss: spill checksum mismatch" : "borrowed rows lost before the spill";
  RETURN_IF_ERROR(core_->FinishSpill(done.spill_id(), copied, failed, reason));
  AfterCoreLocked();
  if (mismatches > 0) {
    return absl::DataLossError(absl::StrCat(mismatches, " chunks of spill ", done.spill_id(),
                                            " do not match their checksums"));
  }
  return absl::OkStatus();
}

void CacheDaemon::DetachSession(uint64_t session_id) { sessions_.Detach(session_id); }

void CacheDaemon::BeginDrain() { sessions_.BeginDrain(); }

void CacheDaemon::CloseSession(uint64_t session_id, const std::string& reason) {
  Lock lock(this);
  CloseSessionLocked(session_id, reason);
}

void CacheDaemon::CloseSessionLocked(uint64_t session_id, const std::string& reason) {
  std::optional<SessionTable::Closed> closed = sessions_.Close(session_id);
  if (!closed.has_value()) return;
  CAIRN_LOG(INFO) << "session " << session_id << " (" << closed->name << ") closed: " << reason;
  for (uint64_t id : closed->leases) ReleaseLeaseLocked(id);
  for (uint64_t id : closed->reservations) {
    ReleaseReservationLocked(id, "session ended: " + reason);
  }
  // Every spill the session owes fails; then (SM13) checkpoints still borrowing rows from the
  // dead daemon's slots are dropped (the core logs them). Everything in the arena stays.
  core_->FailSpillsOf(session_id, "session ended: " + reason);
  for (int32_t slot : closed->slots) {
    core_->DropSlot(SlotKey{session_id, slot});
    slot_models_.erase(SlotKey{session_id, slot});
  }
  activity_->SessionGone(session_id);
  replies_.CloseSession(session_id);
  AfterCoreLocked();
}

void CacheDaemon::Tick() {
  flushes_->ExpireDue();  // Its own lock, never under mu_.
  {
    Lock lock(this);
    const absl::Duration now = Now();
    std::vector<uint64_t> expired_leases;
    for (const auto& [id, lease] : leases_) {
      if (lease.ready && lease.expires <= now) expired_leases.push_back(id);
    }
    for (uint64_t id : expired_leases) {
      CAIRN_LOG(WARNING) << "restore lease " << id << " expired";
      ReleaseLeaseLocked(id);
    }
    std::vector<uint64_t> expired_reservations;
    for (const auto& [id, r] : reservations_) {
      if (r.expires <= now) expired_reservations.push_back(id);
    }
    for (uint64_t id : expired_reservations) ReleaseReservationLocked(id, "reservation expired");
    for (uint64_t id : sessions_.Silent(now, options_.session_timeout)) {
      CloseSessionLocked(id, "no heartbeat within the session timeout");
    }
  }
}

}  // namespace cairn::cache
