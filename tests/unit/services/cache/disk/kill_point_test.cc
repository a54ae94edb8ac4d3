// kill -9 at precise points of a publish and a delete (CAIRN_KILL_POINT), then recovery: the
// page cache survives a kill, so this checks the recovery logic (R2, R3), not durability,
// which the FaultFS crash tests cover (docs/reliability.md §5.1).

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <string>

#include "gtest/gtest.h"
#include "services/cache/disk/disk_store.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::CheckpointFactory;
using ::cairn::cache::testing::DataFiles;
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

std::unique_ptr<DiskStore> Open(const std::string& root) {
  DiskStoreOptions o;
  o.root = root;
  o.free_space_reserve_bytes = 0;
  auto store = DiskStore::Create(o, PosixFileSystem());
  return store.ok() ? std::move(*store) : nullptr;
}

TEST_P(KillPointDeathTest, RecoveryAfterAKillIsConsistent) {
#ifdef NDEBUG
  GTEST_SKIP() << "kill points are compiled out of release builds";
#endif
#ifdef __SANITIZE_THREAD__
  // The fast death-test style forks a threaded process; TSan cannot start threads there.
  GTEST_SKIP() << "kill-point death tests do not run under ThreadSanitizer";
#endif
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

}  // namespace
}  // namespace cairn::cache
