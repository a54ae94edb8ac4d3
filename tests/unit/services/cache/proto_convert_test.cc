#include "services/cache/proto_convert.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

v1::ModelLayout TwoComponents() {
  v1::ModelLayout layout;
  layout.set_chunk_rows(16);
  v1::StateComponent* rows = layout.add_components();
  rows->set_id(0);
  rows->set_kind(v1::COMPONENT_KIND_ROWS);
  rows->set_bytes_per_row(64);
  v1::StateComponent* priv = layout.add_components();
  priv->set_id(1);
  priv->set_kind(v1::COMPONENT_KIND_PRIVATE);
  priv->set_private_bytes(4096);
  return layout;
}

// Expects InvalidArgument whose message names `field`.
void ExpectNamed(const absl::Status& s, const std::string& field) {
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(absl::StrContains(s.message(), field)) << s.message() << " lacks " << field;
}

TEST(ProtoConvertTest, AValidLayoutConverts) {
  absl::StatusOr<ModelLayout> layout = LayoutFromProto(TwoComponents());

  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->chunk_rows, 16);
  EXPECT_EQ(layout->RowBytes(), 64);
  EXPECT_EQ(layout->PrivateBytes(), 4096);
}

TEST(ProtoConvertTest, BadLayoutsNameTheField) {
  v1::ModelLayout no_chunk = TwoComponents();
  no_chunk.set_chunk_rows(0);
  v1::ModelLayout zero_row = TwoComponents();
  zero_row.mutable_components(0)->set_bytes_per_row(0);
  v1::ModelLayout zero_private = TwoComponents();
  zero_private.mutable_components(1)->set_private_bytes(0);
  v1::ModelLayout out_of_order = TwoComponents();
  out_of_order.mutable_components(1)->set_id(5);
  v1::ModelLayout no_kind = TwoComponents();
  no_kind.mutable_components(1)->set_kind(v1::COMPONENT_KIND_UNSPECIFIED);
  v1::ModelLayout overflow = TwoComponents();
  overflow.set_chunk_rows(0xFFFFFFFFu);
  overflow.mutable_components(0)->set_bytes_per_row(uint64_t{1} << 40);

  ExpectNamed(LayoutFromProto(no_chunk).status(), "layout.chunk_rows");
  ExpectNamed(LayoutFromProto(zero_row).status(), "layout.components[0].bytes_per_row");
  ExpectNamed(LayoutFromProto(zero_private).status(), "layout.components[1].private_bytes");
  ExpectNamed(LayoutFromProto(out_of_order).status(), "layout.components[1].id");
  ExpectNamed(LayoutFromProto(no_kind).status(), "layout.components[1].kind");
  ExpectNamed(LayoutFromProto(overflow).status(), "chunk_rows");
}

TEST(ProtoConvertTest, StringsListsTokensAndSlotsAreBounded) {
  v1::InputIdentity media;
  for (int i = 0; i <= WireLimits::kMaxMedia; ++i) media.add_media()->set_position(i);
  v1::InputIdentity long_digest;
  long_digest.add_media()->set_digest(std::string(WireLimits::kMaxNameBytes + 1, 'd'));
  google::protobuf::RepeatedField<uint32_t> bad_token;
  bad_token.Add(0xFFFFFFFFu);

  ExpectNamed(CheckLength("conversation", std::string(257, 'c'), 256), "conversation");
  ExpectNamed(InputDigest("input_identity", media).status(), "input_identity.media");
  ExpectNamed(InputDigest("input_identity", long_digest).status(),
              "input_identity.media[0].digest");
  ExpectNamed(TokensFromProto("tokens", bad_token).status(), "tokens");
  EXPECT_THAT(SlotFromProto(2, 2).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(*SlotFromProto(1, 2), 1);
  EXPECT_EQ(*SlotFromProto(100, 0), 100);  // No declared count: the protocol cap applies.
  EXPECT_TRUE(CheckLength("conversation", std::string(256, 'c'), 256).ok());
}

TEST(ProtoConvertTest, CaptureKindsRoundTrip) {
  for (v1::CaptureKind k : {v1::CAPTURE_KIND_END, v1::CAPTURE_KIND_REUSED, v1::CAPTURE_KIND_STABLE,
                            v1::CAPTURE_KIND_GRID, v1::CAPTURE_KIND_LEARNED}) {
    absl::StatusOr<CaptureKind> ours = FromProtoKind(k);
    ASSERT_TRUE(ours.ok());
    EXPECT_EQ(ToProtoKind(*ours), k);
  }
  EXPECT_THAT(FromProtoKind(v1::CAPTURE_KIND_UNSPECIFIED).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ProtoConvertTest, AHelloWithinTheLimitsKeepsItsFields) {
  v1::Hello hello;
  hello.set_instance_name("infer-gpu0");
  hello.set_pid(42);
  hello.set_slots(4);

  absl::StatusOr<SessionHello> out = HelloFromProto(hello);

  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->instance_name, "infer-gpu0");
  EXPECT_EQ(out->pid, 42u);
  EXPECT_EQ(out->slots, 4u);
}

TEST(ProtoConvertTest, AHelloPastTheLimitsIsRefusedNamingTheField) {
  v1::Hello many;
  many.set_slots(WireLimits::kMaxSlots + 1);
  v1::Hello long_name;
  long_name.set_instance_name(std::string(WireLimits::kMaxNameBytes + 1, 'x'));

  ExpectNamed(HelloFromProto(many).status(), "hello.slots");
  ExpectNamed(HelloFromProto(long_name).status(), "hello.instance_name");
}

TEST(ProtoConvertTest, TheWelcomeCarriesTheArenaAndTheHeartbeat) {
  SessionWelcome w;
  w.session_id = 7;
  w.cache_incarnation = 8;
  w.arena_incarnation = 9;
  w.arena_bytes = 1 << 20;
  w.fd_socket_path = "arena.sock";
  w.pin_step_bytes = 4096;
  w.first_pin_bytes = 8192;
  w.alignment = 64;
  w.heartbeat_interval = absl::Seconds(1);
  w.session_timeout = absl::Seconds(10);

  const v1::Welcome out = ToProtoWelcome(w);

  EXPECT_EQ(out.session_id(), 7u);
  EXPECT_EQ(out.cache_incarnation(), 8u);
  EXPECT_EQ(out.arena().incarnation(), 9u);
  EXPECT_EQ(out.arena().size_bytes(), uint64_t{1} << 20);
  EXPECT_EQ(out.arena().fd_socket_path(), "arena.sock");
  EXPECT_EQ(out.arena().pin_step_bytes(), 4096u);
  EXPECT_EQ(out.arena().first_pin_bytes(), 8192u);
  EXPECT_EQ(out.arena().alignment(), 64u);
  EXPECT_EQ(out.heartbeat_interval_ms(), 1000u);
  EXPECT_EQ(out.session_timeout_ms(), 10000u);
}

TEST(ProtoConvertTest, ASpillReportKeepsItsChunksInOrder) {
  v1::SpillDone done;
  done.set_spill_id(3);
  done.add_chunk_ids(12);
  done.add_chunk_ids(11);
  done.add_checksums(99);
  done.add_failed_chunk_ids(13);

  const SpillReport r = SpillReportFromProto(done);

  EXPECT_EQ(r.spill_id, 3u);
  EXPECT_EQ(r.chunk_ids, (std::vector<ChunkId>{12, 11}));
  EXPECT_EQ(r.checksums, std::vector<uint64_t>{99});  // A count mismatch is the daemon's to judge.
  EXPECT_EQ(r.failed_chunk_ids, std::vector<ChunkId>{13});
}

TEST(ProtoConvertTest, ARegistrationKeepsTheDigestAndLayoutAndBoundsEveryName) {
  v1::RegisterModelRequest req;
  req.set_session_id(3);
  req.mutable_identity()->set_digest("model-a");
  *req.mutable_layout() = TwoComponents();
  v1::RegisterModelRequest no_digest = req;
  no_digest.mutable_identity()->clear_digest();
  v1::RegisterModelRequest long_name = req;
  long_name.mutable_identity()->set_tokenizer_digest(
      std::string(WireLimits::kMaxNameBytes + 1, 't'));
  v1::RegisterModelRequest bad_layout = req;
  bad_layout.mutable_layout()->set_chunk_rows(0);

  absl::StatusOr<ModelRegistration> reg = ModelRegistrationFromProto(req);

  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->session_id, 3u);
  EXPECT_EQ(reg->compatibility, "model-a");
  EXPECT_EQ(reg->layout.chunk_rows, 16);
  EXPECT_EQ(reg->layout.components.size(), 2u);
  ExpectNamed(ModelRegistrationFromProto(no_digest).status(), "identity.digest");
  ExpectNamed(ModelRegistrationFromProto(long_name).status(), "identity.tokenizer_digest");
  ExpectNamed(ModelRegistrationFromProto(bad_layout).status(), "layout.chunk_rows");
  v1::RegisterModelResponse resp = ToProtoRegistered(RegisteredModel{7, 2, 3});
  EXPECT_EQ(resp.model_id(), 7u);
  EXPECT_EQ(resp.ram_checkpoints(), 2u);
  EXPECT_EQ(resp.disk_checkpoints(), 3u);
}

TEST(ProtoConvertTest, ALookupChecksItsPromptBoundariesAndLabels) {
  v1::LookupRequest req;
  req.set_session_id(3);
  req.set_model_id(4);
  for (uint32_t t = 1; t <= 10; ++t) req.add_tokens(t);
  req.set_stable_boundary(6);  // shared_boundary stays 0: unknown.
  req.mutable_input_identity()->add_media()->set_digest("img");
  v1::LookupRequest past = req;
  past.set_shared_boundary(11);
  v1::LookupRequest empty = req;
  empty.clear_tokens();
  v1::LookupRequest long_label = req;
  long_label.set_conversation(std::string(WireLimits::kMaxNameBytes + 1, 'c'));

  absl::StatusOr<PromptLookup> lookup = PromptLookupFromProto(req);

  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->session_id, 3u);
  EXPECT_EQ(lookup->model_id, 4u);
  EXPECT_EQ(lookup->tokens.size(), 10u);
  EXPECT_EQ(lookup->stable_boundary, 6);
  EXPECT_EQ(lookup->shared_boundary, -1);
  EXPECT_FALSE(lookup->input.empty());
  EXPECT_EQ(lookup->max_pass_tokens, 0);  // Not given: the planner's own.
  // The client's pass length, at most the prompt's (a hostile 2^64 - 1 included).
  v1::LookupRequest passes = req;
  passes.set_max_pass_tokens(8);
  lookup = PromptLookupFromProto(passes);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->max_pass_tokens, 8);
  passes.set_max_pass_tokens(~uint64_t{0});
  lookup = PromptLookupFromProto(passes);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->max_pass_tokens, 10);
  ExpectNamed(PromptLookupFromProto(past).status(), "shared boundary");
  EXPECT_THAT(PromptLookupFromProto(empty).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  ExpectNamed(PromptLookupFromProto(long_label).status(), "conversation");
}

TEST(ProtoConvertTest, ALookupAnswerSaysWhyItMissesAndWhatSlotsWouldSpill) {
  LookupAnswer answer;
  answer.result.best.tier = Tier::kRam;
  answer.result.best.depth = 32;
  answer.result.best.checkpoint = 9;
  answer.result.others.push_back(Candidate{});
  answer.result.shared_prefix = 40;
  answer.result.plan.captures.push_back(PlannedCapture{48, CaptureKind::kEnd});
  answer.result.plan.passes.push_back(PrefillPass{0, 48});
  answer.slot_spills.push_back(SlotSpill{1, 4096});

  v1::LookupResponse out = ToProtoLookup(answer);

  EXPECT_EQ(out.best().tier(), v1::TIER_RAM);
  EXPECT_EQ(out.best().checkpoint_id(), 9u);
  EXPECT_EQ(out.others_size(), 1);
  EXPECT_EQ(out.shared_prefix(), 40u);
  ASSERT_EQ(out.plan().captures_size(), 1);
  EXPECT_EQ(out.plan().captures(0).position(), 48u);
  EXPECT_EQ(out.plan().pass_ends_size(), 1);
  ASSERT_EQ(out.slot_spills_size(), 1);
  EXPECT_EQ(out.slot_spills(0).slot(), 1u);
  EXPECT_EQ(out.slot_spills(0).bytes(), 4096u);
  EXPECT_EQ(out.miss_reason(), "deepest checkpoint at 32, divergence at token 40");
  answer.result.best.depth = 40;
  EXPECT_TRUE(ToProtoLookup(answer).miss_reason().empty());
}

TEST(ProtoConvertTest, ExplainAndEvictConvert) {
  v1::ExplainRequest req;
  req.set_model_id(2);
  req.add_tokens(5);
  Explanation e;
  e.result.best.tier = Tier::kDisk;
  e.result.best.depth = 1;
  e.result.best.checkpoint = 8;
  Event admit;
  admit.seq = 3;
  admit.type = EventType::kAdmit;
  admit.checkpoint = 8;
  e.related.push_back(admit);
  e.summary = "restores 1 of 1 tokens from disk";
  v1::EvictRequest evict;
  evict.set_checkpoint_id(8);
  evict.set_include_disk(true);

  absl::StatusOr<ExplainQuery> query = ExplainQueryFromProto(req);
  v1::ExplainResponse out = ToProtoExplanation(e);
  EvictOrder order = EvictOrderFromProto(evict);

  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->model_id, 2u);
  EXPECT_EQ(query->tokens, std::vector<TokenId>{5});
  EXPECT_THAT(ExplainQueryFromProto(v1::ExplainRequest()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(out.lookup().best().tier(), v1::TIER_DISK);
  EXPECT_EQ(out.lookup().best().checkpoint_id(), 8u);
  ASSERT_EQ(out.related_size(), 1);
  EXPECT_EQ(out.related(0).seq(), 3u);
  EXPECT_EQ(out.related(0).kind(), v1::EVENT_KIND_ADMIT);
  EXPECT_EQ(out.summary(), e.summary);
  EXPECT_EQ(order.checkpoint_id, 8u);
  EXPECT_FALSE(order.all);
  EXPECT_TRUE(order.include_disk);
}

TEST(ProtoConvertTest, SlotCallsConvertAndCheckModeAndTokens) {
  v1::StartSlotRequest start;
  start.set_session_id(3);
  start.set_slot(1);
  start.set_mode(v1::StartSlotRequest::MODE_CONTINUE);
  v1::StartSlotRequest no_mode = start;
  no_mode.set_mode(v1::StartSlotRequest::MODE_UNSPECIFIED);
  v1::UpdateFrontierRequest up;
  up.set_expected_depth(4);
  up.add_append_tokens(9);
  up.add_append_tokens(10);

  absl::StatusOr<SlotStart> started = SlotStartFromProto(start);
  absl::StatusOr<FrontierUpdate> updated = FrontierUpdateFromProto(up);

  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_FALSE(started->cold);
  EXPECT_EQ(started->slot, 1u);
  EXPECT_THAT(SlotStartFromProto(no_mode).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(updated->tokens, (std::vector<TokenId>{9, 10}));
  EXPECT_EQ(updated->expected_depth, 4u);
}

TEST(ProtoConvertTest, ARestoreRequestKeepsItsFieldsAndChecksItsStrings) {
  v1::AcquireRestoreRequest req;
  req.set_session_id(3);
  req.set_model_id(4);
  req.set_checkpoint_id(5);
  req.set_slot(6);
  req.set_conversation("c");
  req.set_lease_ms(1500);
  v1::AcquireRestoreRequest long_name = req;
  long_name.set_conversation(std::string(WireLimits::kMaxNameBytes + 1, 'x'));

  absl::StatusOr<RestoreRequest> out = RestoreRequestFromProto(req);

  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->session_id, 3u);
  EXPECT_EQ(out->model_id, 4u);
  EXPECT_EQ(out->checkpoint_id, 5u);
  EXPECT_EQ(out->slot, 6u);
  EXPECT_EQ(out->conversation, "c");
  EXPECT_EQ(out->lease, absl::Milliseconds(1500));
  ExpectNamed(RestoreRequestFromProto(long_name).status(), "conversation");
}

TEST(ProtoConvertTest, ALeaseCarriesItsRegionsAndATailOnlyWhenThereIsOne) {
  RestoreGrant grant;
  grant.lease_id = 9;
  grant.checkpoint_id = 5;
  grant.depth = 40;
  grant.loaded_from = Tier::kDisk;
  grant.ready = false;
  grant.awaiting_spills = {77};
  grant.chunks.push_back(ChunkGrant{11, 16, 16, ArenaHandle{1, 4096, 1024}, 0xabc});
  grant.private_state.region = ArenaHandle{1, 8192, 64};
  grant.private_state.checksum = 0xdef;
  RestoreGrant with_tail = grant;
  with_tail.tail = StateGrant{32, 8, ArenaHandle{1, 8256, 512}, 0x123};

  v1::RestoreLease out = ToProtoLease(grant);
  v1::RestoreLease out_tail = ToProtoLease(with_tail);

  EXPECT_EQ(out.lease_id(), 9u);
  EXPECT_EQ(out.depth(), 40u);
  EXPECT_EQ(out.loaded_from(), v1::TIER_DISK);
  EXPECT_FALSE(out.ready());
  ASSERT_EQ(out.awaiting_spills_size(), 1);
  ASSERT_EQ(out.chunks_size(), 1);
  EXPECT_EQ(out.chunks(0).first_row(), 16u);
  EXPECT_EQ(out.chunks(0).region().offset(), 4096u);
  EXPECT_EQ(out.chunks(0).checksum(), 0xabcu);
  EXPECT_EQ(out.private_state().region().length(), 64u);
  EXPECT_EQ(out.private_state().checksum(), 0xdefu);
  EXPECT_FALSE(out.has_tail());
  ASSERT_TRUE(out_tail.has_tail());
  EXPECT_EQ(out_tail.tail().first_row(), 32u);
  EXPECT_EQ(out_tail.tail().rows(), 8u);
  EXPECT_EQ(out_tail.tail().checksum(), 0x123u);
}

TEST(ProtoConvertTest, CaptureCallsConvertAndCheckTheirFields) {
  v1::ReserveCaptureRequest reserve;
  reserve.set_session_id(3);
  reserve.set_slot(2);
  reserve.set_depth(40);
  reserve.set_kind(v1::CAPTURE_KIND_STABLE);
  v1::ReserveCaptureRequest no_kind = reserve;
  no_kind.set_kind(v1::CAPTURE_KIND_UNSPECIFIED);
  v1::AbortCaptureRequest abort;
  abort.set_reason(std::string(WireLimits::kMaxTextBytes + 1, 'x'));
  v1::ReleaseLeaseRequest release;
  release.set_failure(std::string(WireLimits::kMaxTextBytes + 1, 'x'));
  CaptureGrant grant;
  grant.reservation_id = 12;
  grant.private_state.region = ArenaHandle{1, 0, 64};
  grant.evicted = {4, 5};

  absl::StatusOr<CaptureRequest> out = CaptureRequestFromProto(reserve);
  v1::CaptureReservation reservation = ToProtoReservation(grant);
  const CaptureCommit commit = CaptureCommitFromProto([] {
    v1::CommitCaptureRequest c;
    c.set_reservation_id(12);
    c.set_tail_checksum(7);
    return c;
  }());

  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->kind, CaptureKind::kStable);
  EXPECT_EQ(out->depth, 40u);
  EXPECT_EQ(out->stable_boundary, -1);  // 0 on the wire: none.
  EXPECT_FALSE(CaptureRequestFromProto(no_kind).ok());
  ExpectNamed(CaptureAbortFromProto(abort).status(), "reason");
  ExpectNamed(LeaseReleaseFromProto(release).status(), "failure");
  EXPECT_EQ(reservation.reservation_id(), 12u);
  EXPECT_EQ(reservation.private_state().region().length(), 64u);
  EXPECT_FALSE(reservation.has_tail());
  EXPECT_EQ(reservation.evicted_size(), 2);
  EXPECT_EQ(commit.reservation_id, 12u);
  EXPECT_EQ(commit.tail_checksum, 7u);
  EXPECT_EQ(ToProtoCommit(CommitResult{12, true}).queued_for_disk(), true);
}

}  // namespace
}  // namespace cairn::cache
