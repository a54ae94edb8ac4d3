// Checkpoint and chunk ids across restarts: a restarted daemon never hands out an id an earlier
// run handed out, whether what it named was evicted from disk or lived in RAM only, because ids
// are reserved in the disk tier's catalog before any is handed out (docs/disk-format.md, "The
// catalog"). In process, without gRPC, under TSan with the unit label.

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/disk/testing/fault_file_system.h"
#include "services/cache/disk/testing/rocksdb_fault_fs.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/cache_daemon_fixture.h"

namespace cairn::cache {
namespace {

// Removes the records `keys` (docs/disk-format.md, "Reserved ids") from the catalog of the
// disk tier at `root`, leaving it as daemons wrote it before they reserved those ids.
void RemoveCatalogRecords(const std::string& root, std::initializer_list<const char*> keys) {
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), root + "/catalog", &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  for (const char* key : keys) ASSERT_TRUE(db->Delete(sync, key).ok()) << key;
  ASSERT_TRUE(db->Close().ok());
}

class CheckpointIdFloorTest : public DiskTierPartsTest {
 protected:
  // Captures below one chunk (no spill) as learned checkpoints are written at once; grid
  // points are never written.
  void SetUp() override { StartWithDisk("checkpoint-id-floor"); }
};

TEST_F(CheckpointIdFloorTest, AnIdEvictedFromDiskIsNotHandedOutAgainAfterARestart) {
  const uint64_t kept = Capture(4, CaptureKind::kLearned);
  const uint64_t evicted = Capture(8, CaptureKind::kLearned);
  Flush();
  ASSERT_GT(evicted, kept);
  ASSERT_TRUE(daemon_->Evict(EvictOrder{evicted, false, /*include_disk=*/true}).ok());
  Restart();  // The deletion of its files runs before the old daemon is gone.
  ASSERT_EQ(daemon_->disk_store()->ListCheckpoints().size(), 1u);

  const uint64_t next = Capture(12, CaptureKind::kLearned);

  EXPECT_GT(next, evicted);
}

TEST_F(CheckpointIdFloorTest, RamOnlyCheckpointIdsAreNotHandedOutAgainAfterARestart) {
  const uint64_t on_disk = Capture(4, CaptureKind::kLearned);
  const uint64_t ram_only = Capture(8, CaptureKind::kGrid);  // Grid points are never written.
  Flush();
  ASSERT_GT(ram_only, on_disk);
  Restart();
  ASSERT_EQ(daemon_->disk_store()->ListCheckpoints().size(), 1u);

  const uint64_t next = Capture(12, CaptureKind::kGrid);

  EXPECT_GT(next, ram_only);
}

TEST_F(CheckpointIdFloorTest, IdsAreReservedABlockAtATimeBeforeAnyIsHandedOut) {
  const uint64_t block = static_cast<uint64_t>(CacheDaemonOptions().checkpoint_id_block);
  EXPECT_EQ(daemon_->disk_store()->reserved_checkpoint_ids(), 0u);  // Nothing handed out yet.

  const uint64_t first = Capture(4, CaptureKind::kGrid);
  const uint64_t second = Capture(8, CaptureKind::kGrid);

  EXPECT_EQ(second, first + 1);
  EXPECT_EQ(daemon_->disk_store()->reserved_checkpoint_ids(), first - 1 + block);
  Restart();
  EXPECT_EQ(Capture(12, CaptureKind::kGrid), first + block);
}

// A disk tier whose catalog was written before ids were reserved has no record of them: ids
// start above the checkpoints it holds, as they did then, and are reserved from there on.
TEST_F(CheckpointIdFloorTest, ACatalogWithoutReservedIdsStartsAboveItsCheckpointsAsBefore) {
  Capture(4, CaptureKind::kLearned);
  const uint64_t last = Capture(8, CaptureKind::kLearned);
  Flush();
  daemon_.reset();
  RemoveCatalogRecords(root_, {"reserved-checkpoint-ids", "reserved-chunk-ids"});
  Restart();
  ASSERT_EQ(daemon_->disk_store()->reserved_checkpoint_ids(), 0u);
  ASSERT_EQ(daemon_->disk_store()->ListCheckpoints().size(), 2u);

  const uint64_t next = Capture(12, CaptureKind::kLearned);

  EXPECT_EQ(next, last + 1);
  EXPECT_GE(daemon_->disk_store()->reserved_checkpoint_ids(), next);
}

// The same daemon over the fault-injecting file system (catalog included), to lose what was
// not synced or to fail the reservation's write.
class CheckpointIdFaultTest : public CheckpointIdFloorTest {
 protected:
  void SetUp() override { StartWithDisk("checkpoint-id-fault"); }

  CacheDaemonOptions DiskOptions() const override {
    CacheDaemonOptions options = CheckpointIdFloorTest::DiskOptions();
    options.file_system = &fault_;
    options.disk.catalog_fs = catalog_fs_;
    options.disk.catalog.auto_compactions = false;
    return options;
  }

  mutable FaultFileSystem fault_{PosixFileSystem()};
  std::shared_ptr<rocksdb::FileSystem> catalog_fs_ = NewRocksDbFaultFs(&fault_);
};

// An id is acknowledged only once its reservation is durable: a power loss right after the
// acknowledgement (everything from then on fails, unsynced data is lost) keeps it reserved.
TEST_F(CheckpointIdFaultTest, AnAcknowledgedIdStaysReservedThroughAPowerLoss) {
  for (CrashModel model : kAllCrashModels) {
    SCOPED_TRACE(CrashModelName(model));
    StartCold(4);
    CaptureRequest req = CaptureAt(4);
    req.kind = CaptureKind::kGrid;  // Never written: only the reservation names it on disk.
    absl::StatusOr<CaptureGrant> acknowledged = daemon_->ReserveCapture(req);
    ASSERT_TRUE(acknowledged.ok()) << acknowledged.status();
    fault_.SetCrashAfter(fault_.op_count());
    daemon_.reset();
    ASSERT_TRUE(fault_.SimulateCrash(model, 7).ok());
    Restart();

    StartCold(8);
    absl::StatusOr<CaptureGrant> next = daemon_->ReserveCapture(CaptureAt(8));

    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_GT(next->reservation_id, acknowledged->reservation_id);
    ASSERT_TRUE(daemon_->AbortCapture(CaptureAbort{session_, next->reservation_id, ""}).ok());
  }
}

// When the reservation cannot be written, no id past the reserved ones is handed out: the
// capture fails (retryable) and names no checkpoint, in its answer or in an event.
TEST_F(CheckpointIdFaultTest, AReservationThatCannotBeWrittenStillLetsRamCapturesGoOn) {
  // The disk tier failing must not stop the RAM tier (reliability.md IO4): the capture is
  // granted, with ids the catalog could not record (a restart may hand them out again).
  StartCold(4);
  fault_.InjectError(fault_.op_count() + 1, absl::UnavailableError("EIO"), /*persistent=*/true);

  absl::StatusOr<CaptureGrant> granted = daemon_->ReserveCapture(CaptureAt(4));

  ASSERT_TRUE(granted.ok()) << granted.status();
  EXPECT_GT(granted->reservation_id, 0u);
  EXPECT_EQ(daemon_->disk_store()->reserved_checkpoint_ids(), 0u);
}

// Chunk ids across restarts, the same way: a chunk id an earlier run handed out (in a spill
// request, a lease, an event or a chunk file's name) is never handed out again.
class ChunkIdFloorTest : public DiskTierPartsTest {
 protected:
  void SetUp() override { StartWithDisk("chunk-id-floor"); }

  // Slot 0 goes idle; returns the chunk ids of the spills that asks for (the chunks its
  // captures minted and still borrow).
  std::vector<uint64_t> SpilledChunkIds() {
    const size_t seen = sink_.messages().size();
    EXPECT_TRUE(daemon_->SlotIdle(session_, 0).ok());
    const std::vector<v1::SessionServerMessage> messages = sink_.messages();
    std::vector<uint64_t> ids;
    for (size_t i = seen; i < messages.size(); ++i) {
      if (!messages[i].has_spill_request()) continue;
      for (const v1::ChunkSpill& c : messages[i].spill_request().chunks()) {
        ids.push_back(c.chunk_id());
      }
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  }
};

TEST_F(ChunkIdFloorTest, RamOnlyChunkIdsAreNotHandedOutAgainAfterARestart) {
  Capture(40, CaptureKind::kGrid);  // 2 chunks; grid points are never written.
  const std::vector<uint64_t> before = SpilledChunkIds();
  ASSERT_EQ(before.size(), 2u);
  Restart();

  Capture(40, CaptureKind::kGrid);
  const std::vector<uint64_t> after = SpilledChunkIds();

  ASSERT_EQ(after.size(), 2u);
  EXPECT_GT(after.front(), before.back());
}

TEST_F(ChunkIdFloorTest, ChunkIdsEvictedFromDiskAreNotHandedOutAgainAfterARestart) {
  const uint64_t written = Capture(40, CaptureKind::kLearned);
  const std::vector<uint64_t> before = SpilledChunkIds();
  ASSERT_EQ(before.size(), 2u);
  AnswerSpills();
  Flush();
  ASSERT_EQ(daemon_->disk_store()->ListCheckpoints().size(), 1u);
  ASSERT_TRUE(daemon_->Evict(EvictOrder{written, false, /*include_disk=*/true}).ok());
  Restart();
  ASSERT_TRUE(daemon_->disk_store()->ListCheckpoints().empty());

  Capture(40, CaptureKind::kGrid);
  const std::vector<uint64_t> after = SpilledChunkIds();

  ASSERT_EQ(after.size(), 2u);
  EXPECT_GT(after.front(), before.back());
}

// A disk tier whose catalog has no record of chunk ids (written before they were reserved):
// they start above the chunks it holds, as they did then, and are reserved from there on.
TEST_F(ChunkIdFloorTest, ACatalogWithoutReservedChunkIdsStartsAboveItsChunksAsBefore) {
  Capture(40, CaptureKind::kLearned);
  const std::vector<uint64_t> before = SpilledChunkIds();
  ASSERT_EQ(before.size(), 2u);
  AnswerSpills();
  Flush();
  daemon_.reset();
  RemoveCatalogRecords(root_, {"reserved-chunk-ids"});  // As the daemon wrote it before.
  Restart();
  ASSERT_EQ(daemon_->disk_store()->reserved_chunk_ids(), 0u);
  ASSERT_EQ(daemon_->disk_store()->max_chunk_id(), before.back());

  Capture(56, CaptureKind::kGrid);  // 3 new chunks (a cold start computes its own rows).
  const std::vector<uint64_t> after = SpilledChunkIds();

  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after.front(), before.back() + 1);
  EXPECT_GE(daemon_->disk_store()->reserved_chunk_ids(), after.back());
}

// Small blocks: a capture needing more chunk ids than a block reserves what it needs.
class ChunkIdBlockTest : public ChunkIdFloorTest {
 protected:
  CacheDaemonOptions DiskOptions() const override {
    CacheDaemonOptions options = ChunkIdFloorTest::DiskOptions();
    options.chunk_id_block = 2;
    return options;
  }
};

TEST_F(ChunkIdBlockTest, ChunkIdsAreReservedBeforeAnyIsHandedOutABlockOrWhatACaptureNeeds) {
  EXPECT_EQ(daemon_->disk_store()->reserved_chunk_ids(), 0u);

  Capture(8, CaptureKind::kGrid);  // Below one chunk: none minted, none reserved.
  EXPECT_EQ(daemon_->disk_store()->reserved_chunk_ids(), 0u);
  Capture(40, CaptureKind::kGrid);
  const std::vector<uint64_t> first = SpilledChunkIds();
  EXPECT_EQ(daemon_->disk_store()->reserved_chunk_ids(), 2u);  // One block.
  Capture(96, CaptureKind::kGrid);
  const std::vector<uint64_t> second = SpilledChunkIds();

  EXPECT_EQ(first, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(second, (std::vector<uint64_t>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(daemon_->disk_store()->reserved_chunk_ids(), 8u);  // The 6 it needed.
  Restart();
  Capture(40, CaptureKind::kGrid);
  EXPECT_EQ(SpilledChunkIds(), (std::vector<uint64_t>{9, 10}));
}

TEST(IdBlockTest, ABlockOutsideOneTo2To40IsRefusedAtCreation) {
  FakeClock clock;
  for (const int64_t block : {int64_t{0}, int64_t{-1}, (int64_t{1} << 40) + 1}) {
    for (const bool chunks : {false, true}) {
      CacheDaemonOptions options;
      options.cache.ram_bytes = 4 << 20;
      (chunks ? options.chunk_id_block : options.checkpoint_id_block) = block;

      EXPECT_THAT(CacheDaemon::Create(options, &clock).status(),
                  ::cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument))
          << block << (chunks ? " chunk ids" : " checkpoint ids");
    }
  }
}

}  // namespace
}  // namespace cairn::cache
