// GrpcStateCache's restores (docs/cache-protocol.md §5): StartRestore leases a checkpoint for a
// slot and preserves the slot's own borrowed rows; PollRestore, once a scheduler iteration, reads
// the lease's answer when it was not ready, does the spills of this daemon's slots it waits for,
// and copies the lease's rows and private state into the slot once it is; AbandonRestore gives
// the lease back when the request ends first. Restore strings them together for one caller. The
// session is in grpc_state_cache.cc, the other calls in grpc_state_cache_calls.cc.

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checksum/checksum.h"
#include "common/grpc/client.h"
#include "common/log/log.h"
#include "common/status/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "services/infer/cache_client/grpc_state_cache.h"

namespace cairn::infer {
namespace {

namespace v1 = ::cairn::cache::v1;

}  // namespace

absl::Status GrpcStateCache::StartRestore(uint64_t checkpoint_id, int slot,
                                          const std::string& conversation, KvMemory* memory) {
  if (restores_.contains(slot)) {
    return absl::FailedPreconditionError(absl::StrCat("slot ", slot, " is already restoring"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Current());
  RestoreInFlight& restore = restores_[slot];
  restore.session = s;
  restore.generation = generation_.load();
  restore.started = absl::Now();
  restore.give_up = restore.started + options_.lease_wait;
  {
    // From here the lease's answer is kept: it may arrive before the AcquireRestore answer.
    MutexLock lock(&mu_);
    ++restores_running_;
  }
  v1::AcquireRestoreRequest req;
  req.set_session_id(s->session_id);
  req.set_model_id(s->model_id);
  req.set_checkpoint_id(checkpoint_id);
  req.set_slot(static_cast<uint32_t>(slot));
  req.set_conversation(conversation);
  req.set_client_request_id(next_request_id_.fetch_add(1));
  req.set_lease_ms(options_.lease_ms);
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
  grpc::Status st = s->stub->AcquireRestore(ctx.get(), req, &restore.lease);
  if (!st.ok()) {
    EndRestore(slot);
    absl::Status lost = Lost(st, "acquire restore");
    // Where the call may have reached the cache (a timeout, a broken transport), a lease it
    // granted counts the slot as being overwritten and may ask for its rows later; the caller
    // then prefills the slot without the cache. A refusal (NotFound: the checkpoint went) is
    // the cache's answer, and the caller starts the slot cold with it.
    return absl::IsUnavailable(lost) ? EndSession(s, lost) : lost;
  }
  // The slot's own borrowed rows first: the restore overwrites them.
  absl::Status spilled = DoSpills(
      {restore.lease.preserve_spills().begin(), restore.lease.preserve_spills().end()}, memory);
  if (!spilled.ok()) return EndSession(s, FailRestore(slot, memory, spilled));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<RestoreStats>> GrpcStateCache::PollRestore(
    int slot, KvMemory* memory, const RestoreLimits& limits) {
  auto found = restores_.find(slot);
  if (found == restores_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("no restore runs in slot ", slot));
  }
  RestoreInFlight& restore = found->second;
  // FailRestore forgets `restore`; the session outlives it here.
  const std::shared_ptr<Session> session = restore.session;
  if (restore.lease.ready()) {
    // Answered ready at once: copied only while its session lasts (a session that ended took
    // its leases and the regions they named with it).
    if (SessionLost(restore)) {
      return EndSession(
          session, FailRestore(slot, memory,
                               absl::UnavailableError(
                                   "the cache session was lost before the restore was copied")));
    }
    return CopyRestore(slot, memory);
  }

  const uint64_t lease_id = restore.lease.lease_id();
  bool lost = false;
  std::optional<v1::LeaseReady> answer;
  std::vector<v1::SpillRequest> awaited;
  {
    MutexLock lock(&mu_);
    lost = SessionLost(restore);
    if (auto it = lease_ready_.find(lease_id); !lost && it != lease_ready_.end()) {
      answer = std::move(it->second);
      lease_ready_.erase(it);
    }
    // Answers for leases no restore holds (released, crossing their ReleaseLease) are never
    // read. The scheduler thread starts every restore, so here each running one knows its
    // lease id; without this they would stay for as long as any restore runs.
    absl::erase_if(lease_ready_, [this](const auto& entry) {
      return !std::any_of(restores_.begin(), restores_.end(), [&entry](const auto& r) {
        return r.second.lease.lease_id() == entry.first;
      });
    });
    // Spills of this daemon's slots the lease waits for. Urgent ones RunBackgroundWork does
    // between steps anyway; one sent as idle and made urgent by the cache since (the client's
    // copy still says idle) would wait there for idle time, which the busy slots may not leave.
    for (auto it = spills_.begin(); !lost && !answer.has_value() && it != spills_.end();) {
      const auto& ids = restore.lease.awaiting_spills();
      if (std::find(ids.begin(), ids.end(), it->spill_id()) != ids.end()) {
        awaited.push_back(std::move(*it));
        it = spills_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const v1::SpillRequest& spill : awaited) DoSpill(session, spill, memory);
  if (lost) {
    return EndSession(
        session,
        FailRestore(slot, memory,
                    absl::UnavailableError("the cache session was lost while the restore waited")));
  }
  if (!answer.has_value()) {
    // Not ready yet: bounded by the request (giving up a lease that is not ready is the
    // protocol's ReleaseLease, which leaves the session as it was), then by lease_wait.
    if (limits.cancelled && limits.cancelled()) {
      return FailRestore(
          slot, memory, absl::CancelledError("the request was cancelled while its restore waited"));
    }
    const absl::Time now = absl::Now();
    if (now >= limits.deadline) {
      return FailRestore(
          slot, memory,
          absl::DeadlineExceededError("the request's deadline passed while its restore waited"));
    }
    if (now >= restore.give_up) {
      return EndSession(
          session,
          FailRestore(slot, memory, absl::UnavailableError("restore lease never became ready")));
    }
    return std::nullopt;
  }
  if (!answer->ok()) {
    // The lease is void on the server: nothing to release.
    absl::Status reset = memory->Reset(slot);
    if (!reset.ok()) CAIRN_LOG(ERROR) << "resetting slot " << slot << ": " << reset;
    EndRestore(slot);
    return absl::NotFoundError(absl::StrCat("restore lease failed: ", answer->failure()));
  }
  // The chunks that were not resident when the lease was answered, now with checksums.
  for (const v1::ChunkRegion& ready : answer->chunks()) {
    for (v1::ChunkRegion& c : *restore.lease.mutable_chunks()) {
      if (c.chunk_id() == ready.chunk_id()) c = ready;
    }
  }
  restore.lease.set_ready(true);
  return CopyRestore(slot, memory);
}

void GrpcStateCache::AbandonRestore(int slot, KvMemory* memory, const absl::Status& why) {
  if (!restores_.contains(slot)) return;
  FailRestore(slot, memory, why).IgnoreError();  // The caller ends the request with its own.
}

absl::StatusOr<RestoreStats> GrpcStateCache::Restore(uint64_t checkpoint_id, int slot,
                                                     const std::string& conversation,
                                                     KvMemory* memory,
                                                     const RestoreLimits& limits) {
  RETURN_IF_ERROR(StartRestore(checkpoint_id, slot, conversation, memory));
  while (true) {
    ASSIGN_OR_RETURN(std::optional<RestoreStats> restored, PollRestore(slot, memory, limits));
    if (restored.has_value()) return *restored;
    RunBackgroundWork(memory, absl::ZeroDuration());
    WaitForRestoreWork(restores_.at(slot).lease.lease_id(), options_.cancel_poll);
  }
}

void GrpcStateCache::WaitForRestoreWork(uint64_t lease_id, absl::Duration timeout) {
  MutexLock lock(&mu_);
  if (lease_ready_.contains(lease_id) || !connected_.load()) return;
  // Any message on the stream signals; a missed one costs one timeout.
  cv_.WaitWithTimeout(&mu_, timeout);
}

bool GrpcStateCache::SessionLost(const RestoreInFlight& restore) const {
  return generation_.load() != restore.generation || !connected_.load();
}

void GrpcStateCache::ReleaseLease(const RestoreInFlight& restore, bool restored,
                                  const std::string& failure) {
  if (SessionLost(restore)) {
    // The cache released the session's leases when it ended (docs/cache-protocol.md, "Session
    // end"); a call over it would only wait, up to the RPC timeout, for a daemon that may be
    // gone.
    CAIRN_LOG(INFO) << "lease " << restore.lease.lease_id() << " ended with its session";
    return;
  }
  v1::ReleaseLeaseRequest rr;
  rr.set_session_id(restore.session->session_id);
  rr.set_lease_id(restore.lease.lease_id());
  rr.set_restored(restored);
  rr.set_failure(failure);
  v1::ReleaseLeaseResponse unused;
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
  grpc::Status st = restore.session->stub->ReleaseLease(ctx.get(), rr, &unused);
  if (!st.ok()) {
    CAIRN_LOG(WARNING) << "releasing lease " << restore.lease.lease_id() << ": "
                       << st.error_message();
  }
}

void GrpcStateCache::EndRestore(int slot) {
  restores_.erase(slot);
  // Answers left when no restore runs are for leases that were read or released.
  MutexLock lock(&mu_);
  if (--restores_running_ == 0) lease_ready_.clear();
}

absl::Status GrpcStateCache::FailRestore(int slot, KvMemory* memory, const absl::Status& why) {
  absl::Status reset = memory->Reset(slot);
  if (!reset.ok()) CAIRN_LOG(ERROR) << "resetting slot " << slot << ": " << reset;
  ReleaseLease(restores_.at(slot), false, std::string(why.message()));
  EndRestore(slot);
  return why;
}

absl::StatusOr<RestoreStats> GrpcStateCache::CopyRestore(int slot, KvMemory* memory) {
  const RestoreInFlight& restore = restores_.at(slot);
  const Session& s = *restore.session;
  const v1::RestoreLease& lease = restore.lease;
  RestoreStats stats;
  const absl::Time t1 = absl::Now();
  stats.wait = t1 - restore.started;

  const StateLayout& layout = memory->layout();
  const int64_t depth = static_cast<int64_t>(lease.depth());
  absl::Status st = memory->BeginRestore(slot, static_cast<int64_t>(lease.kept_rows()));
  if (!st.ok()) return FailRestore(slot, memory, st);
  // Copies one region's rows (every rows component, one after another) into the slot.
  auto copy_rows = [&](const v1::ArenaHandle& handle, uint64_t checksum, int64_t first_row,
                       int64_t rows) -> absl::Status {
    ASSIGN_OR_RETURN(absl::Span<uint8_t> bytes, Resolve(s, handle));
    if (static_cast<int64_t>(bytes.size()) != rows * layout.row_bytes()) {
      return absl::DataLossError("a restored region does not match its rows");
    }
    if (Xxh3(bytes.data(), bytes.size()) != checksum) {
      return absl::DataLossError(
          absl::StrCat("checksum mismatch in rows ", first_row, "..", first_row + rows));
    }
    size_t offset = 0;
    for (size_t c = 0; c < layout.components.size(); ++c) {
      if (layout.components[c].kind != ComponentKind::kRows) continue;
      const size_t n = static_cast<size_t>(rows * layout.components[c].bytes());
      RETURN_IF_ERROR(
          memory->CopyRowsIn(slot, static_cast<int>(c), first_row, bytes.subspan(offset, n)));
      offset += n;
    }
    stats.rows_copied += rows;
    return absl::OkStatus();
  };
  std::vector<const v1::ChunkRegion*> chunks;
  for (const v1::ChunkRegion& c : lease.chunks()) chunks.push_back(&c);
  std::sort(chunks.begin(), chunks.end(), [](const v1::ChunkRegion* a, const v1::ChunkRegion* b) {
    return a->first_row() < b->first_row();
  });
  for (const v1::ChunkRegion* c : chunks) {
    st = copy_rows(c->region(), c->checksum(), static_cast<int64_t>(c->first_row()), c->rows());
    if (!st.ok()) return FailRestore(slot, memory, st);
  }
  if (lease.tail().rows() > 0) {
    st = copy_rows(lease.tail().region(), lease.tail().checksum(),
                   static_cast<int64_t>(lease.tail().first_row()), lease.tail().rows());
    if (!st.ok()) return FailRestore(slot, memory, st);
  }
  absl::StatusOr<absl::Span<uint8_t>> priv = ResolvePrivate(s, lease.private_state().region());
  if (!priv.ok()) return FailRestore(slot, memory, priv.status());
  // An empty private state (rows-only layout) has no bytes to verify; the cache keeps no
  // checksum for a checkpoint whose state region is empty.
  if (!priv->empty() && Xxh3(priv->data(), priv->size()) != lease.private_state().checksum()) {
    return FailRestore(slot, memory, absl::DataLossError("checksum mismatch in the private state"));
  }
  st = memory->LoadPrivateState(slot, depth, *priv);
  if (st.ok()) st = memory->Validate(slot, depth);
  if (!st.ok()) return FailRestore(slot, memory, st);
  ReleaseLease(restore, true, "");
  stats.copy = absl::Now() - t1;
  stats.depth = depth;
  stats.tier = ToStateTier(lease.loaded_from());
  EndRestore(slot);
  return stats;
}

}  // namespace cairn::infer
