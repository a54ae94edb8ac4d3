// FaultFS itself: what each crash model keeps and loses (docs/reliability.md §5.1).

#include "services/cache/disk/testing/fault_file_system.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::TempDir;
using ::cairn::testing::StatusIs;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class FaultFileSystemTest : public ::testing::Test {
 protected:
  std::string P(const std::string& name) { return dir_.path() + "/" + name; }
  // Writes "synced" + sync, then "unsynced" without.
  void WriteHalfSynced(const std::string& path) {
    auto f = fs_.NewWritableFile(path);
    ASSERT_TRUE(f.ok()) << f.status();
    CAIRN_ASSERT_OK((*f)->Append("synced"));
    CAIRN_ASSERT_OK((*f)->Sync());
    CAIRN_ASSERT_OK((*f)->Append("unsynced"));
    CAIRN_ASSERT_OK((*f)->Close());
  }

  TempDir dir_;
  FaultFileSystem fs_{PosixFileSystem()};
};

TEST_F(FaultFileSystemTest, DropUnsyncedKeepsOnlySyncedData) {
  WriteHalfSynced(P("f"));

  CAIRN_ASSERT_OK(fs_.SimulateCrash(CrashModel::kDropUnsyncedData, 0));

  EXPECT_EQ(Read(P("f")), "synced");  // The entry survives: this model keeps entries.
}

TEST_F(FaultFileSystemTest, RandomTailKeepsAPrefixOfTheUnsyncedData) {
  WriteHalfSynced(P("f"));

  CAIRN_ASSERT_OK(fs_.SimulateCrash(CrashModel::kDropRandomTail, 3));

  const std::string got = Read(P("f"));
  EXPECT_EQ(std::string("syncedunsynced").substr(0, got.size()), got);
  EXPECT_GE(got.size(), 6u);
}

TEST_F(FaultFileSystemTest, LoseDirEntriesUndoesUnsyncedCreatesRenamesAndDeletes) {
  WriteHalfSynced(P("created"));
  WriteHalfSynced(P("durable"));
  CAIRN_ASSERT_OK(fs_.SyncDir(dir_.path()));
  CAIRN_ASSERT_OK(fs_.Rename(P("durable"), P("renamed")));
  WriteHalfSynced(P("new"));
  CAIRN_ASSERT_OK(fs_.Delete(P("created")));

  CAIRN_ASSERT_OK(fs_.SimulateCrash(CrashModel::kLoseDirEntries, 0));

  EXPECT_FALSE(std::filesystem::exists(P("new")));
  EXPECT_FALSE(std::filesystem::exists(P("renamed")));
  EXPECT_EQ(Read(P("durable")), "synced");
  EXPECT_EQ(Read(P("created")), "synced");  // The unsynced unlink is undone.
}

TEST_F(FaultFileSystemTest, WriteListNeverTouchesSyncedBytes) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::string path = P("w" + std::to_string(seed));
    WriteHalfSynced(path);

    CAIRN_ASSERT_OK(fs_.SimulateCrash(CrashModel::kWriteList, seed));

    EXPECT_EQ(Read(path).substr(0, 6), "synced") << seed;
  }
}

TEST_F(FaultFileSystemTest, CrashAfterKFailsEveryLaterOperation) {
  fs_.SetCrashAfter(2);
  auto f = fs_.NewWritableFile(P("f"));
  ASSERT_TRUE(f.ok());
  CAIRN_ASSERT_OK((*f)->Append("a"));

  EXPECT_THAT((*f)->Sync(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(fs_.crashed());
  EXPECT_THAT(fs_.ListDir(dir_.path()).status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(fs_.op_count(), 3);
  CAIRN_ASSERT_OK((*f)->Close());
  CAIRN_ASSERT_OK(fs_.SimulateCrash(CrashModel::kDropUnsyncedData, 0));
  EXPECT_FALSE(fs_.crashed());
  EXPECT_EQ(Read(P("f")), "");
}

TEST_F(FaultFileSystemTest, InjectedErrorsAreTransientOrPersistent) {
  fs_.InjectError(1, absl::ResourceExhaustedError("ENOSPC"), /*persistent=*/false);
  EXPECT_THAT(fs_.NewWritableFile(P("a")).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(fs_.NewWritableFile(P("b")).ok());

  fs_.InjectError(3, absl::UnavailableError("EIO"), /*persistent=*/true);
  EXPECT_THAT(fs_.NewWritableFile(P("c")).status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(fs_.NewWritableFile(P("d")).status(), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace cairn::cache
