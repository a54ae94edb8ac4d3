// Idempotent retries: a request id answers its first success again, never runs twice.

#include "services/cache/request_replies.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

TEST(RequestRepliesTest, ARetryGetsTheFirstAnswer) {
  RequestReplies replies;
  replies.OpenSession(1);
  auto first = replies.Begin(1, 7, "ReserveCapture");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_FALSE(first->has_value());  // New: run it.

  replies.Finish(1, 7, std::string("answer"));
  auto retry = replies.Begin(1, 7, "ReserveCapture");

  ASSERT_TRUE(retry.ok()) << retry.status();
  ASSERT_TRUE(retry->has_value());
  EXPECT_EQ(**retry, "answer");
}

TEST(RequestRepliesTest, ARetryWhileTheFirstRunsIsToldToRetry) {
  RequestReplies replies;
  replies.OpenSession(1);
  ASSERT_TRUE(replies.Begin(1, 7, "AcquireRestore").ok());

  EXPECT_THAT(replies.Begin(1, 7, "AcquireRestore").status(),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(RequestRepliesTest, AFailedRequestRunsAgainOnRetry) {
  RequestReplies replies;
  replies.OpenSession(1);
  ASSERT_TRUE(replies.Begin(1, 7, "StartSlot").ok());

  replies.Finish(1, 7, std::nullopt);
  auto retry = replies.Begin(1, 7, "StartSlot");

  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_FALSE(retry->has_value());
}

TEST(RequestRepliesTest, AnIdReusedForAnotherMethodIsRefused) {
  RequestReplies replies;
  replies.OpenSession(1);
  ASSERT_TRUE(replies.Begin(1, 7, "StartSlot").ok());
  replies.Finish(1, 7, std::string("x"));

  EXPECT_THAT(replies.Begin(1, 7, "ReserveCapture").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(RequestRepliesTest, SessionsAreSeparateAndClosedOnesUnknown) {
  RequestReplies replies;
  replies.OpenSession(1);
  replies.OpenSession(2);
  ASSERT_TRUE(replies.Begin(1, 7, "StartSlot").ok());
  replies.Finish(1, 7, std::string("one"));

  auto other = replies.Begin(2, 7, "StartSlot");
  replies.CloseSession(1);

  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->has_value());
  EXPECT_THAT(replies.Begin(1, 8, "StartSlot").status(), StatusIs(absl::StatusCode::kNotFound));
  replies.Finish(1, 7, std::string("late"));  // After the close: ignored.
  EXPECT_EQ(replies.kept(1), 0u);
}

TEST(RequestRepliesTest, KeepsOnlyTheNewestAnswersPerSession) {
  RequestReplies replies(/*kept_per_session=*/2);
  replies.OpenSession(1);
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(replies.Begin(1, id, "StartSlot").ok());
    replies.Finish(1, id, std::to_string(id));
  }

  auto oldest = replies.Begin(1, 1, "StartSlot");

  EXPECT_EQ(replies.kept(1), 2u);
  ASSERT_TRUE(oldest.ok());
  EXPECT_FALSE(oldest->has_value());  // Forgotten: runs again.
}

TEST(RequestRepliesTest, ARetriedFailureKeepsItsAnswerForTheWholeBound) {
  RequestReplies replies(/*kept_per_session=*/2);
  replies.OpenSession(1);
  ASSERT_TRUE(replies.Begin(1, 7, "StartSlot").ok());
  replies.Finish(1, 7, std::nullopt);  // Failed: the retry below runs it again.
  ASSERT_TRUE(replies.Begin(1, 7, "StartSlot").ok());
  replies.Finish(1, 7, std::string("second"));
  ASSERT_TRUE(replies.Begin(1, 8, "StartSlot").ok());  // One newer request: 7 is still kept.
  replies.Finish(1, 8, std::string("eight"));

  auto retry = replies.Begin(1, 7, "StartSlot");

  ASSERT_TRUE(retry.ok()) << retry.status();
  ASSERT_TRUE(retry->has_value());  // Not a second effect.
  EXPECT_EQ(**retry, "second");
  EXPECT_EQ(replies.kept(1), 2u);
}

TEST(RequestRepliesTest, ConcurrentRetriesRunTheRequestOnce) {
  RequestReplies replies;
  replies.OpenSession(1);
  std::vector<std::thread> threads;
  std::atomic<int> ran{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (uint64_t id = 1; id <= 200; ++id) {
        auto claim = replies.Begin(1, id, "StartSlot");
        if (claim.ok() && !claim->has_value()) {
          ++ran;
          replies.Finish(1, id, std::string("done"));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(ran.load(), 200);
}

}  // namespace
}  // namespace cairn::cache
