#include "services/cache/slot_activity.h"

#include <thread>

#include "gtest/gtest.h"

namespace cairn::cache {
namespace {

TEST(SlotActivityTest, IdleOnlyWhenEverySlotReportedIdleOrItsSessionWent) {
  SlotActivity activity;
  activity.Busy({1, 0});
  activity.Busy({2, 0});

  EXPECT_FALSE(activity.WaitUntilIdle(absl::ZeroDuration()));
  activity.Idle({1, 0});
  EXPECT_FALSE(activity.WaitUntilIdle(absl::ZeroDuration()));
  activity.SessionGone(2);
  EXPECT_TRUE(activity.WaitUntilIdle(absl::ZeroDuration()));
}

TEST(SlotActivityTest, AWaiterWakesWhenTheLastSlotGoesIdle) {
  SlotActivity activity;
  activity.Busy({1, 3});
  std::thread idler([&] { activity.Idle({1, 3}); });

  const bool idle = activity.WaitUntilIdle(absl::Seconds(10));
  idler.join();

  EXPECT_TRUE(idle);
}

}  // namespace
}  // namespace cairn::cache
