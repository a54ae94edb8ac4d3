#include "services/infer/engine/generation.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

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

int32_t Argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
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
