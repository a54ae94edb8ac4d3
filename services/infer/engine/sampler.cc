#include "services/infer/engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status/check.h"
#include "services/infer/engine/sampling_weights.h"

namespace cairn::infer {
namespace {

// OpenAI's range for presence and frequency penalties.
constexpr float kMaxAbsPenalty = 2.0f;
// Candidates kept by top_k up to this many are ordered by a partial sort (V log k); more, or
// all of them without top_k, by a radix sort (four passes over them).
constexpr int32_t kPartialSortMax = 512;
constexpr float kInf = std::numeric_limits<float>::infinity();
// Logits a block of the scans below: whole blocks are compared in lanes (loops the compiler
// vectorises), and only a block that holds a hit is looked at logit by logit. The lanes' loops
// carry `#pragma GCC unroll 1`: at -O3 GCC 12 unrolls a loop of 16 into scalar compares before
// its vectoriser sees it (top_k 20 took twice as long as at -O2).
constexpr size_t kBlock = 16;
// DrawNucleus's first threshold (a weight relative to the best's 1) and the factor it is
// lowered by while the collected weights cannot hold top_p.
constexpr float kFirstNucleusThreshold = 0x1p-7f;
constexpr float kNucleusThresholdStep = 0x1p-10f;
// The last threshold: the smallest normal float, below every positive weight (SamplingWeights'
// smallest is exp(-87)), so that pass collects every one of them.
constexpr float kLastNucleusThreshold = std::numeric_limits<float>::min();
// The collected weights must fall short of top_p by more than this share before DrawNucleus
// lowers the threshold without sorting: far above the walk's rounding (a few ulps a weight
// summed), so the skip never changes where the walk would have stopped.
constexpr double kNucleusPrecheckSlack = 1e-6;
// Candidates up to this many are sorted by comparisons; more by SortDescending's radix sort.
constexpr size_t kComparisonSortMax = 1024;
// A mask allowing at least one id in this many is dense: without top_k the draw then runs over
// the vocabulary with the refused ids at -infinity, instead of over the allowed ids' values.
constexpr size_t kDenseMaskShare = 8;

// The largest value with NaN as -infinity (-infinity where there is none), in lanes.
float LargestRanked(absl::Span<const float> values) {
  const float* x = values.data();
  const size_t n = values.size();
  const size_t whole = n / kBlock * kBlock;
  float lanes[kBlock];
  for (float& l : lanes) l = -kInf;
  for (size_t i = 0; i < whole; i += kBlock) {
#pragma GCC unroll 1  // See kBlock.
    for (size_t j = 0; j < kBlock; ++j) lanes[j] = x[i + j] > lanes[j] ? x[i + j] : lanes[j];
  }
  float best = -kInf;
  for (float l : lanes) best = l > best ? l : best;
  for (size_t i = whole; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

}  // namespace

// std::max_element over the logits with NaN as -infinity (as Sample's general path finds it), in
// two passes of whole blocks: the largest value in lanes, then the first block holding it. -0
// and +0 compare equal, so which of them the first pass keeps changes no choice.
int32_t GreedyChoice(absl::Span<const float> logits) {
  const float* x = logits.data();
  const size_t n = logits.size();
  const size_t whole = n / kBlock * kBlock;
  const float best = LargestRanked(logits);
  if (best == -kInf) return 0;
  for (size_t i = 0; i < whole; i += kBlock) {
    int hit = 0;
#pragma GCC unroll 1  // See kBlock.
    for (size_t j = 0; j < kBlock; ++j) hit |= x[i + j] == best ? 1 : 0;
    if (hit == 0) continue;
    for (size_t j = 0;; ++j) {
      if (x[i + j] == best) return static_cast<int32_t>(i + j);
    }
  }
  for (size_t i = whole;; ++i) {
    if (x[i] == best) return static_cast<int32_t>(i);
  }
}

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

void Sampler::SortDescending(const float* values, std::vector<int32_t>& ids) {
  // Keys: the value's bits turned so that unsigned order is descending value order, above the
  // id. A stable sort on the keys' high half keeps equal values in ascending id order, as
  // `ids` comes, so the order is the partial sort's exactly.
  const size_t n = ids.size();
  keys_.resize(n);
  scratch_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(values[ids[i]] + 0.0f);  // -0 as +0.
    const uint32_t ascending = (u >> 31) != 0 ? ~u : (u | 0x80000000u);
    keys_[i] = (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(ids[i]);
  }
  for (int shift = 32; shift < 64; shift += 8) {
    size_t count[257] = {};
    for (uint64_t k : keys_) ++count[((k >> shift) & 0xff) + 1];
    for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
    for (uint64_t k : keys_) scratch_[count[(k >> shift) & 0xff]++] = k;
    keys_.swap(scratch_);
  }
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(keys_[i] & 0xffffffffu);
}

void Sampler::Penalise(absl::Span<const float> logits) {
  penalised_.clear();
  const bool repetition = options_.repetition_penalty != 1.0f;
  const bool additive = options_.presence_penalty != 0.0f || options_.frequency_penalty != 0.0f;
  std::vector<int32_t>& ids = order_;  // Free until SelectBest fills it.
  ids.clear();
  if (repetition) {
    for (const auto& [id, unused] : seen_) ids.push_back(id);
  }
  if (additive) {
    for (const auto& [id, unused] : generated_) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  penalised_mask_.resize((logits.size() + 63) / 64);
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;  // No logit to change.
    // ChooseAfterPenalties' arithmetic: the repetition penalty, then the additive ones.
    const float l = logits[id];
    float v = std::isnan(l) ? -kInf : l + 0.0f;
    if (repetition && seen_.contains(id)) {
      v = v > 0 ? v / options_.repetition_penalty : v * options_.repetition_penalty;
    }
    if (additive) {
      const auto it = generated_.find(id);
      if (it != generated_.end()) {
        v -= options_.presence_penalty + options_.frequency_penalty * it->second;
      }
    }
    penalised_.emplace_back(v, id);
    penalised_mask_[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  }
}

void Sampler::SelectBest(absl::Span<const float> logits, int32_t k, bool penalised) {
  // A heap whose front is the worst id kept: the lowest value, the highest id on ties.
  const auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  // Penalised ids are left out of the pass over the logits and offered after it.
  const auto skip = [&](size_t i) {
    return penalised && ((penalised_mask_[i / 64] >> (i % 64)) & 1) != 0;
  };
  const float* x = logits.data();
  const size_t n = logits.size();
  const auto want = static_cast<size_t>(k);
  heap_.clear();
  size_t i = 0;
  for (; i < n && heap_.size() < want; ++i) {
    if (skip(i)) continue;
    heap_.emplace_back(std::isnan(x[i]) ? -kInf : x[i] + 0.0f, static_cast<int32_t>(i));
  }
  std::make_heap(heap_.begin(), heap_.end(), better);
  if (heap_.size() == want) {
    // A later id takes a place only with a larger value (it loses ties); a NaN never does.
    float worst = heap_.front().first;
    const auto take = [&](size_t at) {
      const float l = x[at];
      if (!(l > worst) || skip(at)) return;
      std::pop_heap(heap_.begin(), heap_.end(), better);
      heap_.back() = {l + 0.0f, static_cast<int32_t>(at)};
      std::push_heap(heap_.begin(), heap_.end(), better);
      worst = heap_.front().first;
    };
    for (; i + kBlock <= n; i += kBlock) {
      int hit = 0;
#pragma GCC unroll 1  // See kBlock.
      for (size_t j = 0; j < kBlock; ++j) hit |= x[i + j] > worst ? 1 : 0;
      if (hit == 0) continue;
      for (size_t j = 0; j < kBlock; ++j) take(i + j);
    }
    for (; i < n; ++i) take(i);
  }
  if (penalised) {
    // In the full order: a penalised id may be lower than the ids kept, and wins their ties.
    for (const auto& [v, id] : penalised_) {
      const std::pair<float, int32_t> c{v, id};
      if (heap_.size() < want) {
        heap_.push_back(c);
        std::push_heap(heap_.begin(), heap_.end(), better);
      } else if (better(c, heap_.front())) {
        std::pop_heap(heap_.begin(), heap_.end(), better);
        heap_.back() = c;
        std::push_heap(heap_.begin(), heap_.end(), better);
      }
      penalised_mask_[static_cast<size_t>(id) / 64] = 0;  // Cleared for the next call.
    }
  }
  std::sort_heap(heap_.begin(), heap_.end(), better);
  order_.resize(want);
  values_.resize(want);
  for (size_t j = 0; j < want; ++j) {
    values_[j] = heap_[j].first;
    order_[j] = heap_[j].second;
  }
}

int32_t Sampler::ChooseAfterPenalties(absl::Span<const float> logits,
                                      absl::Span<const uint64_t> allowed) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  const bool masked = !allowed.empty();
  // Penalties, on a copy. A NaN logit (a broken checkpoint's overflow) is never chosen: it
  // would leave no order to sort by.
  // -0 becomes +0 (adding +0 does it), which orders it as the comparison does: equal, the
  // lower id first.
  work_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    work_[i] = std::isnan(l) ? -std::numeric_limits<float>::infinity() : l + 0.0f;
  }
  // Ids past the logits (a prompt id the model has no logit for) have nothing to penalise.
  const auto inside = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  if (options_.repetition_penalty != 1.0f) {
    for (const auto& [id, unused] : seen_) {
      if (!inside(id)) continue;
      float& l = work_[id];
      l = l > 0 ? l / options_.repetition_penalty : l * options_.repetition_penalty;
    }
  }
  if (options_.presence_penalty != 0.0f || options_.frequency_penalty != 0.0f) {
    for (const auto& [id, count] : generated_) {
      if (inside(id)) work_[id] -= options_.presence_penalty + options_.frequency_penalty * count;
    }
  }

  const size_t words = std::min(allowed.size(), (static_cast<size_t>(vocab) + 63) / 64);
  size_t allowed_count = 0;
  for (size_t w = 0; w < words; ++w) {
    const size_t past = w * 64 + 64 > static_cast<size_t>(vocab) ? w * 64 + 64 - vocab : 0;
    allowed_count += std::popcount(past == 0 ? allowed[w] : allowed[w] & (~uint64_t{0} >> past));
  }
  const bool draw_without_top_k = options_.temperature != 0.0f && options_.top_k == 0;
  if (masked && draw_without_top_k &&
      allowed_count * kDenseMaskShare >= static_cast<size_t>(vocab)) {
    // A mask allowing many ids, no top_k: a candidate of weight 0 is never drawn, so the ids the
    // mask refuses are set to -infinity and the draw runs over the vocabulary as without a
    // mask (no list of the allowed ids, no gather). Only where no allowed id has a weight
    // (every one -infinity) would it choose a refused id: then the lowest allowed id, as the
    // greedy choice among the allowed ids.
    int32_t first_allowed = -1;
    for (size_t w = 0; w < (static_cast<size_t>(vocab) + 63) / 64; ++w) {
      const uint64_t bits = w < words ? allowed[w] : 0;
      if (first_allowed < 0 && bits != 0) {
        first_allowed = static_cast<int32_t>(w * 64 + std::countr_zero(bits));
      }
      if (bits == ~uint64_t{0}) continue;
      const size_t end = std::min(static_cast<size_t>(vocab), w * 64 + 64);
      float* x = work_.data() + w * 64;
      if (end == w * 64 + 64) {
        for (size_t j = 0; j < 64; ++j) x[j] = ((bits >> j) & 1) != 0 ? x[j] : -kInf;
      } else {
        for (size_t j = 0; j < end - w * 64; ++j) x[j] = ((bits >> j) & 1) != 0 ? x[j] : -kInf;
      }
    }
    CAIRN_CHECK(first_allowed >= 0 && first_allowed < vocab);  // The caller checked the mask.
    const int32_t chosen = DrawUnranked(work_);
    const size_t word = static_cast<size_t>(chosen) / 64;
    return word < words && ((allowed[word] >> (chosen % 64)) & 1) != 0 ? chosen : first_allowed;
  }
  // With a mask, the candidates are the allowed ids only, in ascending order: the same choice
  // as setting every other logit to -infinity, without a pass over the vocabulary to do it.
  if (masked) {
    order_.clear();
    for (size_t w = 0; w < words; ++w) {
      for (uint64_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
        const int32_t id = static_cast<int32_t>(w * 64 + std::countr_zero(bits));
        if (id >= vocab) break;
        order_.push_back(id);
      }
    }
    CAIRN_CHECK(!order_.empty());  // The caller checked that the mask allows a token.
  }

  if (options_.temperature == 0.0f && !masked) {
    return static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
  }
  if (options_.temperature == 0.0f) {
    // The largest allowed logit, the lowest id on ties (order_ ascends).
    int32_t chosen = order_[0];
    for (int32_t id : order_) {
      if (work_[id] > work_[chosen]) chosen = id;
    }
    return chosen;
  }
  if (draw_without_top_k) {
    if (!masked) return DrawUnranked(work_);
    // A mask allowing few ids: the draw over their values alone.
    values_.resize(order_.size());
    for (size_t i = 0; i < order_.size(); ++i) values_[i] = work_[order_[i]];
    return order_[DrawUnranked(values_)];
  }
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
    SortDescending(work_.data(), order_);
  }
  values_.resize(static_cast<size_t>(keep));
  for (int32_t k = 0; k < keep; ++k) values_[k] = work_[order_[k]];
  return Draw(keep);
}

int32_t Sampler::DrawUnranked(absl::Span<const float> values) {
  // The one draw of the random stream, whatever the path below.
  const double u01 = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  const float best = LargestRanked(values);
  const float inv_t = 1.0f / options_.temperature;
  if (!std::isfinite(best) || !std::isfinite(inv_t)) return GreedyChoice(values);
  const size_t n = values.size();
  weights_.resize(n);
  block_sums_.resize((n + kWeightBlock - 1) / kWeightBlock);
  const double total = SamplingWeights(values, best, inv_t, options_.min_p,
                                       absl::MakeSpan(weights_), absl::MakeSpan(block_sums_));
  if (options_.top_p < 1.0f) return DrawNucleus(values, total, u01);
  // The block holding the draw by the block sums added as `total` was, then its weights.
  const double u = u01 * total;
  double before = 0.0;
  for (size_t b = 0; b < block_sums_.size(); ++b) {
    const double after = before + block_sums_[b];
    if (u < after) {
      const size_t begin = b * kWeightBlock;
      const size_t end = std::min(n, begin + kWeightBlock);
      double acc = before;
      for (size_t i = begin; i < end; ++i) {
        acc += weights_[i];
        if (u < acc) return static_cast<int32_t>(i);
      }
      // The block's weights added one by one fell short of its sum by rounding: its last
      // token of positive weight (there is one: the sum is positive).
      for (size_t i = end; i-- > begin;) {
        if (weights_[i] > 0.0f) return static_cast<int32_t>(i);
      }
    }
    before = after;
  }
  // u rounded up to the total: the last token of positive weight (the best one has weight 1).
  for (size_t i = n; i-- > 0;) {
    if (weights_[i] > 0.0f) return static_cast<int32_t>(i);
  }
  return 0;  // Not reached.
}

int32_t Sampler::DrawNucleus(absl::Span<const float> values, double total, double u01) {
  const float* w = weights_.data();
  const size_t n = values.size();
  const double top_p = options_.top_p;
  // Bands of weight [threshold, above), each below the one before. nucleus_ holds the bands
  // sorted so far: the start of the full descending order, since every weight of a later band
  // is below every weight of an earlier one. band_ holds those collected since, not sorted.
  float above = std::numeric_limits<float>::infinity();
  float threshold = kFirstNucleusThreshold;
  nucleus_.clear();
  band_.clear();
  double held = 0.0;  // The collected weights' sum.
  double mass = 0.0;  // The walk's share of the total over nucleus_[0, keep).
  size_t keep = 0;
  for (;;) {
    // Every positive weight is at least exp(-87), above the smallest normal float.
    const bool last = threshold <= kLastNucleusThreshold;
    const auto in_band = [&](float x) { return (x >= threshold) & (x < above); };
    size_t i = 0;
    for (; i + kBlock <= n; i += kBlock) {
      int hit = 0;
#pragma GCC unroll 1  // See kBlock.
      for (size_t j = 0; j < kBlock; ++j) hit |= in_band(w[i + j]) ? 1 : 0;
      if (hit == 0) continue;
      for (size_t j = i; j < i + kBlock; ++j) {
        if (in_band(w[j])) {
          band_.push_back(static_cast<int32_t>(j));
          held += w[j];
        }
      }
    }
    for (; i < n; ++i) {
      if (in_band(w[i])) {
        band_.push_back(static_cast<int32_t>(i));
        held += w[i];
      }
    }
    above = threshold;
    threshold = std::max(threshold * kNucleusThresholdStep, kLastNucleusThreshold);
    // Short of top_p by more than any rounding of the walk below: no sort yet.
    if (!last && held < top_p * total * (1.0 - kNucleusPrecheckSlack)) continue;
    if (band_.size() <= kComparisonSortMax) {
      const float* v = values.data();
      std::sort(band_.begin(), band_.end(),
                [v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
    } else {
      SortDescending(values.data(), band_);  // Stable: equal values lie in one band, ascending.
    }
    nucleus_.insert(nucleus_.end(), band_.begin(), band_.end());
    band_.clear();
    // Draw's top_p walk, on from where the last band's walk stopped.
    bool reached = false;
    while (keep < nucleus_.size()) {
      mass += w[nucleus_[keep]] / total;
      ++keep;
      if (mass >= top_p) {
        reached = true;
        break;
      }
    }
    if (reached || last) break;
  }
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) kept += w[nucleus_[i]];
  const double u = u01 * kept;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += w[nucleus_[i]];
    if (u < acc) return nucleus_[i];
  }
  return nucleus_[keep - 1];  // Every collected weight is positive.
}

int32_t Sampler::Draw(int32_t keep) {
  if (!std::isfinite(values_[0])) {
    // +inf logits (a tiny repetition penalty dividing a positive one) or nothing but -inf:
    // the lowest id of the largest, as greedy would choose.
    keep = 1;
    values_[0] = 0.0f;
  }
  const float best = values_[0];
  std::vector<double>& probs = probs_;
  probs.resize(keep);
  for (int32_t i = 0; i < keep; ++i) {
    probs[i] = std::exp(static_cast<double>(values_[i] - best) / options_.temperature);
  }
  if (options_.min_p > 0.0f) {
    // probs[0] is the most likely candidate's (unnormalised) weight.
    int32_t n = 1;
    while (n < keep && probs[n] >= options_.min_p * probs[0]) ++n;
    keep = n;
  }
  if (options_.top_p < 1.0f) {
    double mass = 0.0;
    const double total = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
    int32_t n = 0;
    while (n < keep) {
      mass += probs[n] / total;
      ++n;
      if (mass >= options_.top_p) break;
    }
    keep = n;
  }
  const double total = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
  // One draw per sampled token keeps seeded streams reproducible.
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * total;
  double acc = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (u < acc) return order_[i];
  }
  // u rounded up to the total: the last candidate of positive weight (the first has weight 1),
  // never one whose weight is 0.
  int32_t last = keep - 1;
  while (last > 0 && !(probs[last] > 0.0)) --last;
  return order_[last];
}

SampledToken Sampler::Sample(absl::Span<const float> logits, absl::Span<const uint64_t> allowed) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  const bool masked = !allowed.empty();
  SampledToken result;

  // Log-probabilities of the raw distribution, only when they are reported (an exp per
  // vocabulary entry is a visible share of a decode step). A NaN logit has probability 0, as
  // the choice below treats it; +inf logits share all of the probability.
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

  // Without a mask the logits are read in place: greedy without penalties by GreedyChoice,
  // sampling without top_k or penalties by DrawUnranked, greedy with penalties and a top_k of at
  // most kPartialSortMax by SelectBest (the ids a penalty applies to, the prompt's and the
  // generated ones, valued apart and offered after the pass over the rest), with the general path's
  // choices (a copy of every logit, then max_element or a sort), which took most of a token's host
  // time at a vocabulary of 248K.
  const bool penalties = options_.repetition_penalty != 1.0f || options_.presence_penalty != 0.0f ||
                         options_.frequency_penalty != 0.0f;
  const bool greedy = options_.temperature == 0.0f;
  int32_t chosen = 0;
  if (!masked && !penalties && greedy) {
    chosen = GreedyChoice(logits);
  } else if (!masked && !penalties && options_.top_k == 0) {
    chosen = DrawUnranked(logits);
  } else if (!masked && (greedy || (options_.top_k > 0 && options_.top_k <= kPartialSortMax))) {
    const int32_t keep = greedy ? 1 : std::min(vocab, options_.top_k);
    if (penalties) Penalise(logits);
    SelectBest(logits, keep, penalties);
    chosen = greedy ? order_[0] : Draw(keep);
  } else {
    chosen = ChooseAfterPenalties(logits, allowed);
  }

  result.id = chosen;
  if (options_.logprobs > 0) {
    result.logprob = logprob(logits[chosen]);
    // The raw logits' best ids, a NaN ranked as -infinity (the choice is made: order_ is free).
    const int32_t n = std::min(options_.logprobs, vocab);
    SelectBest(logits, n, /*penalised=*/false);
    for (int32_t i = 0; i < n; ++i) result.top.emplace_back(order_[i], logprob(logits[order_[i]]));
  }
  ++generated_[chosen];
  if (options_.repetition_penalty != 1.0f) seen_[chosen] = true;
  return result;
}

}  // namespace cairn::infer
