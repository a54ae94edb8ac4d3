// The policy core when the disk copy of a chunk or of a checkpoint is lost (ForgetDiskChunk,
// ForgetDiskCopy): only checkpoints whose bytes then exist nowhere are dropped; a checkpoint
// that also sits in RAM loses only its disk copy, with an event that says so.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/cache/core/checkpoint_cache.h"
#include "services/cache/core/event_log.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/core/cache_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

// One prompt grown in one slot, 4-row chunks of 10-byte rows and 100 bytes of private state.
class ForgetDiskChunkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CacheOptions options;
    options.disk_bytes = 100000;
    t_ = testing::MakeCache(options, testing::SimpleLayout(10, 100, 4));
    ASSERT_NE(t_, nullptr);
    cache().SetListener(&listener_);
    cache().events().AddSink(&events_);
    ASSERT_TRUE(cache().StartCold(slot_, testing::TestIds(), "A").ok());
  }

  CheckpointCache& cache() { return *t_->cache; }

  // Extends the prompt by `n` tokens and captures there as `kind`; with `persist`, writes it
  // to disk too. Returns its id.
  CheckpointId Capture(int64_t n, CaptureKind kind, bool persist) {
    EXPECT_TRUE(cache().ExtendSlot(slot_, testing::Tokens(n, next_token_)).ok());
    next_token_ += static_cast<TokenId>(n);
    absl::StatusOr<CaptureTicket> ticket = cache().BeginCapture(slot_, kind, "A", -1);
    EXPECT_TRUE(ticket.ok()) << ticket.status();
    if (!ticket.ok()) return 0;
    absl::StatusOr<CheckpointId> id = cache().CommitCapture(ticket->id);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return 0;
    if (persist) {
      EXPECT_TRUE(cache().BeginPersist(*id).ok());
      EXPECT_TRUE(cache().CommitPersist(*id).ok());
    }
    return *id;
  }

  // The quarantine events logged so far, of checkpoint `id`.
  std::vector<Event> QuarantinesOf(CheckpointId id) const {
    std::vector<Event> out;
    for (const Event& e : events_.events()) {
      if (e.type == EventType::kQuarantine && e.checkpoint == id) out.push_back(e);
    }
    return out;
  }

  // Replaying the events logged so far gives the cache's own state.
  void ExpectReplayMatchesTheCache() {
    absl::StatusOr<CacheStateSummary> replayed = ReplayEvents(events_.events());
    ASSERT_TRUE(replayed.ok()) << replayed.status();
    EXPECT_EQ(*replayed, cache().Summary());
  }

  std::unique_ptr<testing::TestCache> t_;
  testing::TierListener listener_;
  VectorEventSink events_;
  SlotKey slot_{1, 0};
  TokenId next_token_ = 0;
};

TEST_F(ForgetDiskChunkTest, ACheckpointAlsoInRamLosesOnlyItsDiskCopy) {
  const CheckpointId both = Capture(10, CaptureKind::kEnd, true);  // Chunks 0 and 1.
  const CheckpointId ram_only = Capture(1, CaptureKind::kGrid, false);
  const std::vector<ChunkId> chunks = cache().GetCheckpoint(both)->chunks;
  ASSERT_EQ(chunks.size(), 2u);
  const int64_t ram_used = cache().ram_ledger().used();

  absl::StatusOr<std::vector<CheckpointId>> ram_only_now =
      cache().ForgetDiskChunk(chunks[0], "checksum mismatch");

  ASSERT_TRUE(ram_only_now.ok()) << ram_only_now.status();
  EXPECT_EQ(*ram_only_now, std::vector<CheckpointId>{both});  // For the caller to write again.
  absl::StatusOr<CheckpointInfo> kept = cache().GetCheckpoint(both);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(kept->in_ram);
  EXPECT_FALSE(kept->on_disk);
  EXPECT_TRUE(cache().ShouldPersist(both));  // The policy may write it again.
  EXPECT_EQ(cache().disk_ledger().used(), 0);
  EXPECT_EQ(cache().ram_ledger().used(), ram_used);
  EXPECT_EQ(cache().GetChunk(chunks[1])->disk_refs, 0);
  EXPECT_TRUE(cache().GetCheckpoint(ram_only)->in_ram);
  EXPECT_EQ(listener_.left_disk, std::vector<CheckpointId>{both});
  EXPECT_TRUE(listener_.left_ram.empty());
  std::vector<Event> quarantined = QuarantinesOf(both);
  ASSERT_EQ(quarantined.size(), 1u);
  EXPECT_EQ(quarantined[0].tier, Tier::kDisk);
  EXPECT_EQ(quarantined[0].reason, "checksum mismatch");
  EXPECT_TRUE(QuarantinesOf(ram_only).empty());
  ExpectReplayMatchesTheCache();  // Replaying the events takes only the disk copy too.
}

TEST_F(ForgetDiskChunkTest, ADiskOnlyCheckpointOverTheChunkIsQuarantined) {
  const CheckpointId disk_only = Capture(10, CaptureKind::kEnd, true);
  const CheckpointId ram_only = Capture(1, CaptureKind::kGrid, false);
  CAIRN_ASSERT_OK(cache().Evict(disk_only, "explicit"));
  const ChunkId chunk = cache().GetCheckpoint(disk_only)->chunks[1];

  absl::StatusOr<std::vector<CheckpointId>> ram_only_now =
      cache().ForgetDiskChunk(chunk, "chunk file missing");

  ASSERT_TRUE(ram_only_now.ok()) << ram_only_now.status();
  EXPECT_TRUE(ram_only_now->empty());

  EXPECT_THAT(cache().GetCheckpoint(disk_only).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(cache().disk_ledger().used(), 0);
  EXPECT_EQ(listener_.left_disk, std::vector<CheckpointId>{disk_only});
  ASSERT_EQ(QuarantinesOf(disk_only).size(), 1u);
  absl::StatusOr<CheckpointInfo> kept = cache().GetCheckpoint(ram_only);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(kept->in_ram);
  EXPECT_EQ(kept->chunks[1], chunk);
  ExpectReplayMatchesTheCache();
}

TEST_F(ForgetDiskChunkTest, AWriteInFlightAndOtherChunksAreLeftAlone) {
  const CheckpointId disk_only = Capture(10, CaptureKind::kEnd, true);
  CAIRN_ASSERT_OK(cache().Evict(disk_only, "explicit"));
  const CheckpointId elsewhere = Capture(3, CaptureKind::kLearned, true);  // Chunks 0, 1, 2.
  CAIRN_ASSERT_OK(cache().Evict(elsewhere, "explicit"));
  const CheckpointId writing = Capture(4, CaptureKind::kLearned, false);  // Chunks 0 to 3.
  absl::StatusOr<PersistTicket> persist = cache().BeginPersist(writing);
  ASSERT_TRUE(persist.ok()) << persist.status();
  const std::vector<ChunkId> chunks = cache().GetCheckpoint(writing)->chunks;
  ASSERT_EQ(chunks.size(), 4u);

  CAIRN_ASSERT_OK(cache().ForgetDiskChunk(chunks[0], "checksum mismatch"));

  // Both disk checkpoints listed chunk 0; the write in flight did not yet.
  EXPECT_FALSE(cache().GetCheckpoint(disk_only).ok());
  EXPECT_FALSE(cache().GetCheckpoint(elsewhere).ok());
  EXPECT_TRUE(QuarantinesOf(writing).empty());
  CAIRN_EXPECT_OK(cache().CommitPersist(writing));
  EXPECT_TRUE(cache().GetCheckpoint(writing)->on_disk);
  EXPECT_THAT(cache().ForgetDiskChunk(9999, "unknown"), StatusIs(absl::StatusCode::kNotFound));
  ExpectReplayMatchesTheCache();
}

// Two writes in flight share chunks whose disk files are lost: the disk tier refuses both. The
// first written again writes the chunks anew although the other still references them, and the
// second shares that copy; a later report of the same loss changes nothing.
TEST_F(ForgetDiskChunkTest, TheFirstWriteAfterALossUnderWritesInFlightWritesTheChunksAnew) {
  const CheckpointId disk_only = Capture(10, CaptureKind::kEnd, true);  // Chunks 0 and 1.
  CAIRN_ASSERT_OK(cache().Evict(disk_only, "explicit"));
  const std::vector<ChunkId> lost = cache().GetCheckpoint(disk_only)->chunks;
  const CheckpointId first = Capture(1, CaptureKind::kLearned, false);   // Chunks 0 and 1.
  const CheckpointId second = Capture(1, CaptureKind::kLearned, false);  // And a new chunk 2.
  ASSERT_TRUE(cache().BeginPersist(first).ok());
  absl::StatusOr<PersistTicket> second_ticket = cache().BeginPersist(second);
  ASSERT_TRUE(second_ticket.ok()) << second_ticket.status();
  const std::vector<ChunkId> own = second_ticket->new_chunks;
  ASSERT_EQ(own.size(), 1u);

  for (ChunkId c : lost) CAIRN_ASSERT_OK(cache().ForgetDiskChunk(c, "checksum mismatch"));
  CAIRN_ASSERT_OK(cache().AbortPersist(first));  // Refused: its shared chunks are gone.
  absl::StatusOr<PersistTicket> first_again = cache().BeginPersist(first);
  CAIRN_ASSERT_OK(cache().ForgetDiskChunk(lost[0], "reported again"));
  CAIRN_ASSERT_OK(cache().AbortPersist(second));
  absl::StatusOr<PersistTicket> second_again = cache().BeginPersist(second);

  EXPECT_FALSE(cache().GetCheckpoint(disk_only).ok());
  ASSERT_TRUE(first_again.ok()) << first_again.status();
  EXPECT_EQ(first_again->new_chunks, lost);
  ASSERT_TRUE(second_again.ok()) << second_again.status();
  EXPECT_EQ(second_again->new_chunks, own);  // Shares the chunks the first writes anew.
  CAIRN_EXPECT_OK(cache().CommitPersist(first));
  CAIRN_EXPECT_OK(cache().CommitPersist(second));
  EXPECT_TRUE(cache().GetCheckpoint(second)->on_disk);
  ExpectReplayMatchesTheCache();
}

TEST_F(ForgetDiskChunkTest, ACheckpointWhoseDiskCopyIsLostKeepsItsRamCopy) {
  const CheckpointId both = Capture(10, CaptureKind::kEnd, true);
  const int64_t ram_used = cache().ram_ledger().used();

  absl::StatusOr<std::vector<CheckpointId>> ram_only_now =
      cache().ForgetDiskCopy(both, "state file checksum mismatch");

  ASSERT_TRUE(ram_only_now.ok()) << ram_only_now.status();
  EXPECT_EQ(*ram_only_now, std::vector<CheckpointId>{both});
  absl::StatusOr<CheckpointInfo> kept = cache().GetCheckpoint(both);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(kept->in_ram);
  EXPECT_FALSE(kept->on_disk);
  EXPECT_TRUE(cache().ShouldPersist(both));
  EXPECT_EQ(cache().disk_ledger().used(), 0);
  EXPECT_EQ(cache().ram_ledger().used(), ram_used);
  EXPECT_EQ(listener_.left_disk, std::vector<CheckpointId>{both});
  EXPECT_TRUE(listener_.left_ram.empty());
  std::vector<Event> quarantined = QuarantinesOf(both);
  ASSERT_EQ(quarantined.size(), 1u);
  EXPECT_EQ(quarantined[0].tier, Tier::kDisk);
  ExpectReplayMatchesTheCache();
}

TEST_F(ForgetDiskChunkTest, ADiskOnlyCheckpointWhoseDiskCopyIsLostIsQuarantined) {
  const CheckpointId disk_only = Capture(10, CaptureKind::kEnd, true);
  CAIRN_ASSERT_OK(cache().Evict(disk_only, "explicit"));

  absl::StatusOr<std::vector<CheckpointId>> ram_only_now =
      cache().ForgetDiskCopy(disk_only, "state file missing");

  ASSERT_TRUE(ram_only_now.ok()) << ram_only_now.status();
  EXPECT_TRUE(ram_only_now->empty());
  EXPECT_THAT(cache().GetCheckpoint(disk_only).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(cache().disk_ledger().used(), 0);
  ASSERT_EQ(QuarantinesOf(disk_only).size(), 1u);
  ExpectReplayMatchesTheCache();
}

TEST_F(ForgetDiskChunkTest, ACheckpointWithoutADiskCopyIsLeftAlone) {
  const CheckpointId ram_only = Capture(10, CaptureKind::kGrid, false);
  const CheckpointId writing = Capture(4, CaptureKind::kLearned, false);
  ASSERT_TRUE(cache().BeginPersist(writing).ok());

  absl::StatusOr<std::vector<CheckpointId>> from_ram = cache().ForgetDiskCopy(ram_only, "lost");
  absl::StatusOr<std::vector<CheckpointId>> in_flight = cache().ForgetDiskCopy(writing, "lost");

  ASSERT_TRUE(from_ram.ok()) << from_ram.status();
  EXPECT_TRUE(from_ram->empty());
  ASSERT_TRUE(in_flight.ok()) << in_flight.status();
  EXPECT_TRUE(in_flight->empty());
  EXPECT_TRUE(cache().GetCheckpoint(ram_only)->in_ram);
  CAIRN_EXPECT_OK(cache().CommitPersist(writing));
  EXPECT_TRUE(cache().GetCheckpoint(writing)->on_disk);
  EXPECT_TRUE(QuarantinesOf(ram_only).empty());
  EXPECT_TRUE(QuarantinesOf(writing).empty());
  EXPECT_THAT(cache().ForgetDiskCopy(9999, "unknown"), StatusIs(absl::StatusCode::kNotFound));
}

// A prompt checkpoint just below one on disk is not written (disk_spacing_tokens); when that
// disk copy is lost, it is returned for the caller to offer to ShouldPersist again. A grid
// point, never written, is not.
TEST_F(ForgetDiskChunkTest, RamCheckpointsNotWrittenForALostNeighbourAreReturned) {
  const CheckpointId disk_only = Capture(10, CaptureKind::kEnd, true);
  CAIRN_ASSERT_OK(cache().Evict(disk_only, "explicit"));
  const CheckpointId below = Capture(2, CaptureKind::kEnd, false);
  const CheckpointId grid = Capture(1, CaptureKind::kGrid, false);
  ASSERT_FALSE(cache().ShouldPersist(below));

  absl::StatusOr<std::vector<CheckpointId>> offer = cache().ForgetDiskCopy(disk_only, "lost");

  ASSERT_TRUE(offer.ok()) << offer.status();
  EXPECT_EQ(*offer, std::vector<CheckpointId>{below});
  EXPECT_TRUE(cache().ShouldPersist(below));
  EXPECT_FALSE(cache().ShouldPersist(grid));
}

TEST_F(ForgetDiskChunkTest, RamCheckpointsNotWrittenForALostChunksCheckpointAreReturned) {
  const CheckpointId both = Capture(10, CaptureKind::kEnd, true);
  const CheckpointId below = Capture(2, CaptureKind::kEnd, false);
  ASSERT_FALSE(cache().ShouldPersist(below));

  absl::StatusOr<std::vector<CheckpointId>> offer =
      cache().ForgetDiskChunk(cache().GetCheckpoint(both)->chunks[0], "lost");

  // Both: the first kept in RAM (written again, it covers the second once more), the second
  // for the case that write does not happen.
  ASSERT_TRUE(offer.ok()) << offer.status();
  EXPECT_EQ(*offer, (std::vector<CheckpointId>{both, below}));
}

}  // namespace
}  // namespace cairn::cache
