#ifndef CAIRN_SERVICES_INFER_MODELS_MODEL_LOADER_H_
#define CAIRN_SERVICES_INFER_MODELS_MODEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/infer/kernels/kernel_backend.h"
#include "services/infer/models/load_progress.h"
#include "services/infer/models/model.h"
#include "services/infer/models/qwen3_hybrid/qwen3_hybrid_model.h"
#include "services/infer/models/weights_digest.h"

namespace cairn::infer {

struct ModelLoadOptions {
  WeightsDigestOptions digest;
  Qwen3HybridOptions qwen3_hybrid;
  // The load's progress, every phase (hashing the weights, placing them); where set, it
  // replaces digest.progress and qwen3_hybrid.progress.
  LoadProgressFn progress;
};

// Loads the Hugging Face checkpoint folder `dir` (config.json plus safetensors, sharded or
// not) with the architecture registered for its model_type, and computes the weights digest.
// NotFound for a missing config.json or an unknown model_type; InvalidArgument (naming the
// file or tensor) for bad config or weights. `backend` must outlive the model.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& dir, KernelBackend* backend,
                                                 const ModelLoadOptions& options);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_MODEL_LOADER_H_
