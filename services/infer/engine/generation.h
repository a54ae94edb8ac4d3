#ifndef CAIRN_SERVICES_INFER_ENGINE_GENERATION_H_
#define CAIRN_SERVICES_INFER_ENGINE_GENERATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/infer/engine/kv_memory.h"
#include "services/infer/engine/slot_state.h"
#include "services/infer/kernels/device_memory.h"
#include "services/infer/models/model.h"

namespace cairn::infer {

// Returns pass sizes cutting `tokens` tokens into passes of at most `max_pass` tokens
// (0: a single pass).
std::vector<int64_t> UniformPasses(int64_t tokens, int64_t max_pass);

// Runs `tokens` through `model` on `slot` as consecutive passes of `pass_sizes` tokens (which
// must sum to tokens.size()) and returns the logits: [tokens, vocab] with `all_logits`, else
// the last position's [vocab]. InvalidArgument if the sizes do not add up; the model's errors
// otherwise (passes before the failing one stay applied).
absl::StatusOr<std::vector<float>> Prefill(Model& model, SlotState* slot,
                                           absl::Span<const int32_t> tokens,
                                           absl::Span<const int64_t> pass_sizes, bool all_logits);

// The longest prefill pass where the daemon is not told one (--max-pass-tokens 0), by where
// the model computes. Other slots' streams wait up to a pass, so passes trade their latency for
// prefill speed: on the CPU a pass of 2048 tokens already runs its products near the
// processor's rate, while a GPU reads every weight once a pass and layer (a MoE model every
// expert's), so its prefill keeps gaining up to passes of several thousand tokens (an 80B-A3B-like
// model's 32K prompt: 0.375 s in passes of 2048 on an H200, 0.280 s in passes of 8192; about
// 70 ms a pass that the other streams wait).
inline constexpr int64_t kHostPassTokens = 2048;
inline constexpr int64_t kDevicePassTokens = 8192;

// `requested` where positive, else the default above for a model computing in `memory`
// (kHostPassTokens where it is host-visible, kDevicePassTokens otherwise).
int64_t PassTokensFor(int64_t requested, const DeviceMemory& memory);

// Runs one pass of `pass_tokens` tokens (at most slot 0's rows) through `model` in slot 0 of
// `slots`, then empties that slot. A model computing in device memory keeps its scratch blocks
// between passes, so from here on it holds the scratch of its longest pass: a device without
// that memory beside the weights and the slots fails here, at start-up, rather than on a
// request. Returns the model's error, naming the pass's size.
absl::Status ReservePassMemory(Model& model, KvMemory& slots, int64_t pass_tokens);

// Returns the index of the largest of `n` logits (the first on ties, like torch.argmax; a NaN
// ranked as -infinity, 0 where all are NaN or -infinity): the server's greedy choice
// (GreedyChoice in sampler.h).
int32_t Argmax(const float* logits, int64_t n);

// Greedy decoding of `count` tokens: the first is the argmax of `last_logits`, and each token
// is fed back as a one-token pass before the next is chosen (the last one is not fed).
absl::StatusOr<std::vector<int32_t>> GreedyDecode(Model& model, SlotState* slot,
                                                  absl::Span<const float> last_logits, int count);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_GENERATION_H_
