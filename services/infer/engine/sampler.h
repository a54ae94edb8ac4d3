#ifndef CAIRN_SERVICES_INFER_ENGINE_SAMPLER_H_
#define CAIRN_SERVICES_INFER_ENGINE_SAMPLER_H_

#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace cairn::infer {

// How the next token is chosen from a row of logits. Zero values switch a filter off.
struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy (argmax, the lowest id on ties).
  int top_k = 0;             // Keep the k most likely tokens.
  float top_p = 1.0f;        // Keep the smallest set whose probability reaches p.
  float min_p = 0.0f;        // Keep tokens at least min_p times as likely as the best.
  // Penalties (as vLLM applies them): repetition divides positive logits (multiplies negative
  // ones) of tokens seen in the prompt or the output; presence and frequency subtract from
  // the logits of tokens already generated, once and per occurrence.
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;  // Absent: a random seed.
  int logprobs = 0;              // Alternatives reported per token.
};

// Returns InvalidArgument naming the field for a value outside its range (negative or NaN
// temperature, top_p outside (0, 1], min_p outside [0, 1], repetition_penalty <= 0, penalties
// outside [-2, 2] or NaN, more than `max_logprobs` alternatives).
absl::Status ValidateSamplingOptions(const SamplingOptions& options, int max_logprobs);

// The lowest logprob reported: that of a token whose probability is 0 (a -infinity or NaN
// logit) or too small for a float's logarithm. Reported logprobs are never NaN or infinite.
inline constexpr float kMinLogprob = -9999.0f;

struct SampledToken {
  int32_t id = 0;
  // The log softmax of the raw logits, a NaN logit counting as probability 0 and +infinity
  // ones sharing all of it, floored at kMinLogprob.
  float logprob = 0.0f;
  // The best alternatives with their logprobs (as `logprob`), a NaN logit ranked as -infinity.
  std::vector<std::pair<int32_t, float>> top;
};

// The greedy choice over raw logits: the lowest id of the largest, a NaN ranked as -infinity; 0
// where every logit is NaN or -infinity (or there are none). Sampler's greedy choice where no
// penalty or mask applies.
int32_t GreedyChoice(absl::Span<const float> logits);

// Chooses tokens for one request. A seeded sampler draws the same tokens for the same logits:
// the random stream advances once per sampled token, never depending on anything else.
//
// How a draw walks its candidates (each of the two gives every candidate its probability):
// with top_k, its candidates in descending order of logit, with double-precision weights;
// without top_k, every id's float weight (SamplingWeights; an id a mask refuses weighs 0) in
// id order, or with top_p the nucleus in descending order, with no sort of the whole
// vocabulary (docs/inference-daemon.md, "Sampling").
//
// Thread-compatible.
class Sampler {
 public:
  // `prompt` feeds the repetition penalty.
  Sampler(const SamplingOptions& options, absl::Span<const int32_t> prompt);

  // Chooses the next token from `logits` (vocab values) and records it as generated.
  //
  // `allowed` (empty: every token) is a constraint's mask as TokenConstraint::Allowed fills it
  // (services/infer/engine/token_constraint.h): bit (id % 64) of word id / 64 set for each id
  // that may be chosen, at least (logits.size() + 63) / 64 words; bits at or past logits.size()
  // are ignored. Tokens it leaves out are treated as if their logits were -infinity before the
  // penalties, greedy choice and the top-k / top-p / min-p filters, so that the filters work
  // on the allowed tokens only (as vLLM applies grammar masks before its sampling filters):
  // min_p is relative to the best allowed token, top_p's mass is the allowed tokens'. The
  // reported logprob and top alternatives stay those of the raw distribution (all tokens, no
  // mask, no penalties), so an alternative may be a token the mask refused.
  // REQUIRES: `allowed` is empty or allows at least one id below logits.size().
  SampledToken Sample(absl::Span<const float> logits, absl::Span<const uint64_t> allowed = {});

 private:
  // Orders `ids` by descending values[id] (-0 as +0, no NaN), equal values by ascending id
  // (`ids` ascends on entry): a radix sort.
  void SortDescending(const float* values, std::vector<int32_t>& ids);
  // The draw without top_k over `values` (the logits, or the candidates' values after the
  // penalties; a NaN counts as -infinity): returns the index of the chosen value. Weights by
  // SamplingWeights, the min_p filter in them; without top_p a walk in index order over the
  // block sums, then inside one block; with top_p, DrawNucleus. Where the largest value is not
  // finite (or the temperature so small that its inverse is not), the lowest index of the
  // largest, as greedy. Advances the random stream once.
  int32_t DrawUnranked(absl::Span<const float> values);
  // DrawUnranked's top_p: collects the indices whose weight reaches a threshold (2^-7 of the
  // best's, lowered 2^10 times at a step down to the smallest normal float while the
  // collected weights cannot hold top_p of `total`), sorts each band of weights once by
  // descending value and walks them as Draw does, then draws from the nucleus in that order
  // with `u01`, a uniform draw in [0, 1).
  int32_t DrawNucleus(absl::Span<const float> values, double total, double u01);
  // The choice with penalties or a mask: the logits copied into work_ with the penalties, then
  // the greedy choice, the candidates sorted and drawn from (top_k), or DrawUnranked (no top_k).
  int32_t ChooseAfterPenalties(absl::Span<const float> logits, absl::Span<const uint64_t> allowed);
  // Draws from the first `keep` candidates of order_, values_ holding their values in that
  // (descending) order: min_p, top_p, then one draw from the random stream.
  int32_t Draw(int32_t keep);
  // Values the ids a penalty applies to as ChooseAfterPenalties does (penalised_) and marks
  // them in penalised_mask_, for SelectBest.
  void Penalise(absl::Span<const float> logits);
  // Fills order_ with the `k` best ids of `logits` (a NaN ranked as -infinity; with
  // `penalised`, Penalise's ids at their penalised values) in descending order, equal values by
  // ascending id, and values_ with their values (-0 as +0): what a partial sort of every id
  // gives, in one pass that compares most logits once against the worst id kept so far (a
  // heap of k). With `penalised`, clears penalised_mask_ again.
  // REQUIRES: 0 < k <= logits.size().
  void SelectBest(absl::Span<const float> logits, int32_t k, bool penalised);

  const SamplingOptions options_;
  std::mt19937_64 rng_;
  absl::flat_hash_map<int32_t, int> generated_;  // Token -> times generated.
  absl::flat_hash_map<int32_t, bool> seen_;      // Prompt and generated tokens.
  std::vector<float> work_;
  std::vector<int32_t> order_;            // Candidate ids: all of them, or the allowed ones.
  std::vector<float> values_;             // The candidates' logits after the penalties.
  std::vector<std::pair<float, int32_t>> heap_;  // SelectBest's.
  std::vector<std::pair<float, int32_t>> penalised_;  // Penalise's (value, id).
  std::vector<uint64_t> penalised_mask_;              // Zero between calls.
  std::vector<double> probs_;             // The kept candidates' unnormalised probabilities.
  std::vector<uint64_t> keys_, scratch_;  // SortDescending's.
  std::vector<float> weights_;            // DrawUnranked's, one per value.
  std::vector<double> block_sums_;        // DrawUnranked's, one per kWeightBlock values.
  std::vector<int32_t> nucleus_, band_;   // DrawNucleus's indices.
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_SAMPLER_H_
