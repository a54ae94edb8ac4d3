// The policy core's answer to a disk that fills (the file system has less room than the disk
// ledger thought): it evicts disk checkpoints by rank, with events, and reports each one whose
// files must go, so that no checkpoint stays indexed on disk without its files.

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "services/cache/core/checkpoint_cache.h"
#include "tests/unit/services/cache/core/cache_test_util.h"

namespace cairn::cache {
namespace {

TEST(CheckpointCacheDiskFullTest, TheCoreEvictsByRankWithEventsAndReportsTheFilesToDelete) {
  CacheOptions options;
  options.disk_bytes = 100000;
  auto t = testing::MakeCache(options, testing::SimpleLayout(10, 100, 4));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  testing::TierListener listener;
  cache.SetListener(&listener);
  VectorEventSink events;
  cache.events().AddSink(&events);
  std::vector<CheckpointId> on_disk;
  for (int32_t s = 0; s < 3; ++s) {
    const SlotKey slot{1, s};
    ASSERT_TRUE(cache.StartCold(slot, testing::TestIds(), "conv" + std::to_string(s)).ok());
    ASSERT_TRUE(cache.ExtendSlot(slot, testing::Tokens(8, 1000 * (s + 1))).ok());
    absl::StatusOr<CaptureTicket> ticket =
        cache.BeginCapture(slot, CaptureKind::kEnd, "conv" + std::to_string(s), -1);
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    const CheckpointId id = *cache.CommitCapture(ticket->id);
    ASSERT_TRUE(cache.BeginPersist(id).ok());
    ASSERT_TRUE(cache.CommitPersist(id).ok());
    on_disk.push_back(id);
  }
  const int64_t used_before = cache.disk_ledger().used();

  const int64_t freed = cache.EvictDiskBytes(1, "disk full");

  ASSERT_GT(freed, 0);
  EXPECT_EQ(cache.disk_ledger().used(), used_before - freed);
  ASSERT_FALSE(listener.left_disk.empty());
  for (CheckpointId gone : listener.left_disk) {
    absl::StatusOr<CheckpointInfo> info = cache.GetCheckpoint(gone);
    EXPECT_TRUE(!info.ok() || !info->on_disk) << "checkpoint " << gone << " still on disk";
    bool evented = false;
    for (const Event& e : events.events()) {
      if (e.type == EventType::kDiskEvict && e.checkpoint == gone &&
          absl::StartsWith(e.reason, "disk full, ")) {
        evented = true;
      }
    }
    EXPECT_TRUE(evented) << "no ranked disk-evict event for checkpoint " << gone;
  }
  size_t still = 0;
  for (CheckpointId id : on_disk) {
    absl::StatusOr<CheckpointInfo> info = cache.GetCheckpoint(id);
    if (info.ok() && info->on_disk) ++still;
  }
  EXPECT_EQ(still + listener.left_disk.size(), on_disk.size());
}

}  // namespace
}  // namespace cairn::cache
