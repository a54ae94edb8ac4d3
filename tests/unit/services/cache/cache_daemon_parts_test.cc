// The daemon's calls that take its own types (sessions, spill reports, slot activity,
// inspection), in process and without gRPC, so that they run under TSan with the unit label.

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "common/concurrency/mutex.h"
#include "common/time/clock.h"
#include "gtest/gtest.h"
#include "services/cache/cache_daemon.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

constexpr uint32_t kChunkRows = 16;

// Keeps what the daemon sends to a session. Thread-safe.
class RecordingSink final : public SessionSink {
 public:
  void Send(v1::SessionServerMessage message) override ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    messages_.push_back(std::move(message));
  }
  std::vector<v1::SessionServerMessage> messages() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return messages_;
  }

 private:
  mutable Mutex mu_;
  std::vector<v1::SessionServerMessage> messages_ ABSL_GUARDED_BY(mu_);
};

class CacheDaemonPartsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CacheDaemonOptions options;
    options.cache.ram_bytes = 4 << 20;
    absl::StatusOr<std::unique_ptr<CacheDaemon>> daemon = CacheDaemon::Create(options, &clock_);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    absl::StatusOr<SessionWelcome> welcome =
        daemon_->OpenSession(SessionHello{"unit", 1, 2}, &sink_);
    ASSERT_TRUE(welcome.ok()) << welcome.status();
    session_ = welcome->session_id;
    v1::RegisterModelRequest reg;
    reg.set_session_id(session_);
    reg.mutable_identity()->set_digest("unit-model");
    reg.mutable_layout()->set_chunk_rows(kChunkRows);
    v1::StateComponent* rows = reg.mutable_layout()->add_components();
    rows->set_id(0);
    rows->set_kind(v1::COMPONENT_KIND_ROWS);
    rows->set_bytes_per_row(64);
    v1::StateComponent* priv = reg.mutable_layout()->add_components();
    priv->set_id(1);
    priv->set_kind(v1::COMPONENT_KIND_PRIVATE);
    priv->set_private_bytes(4096);
    v1::RegisterModelResponse registered;
    ASSERT_TRUE(daemon_->RegisterModel(reg, &registered).ok());
    model_ = registered.model_id();
  }

  // Cold-starts slot 0 on `n` tokens and captures them; returns the checkpoint id.
  uint64_t Capture(uint64_t n) {
    v1::StartSlotRequest start;
    start.set_session_id(session_);
    start.set_model_id(model_);
    start.set_mode(v1::StartSlotRequest::MODE_COLD);
    v1::StartSlotResponse started;
    EXPECT_TRUE(daemon_->StartSlot(start, &started).ok());
    v1::UpdateFrontierRequest up;
    up.set_session_id(session_);
    up.set_model_id(model_);
    for (uint64_t i = 0; i < n; ++i) up.add_append_tokens(static_cast<uint32_t>(100 + i));
    v1::UpdateFrontierResponse extended;
    EXPECT_TRUE(daemon_->UpdateFrontier(up, &extended).ok());
    v1::ReserveCaptureRequest rr;
    rr.set_session_id(session_);
    rr.set_model_id(model_);
    rr.set_depth(n);
    rr.set_kind(v1::CAPTURE_KIND_END);
    v1::CaptureReservation reserved;
    absl::Status s = daemon_->ReserveCapture(rr, &reserved);
    EXPECT_TRUE(s.ok()) << s;
    v1::CommitCaptureRequest cr;
    cr.set_session_id(session_);
    cr.set_reservation_id(reserved.reservation_id());
    v1::CommitCaptureResponse committed;
    s = daemon_->CommitCapture(cr, &committed);
    EXPECT_TRUE(s.ok()) << s;
    return committed.checkpoint_id();
  }

  FakeClock clock_;
  RecordingSink sink_;
  std::unique_ptr<CacheDaemon> daemon_;
  uint64_t session_ = 0;
  uint64_t model_ = 0;
};

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
  v1::AcquireRestoreRequest ar;
  ar.set_session_id(session_);
  ar.set_model_id(model_);
  ar.set_checkpoint_id(id);
  ar.set_slot(1);
  v1::RestoreLease lease;
  ASSERT_TRUE(daemon_->AcquireRestore(ar, &lease).ok());
  ASSERT_FALSE(lease.ready());  // It waits for slot 0's rows to be spilled.
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
    if (m.has_lease_ready() && m.lease_ready().lease_id() == lease.lease_id()) {
      answered = !m.lease_ready().ok();
    }
  }
  EXPECT_TRUE(answered);  // The waiting lease is told, not left to poll.
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

// Heartbeats, slot messages and inspection race the calls that take the daemon's lock (run
// under TSan with the unit label).
TEST_F(CacheDaemonPartsTest, HeartbeatsAndInspectionRaceCoreCallsSafely) {
  Capture(32);
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

  for (int i = 0; i < 500; ++i) {
    v1::LookupRequest lookup;
    lookup.set_session_id(session_);
    lookup.set_model_id(model_);
    for (uint32_t t = 0; t < 40; ++t) lookup.add_tokens(100 + t);
    v1::LookupResponse found;
    ASSERT_TRUE(daemon_->Lookup(lookup, &found).ok());
    daemon_->Tick();
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(daemon_->Status().counts.lookups, 500u);
  EXPECT_TRUE(daemon_->Touch(session_).ok());
}

}  // namespace
}  // namespace cairn::cache
