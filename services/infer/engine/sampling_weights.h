#ifndef CAIRN_SERVICES_INFER_ENGINE_SAMPLING_WEIGHTS_H_
#define CAIRN_SERVICES_INFER_ENGINE_SAMPLING_WEIGHTS_H_

#include <cstddef>

#include "absl/types/span.h"

namespace cairn::infer {

// The values a block sum of SamplingWeights covers (the last block may be shorter).
inline constexpr size_t kWeightBlock = 64;

// The unnormalised probabilities a draw from every candidate uses (Sampler without top_k):
// weights[i] = exp((values[i] - best) * inv_temperature) in float, so the best value weighs
// exactly 1. A weight is 0 for a NaN or -infinity value, below exp(-87) (the smallest a float
// holds without going subnormal: such a token is 10^-37 as likely as the best one), or below
// `min_p`. block_sums[b] is the sum of block b's weights in double, in eight lanes (lane
// i % 8) added pairwise; the return value is the block sums added in order.
//
// Vectorised (AVX2 where the CPU has it, chosen once at run time); every instruction set gives
// the same bits (no fused multiply-adds, the same lanes), so a seeded draw does not depend on
// the machine.
//
// REQUIRES: `best` is finite and no value is larger; `inv_temperature` is finite and > 0;
// `weights` has values.size() entries and `block_sums` one per block.
double SamplingWeights(absl::Span<const float> values, float best, float inv_temperature,
                       float min_p, absl::Span<float> weights, absl::Span<double> block_sums);

// Makes SamplingWeights use its portable loops (no AVX2) while `on`, so that a test can compare
// the two. Not for use while another thread samples.
void UsePortableSamplingWeightsForTest(bool on);

// Whether SamplingWeights runs its AVX2 loops on this machine (x86-64 with AVX2), unless a
// test asked for the portable ones.
bool SamplingWeightsHasAvx2();

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_SAMPLING_WEIGHTS_H_
