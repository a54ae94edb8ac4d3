#include "services/cache/proto_convert.h"

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace cairn::cache {
namespace {

// Capture kinds on both sides of the wire.
constexpr std::pair<CaptureKind, v1::CaptureKind> kCaptureKinds[] = {
    {CaptureKind::kEnd, v1::CAPTURE_KIND_END},
    {CaptureKind::kReused, v1::CAPTURE_KIND_REUSED},
    {CaptureKind::kStable, v1::CAPTURE_KIND_STABLE},
    {CaptureKind::kLearned, v1::CAPTURE_KIND_LEARNED},
    {CaptureKind::kGrid, v1::CAPTURE_KIND_GRID},
};

}  // namespace

absl::Status CheckLength(absl::string_view field, absl::string_view value, size_t max) {
  if (value.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " is ", value.size(), " bytes, more than ", max));
}

absl::StatusOr<ModelLayout> LayoutFromProto(const v1::ModelLayout& proto) {
  ModelLayout layout;
  if (proto.chunk_rows() == 0) {
    return absl::InvalidArgumentError("layout.chunk_rows must be > 0");
  }
  layout.chunk_rows = proto.chunk_rows();
  if (proto.components_size() == 0 || proto.components_size() > WireLimits::kMaxComponents) {
    return absl::InvalidArgumentError(absl::StrCat("layout.components must hold 1..",
                                                   WireLimits::kMaxComponents, " components, not ",
                                                   proto.components_size()));
  }
  for (int i = 0; i < proto.components_size(); ++i) {
    const v1::StateComponent& c = proto.components(i);
    const std::string field = absl::StrCat("layout.components[", i, "]");
    if (c.id() != static_cast<uint32_t>(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".id is ", c.id(), "; ids must be 0..n-1 in order"));
    }
    RETURN_IF_ERROR(CheckLength(field + ".name", c.name(), WireLimits::kMaxNameBytes));
    RETURN_IF_ERROR(CheckLength(field + ".dtype", c.dtype(), WireLimits::kMaxNameBytes));
    // Anything above this fails ModelLayout::Validate anyway; checked here so the int64
    // conversion below cannot wrap.
    constexpr uint64_t kMax = static_cast<uint64_t>(ModelLayout::kMaxStateBytes);
    StateComponent sc;
    sc.name = c.name().empty() ? absl::StrCat("component", i) : c.name();
    switch (c.kind()) {
      case v1::COMPONENT_KIND_ROWS:
        if (c.bytes_per_row() == 0 || c.bytes_per_row() > kMax || c.private_bytes() != 0) {
          return absl::InvalidArgumentError(absl::StrCat(field, ".bytes_per_row must be 1..", kMax,
                                                         " (and private_bytes 0) for rows"));
        }
        sc.kind = ComponentKind::kRows;
        sc.bytes_per_row = static_cast<int64_t>(c.bytes_per_row());
        break;
      case v1::COMPONENT_KIND_PRIVATE:
        if (c.private_bytes() == 0 || c.private_bytes() > kMax || c.bytes_per_row() != 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(field, ".private_bytes must be 1..", kMax,
                           " (and bytes_per_row 0) for private state"));
        }
        sc.kind = ComponentKind::kPrivate;
        sc.private_bytes = static_cast<int64_t>(c.private_bytes());
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(field, ".kind is not set"));
    }
    layout.components.push_back(std::move(sc));
  }
  absl::Status valid = layout.Validate();
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("layout.", valid.message()));
  }
  return layout;
}

absl::StatusOr<std::string> InputDigest(absl::string_view field, const v1::InputIdentity& input) {
  if (input.media_size() > WireLimits::kMaxMedia) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".media holds ", input.media_size(),
                                                   " items, more than ", WireLimits::kMaxMedia));
  }
  std::string out;
  for (int i = 0; i < input.media_size(); ++i) {
    const auto& m = input.media(i);
    RETURN_IF_ERROR(CheckLength(absl::StrCat(field, ".media[", i, "].digest"), m.digest(),
                                WireLimits::kMaxNameBytes));
    absl::StrAppend(&out, m.position(), ":", m.digest(), ";");
  }
  return out;
}

absl::StatusOr<std::vector<TokenId>> TokensFromProto(
    absl::string_view field, const google::protobuf::RepeatedField<uint32_t>& ids, int64_t max) {
  if (ids.size() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " holds ", ids.size(), " tokens, more than ", max));
  }
  std::vector<TokenId> out;
  out.reserve(static_cast<size_t>(ids.size()));
  for (uint32_t id : ids) {
    if (id > static_cast<uint32_t>(std::numeric_limits<TokenId>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": token id ", id, " out of range"));
    }
    out.push_back(static_cast<TokenId>(id));
  }
  return out;
}

absl::StatusOr<int32_t> SlotFromProto(uint32_t slot, uint32_t slots) {
  if (slots > 0 ? slot >= slots : slot >= WireLimits::kMaxSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot ", slot, " is out of range: the session has ",
                     slots > 0 ? slots : WireLimits::kMaxSlots, " slots"));
  }
  return static_cast<int32_t>(slot);
}

absl::StatusOr<SessionHello> HelloFromProto(const v1::Hello& hello) {
  if (hello.slots() > WireLimits::kMaxSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello.slots ", hello.slots(), " is more than ", WireLimits::kMaxSlots));
  }
  RETURN_IF_ERROR(
      CheckLength("hello.instance_name", hello.instance_name(), WireLimits::kMaxNameBytes));
  return SessionHello{hello.instance_name(), hello.pid(), hello.slots()};
}

v1::Welcome ToProtoWelcome(const SessionWelcome& welcome) {
  v1::Welcome w;
  w.set_session_id(welcome.session_id);
  w.set_cache_incarnation(welcome.cache_incarnation);
  v1::ArenaInfo* arena = w.mutable_arena();
  arena->set_incarnation(welcome.arena_incarnation);
  arena->set_size_bytes(welcome.arena_bytes);
  arena->set_fd_socket_path(welcome.fd_socket_path);
  arena->set_pin_step_bytes(welcome.pin_step_bytes);
  arena->set_first_pin_bytes(welcome.first_pin_bytes);
  arena->set_alignment(welcome.alignment);
  w.set_heartbeat_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(welcome.heartbeat_interval)));
  w.set_session_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(welcome.session_timeout)));
  return w;
}

SpillReport SpillReportFromProto(const v1::SpillDone& done) {
  SpillReport r;
  r.spill_id = done.spill_id();
  r.chunk_ids.assign(done.chunk_ids().begin(), done.chunk_ids().end());
  r.checksums.assign(done.checksums().begin(), done.checksums().end());
  r.failed_chunk_ids.assign(done.failed_chunk_ids().begin(), done.failed_chunk_ids().end());
  return r;
}

namespace {

void FillState(const StateGrant& g, v1::StateRegion* out) {
  out->set_first_row(g.first_row);
  out->set_rows(g.rows);
  FillHandle(g.region, out->mutable_region());
  out->set_checksum(g.checksum);
}

}  // namespace

absl::StatusOr<SlotStart> SlotStartFromProto(const v1::StartSlotRequest& req) {
  RETURN_IF_ERROR(CheckLength("conversation", req.conversation(), WireLimits::kMaxNameBytes));
  SlotStart out;
  ASSIGN_OR_RETURN(out.input, InputDigest("input_identity", req.input_identity()));
  if (req.mode() != v1::StartSlotRequest::MODE_COLD &&
      req.mode() != v1::StartSlotRequest::MODE_CONTINUE) {
    return absl::InvalidArgumentError("mode must be MODE_COLD or MODE_CONTINUE");
  }
  out.session_id = req.session_id();
  out.model_id = req.model_id();
  out.slot = req.slot();
  out.cold = req.mode() == v1::StartSlotRequest::MODE_COLD;
  out.conversation = req.conversation();
  return out;
}

absl::StatusOr<FrontierUpdate> FrontierUpdateFromProto(const v1::UpdateFrontierRequest& req) {
  FrontierUpdate out;
  ASSIGN_OR_RETURN(out.tokens, TokensFromProto("append_tokens", req.append_tokens()));
  out.session_id = req.session_id();
  out.model_id = req.model_id();
  out.slot = req.slot();
  out.expected_depth = req.expected_depth();
  return out;
}

absl::StatusOr<RestoreRequest> RestoreRequestFromProto(const v1::AcquireRestoreRequest& req) {
  RETURN_IF_ERROR(CheckLength("conversation", req.conversation(), WireLimits::kMaxNameBytes));
  RestoreRequest out;
  ASSIGN_OR_RETURN(out.input, InputDigest("input_identity", req.input_identity()));
  out.session_id = req.session_id();
  out.model_id = req.model_id();
  out.checkpoint_id = req.checkpoint_id();
  out.slot = req.slot();
  out.conversation = req.conversation();
  out.lease = absl::Milliseconds(req.lease_ms());
  return out;
}

v1::RestoreLease ToProtoLease(const RestoreGrant& grant) {
  v1::RestoreLease out;
  out.set_lease_id(grant.lease_id);
  out.set_expires_unix_ms(grant.expires_unix_ms);
  out.set_checkpoint_id(grant.checkpoint_id);
  out.set_depth(static_cast<uint64_t>(grant.depth));
  out.set_loaded_from(ToProtoTier(grant.loaded_from));
  out.set_kept_rows(static_cast<uint64_t>(grant.kept_rows));
  out.set_ready(grant.ready);
  for (uint64_t spill : grant.awaiting_spills) out.add_awaiting_spills(spill);
  for (uint64_t spill : grant.preserve_spills) out.add_preserve_spills(spill);
  for (const ChunkGrant& c : grant.chunks) {
    v1::ChunkRegion* cr = out.add_chunks();
    cr->set_chunk_id(c.chunk_id);
    cr->set_first_row(c.first_row);
    cr->set_rows(c.rows);
    FillHandle(c.region, cr->mutable_region());
    cr->set_checksum(c.checksum);
  }
  FillState(grant.private_state, out.mutable_private_state());
  if (grant.tail.region.length > 0) FillState(grant.tail, out.mutable_tail());
  return out;
}

absl::StatusOr<LeaseRelease> LeaseReleaseFromProto(const v1::ReleaseLeaseRequest& req) {
  RETURN_IF_ERROR(CheckLength("failure", req.failure(), WireLimits::kMaxTextBytes));
  return LeaseRelease{req.session_id(), req.lease_id(), req.restored(), req.failure()};
}

absl::StatusOr<CaptureRequest> CaptureRequestFromProto(const v1::ReserveCaptureRequest& req) {
  CaptureRequest out;
  ASSIGN_OR_RETURN(out.kind, FromProtoKind(req.kind()));
  RETURN_IF_ERROR(CheckLength("conversation", req.conversation(), WireLimits::kMaxNameBytes));
  out.session_id = req.session_id();
  out.model_id = req.model_id();
  out.slot = req.slot();
  out.depth = req.depth();
  out.conversation = req.conversation();
  out.stable_boundary =
      req.stable_boundary() == 0 ? -1 : static_cast<int64_t>(req.stable_boundary());
  return out;
}

v1::CaptureReservation ToProtoReservation(const CaptureGrant& grant) {
  v1::CaptureReservation out;
  out.set_reservation_id(grant.reservation_id);
  out.set_expires_unix_ms(grant.expires_unix_ms);
  FillHandle(grant.private_state.region, out.mutable_private_state()->mutable_region());
  if (grant.tail.region.length > 0) {
    out.mutable_tail()->set_first_row(grant.tail.first_row);
    out.mutable_tail()->set_rows(grant.tail.rows);
    FillHandle(grant.tail.region, out.mutable_tail()->mutable_region());
  }
  for (CheckpointId id : grant.evicted) out.add_evicted(id);
  return out;
}

CaptureCommit CaptureCommitFromProto(const v1::CommitCaptureRequest& req) {
  return CaptureCommit{req.session_id(), req.reservation_id(), req.private_checksum(),
                       req.tail_checksum()};
}

v1::CommitCaptureResponse ToProtoCommit(const CommitResult& result) {
  v1::CommitCaptureResponse out;
  out.set_checkpoint_id(result.checkpoint_id);
  out.set_queued_for_disk(result.queued_for_disk);
  return out;
}

absl::StatusOr<CaptureAbort> CaptureAbortFromProto(const v1::AbortCaptureRequest& req) {
  RETURN_IF_ERROR(CheckLength("reason", req.reason(), WireLimits::kMaxTextBytes));
  return CaptureAbort{req.session_id(), req.reservation_id(), req.reason()};
}

v1::Tier ToProtoTier(Tier tier) {
  switch (tier) {
    case Tier::kLive:
      return v1::TIER_LIVE;
    case Tier::kRam:
      return v1::TIER_RAM;
    case Tier::kDisk:
      return v1::TIER_DISK;
    case Tier::kNone:
      break;
  }
  return v1::TIER_UNSPECIFIED;
}

absl::StatusOr<ModelRegistration> ModelRegistrationFromProto(const v1::RegisterModelRequest& req) {
  const v1::CompatibilityIdentity& ident = req.identity();
  if (ident.digest().empty()) return absl::InvalidArgumentError("identity.digest is empty");
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"identity.digest", &ident.digest()},
        {"identity.architecture", &ident.architecture()},
        {"identity.weights_digest", &ident.weights_digest()},
        {"identity.tokenizer_digest", &ident.tokenizer_digest()},
        {"identity.template_digest", &ident.template_digest()},
        {"identity.layout_digest", &ident.layout_digest()},
        {"identity.numerics_class", &ident.numerics_class()},
        {"identity.speculative_config", &ident.speculative_config()},
        {"identity.config_digest", &ident.config_digest()},
        {"model_name", &req.model_name()}}) {
    RETURN_IF_ERROR(CheckLength(field, *value, WireLimits::kMaxNameBytes));
  }
  ModelRegistration out;
  out.session_id = req.session_id();
  out.compatibility = ident.digest();
  ASSIGN_OR_RETURN(out.layout, LayoutFromProto(req.layout()));
  return out;
}

v1::RegisterModelResponse ToProtoRegistered(const RegisteredModel& model) {
  v1::RegisterModelResponse out;
  out.set_model_id(model.model_id);
  out.set_ram_checkpoints(model.ram_checkpoints);
  out.set_disk_checkpoints(model.disk_checkpoints);
  return out;
}

absl::StatusOr<PromptLookup> PromptLookupFromProto(const v1::LookupRequest& req) {
  PromptLookup out;
  out.session_id = req.session_id();
  out.model_id = req.model_id();
  ASSIGN_OR_RETURN(out.tokens, TokensFromProto("tokens", req.tokens()));
  if (out.tokens.empty()) return absl::InvalidArgumentError("lookup of an empty prompt");
  RETURN_IF_ERROR(CheckLength("conversation", req.conversation(), WireLimits::kMaxNameBytes));
  ASSIGN_OR_RETURN(out.input, InputDigest("input_identity", req.input_identity()));
  for (const auto& [name, value, boundary] :
       {std::tuple{"stable", req.stable_boundary(), &out.stable_boundary},
        std::tuple{"shared", req.shared_boundary(), &out.shared_boundary}}) {
    if (value > out.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " boundary ", value, " is past the prompt's ", out.tokens.size(), " tokens"));
    }
    *boundary = value == 0 ? -1 : static_cast<int64_t>(value);
  }
  // No pass is longer than the prompt, so a longer one (up to 2^64 - 1) is the prompt's length.
  out.max_pass_tokens = static_cast<int64_t>(
      std::min<uint64_t>(req.max_pass_tokens(), static_cast<uint64_t>(out.tokens.size())));
  return out;
}

namespace {

void FillCandidate(const Candidate& c, v1::Candidate* out) {
  out->set_tier(ToProtoTier(c.tier));
  out->set_depth(static_cast<uint64_t>(c.depth));
  out->set_checkpoint_id(c.checkpoint);
  out->set_slot(static_cast<uint32_t>(c.slot.slot));
  out->set_session_id(c.slot.daemon_session);
}

void FillCaptures(const CapturePlan& plan, v1::CapturePlan* out) {
  for (const PlannedCapture& p : plan.captures) {
    v1::CapturePoint* cp = out->add_captures();
    cp->set_position(static_cast<uint64_t>(p.pos));
    cp->set_kind(ToProtoKind(p.kind));
  }
}

}  // namespace

v1::LookupResponse ToProtoLookup(const LookupAnswer& answer) {
  const LookupResult& r = answer.result;
  v1::LookupResponse out;
  FillCandidate(r.best, out.mutable_best());
  for (const Candidate& c : r.others) FillCandidate(c, out.add_others());
  out.set_shared_prefix(static_cast<uint64_t>(r.shared_prefix));
  FillCaptures(r.plan, out.mutable_plan());
  for (const PrefillPass& p : r.plan.passes) {
    out.mutable_plan()->add_pass_ends(static_cast<uint64_t>(p.end));
  }
  for (const SlotSpill& spill : answer.slot_spills) {
    v1::SlotSpillCost* cost = out.add_slot_spills();
    cost->set_slot(static_cast<uint32_t>(spill.slot));
    cost->set_bytes(static_cast<uint64_t>(spill.bytes));
  }
  if (r.best.depth < r.shared_prefix) {
    out.set_miss_reason(
        r.best.tier == Tier::kNone
            ? absl::StrCat("no checkpoint before the divergence at token ", r.shared_prefix)
            : absl::StrCat("deepest checkpoint at ", r.best.depth, ", divergence at token ",
                           r.shared_prefix));
  }
  return out;
}

absl::StatusOr<ExplainQuery> ExplainQueryFromProto(const v1::ExplainRequest& req) {
  ExplainQuery out;
  out.model_id = req.model_id();
  ASSIGN_OR_RETURN(out.tokens, TokensFromProto("tokens", req.tokens()));
  if (out.tokens.empty()) return absl::InvalidArgumentError("explain of an empty prompt");
  return out;
}

v1::ExplainResponse ToProtoExplanation(const Explanation& e) {
  v1::ExplainResponse out;
  v1::LookupResponse* lookup = out.mutable_lookup();
  FillCaptures(e.result.plan, lookup->mutable_plan());
  lookup->mutable_best()->set_tier(ToProtoTier(e.result.best.tier));
  lookup->mutable_best()->set_depth(static_cast<uint64_t>(e.result.best.depth));
  lookup->mutable_best()->set_checkpoint_id(e.result.best.checkpoint);
  lookup->set_shared_prefix(static_cast<uint64_t>(e.result.shared_prefix));
  for (const Event& event : e.related) *out.add_related() = ToProtoEvent(event);
  out.set_summary(e.summary);
  return out;
}

EvictOrder EvictOrderFromProto(const v1::EvictRequest& req) {
  return EvictOrder{req.checkpoint_id(), req.all(), req.include_disk()};
}

v1::CaptureKind ToProtoKind(CaptureKind kind) {
  for (const auto& [ours, theirs] : kCaptureKinds) {
    if (ours == kind) return theirs;
  }
  return v1::CAPTURE_KIND_UNSPECIFIED;
}

absl::StatusOr<CaptureKind> FromProtoKind(v1::CaptureKind kind) {
  for (const auto& [ours, theirs] : kCaptureKinds) {
    if (theirs == kind) return ours;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown capture kind ", kind));
}

v1::EventKind ToProtoEventKind(EventType type) {
  switch (type) {
    case EventType::kAdmit:
      return v1::EVENT_KIND_ADMIT;
    case EventType::kReject:
      return v1::EVENT_KIND_REJECT;
    case EventType::kEvict:
    case EventType::kDiskEvict:
      return v1::EVENT_KIND_EVICT;
    case EventType::kSpill:
      return v1::EVENT_KIND_SPILL;
    case EventType::kPersist:
      return v1::EVENT_KIND_PERSIST;
    case EventType::kRestore:
      return v1::EVENT_KIND_RESTORE;
    case EventType::kQuarantine:
      return v1::EVENT_KIND_QUARANTINE;
    case EventType::kRecover:
      return v1::EVENT_KIND_RECOVER;
  }
  return v1::EVENT_KIND_UNSPECIFIED;
}

void FillHandle(const ArenaHandle& h, v1::ArenaHandle* out) {
  out->set_incarnation(h.incarnation);
  out->set_offset(h.offset);
  out->set_length(h.length);
}

v1::Event ToProtoEvent(const Event& e) {
  v1::Event out;
  out.set_seq(e.seq);
  out.set_unix_ms(absl::ToUnixMillis(e.time));
  out.set_kind(ToProtoEventKind(e.type));
  out.set_checkpoint_id(e.checkpoint);
  out.set_depth(static_cast<uint64_t>(std::max<int64_t>(0, e.depth)));
  out.set_tier(ToProtoTier(e.tier));
  out.set_reason(e.type == EventType::kDiskEvict ? absl::StrCat("disk: ", e.reason) : e.reason);
  out.set_bytes(static_cast<uint64_t>(std::max<int64_t>(0, e.bytes)));
  out.set_detail(FormatEvent(e));
  out.set_conversation(e.conversation);
  return out;
}

}  // namespace cairn::cache
