// The disk tier: publish, restore, delete, recovery, sweep, quarantine, budget and I/O errors
// (docs/reliability.md P1-P9, R1-R5, IO1-IO5).

#include "services/cache/disk/disk_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "services/cache/disk/testing/fault_file_system.h"
#include "services/cache/disk/testing/rocksdb_fault_fs.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::CheckpointFactory;
using ::cairn::cache::testing::DataFiles;
using ::cairn::cache::testing::HookFileSystem;
using ::cairn::cache::testing::RestoreAll;
using ::cairn::cache::testing::TempDir;
using ::cairn::testing::StatusIs;

constexpr uint32_t kRows = 16;
constexpr uint64_t kRowBytes = 256;

class DiskStoreTest : public ::testing::Test {
 protected:
  DiskStoreOptions Options() {
    DiskStoreOptions o;
    o.root = dir_.path();
    o.free_space_reserve_bytes = 0;
    return o;
  }
  std::unique_ptr<DiskStore> Open(DiskStoreOptions o) {
    auto store = DiskStore::Create(o, PosixFileSystem());
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }
  std::unique_ptr<DiskStore> Open() { return Open(Options()); }
  // Opens the store, runs `write` on it and opens it again, as after a restart.
  std::unique_ptr<DiskStore> WriteAndReopen(const std::function<void(DiskStore&)>& write) {
    {
      auto store = Open();
      if (store == nullptr) return nullptr;
      write(*store);
    }
    return Open();
  }
  std::string Path(const std::string& rel) { return dir_.path() + "/" + rel; }
  // Flips one byte in the payload of the file at `rel`.
  void FlipByte(const std::string& rel) {
    std::fstream f(Path(rel), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    const char byte = static_cast<char>(f.get());
    f.seekp(200);
    f.put(static_cast<char>(byte ^ 0x5a));
  }
  // Damages checkpoint `id`'s state file; verifying it quarantines it.
  void QuarantineByVerify(DiskStore* store, uint64_t id) {
    auto m = store->GetManifest(id);
    ASSERT_TRUE(m.ok()) << m.status();
    FlipByte("states/" + m->state_file.name);
    ASSERT_THAT(store->Verify(id), StatusIs(absl::StatusCode::kDataLoss));
  }
  // The names of the manifests kept in quarantine/, sorted.
  std::vector<std::string> QuarantinedManifests() {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(Path("quarantine"))) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  TempDir dir_;
  CheckpointFactory factory_{kRows, kRowBytes};
};

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
