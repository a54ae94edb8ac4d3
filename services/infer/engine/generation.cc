#include "services/infer/engine/generation.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status/annotate.h"
#include "common/status/status_macros.h"
#include "services/infer/engine/sampler.h"

namespace cairn::infer {

std::vector<int64_t> UniformPasses(int64_t tokens, int64_t max_pass) {
  if (max_pass <= 0 || max_pass >= tokens) return {tokens};
  std::vector<int64_t> passes;
  for (int64_t done = 0; done < tokens; done += max_pass) {
    passes.push_back(std::min(max_pass, tokens - done));
  }
  return passes;
}

absl::StatusOr<std::vector<float>> Prefill(Model& model, SlotState* slot,
                                           absl::Span<const int32_t> tokens,
                                           absl::Span<const int64_t> pass_sizes, bool all_logits) {
  const int64_t total = std::accumulate(pass_sizes.begin(), pass_sizes.end(), int64_t{0});
  if (total != static_cast<int64_t>(tokens.size()) || tokens.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("passes cover ", total, " tokens of ", tokens.size()));
  }
  std::vector<float> logits;
  int64_t done = 0;
  for (int64_t size : pass_sizes) {
    if (size <= 0) return absl::InvalidArgumentError("pass sizes must be positive");
    ASSIGN_OR_RETURN(std::vector<float> pass,
                     model.Forward(slot, tokens.subspan(done, size), {.all_logits = all_logits}));
    if (all_logits) {
      logits.insert(logits.end(), pass.begin(), pass.end());
    } else {
      logits = std::move(pass);
    }
    done += size;
  }
  return logits;
}

int64_t PassTokensFor(int64_t requested, const DeviceMemory& memory) {
  if (requested > 0) return requested;
  return memory.host_visible() ? kHostPassTokens : kDevicePassTokens;
}

absl::Status ReservePassMemory(Model& model, KvMemory& slots, int64_t pass_tokens) {
  if (slots.num_slots() == 0) return absl::InvalidArgumentError("no slot to run a pass in");
  SlotState* slot = slots.slot(0);
  const int64_t tokens = std::min(pass_tokens, slot->max_rows());
  if (tokens <= 0) return absl::OkStatus();
  // Any token ids do: the pass's shapes, not its values, size the scratch.
  const std::vector<int32_t> ids(static_cast<size_t>(tokens), 0);
  const absl::StatusOr<std::vector<float>> pass = model.Forward(slot, ids, {});
  const absl::Status reset = slots.Reset(0);
  if (!pass.ok()) return Annotate(pass.status(), absl::StrCat("a pass of ", tokens, " tokens"));
  return reset;
}

int32_t Argmax(const float* logits, int64_t n) {
  return GreedyChoice(absl::MakeConstSpan(logits, static_cast<size_t>(n)));
}

absl::StatusOr<std::vector<int32_t>> GreedyDecode(Model& model, SlotState* slot,
                                                  absl::Span<const float> last_logits, int count) {
  std::vector<int32_t> out;
  std::vector<float> logits(last_logits.begin(), last_logits.end());
  for (int i = 0; i < count; ++i) {
    const int32_t next = Argmax(logits.data(), static_cast<int64_t>(logits.size()));
    out.push_back(next);
    if (i + 1 == count) break;
    ASSIGN_OR_RETURN(logits, model.Forward(slot, absl::MakeConstSpan(&next, 1), {}));
  }
  return out;
}

}  // namespace cairn::infer
