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

absl::StatusOr<SessionWelcome> CacheDaemon::OpenSession(const SessionHello& hello,
                                                        SessionSink* sink) {
  if (sink == nullptr) return absl::InvalidArgumentError("session needs a sink");
  const uint64_t id = next_id_++;
  RETURN_IF_ERROR(sessions_.Open(id, hello.instance_name, hello.slots, sink, Now()));
  replies_.OpenSession(id);
  SessionWelcome w;
  w.session_id = id;
  w.cache_incarnation = incarnation_;
  w.arena_incarnation = arena_->incarnation();
  w.arena_bytes = arena_->size();
  w.fd_socket_path = options_.fd_server.socket_path;
  w.pin_step_bytes = options_.arena.pin_step_bytes;
  w.first_pin_bytes = options_.arena.first_pin_bytes;
  w.alignment = arena_->alignment();
  w.heartbeat_interval = options_.heartbeat_interval;
  w.session_timeout = options_.session_timeout;
  CAIRN_LOG(INFO) << "session " << id << " opened by \"" << hello.instance_name << "\" pid "
                  << hello.pid;
  return w;
}

absl::Status CacheDaemon::Touch(uint64_t session_id) { return sessions_.Touch(session_id, Now()); }

absl::Status CacheDaemon::SlotIdle(uint64_t session_id, uint32_t slot_index) {
  RETURN_IF_ERROR(Touch(session_id));
  ASSIGN_OR_RETURN(int32_t slot, sessions_.Slot(session_id, slot_index));
  activity_->Idle(SlotKey{session_id, slot});
  CoreLock lock(this);
  // Nothing borrowed there (or the session ended meanwhile: its slots are dropped).
  if (!sessions_.UsedSlot(session_id, slot)) return absl::OkStatus();
  core_->SpillIdle(SlotKey{session_id, slot}, options_.idle_spill_chunks);
  return absl::OkStatus();
}

absl::Status CacheDaemon::SlotBusy(uint64_t session_id, uint32_t slot_index) {
  RETURN_IF_ERROR(Touch(session_id));
  ASSIGN_OR_RETURN(int32_t slot, sessions_.Slot(session_id, slot_index));
  activity_->Busy(SlotKey{session_id, slot});
  // Tick may have closed the session since the check above (it is not ordered with this
  // session's messages): its busy slots were cleared, maybe before this mark, which nothing
  // would clear again and the disk writer would yield to for good. The session leaves the
  // table before its slots are cleared, so a mark that came too late sees it gone here.
  if (!sessions_.Slot(session_id, slot_index).ok()) activity_->Idle(SlotKey{session_id, slot});
  return absl::OkStatus();
}

absl::Status CacheDaemon::SpillDone(uint64_t session_id, const SpillReport& done) {
  RETURN_IF_ERROR(Touch(session_id));
  CoreLock lock(this);
  absl::StatusOr<SpillInfo> spill = core_->GetSpill(done.spill_id);
  if (!spill.ok() || spill->slot.daemon_session != session_id) {
    // Also a duplicate of a SpillDone already handled: nothing left to do.
    return absl::NotFoundError(
        absl::StrCat("spill ", done.spill_id, " is not outstanding for session ", session_id));
  }
  std::vector<ChunkId> all;
  for (const ChunkCopy& c : spill->chunks) all.push_back(c.id);
  auto in_spill = [&all](ChunkId c) { return std::find(all.begin(), all.end(), c) != all.end(); };
  absl::Status malformed = absl::OkStatus();
  if (done.checksums.size() != 0 && done.checksums.size() != done.chunk_ids.size()) {
    malformed = absl::InvalidArgumentError(absl::StrCat("spill ", done.spill_id, ": ",
                                                        done.checksums.size(), " checksums for ",
                                                        done.chunk_ids.size(), " chunks"));
  }
  for (ChunkId c : done.chunk_ids) {
    if (malformed.ok() && !in_spill(c)) {
      malformed =
          absl::InvalidArgumentError(absl::StrCat("chunk ", c, " is not in spill ", done.spill_id));
    }
  }
  if (!malformed.ok()) {
    // A broken report cannot be trusted for any chunk: the spill fails as a whole.
    RETURN_IF_ERROR(core_->FinishSpill(done.spill_id, {}, all,
                                       absl::StrCat("bad spill report: ", malformed.message())));
    return malformed;
  }
  std::vector<ChunkId> copied;
  std::vector<ChunkId> failed;
  int mismatches = 0;
  for (size_t i = 0; i < done.chunk_ids.size(); ++i) {
    const ChunkId c = done.chunk_ids[i];
    HeldRegion* held = regions_->FindChunk(c);
    absl::StatusOr<absl::Span<uint8_t>> bytes =
        held == nullptr ? absl::NotFoundError("no region") : regions_->Resolve(*held);
    if (!bytes.ok()) {
      failed.push_back(c);
      continue;
    }
    const uint64_t sum = Xxh3(bytes->data(), bytes->size());
    if (done.checksums.size() != 0 && done.checksums[i] != sum) {
      CAIRN_LOG(ERROR) << "spilled chunk " << c << " checksum mismatch";
      ++mismatches;
      failed.push_back(c);
      continue;
    }
    held->checksum = sum;
    copied.push_back(c);
  }
  for (ChunkId c : done.failed_chunk_ids) {
    if (in_spill(c)) failed.push_back(c);
  }
  const std::string reason =
      mismatches > 0 ? "data loss: spill checksum mismatch" : "borrowed rows lost before the spill";
  RETURN_IF_ERROR(core_->FinishSpill(done.spill_id, copied, failed, reason));
  if (mismatches > 0) {
    return absl::DataLossError(absl::StrCat(mismatches, " chunks of spill ", done.spill_id,
                                            " do not match their checksums"));
  }
  return absl::OkStatus();
}

void CacheDaemon::DetachSession(uint64_t session_id) { sessions_.Detach(session_id); }

void CacheDaemon::BeginDrain() { sessions_.BeginDrain(); }

void CacheDaemon::CloseSession(uint64_t session_id, const std::string& reason) {
  CoreLock lock(this);
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
}

void CacheDaemon::Tick() {
  flushes_->ExpireDue();  // Its own lock, never under mu_.
  {
    CoreLock lock(this);
    const absl::Duration now = Now();
    for (uint64_t id : leases_.Expired(now)) {
      CAIRN_LOG(WARNING) << "restore lease " << id << " expired";
      ReleaseLeaseLocked(id);
    }
    // The spills a waiting lease needs may never come (a client that stopped answering spill
    // requests but still heartbeats): its pin must not last forever.
    for (uint64_t id : leases_.Overdue(now)) {
      AnswerLeaseLocked(
          id, false,
          absl::StrCat("not ready within ", absl::FormatDuration(options_.max_lease_wait)));
    }
    for (uint64_t id : reservations_.Expired(now)) {
      ReleaseReservationLocked(id, "reservation expired");
    }
    for (uint64_t id : sessions_.Silent(now, options_.session_timeout)) {
      CloseSessionLocked(id, "no heartbeat within the session timeout");
    }
  }
}

}  // namespace cairn::cache
