#include "services/cache/deadline_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "common/concurrency/notification.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

constexpr absl::Duration kWait = absl::Seconds(30);  // Bound of every wait below.

// Records the status a task was called with.
struct Outcome {
  Notification called;
  absl::Status status;
  DeadlinePool::Task Task() {
    return [this](absl::Status s) {
      status = std::move(s);
      called.Notify();
    };
  }
};

// Occupies `pool`'s one thread until `gate` opens; false if the thread never took the task.
bool HoldOnlyThread(DeadlinePool& pool, Notification& gate) {
  Notification holding;
  if (!pool.Schedule(absl::InfiniteFuture(),
                     [&](absl::Status) {
                       holding.Notify();
                       gate.WaitForNotificationWithTimeout(kWait);
                     })
           .ok()) {
    return false;
  }
  return holding.WaitForNotificationWithTimeout(kWait);
}

TEST(DeadlinePoolTest, ATaskTakenBeforeItsDeadlineRunsWithOk) {
  FakeClock clock;
  DeadlinePool pool(DeadlinePoolOptions{.threads = 1, .max_queued = 4}, &clock);
  Outcome out;

  ASSERT_TRUE(pool.Schedule(clock.Now() + absl::Seconds(1), out.Task()).ok());

  ASSERT_TRUE(out.called.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(out.status.ok()) << out.status;
}

TEST(DeadlinePoolTest, ATaskWhoseDeadlinePassedWhileQueuedGetsDeadlineExceeded) {
  FakeClock clock;
  DeadlinePool pool(DeadlinePoolOptions{.threads = 1, .max_queued = 4}, &clock);
  Notification gate;
  ASSERT_TRUE(HoldOnlyThread(pool, gate));
  Outcome late;
  Outcome patient;
  ASSERT_TRUE(pool.Schedule(clock.Now() + absl::Seconds(1), late.Task()).ok());
  ASSERT_TRUE(pool.Schedule(absl::InfiniteFuture(), patient.Task()).ok());
  EXPECT_EQ(pool.queued(), 2u);

  clock.Advance(absl::Seconds(2));
  gate.Notify();

  ASSERT_TRUE(late.called.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(patient.called.WaitForNotificationWithTimeout(kWait));
  EXPECT_THAT(late.status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(patient.status.ok()) << patient.status;
}

TEST(DeadlinePoolTest, TheQueueIsBounded) {
  FakeClock clock;
  DeadlinePool pool(DeadlinePoolOptions{.threads = 1, .max_queued = 1}, &clock);
  Notification gate;
  ASSERT_TRUE(HoldOnlyThread(pool, gate));
  Outcome queued;
  ASSERT_TRUE(pool.Schedule(absl::InfiniteFuture(), queued.Task()).ok());
  Outcome refused;

  absl::Status status = pool.Schedule(absl::InfiniteFuture(), refused.Task());

  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted));
  // Answered at once, on this thread.
  ASSERT_TRUE(refused.called.HasBeenNotified());
  EXPECT_THAT(refused.status, StatusIs(absl::StatusCode::kResourceExhausted));
  gate.Notify();
  ASSERT_TRUE(queued.called.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(queued.status.ok()) << queued.status;
}

TEST(DeadlinePoolTest, ShutdownAnswersWaitingTasksUnavailableAndRefusesNewOnes) {
  FakeClock clock;
  DeadlinePool pool(DeadlinePoolOptions{.threads = 1, .max_queued = 4}, &clock);
  Notification gate;
  ASSERT_TRUE(HoldOnlyThread(pool, gate));
  Outcome waiting;
  ASSERT_TRUE(pool.Schedule(absl::InfiniteFuture(), waiting.Task()).ok());

  std::thread stopper([&pool] { pool.Shutdown(); });
  // Shutdown has begun once new work is refused; only then is the running task let go.
  while (!absl::IsUnavailable(pool.Schedule(absl::InfiniteFuture(), [](absl::Status) {}))) {
    std::this_thread::yield();
  }
  gate.Notify();
  stopper.join();

  ASSERT_TRUE(waiting.called.HasBeenNotified());
  EXPECT_THAT(waiting.status, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(pool.Schedule(absl::InfiniteFuture(), [](absl::Status) {}),
              StatusIs(absl::StatusCode::kUnavailable));
}

// Many request threads schedule at once (run under TSan with the unit label): every task,
// accepted or refused, is called exactly once.
TEST(DeadlinePoolTest, EveryTaskIsCalledOnceUnderConcurrentScheduling) {
  FakeClock clock;
  std::atomic<int> called{0};
  std::atomic<int> accepted{0};
  {
    DeadlinePool pool(DeadlinePoolOptions{.threads = 2, .max_queued = 8}, &clock);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 200; ++i) {
          if (pool.Schedule(clock.Now() + absl::Seconds(1),
                            [&called](absl::Status) { called.fetch_add(1); })
                  .ok()) {
            accepted.fetch_add(1);
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }

  EXPECT_GT(accepted.load(), 0);
  EXPECT_EQ(called.load(), 4 * 200);
}

}  // namespace
}  // namespace cairn::cache
