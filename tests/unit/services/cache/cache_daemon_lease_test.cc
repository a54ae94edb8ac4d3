// The daemon's restore leases against what can happen while they are held: the checkpoint's
// disk copy quarantined under a lease, or the checkpoint dropped, a lease whose spills never come
// (in process, without gRPC, under TSan with the unit label).

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/cache/cache_daemon.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/cache_daemon_fixture.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

// The LeaseReady sent for lease `id` on `sink`, if any.
std::optional<v1::LeaseReady> LeaseReadyFor(const RecordingSink& sink, uint64_t id) {
  std::optional<v1::LeaseReady> out;
  for (const v1::SessionServerMessage& m : sink.messages()) {
    if (m.has_lease_ready() && m.lease_ready().lease_id() == id) out = m.lease_ready();
  }
  return out;
}

bool Overlap(const ArenaHandle& a, const ArenaHandle& b) {
  if (a.length == 0 || b.length == 0) return false;
  return a.offset < b.offset + b.length && b.offset < a.offset + a.length;
}

// With a disk tier and its scrubber, which quarantines a checkpoint whose files are damaged.
class QuarantineUnderLeaseTest : public DiskTierPartsTest {
 protected:
  void SetUp() override { StartWithDisk("quarantine-under-lease"); }

  // Flips a byte in every state file on disk.
  void DamageStateFiles() {
    for (const auto& f : std::filesystem::directory_iterator(root_ + "/states")) {
      std::fstream file(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      file.seekg(100);
      const char c = static_cast<char>(file.get());
      file.seekp(100);
      file.put(static_cast<char>(c ^ 0x5a));
    }
  }
};

// A quarantine takes only the disk copy of a checkpoint also in RAM: the regions a lease on it
// hands out stay its own, and nothing else is given them.
TEST_F(QuarantineUnderLeaseTest, TheRegionsALeaseReadsStayThroughAQuarantineOfTheDiskCopy) {
  const uint64_t id = Capture(40);  // 2 full chunks borrowed in slot 0, 8 rows of tail.
  absl::StatusOr<RestoreGrant> lease = daemon_->AcquireRestore(RestoreOf(id, 1));
  ASSERT_TRUE(lease.ok()) << lease.status();
  AnswerSpills();  // The lease becomes ready; the checkpoint's write to disk follows.
  std::optional<v1::LeaseReady> ready = LeaseReadyFor(sink_, lease->lease_id);
  ASSERT_TRUE(ready.has_value() && ready->ok());
  Flush();
  absl::StatusOr<std::vector<CheckpointRow>> rows = daemon_->Checkpoints(0, Tier::kNone);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  ASSERT_TRUE((*rows)[0].on_disk);
  std::vector<ArenaHandle> leased = {lease->private_state.region, lease->tail.region};
  for (const ChunkGrant& c : lease->chunks) leased.push_back(c.region);
  const uint64_t used_under_lease = daemon_->arena().allocator().used_bytes();
  DamageStateFiles();

  daemon_->ScrubPassForTest();  // Quarantines the disk copy while the lease reads the RAM one.
  const uint64_t used_after_quarantine = daemon_->arena().allocator().used_bytes();
  StartCold(39);  // A new capture asks the arena for regions.
  absl::StatusOr<CaptureGrant> capture = daemon_->ReserveCapture(CaptureAt(39));

  absl::StatusOr<std::vector<CheckpointRow>> left = daemon_->Checkpoints(0, Tier::kNone);
  ASSERT_TRUE(left.ok()) << left.status();
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].id, id);
  EXPECT_EQ((*left)[0].tier, Tier::kRam);
  EXPECT_EQ(used_after_quarantine, used_under_lease);
  ASSERT_TRUE(capture.ok()) << capture.status();
  for (const ArenaHandle& r : leased) {
    EXPECT_FALSE(Overlap(r, capture->private_state.region)) << "offset " << r.offset;
    EXPECT_FALSE(Overlap(r, capture->tail.region)) << "offset " << r.offset;
  }
  EXPECT_TRUE(daemon_->ReleaseLease(LeaseRelease{session_, lease->lease_id, true, ""}).ok());
  EXPECT_TRUE(daemon_->AbortCapture(CaptureAbort{session_, capture->reservation_id, "test"}).ok());
  // The checkpoint keeps its regions after the lease; the aborted reservation's are gone.
  EXPECT_EQ(daemon_->arena().allocator().used_bytes(), used_under_lease);
}

// A checkpoint only on disk is restored into a lease's own regions, then quarantined and dropped
// while the lease is held: the regions stay allocated, and given to no one else, until the
// lease is released (R7).
TEST_F(QuarantineUnderLeaseTest, ACheckpointDroppedUnderALeaseKeepsItsRegionsUntilTheRelease) {
  const uint64_t id = Capture(40);
  ASSERT_TRUE(daemon_->SlotIdle(session_, 0).ok());  // Its rows are spilled, then written.
  AnswerSpills();
  Flush();
  ASSERT_TRUE(daemon_->Evict(EvictOrder{id, false, false}).ok());  // Only on disk now.
  const uint64_t used_before = daemon_->arena().allocator().used_bytes();
  absl::StatusOr<RestoreGrant> lease = daemon_->AcquireRestore(RestoreOf(id, 1));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_EQ(lease->loaded_from, Tier::kDisk);
  ASSERT_TRUE(lease->ready);
  std::vector<ArenaHandle> leased = {lease->private_state.region, lease->tail.region};
  for (const ChunkGrant& c : lease->chunks) leased.push_back(c.region);
  const uint64_t used_under_lease = daemon_->arena().allocator().used_bytes();
  ASSERT_GT(used_under_lease, used_before);
  DamageStateFiles();

  daemon_->ScrubPassForTest();  // The checkpoint exists nowhere else: it is dropped.
  const uint64_t used_after_quarantine = daemon_->arena().allocator().used_bytes();
  StartCold(39);  // A new capture asks the arena for regions.
  absl::StatusOr<CaptureGrant> capture = daemon_->ReserveCapture(CaptureAt(39));

  absl::StatusOr<std::vector<CheckpointRow>> left = daemon_->Checkpoints(0, Tier::kNone);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty());
  EXPECT_EQ(used_after_quarantine, used_under_lease);
  ASSERT_TRUE(capture.ok()) << capture.status();
  for (const ArenaHandle& r : leased) {
    EXPECT_FALSE(Overlap(r, capture->private_state.region)) << "offset " << r.offset;
    EXPECT_FALSE(Overlap(r, capture->tail.region)) << "offset " << r.offset;
  }
  const uint64_t used_with_capture = daemon_->arena().allocator().used_bytes();
  EXPECT_TRUE(daemon_->ReleaseLease(LeaseRelease{session_, lease->lease_id, true, ""}).ok());
  // The lease's regions go with it; the new reservation's stay.
  EXPECT_EQ(daemon_->arena().allocator().used_bytes(),
            used_with_capture - (used_under_lease - used_before));
  EXPECT_TRUE(daemon_->AbortCapture(CaptureAbort{session_, capture->reservation_id, "test"}).ok());
  EXPECT_EQ(daemon_->arena().allocator().used_bytes(), used_before);
}

TEST_F(CacheDaemonPartsTest, ALeaseWhoseSpillsNeverComeFailsAfterTheWaitBoundAndUnpins) {
  const uint64_t id = Capture(40);  // Its rows stay borrowed in slot 0, never spilled here.
  absl::StatusOr<RestoreGrant> lease = daemon_->AcquireRestore(RestoreOf(id, 1));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_FALSE(lease->ready);

  clock_.Advance(absl::Seconds(30));  // Within the bound (max_lease_wait, 1 min): waiting.
  ASSERT_TRUE(daemon_->Touch(session_).ok());
  daemon_->Tick();
  const std::optional<v1::LeaseReady> early = LeaseReadyFor(sink_, lease->lease_id);
  clock_.Advance(absl::Minutes(3));  // Past it.
  ASSERT_TRUE(daemon_->Touch(session_).ok());
  daemon_->Tick();

  EXPECT_FALSE(early.has_value());
  const std::optional<v1::LeaseReady> failed = LeaseReadyFor(sink_, lease->lease_id);
  ASSERT_TRUE(failed.has_value());  // Told, as for any lease that fails while it waits.
  EXPECT_FALSE(failed->ok());
  EXPECT_FALSE(failed->failure().empty());
  EXPECT_THAT(daemon_->ReleaseLease(LeaseRelease{session_, lease->lease_id, false, ""}),
              StatusIs(absl::StatusCode::kNotFound));
  // The checkpoint is no longer pinned, and slot 1 may take another lease.
  absl::StatusOr<std::vector<CheckpointId>> evicted = daemon_->Evict(EvictOrder{id, false, false});
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_EQ(*evicted, std::vector<CheckpointId>{id});
}

}  // namespace
}  // namespace cairn::cache
