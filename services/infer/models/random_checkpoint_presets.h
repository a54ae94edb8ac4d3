#ifndef CAIRN_SERVICES_INFER_MODELS_RANDOM_CHECKPOINT_PRESETS_H_
#define CAIRN_SERVICES_INFER_MODELS_RANDOM_CHECKPOINT_PRESETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/infer/models/random_checkpoint_writer.h"

namespace cairn::infer {

// Named random-checkpoint configurations shared by tests, tools/reference/ and benchmarks:
//   dense          qwen3_5_text, tied embeddings, 8 layers (2 attention), one file
//   dense-wrapped  the same weights as a qwen3_5 wrapper (text_config, model.language_model.*)
//   next           qwen3_next: per-expert MoE, a dense layer (mlp_only_layers), untied,
//                  legacy rope fields, derived layer types, 2 shards with an index
//   moe            qwen3_5_moe_text: fused experts, untied, 3 shards
//   moe-wrapped    the same weights as a qwen3_5_moe wrapper
//   bench-50m      qwen3_5_text of about 50M parameters (benchmarks)
//   demo           qwen3_5_text of about 45M parameters with the Qwen3 vocabulary and end-of-turn
//                  ids and a 64K context: the model tools/serve runs (with WriteDemoTextFiles)
// NotFound for another name.
absl::StatusOr<RandomCheckpointOptions> RandomCheckpointPreset(absl::string_view name);
std::vector<std::string> RandomCheckpointPresetNames();

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_RANDOM_CHECKPOINT_PRESETS_H_
