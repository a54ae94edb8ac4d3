// The RocksDB catalog on FaultFS (docs/reliability.md P6, A6): after a simulated power loss
// under every crash model, the catalog holds every acknowledged (sync=true) write and is a
// prefix of the write trace: no holes. More cycles: CAIRN_CATALOG_CYCLES=n; another random
// sequence (for shards of a long run): CAIRN_CATALOG_SEED=s (default 6).

#include "services/cache/disk/catalog.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/cache/disk/testing/fault_file_system.h"
#include "services/cache/disk/testing/rocksdb_fault_fs.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::TempDir;
using ::cairn::testing::StatusIs;

// The integer in the environment variable `name`, or `fallback`.
int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  int n = fallback;
  if (v != nullptr && !absl::SimpleAtoi(v, &n)) n = fallback;
  return n;
}

int Cycles() { return EnvInt("CAIRN_CATALOG_CYCLES", 100); }

TEST(CatalogTest, EntriesRoundTripInIdOrder) {
  TempDir dir;
  auto catalog = Catalog::Open(dir.path() + "/catalog", nullptr, {});
  ASSERT_TRUE(catalog.ok()) << catalog.status();

  CAIRN_ASSERT_OK((*catalog)->Put({300, false, "m300"}));
  CAIRN_ASSERT_OK((*catalog)->Put({2, true, ""}));
  CAIRN_ASSERT_OK((*catalog)->Remove(7));  // Absent: not an error.

  auto entries = (*catalog)->LoadAll();
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].checkpoint_id, 2u);
  EXPECT_TRUE((*entries)[0].quarantined);
  EXPECT_EQ((*entries)[1].manifest, "m300");
  CAIRN_EXPECT_OK((*catalog)->VerifyChecksums());
}

TEST(CatalogTest, ReservedIdsAreARecordApartFromTheEntries) {
  TempDir dir;
  {
    auto catalog = Catalog::Open(dir.path() + "/catalog", nullptr, {});
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    auto none = (*catalog)->ReservedCheckpointIds();
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(*none, 0u);  // As in catalogs written before the record.
    auto no_chunks = (*catalog)->ReservedChunkIds();
    ASSERT_TRUE(no_chunks.ok()) << no_chunks.status();
    EXPECT_EQ(*no_chunks, 0u);
    CAIRN_ASSERT_OK((*catalog)->Put({7, false, "m7"}));
    CAIRN_ASSERT_OK((*catalog)->PutReservedCheckpointIds(0x0102030405060708));
    CAIRN_ASSERT_OK((*catalog)->PutReservedChunkIds(0x1112131415161718));
  }

  auto catalog = Catalog::Open(dir.path() + "/catalog", nullptr, {});

  ASSERT_TRUE(catalog.ok()) << catalog.status();
  auto reserved = (*catalog)->ReservedCheckpointIds();
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_EQ(*reserved, 0x0102030405060708u);
  auto reserved_chunks = (*catalog)->ReservedChunkIds();
  ASSERT_TRUE(reserved_chunks.ok()) << reserved_chunks.status();
  EXPECT_EQ(*reserved_chunks, 0x1112131415161718u);
  auto entries = (*catalog)->LoadAll();
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].checkpoint_id, 7u);
}

// No daemon reserves ids near 2^64 (the next id would wrap): a record above 2^62 is damage.
TEST(CatalogTest, AReservedIdsRecordAboveTheBoundIsDataLoss) {
  TempDir dir;
  auto catalog = Catalog::Open(dir.path() + "/catalog", nullptr, {});
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  CAIRN_ASSERT_OK((*catalog)->PutReservedCheckpointIds(kMaxReservedId));
  CAIRN_ASSERT_OK((*catalog)->PutReservedChunkIds(kMaxReservedId + 1));

  auto at_bound = (*catalog)->ReservedCheckpointIds();
  ASSERT_TRUE(at_bound.ok()) << at_bound.status();
  EXPECT_EQ(*at_bound, kMaxReservedId);
  EXPECT_THAT((*catalog)->ReservedChunkIds().status(), StatusIs(absl::StatusCode::kDataLoss));
  CAIRN_ASSERT_OK((*catalog)->PutReservedCheckpointIds(~uint64_t{0}));
  EXPECT_THAT((*catalog)->ReservedCheckpointIds().status(), StatusIs(absl::StatusCode::kDataLoss));
}

// A daemon restarts many times over the life of its disk tier: reopening the catalog must not
// leave one more file behind each time (an empty write-ahead log per open, say).
TEST(CatalogTest, ReopeningDoesNotAccumulateFiles) {
  TempDir dir;
  const std::string path = dir.path() + "/catalog";
  auto count_files = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(path)) n += e.is_regular_file();
    return n;
  };
  constexpr int kOpens = 40;
  int most_early = 0;  // Files after each of the first half of the opens, at most.
  int most_late = 0;
  for (int open = 0; open < kOpens; ++open) {
    auto catalog = Catalog::Open(path, nullptr, {});
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    if (open % 2 == 0) {  // Every other run writes; the others only read.
      CAIRN_ASSERT_OK((*catalog)->Put({100u + open, false, "m"}));
    }
    catalog->reset();
    int& most = open < kOpens / 2 ? most_early : most_late;
    most = std::max(most, count_files());
  }

  // Each close flushes its run's log into a table file; Open merges them once there are more
  // than max_table_files: the number of files levels off instead of growing with restarts. One
  // file of slack: whether RocksDB's own background merge of level-0 tables ran before a close
  // is a matter of timing.
  EXPECT_LE(most_late, most_early + 1);
  // Besides the tables: CURRENT, IDENTITY, LOCK, MANIFEST, two OPTIONS, LOG, its old copies
  // (keep_log_file_num) and a log.
  EXPECT_LE(most_late, static_cast<int>(CatalogOptions().max_table_files) + 1 + 10);
  auto catalog = Catalog::Open(path, nullptr, {});
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  auto entries = (*catalog)->LoadAll();
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_EQ(entries->size(), static_cast<size_t>(kOpens / 2));
}

// The common restart: the daemon reads its catalog and stops without publishing anything. Each
// such run used to leave its empty write-ahead log behind (RocksDB does not flush an empty
// memtable, so it kept every log as unflushed).
TEST(CatalogTest, ReopeningWithoutWritesKeepsOneLog) {
  TempDir dir;
  const std::string path = dir.path() + "/catalog";
  auto count = [&](const std::string& extension) {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(path)) {
      n += e.path().extension() == extension;
    }
    return n;
  };
  {
    auto catalog = Catalog::Open(path, nullptr, {});
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    CAIRN_ASSERT_OK((*catalog)->Put({7, false, "m"}));
  }
  for (int open = 0; open < 12; ++open) {
    auto catalog = Catalog::Open(path, nullptr, {});
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    auto entries = (*catalog)->LoadAll();
    ASSERT_TRUE(entries.ok()) << entries.status();
    ASSERT_EQ(entries->size(), 1u);  // The close marker is never an entry.
    EXPECT_EQ((*entries)[0].checkpoint_id, 7u);
  }
  // The folder's files on failure (seen once under a loaded full suite, not reproduced since).
  std::string listing;
  for (const auto& e : std::filesystem::directory_iterator(path)) {
    absl::StrAppend(&listing, " ", e.path().filename().string());
  }
  EXPECT_LE(count(".log"), 1) << listing;
  EXPECT_LE(count(".sst"), static_cast<int>(CatalogOptions().max_table_files)) << listing;
}

TEST(CatalogTest, PowerLossKeepsEverySyncedWriteAndLeavesNoHoles) {
  TempDir dir;
  FaultFileSystem fault(PosixFileSystem());
  const int seed = EnvInt("CAIRN_CATALOG_SEED", 6);
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  uint64_t next = 1;          // Entries are written in id order: the trace.
  uint64_t acknowledged = 0;  // Highest id whose Put returned OK.
  int crashes = 0;
  for (int cycle = 0; cycle < Cycles(); ++cycle) {
    const CrashModel model = kAllCrashModels[rng() % 4];
    const std::string label =
        absl::StrCat("cycle ", cycle, " seed ", seed, " model ", CrashModelName(model));
    {
      auto catalog = Catalog::Open(dir.path() + "/catalog", NewRocksDbFaultFs(&fault), {});
      ASSERT_TRUE(catalog.ok()) << label << ": " << catalog.status();
      auto entries = (*catalog)->LoadAll();
      ASSERT_TRUE(entries.ok()) << label << ": " << entries.status();
      // A prefix of the trace 1..next-1 that includes every acknowledged write.
      for (size_t i = 0; i < entries->size(); ++i) {
        ASSERT_EQ((*entries)[i].checkpoint_id, i + 1) << label << ": hole in the catalog";
      }
      ASSERT_GE(entries->size(), acknowledged) << label << ": acknowledged write lost";
      next = entries->size() + 1;  // Unacknowledged writes that did not survive are rewritten.
      acknowledged = entries->size();
      fault.ClearOpLog();
      fault.SetCrashAfter(static_cast<int64_t>(rng() % 20));
      for (int i = 0; i < 8; ++i, ++next) {
        if (!(*catalog)->Put({next, false, absl::StrCat("manifest-", next)}).ok()) break;
        acknowledged = next;
      }
      crashes += fault.crashed();
    }
    ASSERT_TRUE(fault.SimulateCrash(model, rng()).ok()) << label;
  }
  std::cout << "A6: cycles=" << Cycles() << " seed=" << seed << " crashes=" << crashes
            << " entries=" << acknowledged << "\n";
  EXPECT_GT(crashes, 0);
}

}  // namespace
}  // namespace cairn::cache
