#include "services/cache/capture_reservations.h"

#include <atomic>
#include <thread>
#include <vector>

#include "common/checksum/checksum.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

Reservation At(uint64_t session, absl::Duration expires) {
  Reservation r;
  r.session = session;
  r.slot = SlotKey{session, 0};
  r.ticket = 9;
  r.expires = expires;
  return r;
}

TEST(CaptureReservationsTest, AReservationIsTakenOutOnceAndExpiresByItsDeadline) {
  CaptureReservations reservations;
  ASSERT_TRUE(reservations.Add(1, At(5, absl::Seconds(10))));
  ASSERT_TRUE(reservations.Add(2, At(5, absl::Seconds(20))));

  EXPECT_FALSE(reservations.Add(1, At(6, absl::Seconds(1))));
  EXPECT_TRUE(reservations.Expired(absl::Seconds(9)).empty());
  EXPECT_EQ(reservations.Expired(absl::Seconds(10)), (std::vector<uint64_t>{1}));
  EXPECT_EQ(reservations.Expired(absl::Seconds(30)), (std::vector<uint64_t>{1, 2}));
  std::optional<Reservation> taken = reservations.Take(1);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->session, 5u);
  EXPECT_FALSE(reservations.Take(1).has_value());
  EXPECT_FALSE(reservations.Contains(1));
  EXPECT_TRUE(reservations.Contains(2));
  EXPECT_EQ(reservations.size(), 1u);
}

class VerifyCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (size_t i = 0; i < bytes_.size(); ++i) bytes_[i] = static_cast<uint8_t>(i * 7);
    state_.private_bytes = 48;
    state_.tail_bytes = 16;
    state_.region.bytes = 64;
  }
  uint64_t PrivateSum() const { return Xxh3(bytes_.data(), 48); }
  uint64_t TailSum() const { return Xxh3(bytes_.data() + 48, 16); }

  std::vector<uint8_t> bytes_ = std::vector<uint8_t>(64);
  StateBytes state_;
};

TEST_F(VerifyCaptureTest, ChecksumsComeFromTheArenaBytesAndMatchingClientSumsPass) {
  absl::Status s = VerifyCapture(bytes_, PrivateSum(), TailSum(), &state_);

  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(state_.private_checksum, PrivateSum());
  EXPECT_EQ(state_.tail_checksum, TailSum());
  EXPECT_EQ(state_.region.checksum, Xxh3(bytes_.data(), bytes_.size()));
}

TEST_F(VerifyCaptureTest, ClientSumsOfZeroAreNotChecked) {
  EXPECT_TRUE(VerifyCapture(bytes_, 0, 0, &state_).ok());
  EXPECT_EQ(state_.private_checksum, PrivateSum());
}

TEST_F(VerifyCaptureTest, AMismatchIsDataLossNamingThePart) {
  absl::Status private_wrong = VerifyCapture(bytes_, PrivateSum() + 1, 0, &state_);
  absl::Status tail_wrong = VerifyCapture(bytes_, PrivateSum(), TailSum() + 1, &state_);

  EXPECT_THAT(private_wrong, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_NE(private_wrong.message().find("private state"), absl::string_view::npos);
  EXPECT_THAT(tail_wrong, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_NE(tail_wrong.message().find("tail"), absl::string_view::npos);
}

TEST_F(VerifyCaptureTest, ARegionShorterThanTheStateIsInvalid) {
  std::vector<uint8_t> short_bytes(32);

  EXPECT_THAT(VerifyCapture(short_bytes, 0, 0, &state_),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Reservations added, taken and scanned for expiry from several threads (TSan).
TEST(CaptureReservationsTest, ConcurrentAddsTakesAndScansAreSafe) {
  CaptureReservations reservations;
  std::atomic<bool> stop{false};
  std::thread scanner([&] {
    while (!stop.load()) {
      reservations.Expired(absl::Seconds(5));
      reservations.size();
    }
  });
  std::vector<std::thread> writers;
  for (uint64_t t = 0; t < 3; ++t) {
    writers.emplace_back([&reservations, t] {
      for (uint64_t i = 0; i < 300; ++i) {
        const uint64_t id = t * 1000 + i;
        EXPECT_TRUE(reservations.Add(id, At(t, absl::Seconds(static_cast<int64_t>(i % 10)))));
        if (i % 3 != 0) {
          EXPECT_TRUE(reservations.Take(id).has_value());
        }
      }
    });
  }
  for (std::thread& w : writers) w.join();
  stop.store(true);
  scanner.join();

  EXPECT_EQ(reservations.size(), 3u * 100u);
}

}  // namespace
}  // namespace cairn::cache
