// GrpcStateCache's StateCache calls, each a unary RPC with a deadline: Lookup (the plan),
// StartSlot, Restore (a lease's rows and private state copied into a slot), UpdateFrontier,
// Capture (a slot's private state and tail copied into a reservation), and the SlotIdle /
// SlotBusy notes on the session stream. The session is in grpc_state_cache.cc, the spills in
// grpc_state_cache_spills.cc.

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
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

StateTier TierOf(v1::Tier t) {
  switch (t) {
    case v1::TIER_LIVE:
      return StateTier::kLive;
    case v1::TIER_RAM:
      return StateTier::kRam;
    case v1::TIER_DISK:
      return StateTier::kDisk;
    default:
      return StateTier::kCold;
  }
}

CapturePointKind KindOf(v1::CaptureKind k) {
  switch (k) {
    case v1::CAPTURE_KIND_REUSED:
      return CapturePointKind::kReused;
    case v1::CAPTURE_KIND_STABLE:
      return CapturePointKind::kStable;
    case v1::CAPTURE_KIND_GRID:
      return CapturePointKind::kGrid;
    case v1::CAPTURE_KIND_LEARNED:
      return CapturePointKind::kLearned;
    default:
      return CapturePointKind::kEnd;
  }
}

v1::CaptureKind ToProto(CapturePointKind k) {
  switch (k) {
    case CapturePointKind::kEnd:
      return v1::CAPTURE_KIND_END;
    case CapturePointKind::kReused:
      return v1::CAPTURE_KIND_REUSED;
    case CapturePointKind::kStable:
      return v1::CAPTURE_KIND_STABLE;
    case CapturePointKind::kGrid:
      return v1::CAPTURE_KIND_GRID;
    case CapturePointKind::kLearned:
      return v1::CAPTURE_KIND_LEARNED;
  }
  return v1::CAPTURE_KIND_END;
}

}  // namespace

absl::StatusOr<StatePlan> GrpcStateCache::Lookup(absl::Span<const int32_t> prompt,
                                                 int64_t stable_boundary, int64_t shared_boundary,
                                                 const std::string& conversation) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Current());
  v1::LookupRequest req;
  req.set_session_id(s->session_id);
  req.set_model_id(s->model_id);
  for (int32_t id : prompt) req.add_tokens(static_cast<uint32_t>(id));
  req.set_stable_boundary(static_cast<uint64_t>(stable_boundary));
  req.set_shared_boundary(static_cast<uint64_t>(shared_boundary));
  req.set_conversation(conversation);
  req.set_max_pass_tokens(static_cast<uint64_t>(std::max<int64_t>(options_.max_pass_tokens, 0)));
  v1::LookupResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
  grpc::Status st = s->stub->Lookup(ctx.get(), req, &resp);
  if (!st.ok()) return Lost(st, "lookup");
  StatePlan plan;
  auto add = [&](const v1::Candidate& c) {
    StateCandidate out;
    out.tier = TierOf(c.tier());
    out.depth = static_cast<int64_t>(c.depth());
    out.checkpoint_id = c.checkpoint_id();
    if (out.tier == StateTier::kCold) return;
    if (out.tier == StateTier::kLive) {
      // Another daemon's slot is of no use here.
      if (c.session_id() != s->session_id || c.slot() >= static_cast<uint32_t>(options_.slots)) {
        return;
      }
      out.live_slot = static_cast<int>(c.slot());
    }
    plan.candidates.push_back(out);
  };
  if (resp.has_best()) add(resp.best());
  for (const v1::Candidate& c : resp.others()) add(c);
  std::stable_sort(
      plan.candidates.begin(), plan.candidates.end(),
      [](const StateCandidate& a, const StateCandidate& b) { return a.depth > b.depth; });
  plan.shared_prefix = static_cast<int64_t>(resp.shared_prefix());
  for (const v1::CapturePoint& c : resp.plan().captures()) {
    plan.captures.push_back({static_cast<int64_t>(c.position()), KindOf(c.kind())});
  }
  for (uint64_t e : resp.plan().pass_ends()) plan.pass_ends.push_back(static_cast<int64_t>(e));
  plan.miss_reason = resp.miss_reason();
  for (const v1::SlotSpillCost& c : resp.slot_spills()) {
    if (c.slot() >= static_cast<uint32_t>(options_.slots)) continue;  // Not one of ours.
    if (plan.slot_spill_bytes.size() <= c.slot()) plan.slot_spill_bytes.resize(c.slot() + 1, 0);
    plan.slot_spill_bytes[c.slot()] = static_cast<int64_t>(
        std::min<uint64_t>(c.bytes(), static_cast<uint64_t>(std::numeric_limits<int64_t>::max())));
  }
  return plan;
}

absl::Status GrpcStateCache::StartSlot(int slot, bool cold, const std::string& conversation,
                                       KvMemory* memory) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Current());
  v1::StartSlotRequest req;
  req.set_session_id(s->session_id);
  req.set_model_id(s->model_id);
  req.set_slot(static_cast<uint32_t>(slot));
  req.set_mode(cold ? v1::StartSlotRequest::MODE_COLD : v1::StartSlotRequest::MODE_CONTINUE);
  req.set_conversation(conversation);
  req.set_client_request_id(next_request_id_.fetch_add(1));
  v1::StartSlotResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
  grpc::Status st = s->stub->StartSlot(ctx.get(), req, &resp);
  // The caller overwrites the slot whether or not this succeeds (it goes on without the cache):
  // unless the cache agreed and the slot's borrowed rows are preserved, the cache must forget
  // them.
  if (!st.ok()) return EndSession(s, Lost(st, "start slot"));
  absl::Status spilled =
      DoSpills({resp.preserve_spills().begin(), resp.preserve_spills().end()}, memory);
  if (!spilled.ok()) return EndSession(s, spilled);
  return absl::OkStatus();
}

absl::StatusOr<RestoreStats> GrpcStateCache::Restore(uint64_t checkpoint_id, int slot,
                                                     const std::string& conversation,
                                                     KvMemory* memory,
                                                     const RestoreLimits& limits) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Current());
  const uint64_t generation = generation_.load();
  {
    MutexLock lock(&mu_);
    ++restores_running_;
  }
  // Answers left when no restore runs are for leases that were read or released.
  absl::Cleanup restore_ended = [this] {
    MutexLock lock(&mu_);
    if (--restores_running_ == 0) lease_ready_.clear();
  };
  RestoreStats stats;
  const absl::Time t0 = absl::Now();
  v1::AcquireRestoreRequest req;
  req.set_session_id(s->session_id);
  req.set_model_id(s->model_id);
  req.set_checkpoint_id(checkpoint_id);
  req.set_slot(static_cast<uint32_t>(slot));
  req.set_conversation(conversation);
  req.set_client_request_id(next_request_id_.fetch_add(1));
  req.set_lease_ms(options_.lease_ms);
  v1::RestoreLease lease;
  {
    std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
    grpc::Status st = s->stub->AcquireRestore(ctx.get(), req, &lease);
    if (!st.ok()) {
      absl::Status lost = Lost(st, "acquire restore");
      // Where the call may have reached the cache (a timeout, a broken transport), a lease it
      // granted counts the slot as being overwritten and may ask for its rows later; the caller
      // then prefills the slot without the cache. A refusal (NotFound: the checkpoint went) is
      // the cache's answer, and the caller starts the slot cold with it.
      return absl::IsUnavailable(lost) ? EndSession(s, lost) : lost;
    }
  }
  auto release = [&](bool restored, const std::string& failure) {
    v1::ReleaseLeaseRequest rr;
    rr.set_session_id(s->session_id);
    rr.set_lease_id(lease.lease_id());
    rr.set_restored(restored);
    rr.set_failure(failure);
    v1::ReleaseLeaseResponse unused;
    std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
    grpc::Status st = s->stub->ReleaseLease(ctx.get(), rr, &unused);
    if (!st.ok()) {
      CAIRN_LOG(WARNING) << "releasing lease " << lease.lease_id() << ": " << st.error_message();
    }
  };
  auto fail = [&](const absl::Status& why) -> absl::Status {
    absl::Status reset = memory->Reset(slot);
    if (!reset.ok()) CAIRN_LOG(ERROR) << "resetting slot " << slot << ": " << reset;
    release(false, std::string(why.message()));
    return why;
  };

  // The slot's own borrowed rows first: the restore overwrites them.
  absl::Status spilled =
      DoSpills({lease.preserve_spills().begin(), lease.preserve_spills().end()}, memory);
  if (!spilled.ok()) return EndSession(s, fail(spilled));
  if (!lease.ready()) {
    // Rows still borrowed in other slots are being spilled; ours among them are done here.
    // Also bounded by the request: giving up a lease that is not ready is the protocol's
    // ReleaseLease (the server forgets the restore), which leaves the session as it was.
    const absl::Time deadline = std::min(absl::Now() + options_.lease_wait, limits.deadline);
    absl::Status given_up;
    while (true) {
      std::optional<v1::SpillRequest> work;
      std::optional<v1::LeaseReady> answer;
      {
        MutexLock lock(&mu_);
        while (true) {
          if (generation_.load() != generation || !connected_.load()) break;
          if (auto it = lease_ready_.find(lease.lease_id()); it != lease_ready_.end()) {
            answer = it->second;
            lease_ready_.erase(it);
            break;
          }
          if (!spills_.empty()) {
            work = std::move(spills_.front());
            spills_.pop_front();
            break;
          }
          if (limits.cancelled && limits.cancelled()) {
            given_up = absl::CancelledError("the request was cancelled while its restore waited");
            break;
          }
          const absl::Time now = absl::Now();
          if (now >= deadline) {
            if (deadline == limits.deadline) {
              given_up = absl::DeadlineExceededError(
                  "the request's deadline passed while its restore waited");
            }
            break;
          }
          cv_.WaitWithTimeout(&mu_, limits.cancelled
                                        ? std::min(deadline - now, options_.cancel_poll)
                                        : deadline - now);
        }
      }
      if (work.has_value()) {
        DoSpill(s, *work, memory);
        continue;
      }
      if (!given_up.ok()) return fail(given_up);
      if (!answer.has_value()) {
        return EndSession(s, fail(absl::UnavailableError("restore lease never became ready")));
      }
      if (!answer->ok()) {
        // The lease is void on the server: nothing to release.
        absl::Status reset = memory->Reset(slot);
        if (!reset.ok()) CAIRN_LOG(ERROR) << "resetting slot " << slot << ": " << reset;
        return absl::NotFoundError(absl::StrCat("restore lease failed: ", answer->failure()));
      }
      // The chunks that were not resident when the lease was answered, now with checksums.
      for (const v1::ChunkRegion& ready : answer->chunks()) {
        for (v1::ChunkRegion& c : *lease.mutable_chunks()) {
          if (c.chunk_id() == ready.chunk_id()) c = ready;
        }
      }
      break;
    }
  }
  stats.wait = absl::Now() - t0;
  const absl::Time t1 = absl::Now();

  const StateLayout& layout = memory->layout();
  const int64_t depth = static_cast<int64_t>(lease.depth());
  absl::Status st = memory->BeginRestore(slot, static_cast<int64_t>(lease.kept_rows()));
  if (!st.ok()) return fail(st);
  // Copies one region's rows (every rows component, one after another) into the slot.
  auto copy_rows = [&](const v1::ArenaHandle& handle, uint64_t checksum, int64_t first_row,
                       int64_t rows) -> absl::Status {
    ASSIGN_OR_RETURN(absl::Span<uint8_t> bytes, Resolve(*s, handle));
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
    if (!st.ok()) return fail(st);
  }
  if (lease.tail().rows() > 0) {
    st = copy_rows(lease.tail().region(), lease.tail().checksum(),
                   static_cast<int64_t>(lease.tail().first_row()), lease.tail().rows());
    if (!st.ok()) return fail(st);
  }
  absl::StatusOr<absl::Span<uint8_t>> priv = ResolvePrivate(*s, lease.private_state().region());
  if (!priv.ok()) return fail(priv.status());
  // An empty private state (rows-only layout) has no bytes to verify; the cache keeps no
  // checksum for a checkpoint whose state region is empty.
  if (!priv->empty() && Xxh3(priv->data(), priv->size()) != lease.private_state().checksum()) {
    return fail(absl::DataLossError("checksum mismatch in the private state"));
  }
  st = memory->LoadPrivateState(slot, depth, *priv);
  if (st.ok()) st = memory->Validate(slot, depth);
  if (!st.ok()) return fail(st);
  release(true, "");
  stats.copy = absl::Now() - t1;
  stats.depth = depth;
  stats.tier = TierOf(lease.loaded_from());
  return stats;
}

absl::Status GrpcStateCache::UpdateFrontier(int slot, absl::Span<const int32_t> appended,
                                            int64_t expected_depth) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Current());
  v1::UpdateFrontierRequest req;
  req.set_session_id(s->session_id);
  req.set_model_id(s->model_id);
  req.set_slot(static_cast<uint32_t>(slot));
  for (int32_t id : appended) req.add_append_tokens(static_cast<uint32_t>(id));
  req.set_expected_depth(static_cast<uint64_t>(expected_depth));
  req.set_client_request_id(next_request_id_.fetch_add(1));
  v1::UpdateFrontierResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
  grpc::Status st = s->stub->UpdateFrontier(ctx.get(), req, &resp);
  if (!st.ok()) return Lost(st, "frontier update");
  return absl::OkStatus();
}

absl::Status GrpcStateCache::Capture(int slot, int64_t depth, CapturePointKind kind,
                                     const std::string& conversation, int64_t stable_boundary,
                                     KvMemory* memory) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Current());
  v1::ReserveCaptureRequest req;
  req.set_session_id(s->session_id);
  req.set_model_id(s->model_id);
  req.set_slot(static_cast<uint32_t>(slot));
  req.set_depth(static_cast<uint64_t>(depth));
  req.set_kind(ToProto(kind));
  req.set_conversation(conversation);
  req.set_stable_boundary(static_cast<uint64_t>(stable_boundary));
  req.set_client_request_id(next_request_id_.fetch_add(1));
  v1::CaptureReservation res;
  {
    std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
    grpc::Status st = s->stub->ReserveCapture(ctx.get(), req, &res);
    if (!st.ok()) return Lost(st, "reserve capture");
  }
  auto copy = [&]() -> absl::StatusOr<std::pair<uint64_t, uint64_t>> {
    ASSIGN_OR_RETURN(absl::Span<uint8_t> priv, ResolvePrivate(*s, res.private_state().region()));
    ASSIGN_OR_RETURN(int64_t position, memory->CapturePrivateState(slot, priv));
    if (position != depth) {
      return absl::FailedPreconditionError(
          absl::StrCat("slot ", slot, " is at ", position, ", not at the capture's ", depth));
    }
    uint64_t tail_sum = 0;
    if (res.tail().rows() > 0) {
      ASSIGN_OR_RETURN(absl::Span<uint8_t> tail, Resolve(*s, res.tail().region()));
      const int64_t rows = res.tail().rows();
      if (static_cast<int64_t>(tail.size()) != rows * memory->layout().row_bytes()) {
        return absl::InvalidArgumentError("tail region does not match its rows");
      }
      size_t offset = 0;
      const StateLayout& layout = memory->layout();
      for (size_t c = 0; c < layout.components.size(); ++c) {
        if (layout.components[c].kind != ComponentKind::kRows) continue;
        const size_t n = static_cast<size_t>(rows * layout.components[c].bytes());
        RETURN_IF_ERROR(memory->CopyRowsOut(slot, static_cast<int>(c),
                                            static_cast<int64_t>(res.tail().first_row()), rows,
                                            tail.subspan(offset, n)));
        offset += n;
      }
      tail_sum = Xxh3(tail.data(), tail.size());
    }
    return std::make_pair(Xxh3(priv.data(), priv.size()), tail_sum);
  };
  absl::StatusOr<std::pair<uint64_t, uint64_t>> sums = copy();
  if (!sums.ok()) {
    v1::AbortCaptureRequest ar;
    ar.set_session_id(s->session_id);
    ar.set_reservation_id(res.reservation_id());
    ar.set_reason(std::string(sums.status().message()));
    v1::AbortCaptureResponse unused;
    std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
    grpc::Status st = s->stub->AbortCapture(ctx.get(), ar, &unused);
    if (!st.ok()) CAIRN_LOG(WARNING) << "aborting a capture: " << st.error_message();
    return sums.status();
  }
  v1::CommitCaptureRequest cr;
  cr.set_session_id(s->session_id);
  cr.set_reservation_id(res.reservation_id());
  cr.set_private_checksum(sums->first);
  cr.set_tail_checksum(sums->second);
  v1::CommitCaptureResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(options_.rpc_timeout);
  grpc::Status st = s->stub->CommitCapture(ctx.get(), cr, &resp);
  if (!st.ok()) return Lost(st, "commit capture");
  return absl::OkStatus();
}

void GrpcStateCache::SlotIdle(int slot) {
  v1::SessionClientMessage m;
  m.mutable_slot_idle()->set_slot(static_cast<uint32_t>(slot));
  WriteToStream(m);
}

void GrpcStateCache::SlotBusy(int slot) {
  v1::SessionClientMessage m;
  m.mutable_slot_busy()->set_slot(static_cast<uint32_t>(slot));
  WriteToStream(m);
}

}  // namespace cairn::infer
