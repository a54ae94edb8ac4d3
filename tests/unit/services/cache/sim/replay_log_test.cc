#include "services/cache/sim/replay_log.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/cache/sim/calibration.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache::sim {
namespace {

using ::cairn::testing::StatusIs;
using ::testing::HasSubstr;

ReplayRecord Record(int index, const std::string& tier, int64_t prompt, int64_t prefilled,
                    double ttft_ms) {
  ReplayRecord r;
  r.index = index;
  r.line = index + 1;
  r.conv = "c0";
  r.tier = tier;
  r.prompt_tokens = prompt;
  r.prefilled = prefilled;
  r.reused = prompt - prefilled;
  r.depth = prompt - prefilled;
  r.ttft_ms = ttft_ms;
  r.server_ttft_ms = ttft_ms - 1;
  r.total_ms = ttft_ms + 100;
  r.sent_s = index;
  return r;
}

TEST(ReplayLogTest, CsvRoundTripsEveryFieldAndQuotesCommas) {
  ReplayRecord r = Record(3, "ram", 1000, 200, 55.5);
  r.conv = "c0.sub1";
  r.error = "http 503: busy, \"retry\"";
  r.captures = 2;
  r.restore_ms = 1.25;
  r.completion_tokens = 7;

  absl::StatusOr<std::vector<ReplayRecord>> parsed =
      ParseReplayCsv(ReplayCsvHeader() + "\n" + ReplayCsvLine(r) + "\n");

  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 1u);
  const ReplayRecord& p = parsed->front();
  EXPECT_EQ(p.index, 3);
  EXPECT_EQ(p.conv, "c0.sub1");
  EXPECT_EQ(p.tier, "ram");
  EXPECT_EQ(p.prefilled, 200);
  EXPECT_EQ(p.reused, 800);
  EXPECT_EQ(p.captures, 2);
  EXPECT_EQ(p.completion_tokens, 7);
  EXPECT_DOUBLE_EQ(p.restore_ms, 1.25);
  EXPECT_DOUBLE_EQ(p.ttft_ms, 55.5);
  EXPECT_EQ(p.error, r.error);
}

TEST(ReplayLogTest, MalformedCsvNamesTheLine) {
  EXPECT_THAT(ParseReplayCsv("index,line\n1,2\n").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<std::vector<ReplayRecord>> bad = ParseReplayCsv(
      ReplayCsvHeader() + "\n" + ReplayCsvLine(Record(0, "ram", 10, 1, 1)) + "\nnot,a,row\n");
  EXPECT_THAT(bad.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("line 3"));
  EXPECT_THAT(ParseReplayCsv("").status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ReplayLogTest, PercentileIsNearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);

  EXPECT_DOUBLE_EQ(Percentile(v, 0.5), 50);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.95), 95);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.99), 99);
  EXPECT_DOUBLE_EQ(Percentile(v, 1.0), 100);
  EXPECT_DOUBLE_EQ(Percentile({7}, 0.5), 7);
  EXPECT_DOUBLE_EQ(Percentile({}, 0.5), 0);
}

TEST(ReplayLogTest, SummaryCountsHitsTiersAndThroughputAndSkipsErrors) {
  std::vector<ReplayRecord> records = {
      Record(0, "cold", 1000, 1000, 400), Record(1, "ram", 1100, 100, 50),
      Record(2, "ram", 1200, 100, 70), Record(3, "live", 1300, 100, 30)};
  ReplayRecord failed = Record(4, "cold", 5000, 5000, 1);
  failed.error = "http 503";
  records.push_back(failed);

  ReplaySummary s = Summarize(records);

  EXPECT_EQ(s.requests, 4);
  EXPECT_EQ(s.errors, 1);
  EXPECT_EQ(s.prompt_tokens, 4600);
  EXPECT_EQ(s.prefilled, 1300);
  EXPECT_DOUBLE_EQ(s.hit_ratio, 3300.0 / 4600.0);
  // First send at 0 s, last completion at 3 s + 130 ms.
  EXPECT_DOUBLE_EQ(s.wall_s, 3.13);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 4 / 3.13);
  EXPECT_EQ(s.ttft_by_tier.at("ram").requests, 2);
  EXPECT_DOUBLE_EQ(s.ttft_by_tier.at("ram").p50, 50);
  EXPECT_DOUBLE_EQ(s.ttft_by_tier.at("ram").p95, 70);
  EXPECT_DOUBLE_EQ(s.ttft_by_tier.at("ram").mean, 60);
  EXPECT_DOUBLE_EQ(s.server_ttft_by_tier.at("cold").p50, 399);
  EXPECT_DOUBLE_EQ(s.ttft.p50, 50);
  EXPECT_DOUBLE_EQ(s.ttft.p99, 400);
  std::string table = FormatReplaySummary(s);
  EXPECT_THAT(table, HasSubstr("4 ok, 1 failed"));
  EXPECT_THAT(table, HasSubstr("live"));
  EXPECT_THAT(ReplaySummaryJson(s), HasSubstr("\"hit_ratio\""));
}

// A replay whose prefill time follows the cost model exactly: the fit recovers it.
TEST(CalibrationTest, RecoversAKnownCostModel) {
  CostModelOptions truth;
  truth.pass_overhead_ms = 20;
  truth.prefill_ms_per_token = 1.5;
  truth.prefill_ms_per_token_per_1k = 0.25;
  truth.bytes_per_row = 1000;
  truth.private_bytes = 1000000;
  CostModel model(truth);
  std::vector<ReplayRecord> records;
  for (int i = 0; i < 40; ++i) {
    const int64_t prompt = 500 + 97 * i;
    const int64_t prefilled = 50 + (i * 37) % 400;
    ReplayRecord r = Record(i, i % 2 ? "ram" : "cold", prompt, prefilled, 0);
    r.restore_ms = i % 2 ? 2.0 : 0;
    r.captures = 1;
    r.capture_ms = 0.5;
    r.server_ttft_ms = model.PassMs(prompt - prefilled, prompt) + r.restore_ms + r.capture_ms;
    records.push_back(r);
  }
  CostModelOptions base;
  base.bytes_per_row = 1000;
  base.private_bytes = 1000000;

  absl::StatusOr<CalibrationFit> fit = Calibrate(records, base, 2048);

  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->cost.pass_overhead_ms, 20, 1e-6);
  EXPECT_NEAR(fit->cost.prefill_ms_per_token, 1.5, 1e-9);
  EXPECT_NEAR(fit->cost.prefill_ms_per_token_per_1k, 0.25, 1e-9);
  EXPECT_NEAR(fit->prefill_rms_ms, 0, 1e-6);
  EXPECT_EQ(fit->ram_samples, 20);
  // Every RAM restore moved depth x 1,000 + 1,000,000 bytes in 2 ms.
  double bytes = 0;
  for (const ReplayRecord& r : records) {
    if (r.tier == "ram") bytes += static_cast<double>(r.depth) * 1000 + 1e6;
  }
  EXPECT_NEAR(fit->cost.ram_restore_bytes_per_s, bytes / (20 * 0.002), 1);
  EXPECT_NEAR(fit->cost.capture_bytes_per_s, 1e6 / 0.0005, 1);
  EXPECT_EQ(fit->disk_samples, 0);
  EXPECT_DOUBLE_EQ(fit->cost.disk_restore_bytes_per_s, base.disk_restore_bytes_per_s);
}

TEST(CalibrationTest, CoefficientsStayNonNegative) {
  // Time falls with the tokens prefilled: the unconstrained slope would be negative.
  std::vector<ReplayRecord> records;
  for (int i = 0; i < 10; ++i) {
    ReplayRecord r = Record(i, "cold", 100 + 10 * i, 100 + 10 * i, 0);
    r.server_ttft_ms = 100 - i;
    records.push_back(r);
  }

  absl::StatusOr<CalibrationFit> fit = Calibrate(records, {}, 2048);

  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_GE(fit->cost.pass_overhead_ms, 0);
  EXPECT_GE(fit->cost.prefill_ms_per_token, 0);
  EXPECT_GE(fit->cost.prefill_ms_per_token_per_1k, 0);
}

TEST(CalibrationTest, NothingPrefilledIsInvalidArgument) {
  EXPECT_THAT(Calibrate({Record(0, "live", 10, 0, 5)}, {}, 2048).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Calibrate({Record(0, "cold", 10, 10, 5)}, {}, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CalibrationTest, ComparisonMatchesRequestsByIndex) {
  SimResult predicted;
  for (int i = 0; i < 3; ++i) {
    RequestReport q;
    q.index = i;
    q.result.restored_tier = i == 0 ? Tier::kNone : Tier::kRam;
    q.result.prefilled = i == 0 ? 1000 : 100;
    q.ttft_ms = i == 0 ? 400 : 50;
    predicted.requests.push_back(q);
  }
  predicted.totals.policy = "cairn";
  std::vector<ReplayRecord> records = {Record(0, "cold", 1000, 1000, 401),
                                       Record(2, "cold", 1200, 300, 101)};

  absl::StatusOr<PredictionComparison> c = ComparePrediction(records, predicted);

  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->requests, 2);
  EXPECT_EQ(c->measured.prefilled, 1300);
  EXPECT_EQ(c->predicted.prefilled, 1100);
  EXPECT_EQ(c->predicted.restored_ram, 1);
  EXPECT_EQ(c->measured.cold, 2);
  EXPECT_DOUBLE_EQ(c->tier_agreement, 0.5);
  EXPECT_DOUBLE_EQ(c->prefilled_abs_error, 200.0 / 1300.0);
  EXPECT_DOUBLE_EQ(c->ttft_abs_error, 50.0 / 500.0);
  EXPECT_THAT(FormatPrediction(*c), HasSubstr("tokens prefilled"));
  records.push_back(Record(9, "ram", 1, 1, 1));
  EXPECT_THAT(ComparePrediction(records, predicted).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn::cache::sim
