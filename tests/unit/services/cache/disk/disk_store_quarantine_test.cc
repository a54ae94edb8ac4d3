// The disk tier's quarantine: damage found at start-up, by a verify or by a publish that shares a
// lost chunk; the bounded quarantine directory; reads that outlive a copy written again
// (docs/reliability.md R4, R5).

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "services/cache/disk/disk_store.h"
#include "services/cache/disk/testing/fault_file_system.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_store_fixture.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::DataFiles;
using ::cairn::cache::testing::DiskStoreTest;
using ::cairn::cache::testing::HookFileSystem;
using ::cairn::cache::testing::RestoreAll;
using ::cairn::testing::StatusIs;

TEST_F(DiskStoreTest, WronglySizedFileQuarantinesAtStartUp) {
  std::string chunk_name;
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 2)));
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(2, {}, 1)));
    auto m = store->GetManifest(1);
    ASSERT_TRUE(m.ok());
    chunk_name = m->chunks[1].file.name;
  }
  std::filesystem::resize_file(Path("chunks/" + chunk_name), 100);

  auto store = Open();

  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->HasCheckpoint(1));
  EXPECT_TRUE(store->HasCheckpoint(2));
  ASSERT_EQ(store->Quarantined().size(), 1u);
  EXPECT_EQ(store->Quarantined()[0].checkpoint_id, 1u);
  EXPECT_TRUE(std::filesystem::exists(Path("quarantine/m-0000000000000001.manifest")));
  store.reset();
  auto again = Open();  // The quarantine survives a restart through the catalog flag.
  ASSERT_NE(again, nullptr);
  ASSERT_EQ(again->Quarantined().size(), 1u);
  EXPECT_FALSE(again->HasCheckpoint(1));
}

TEST_F(DiskStoreTest, TheLargestIdCountsQuarantinedCheckpointsAfterARestart) {
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(2, {}, 1)));
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(3, {}, 1)));
    auto m = store->GetManifest(3);
    ASSERT_TRUE(m.ok()) << m.status();
    std::filesystem::remove(Path("states/" + m->state_file.name));
    ASSERT_THAT(store->Verify(3), StatusIs(absl::StatusCode::kDataLoss));
    // Found at the next start: its state file has the wrong size.
    m = store->GetManifest(2);
    ASSERT_TRUE(m.ok()) << m.status();
    std::filesystem::resize_file(Path("states/" + m->state_file.name), 1);
  }

  auto store = Open();

  ASSERT_NE(store, nullptr);
  ASSERT_EQ(store->ListCheckpoints().size(), 1u);
  EXPECT_EQ(store->max_checkpoint_id(), 3u);
  store.reset();
  // A catalog rebuilt from the manifests has no quarantine entries; the kept manifests count.
  std::filesystem::remove_all(Path("catalog"));
  auto rebuilt = Open();
  ASSERT_NE(rebuilt, nullptr);
  EXPECT_EQ(rebuilt->max_checkpoint_id(), 3u);
}

TEST_F(DiskStoreTest, MissingSharedChunkQuarantinesEveryCheckpointListingItAtStartUp) {
  std::string chunk_name;
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 2)));
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(2, factory_.ChunksOf(1), 1)));
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(3, {}, 1)));
    auto m = store->GetManifest(1);
    ASSERT_TRUE(m.ok());
    chunk_name = m->chunks[0].file.name;
  }
  std::filesystem::remove(Path("chunks/" + chunk_name));

  auto store = Open();

  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->HasCheckpoint(1));
  EXPECT_FALSE(store->HasCheckpoint(2));
  EXPECT_TRUE(store->HasCheckpoint(3));
  EXPECT_EQ(store->Quarantined().size(), 2u);
  auto bytes = RestoreAll(store.get(), 3);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, factory_.Expected(3));
}

TEST_F(DiskStoreTest, ManifestsListingAChunkDifferentlyKeepOneAtStartUp) {
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 2)));
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(2, factory_.ChunksOf(1), 1)));
  }
  // Checkpoint 2's manifest now lists chunk 1 with another checksum: a well-formed manifest
  // that contradicts checkpoint 1's. Start-up rebuilds the catalog from the manifests.
  const std::string path = Path("manifests/m-0000000000000002.manifest");
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto m = DecodeManifest(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  m->chunks[0].file.checksum ^= 1;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << EncodeManifest(*m);
  }
  std::filesystem::remove_all(Path("catalog"));

  auto store = Open();

  ASSERT_NE(store, nullptr);
  EXPECT_NE(store->HasCheckpoint(1), store->HasCheckpoint(2));  // One kept, one quarantined.
  ASSERT_EQ(store->Quarantined().size(), 1u);
  const uint64_t kept = store->HasCheckpoint(1) ? 1 : 2;
  auto restored = RestoreAll(store.get(), kept);
  if (kept == 1) {
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ(*restored, factory_.Expected(1));
  } else {  // Checkpoint 2's entry for chunk 1 is wrong: its restore must fail, never lie.
    EXPECT_THAT(restored.status(), StatusIs(absl::StatusCode::kDataLoss));
  }
}

TEST_F(DiskStoreTest, VerifyReadsEverythingAndQuarantinesDamage) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 2)));
  CAIRN_ASSERT_OK(store->Verify(1));
  auto m = store->GetManifest(1);
  ASSERT_TRUE(m.ok());
  FlipByte("states/" + m->state_file.name);

  EXPECT_THAT(store->Verify(1), StatusIs(absl::StatusCode::kDataLoss));

  EXPECT_FALSE(store->HasCheckpoint(1));
  EXPECT_EQ(store->Quarantined().size(), 1u);
}

// A publish shares checkpoint 1's chunks; one of them is found damaged while the publish
// writes its own files. The pinned file outlives the quarantine, but no manifest may list it.
TEST_F(DiskStoreTest, APublishSharingAChunkLostWhileItRunsFailsAndListsNothing) {
  DiskStoreOptions o = Options();
  o.staging_bytes = 4096;  // A chunk takes two pieces: the publish yields between them.
  HookFileSystem fs;
  bool manifest_written = false;
  fs.SetAfterRename([&](const std::string& to) {
    if (absl::StrContains(to, "/manifests/")) manifest_written = true;
  });
  auto created = DiskStore::Create(o, &fs);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<DiskStore> store = *std::move(created);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 2)));
  const std::vector<uint64_t> shared = factory_.ChunksOf(1);
  auto m = store->GetManifest(1);
  ASSERT_TRUE(m.ok()) << m.status();
  FlipByte("chunks/" + m->chunks[0].file.name);
  bool verified = false;
  manifest_written = false;

  absl::Status published = store->Publish(factory_.Build(2, shared, 1), [&] {
    if (verified) return;
    verified = true;
    EXPECT_THAT(store->Verify(1), StatusIs(absl::StatusCode::kDataLoss));
  });

  ASSERT_TRUE(verified);
  EXPECT_THAT(published, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_FALSE(manifest_written);  // Found before its manifest was written.
  EXPECT_FALSE(store->HasCheckpoint(2));
  EXPECT_FALSE(store->HasChunk(shared[0]));
  EXPECT_TRUE(DataFiles(dir_.path()).empty());
  store.reset();
  auto reopened = Open(o);
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(reopened->ListCheckpoints().empty());
}

// The shared chunk is lost later still, once checkpoint 2's manifest is durable: the publish
// quarantines its checkpoint like any that lists a damaged file, and no restart lists it. Its id
// was quarantined before (the daemon writes a checkpoint whose disk copy was lost again under
// its id): the catalog keeps it flagged.
TEST_F(DiskStoreTest, APublishThatLosesASharedChunkAfterItsManifestIsWrittenIsQuarantined) {
  HookFileSystem fs;
  std::unique_ptr<DiskStore> store;
  std::string chunk_file;
  bool armed = false;
  fs.SetAfterRename([&](const std::string& to) {
    if (!armed || !absl::EndsWith(to, "/manifests/m-0000000000000002.manifest")) return;
    armed = false;
    FlipByte("chunks/" + chunk_file);
    EXPECT_THAT(store->Verify(1), StatusIs(absl::StatusCode::kDataLoss));
  });
  auto created = DiskStore::Create(Options(), &fs);
  ASSERT_TRUE(created.ok()) << created.status();
  store = *std::move(created);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(2, {}, 1)));
  auto first = store->GetManifest(2);
  ASSERT_TRUE(first.ok()) << first.status();
  FlipByte("states/" + first->state_file.name);
  ASSERT_THAT(store->Verify(2), StatusIs(absl::StatusCode::kDataLoss));
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 2)));
  auto m = store->GetManifest(1);
  ASSERT_TRUE(m.ok()) << m.status();
  chunk_file = m->chunks[0].file.name;
  armed = true;

  absl::Status published = store->Publish(factory_.Build(2, factory_.ChunksOf(1), 1));

  ASSERT_FALSE(armed);
  EXPECT_THAT(published, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_FALSE(store->HasCheckpoint(2));
  ASSERT_EQ(store->Quarantined().size(), 3u);  // 2's first copy, 1, then 2's second.
  EXPECT_EQ(store->Quarantined().back().checkpoint_id, 2u);
  auto entries = store->catalog().LoadAll();
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_TRUE((*entries)[0].quarantined);
  EXPECT_EQ((*entries)[1].checkpoint_id, 2u);
  EXPECT_TRUE((*entries)[1].quarantined);
  EXPECT_TRUE(std::filesystem::exists(Path("quarantine/m-0000000000000002.manifest")));
  EXPECT_TRUE(DataFiles(dir_.path()).empty());
  store.reset();
  auto reopened = Open();
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(reopened->ListCheckpoints().empty());
  EXPECT_EQ(reopened->Quarantined().size(), 2u);
}

TEST_F(DiskStoreTest, QuarantineKeepsABoundedNumberOfManifests) {
  DiskStoreOptions o = Options();
  o.max_quarantined = 2;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  for (uint64_t id = 1; id <= 4; ++id) {
    CAIRN_ASSERT_OK(store->Publish(factory_.Build(id, {}, 1)));
    auto m = store->GetManifest(id);
    ASSERT_TRUE(m.ok());
    std::filesystem::remove(Path("states/" + m->state_file.name));
  }

  for (uint64_t id = 1; id <= 4; ++id) {
    EXPECT_THAT(store->Verify(id), StatusIs(absl::StatusCode::kDataLoss));
  }

  ASSERT_EQ(store->Quarantined().size(), 2u);
  EXPECT_EQ(store->Quarantined()[0].checkpoint_id, 3u);
  // Sequence numbers keep counting past the bound; a reader asks for those it has not seen.
  EXPECT_EQ(store->quarantine_seq(), 4u);
  std::vector<QuarantineInfo> fresh = store->QuarantinedAfter(3);
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_EQ(fresh[0].checkpoint_id, 4u);
  EXPECT_EQ(fresh[0].seq, 4u);
  EXPECT_EQ(store->QuarantinedAfter(1).size(), 2u);  // 2 is gone past the bound.
  EXPECT_TRUE(store->QuarantinedAfter(4).empty());
  EXPECT_EQ(QuarantinedManifests().size(), 2u);
}

// The daemon writes a checkpoint that lost its disk copy again under the same id. When that id's
// quarantine entry is pushed past the bound later, the live checkpoint keeps its catalog entry;
// a newer quarantine of the same id keeps its flag and its manifest in quarantine/.
TEST_F(DiskStoreTest, AQuarantinePushedPastTheBoundLeavesACheckpointWrittenAgainAlone) {
  DiskStoreOptions o = Options();
  o.max_quarantined = 1;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  auto quarantine = [&](uint64_t id) { QuarantineByVerify(store.get(), id); };
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));
  quarantine(1);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));  // Written again.
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(2, {}, 1)));

  quarantine(2);  // Pushes 1's entry out.

  auto entries = store->catalog().LoadAll();
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].checkpoint_id, 1u);
  EXPECT_FALSE((*entries)[0].quarantined);
  EXPECT_TRUE((*entries)[1].quarantined);
  EXPECT_TRUE(store->HasCheckpoint(1));
  // Quarantined again: its newer entry pushes out 2's, then its older one goes, but its flag
  // and its manifest stay the newer quarantine's.
  quarantine(1);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));
  quarantine(1);
  entries = store->catalog().LoadAll();
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].checkpoint_id, 1u);
  EXPECT_TRUE((*entries)[0].quarantined);
  EXPECT_TRUE(std::filesystem::exists(Path("quarantine/m-0000000000000001.manifest")));
}

// With room for one quarantine entry: checkpoint 1 is quarantined and written again, and 3's
// quarantine pushes 1's out. The catalog keeps 1's live entry, but 1's old manifest leaves
// quarantine/: once 1 is deleted too, only the bound's one manifest is kept (R5).
TEST_F(DiskStoreTest, AQuarantinePushedPastTheBoundDeletesTheOldManifestOfAnIdWrittenAgain) {
  DiskStoreOptions o = Options();
  o.max_quarantined = 1;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));
  QuarantineByVerify(store.get(), 1);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));  // Written again.
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(3, {}, 1)));

  QuarantineByVerify(store.get(), 3);  // Pushes 1's entry out.
  CAIRN_ASSERT_OK(store->Delete(1));

  EXPECT_EQ(QuarantinedManifests(), std::vector<std::string>{"m-0000000000000003.manifest"});
  auto entries = store->catalog().LoadAll();
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].checkpoint_id, 3u);
}

// A restart forgets an older quarantine of an id written again (the catalog flags only what is
// quarantined now): start-up deletes its manifest, which nothing would push out later.
TEST_F(DiskStoreTest, StartUpDeletesTheQuarantinedManifestOfAnIdWrittenAgain) {
  auto store = WriteAndReopen([&](DiskStore& s) {
    CAIRN_ASSERT_OK(s.Publish(factory_.Build(1, {}, 1)));
    QuarantineByVerify(&s, 1);
    CAIRN_ASSERT_OK(s.Publish(factory_.Build(1, {}, 1)));  // Written again.
    CAIRN_ASSERT_OK(s.Publish(factory_.Build(2, {}, 1)));
    QuarantineByVerify(&s, 2);
  });

  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->HasCheckpoint(1));
  ASSERT_EQ(store->Quarantined().size(), 1u);
  EXPECT_EQ(QuarantinedManifests(), std::vector<std::string>{"m-0000000000000002.manifest"});
}

// A read of checkpoint 1 outlives its copy: while the read runs, the copy is found damaged,
// quarantined and written again under the same id (as the daemon does with a checkpoint still
// in RAM). What the stale read then finds names the old copy's files, never the new copy's.
class StaleReadTest : public DiskStoreTest {
 protected:
  // Restores checkpoint 1; before anything is read, its state file is damaged, a verify
  // quarantines it and a new copy is published. `fail_destination`: the caller's destination
  // then fails for the next piece, so nothing is read.
  absl::Status RestoreWhileWrittenAgain(DiskStore* store, bool fail_destination) {
    auto m = store->GetManifest(1);
    if (!m.ok()) return m.status();
    std::vector<std::vector<uint8_t>> pieces;
    bool replaced = false;
    return store->Restore(1, [&](const RestorePiece& piece) -> absl::StatusOr<absl::Span<uint8_t>> {
      if (replaced && fail_destination) return absl::ResourceExhaustedError("arena full");
      if (!replaced) {
        replaced = true;
        FlipByte("states/" + m->state_file.name);
        EXPECT_THAT(store->Verify(1), StatusIs(absl::StatusCode::kDataLoss));
        CAIRN_EXPECT_OK(store->Publish(factory_.Build(1, {}, 1)));  // Written again.
      }
      pieces.emplace_back(piece.bytes);
      return absl::Span<uint8_t>(pieces.back());
    });
  }
};

TEST_F(StaleReadTest, AStaleReadThatFindsTheOldFilesGoneLeavesTheNewCopyAlone) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));

  absl::Status stale = RestoreWhileWrittenAgain(store.get(), /*fail_destination=*/false);

  EXPECT_THAT(stale, StatusIs(absl::StatusCode::kNotFound));  // Not the new copy's damage.
  ASSERT_TRUE(store->HasCheckpoint(1));  // Not quarantined for the old copy's damage.
  EXPECT_EQ(store->Quarantined().size(), 1u);
  auto restored = RestoreAll(store.get(), 1);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, factory_.Expected(1));
  CAIRN_EXPECT_OK(store->Delete(1));
}

TEST_F(StaleReadTest, AStaleReadThatEndsEarlyLeavesNoReaderOnTheNewCopy) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));

  absl::Status stale = RestoreWhileWrittenAgain(store.get(), /*fail_destination=*/true);

  EXPECT_THAT(stale, StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_TRUE(store->HasCheckpoint(1));
  CAIRN_EXPECT_OK(store->Delete(1));  // No reader left counted on it.
  EXPECT_FALSE(store->HasCheckpoint(1));
}

// The same for a chunk: checkpoint 1 is quarantined with its damaged chunk, and a checkpoint is
// written with that chunk as a new file under the same chunk id (the daemon's retry). A read of
// checkpoint 1 that started before finds the old chunk file gone; the new file is not lost.
TEST_F(StaleReadTest, AStaleReadOfAChunkWrittenAgainLeavesTheNewChunkFileAlone) {
  std::unique_ptr<DiskStore> store;
  uint64_t chunk = 0;
  std::string chunk_file;
  // Once, when the read first asks for a chunk file's size: after the state file.
  bool armed = false;  // One thread only: the test's (restore_threads 1).
  HookFileSystem fs;
  fs.SetBeforeFileSize([&](const std::string& path) {
    if (!armed || !absl::StrContains(path, "/chunks/")) return;
    armed = false;
    FlipByte("chunks/" + chunk_file);
    EXPECT_THAT(store->Verify(1), StatusIs(absl::StatusCode::kDataLoss));
    PublishRequest again = factory_.Build(2, {}, 1);
    again.new_chunks[0].id.chunk_id = chunk;  // The lost chunk, written anew.
    CAIRN_EXPECT_OK(store->Publish(again));
  });
  DiskStoreOptions o = Options();
  o.restore_threads = 1;
  auto created = DiskStore::Create(o, &fs);
  ASSERT_TRUE(created.ok()) << created.status();
  store = *std::move(created);
  CAIRN_ASSERT_OK(store->Publish(factory_.Build(1, {}, 1)));
  chunk = factory_.ChunksOf(1)[0];
  auto m = store->GetManifest(1);
  ASSERT_TRUE(m.ok()) << m.status();
  chunk_file = m->chunks[0].file.name;
  armed = true;

  absl::Status stale = RestoreAll(store.get(), 1).status();

  EXPECT_FALSE(stale.ok());
  EXPECT_TRUE(store->HasChunk(chunk));
  EXPECT_TRUE(store->HasCheckpoint(2));
  CAIRN_EXPECT_OK(store->Verify(2));
}

}  // namespace
}  // namespace cairn::cache
