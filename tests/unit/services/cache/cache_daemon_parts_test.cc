// The daemon's calls that take its own types (sessions, spill reports, slot activity,
// restores, captures, inspection), in process and without gRPC, so that they run under TSan
// with the unit label.

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "common/concurrency/mutex.h"
#include "common/time/clock.h"
#include "gtest/gtest.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/cache_rpc.h"
#include "services/cache/proto_convert.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/cache_daemon_fixture.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

TEST_F(CacheDaemonPartsTest, AWelcomeNamesTheSessionAndTheHeartbeatAndDrainingRefusesMore) {
  RecordingSink other;

  absl::StatusOr<SessionWelcome> second = daemon_->OpenSession(SessionHello{"b", 2, 1}, &other);
  daemon_->BeginDrain();
  absl::StatusOr<SessionWelcome> third = daemon_->OpenSession(SessionHello{"c", 3, 1}, &other);

  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(second->session_id, session_);
  EXPECT_EQ(second->cache_incarnation, daemon_->incarnation());
  EXPECT_EQ(second->arena_bytes, daemon_->arena().size());
  EXPECT_GT(second->heartbeat_interval, absl::ZeroDuration());
  EXPECT_GT(second->session_timeout, second->heartbeat_interval);
  EXPECT_THAT(third.status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(daemon_->Status().sessions, 2u);
}

TEST_F(CacheDaemonPartsTest, SlotMessagesAreBoundedByTheDeclaredSlotsAndNeedAnOpenSession) {
  EXPECT_TRUE(daemon_->SlotBusy(session_, 1).ok());
  EXPECT_TRUE(daemon_->SlotIdle(session_, 1).ok());
  EXPECT_THAT(daemon_->SlotBusy(session_, 2), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(daemon_->SlotIdle(session_ + 1000, 0), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CacheDaemonPartsTest, ASpillReportForNoOutstandingSpillIsNotFound) {
  SpillReport report;
  report.spill_id = 99;
  report.chunk_ids = {1};

  EXPECT_THAT(daemon_->SpillDone(session_, report), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(daemon_->SpillDone(session_ + 1000, report), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CacheDaemonPartsTest, ASpillReportWithWrongChecksumsIsDataLossAndDropsTheCheckpoint) {
  const uint64_t id = Capture(40);  // Its rows stay borrowed in slot 0.
  absl::StatusOr<RestoreGrant> lease = daemon_->AcquireRestore(RestoreOf(id, 1));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_FALSE(lease->ready);  // It waits for slot 0's rows to be spilled.
  SpillReport report;
  for (const v1::SessionServerMessage& m : sink_.messages()) {
    if (!m.has_spill_request()) continue;
    report.spill_id = m.spill_request().spill_id();
    for (const v1::ChunkSpill& c : m.spill_request().chunks()) {
      report.chunk_ids.push_back(c.chunk_id());
      report.checksums.push_back(1);  // Not the XXH3 of what the region holds.
    }
  }
  ASSERT_NE(report.spill_id, 0u);

  absl::Status done = daemon_->SpillDone(session_, report);

  EXPECT_THAT(done, StatusIs(absl::StatusCode::kDataLoss));
  bool evented = false;
  for (const v1::Event& e : daemon_->EventsAfter(0, 0)) {
    if (e.kind() == v1::EVENT_KIND_QUARANTINE && e.checkpoint_id() == id &&
        absl::StrContains(e.reason(), "data loss")) {
      evented = true;
    }
  }
  EXPECT_TRUE(evented);
  absl::StatusOr<std::vector<CheckpointRow>> left = daemon_->Checkpoints(0, Tier::kNone);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty());
  bool answered = false;
  for (const v1::SessionServerMessage& m : sink_.messages()) {
    if (m.has_lease_ready() && m.lease_ready().lease_id() == lease->lease_id) {
      answered = !m.lease_ready().ok();
    }
  }
  EXPECT_TRUE(answered);  // The waiting lease is told, not left to poll.
}

TEST_F(CacheDaemonPartsTest, ALeaseWaitingForASpillIsToldReadyAndReleasedOnce) {
  const uint64_t id = Capture(40);  // 2 full chunks borrowed in slot 0, 8 rows of tail.

  absl::StatusOr<RestoreGrant> lease = daemon_->AcquireRestore(RestoreOf(id, 1));
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_FALSE(lease->ready);
  EXPECT_FALSE(lease->awaiting_spills.empty());
  AnswerSpills();

  EXPECT_EQ(lease->checkpoint_id, id);
  EXPECT_EQ(lease->depth, 40);
  EXPECT_EQ(lease->loaded_from, Tier::kRam);
  ASSERT_EQ(lease->chunks.size(), 2u);
  EXPECT_EQ(lease->chunks[1].first_row, kChunkRows);
  EXPECT_EQ(lease->tail.first_row, 2 * kChunkRows);
  EXPECT_EQ(lease->tail.rows, 8u);
  EXPECT_GT(lease->private_state.region.length, 0u);
  bool ready = false;
  for (const v1::SessionServerMessage& m : sink_.messages()) {
    if (m.has_lease_ready() && m.lease_ready().lease_id() == lease->lease_id) {
      ready = m.lease_ready().ok() && m.lease_ready().chunks_size() == 2;
    }
  }
  EXPECT_TRUE(ready);
  EXPECT_TRUE(daemon_->ReleaseLease(LeaseRelease{session_, lease->lease_id, true, ""}).ok());
  EXPECT_THAT(daemon_->ReleaseLease(LeaseRelease{session_, lease->lease_id, true, ""}),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CacheDaemonPartsTest, OneLeasePerSlotAndAnotherSessionCannotReleaseIt) {
  const uint64_t id = Capture(32);
  RecordingSink other_sink;
  absl::StatusOr<SessionWelcome> other =
      daemon_->OpenSession(SessionHello{"other", 2, 1}, &other_sink);
  ASSERT_TRUE(other.ok()) << other.status();

  absl::StatusOr<RestoreGrant> first = daemon_->AcquireRestore(RestoreOf(id, 1));
  absl::StatusOr<RestoreGrant> second = daemon_->AcquireRestore(RestoreOf(id, 1));
  RestoreRequest unknown = RestoreOf(id + 1000, 0);

  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(second.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(daemon_->AcquireRestore(unknown).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(daemon_->ReleaseLease(LeaseRelease{other->session_id, first->lease_id, true, ""}),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(daemon_->ReleaseLease(LeaseRelease{session_, first->lease_id, false, "test"}).ok());
}

// How the session that owes a spill dies.
enum class Death { kStreamClosed, kHeartbeatTimeout };

// With a disk tier, so that a checkpoint's persist waits for its spill.
class SpillOwnerDeathTest : public DiskTierPartsTest, public ::testing::WithParamInterface<Death> {
 protected:
  void SetUp() override {
    StartWithDisk(std::string("spill-owner-death-") +
                  (GetParam() == Death::kStreamClosed ? "closed" : "timeout"));
  }
};

TEST_P(SpillOwnerDeathTest, TheWaitingLeaseFailsAndTheCheckpointGoesWithNothingLeft) {
  const uint64_t id = Capture(40);                    // Its 2 full chunks stay borrowed in slot 0.
  ASSERT_EQ(daemon_->DeferredPersistsForTest(), 1u);  // Written once they are spilled.
  RecordingSink other_sink;
  absl::StatusOr<SessionWelcome> other =
      daemon_->OpenSession(SessionHello{"other", 2, 1}, &other_sink);
  ASSERT_TRUE(other.ok()) << other.status();
  ModelRegistration reg = Registration();
  reg.session_id = other->session_id;
  absl::StatusOr<RegisteredModel> model = daemon_->RegisterModel(reg);
  ASSERT_TRUE(model.ok()) << model.status();
  RestoreRequest restore = RestoreOf(id, 0);
  restore.session_id = other->session_id;
  restore.model_id = model->model_id;
  absl::StatusOr<RestoreGrant> lease = daemon_->AcquireRestore(restore);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_FALSE(lease->ready);  // It waits for the first session's spill, never performed.

  if (GetParam() == Death::kStreamClosed) {
    daemon_->CloseSession(session_, "stream closed");
  } else {
    clock_.Advance(absl::Seconds(11));  // Past the session timeout; the other one stays.
    ASSERT_TRUE(daemon_->Touch(other->session_id).ok());
    daemon_->Tick();
  }

  bool failed = false;
  for (const v1::SessionServerMessage& m : other_sink.messages()) {
    if (m.has_lease_ready() && m.lease_ready().lease_id() == lease->lease_id) {
      failed = !m.lease_ready().ok() && !m.lease_ready().failure().empty();
    }
  }
  EXPECT_TRUE(failed);  // Told, not left to poll.
  bool evented = false;
  for (const v1::Event& e : daemon_->EventsAfter(0, 0)) {
    evented |= e.kind() == v1::EVENT_KIND_QUARANTINE && e.checkpoint_id() == id;
  }
  EXPECT_TRUE(evented);
  absl::StatusOr<std::vector<CheckpointRow>> left = daemon_->Checkpoints(0, Tier::kNone);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty());
  EXPECT_EQ(daemon_->DeferredPersistsForTest(), 0u);
  EXPECT_EQ(daemon_->arena().allocator().used_bytes(), 0u);
  EXPECT_THAT(daemon_->AcquireRestore(restore).status(), StatusIs(absl::StatusCode::kNotFound));
}

INSTANTIATE_TEST_SUITE_P(CacheDaemonPartsTest, SpillOwnerDeathTest,
                         ::testing::Values(Death::kStreamClosed, Death::kHeartbeatTimeout),
                         [](const ::testing::TestParamInfo<Death>& p) {
                           return p.param == Death::kStreamClosed ? "StreamClosed"
                                                                  : "HeartbeatTimeout";
                         });

TEST_F(CacheDaemonPartsTest, AReadyLeaseExpiresOnTheTickAndFreesTheSlot) {
  const uint64_t id = Capture(32);
  absl::StatusOr<RestoreGrant> lease = daemon_->AcquireRestore(RestoreOf(id, 1));
  ASSERT_TRUE(lease.ok()) << lease.status();
  AnswerSpills();

  clock_.Advance(absl::Minutes(3));  // Past the longest lease.
  ASSERT_TRUE(daemon_->Touch(session_).ok());
  daemon_->Tick();

  EXPECT_THAT(daemon_->ReleaseLease(LeaseRelease{session_, lease->lease_id, true, ""}),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(daemon_->AcquireRestore(RestoreOf(id, 1)).ok());
}

// With a disk tier and its scrubber.
class DamagedStateFileTest : public DiskTierPartsTest {
 protected:
  void SetUp() override { StartWithDisk("damaged-state-file"); }
};

TEST_F(DamagedStateFileTest, ACheckpointWithoutChunksWhoseStateFileIsDamagedIsForgotten) {
  StartCold(8);  // Private state and an 8-row tail: no chunk, written at once.
  CaptureRequest capture = CaptureAt(8);
  capture.kind = CaptureKind::kLearned;
  absl::StatusOr<CaptureGrant> reserved = daemon_->ReserveCapture(capture);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  absl::StatusOr<CommitResult> committed =
      daemon_->CommitCapture(CaptureCommit{session_, reserved->reservation_id, 0, 0});
  ASSERT_TRUE(committed.ok()) << committed.status();
  ASSERT_TRUE(committed->queued_for_disk);
  Flush();
  // Only on disk: a copy in RAM would stay (its bytes never came from the damaged file).
  ASSERT_TRUE(daemon_->Evict(EvictOrder{committed->checkpoint_id, false, false}).ok());
  for (const auto& f : std::filesystem::directory_iterator(root_ + "/states")) {
    std::fstream file(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('\x5a');
  }

  daemon_->ScrubPassForTest();

  // The policy forgets it as the store did: no tier offers it, and its bytes are free.
  absl::StatusOr<std::vector<CheckpointRow>> left = daemon_->Checkpoints(0, Tier::kNone);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty());
  EXPECT_EQ(daemon_->arena().allocator().used_bytes(), 0u);
  bool evented = false;
  for (const v1::Event& e : daemon_->EventsAfter(0, 0)) {
    evented |=
        e.kind() == v1::EVENT_KIND_QUARANTINE && e.checkpoint_id() == committed->checkpoint_id;
  }
  EXPECT_TRUE(evented);
}

TEST_F(CacheDaemonPartsTest, ACommitWhoseChecksumDiffersIsDataLossAndLeavesNoCheckpoint) {
  StartCold(20);
  absl::StatusOr<CaptureGrant> reserved = daemon_->ReserveCapture(CaptureAt(20));
  ASSERT_TRUE(reserved.ok()) << reserved.status();

  absl::StatusOr<CaptureGrant> twice = daemon_->ReserveCapture(CaptureAt(20));
  absl::StatusOr<CaptureGrant> wrong_depth = daemon_->ReserveCapture(CaptureAt(21, 1));
  absl::StatusOr<CommitResult> bad =
      daemon_->CommitCapture(CaptureCommit{session_, reserved->reservation_id, 1, 0});

  EXPECT_THAT(twice.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(wrong_depth.ok());
  EXPECT_THAT(bad.status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(reserved->tail.rows, 4u);
  EXPECT_EQ(reserved->tail.first_row, kChunkRows);
  EXPECT_THAT(
      daemon_->CommitCapture(CaptureCommit{session_, reserved->reservation_id, 0, 0}).status(),
      StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<std::vector<CheckpointRow>> left = daemon_->Checkpoints(0, Tier::kNone);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty());
}

TEST_F(CacheDaemonPartsTest, AbortedAndExpiredReservationsGiveTheirRegionsBack) {
  const uint64_t used_before = daemon_->arena().allocator().used_bytes();
  Capture(20);
  const uint64_t used_with_one = daemon_->arena().allocator().used_bytes();
  FrontierUpdate up;
  up.session_id = session_;
  up.model_id = model_;
  up.expected_depth = 20;
  up.tokens = {7};
  absl::StatusOr<uint64_t> depth = daemon_->UpdateFrontier(up);
  ASSERT_TRUE(depth.ok()) << depth.status();
  ASSERT_EQ(*depth, 21u);

  absl::StatusOr<CaptureGrant> aborted = daemon_->ReserveCapture(CaptureAt(21));
  ASSERT_TRUE(aborted.ok()) << aborted.status();
  EXPECT_TRUE(daemon_->AbortCapture(CaptureAbort{session_, aborted->reservation_id, ""}).ok());
  EXPECT_THAT(daemon_->AbortCapture(CaptureAbort{session_, aborted->reservation_id, ""}),
              StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<CaptureGrant> expiring = daemon_->ReserveCapture(CaptureAt(21));
  ASSERT_TRUE(expiring.ok()) << expiring.status();
  clock_.Advance(absl::Minutes(3));
  ASSERT_TRUE(daemon_->Touch(session_).ok());
  daemon_->Tick();

  EXPECT_GT(used_with_one, used_before);
  EXPECT_EQ(daemon_->arena().allocator().used_bytes(), used_with_one);
  EXPECT_THAT(
      daemon_->CommitCapture(CaptureCommit{session_, expiring->reservation_id, 0, 0}).status(),
      StatusIs(absl::StatusCode::kNotFound));
}

// The wire side (cache_rpc.h) runs a request with a client_request_id once per session.
TEST_F(CacheDaemonPartsTest, ARetriedReservationOrLeaseGetsTheFirstAnswer) {
  const uint64_t id = Capture(32);
  v1::UpdateFrontierRequest up;
  up.set_session_id(session_);
  up.set_model_id(model_);
  up.set_expected_depth(32);
  up.add_append_tokens(5);
  up.set_client_request_id(41);
  v1::UpdateFrontierResponse extended;
  ASSERT_TRUE(rpc::UpdateFrontier(*daemon_, up, &extended).ok());
  v1::UpdateFrontierResponse extended_again;
  ASSERT_TRUE(rpc::UpdateFrontier(*daemon_, up, &extended_again).ok());
  v1::ReserveCaptureRequest reserve;
  reserve.set_session_id(session_);
  reserve.set_model_id(model_);
  reserve.set_depth(33);
  reserve.set_kind(v1::CAPTURE_KIND_END);
  reserve.set_client_request_id(42);
  v1::AcquireRestoreRequest restore;
  restore.set_session_id(session_);
  restore.set_model_id(model_);
  restore.set_checkpoint_id(id);
  restore.set_slot(1);
  restore.set_client_request_id(43);

  v1::CaptureReservation first;
  v1::CaptureReservation retry;
  absl::Status s1 = rpc::ReserveCapture(*daemon_, reserve, &first);
  absl::Status s2 = rpc::ReserveCapture(*daemon_, reserve, &retry);
  v1::RestoreLease lease;
  v1::RestoreLease lease_retry;
  absl::Status r1 = rpc::AcquireRestore(*daemon_, restore, &lease);
  absl::Status r2 = rpc::AcquireRestore(*daemon_, restore, &lease_retry);
  v1::AcquireRestoreRequest other_method = restore;
  other_method.set_client_request_id(42);  // The id of the reservation.
  v1::RestoreLease refused;

  ASSERT_TRUE(s1.ok()) << s1;
  ASSERT_TRUE(s2.ok()) << s2;
  EXPECT_EQ(extended_again.depth(), 33u);  // Not appended twice.
  EXPECT_EQ(retry.reservation_id(), first.reservation_id());
  ASSERT_TRUE(r1.ok()) << r1;
  ASSERT_TRUE(r2.ok()) << r2;
  EXPECT_EQ(lease_retry.lease_id(), lease.lease_id());
  EXPECT_THAT(rpc::AcquireRestore(*daemon_, other_method, &refused),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(CacheDaemonPartsTest, InspectionShowsACommittedCheckpointInItsTierAndTree) {
  const uint64_t id = Capture(40);

  absl::StatusOr<std::vector<CheckpointRow>> all = daemon_->Checkpoints(0, Tier::kNone);
  absl::StatusOr<std::vector<CheckpointRow>> on_disk = daemon_->Checkpoints(model_, Tier::kDisk);
  absl::StatusOr<TreeView> tree = daemon_->Tree(0, 16);

  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].id, id);
  EXPECT_EQ((*all)[0].depth, 40);
  EXPECT_EQ((*all)[0].tier, Tier::kRam);
  EXPECT_TRUE((*all)[0].borrowed);  // Its rows are still in slot 0.
  EXPECT_GT((*all)[0].private_bytes, 0u);
  ASSERT_TRUE(on_disk.ok()) << on_disk.status();
  EXPECT_TRUE(on_disk->empty());
  ASSERT_TRUE(tree.ok()) << tree.status();
  bool found = false;
  for (const TreeView::Node& n : tree->nodes) {
    for (const auto& [checkpoint, tier] : n.checkpoints) {
      if (checkpoint == id) found = n.depth == 40 && tier == Tier::kRam;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_THAT(daemon_->Checkpoints(model_ + 1000, Tier::kNone).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(daemon_->Tree(model_ + 1000, 16).status(), StatusIs(absl::StatusCode::kNotFound));
  const DaemonStatus status = daemon_->Status();
  EXPECT_EQ(status.ram.checkpoints, 1u);
  EXPECT_GT(status.ram.used_bytes, 0u);
  EXPECT_FALSE(status.disk_enabled);
}

TEST_F(CacheDaemonPartsTest, RegisteringAgainGivesTheSameModelUnlessTheLayoutDiffers) {
  const uint64_t id = Capture(40);
  ASSERT_NE(id, 0u);
  ModelRegistration other_layout = Registration();
  other_layout.layout.chunk_rows = 2 * kChunkRows;
  ModelRegistration closed = Registration("second-model");
  closed.session_id = session_ + 1000;
  ModelRegistration empty = Registration("");

  absl::StatusOr<RegisteredModel> again = daemon_->RegisterModel(Registration());
  absl::StatusOr<RegisteredModel> second = daemon_->RegisterModel(Registration("second-model"));

  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->model_id, model_);
  EXPECT_EQ(again->ram_checkpoints, 1u);  // The capture above.
  EXPECT_EQ(again->disk_checkpoints, 0u);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(second->model_id, model_);
  EXPECT_EQ(second->ram_checkpoints, 0u);
  EXPECT_THAT(daemon_->RegisterModel(other_layout).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(daemon_->RegisterModel(closed).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(daemon_->RegisterModel(empty).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(CacheDaemonPartsTest, ALookupFindsTheCaptureAndSaysWhatTheSlotWouldSpill) {
  const uint64_t id = Capture(40);  // 2 full chunks borrowed in slot 0.
  PromptLookup longer = LookupOf(48);
  longer.stable_boundary = 44;
  PromptLookup past = LookupOf(48);
  past.shared_boundary = 49;
  PromptLookup unknown_model = LookupOf(48);
  unknown_model.model_id = model_ + 1000;
  PromptLookup closed = LookupOf(48);
  closed.session_id = session_ + 1000;

  absl::StatusOr<LookupAnswer> found = daemon_->Lookup(longer);

  ASSERT_TRUE(found.ok()) << found.status();
  // Slot 0's live frontier and the RAM checkpoint both cover 40 tokens; live wins ties.
  EXPECT_EQ(found->result.best.depth, 40);
  bool ram_candidate = found->result.best.checkpoint == id;
  for (const Candidate& c : found->result.others) ram_candidate |= c.checkpoint == id;
  EXPECT_TRUE(ram_candidate);
  ASSERT_EQ(found->slot_spills.size(), 1u);
  EXPECT_EQ(found->slot_spills[0].slot, 0);
  EXPECT_EQ(found->slot_spills[0].bytes, 2 * kChunkRows * 64);  // Its 2 borrowed chunks.
  EXPECT_EQ(daemon_->Status().counts.lookups, 1u);
  EXPECT_THAT(daemon_->Lookup(past).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(daemon_->Lookup(LookupOf(0)).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(daemon_->Lookup(unknown_model).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(daemon_->Lookup(closed).status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CacheDaemonPartsTest, ExplainSaysWhatAPromptRestoresWithTheEventsOnItsPath) {
  const uint64_t id = Capture(40);
  ExplainQuery hit{0, LookupOf(48).tokens};  // 0: the first registered model.
  ExplainQuery cold{model_, {7, 8, 9}};

  absl::StatusOr<Explanation> restores = daemon_->Explain(hit);
  absl::StatusOr<Explanation> misses = daemon_->Explain(cold);

  ASSERT_TRUE(restores.ok()) << restores.status();
  EXPECT_EQ(restores->result.best.checkpoint, id);  // No session: no live candidates.
  EXPECT_EQ(restores->result.best.tier, Tier::kRam);
  EXPECT_TRUE(absl::StartsWith(restores->summary, "restores 40 of 48 tokens from"))
      << restores->summary;
  ASSERT_FALSE(restores->related.empty());
  EXPECT_EQ(restores->related[0].type, EventType::kAdmit);
  EXPECT_EQ(restores->related[0].checkpoint, id);
  ASSERT_TRUE(misses.ok()) << misses.status();
  EXPECT_EQ(misses->result.best.tier, Tier::kNone);
  EXPECT_TRUE(absl::StartsWith(misses->summary, "cold:")) << misses->summary;
  EXPECT_TRUE(misses->related.empty());
  EXPECT_THAT(daemon_->Explain(ExplainQuery{model_ + 1000, {1}}).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(daemon_->Explain(ExplainQuery{model_, {}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(CacheDaemonPartsTest, EvictTakesOneCheckpointOrAllAndSaysWhichWent) {
  const uint64_t first = Capture(40);
  AnswerSpills();  // Capture() below restarts slot 0: nothing of `first` stays borrowed.

  absl::StatusOr<std::vector<CheckpointId>> one = daemon_->Evict(EvictOrder{first, false, false});

  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, std::vector<CheckpointId>{first});
  EXPECT_THAT(daemon_->Evict(EvictOrder{first, false, false}).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(daemon_->Evict(EvictOrder{}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(daemon_->Evict(EvictOrder{0, true, true}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));  // No disk tier here.
  const uint64_t second = Capture(20);
  absl::StatusOr<std::vector<CheckpointId>> all = daemon_->Evict(EvictOrder{0, true, false});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, std::vector<CheckpointId>{second});
  absl::StatusOr<std::vector<CheckpointRow>> left = daemon_->Checkpoints(0, Tier::kNone);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty());
}

// The wire side of the same verbs: requests converted with the wire checks, answers converted
// back (cache_rpc.h).
TEST_F(CacheDaemonPartsTest, TheWireVerbsConvertAroundTheDaemon) {
  const uint64_t id = Capture(40);
  v1::LookupRequest lookup;
  lookup.set_session_id(session_);
  lookup.set_model_id(model_);
  for (uint32_t t = 0; t < 48; ++t) lookup.add_tokens(100 + t);
  v1::ExplainRequest explain;
  *explain.mutable_tokens() = lookup.tokens();
  v1::EvictRequest evict;
  evict.set_checkpoint_id(id);
  v1::LookupResponse found;
  v1::ExplainResponse explained;
  v1::EvictResponse evicted;

  CAIRN_ASSERT_OK(rpc::Lookup(*daemon_, lookup, &found));
  CAIRN_ASSERT_OK(rpc::Explain(*daemon_, explain, &explained));
  AnswerSpills();
  CAIRN_ASSERT_OK(rpc::Evict(*daemon_, evict, &evicted));

  EXPECT_EQ(found.best().depth(), 40u);
  EXPECT_EQ(found.slot_spills_size(), 1);
  EXPECT_EQ(explained.lookup().best().checkpoint_id(), id);
  ASSERT_GT(explained.related_size(), 0);
  EXPECT_EQ(explained.related(0).kind(), v1::EVENT_KIND_ADMIT);
  ASSERT_EQ(evicted.evicted_size(), 1);
  EXPECT_EQ(evicted.evicted(0), id);
  lookup.set_conversation(std::string(WireLimits::kMaxNameBytes + 1, 'c'));
  EXPECT_THAT(rpc::Lookup(*daemon_, lookup, &found), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Heartbeats, slot messages, inspection and restore leases race the calls that take the
// daemon's lock (run under TSan with the unit label).
TEST_F(CacheDaemonPartsTest, HeartbeatsAndInspectionRaceCoreCallsSafely) {
  const uint64_t checkpoint = Capture(32);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    while (!stop.load()) daemon_->Touch(session_).IgnoreError();
  });
  threads.emplace_back([&] {
    while (!stop.load()) {
      daemon_->SlotBusy(session_, 1).IgnoreError();
      daemon_->Status();
      daemon_->Checkpoints(0, Tier::kNone).IgnoreError();
    }
  });

  threads.emplace_back([&] {
    // Leases on slot 1 taken and given back while the main thread looks up and ticks.
    while (!stop.load()) {
      absl::StatusOr<RestoreGrant> lease = daemon_->AcquireRestore(RestoreOf(checkpoint, 1));
      AnswerSpills();
      if (lease.ok()) {
        daemon_->ReleaseLease(LeaseRelease{session_, lease->lease_id, true, ""}).IgnoreError();
      }
    }
  });

  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(daemon_->Lookup(LookupOf(40)).ok());
    daemon_->Tick();
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(daemon_->Status().counts.lookups, 500u);
  EXPECT_TRUE(daemon_->Touch(session_).ok());
}

}  // namespace
}  // namespace cairn::cache
