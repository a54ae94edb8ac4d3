// kill -9 at precise points of a publish, a delete and a quarantine (CAIRN_KILL_POINT), then
// recovery: the
// page cache survives a kill, so this checks the recovery logic (R2, R3), not durability,
// which the FaultFS crash tests cover (docs/reliability.md §5.1).

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "services/cache/disk/disk_store.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::CheckpointFactory;
using ::cairn::cache::testing::DataFiles;
using ::cairn::cache::testing::HookFileSystem;
using ::cairn::cache::testing::RestoreAll;
using ::cairn::cache::testing::TempDir;

struct KillCase {
  const char* point;
  bool delete_a;    // Kill during Delete(A) instead of Publish(B).
  bool b_survives;  // Whether B is visible after recovery.
};

// Test names and failure messages show the kill point, not the struct's bytes.
void PrintTo(const KillCase& c, std::ostream* os) { *os << c.point; }

class KillPointDeathTest : public ::testing::TestWithParam<KillCase> {};

std::unique_ptr<DiskStore> Open(const std::string& root, FileSystem* fs = PosixFileSystem()) {
  DiskStoreOptions o;
  o.root = root;
  o.free_space_reserve_bytes = 0;
  auto store = DiskStore::Create(o, fs);
  return store.ok() ? std::move(*store) : nullptr;
}

// Why the kill-point death tests cannot run in this build; nullptr when they can.
const char* WhyKillPointsCannotRun() {
#if defined(NDEBUG)
  return "kill points are compiled out of release builds";
#elif defined(__SANITIZE_THREAD__)
  // The fast death-test style forks a threaded process; TSan cannot start threads there.
  return "kill-point death tests do not run under ThreadSanitizer";
#else
  return nullptr;
#endif
}

TEST_P(KillPointDeathTest, RecoveryAfterAKillIsConsistent) {
  if (const char* why = WhyKillPointsCannotRun(); why != nullptr) GTEST_SKIP() << why;
  const KillCase& c = GetParam();
  TempDir dir;
  CheckpointFactory factory(16, 512);
  const PublishRequest a = factory.Build(1, {}, 3);
  const PublishRequest b = factory.Build(2, {factory.ChunksOf(1)[0]}, 2);
  {
    auto store = Open(dir.path());
    ASSERT_NE(store, nullptr);
    CAIRN_ASSERT_OK(store->Publish(a));
    if (c.delete_a) {
      CAIRN_ASSERT_OK(store->Publish(b));
    }
  }
  // The default ("fast") death-test style forks here, after the store above is closed, so
  // the child works on this directory.

  EXPECT_EXIT(
      {
        ::setenv("CAIRN_KILL_POINT", c.point, 1);
        auto store = Open(dir.path());
        if (store != nullptr) {
          (c.delete_a ? store->Delete(1) : store->Publish(b)).IgnoreError();
        }
        std::exit(3);  // The kill point was not reached.
      },
      ::testing::KilledBySignal(SIGKILL), "");

  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->HasCheckpoint(2), c.b_survives) << c.point;
  for (const DiskCheckpointInfo& info : store->ListCheckpoints()) {
    auto bytes = RestoreAll(store.get(), info.checkpoint_id);
    ASSERT_TRUE(bytes.ok()) << c.point << ": " << bytes.status();
    EXPECT_EQ(*bytes, factory.Expected(info.checkpoint_id));
  }
  auto swept = store->SweepOrphans();
  ASSERT_TRUE(swept.ok());
  // A manifest and a state file per checkpoint, and the chunks: nothing orphaned.
  const size_t expected_files = 2 * store->stats().checkpoints + store->stats().chunks;
  EXPECT_EQ(DataFiles(dir.path()).size(), expected_files) << c.point;
}

INSTANTIATE_TEST_SUITE_P(
    Points, KillPointDeathTest,
    ::testing::Values(KillCase{"disk.publish.before_manifest_rename", false, false},
                      KillCase{"disk.publish.after_manifest_rename", false, true},
                      KillCase{"disk.publish.after_catalog", false, true},
                      KillCase{"disk.delete.after_catalog", true, true}),
    [](const ::testing::TestParamInfo<KillCase>& param_info) {
      std::string name = param_info.param.point;
      std::replace(name.begin(), name.end(), '.', '_');
      return name;
    });

// A publish of checkpoint 2, sharing checkpoint 1's chunk, loses that chunk once its manifest is
// durable (a verify of checkpoint 1 finds it damaged): the publish quarantines checkpoint 2, and
// is killed between the quarantine's catalog flag and its manifest's move to quarantine/.
// Start-up finishes the quarantine: no restart lists the damaged chunk's file again.
TEST(QuarantineKillPointDeathTest, APublishKilledInTheQuarantineOfItsLostChunkStaysQuarantined) {
  if (const char* why = WhyKillPointsCannotRun(); why != nullptr) GTEST_SKIP() << why;
  TempDir dir;
  CheckpointFactory factory(16, 512);
  const PublishRequest a = factory.Build(1, {}, 3);
  const PublishRequest b = factory.Build(2, {factory.ChunksOf(1)[0]}, 2);
  std::string chunk_file;
  {
    auto store = Open(dir.path());
    ASSERT_NE(store, nullptr);
    CAIRN_ASSERT_OK(store->Publish(a));
    auto m = store->GetManifest(1);
    ASSERT_TRUE(m.ok()) << m.status();
    chunk_file = dir.path() + "/chunks/" + m->chunks[0].file.name;
  }

  EXPECT_EXIT(
      {
        HookFileSystem fs;
        std::unique_ptr<DiskStore> store;
        fs.SetAfterRename([&](const std::string& to) {
          if (!absl::EndsWith(to, "/manifests/m-0000000000000002.manifest")) return;
          std::fstream f(chunk_file, std::ios::in | std::ios::out | std::ios::binary);
          f.seekg(200);
          const char byte = static_cast<char>(f.get());
          f.seekp(200);
          f.put(static_cast<char>(byte ^ 0x5a));
          f.close();
          store->Verify(1).IgnoreError();  // DataLoss: checkpoint 1 is quarantined.
          ::setenv("CAIRN_KILL_POINT", "disk.quarantine.after_catalog", 1);  // Then 2's.
        });
        store = Open(dir.path(), &fs);
        if (store != nullptr) store->Publish(b).IgnoreError();
        std::exit(3);  // The kill point was not reached.
      },
      ::testing::KilledBySignal(SIGKILL), "");

  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->ListCheckpoints().empty());
  EXPECT_EQ(store->Quarantined().size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/quarantine/m-0000000000000002.manifest"));
  auto swept = store->SweepOrphans();
  ASSERT_TRUE(swept.ok());
  EXPECT_TRUE(DataFiles(dir.path()).empty());
  store.reset();
  auto again = Open(dir.path());
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->ListCheckpoints().empty());
}

}  // namespace
}  // namespace cairn::cache
