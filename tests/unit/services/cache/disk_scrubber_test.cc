// The disk scrubber verifies every checkpoint once per pass and reports the damaged ones.

#include "services/cache/disk_scrubber.h"

#include <fstream>
#include <memory>
#include <vector>

#include "common/concurrency/mutex.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::CheckpointFactory;
using ::cairn::cache::testing::TempDir;

class DiskScrubberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = testing::OpenTestStore(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  // Flips one byte of checkpoint `id`'s state file.
  void Damage(uint64_t id) {
    auto m = store_->GetManifest(id);
    ASSERT_TRUE(m.ok()) << m.status();
    std::fstream f(dir_.path() + "/states/" + m->state_file.name,
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  DiskScrubber::OnCorrupt Record() {
    return [this](uint64_t id, const absl::Status& why) {
      MutexLock lock(&mu_);
      reported_.push_back(id);
      EXPECT_EQ(why.code(), absl::StatusCode::kDataLoss);
    };
  }
  std::vector<uint64_t> reported() {
    MutexLock lock(&mu_);
    return reported_;
  }

  TempDir dir_;
  std::unique_ptr<DiskStore> store_;
  CheckpointFactory factory_{16, 1024};
  Mutex mu_;
  std::vector<uint64_t> reported_ ABSL_GUARDED_BY(mu_);
};

TEST_F(DiskScrubberTest, APassVerifiesEveryCheckpointAndReportsTheDamagedOne) {
  for (uint64_t id = 1; id <= 3; ++id) CAIRN_ASSERT_OK(store_->Publish(factory_.Build(id, {}, 2)));
  ASSERT_NO_FATAL_FAILURE(Damage(2));
  DiskScrubber scrubber(store_.get(), DiskScrubberOptions(), Record());

  std::vector<uint64_t> read;
  for (int i = 0; i < 10; ++i) {  // Bounded: three checkpoints, then the end of the pass.
    const uint64_t bytes = scrubber.Step();
    if (bytes == 0) break;
    read.push_back(bytes);
  }

  EXPECT_EQ(read.size(), 3u);
  EXPECT_EQ(reported(), std::vector<uint64_t>{2});
  EXPECT_FALSE(store_->HasCheckpoint(2));  // Quarantined by the store.
  EXPECT_TRUE(store_->HasCheckpoint(1));
  EXPECT_TRUE(store_->HasCheckpoint(3));
  const DiskScrubberStats stats = scrubber.stats();
  EXPECT_EQ(stats.verified, 2u);
  EXPECT_EQ(stats.corrupt, 1u);
  EXPECT_EQ(stats.passes, 1u);
  EXPECT_GT(stats.bytes_read, 2u * 2 * 16 * 1024);  // Two checkpoints of two chunks at least.
}

TEST_F(DiskScrubberTest, TheNextPassStartsOverAndFindsNothingNew) {
  CAIRN_ASSERT_OK(store_->Publish(factory_.Build(1, {}, 1)));
  DiskScrubber scrubber(store_.get(), DiskScrubberOptions(), Record());
  EXPECT_GT(scrubber.Step(), 0u);
  EXPECT_EQ(scrubber.Step(), 0u);

  EXPECT_GT(scrubber.Step(), 0u);
  EXPECT_EQ(scrubber.Step(), 0u);

  EXPECT_EQ(scrubber.stats().verified, 2u);
  EXPECT_EQ(scrubber.stats().passes, 2u);
  EXPECT_TRUE(reported().empty());
}

TEST_F(DiskScrubberTest, ShutdownStopsTheThreadPromptly) {
  DiskScrubberOptions o;
  o.first_pass_delay = absl::Hours(1);
  DiskScrubber scrubber(store_.get(), o, Record());
  scrubber.Start();

  const absl::Time start = absl::Now();
  scrubber.Shutdown();

  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(scrubber.stats().passes, 0u);
}

}  // namespace
}  // namespace cairn::cache
