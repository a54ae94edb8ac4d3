#ifndef CAIRN_SERVICES_INFER_RUN_MODEL_RUNNER_H_
#define CAIRN_SERVICES_INFER_RUN_MODEL_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "services/infer/kernels/backend_factory.h"

namespace cairn::infer {

// What `cairn-run` does for one prompt of token ids.
struct ModelRunOptions {
  std::string model_dir;
  std::vector<int32_t> prompt_ids;
  int greedy = 0;                           // Tokens to generate greedily after the prompt.
  std::vector<int64_t> logits_at;           // Prompt positions whose top logits are reported.
  int top = 5;                              // Logits reported per position.
  int64_t pass_tokens = 0;                  // Prefill pass size; 0: the whole prompt in one pass.
  std::string backend = "cpu";              // Kernel backend (AvailableKernelBackends()).
  int threads = 0;                          // CPU backend threads; 0: one per hardware thread.
  int cpu_spin_us = kServingCpuSpinMicros;  // KernelBackendChoice::cpu_spin_us.
  bool gpu_bf16_inputs = true;              // KernelBackendChoice::gpu_bf16_inputs.
  std::string digest_cache;                 // Weights digest cache file; empty: none.
};

// Loads the model, prefills the prompt in passes of `pass_tokens` (memory grows with the pass
// size times the vocabulary), decodes, and returns one JSON object:
//   {"model", "architecture", "weights_digest", "prompt_tokens", "greedy": [ids],
//    "argmax": [id per prompt position], "top": [{"position", "top": [[id, logit], ...]}],
//    "timings": {"load_ms", "prefill_ms", "decode_ms", "prefill_tokens_per_s",
//                "decode_tokens_per_s"}}
// InvalidArgument for an empty prompt or a position outside it; the loader's and model's
// errors otherwise.
absl::StatusOr<nlohmann::json> RunModelOnce(const ModelRunOptions& options);

// Parses a JSON array of token ids (the --prompt-ids file format). InvalidArgument otherwise.
absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view json_text);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_RUN_MODEL_RUNNER_H_
