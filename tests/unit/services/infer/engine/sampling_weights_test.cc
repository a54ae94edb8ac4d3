#include "services/infer/engine/sampling_weights.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace cairn::infer {
namespace {

struct Weights {
  std::vector<float> w;
  std::vector<double> sums;
  double total = 0.0;
};

Weights Compute(const std::vector<float>& v, float best, float t, float min_p = 0.0f) {
  Weights r;
  r.w.resize(v.size());
  r.sums.resize((v.size() + kWeightBlock - 1) / kWeightBlock);
  r.total = SamplingWeights(v, best, 1.0f / t, min_p, absl::MakeSpan(r.w), absl::MakeSpan(r.sums));
  return r;
}

// Each weight is exp((v - best) / T) to within the rounding of its argument (a float's
// relative 6e-8 times the argument) and a few ulps of the polynomial: the best weighs exactly
// 1, and weights below exp(-87) are 0.
TEST(SamplingWeightsTest, WeightsAreTheExponentialsOfTheScaledValues) {
  std::mt19937_64 gen(3);
  for (float t : {0.05f, 0.7f, 1.0f, 3.0f}) {
    std::vector<float> v(1000);
    for (float& x : v) x = std::normal_distribution<float>(0.0f, 8.0f)(gen);
    v[17] = 40.0f;
    const Weights r = Compute(v, 40.0f, t);
    EXPECT_EQ(r.w[17], 1.0f);
    for (size_t i = 0; i < v.size(); ++i) {
      const double x = (static_cast<double>(v[i]) - 40.0) / t;
      const double want = std::exp(x);
      SCOPED_TRACE(::testing::Message() << "temperature " << t << ", value " << v[i]);
      if (x < -87.01) {
        EXPECT_EQ(r.w[i], 0.0f);
      } else if (x > -86.99) {
        EXPECT_NEAR(r.w[i], want, want * (4e-7 + 1.2e-7 * std::fabs(x)));
      }
    }
  }
}

TEST(SamplingWeightsTest, NonFiniteValuesAndMinPWeighNothing) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const Weights r = Compute({nan, -inf, 2.0f, 1.0f, -0.0f, 0.0f, -3e38f}, 2.0f, 1.0f, 0.3f);
  EXPECT_EQ(r.w[0], 0.0f);
  EXPECT_EQ(r.w[1], 0.0f);
  EXPECT_EQ(r.w[2], 1.0f);
  EXPECT_NEAR(r.w[3], std::exp(-1.0), 1e-7);  // 0.37 >= min_p.
  EXPECT_EQ(r.w[4], 0.0f);                    // exp(-2) = 0.14 < min_p.
  EXPECT_EQ(r.w[5], 0.0f);
  EXPECT_EQ(r.w[6], 0.0f);
  EXPECT_DOUBLE_EQ(r.total, 1.0 + r.w[3]);
}

// The block sums add each block's weights in eight lanes, pairwise, the total adds the blocks
// in order; a last block shorter than kWeightBlock is summed the same way.
TEST(SamplingWeightsTest, BlockSumsAddTheirWeightsInLanes) {
  std::mt19937_64 gen(4);
  for (size_t n : {1u, 7u, 64u, 65u, 200u, 1000u}) {
    std::vector<float> v(n);
    for (float& x : v) x = std::uniform_real_distribution<float>(-20.0f, 0.0f)(gen);
    const Weights r = Compute(v, 0.0f, 1.0f);
    ASSERT_EQ(r.sums.size(), (n + kWeightBlock - 1) / kWeightBlock);
    double total = 0.0;
    for (size_t b = 0; b < r.sums.size(); ++b) {
      double lanes[8] = {};
      for (size_t i = b * kWeightBlock; i < std::min(n, (b + 1) * kWeightBlock); ++i) {
        lanes[(i - b * kWeightBlock) % 8] += r.w[i];
      }
      const double sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      EXPECT_EQ(r.sums[b], sum) << "n " << n << ", block " << b;
      total += sum;
    }
    EXPECT_EQ(r.total, total) << n;
  }
}

// Seeded draws must not depend on the machine: the AVX2 loops (where the CPU has them) and
// the portable ones give the same bits, in whole blocks and in the tail.
TEST(SamplingWeightsTest, EveryInstructionSetGivesTheSameBits) {
  if (!SamplingWeightsHasAvx2()) GTEST_SKIP() << "no AVX2 here: one set of loops only";
  std::mt19937_64 gen(5);
  std::vector<float> v(64 * 40 + 23);
  for (float& x : v) x = std::normal_distribution<float>(0.0f, 30.0f)(gen);
  v[5] = std::numeric_limits<float>::quiet_NaN();
  v[300] = -std::numeric_limits<float>::infinity();
  v[1000] = 100.0f;
  const Weights fast = Compute(v, 100.0f, 0.9f, 0.001f);
  UsePortableSamplingWeightsForTest(true);
  const Weights portable = Compute(v, 100.0f, 0.9f, 0.001f);
  UsePortableSamplingWeightsForTest(false);
  EXPECT_EQ(fast.w, portable.w);
  EXPECT_EQ(fast.sums, portable.sums);
  EXPECT_EQ(fast.total, portable.total);
}

}  // namespace
}  // namespace cairn::infer
