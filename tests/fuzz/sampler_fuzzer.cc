// The sampler over hostile logits (NaN, infinities, subnormals, -0, ties, values past any
// logit's range) with every valid option, a constraint's mask and prompt ids (in and past the
// vocabulary), a few steps a sampler.
// Input: option bytes, the vocabulary size, how the logits are read (raw float bits or small
// values), the logits, the mask, the prompt.
// Properties: the chosen id lies in the vocabulary and the mask; logprobs are finite and the
// alternatives are as many as asked (at most the vocabulary); a mask allowing every id chooses
// what no mask chooses from the same seed; without penalties, greedy is GreedyChoice, a +inf
// candidate wins (the lowest id of them), and -inf or NaN is chosen only when every candidate
// is one.

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/status/check.h"
#include "services/infer/engine/sampler.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using cairn::infer::SampledToken;
using cairn::infer::Sampler;
using cairn::infer::SamplingOptions;

constexpr int kMaxLogprobs = 5;
constexpr int kSteps = 3;

template <typename T, size_t N>
T Pick(const T (&values)[N], uint8_t byte) {
  return values[byte % N];
}

bool Allowed(const std::vector<uint64_t>& mask, size_t id) {
  return mask.empty() || ((mask[id / 64] >> (id % 64)) & 1) != 0;
}

}  // namespace

CAIRN_FUZZ_TARGET(Sampler) {
  cairn::fuzz::FuzzInput in(data, size);
  SamplingOptions o;
  constexpr float kTemperatures[] = {0.0f, 1e-45f, 1e-30f, 1e-6f, 0.05f, 0.7f, 1.0f, 2.0f, 1e30f};
  constexpr int kTopK[] = {0, 0, 1, 2, 5, 20, 512, 513, 1000};
  constexpr float kTopP[] = {1.0f, 0.9f, 0.5f, 1e-7f, 0.999999f};
  constexpr float kMinP[] = {0.0f, 0.0f, 0.05f, 0.5f, 1.0f, 1e-30f};
  constexpr float kRepetition[] = {1.0f, 1.0f, 1.3f, 0.7f, 1e-38f, 1e30f};
  constexpr float kAdditive[] = {0.0f, 0.0f, 2.0f, -2.0f, 0.5f};
  o.temperature = Pick(kTemperatures, in.Byte());
  o.top_k = Pick(kTopK, in.Byte());
  o.top_p = Pick(kTopP, in.Byte());
  o.min_p = Pick(kMinP, in.Byte());
  o.repetition_penalty = Pick(kRepetition, in.Byte());
  o.presence_penalty = Pick(kAdditive, in.Byte());
  o.frequency_penalty = Pick(kAdditive, in.Byte());
  o.logprobs = in.Byte() % (kMaxLogprobs + 1);
  o.seed = in.U16();
  CAIRN_CHECK(cairn::infer::ValidateSamplingOptions(o, kMaxLogprobs).ok());
  const bool penalties =
      o.repetition_penalty != 1.0f || o.presence_penalty != 0.0f || o.frequency_penalty != 0.0f;

  const size_t vocab = 1 + in.U16() % 1200;
  const uint8_t mode = in.Byte() % 3;
  std::vector<float> logits(vocab);
  for (float& l : logits) {
    if (mode == 0) {  // Raw bits: NaNs, infinities, subnormals, huge values.
      uint32_t bits = 0;
      const auto bytes = in.Bytes(4);
      std::memcpy(&bits, bytes.data(), bytes.size());
      l = std::bit_cast<float>(bits);
    } else if (mode == 1) {  // Small values with many ties.
      l = static_cast<float>(static_cast<int8_t>(in.Byte())) / 8.0f;
    } else {  // Mostly ordinary values with the odd special one.
      const uint8_t b = in.Byte();
      constexpr float kSpecial[] = {std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity(), -0.0f, 0.0f};
      l = b >= 250 ? kSpecial[b - 250 < 5 ? b - 250 : 0]
                   : static_cast<float>(static_cast<int>(b) - 125) * 0.37f;
    }
  }
  std::vector<uint64_t> mask;
  if ((in.Byte() & 1) != 0) {
    mask.assign((vocab + 63) / 64, 0);
    for (uint64_t& word : mask) {
      for (int i = 0; i < 8; ++i) word |= uint64_t{in.Byte()} << (8 * i);
    }
    const size_t must = in.U16() % vocab;  // The mask allows at least one id (REQUIRES).
    mask[must / 64] |= uint64_t{1} << (must % 64);
  }
  std::vector<int32_t> prompt(in.Byte() % 9);
  for (int32_t& id : prompt) id = static_cast<int32_t>(in.U16() % (vocab + 8));  // Some past it.

  // What a candidate's raw logit may be chosen for, without penalties: the largest candidate
  // (NaN as -infinity) decides whether the choice may be -inf or NaN, or must be +inf.
  float best = -std::numeric_limits<float>::infinity();
  size_t first_inf = vocab;
  for (size_t i = 0; i < vocab; ++i) {
    if (!Allowed(mask, i)) continue;
    if (logits[i] > best) best = logits[i];
    if (logits[i] == std::numeric_limits<float>::infinity() && first_inf == vocab) first_inf = i;
  }

  Sampler sampler(o, prompt);
  Sampler all_allowed(o, prompt);
  const std::vector<uint64_t> all((vocab + 63) / 64, ~uint64_t{0});
  for (int step = 0; step < kSteps; ++step) {
    const SampledToken t = sampler.Sample(logits, mask);
    CAIRN_CHECK(t.id >= 0 && static_cast<size_t>(t.id) < vocab);
    CAIRN_CHECK(Allowed(mask, static_cast<size_t>(t.id)));
    CAIRN_CHECK(std::isfinite(t.logprob) && t.logprob >= cairn::infer::kMinLogprob);
    CAIRN_CHECK(t.top.size() == std::min<size_t>(static_cast<size_t>(o.logprobs), vocab));
    for (const auto& [id, logprob] : t.top) {
      CAIRN_CHECK(id >= 0 && static_cast<size_t>(id) < vocab);
      CAIRN_CHECK(std::isfinite(logprob) && logprob >= cairn::infer::kMinLogprob);
    }
    if (mask.empty()) {
      const SampledToken u = all_allowed.Sample(logits, all);
      CAIRN_CHECK(u.id == t.id);
      CAIRN_CHECK(u.top == t.top);
    }
    if (penalties) continue;
    const float chosen = logits[t.id];
    if (o.temperature == 0.0f && mask.empty()) {
      CAIRN_CHECK(t.id == cairn::infer::GreedyChoice(logits));
    }
    if (first_inf < vocab) {
      CAIRN_CHECK(static_cast<size_t>(t.id) == first_inf);
    } else if (best > -std::numeric_limits<float>::infinity()) {
      CAIRN_CHECK(chosen > -std::numeric_limits<float>::infinity());  // False for NaN too.
    }
  }
  return 0;
}
