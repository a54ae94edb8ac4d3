#ifndef CAIRN_SERVICES_CACHE_PROTO_CONVERT_H_
#define CAIRN_SERVICES_CACHE_PROTO_CONVERT_H_

// Conversions between cache.proto messages and the core's types, with the validation every
// field from the wire gets: sizes bounded, strings and lists capped, enums known. Errors are
// InvalidArgument naming the field. No state; thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cairn/cache/v1/cache.pb.h"
#include "services/cache/arena/arena.h"
#include "services/cache/core/event_log.h"
#include "services/cache/core/model_layout.h"
#include "services/cache/core/types.h"
#include "services/cache/lease_types.h"
#include "services/cache/lookup_types.h"
#include "services/cache/session_types.h"
#include "services/cache/slot_types.h"

namespace cairn::cache {

// Protocol limits (docs/cache-protocol.md, "Limits").
struct WireLimits {
  static constexpr size_t kMaxNameBytes = 256;    // Names, labels, digests, conversations.
  static constexpr size_t kMaxTextBytes = 4096;   // Free text: failures, reasons.
  static constexpr int kMaxComponents = 4096;     // Components of one layout.
  static constexpr int kMaxMedia = 1024;          // Media items of one input identity.
  static constexpr uint32_t kMaxSlots = 1 << 16;  // Hello.slots.
  static constexpr uint32_t kMaxTreeNodes = 1 << 16;
  static constexpr int64_t kMaxTokens = ModelLayout::kMaxTokens;  // One prompt or frontier.
};

// InvalidArgument naming `field` when `value` is longer than `max` bytes.
absl::Status CheckLength(absl::string_view field, absl::string_view value, size_t max);

// The layout of RegisterModel: component ids 0..n-1 in order, a known kind, no zero-byte
// component, chunk_rows > 0, and sizes that fit (ModelLayout::Validate). Errors name the
// field ("layout.components[2].bytes_per_row").
absl::StatusOr<ModelLayout> LayoutFromProto(const v1::ModelLayout& layout);

// The input identity as one comparable string ("position:digest;" per media item), after
// checking the list and digest sizes. `field` names the message in errors.
absl::StatusOr<std::string> InputDigest(absl::string_view field, const v1::InputIdentity& input);

// Token ids of `field`, at most `max` of them, each within TokenId's range.
absl::StatusOr<std::vector<TokenId>> TokensFromProto(
    absl::string_view field, const google::protobuf::RepeatedField<uint32_t>& ids,
    int64_t max = WireLimits::kMaxTokens);

// A slot index from the wire: below `slots` when the session declared its slot count (> 0).
absl::StatusOr<int32_t> SlotFromProto(uint32_t slot, uint32_t slots);

// The session's hello, with its instance name and slot count within the limits.
absl::StatusOr<SessionHello> HelloFromProto(const v1::Hello& hello);
v1::Welcome ToProtoWelcome(const SessionWelcome& welcome);
// The spill report as sent; whether it matches its spill is the daemon's to check.
SpillReport SpillReportFromProto(const v1::SpillDone& done);

// The slot calls (slot_types.h): the conversation's length, the input identity, the mode and
// the tokens are checked.
absl::StatusOr<SlotStart> SlotStartFromProto(const v1::StartSlotRequest& req);
absl::StatusOr<FrontierUpdate> FrontierUpdateFromProto(const v1::UpdateFrontierRequest& req);

// The restore and capture calls (lease_types.h). The requests check every string's length,
// the input identity and the capture kind; ids are the daemon's to check.
absl::StatusOr<RestoreRequest> RestoreRequestFromProto(const v1::AcquireRestoreRequest& req);
v1::RestoreLease ToProtoLease(const RestoreGrant& grant);
absl::StatusOr<LeaseRelease> LeaseReleaseFromProto(const v1::ReleaseLeaseRequest& req);
absl::StatusOr<CaptureRequest> CaptureRequestFromProto(const v1::ReserveCaptureRequest& req);
v1::CaptureReservation ToProtoReservation(const CaptureGrant& grant);
CaptureCommit CaptureCommitFromProto(const v1::CommitCaptureRequest& req);
v1::CommitCaptureResponse ToProtoCommit(const CommitResult& result);
absl::StatusOr<CaptureAbort> CaptureAbortFromProto(const v1::AbortCaptureRequest& req);

// Registration and lookup (lookup_types.h). RegisterModel: the identity's digest is not
// empty, every identity string and the model name are within kMaxNameBytes, and the layout
// converts (LayoutFromProto). Lookup: the tokens (not empty), the conversation's length, the
// input identity, and boundaries within the prompt (0 on the wire: unknown).
absl::StatusOr<ModelRegistration> ModelRegistrationFromProto(const v1::RegisterModelRequest& req);
v1::RegisterModelResponse ToProtoRegistered(const RegisteredModel& model);
absl::StatusOr<PromptLookup> PromptLookupFromProto(const v1::LookupRequest& req);
// With a miss_reason when the best candidate covers less than the shared prefix.
v1::LookupResponse ToProtoLookup(const LookupAnswer& answer);

// Explain (tokens checked, not empty) and Evict (the daemon checks the order).
absl::StatusOr<ExplainQuery> ExplainQueryFromProto(const v1::ExplainRequest& req);
v1::ExplainResponse ToProtoExplanation(const Explanation& explanation);
EvictOrder EvictOrderFromProto(const v1::EvictRequest& req);

v1::Tier ToProtoTier(Tier tier);
v1::CaptureKind ToProtoKind(CaptureKind kind);
absl::StatusOr<CaptureKind> FromProtoKind(v1::CaptureKind kind);
v1::EventKind ToProtoEventKind(EventType type);
void FillHandle(const ArenaHandle& h, v1::ArenaHandle* out);
// The StreamEvents form of a core event.
v1::Event ToProtoEvent(const Event& e);

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_PROTO_CONVERT_H_
