// GrpcStateCache's StateCache calls, each a unary RPC with a deadline: Lookup (the plan),
// StartSlot, UpdateFrontier, Capture (a slot's private state and tail copied into a
// reservation), and the SlotIdle / SlotBusy notes on the session stream. The session is in
// grpc_state_cache.cc, the spills in grpc_state_cache_spills.cc, the restores in
// grpc_state_cache_restore.cc.

#include <algorithm>
#include <limits>
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

StateTier ToStateTier(v1::Tier t) {
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

namespace {

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
  if (!st.ok()) return LostSession(s, st, "lookup");
  StatePlan plan;
  auto add = [&](const v1::Candidate& c) {
    StateCandidate out;
    out.tier = ToStateTier(c.tier());
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
  if (!st.ok()) return LostSession(s, st, "frontier update");
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
    if (!st.ok()) return LostSession(s, st, "reserve capture");
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
  if (!st.ok()) return LostSession(s, st, "commit capture");
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
