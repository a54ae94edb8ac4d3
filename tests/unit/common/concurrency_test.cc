#include <atomic>
#include <thread>
#include <vector>

#include "common/concurrency/mutex.h"
#include "common/concurrency/notification.h"
#include "common/concurrency/thread_pool.h"
#include "common/time/clock.h"
#include "gtest/gtest.h"

namespace cairn {
namespace {

TEST(ThreadPoolTest, RunsEveryScheduledClosureBeforeShutdownReturns) {
  std::atomic<int> count{0};
  ThreadPool pool(2);

  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(pool.Schedule([&count] { ++count; }));
  pool.Shutdown();

  EXPECT_EQ(count.load(), 1000);
  EXPECT_FALSE(pool.Schedule([] {}));
}

// A bound checked and enforced in one step: however many threads try at once while the only
// worker is held, exactly `max_queued` closures wait, and the others are refused.
TEST(ThreadPoolTest, TryScheduleQueuesNoMoreThanItsBoundUnderConcurrentCallers) {
  constexpr size_t kMax = 5;
  ThreadPool pool(1);
  Notification started, release;
  ASSERT_TRUE(pool.Schedule([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();
  std::atomic<int> queued{0}, full{0}, ran{0};
  std::vector<std::thread> callers;

  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        switch (pool.TrySchedule([&ran] { ++ran; }, kMax)) {
          case ThreadPool::Queued::kYes:
            ++queued;
            break;
          case ThreadPool::Queued::kFull:
            ++full;
            break;
          case ThreadPool::Queued::kStopping:
            break;
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  const size_t waiting = pool.queued();
  release.Notify();
  pool.Shutdown();

  EXPECT_EQ(queued.load(), static_cast<int>(kMax));
  EXPECT_EQ(full.load(), 8 * 50 - static_cast<int>(kMax));
  EXPECT_EQ(waiting, kMax);
  EXPECT_EQ(ran.load(), static_cast<int>(kMax));
  EXPECT_EQ(pool.TrySchedule([] {}, kMax), ThreadPool::Queued::kStopping);
}

TEST(MutexTest, GuardsACounterAcrossThreads) {
  Mutex mu;
  int counter = 0;
  std::vector<std::thread> threads;

  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(&mu);
        ++counter;
      }
    });
  }
  for (auto& t : threads) t.join();

  EXPECT_EQ(counter, 40000);
}

TEST(NotificationTest, WakesWaiters) {
  Notification n;
  std::thread t([&n] { n.Notify(); });

  n.WaitForNotification();
  t.join();

  EXPECT_TRUE(n.HasBeenNotified());
}

TEST(NotificationTest, TimesOutWhenNeverNotified) {
  Notification n;

  EXPECT_FALSE(n.WaitForNotificationWithTimeout(absl::Milliseconds(5)));
}

TEST(FakeClockTest, MovesOnlyWhenTold) {
  FakeClock clock(absl::FromUnixSeconds(100));

  absl::Time before = clock.Now();
  clock.Advance(absl::Seconds(5));

  EXPECT_EQ(clock.Now() - before, absl::Seconds(5));
  EXPECT_EQ(clock.MonotonicNow(), absl::Seconds(105));
}

TEST(RealClockTest, MonotonicNeverGoesBack) {
  absl::Duration a = RealClock::Get()->MonotonicNow();
  absl::Duration b = RealClock::Get()->MonotonicNow();

  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace cairn
