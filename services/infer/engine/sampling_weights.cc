// Built with -fno-trapping-math (so that the selects below become vector blends; no result
// changes) and -ffp-contract=off (so that no compiler fuses a multiply-add and changes bits).
#include "services/infer/engine/sampling_weights.h"

#include <atomic>
#include <bit>
#include <cstdint>

#include "common/status/check.h"

namespace cairn::infer {
namespace {

// exp(x) = 2^k * exp(r) with k = round(x / ln 2) and |r| <= ln(2) / 2, exp(r) by its Taylor
// series to r^7 (the next term is at most 5.2e-9, below a float's half ulp). Arguments below
// kMinExponent give 0, so 2^k stays a normal float built from its exponent bits.
constexpr float kMinExponent = -87.0f;
constexpr float kLog2e = 1.44269504f;
// ln 2 in two parts; k * kLn2Hi is exact for |k| < 2^9.
constexpr float kLn2Hi = 0.693145752f;
constexpr float kLn2Lo = 1.42860677e-06f;
// Adding 1.5 * 2^23 rounds a float of magnitude below 2^22 to an integer in its low bits.
constexpr float kRoundShift = 12582912.0f;
constexpr int kLanes = 8;

std::atomic<bool> portable_for_test{false};

[[gnu::always_inline]] inline float Weight(float v, float best, float inv_t, float min_p) {
  const float x = (v - best) * inv_t;
  const float xc = x > kMinExponent ? x : kMinExponent;  // A NaN becomes kMinExponent.
  const float shifted = xc * kLog2e + kRoundShift;
  const float k = shifted - kRoundShift;
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t exponent =
      std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRoundShift) + 127;
  float w = p * std::bit_cast<float>(exponent << 23);
  w = x >= kMinExponent ? w : 0.0f;  // False for NaN.
  return w >= min_p ? w : 0.0f;
}

[[gnu::always_inline]] inline double BlockSum(const double (&lanes)[kLanes]) {
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// Whole blocks run loops of fixed length that the compiler vectorises; the tail computes the
// same values one by one.
[[gnu::always_inline]] inline double WeightsBody(const float* __restrict v, size_t n, float best,
                                                 float inv_t, float min_p, float* __restrict w,
                                                 double* __restrict sums) {
  const size_t whole = n / kWeightBlock * kWeightBlock;
  double total = 0.0;
  for (size_t i = 0; i < whole; i += kWeightBlock) {
    float* out = w + i;
    const float* in = v + i;
    for (size_t j = 0; j < kWeightBlock; ++j) out[j] = Weight(in[j], best, inv_t, min_p);
    double lanes[kLanes] = {};
    for (size_t j = 0; j < kWeightBlock; j += kLanes) {
      for (int q = 0; q < kLanes; ++q) lanes[q] += out[j + q];
    }
    sums[i / kWeightBlock] = BlockSum(lanes);
    total += sums[i / kWeightBlock];
  }
  if (whole < n) {
    double lanes[kLanes] = {};
    for (size_t i = whole; i < n; ++i) {
      w[i] = Weight(v[i], best, inv_t, min_p);
      lanes[(i - whole) % kLanes] += w[i];
    }
    sums[whole / kWeightBlock] = BlockSum(lanes);
    total += sums[whole / kWeightBlock];
  }
  return total;
}

double WeightsPortable(const float* __restrict v, size_t n, float best, float inv_t, float min_p,
                       float* __restrict w, double* __restrict sums) {
  return WeightsBody(v, n, best, inv_t, min_p, w, sums);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx2")]] double WeightsAvx2(const float* __restrict v, size_t n, float best,
                                           float inv_t, float min_p, float* __restrict w,
                                           double* __restrict sums) {
  return WeightsBody(v, n, best, inv_t, min_p, w, sums);
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

}  // namespace

double SamplingWeights(absl::Span<const float> values, float best, float inv_temperature,
                       float min_p, absl::Span<float> weights, absl::Span<double> block_sums) {
  CAIRN_CHECK(weights.size() == values.size());
  CAIRN_CHECK(block_sums.size() == (values.size() + kWeightBlock - 1) / kWeightBlock);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (HasAvx2() && !portable_for_test.load(std::memory_order_relaxed)) {
    return WeightsAvx2(values.data(), values.size(), best, inv_temperature, min_p, weights.data(),
                       block_sums.data());
  }
#endif
  return WeightsPortable(values.data(), values.size(), best, inv_temperature, min_p, weights.data(),
                         block_sums.data());
}

bool SamplingWeightsHasAvx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return HasAvx2();
#else
  return false;
#endif
}

void UsePortableSamplingWeightsForTest(bool on) {
  portable_for_test.store(on, std::memory_order_relaxed);
}

}  // namespace cairn::infer
