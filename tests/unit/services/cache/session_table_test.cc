#include "services/cache/session_table.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "services/cache/session_sink.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

class CountingSink final : public SessionSink {
 public:
  void Send(v1::SessionServerMessage /*message*/) override { ++sent; }
  std::atomic<int> sent{0};
};

SessionTable::Options Quotas(int leases, int reservations) {
  return SessionTable::Options{.max_leases_per_session = leases,
                               .max_reservations_per_session = reservations,
                               .max_slots = 16};
}

TEST(SessionTableTest, ASessionIsSilentOnlyAfterTheTimeoutWithoutATouch) {
  SessionTable table(Quotas(4, 4));
  ASSERT_TRUE(table.Open(1, "a", 0, nullptr, absl::Seconds(0)).ok());
  ASSERT_TRUE(table.Open(2, "b", 0, nullptr, absl::Seconds(0)).ok());

  ASSERT_TRUE(table.Touch(2, absl::Seconds(8)).ok());

  EXPECT_TRUE(table.Silent(absl::Seconds(10), absl::Seconds(10)).empty());
  EXPECT_EQ(table.Silent(absl::Seconds(11), absl::Seconds(10)), std::vector<uint64_t>{1});
}

TEST(SessionTableTest, TouchingAClosedOrUnknownSessionIsNotFound) {
  SessionTable table(Quotas(4, 4));
  ASSERT_TRUE(table.Open(1, "a", 0, nullptr, absl::ZeroDuration()).ok());
  ASSERT_TRUE(table.Close(1).has_value());

  EXPECT_THAT(table.Touch(1, absl::Seconds(1)), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(table.Touch(7, absl::Seconds(1)), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_FALSE(table.Close(1).has_value());
}

TEST(SessionTableTest, DrainingRefusesNewSessionsButKeepsOpenOnes) {
  SessionTable table(Quotas(4, 4));
  ASSERT_TRUE(table.Open(1, "a", 0, nullptr, absl::ZeroDuration()).ok());

  table.BeginDrain();

  EXPECT_THAT(table.Open(2, "b", 0, nullptr, absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(table.CheckOpen(1).ok());
  EXPECT_EQ(table.size(), 1u);
}

TEST(SessionTableTest, SlotsAreBoundedByTheDeclaredCountOrTheCap) {
  SessionTable table(Quotas(4, 4));
  ASSERT_TRUE(table.Open(1, "declared", 2, nullptr, absl::ZeroDuration()).ok());
  ASSERT_TRUE(table.Open(2, "undeclared", 0, nullptr, absl::ZeroDuration()).ok());

  EXPECT_TRUE(table.Slot(1, 1).ok());
  EXPECT_THAT(table.Slot(1, 2), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(table.Slot(2, 15).ok());
  EXPECT_THAT(table.Slot(2, 16), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(table.Slot(3, 0), StatusIs(absl::StatusCode::kNotFound));
}

TEST(SessionTableTest, OneLeaseAndOneReservationPerSlot) {
  SessionTable table(Quotas(4, 4));
  ASSERT_TRUE(table.Open(1, "a", 0, nullptr, absl::ZeroDuration()).ok());
  ASSERT_TRUE(table.AddLease(1, 3, 100).ok());
  ASSERT_TRUE(table.AddReservation(1, 3, 200).ok());

  EXPECT_THAT(table.AddLease(1, 3, 101), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(table.CheckCanReserve(1, 3), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(table.AddLease(1, 4, 101).ok());

  table.RemoveLease(100);

  EXPECT_TRUE(table.CheckCanLease(1, 3).ok());
  EXPECT_FALSE(table.HoldsLease(1, 100));
  EXPECT_TRUE(table.HoldsLease(1, 101));
}

TEST(SessionTableTest, QuotasCountPerSession) {
  SessionTable table(Quotas(2, 1));
  ASSERT_TRUE(table.Open(1, "a", 0, nullptr, absl::ZeroDuration()).ok());
  ASSERT_TRUE(table.Open(2, "b", 0, nullptr, absl::ZeroDuration()).ok());
  ASSERT_TRUE(table.AddLease(1, 0, 10).ok());
  ASSERT_TRUE(table.AddLease(1, 1, 11).ok());
  ASSERT_TRUE(table.AddReservation(1, 0, 20).ok());

  EXPECT_THAT(table.AddLease(1, 2, 12), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(table.AddReservation(1, 1, 21), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(table.AddLease(2, 0, 13).ok());
  EXPECT_TRUE(table.AddReservation(2, 0, 22).ok());
}

TEST(SessionTableTest, ALeaseBelongsOnlyToItsSession) {
  SessionTable table(Quotas(4, 4));
  ASSERT_TRUE(table.Open(1, "a", 0, nullptr, absl::ZeroDuration()).ok());
  ASSERT_TRUE(table.Open(2, "b", 0, nullptr, absl::ZeroDuration()).ok());
  ASSERT_TRUE(table.AddLease(1, 0, 10).ok());
  ASSERT_TRUE(table.AddReservation(1, 0, 20).ok());

  EXPECT_FALSE(table.HoldsLease(2, 10));
  EXPECT_FALSE(table.HoldsReservation(2, 20));
  EXPECT_THAT(table.AddLease(2, 0, 10), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(SessionTableTest, ClosingReturnsWhatTheSessionHeldAndForgetsIt) {
  SessionTable table(Quotas(4, 4));
  ASSERT_TRUE(table.Open(1, "worker", 0, nullptr, absl::ZeroDuration()).ok());
  table.UseSlot(1, 5);
  table.UseSlot(1, 2);
  ASSERT_TRUE(table.AddLease(1, 2, 11).ok());
  ASSERT_TRUE(table.AddLease(1, 1, 10).ok());
  ASSERT_TRUE(table.AddReservation(1, 5, 30).ok());

  std::optional<SessionTable::Closed> closed = table.Close(1);

  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->name, "worker");
  EXPECT_EQ(closed->leases, (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(closed->reservations, std::vector<uint64_t>{30});
  EXPECT_EQ(closed->slots, (std::vector<int32_t>{2, 5}));
  EXPECT_FALSE(table.HoldsLease(1, 10));
  EXPECT_FALSE(table.HoldsReservation(1, 30));
  EXPECT_EQ(table.size(), 0u);
}

TEST(SessionTableTest, NothingReachesADetachedSink) {
  SessionTable table(Quotas(4, 4));
  CountingSink sink;
  ASSERT_TRUE(table.Open(1, "a", 0, &sink, absl::ZeroDuration()).ok());
  ASSERT_TRUE(table.WithSink(1, [](SessionSink& s) { s.Send(v1::SessionServerMessage()); }));

  table.Detach(1);

  EXPECT_FALSE(table.Attached(1));
  EXPECT_FALSE(table.WithSink(1, [](SessionSink& s) { s.Send(v1::SessionServerMessage()); }));
  EXPECT_EQ(sink.sent.load(), 1);
  EXPECT_TRUE(table.CheckOpen(1).ok());  // Detached, not closed: the close comes after.
}

// Heartbeats from gRPC reactions race the daemon's sends, the ticker's scans, detaching
// streams and closing sessions (run under TSan with the unit label).
TEST(SessionTableTest, HeartbeatsSendsScansAndClosesRaceSafely) {
  SessionTable table(Quotas(64, 64));
  constexpr uint64_t kSessions = 8;
  std::vector<CountingSink> sinks(kSessions);
  for (uint64_t s = 0; s < kSessions; ++s) {
    ASSERT_TRUE(table.Open(s + 1, "s", 0, &sinks[s], absl::ZeroDuration()).ok());
  }
  std::vector<std::thread> threads;
  for (uint64_t s = 1; s <= kSessions; ++s) {
    threads.emplace_back([&table, s] {
      for (int i = 1; i <= 500; ++i) table.Touch(s, absl::Milliseconds(i)).IgnoreError();
    });
  }
  threads.emplace_back([&table] {
    for (int i = 0; i < 500; ++i) {
      for (uint64_t s = 1; s <= kSessions; ++s) {
        table.WithSink(s, [](SessionSink& sink) { sink.Send(v1::SessionServerMessage()); });
      }
    }
  });
  threads.emplace_back([&table] {
    for (int i = 0; i < 200; ++i) {
      table.AddLease(1, i % 32, 1000 + static_cast<uint64_t>(i)).IgnoreError();
      table.RemoveLease(1000 + static_cast<uint64_t>(i));
    }
  });
  for (int i = 0; i < 100; ++i) table.Silent(absl::Seconds(100), absl::Seconds(1));
  table.Detach(kSessions);
  ASSERT_TRUE(table.Close(kSessions - 1).has_value());
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(table.size(), kSessions - 1);
  EXPECT_TRUE(table.Silent(absl::Seconds(1), absl::Seconds(1)).empty());
  EXPECT_FALSE(table.Attached(kSessions));
  EXPECT_EQ(sinks[0].sent.load(), 500);
}

}  // namespace
}  // namespace cairn::cache
