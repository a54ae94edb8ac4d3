#ifndef CAIRN_SERVICES_INFER_DAEMON_SERVED_MODEL_H_
#define CAIRN_SERVICES_INFER_DAEMON_SERVED_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/infer/kernels/backend_factory.h"
#include "services/infer/kernels/kernel_backend.h"
#include "services/infer/models/model.h"
#include "services/infer/models/model_loader.h"
#include "services/infer/text/chat_template.h"
#include "services/infer/text/json_constraint.h"
#include "services/infer/text/tokenizer.h"

namespace cairn::infer {

struct ServedModelOptions {
  std::string dir;                          // A Hugging Face model folder.
  std::string served_name;                  // Empty: the folder's name.
  std::string backend = "cpu";              // A name of AvailableKernelBackends().
  int threads = 0;                          // Backend threads; 0: one per hardware thread.
  int cpu_spin_us = kServingCpuSpinMicros;  // KernelBackendChoice::cpu_spin_us.
  bool gpu_bf16_inputs = true;              // KernelBackendChoice::gpu_bf16_inputs.
  bool gpu_moe_one_launch = true;           // KernelBackendChoice::gpu_moe_one_launch.
  int64_t context_tokens = 0;               // 0: config.json's max_position_embeddings.
  int64_t max_context_tokens = 32768;       // Cap on the default context (memory per slot).
  // "fast" (GEMMs, chunked delta rule: bit-identical for identical pass boundaries) or
  // "pass-invariant" (bit-identical whatever the pass boundaries; slower prefill).
  std::string numerics = "fast";
  // Take generation_config.json's sampling values as the defaults of requests that ask for
  // them (SamplingParams.model_defaults); false: the APIs' defaults only.
  bool generation_config_defaults = true;
  ModelLoadOptions load;
};

// generation_config.json's sampling values (each absent where the file does not give it), the
// defaults of the knobs a request leaves to the model, as vLLM serves them.
struct SamplingDefaults {
  std::optional<float> temperature;
  std::optional<int> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
};

// The compatibility identity of docs/architecture.md §2, as the cache daemon is told it.
struct CompatibilityIdentity {
  std::string digest;  // Hash over every field below.
  std::string architecture;
  std::string weights_digest;
  std::string tokenizer_digest;
  std::string template_digest;
  std::string layout_digest;
  std::string numerics_class;
  std::string speculative_config;
  std::string config_digest;  // Of config.json's bytes.
};

// Everything the daemon serves for one model folder: the backend, the model, and, when the
// folder has them, the tokenizer and chat template (without them only token-id prompts are
// served). Immutable after Load.
//
// Thread roles: the model and backend belong to the scheduler thread; the tokenizer and the
// template are thread-safe and used by request handlers.
class ServedModel {
 public:
  // Loads `options.dir`. NotFound / InvalidArgument naming the file for a bad folder,
  // InvalidArgument for an unknown backend.
  static absl::StatusOr<std::unique_ptr<ServedModel>> Load(const ServedModelOptions& options);

  Model* model() const { return model_.get(); }
  const std::string& name() const { return name_; }
  const std::string& backend_name() const { return backend_name_; }
  // The memory the backend computes in: slot state is allocated from it.
  DeviceMemory* device_memory() const { return backend_->memory(); }
  // Null when the folder has no tokenizer.json / chat template; `missing_text()` says what
  // is missing.
  const text::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const text::ChatTemplate* chat_template() const { return template_.get(); }
  const std::string& tokenizer_error() const { return tokenizer_error_; }
  // The tokenizer's ids arranged for structured outputs' masks, built once at load; null
  // exactly when tokenizer() is. Thread-safe.
  const text::TokenIndex* token_index() const { return token_index_.get(); }
  const std::string& template_error() const { return template_error_; }
  // Tokens that end generation (config.json / generation_config.json eos_token_id).
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  // generation_config.json's sampling values (none with generation_config_defaults false).
  const SamplingDefaults& sampling_defaults() const { return sampling_defaults_; }
  int64_t context_tokens() const { return context_tokens_; }
  const CompatibilityIdentity& identity() const { return identity_; }
  int full_attention_layers() const { return full_layers_; }
  int linear_attention_layers() const { return linear_layers_; }

 private:
  ServedModel() = default;

  std::unique_ptr<KernelBackend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<text::TokenIndex> token_index_;
  std::unique_ptr<text::ChatTemplate> template_;
  std::string tokenizer_error_;
  std::string template_error_;
  std::string name_;
  std::string backend_name_;
  std::vector<int32_t> eos_ids_;
  SamplingDefaults sampling_defaults_;
  int64_t context_tokens_ = 0;
  CompatibilityIdentity identity_;
  int full_layers_ = 0;
  int linear_layers_ = 0;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_DAEMON_SERVED_MODEL_H_
