#include "services/cache/daemon_counters.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cairn::cache {
namespace {

TEST(DaemonCountersTest, HitsCountByTierAndOnlyRestoresCountTokens) {
  DaemonCounters counters;
  counters.CountLookup();
  counters.CountLookup();

  counters.CountHit(Tier::kLive, 500);
  counters.CountHit(Tier::kRam, 64);
  counters.CountHit(Tier::kDisk, 32);

  const DaemonCounters::Snapshot s = counters.Take();
  EXPECT_EQ(s.lookups, 2u);
  EXPECT_EQ(s.hits[static_cast<int>(Tier::kLive)], 1u);
  EXPECT_EQ(s.hits[static_cast<int>(Tier::kRam)], 1u);
  EXPECT_EQ(s.hits[static_cast<int>(Tier::kDisk)], 1u);
  EXPECT_EQ(s.tokens_restored, 96u);
}

TEST(DaemonCountersTest, ARankedEvictionCountsUnderItsRank) {
  DaemonCounters counters;

  counters.CountEviction(Tier::kRam, "budget, idle");
  counters.CountEviction(Tier::kRam, "explicit");
  counters.CountEviction(Tier::kDisk, "disk full, superseded");
  counters.CountEviction(Tier::kRam, "");

  const DaemonCounters::Snapshot s = counters.Take();
  ASSERT_EQ(s.evictions.size(), 4u);
  EXPECT_EQ(s.evictions[0].tier, Tier::kRam);
  EXPECT_EQ(s.evictions[0].reason, "explicit");
  EXPECT_EQ(s.evictions[1].reason, "idle");
  EXPECT_EQ(s.evictions[2].reason, "unspecified");
  EXPECT_EQ(s.evictions[3].tier, Tier::kDisk);
  EXPECT_EQ(s.evictions[3].reason, "superseded");
}

TEST(DaemonCountersTest, ReasonsPastTheBoundCountAsOther) {
  DaemonCounters counters;

  for (size_t i = 0; i < DaemonCounters::kMaxEvictionReasons + 5; ++i) {
    counters.CountEviction(Tier::kRam, "reason " + std::to_string(i));
  }
  counters.CountEviction(Tier::kDisk, "explicit");

  const DaemonCounters::Snapshot s = counters.Take();
  size_t ram_reasons = 0;
  uint64_t other = 0;
  for (const DaemonCounters::Eviction& e : s.evictions) {
    if (e.tier != Tier::kRam) continue;
    ++ram_reasons;
    if (e.reason == "other") other = e.count;
  }
  EXPECT_EQ(ram_reasons, DaemonCounters::kMaxEvictionReasons + 1);
  EXPECT_EQ(other, 5u);
  EXPECT_EQ(s.evictions.back().reason, "explicit");  // The disk tier's bound is its own.
}

// Request threads count while GetStatus takes snapshots (run under TSan with the unit label).
TEST(DaemonCountersTest, ConcurrentCountsAndSnapshotsAgree) {
  DaemonCounters counters;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&counters] {
      for (int i = 0; i < 1000; ++i) {
        counters.CountLookup();
        counters.CountHit(Tier::kRam, 2);
        counters.CountEviction(Tier::kRam, "budget, idle");
      }
    });
  }
  for (int i = 0; i < 100; ++i) counters.Take();
  for (std::thread& t : threads) t.join();

  const DaemonCounters::Snapshot s = counters.Take();
  EXPECT_EQ(s.lookups, 4000u);
  EXPECT_EQ(s.tokens_restored, 8000u);
  ASSERT_EQ(s.evictions.size(), 1u);
  EXPECT_EQ(s.evictions[0].count, 4000u);
}

}  // namespace
}  // namespace cairn::cache
