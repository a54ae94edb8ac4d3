#include "services/cache/proto_convert.h"

#include <algorithm>
#include <limits>
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
