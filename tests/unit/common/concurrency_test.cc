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
