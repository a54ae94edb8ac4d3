// The disk tier: publish, restore, delete, recovery, sweep, budget and I/O errors
// (docs/reliability.md P1-P9, R1-R5, IO1-IO5); quarantine in disk_store_quarantine_test.cc.

#include "services/cache/disk/disk_store.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/notification.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "services/cache/disk/testing/fault_file_system.h"
#include "services/cache/disk/testing/rocksdb_fault_fs.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_store_fixture.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::CheckpointFactory;
using ::cairn::cache::testing::DataFiles;
using ::cairn::cache::testing::DiskStoreTest;
using ::cairn::cache::testing::kRowBytes;
using ::cairn::cache::testing::kRows;
using ::cairn::cache::testing::RestoreAll;
using ::cairn::testing::StatusIs;

TEST_F(DiskStoreTest, PublishedCheckpointRestoresEveryByte) {
  auto store = Open();
  ASSERT_NE(store, nullptr);

  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 4)));

  auto bytes = RestoreAll(store.get(), 1);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, factory_.Expected(1));
  EXPECT_EQ(store->stats().checkpoints, 1u);
  EXPECT_EQ(store->stats().chunks, 4u);
}

TEST_F(DiskStoreTest, SharedChunksAreWrittenOnce) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 4)));
  const auto& first = factory_.ChunksOf(1);

  CAIRN_ASSERT_OK(store->Publish(factory_.Build(2, {first[0], first[1]}, 2)));

  EXPECT_EQ(store->stats().chunks, 6u);
  auto bytes = RestoreAll(store.get(), 2);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, factory_.Expected(2));
  auto manifest = store->GetManifest(2);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->chunks.size(), 4u);
  EXPECT_EQ(manifest->tokens.size(), manifest->depth);
}

TEST_F(DiskStoreTest, SharingAChunkNotOnDiskFails) {
  auto store = Open();
  ASSERT_NE(store, nullptr);

  EXPECT_THAT(store->Publish(factory_.Build(1, {}, 1)), ::cairn::testing::IsOk());
  EXPECT_THAT(store->Publish(factory_.Build(2, {999}, 1)), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(store->Publish(factory_.Build(1, {}, 1)), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST_F(DiskStoreTest, MalformedRequestsAreInvalidArgument) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  PublishRequest no_tokens = factory_.Build(1, {}, 1);
  no_tokens.tokens.clear();
  PublishRequest short_chunk = factory_.Build(2, {}, 1);
  short_chunk.new_chunks[0].bytes = short_chunk.new_chunks[0].bytes.subspan(1);
  PublishRequest bad_sections = factory_.Build(3, {}, 1);
  bad_sections.sections[1].bytes += 1;
  PublishRequest repeated = factory_.Build(4, {}, 1);
  repeated.new_chunks.push_back(repeated.new_chunks[0]);

  for (const PublishRequest* r : {&no_tokens, &short_chunk, &bad_sections, &repeated}) {
    EXPECT_THAT(store->Publish(*r), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_TRUE(DataFiles(dir_.path()).empty());
}

TEST_F(DiskStoreTest, DeleteKeepsChunksOthersStillList) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 4)));
  const auto& first = factory_.ChunksOf(1);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(2, {first[0], first[1]}, 1)));

  CAIRN_ASSERT_OK(store->Delete(1));

  EXPECT_FALSE(store->HasCheckpoint(1));
  EXPECT_TRUE(store->HasChunk(first[0]));
  EXPECT_FALSE(store->HasChunk(first[3]));
  auto bytes = RestoreAll(store.get(), 2);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, factory_.Expected(2));
  EXPECT_EQ(DataFiles(dir_.path()).size(), 3u + 1u + 1u);  // 3 chunks, 1 state, 1 manifest.
  EXPECT_THAT(store->Delete(1), StatusIs(absl::StatusCode::kNotFound));
}

// A checkpoint deleted while it is read (a restore, or the scrubber's verification, which the
// core does not pin) stays for that read, starts no new one, and goes when the read ends: the
// deletion is not refused and lost, which left its files and catalog entry until a restart.
TEST_F(DiskStoreTest, ADeleteDuringAReadDeletesTheCheckpointWhenTheReadEnds) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 2)));
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(2, {}, 1)));
  Notification entered, release;
  Mutex mu;
  std::vector<std::vector<uint8_t>> pieces;  // Moved as it grows; each piece's bytes stay put.
  absl::Status read;
  std::thread reader([&] {
    read = store->Restore(1, [&](const RestorePiece& piece) -> absl::StatusOr<absl::Span<uint8_t>> {
      if (!entered.HasBeenNotified()) {
        entered.Notify();
        release.WaitForNotificationWithTimeout(absl::Seconds(30));
      }
      MutexLock lock(&mu);
      pieces.push_back(std::vector<uint8_t>(piece.bytes));
      return absl::Span<uint8_t>(pieces.back());
    });
  });
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(30)));

  const absl::Status deleted = store->Delete(1);
  const bool listed_while_read = store->HasCheckpoint(1);
  const absl::Status second_read = RestoreAll(store.get(), 1).status();
  release.Notify();
  reader.join();

  CAIRN_EXPECT_OK(deleted);
  EXPECT_TRUE(listed_while_read);
  EXPECT_THAT(second_read, StatusIs(absl::StatusCode::kNotFound));
  CAIRN_EXPECT_OK(read);  // The read under way finished on the files it had.
  EXPECT_FALSE(store->HasCheckpoint(1));
  EXPECT_EQ(DataFiles(dir_.path()).size(), 1u + 1u + 1u);  // Checkpoint 2's chunk, state, manifest.
  auto entries = store->catalog().LoadAll();
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_EQ(entries->size(), 1u);
  EXPECT_THAT(store->Delete(1), StatusIs(absl::StatusCode::kNotFound));
  auto bytes = RestoreAll(store.get(), 2);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, factory_.Expected(2));
}

TEST_F(DiskStoreTest, RestartRecoversFromTheCatalogAndReportsWhatTheIndexNeeds) {
  std::vector<PublishRequest> published;
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    published.push_back(factory_.Build(1, {}, 2));
    published.push_back(factory_.Build(2, factory_.ChunksOf(1), 1));
    published.back().capture_kind = 2;
    for (const PublishRequest& r : published) CAIRN_ASSERT_OK(store->Publish(r));
  }
  std::vector<RecoveredCheckpoint> recovered;
  DiskStoreOptions o = Options();
  o.on_recovered = [&](RecoveredCheckpoint c) { recovered.push_back(std::move(c)); };

  auto store = Open(o);

  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.size(), 2u);
  for (size_t i = 0; i < recovered.size(); ++i) {
    const PublishRequest& r = published[i];
    const RecoveredCheckpoint& c = recovered[i];
    EXPECT_EQ(c.checkpoint_id, r.checkpoint_id);
    EXPECT_EQ(c.compat_digest, r.compat_digest);
    EXPECT_EQ(c.input_digest, r.input_digest);
    EXPECT_EQ(c.tokens, r.tokens);
    EXPECT_EQ(c.state_bytes, r.state.size());
    EXPECT_EQ(c.capture_kind, r.capture_kind);
    std::vector<uint64_t> chunk_ids;
    for (const ChunkIdentity& id : c.chunks) chunk_ids.push_back(id.chunk_id);
    EXPECT_EQ(chunk_ids, factory_.ChunksOf(r.checkpoint_id));
  }
  EXPECT_EQ(recovered[0].chunks[1], published[0].new_chunks[1].id);
  auto bytes = RestoreAll(store.get(), 2);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, factory_.Expected(2));
  EXPECT_GE(store->max_chunk_id(), 3u);
  EXPECT_EQ(store->max_checkpoint_id(), 2u);
}

TEST_F(DiskStoreTest, ManifestWithoutCatalogEntryIsReRegistered) {
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 2)));
  }
  std::filesystem::remove_all(Path("catalog"));  // As if the catalog write never happened.

  auto store = Open();

  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->HasCheckpoint(1));
  auto entries = store->catalog().LoadAll();
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), 1u);
}

TEST_F(DiskStoreTest, CatalogEntryWithoutManifestIsDropped) {
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));
  }
  for (const auto& e : std::filesystem::directory_iterator(Path("manifests"))) {
    std::filesystem::remove(e.path());
  }

  auto store = Open();

  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->HasCheckpoint(1));
  auto entries = store->catalog().LoadAll();
  ASSERT_TRUE(entries.ok());
  EXPECT_TRUE(entries->empty());
  auto swept = store->SweepOrphans();
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->files_removed, 2u);  // The chunk and the state file.
  EXPECT_TRUE(DataFiles(dir_.path()).empty());
}

TEST_F(DiskStoreTest, ReservedIdsCountAfterTheirCheckpointsAreGone) {
  auto store = WriteAndReopen([&](DiskStore& s) {
    CAIRN_ASSERT_OK(s.ReserveCheckpointIds(10));
    CAIRN_ASSERT_OK(s.ReserveCheckpointIds(4));  // Below the record: a no-op.
    CAIRN_ASSERT_OK(s.ReserveChunkIds(20));
    CAIRN_ASSERT_OK(s.ReserveChunkIds(5));
    CAIRN_ASSERT_OK(s.Publish(factory_.Build(1, {}, 1)));
    CAIRN_ASSERT_OK(s.Publish(factory_.Build(3, {}, 1)));
    CAIRN_ASSERT_OK(s.Delete(3));
    EXPECT_EQ(s.reserved_checkpoint_ids(), 10u);
    EXPECT_EQ(s.reserved_chunk_ids(), 20u);
  });

  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->ListCheckpoints().size(), 1u);
  EXPECT_EQ(store->reserved_checkpoint_ids(), 10u);
  EXPECT_EQ(store->max_checkpoint_id(), 10u);
  EXPECT_EQ(store->reserved_chunk_ids(), 20u);
  EXPECT_EQ(store->max_chunk_id(), 20u);
}

// Catalogs written before ids were reserved hold no record: the largest id is what start-up
// finds, as it was.
TEST_F(DiskStoreTest, ACatalogWithoutReservedIdsOpensAsBefore) {
  auto store = WriteAndReopen([&](DiskStore& s) {
    CAIRN_ASSERT_OK(s.Publish(factory_.Build(1, {}, 1)));
    CAIRN_ASSERT_OK(s.Publish(factory_.Build(3, {}, 1)));
  });

  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->ListCheckpoints().size(), 2u);
  EXPECT_EQ(store->reserved_checkpoint_ids(), 0u);
  EXPECT_EQ(store->max_checkpoint_id(), 3u);
  EXPECT_EQ(store->reserved_chunk_ids(), 0u);
  EXPECT_EQ(store->max_chunk_id(), 2u);  // Each checkpoint's one chunk.
}

TEST_F(DiskStoreTest, ACatalogRebuiltAfterADamagedScanKeepsTheReservedIds) {
  WriteAndReopen([&](DiskStore& s) {
    CAIRN_ASSERT_OK(s.ReserveCheckpointIds(50));
    CAIRN_ASSERT_OK(s.ReserveChunkIds(70));
    CAIRN_ASSERT_OK(s.Publish(factory_.Build(1, {}, 1)));
  }).reset();
  {
    // A key that is neither an entry nor the record: the scan finds the catalog malformed.
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), Path("catalog"), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "x", "y").ok());
    ASSERT_TRUE(db->Close().ok());
  }

  auto store = Open();

  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->HasCheckpoint(1));  // Rebuilt from its manifest.
  EXPECT_EQ(store->max_checkpoint_id(), 50u);
  EXPECT_EQ(store->max_chunk_id(), 70u);
  store.reset();
  auto again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->reserved_checkpoint_ids(), 50u);
  EXPECT_EQ(again->reserved_chunk_ids(), 70u);
}

// A reserved-ids record above 2^62 is damage (the next id could wrap past 2^64): the catalog is
// rebuilt from the manifests as for any malformed record, without it.
TEST_F(DiskStoreTest, AReservedIdsRecordAboveTheBoundRebuildsTheCatalogWithoutIt) {
  WriteAndReopen([&](DiskStore& s) {
    CAIRN_ASSERT_OK(s.Publish(factory_.Build(3, {}, 1)));
  }).reset();
  {
    auto catalog = Catalog::Open(Path("catalog"), nullptr, {});
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    CAIRN_ASSERT_OK((*catalog)->PutReservedCheckpointIds(~uint64_t{0}));
    CAIRN_ASSERT_OK((*catalog)->PutReservedChunkIds(~uint64_t{0}));
  }

  auto store = Open();

  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->HasCheckpoint(3));  // Rebuilt from its manifest.
  EXPECT_EQ(store->reserved_checkpoint_ids(), 0u);
  EXPECT_EQ(store->max_checkpoint_id(), 3u);
  EXPECT_EQ(store->reserved_chunk_ids(), 0u);
  EXPECT_EQ(store->max_chunk_id(), 1u);
}

TEST_F(DiskStoreTest, SecondOpenWhileTheCatalogIsLockedFailsWithoutWiping) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));

  auto second = DiskStore::Create(Options(), PosixFileSystem());

  EXPECT_THAT(second.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(second.status().message().find("in use by another process"), absl::string_view::npos)
      << second.status();
  auto entries = store->catalog().LoadAll();
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), 1u);
}

TEST_F(DiskStoreTest, SweepRemovesOnlyOrphansFromBeforeTheStart) {
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 2)));
  }
  std::ofstream(Path("chunks/c-00000000000000aa-0000000000000001-9.chunk")) << "orphan";
  std::ofstream(Path("manifests/m-0000000000000009-01-2.manifest.tmp")) << "half";
  std::ofstream(Path("manifests/m-0000000000000009.manifest")) << "torn";
  auto store = Open();
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(2, {}, 1)));  // Written after the listing.

  auto swept = store->SweepOrphans();

  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(swept->files_removed, 3u);
  EXPECT_EQ(DataFiles(dir_.path()).size(), 2u * 2u + 1u + 2u);  // 3 chunks, 2 states, 2 mf.
  auto bytes = RestoreAll(store.get(), 2);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto again = store->SweepOrphans();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->files_removed, 0u);
}

TEST_F(DiskStoreTest, ParallelRestoresDeliverEveryByteAndQuarantineOnAnyBadFile) {
  DiskStoreOptions o = Options();
  o.restore_threads = 4;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 12)));
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(2, factory_.ChunksOf(1), 3)));
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(3, {}, 5)));
  std::vector<std::thread> restores;
  std::vector<absl::StatusOr<std::vector<uint8_t>>> got(6, absl::UnknownError("not run"));
  for (size_t t = 0; t < got.size(); ++t) {  // Restores of their own, in parallel too.
    restores.emplace_back([&, t] { got[t] = RestoreAll(store.get(), 1 + t % 3); });
  }
  for (std::thread& t : restores) t.join();
  for (size_t t = 0; t < got.size(); ++t) {
    ASSERT_TRUE(got[t].ok()) << got[t].status();
    EXPECT_EQ(*got[t], factory_.Expected(1 + t % 3)) << "restore " << t;
  }
  auto m = store->GetManifest(1);
  ASSERT_TRUE(m.ok()) << m.status();
  // One byte of a chunk in the middle of checkpoint 1 (shared by checkpoint 2) flips.
  FlipByte("chunks/" + m->chunks[7].file.name);

  auto bad = RestoreAll(store.get(), 1);

  EXPECT_THAT(bad.status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_FALSE(store->HasCheckpoint(1));
  EXPECT_FALSE(store->HasCheckpoint(2));  // It lists the damaged chunk too (R5).
  EXPECT_TRUE(store->HasCheckpoint(3));
  auto fine = RestoreAll(store.get(), 3);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(*fine, factory_.Expected(3));
}

TEST_F(DiskStoreTest, APublishPastTheCapIsRefusedAndNothingIsDeleted) {
  DiskStoreOptions o = Options();
  o.budget_bytes = 3 * (2 * kRows * kRowBytes + 8192);
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  for (uint64_t id = 1; id <= 3; ++id) {
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(id, {}, 2)));
  }

  absl::Status fourth = store->Publish(factory_.Build(4, {}, 2));

  // Choosing what to evict is the policy core's job, never the store's.
  EXPECT_THAT(fourth, StatusIs(absl::StatusCode::kResourceExhausted));
  for (uint64_t id = 1; id <= 3; ++id) EXPECT_TRUE(store->HasCheckpoint(id));
  EXPECT_FALSE(store->HasCheckpoint(4));
  EXPECT_LE(store->stats().used_bytes, o.budget_bytes);
}

TEST_F(DiskStoreTest, CheckpointLargerThanTheBudgetIsResourceExhausted) {
  DiskStoreOptions o = Options();
  o.budget_bytes = 1024;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);

  EXPECT_THAT(store->Publish(factory_.Build(1, {}, 2)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(DataFiles(dir_.path()).empty());
}

TEST_F(DiskStoreTest, DestinationOfTheWrongSizeIsTheCallersErrorNotCorruption) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));
  std::vector<uint8_t> small(10);

  absl::Status s =
      store->Restore(1, [&](const RestorePiece&) { return absl::Span<uint8_t>(small); });

  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(store->HasCheckpoint(1));
  EXPECT_TRUE(store->Quarantined().empty());
}

class DiskStoreFaultTest : public DiskStoreTest {
 protected:
  DiskStoreOptions FaultOptions() {
    DiskStoreOptions o = Options();
    o.catalog_fs = NewRocksDbFaultFs(&fault_);
    // The tests fail a publish's operation N: no background compaction's operations among them
    // (each reopen's flush adds a table file, and enough of them start one).
    o.catalog.auto_compactions = false;
    return o;
  }
  std::unique_ptr<DiskStore> OpenFault() {
    auto store = DiskStore::Create(FaultOptions(), &fault_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }
  FaultFileSystem fault_{PosixFileSystem()};
};

TEST_F(DiskStoreFaultTest, CatalogUsesParanoidChecksAndExplicitWalRecovery) {
  auto store = OpenFault();
  ASSERT_NE(store, nullptr);

  EXPECT_TRUE(store->catalog().options().paranoid_checks);
  EXPECT_EQ(store->catalog().options().wal_recovery_mode,
            rocksdb::WALRecoveryMode::kPointInTimeRecovery);
}

TEST_F(DiskStoreFaultTest, FsyncFailureFailsThePublishAndMakesTheTierReadOnly) {
  auto store = OpenFault();
  ASSERT_NE(store, nullptr);
  fault_.ClearOpLog();
  // Operations of a one-chunk publish: create, append, sync (the chunk's fsync is op 3).
  fault_.InjectError(3, absl::UnavailableError("EIO"), /*persistent=*/false);

  absl::Status s = store->Publish(factory_.Build(1, {}, 1));

  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(store->HasCheckpoint(1));
  EXPECT_TRUE(store->stats().read_only);
  EXPECT_TRUE(DataFiles(dir_.path()).empty());  // Temporary files removed (IO2).
  EXPECT_THAT(store->Publish(factory_.Build(2, {}, 1)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(DiskStoreFaultTest, EveryFailedOperationLeavesNothingAcknowledged) {
  // A7 (deterministic subset): fail operation N of a publish, for every N.
  CheckpointFactory factory(kRows, kRowBytes);
  const PublishRequest base = factory.Build(1, {}, 2);
  int64_t ops = 0;
  {
    auto store = OpenFault();
    ASSERT_NE(store, nullptr);
    fault_.ClearOpLog();
    CAIRN_ASSERT_OK(store->Publish(base));
    ops = fault_.op_count();
    CAIRN_ASSERT_OK(store->Delete(1));
    auto swept = store->SweepOrphans();
    ASSERT_TRUE(swept.ok());
  }
  ASSERT_GT(ops, 10);

  for (int64_t n = 1; n <= ops; ++n) {
    auto store = OpenFault();
    ASSERT_NE(store, nullptr);
    fault_.ClearOpLog();
    fault_.InjectError(n, absl::ResourceExhaustedError("ENOSPC"), /*persistent=*/false);

    absl::Status s = store->Publish(base);

    if (s.ok()) {
      // Only a failure the publish cannot see may be absorbed: none exist, so this is a bug.
      ADD_FAILURE() << "publish acknowledged despite failing operation " << n;
    }
    EXPECT_FALSE(store->HasCheckpoint(1)) << "operation " << n;
    fault_.InjectError(-1, absl::OkStatus(), false);
    store.reset();
    auto reopened = OpenFault();
    ASSERT_NE(reopened, nullptr);
    EXPECT_FALSE(reopened->HasCheckpoint(1)) << "operation " << n;
    auto swept = reopened->SweepOrphans();
    ASSERT_TRUE(swept.ok());
    EXPECT_TRUE(DataFiles(dir_.path()).empty()) << "operation " << n;
  }
}

TEST_F(DiskStoreFaultTest, RepeatedWriteErrorsWithinTheWindowMakeTheTierReadOnly) {
  DiskStoreOptions o = FaultOptions();
  o.io_error_limit = 3;
  auto store = DiskStore::Create(o, &fault_);
  ASSERT_TRUE(store.ok()) << store.status();
  fault_.ClearOpLog();
  // Every append fails (short writes / EIO), never an fsync.
  fault_.InjectError(2, absl::UnavailableError("EIO on write"), /*persistent=*/true);

  for (uint64_t id = 1; id <= 3; ++id) {
    EXPECT_FALSE((*store)->Publish(factory_.Build(id, {}, 1)).ok());
    EXPECT_EQ((*store)->stats().read_only, id == 3) << id;
  }
}

TEST_F(DiskStoreFaultTest, LowFreeSpaceFailsCleanly) {
  auto store = OpenFault();
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 2)));
  fault_.SetFreeBytes(1000);

  absl::Status second = store->Publish(factory_.Build(2, {}, 2));

  EXPECT_THAT(second, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(absl::StrContains(second.message(), "disk full")) << second;
  EXPECT_TRUE(store->HasCheckpoint(1));  // Nothing deleted to make room.
  EXPECT_EQ(*store->UsableFreeBytes(), 1000u);
}

}  // namespace
}  // namespace cairn::cache
