#include "services/cache/restore_leases.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cairn::cache {
namespace {

Lease Waiting(uint64_t session, std::vector<uint64_t> spills, absl::Duration duration) {
  Lease lease;
  lease.session = session;
  lease.checkpoint = 7;
  lease.slot = SlotKey{session, 1};
  lease.chunks = {11, 12};
  lease.duration = duration;
  lease.awaiting.insert(spills.begin(), spills.end());
  lease.ready = spills.empty();
  return lease;
}

TEST(RestoreLeasesTest, ALeaseIsReadyOnlyOnceEverySpillItAwaitsIsDone) {
  RestoreLeases leases;
  ASSERT_TRUE(leases.Add(1, Waiting(5, {100, 101}, absl::Seconds(30))));
  ASSERT_TRUE(leases.Add(2, Waiting(5, {101}, absl::Seconds(30))));

  const std::vector<uint64_t> after_first = leases.SpillDone(100);
  const bool early = leases.MarkReady(1, absl::Seconds(1));
  const std::vector<uint64_t> waiting = leases.AwaitingSpill(101);
  const std::vector<uint64_t> after_second = leases.SpillDone(101);

  EXPECT_TRUE(after_first.empty());
  EXPECT_FALSE(early);
  EXPECT_EQ(waiting, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(after_second, (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(leases.MarkReady(1, absl::Seconds(1)));
  std::optional<LeaseView> view = leases.Find(1);
  ASSERT_TRUE(view.has_value());
  EXPECT_TRUE(view->ready);
  EXPECT_EQ(view->chunks, (std::vector<ChunkId>{11, 12}));
}

TEST(RestoreLeasesTest, ALeaseAskedToAwaitMoreSpillsWaitsForThemToo) {
  RestoreLeases leases;
  ASSERT_TRUE(leases.Add(1, Waiting(5, {100}, absl::Seconds(30))));

  EXPECT_EQ(leases.SpillDone(100), (std::vector<uint64_t>{1}));
  leases.Await(1, {102});

  EXPECT_FALSE(leases.MarkReady(1, absl::Seconds(1)));
  EXPECT_EQ(leases.SpillDone(102), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(leases.MarkReady(1, absl::Seconds(1)));
}

TEST(RestoreLeasesTest, OnlyReadyLeasesExpireCountedFromWhenTheyBecameReady) {
  RestoreLeases leases;
  Lease granted_ready = Waiting(5, {}, absl::Seconds(30));
  granted_ready.expires = absl::Seconds(30);
  ASSERT_TRUE(leases.Add(1, std::move(granted_ready)));
  ASSERT_TRUE(leases.Add(2, Waiting(5, {100}, absl::Seconds(30))));
  leases.SpillDone(100);
  ASSERT_TRUE(leases.MarkReady(2, absl::Seconds(20)));

  EXPECT_TRUE(leases.Expired(absl::Seconds(29)).empty());
  EXPECT_EQ(leases.Expired(absl::Seconds(30)), (std::vector<uint64_t>{1}));
  EXPECT_EQ(leases.Expired(absl::Seconds(50)), (std::vector<uint64_t>{1, 2}));
}

TEST(RestoreLeasesTest, OnlyLeasesStillWaitingPastTheirBoundAreOverdue) {
  RestoreLeases leases;
  Lease waiting = Waiting(5, {100}, absl::Seconds(30));
  waiting.ready_by = absl::Seconds(60);
  ASSERT_TRUE(leases.Add(1, std::move(waiting)));
  Lease ready = Waiting(5, {}, absl::Seconds(30));
  ready.ready_by = absl::Seconds(60);
  ready.expires = absl::Seconds(90);
  ASSERT_TRUE(leases.Add(2, std::move(ready)));
  Lease made_ready = Waiting(5, {101}, absl::Seconds(30));
  made_ready.ready_by = absl::Seconds(60);
  ASSERT_TRUE(leases.Add(3, std::move(made_ready)));
  leases.SpillDone(101);
  ASSERT_TRUE(leases.MarkReady(3, absl::Seconds(10)));

  EXPECT_TRUE(leases.Overdue(absl::Seconds(59)).empty());
  EXPECT_EQ(leases.Overdue(absl::Seconds(60)), (std::vector<uint64_t>{1}));
  EXPECT_EQ(leases.Overdue(absl::Seconds(600)), (std::vector<uint64_t>{1}));
}

TEST(RestoreLeasesTest, TakeHandsTheLeaseWithItsDiskLoadOverOnce) {
  RestoreLeases leases;
  Lease lease = Waiting(5, {}, absl::Seconds(30));
  lease.loaded = std::make_unique<DiskLoad>();
  lease.loaded->state.private_bytes = 64;
  ASSERT_TRUE(leases.Add(1, std::move(lease)));

  EXPECT_FALSE(leases.Add(1, Waiting(6, {}, absl::Seconds(1))));
  std::optional<Lease> taken = leases.Take(1);
  std::optional<Lease> again = leases.Take(1);

  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->session, 5u);
  ASSERT_NE(taken->loaded, nullptr);
  EXPECT_EQ(taken->loaded->state.private_bytes, 64u);
  EXPECT_FALSE(again.has_value());
  EXPECT_EQ(leases.size(), 0u);
}

// Grants, spill completions, expiry scans and releases from several threads (TSan).
TEST(RestoreLeasesTest, ConcurrentGrantsSettlesAndExpiriesAreSafe) {
  RestoreLeases leases;
  std::atomic<bool> stop{false};
  std::thread scanner([&] {
    while (!stop.load()) {
      leases.Expired(absl::Seconds(100));
      leases.AwaitingSpill(3);
      leases.size();
    }
  });
  std::vector<std::thread> writers;
  for (uint64_t t = 0; t < 3; ++t) {
    writers.emplace_back([&leases, t] {
      for (uint64_t i = 0; i < 300; ++i) {
        const uint64_t id = t * 1000 + i;
        EXPECT_TRUE(leases.Add(id, Waiting(t, {i % 5}, absl::Seconds(1))));
        leases.SpillDone(i % 5);
        leases.MarkReady(id, absl::Seconds(1));
        if (i % 2 == 0) {
          EXPECT_TRUE(leases.Take(id).has_value());
        }
      }
    });
  }
  for (std::thread& w : writers) w.join();
  stop.store(true);
  scanner.join();

  EXPECT_EQ(leases.size(), 3u * 150u);
}

TEST(RestoreLeasesTest, ALeaseAddsOnlyTheHoldsItDoesNotHaveYet) {
  RestoreLeases leases;
  ASSERT_TRUE(leases.Add(1, Waiting(5, {100}, absl::Seconds(30))));
  HeldRegion a;
  a.region.offset = 0;
  a.bytes = 10;
  HeldRegion b;
  b.region.offset = 4096;
  b.bytes = 10;

  const std::vector<HeldRegion> first = leases.AddHolds(1, {a});
  const std::vector<HeldRegion> second = leases.AddHolds(1, {a, b, HeldRegion{}});
  const std::vector<HeldRegion> unknown = leases.AddHolds(2, {a});

  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].region.offset, 4096u);
  EXPECT_TRUE(unknown.empty());
  std::optional<Lease> taken = leases.Take(1);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->holds.size(), 2u);
}

}  // namespace
}  // namespace cairn::cache
