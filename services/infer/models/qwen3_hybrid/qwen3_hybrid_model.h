#ifndef CAIRN_SERVICES_INFER_MODELS_QWEN3_HYBRID_QWEN3_HYBRID_MODEL_H_
#define CAIRN_SERVICES_INFER_MODELS_QWEN3_HYBRID_QWEN3_HYBRID_MODEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "services/infer/kernels/kernel_backend.h"
#include "services/infer/models/load_progress.h"
#include "services/infer/models/model.h"
#include "services/infer/models/model_config.h"
#include "services/infer/models/safetensors.h"

namespace cairn::infer {

struct Qwen3HybridOptions {
  // Tokens per chunk of the chunked gated delta rule in passes of more than one token
  // (docs/model.md §3.6.5); single-token passes use the recurrent rule.
  int gdn_chunk = 64;
  // Passes of at most this many tokens (decode steps) run with the batch-invariant row-wise
  // product (KernelBackend::MatMulRows) and share one group in a batch; longer passes run
  // alone through the GEMM. The choice depends only on a pass's own length.
  int64_t row_kernel_max_tokens = 8;
  // Pass invariance: every product through the row-wise kernel, the delta rule in its
  // recurrent form, attention row by row. A sequence's logits and state then depend only on
  // its tokens, never on how they were split into passes, so a restored continuation equals
  // the cold single-pass run bit for bit, at a cost in prefill speed. A different numerics
  // class (state computed one way is never restored into the other).
  bool pass_invariant = false;
  // Where the model's memory is a device's (not host-visible), the logits of a group of passes
  // on the row-wise product (decode steps, short passes) of at least logits_parts_min_bytes
  // come out in logits_parts parts of the vocabulary: each part's product, then its download
  // queued (DeviceMemory::DownloadRowsQueued) while the next part computes, so that only the
  // last part's download is left after the last product. The same bits (the row-wise product
  // computes a logit whatever other weight rows its call has); 1 computes the whole product,
  // then downloads it.
  int logits_parts = kDefaultLogitsParts;
  int64_t logits_parts_min_bytes = kDefaultLogitsPartsMinBytes;
  // Where the memory can alias the page-locked logits staging (DeviceMemory::HostAlias), the
  // logits of such a group of at most logits_direct_max_bytes are written by the product
  // straight into the staging, in one product: no download after it, and no parts. The same
  // bits (the same product; only its output's address differs).
  int64_t logits_direct_max_bytes = kDefaultLogitsDirectMaxBytes;
  // Progress of the weights' placement (phase "placing the weights", in layers: each layer's
  // matrices read, packed for the CPU backend or uploaded to a device).
  LoadProgressFn progress;

  // Four parts leave a quarter of the download after the last product (16 decoding slots of a
  // 248K vocabulary: about 0.07 ms of 0.3 at 52 GB/s) for three more launches.
  static constexpr int kDefaultLogitsParts = 4;
  // Below this a download takes a few microseconds, about what a launch costs.
  static constexpr int64_t kDefaultLogitsPartsMinBytes = int64_t{2} << 20;
  static constexpr int64_t kDefaultLogitsDirectMaxBytes = 0;
};

// Creates the model of the Qwen3-Next / Qwen3.5 / Qwen3.5-MoE / Qwen3 families (docs/model.md
// §2-§3) from
// `config` and the tensors of `store`. Weight matrices are used in place in the mapped files, in
// their stored type, where `backend` accepts that type (the model then keeps `store`); they
// are widened to fp32 copies otherwise. Both weight prefixes
// (`model.` and `model.language_model.`), tied and untied embeddings and both expert layouts
// (per-expert, fused) are accepted. InvalidArgument naming the tensor when one is missing,
// misshapen or of an unsupported dtype. `weights_digest` goes into info(). `backend` must
// outlive the model.
//
// State layout, per layer in order: a full-attention layer has rows components
// "layers.{i}.k" and "layers.{i}.v" (kv_heads * head_dim floats per row, post-norm and
// post-RoPE keys); a GDN layer has private components "layers.{i}.conv" (the last
// conv_kernel - 1 conv inputs, [conv_kernel - 1, conv_dim]) and "layers.{i}.recurrent"
// ([v_heads, dk, dv] fp32). Plain Qwen3 has only full-attention layers: rows components only,
// no private state.
absl::StatusOr<std::unique_ptr<Model>> CreateQwen3HybridModel(const HybridConfig& config,
                                                              std::unique_ptr<TensorStore> store,
                                                              uint64_t weights_digest,
                                                              KernelBackend* backend,
                                                              const Qwen3HybridOptions& options);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_QWEN3_HYBRID_QWEN3_HYBRID_MODEL_H_
