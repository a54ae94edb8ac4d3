#include "services/infer/engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status/check.h"

namespace cairn::infer {
namespace {

// OpenAI's range for presence and frequency penalties.
constexpr float kMaxAbsPenalty = 2.0f;
// Candidates kept by top_k up to this many are ordered by a partial sort (V log k); more, or
// all of them without top_k, by a radix sort (four passes over them).
constexpr int32_t kPartialSortMax = 512;

}  // namespace

absl::Status ValidateSamplingOptions(const SamplingOptions& o, int max_logprobs) {
  if (!(o.temperature >= 0.0f) || std::isinf(o.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be a finite value >= 0, got ", o.temperature));
  }
  if (o.top_k < 0) return absl::InvalidArgumentError("top_k must be >= 0");
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", o.top_p));
  }
  if (!(o.min_p >= 0.0f && o.min_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", o.min_p));
  }
  if (!(o.repetition_penalty > 0.0f) || std::isinf(o.repetition_penalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be a finite value > 0, got ", o.repetition_penalty));
  }
  if (!(std::fabs(o.presence_penalty) <= kMaxAbsPenalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("presence_penalty must be in [-2, 2], got ", o.presence_penalty));
  }
  if (!(std::fabs(o.frequency_penalty) <= kMaxAbsPenalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frequency_penalty must be in [-2, 2], got ", o.frequency_penalty));
  }
  if (o.logprobs < 0 || o.logprobs > max_logprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs must be in [0, ", max_logprobs, "], got ", o.logprobs));
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingOptions& options, absl::Span<const int32_t> prompt)
    : options_(options), rng_(options.seed.has_value() ? *options.seed : std::random_device{}()) {
  if (options_.repetition_penalty != 1.0f) {
    for (int32_t id : prompt) seen_[id] = true;
  }
}

void Sampler::SortDescending() {
  // Keys: the logit's bits turned so that unsigned order is descending logit order, above the
  // id. A stable sort on the keys' high half keeps equal logits in ascending id order, as
  // order_ comes (ascending ids), so the order is the partial sort's exactly.
  const size_t n = order_.size();
  keys_.resize(n);
  scratch_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(work_[order_[i]]);
    const uint32_t ascending = (u >> 31) != 0 ? ~u : (u | 0x80000000u);
    keys_[i] = (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(order_[i]);
  }
  for (int shift = 32; shift < 64; shift += 8) {
    size_t count[257] = {};
    for (uint64_t k : keys_) ++count[((k >> shift) & 0xff) + 1];
    for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
    for (uint64_t k : keys_) scratch_[count[(k >> shift) & 0xff]++] = k;
    keys_.swap(scratch_);
  }
  for (size_t i = 0; i < n; ++i) order_[i] = static_cast<int32_t>(keys_[i] & 0xffffffffu);
}

SampledToken Sampler::Sample(absl::Span<const float> logits, absl::Span<const uint64_t> allowed) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  const bool masked = !allowed.empty();
  SampledToken result;

  // Log-probabilities of the raw distribution, only when they are reported (an exp per
  // vocabulary entry is a visible share of a decode step). A NaN logit has probability 0, as
  // the choice below treats it; +inf logits share all of the probability.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float log_norm = 0.0f;
  int64_t infinite = 0;
  if (options_.logprobs > 0) {
    float raw_max = -kInf;
    for (float l : logits) {
      if (l > raw_max) raw_max = l;  // False for NaN.
      if (l == kInf) ++infinite;
    }
    log_norm = raw_max;
    if (std::isfinite(raw_max)) {
      double raw_sum = 0.0;
      for (float l : logits) {
        if (!std::isnan(l)) raw_sum += std::exp(static_cast<double>(l - raw_max));
      }
      log_norm = raw_max + static_cast<float>(std::log(raw_sum));
    }
  }
  // The reported logprob of a token of logit `l`, floored at kMinLogprob.
  auto logprob = [&](float l) {
    float v = -kInf;  // No finite logit and no +inf one: every token is as unlikely.
    if (infinite > 0) {
      v = l == kInf ? -static_cast<float>(std::log(static_cast<double>(infinite))) : -kInf;
    } else if (std::isfinite(log_norm)) {
      v = l - log_norm;  // NaN for a NaN logit.
    }
    return v >= kMinLogprob ? v : kMinLogprob;
  };

  // Penalties, on a copy. A NaN logit (a broken checkpoint's overflow) is never chosen: it
  // would leave no order to sort by.
  // -0 becomes +0 (adding +0 does it), which orders it as the comparison does: equal, the
  // lower id first.
  work_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    work_[i] = std::isnan(l) ? -std::numeric_limits<float>::infinity() : l + 0.0f;
  }
  if (options_.repetition_penalty != 1.0f) {
    for (const auto& [id, unused] : seen_) {
      float& l = work_[id];
      l = l > 0 ? l / options_.repetition_penalty : l * options_.repetition_penalty;
    }
  }
  if (options_.presence_penalty != 0.0f || options_.frequency_penalty != 0.0f) {
    for (const auto& [id, count] : generated_) {
      work_[id] -= options_.presence_penalty + options_.frequency_penalty * count;
    }
  }

  // With a mask, the candidates are the allowed ids only, in ascending order: the same choice
  // as setting every other logit to -infinity, without a pass over the vocabulary to do it.
  if (masked) {
    order_.clear();
    const size_t words = std::min(allowed.size(), (static_cast<size_t>(vocab) + 63) / 64);
    for (size_t w = 0; w < words; ++w) {
      for (uint64_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
        const int32_t id = static_cast<int32_t>(w * 64 + std::countr_zero(bits));
        if (id >= vocab) break;
        order_.push_back(id);
      }
    }
    CAIRN_CHECK(!order_.empty());  // The caller checked that the mask allows a token.
  }

  int32_t chosen = 0;
  if (options_.temperature == 0.0f && !masked) {
    chosen = static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
  } else if (options_.temperature == 0.0f) {
    // The largest allowed logit, the lowest id on ties (order_ ascends).
    chosen = order_[0];
    for (int32_t id : order_) {
      if (work_[id] > work_[chosen]) chosen = id;
    }
  } else {
    // Candidates in descending order of logit (ties to the lower id), then the filters.
    if (!masked) {
      order_.resize(vocab);
      std::iota(order_.begin(), order_.end(), 0);
    }
    int32_t keep = static_cast<int32_t>(order_.size());
    if (options_.top_k > 0) keep = std::min(keep, options_.top_k);
    if (keep <= kPartialSortMax) {
      std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(),
                        [&](int32_t a, int32_t b) {
                          return work_[a] > work_[b] || (work_[a] == work_[b] && a < b);
                        });
    } else {
      SortDescending();
    }
    if (!std::isfinite(work_[order_[0]])) {
      // +inf logits (a tiny repetition penalty dividing a positive one) or nothing but -inf:
      // the lowest id of the largest, as greedy would choose.
      keep = 1;
      work_[order_[0]] = 0.0f;
    }
    const float best = work_[order_[0]];
    std::vector<double>& probs = probs_;
    probs.resize(keep);
    double total = 0.0;
    for (int32_t i = 0; i < keep; ++i) {
      probs[i] = std::exp(static_cast<double>(work_[order_[i]] - best) / options_.temperature);
      total += probs[i];
    }
    if (options_.min_p > 0.0f) {
      // probs[0] is the most likely candidate's (unnormalised) weight.
      int32_t n = 1;
      while (n < keep && probs[n] >= options_.min_p * probs[0]) ++n;
      keep = n;
    }
    if (options_.top_p < 1.0f) {
      double mass = 0.0;
      total = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
      int32_t n = 0;
      while (n < keep) {
        mass += probs[n] / total;
        ++n;
        if (mass >= options_.top_p) break;
      }
      keep = n;
    }
    total = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
    // One draw per sampled token keeps seeded streams reproducible.
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * total;
    double acc = 0.0;
    chosen = order_[keep - 1];
    for (int32_t i = 0; i < keep; ++i) {
      acc += probs[i];
      if (u < acc) {
        chosen = order_[i];
        break;
      }
    }
  }

  result.id = chosen;
  if (options_.logprobs > 0) {
    result.logprob = logprob(logits[chosen]);
    const int32_t n = std::min(options_.logprobs, vocab);
    std::vector<int32_t> top(vocab);
    std::iota(top.begin(), top.end(), 0);
    // Ordered as NaN were -infinity: a NaN in the comparison would leave no order to sort by.
    auto key = [&](int32_t id) { return std::isnan(logits[id]) ? -kInf : logits[id]; };
    std::partial_sort(top.begin(), top.begin() + n, top.end(), [&](int32_t a, int32_t b) {
      return key(a) > key(b) || (key(a) == key(b) && a < b);
    });
    for (int32_t i = 0; i < n; ++i) result.top.emplace_back(top[i], logprob(logits[top[i]]));
  }
  ++generated_[chosen];
  if (options_.repetition_penalty != 1.0f) seen_[chosen] = true;
  return result;
}

}  // namespace cairn::infer
