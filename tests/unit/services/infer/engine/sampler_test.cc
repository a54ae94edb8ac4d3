#include "services/infer/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "services/infer/engine/generation.h"
#include "services/infer/engine/sampling_weights.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

using ::cairn::testing::StatusIs;

std::vector<float> Logits() { return {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f}; }

// A mask as TokenConstraint::Allowed fills it, allowing `ids`.
std::vector<uint64_t> Mask(std::initializer_list<int32_t> ids, size_t words = 1) {
  std::vector<uint64_t> mask(words, 0);
  for (int32_t id : ids) mask[id / 64] |= uint64_t{1} << (id % 64);
  return mask;
}

TEST(SamplerTest, GreedyTakesTheLowestIdOfTheLargestLogits) {
  Sampler sampler({}, {});

  SampledToken t = sampler.Sample(Logits());

  EXPECT_EQ(t.id, 1);
}

TEST(SamplerTest, LogprobsAreLogSoftmaxOfTheRawLogits) {
  SamplingOptions o;
  o.logprobs = 2;
  Sampler sampler(o, {});

  SampledToken t = sampler.Sample(Logits());

  double z = 0;
  for (float l : Logits()) z += std::exp(l);
  EXPECT_NEAR(t.logprob, 3.0 - std::log(z), 1e-5);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 3);
}

TEST(SamplerTest, SeededSamplingIsReproducible) {
  SamplingOptions o;
  o.temperature = 1.5f;
  o.seed = 42;
  Sampler a(o, {}), b(o, {});
  std::vector<int32_t> ta, tb;

  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.Sample(Logits()).id);
    tb.push_back(b.Sample(Logits()).id);
  }

  EXPECT_EQ(ta, tb);
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingOptions o;
  o.temperature = 2.0f;
  o.top_k = 1;
  o.seed = 1;
  Sampler sampler(o, {});

  for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler.Sample(Logits()).id, 1);
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.min_p = 0.5f;  // Keeps tokens at least half as likely as the best: ids 1 and 3.
  o.seed = 3;
  Sampler sampler(o, {});

  for (int i = 0; i < 50; ++i) {
    const int32_t id = sampler.Sample(Logits()).id;
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(SamplerTest, TopPKeepsTheSmallestNucleus) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.top_p = 0.5f;  // Token 1 alone holds about 36%; with token 3 the nucleus passes 50%.
  o.seed = 5;
  Sampler sampler(o, {});

  for (int i = 0; i < 50; ++i) {
    const int32_t id = sampler.Sample(Logits()).id;
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(SamplerTest, FrequencyPenaltyMovesGreedyAway) {
  SamplingOptions o;
  o.frequency_penalty = 2.0f;
  Sampler sampler(o, {});

  EXPECT_EQ(sampler.Sample(Logits()).id, 1);
  EXPECT_EQ(sampler.Sample(Logits()).id, 3);  // 1 now scores 3 - 2 = 1.
}

TEST(SamplerTest, RepetitionPenaltyCoversThePrompt) {
  SamplingOptions o;
  o.repetition_penalty = 2.0f;
  const int32_t prompt[] = {1};
  Sampler sampler(o, prompt);

  EXPECT_EQ(sampler.Sample(Logits()).id, 3);
}

TEST(SamplerTest, GreedyNeverTakesAMaskedToken) {
  Sampler sampler({}, {});
  const std::vector<uint64_t> mask = Mask({0, 2, 4});

  SampledToken t = sampler.Sample(Logits(), mask);

  EXPECT_EQ(t.id, 2);  // 1 and 3 hold the largest logits but are masked.
}

TEST(SamplerTest, SamplingNeverTakesAMaskedToken) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.seed = 11;
  Sampler sampler(o, {});
  const std::vector<uint64_t> mask = Mask({4, 5});
  std::vector<int32_t> seen;

  for (int i = 0; i < 200; ++i) seen.push_back(sampler.Sample(Logits(), mask).id);

  for (int32_t id : seen) EXPECT_TRUE(id == 4 || id == 5) << id;
  // Both allowed tokens come up (5 holds about 82% of the allowed mass, 4 about 18%).
  EXPECT_NE(std::count(seen.begin(), seen.end(), 4), 0);
  EXPECT_NE(std::count(seen.begin(), seen.end(), 5), 0);
}

TEST(SamplerTest, TopKWithAMaskPicksAmongTheAllowedTokens) {
  SamplingOptions o;
  o.temperature = 2.0f;
  o.top_k = 1;  // The best allowed token, not the best token.
  o.seed = 2;
  Sampler sampler(o, {});
  const std::vector<uint64_t> mask = Mask({0, 2, 5});

  for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler.Sample(Logits(), mask).id, 2);
}

TEST(SamplerTest, MinPAndTopPWithAMaskAreRelativeToTheAllowedTokens) {
  SamplingOptions o;
  o.temperature = 1.0f;
  // Relative to the best allowed token (2), not the best token (1, which would drop them all):
  // keeps 0 (e^-1 of 2's weight), drops 5 (e^-1.5).
  o.min_p = 0.3f;
  o.seed = 4;
  Sampler min_p(o, {});
  o.min_p = 0.0f;
  o.top_p = 0.6f;  // Among {0, 2}: 2 holds 73%, a nucleus of its own.
  Sampler top_p(o, {});
  const std::vector<uint64_t> mask = Mask({0, 2, 5});
  const std::vector<uint64_t> two = Mask({0, 2});

  for (int i = 0; i < 50; ++i) {
    const int32_t a = min_p.Sample(Logits(), mask).id;
    EXPECT_TRUE(a == 0 || a == 2) << a;
    EXPECT_EQ(top_p.Sample(Logits(), two).id, 2);
  }
}

TEST(SamplerTest, PenaltiesApplyToTheAllowedTokens) {
  SamplingOptions o;
  o.frequency_penalty = 2.0f;
  Sampler sampler(o, {});
  const std::vector<uint64_t> mask = Mask({0, 2});

  EXPECT_EQ(sampler.Sample(Logits(), mask).id, 2);
  EXPECT_EQ(sampler.Sample(Logits(), mask).id, 0);  // 2 now scores 2 - 2 = 0 < 1.
}

TEST(SamplerTest, MaskBitsPastTheLogitsAreIgnored) {
  Sampler sampler({}, {});
  // Ids 6 and 63 lie past the six logits (a tokenizer with more ids than the model).
  const std::vector<uint64_t> mask = Mask({4, 6, 63});

  EXPECT_EQ(sampler.Sample(Logits(), mask).id, 4);
}

TEST(SamplerTest, MaskedLogprobsAreThoseOfTheRawDistribution) {
  SamplingOptions o;
  o.logprobs = 2;
  Sampler sampler(o, {});
  const std::vector<uint64_t> mask = Mask({2});

  SampledToken t = sampler.Sample(Logits(), mask);

  double z = 0;
  for (float l : Logits()) z += std::exp(l);
  EXPECT_EQ(t.id, 2);
  EXPECT_NEAR(t.logprob, 2.0 - std::log(z), 1e-5);
  // The alternatives are the raw distribution's best, masked or not.
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 3);
}

TEST(SamplerTest, AMaskOverALargeVocabularyFindsIdsInEveryWord) {
  std::vector<float> logits(200, 0.0f);
  logits[5] = 9.0f;
  logits[130] = 1.0f;
  logits[199] = 2.0f;
  Sampler sampler({}, {});
  const std::vector<uint64_t> mask = Mask({130, 199}, 4);

  EXPECT_EQ(sampler.Sample(logits, mask).id, 199);
}

// The draw of the sampler before it dropped the candidates whose probability is 0 in double
// precision: every id sorted, then the same filters and the same one draw.
int32_t FullSortDraw(const std::vector<float>& logits, const SamplingOptions& o, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  int32_t keep = static_cast<int32_t>(order.size());
  if (o.top_k > 0) keep = std::min(keep, o.top_k);
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const float best = logits[order[0]];
  std::vector<double> probs(keep);
  for (int32_t i = 0; i < keep; ++i) {
    probs[i] = std::exp(static_cast<double>(logits[order[i]] - best) / o.temperature);
  }
  if (o.min_p > 0.0f) {
    int32_t n = 1;
    while (n < keep && probs[n] >= o.min_p * probs[0]) ++n;
    keep = n;
  }
  if (o.top_p < 1.0f) {
    const double total = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
    double mass = 0.0;
    int32_t n = 0;
    while (n < keep) {
      mass += probs[n] / total;
      ++n;
      if (mass >= o.top_p) break;
    }
    keep = n;
  }
  const double total = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * total;
  double acc = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

// The draw without top_k written plainly: SamplingWeights' weights (tested against std::exp in
// sampling_weights_test.cc), then without top_p one walk over every id in order, with top_p
// every id of positive weight sorted, the nucleus walked, and the draw in that order.
int32_t UnrankedDraw(const std::vector<float>& logits, const SamplingOptions& o, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double u01 = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  std::vector<float> ranked(logits);
  for (float& l : ranked) l = std::isnan(l) ? -std::numeric_limits<float>::infinity() : l;
  const auto top = std::max_element(ranked.begin(), ranked.end());
  if (!std::isfinite(*top)) return static_cast<int32_t>(top - ranked.begin());
  const size_t n = logits.size();
  std::vector<float> w(n);
  std::vector<double> sums((n + kWeightBlock - 1) / kWeightBlock);
  const double total = SamplingWeights(logits, *top, 1.0f / o.temperature, o.min_p,
                                       absl::MakeSpan(w), absl::MakeSpan(sums));
  std::vector<int32_t> order;
  for (size_t i = 0; i < n; ++i) {
    if (w[i] > 0.0f) order.push_back(static_cast<int32_t>(i));
  }
  size_t keep = order.size();
  if (o.top_p < 1.0f) {
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return ranked[a] > ranked[b] || (ranked[a] == ranked[b] && a < b);
    });
    double mass = 0.0;
    keep = 0;
    while (keep < order.size()) {
      mass += w[order[keep++]] / total;
      if (mass >= o.top_p) break;
    }
  }
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) kept += w[order[i]];
  const double u = u01 * (o.top_p < 1.0f ? kept : total);
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += w[order[i]];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

// Sorting only the candidates that can be drawn changes no draw: over logits spread wide
// enough that most of a 5000-id vocabulary underflows, at several temperatures and filters.
// With top_k the reference is a full sort; without it, UnrankedDraw.
TEST(SamplerTest, DrawsEqualThoseOfAFullSort) {
  std::mt19937_64 gen(7);
  for (int round = 0; round < 300; ++round) {
    std::vector<float> logits(5000);
    const float spread = std::vector<float>{1.0f, 30.0f, 3000.0f}[round % 3];
    for (float& l : logits) l = std::normal_distribution<float>(0.0f, spread)(gen);
    logits[round % 5000] = logits[(round * 7) % 5000];  // A tie.
    SamplingOptions o;
    o.temperature = std::vector<float>{0.05f, 0.7f, 1.0f, 2.0f}[round % 4];
    o.top_k = std::vector<int32_t>{0, 0, 40, 6000}[(round / 4) % 4];
    o.top_p = (round / 16) % 2 == 0 ? 1.0f : 0.9f;
    o.min_p = (round / 32) % 2 == 0 ? 0.0f : 0.05f;
    o.seed = 1000 + round;
    Sampler sampler(o, {});
    SCOPED_TRACE(round);
    const int32_t want = o.top_k == 0 ? UnrankedDraw(logits, o, 1000 + round)
                                      : FullSortDraw(logits, o, 1000 + round);
    EXPECT_EQ(sampler.Sample(logits).id, want);
  }
}

// Nearly flat logits put most of the vocabulary in top_p's nucleus: the collected candidates
// pass kComparisonSortMax and are ordered by the radix sort, thresholds lowered several times.
TEST(SamplerTest, ALargeNucleusDrawsAsAFullSortDoes) {
  std::mt19937_64 gen(5);
  for (int round = 0; round < 40; ++round) {
    std::vector<float> logits(9000);
    for (float& l : logits) l = std::uniform_real_distribution<float>(-0.5f, 0.5f)(gen);
    if (round % 4 == 1) logits[gen() % 9000] = -0.0f;
    if (round % 4 == 2) std::fill(logits.begin(), logits.begin() + 4000, 0.25f);  // Ties.
    SamplingOptions o;
    o.temperature = round % 2 == 0 ? 1.0f : 0.02f;  // 0.02: weights down to e^-50.
    o.top_p = std::vector<float>{0.5f, 0.9f, 0.999f}[round % 3];
    o.min_p = round % 5 == 4 ? 0.3f : 0.0f;
    o.seed = 70 + round;
    Sampler sampler(o, {});
    SCOPED_TRACE(round);
    EXPECT_EQ(sampler.Sample(logits).id, UnrankedDraw(logits, o, 70 + round));
  }
}

// Without top_k every candidate is drawn with its probability: softmax at the temperature,
// renormalised over what min_p and top_p keep. 60000 draws a case, each frequency within five
// standard deviations.
TEST(SamplerTest, DrawsWithoutTopKFollowTheSoftmax) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f, -30.0f, 2.5f};
  struct Case {
    float temperature, top_p, min_p;
    std::vector<double> want;  // Probabilities after the filters.
  };
  std::vector<Case> cases;
  const auto softmax = [&](float t, const std::vector<bool>& kept) {
    std::vector<double> p(logits.size());
    double total = 0.0;
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] = kept[i] ? std::exp((logits[i] - 3.0) / t) : 0.0;
      total += p[i];
    }
    for (double& x : p) x /= total;
    return p;
  };
  const std::vector<bool> all(logits.size(), true);
  cases.push_back({1.0f, 1.0f, 0.0f, softmax(1.0f, all)});
  cases.push_back({0.5f, 1.0f, 0.0f, softmax(0.5f, all)});
  // min_p 0.2 at temperature 1 keeps the logits within ln 5 = 1.61 of the best: 3, 3, 2, 2.5.
  cases.push_back(
      {1.0f, 1.0f, 0.2f, softmax(1.0f, {false, true, true, true, false, false, false, true})});
  // top_p 0.75: the two 3s hold 0.62 of the mass, with 2.5 0.81.
  cases.push_back(
      {1.0f, 0.75f, 0.0f, softmax(1.0f, {false, true, false, true, false, false, false, true})});
  for (const Case& c : cases) {
    SamplingOptions o;
    o.temperature = c.temperature;
    o.top_p = c.top_p;
    o.min_p = c.min_p;
    o.seed = 99;
    Sampler sampler(o, {});
    constexpr int kDraws = 60000;
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < kDraws; ++i) ++counts[sampler.Sample(logits).id];
    for (size_t id = 0; id < logits.size(); ++id) {
      const double p = c.want[id];
      const double sigma = std::sqrt(kDraws * p * (1.0 - p));
      SCOPED_TRACE(::testing::Message() << "temperature " << c.temperature << ", top_p " << c.top_p
                                        << ", min_p " << c.min_p << ", id " << id);
      EXPECT_NEAR(counts[id], kDraws * p, 5.0 * sigma + 0.5);
    }
  }
}

// GreedyChoice (the server's greedy choice, and cairn-run's Argmax): the lowest id of the
// largest, wherever it lies (in a whole block of the scan or in the tail past them), a NaN
// never chosen, not even at id 0.
TEST(SamplerTest, GreedyChoiceTakesTheFirstLargestAndNeverANaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits(37, 0.5f);
  logits[0] = nan;
  logits[35] = 2.0f;  // Past the two whole blocks of 16.
  EXPECT_EQ(GreedyChoice(logits), 35);
  logits[20] = 2.0f;
  EXPECT_EQ(GreedyChoice(logits), 20);
  std::fill(logits.begin() + 1, logits.end(), -1.0f);
  logits[3] = -0.0f;
  logits[30] = 0.0f;
  EXPECT_EQ(GreedyChoice(logits), 3);  // -0 and +0 are equal: the lower id.
  EXPECT_EQ(GreedyChoice({nan, nan, -inf}), 0);
  EXPECT_EQ(GreedyChoice({-inf, nan, 1.0f}), 2);
  EXPECT_EQ(GreedyChoice({}), 0);
  EXPECT_EQ(Argmax(logits.data(), static_cast<int64_t>(logits.size())), 3);
}

// Random logits of every kind the fast paths must rank as the general path does: ties, -0 and
// +0, NaN and infinities, and lengths that are not whole blocks of the vectorised scans.
std::vector<float> HostileLogits(std::mt19937_64& gen, size_t n) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits(n);
  for (float& l : logits) l = std::normal_distribution<float>(0.0f, 3.0f)(gen);
  std::uniform_int_distribution<size_t> at(0, n - 1);
  const int specials = static_cast<int>(gen() % 6);
  for (int i = 0; i < specials; ++i) {
    const float pick[] = {nan, -inf, inf, 0.0f, -0.0f, logits[at(gen)]};
    logits[at(gen)] = pick[gen() % 6];
  }
  if (gen() % 8 == 0) std::fill(logits.begin(), logits.end(), gen() % 2 == 0 ? nan : -inf);
  if (gen() % 8 == 0) {
    const float top = *std::max_element(logits.begin(), logits.end(), [](float a, float b) {
      return std::isnan(a) || (!std::isnan(b) && a < b);
    });
    logits[at(gen)] = top;  // The largest value twice (or more).
  }
  return logits;
}

// Without a mask, greedy, small top_k and no top_k read the logits in place (with penalties,
// greedy and top_k value the ids they apply to apart, no top_k draws from a copy); a mask that
// allows every id takes the general path (a copy with the penalties, then max_element, a sort
// or, without top_k, the draw over the allowed ids' values). Both must choose the same ids from the
// same random stream, and the reported alternatives must be a partial sort's.
TEST(SamplerTest, InPlaceChoicesEqualThoseOfTheGeneralPath) {
  std::mt19937_64 gen(11);
  for (int round = 0; round < 600; ++round) {
    const size_t n = round % 5 == 0 ? 1 + gen() % 40 : 1 + gen() % 3000;
    const std::vector<float> logits = HostileLogits(gen, n);
    SamplingOptions o;
    o.temperature = round % 3 == 0 ? 0.0f : std::vector<float>{0.05f, 0.7f, 1.5f}[round % 3];
    const int32_t k =
        std::vector<int32_t>{1, 5, 20, 512, static_cast<int32_t>(n), 0}[(round + round / 5) % 6];
    o.top_k = std::min(k, 512);
    o.top_p = (round / 5) % 2 == 0 ? 1.0f : 0.9f;
    o.min_p = (round / 10) % 2 == 0 ? 0.0f : 0.05f;
    o.logprobs = static_cast<int>(round % 7);
    o.seed = 500 + round;
    // Penalties in half the rounds: the prompt's ids for the repetition penalty, the generated
    // ones (three steps) for all of them.
    if ((round / 20) % 2 == 1) {
      o.repetition_penalty = std::vector<float>{1.0f, 1.3f, 0.7f}[round % 3];
      o.presence_penalty = std::vector<float>{0.0f, 0.5f, -1.5f, 2.0f}[(round / 3) % 4];
      o.frequency_penalty = std::vector<float>{0.0f, 0.25f, -0.5f}[(round / 7) % 3];
    }
    std::vector<int32_t> prompt(gen() % 30);
    for (int32_t& id : prompt) id = static_cast<int32_t>(gen() % n);
    const std::vector<uint64_t> all((n + 63) / 64, ~uint64_t{0});
    Sampler in_place(o, prompt);
    Sampler general(o, prompt);
    SCOPED_TRACE(::testing::Message() << "round " << round << ", " << n << " logits");
    for (int step = 0; step < 3; ++step) {
      const SampledToken a = in_place.Sample(logits);
      const SampledToken b = general.Sample(logits, all);
      ASSERT_EQ(a.id, b.id) << "step " << step;
      ASSERT_EQ(a.top, b.top);
      if (o.temperature == 0.0f && o.repetition_penalty == 1.0f && o.presence_penalty == 0.0f &&
          o.frequency_penalty == 0.0f) {
        std::vector<float> ranked(logits);
        for (float& l : ranked) l = std::isnan(l) ? -std::numeric_limits<float>::infinity() : l;
        ASSERT_EQ(a.id, std::max_element(ranked.begin(), ranked.end()) - ranked.begin());
      }
      std::vector<int32_t> ids(n);
      std::iota(ids.begin(), ids.end(), 0);
      const auto key = [&](int32_t id) {
        return std::isnan(logits[id]) ? -std::numeric_limits<float>::infinity() : logits[id];
      };
      const size_t shown = std::min<size_t>(o.logprobs, n);
      std::partial_sort(ids.begin(), ids.begin() + shown, ids.end(), [&](int32_t x, int32_t y) {
        return key(x) > key(y) || (key(x) == key(y) && x < y);
      });
      ASSERT_EQ(a.top.size(), shown);
      for (size_t i = 0; i < shown; ++i) ASSERT_EQ(a.top[i].first, ids[i]) << i;
    }
  }
}

// NaN logits are never drawn; +inf ones (a tiny repetition penalty dividing a positive logit)
// are the only candidates, the lowest id of them chosen, not the least likely token.
TEST(SamplerTest, NonFiniteLogitsGiveAWellDefinedChoice) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  SamplingOptions o;
  o.temperature = 1.0f;
  o.seed = 3;
  for (int i = 0; i < 20; ++i) {
    Sampler sampler(o, {});
    const int32_t id = sampler.Sample({nan, 1.0f, nan, 0.5f}).id;
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
  Sampler with_inf(o, {});
  EXPECT_EQ(with_inf.Sample({1.0f, inf, 2.0f, inf}).id, 1);
  Sampler all_nan(o, {});
  EXPECT_EQ(all_nan.Sample({nan, nan, nan}).id, 0);

  o.repetition_penalty = 1e-38f;
  Sampler penalised(o, {2, 3});
  EXPECT_EQ(penalised.Sample({-5.0f, 0.0f, 4.0f, 3.0f}).id, 2);
}

// Reported logprobs are never NaN or infinite (the gateway writes them as JSON numbers): a
// NaN logit has probability 0, +inf logits share all of it, and a token of probability 0 (or
// one too small for a float) reports kMinLogprob.
TEST(SamplerTest, LogprobsAreFiniteWhateverTheLogits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  SamplingOptions o;
  o.logprobs = 4;

  Sampler with_nan(o, {});
  SampledToken a = with_nan.Sample({nan, 0.0f, 0.0f, -inf});
  EXPECT_EQ(a.id, 1);
  EXPECT_NEAR(a.logprob, -std::log(2.0), 1e-6);
  ASSERT_EQ(a.top.size(), 4u);
  EXPECT_EQ(a.top[0], (std::pair<int32_t, float>{1, a.logprob}));
  EXPECT_EQ(a.top[1], (std::pair<int32_t, float>{2, a.logprob}));
  EXPECT_EQ(a.top[2], (std::pair<int32_t, float>{0, kMinLogprob}));  // NaN ranks as -inf.
  EXPECT_EQ(a.top[3], (std::pair<int32_t, float>{3, kMinLogprob}));

  Sampler with_inf(o, {});
  SampledToken b = with_inf.Sample({1.0f, inf, nan, inf});
  EXPECT_EQ(b.id, 1);
  EXPECT_NEAR(b.logprob, -std::log(2.0), 1e-6);
  EXPECT_EQ(b.top[2], (std::pair<int32_t, float>{0, kMinLogprob}));

  Sampler all_nan(o, {});
  SampledToken c = all_nan.Sample({nan, nan, -inf});
  EXPECT_EQ(c.logprob, kMinLogprob);
  for (const auto& [id, lp] : c.top) EXPECT_EQ(lp, kMinLogprob) << id;

  Sampler extreme(o, {});
  SampledToken d = extreme.Sample({3e38f, -3e38f});
  EXPECT_EQ(d.id, 0);
  EXPECT_EQ(d.logprob, 0.0f);
  EXPECT_EQ(d.top[1], (std::pair<int32_t, float>{1, kMinLogprob}));
}

// Without top_k a mask's refused ids weigh nothing; where every allowed id is -infinity or
// NaN (no weight at all), the lowest allowed id is chosen, never a refused one.
TEST(SamplerTest, AMaskWhoseIdsHaveNoWeightChoosesTheLowestAllowedId) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  SamplingOptions o;
  o.temperature = 1.0f;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    o.seed = seed;
    Sampler sampler(o, {});
    EXPECT_EQ(sampler.Sample({5.0f, 4.0f, -inf, 3.0f, nan, 9.0f}, Mask({2, 4})).id, 2);
    const int32_t id = sampler.Sample({5.0f, 4.0f, -inf, 3.0f, 1.0f, 9.0f}, Mask({2, 3, 4})).id;
    EXPECT_TRUE(id == 3 || id == 4) << id;
  }
}

// The same over 300 ids, the likely ones in different blocks of 64 and of 16, so that the
// draw walks block sums, the weights' vectorised blocks and DrawNucleus's scans are all used;
// the references are softmax in double, independent of SamplingWeights.
TEST(SamplerTest, DrawsOverSeveralBlocksFollowTheSoftmax) {
  std::vector<float> logits(300, -6.0f);
  const std::vector<int32_t> heavy = {5, 70, 150, 203, 290};
  const std::vector<float> values = {2.0f, 1.0f, 2.5f, 0.0f, 1.5f};
  for (size_t i = 0; i < heavy.size(); ++i) logits[heavy[i]] = values[i];
  for (float top_p : {1.0f, 0.8f}) {
    SamplingOptions o;
    o.temperature = 1.0f;
    o.top_p = top_p;
    o.seed = 31;
    Sampler sampler(o, {});
    // Every id's weight e^(l - 2.5), 2.34 in all; top_p 0.8 keeps 150, 5, 290 (0.84 of the
    // mass; 0.69 without 290).
    std::vector<double> weight(300);
    for (size_t i = 0; i < 300; ++i) weight[i] = std::exp(logits[i] - 2.5);
    std::vector<bool> kept(300, top_p == 1.0f);
    if (top_p < 1.0f) kept[150] = kept[5] = kept[290] = true;
    double kept_total = 0.0;
    for (size_t i = 0; i < 300; ++i) kept_total += kept[i] ? weight[i] : 0.0;
    constexpr int kDraws = 50000;
    std::vector<int> counts(300, 0);
    for (int i = 0; i < kDraws; ++i) ++counts[sampler.Sample(logits).id];
    int light = 0;
    double light_p = 0.0;
    for (size_t i = 0; i < 300; ++i) {
      const double p = kept[i] ? weight[i] / kept_total : 0.0;
      if (std::find(heavy.begin(), heavy.end(), static_cast<int32_t>(i)) == heavy.end()) {
        light += counts[i];
        light_p += p;
        continue;
      }
      EXPECT_NEAR(counts[i], kDraws * p, 5.0 * std::sqrt(kDraws * p * (1.0 - p)) + 0.5)
          << "top_p " << top_p << ", id " << i;
    }
    // The 295 light ids together (0.026 of the mass without top_p, none with it).
    EXPECT_NEAR(light, kDraws * light_p, 5.0 * std::sqrt(kDraws * light_p * (1.0 - light_p)) + 0.5)
        << "top_p " << top_p;
  }
}

// Without top_k a mask allowing few ids (here 4 of 2000) draws over their values alone, one
// allowing many over the vocabulary with the others at -infinity: both follow the softmax over
// the allowed ids, renormalised by top_p.
TEST(SamplerTest, SparseAndDenseMasksDrawFromTheAllowedSoftmax) {
  std::vector<float> logits(2000);
  std::mt19937_64 gen(12);
  for (float& l : logits) l = std::normal_distribution<float>(0.0f, 2.0f)(gen);
  const std::vector<int32_t> ids = {7, 300, 301, 1999};
  const std::vector<float> values = {1.0f, 2.0f, 0.0f, 1.5f};
  for (size_t i = 0; i < ids.size(); ++i) logits[ids[i]] = values[i];
  std::vector<uint64_t> sparse(32, 0);
  for (int32_t id : ids) sparse[id / 64] |= uint64_t{1} << (id % 64);
  std::vector<uint64_t> dense(32, ~uint64_t{0});
  for (int32_t id = 0; id < 2000; ++id) {
    const bool kept = std::find(ids.begin(), ids.end(), id) != ids.end() || id % 3 == 0;
    if (!kept) dense[id / 64] &= ~(uint64_t{1} << (id % 64));
  }
  for (float top_p : {1.0f, 0.7f}) {
    // Weights e^(v - 2): 1 (300), 0.61 (1999), 0.37 (7), 0.14 (301), 2.11 in all; top_p 0.7
    // keeps the first two (0.76 of the mass; 300 alone holds 0.47).
    std::vector<double> want = {std::exp(-1.0), 1.0, std::exp(-2.0), std::exp(-0.5)};
    if (top_p < 1.0f) want[0] = want[2] = 0.0;
    double total = 0.0;
    for (double w : want) total += w;
    SamplingOptions o;
    o.temperature = 1.0f;
    o.top_p = top_p;
    o.seed = 4;
    Sampler sampler(o, {});
    constexpr int kDraws = 40000;
    std::vector<int> counts(ids.size(), 0);
    for (int i = 0; i < kDraws; ++i) {
      const int32_t id = sampler.Sample(logits, sparse).id;
      const auto at = std::find(ids.begin(), ids.end(), id);
      ASSERT_NE(at, ids.end()) << id;
      ++counts[at - ids.begin()];
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      const double p = want[i] / total;
      EXPECT_NEAR(counts[i], kDraws * p, 5.0 * std::sqrt(kDraws * p * (1.0 - p)) + 0.5)
          << "top_p " << top_p << ", id " << ids[i];
    }
    // The dense mask's draws stay inside it.
    Sampler dense_sampler(o, {});
    for (int i = 0; i < 200; ++i) {
      const int32_t id = dense_sampler.Sample(logits, dense).id;
      ASSERT_TRUE((dense[id / 64] >> (id % 64)) & 1) << id;
    }
  }
}

// A prompt id past the logits (a tokenizer id the model has no logit for) is penalised on no
// path: the choices are those of a sampler without it.
TEST(SamplerTest, PromptIdsPastTheLogitsPenaliseNothing) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.repetition_penalty = 1.5f;
  o.presence_penalty = 1.0f;
  o.seed = 8;
  const std::vector<int32_t> past = {3, 6, 1000, -1};
  const std::vector<int32_t> inside = {3};
  for (int top_k : {0, 2}) {
    o.top_k = top_k;
    for (const bool masked : {false, true}) {
      Sampler a(o, past);
      Sampler b(o, inside);
      const std::vector<uint64_t> mask = masked ? Mask({0, 1, 3, 5}) : std::vector<uint64_t>{};
      for (int step = 0; step < 5; ++step) {
        EXPECT_EQ(a.Sample(Logits(), mask).id, b.Sample(Logits(), mask).id)
            << "top_k " << top_k << ", masked " << masked << ", step " << step;
      }
    }
  }
}

TEST(SamplerTest, ValidationNamesTheField) {
  SamplingOptions o;
  o.temperature = std::nanf("");
  EXPECT_THAT(ValidateSamplingOptions(o, 20), StatusIs(absl::StatusCode::kInvalidArgument));
  o = {};
  o.top_p = 0.0f;
  EXPECT_THAT(ValidateSamplingOptions(o, 20), StatusIs(absl::StatusCode::kInvalidArgument));
  o = {};
  o.presence_penalty = -3.0f;
  EXPECT_THAT(ValidateSamplingOptions(o, 20), StatusIs(absl::StatusCode::kInvalidArgument));
  o = {};
  o.logprobs = 21;
  EXPECT_THAT(ValidateSamplingOptions(o, 20), StatusIs(absl::StatusCode::kInvalidArgument));
  o = {};
  o.repetition_penalty = 0.0f;
  EXPECT_THAT(ValidateSamplingOptions(o, 20), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(ValidateSamplingOptions({}, 20).ok());
}

}  // namespace
}  // namespace cairn::infer
