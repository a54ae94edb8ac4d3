#ifndef CAIRN_SERVICES_INFER_MODELS_MODEL_H_
#define CAIRN_SERVICES_INFER_MODELS_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/infer/engine/slot_state.h"
#include "services/infer/engine/state_layout.h"

namespace cairn::infer {

// What identifies a loaded model (part of the compatibility identity, design.md §2).
struct ModelInfo {
  std::string architecture;  // config.json model_type, e.g. "qwen3_next".
  int64_t vocab_size = 0;
  int64_t num_parameters = 0;  // Elements of the tensors the model uses.
  uint64_t weights_digest = 0;
};

struct ForwardOptions {
  // Return logits for every token of the pass (else only for the last one).
  bool all_logits = false;
};

// A loaded model: runs forward passes over a slot's state. Architectures live in
// models/<family>/ and are created by LoadModel (model_loader.h).
//
// Thread-compatible: the engine calls Forward from one thread (it drives its KernelBackend).
class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelInfo& info() const = 0;
  // The per-slot state components this model reads and writes; slots passed to Forward must
  // have been created with this layout.
  virtual const StateLayout& state_layout() const = 0;

  // Runs `tokens` (one pass) at the slot's position, appending their rows and advancing its
  // private state, and returns logits [rows, vocab_size] (rows = tokens.size() with
  // all_logits, else 1). The result depends only on the slot's state and the tokens, and is
  // bit-identical for identical inputs. InvalidArgument for an empty pass or a token id
  // outside the vocabulary; ResourceExhausted when the slot is full; FailedPrecondition
  // when the slot is not runnable. On error the slot is unchanged.
  virtual absl::StatusOr<std::vector<float>> Forward(SlotState* slot,
                                                     absl::Span<const int32_t> tokens,
                                                     const ForwardOptions& options) = 0;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_MODEL_H_
