#include "services/cache/session_liveness.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

TEST(SessionLivenessTest, ASessionIsSilentOnlyAfterTheTimeoutWithoutATouch) {
  SessionLiveness live;
  live.Open(1, absl::Seconds(0));
  live.Open(2, absl::Seconds(0));

  ASSERT_TRUE(live.Touch(2, absl::Seconds(8)).ok());

  EXPECT_TRUE(live.Silent(absl::Seconds(10), absl::Seconds(10)).empty());
  EXPECT_EQ(live.Silent(absl::Seconds(11), absl::Seconds(10)), std::vector<uint64_t>{1});
}

TEST(SessionLivenessTest, TouchingAClosedOrUnknownSessionIsNotFound) {
  SessionLiveness live;
  live.Open(1, absl::ZeroDuration());
  live.Close(1);

  EXPECT_THAT(live.Touch(1, absl::Seconds(1)),
              ::cairn::testing::StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(live.Touch(7, absl::Seconds(1)),
              ::cairn::testing::StatusIs(absl::StatusCode::kNotFound));
}

// Heartbeats from reactions race the ticker (run under TSan with the unit label).
TEST(SessionLivenessTest, ConcurrentTouchesAndScansAgree) {
  SessionLiveness live;
  for (uint64_t s = 1; s <= 8; ++s) live.Open(s, absl::ZeroDuration());
  std::vector<std::thread> beats;
  for (uint64_t s = 1; s <= 8; ++s) {
    beats.emplace_back([&live, s] {
      for (int i = 1; i <= 1000; ++i) live.Touch(s, absl::Milliseconds(i)).IgnoreError();
    });
  }
  for (int i = 0; i < 100; ++i) live.Silent(absl::Seconds(100), absl::Seconds(1));
  for (std::thread& t : beats) t.join();

  EXPECT_TRUE(live.Silent(absl::Seconds(1), absl::Seconds(1)).empty());
}

}  // namespace
}  // namespace cairn::cache
