// LoadProgressLog: a model load's progress steps become log lines and systemd status, at most
// one line an interval a phase, each phase's first and last step always.
#include "services/infer/models/load_progress_log.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn::infer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

class LoadProgressLogTest : public ::testing::Test {
 protected:
  LoadProgressLog MakeLog() {
    return LoadProgressLog({.interval = absl::Seconds(5),
                            .write = [this](const std::string& l) { lines_.push_back(l); },
                            .notify = [this](const std::string& s) { notes_.push_back(s); },
                            .extend_timeout = absl::Seconds(120),
                            .now = [this] { return now_; }});
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::vector<std::string> lines_;
  std::vector<std::string> notes_;
};

TEST_F(LoadProgressLogTest, ALineAnIntervalAndTheLastOnlyWhereThePhasePrinted) {
  LoadProgressLog log = MakeLog();
  const auto hash = [&](int64_t done) {
    log.Report({.phase = "hashing the weights", .done = done, .total = 8 * kGiB, .unit = "bytes"});
  };
  const auto place = [&](int64_t done) {
    log.Report({.phase = "placing the weights", .done = done, .total = 4, .unit = "layers"});
  };
  hash(0);  // The phase begins: nothing yet.
  now_ += absl::Seconds(2);
  hash(kGiB);  // 2 s into the phase: held back.
  now_ += absl::Seconds(4);
  hash(3 * kGiB);  // 6 s: printed, at 0.5 GiB/s over the phase.
  now_ += absl::Seconds(1);
  hash(4 * kGiB);  // 1 s after the last line: held back.
  now_ += absl::Seconds(1);
  hash(8 * kGiB);  // The last step of a phase that printed: at once.
  place(0);        // A new phase that ends within its first interval: nothing.
  place(1);
  now_ += absl::Seconds(1);
  place(4);

  EXPECT_THAT(lines_,
              ElementsAre("loading: hashing the weights 3.0 of 8.0 GiB (37 %), 0.50 GiB/s",
                          "loading: hashing the weights 8.0 of 8.0 GiB (100 %), 1.00 GiB/s"));
  // Every line also goes to systemd, extending the start timeout from now.
  ASSERT_EQ(notes_.size(), lines_.size());
  for (size_t i = 0; i < notes_.size(); ++i) {
    EXPECT_EQ(notes_[i], "STATUS=" + lines_[i] + "\nEXTEND_TIMEOUT_USEC=120000000");
  }
}

TEST_F(LoadProgressLogTest, LayersAndSmallSizesReadAsTheyShould) {
  EXPECT_EQ(LoadProgressLog::Line(
                {.phase = "placing the weights", .done = 18, .total = 48, .unit = "layers"}, 2.0),
            "loading: placing the weights 18 of 48 layers (37 %)");
  EXPECT_EQ(
      LoadProgressLog::Line(
          {.phase = "hashing the weights", .done = 256 << 20, .total = 512 << 20, .unit = "bytes"},
          128 << 20),
      "loading: hashing the weights 256.0 of 512.0 MiB (50 %), 128.00 MiB/s");
}

TEST_F(LoadProgressLogTest, WithoutSinksNothingBreaksAndAnEmptyTotalIsComplete) {
  LoadProgressLog log({.interval = absl::Seconds(5),
                       .write = {},
                       .notify = {},
                       .extend_timeout = absl::Seconds(120),
                       .now = [] { return absl::Now(); }});
  log.Report({.phase = "hashing the weights", .done = 0, .total = 0, .unit = "bytes"});
  EXPECT_THAT(LoadProgressLog::Line(
                  {.phase = "placing the weights", .done = 0, .total = 0, .unit = "layers"}, -1),
              HasSubstr("(100 %)"));
}

TEST_F(LoadProgressLogTest, AsFunctionReportsToTheLog) {
  LoadProgressLog log = MakeLog();
  LoadProgressFn fn = log.AsFunction();
  fn({.phase = "placing the weights", .done = 0, .total = 2, .unit = "layers"});
  now_ += absl::Seconds(5);
  fn({.phase = "placing the weights", .done = 1, .total = 2, .unit = "layers"});
  EXPECT_THAT(lines_, ElementsAre("loading: placing the weights 1 of 2 layers (50 %)"));
}

}  // namespace
}  // namespace cairn::infer
