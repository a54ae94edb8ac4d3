#include "services/infer/models/model_loader.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status/annotate.h"
#include "common/status/status_macros.h"
#include "services/infer/models/model_config.h"
#include "services/infer/models/safetensors.h"

namespace cairn::infer {

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& dir, KernelBackend* backend,
                                                 const ModelLoadOptions& options) {
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(config_path);
  if (!in) return absl::NotFoundError(absl::StrCat("no config.json in ", dir));
  std::stringstream text;
  text << in.rdbuf();
  // Every architecture we run (the hybrids and plain Qwen3) is parsed by ParseHybridConfig,
  // which rejects unknown model types. Another family registers here with its own parser.
  absl::StatusOr<HybridConfig> config = ParseHybridConfig(text.str());
  if (!config.ok()) return Annotate(config.status(), config_path);
  ASSIGN_OR_RETURN(std::unique_ptr<TensorStore> store, TensorStore::Open(dir));
  WeightsDigestOptions digest_options = options.digest;
  Qwen3HybridOptions model_options = options.qwen3_hybrid;
  if (options.progress != nullptr) {
    digest_options.progress = options.progress;
    model_options.progress = options.progress;
  }
  ASSIGN_OR_RETURN(uint64_t digest, ComputeWeightsDigest(store->files(), digest_options));
  absl::StatusOr<std::unique_ptr<Model>> model =
      CreateQwen3HybridModel(*config, std::move(store), digest, backend, model_options);
  if (!model.ok()) return Annotate(model.status(), absl::StrCat("loading ", dir));
  return model;
}

}  // namespace cairn::infer
