#ifndef CAIRN_SERVICES_INFER_MODELS_MODEL_H_
#define CAIRN_SERVICES_INFER_MODELS_MODEL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/infer/engine/slot_state.h"
#include "services/infer/engine/state_layout.h"

namespace cairn::infer {

// What identifies a loaded model (part of the compatibility identity, docs/architecture.md §2).
struct ModelInfo {
  std::string architecture;  // config.json model_type, e.g. "qwen3_next".
  int64_t vocab_size = 0;
  int64_t num_parameters = 0;  // Elements of the tensors the model uses.
  int64_t weight_bytes = 0;    // Bytes those tensors take as the model holds them.
  uint64_t weights_digest = 0;
};

struct ForwardOptions {
  // Return logits for every token of the pass (else only for the last one).
  bool all_logits = false;
};

// One sequence's part of a batched forward: a pass of `tokens` at `slot`'s position.
struct SequencePass {
  SlotState* slot = nullptr;
  absl::Span<const int32_t> tokens;
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

  // Runs one pass for every sequence of `batch` (each on its own slot) and returns each
  // sequence's logits, in batch order: [rows, vocab_size] with rows = tokens.size() when
  // all_logits, else 1. A pass appends its tokens' rows to the slot and advances its private
  // state.
  //
  // Batch invariance: a sequence's logits and state depend only on its slot's state and its
  // tokens, bit for bit, never on the other sequences of the batch or their number; identical
  // inputs give identical bits. Errors, checked for every sequence before any runs (then no
  // slot changes): InvalidArgument for an empty batch or pass, a token id outside the
  // vocabulary, a slot of another layout or a slot named twice; ResourceExhausted when a slot
  // is full; FailedPrecondition when a slot is not runnable.
  absl::StatusOr<std::vector<std::vector<float>>> ForwardBatch(
      absl::Span<const SequencePass> batch) {
    std::vector<std::vector<float>> results;
    absl::Status s = ForwardBatchInto(batch, results);
    if (!s.ok()) return s;
    return results;
  }

  // ForwardBatch into `results`, reusing the memory of its vectors: on return it holds
  // batch.size() vectors, each sequence's logits (the same bits as ForwardBatch); vectors past
  // the batch are dropped. A caller that keeps `results` between passes (a decode loop) then
  // neither allocates nor touches fresh pages for them, which at a vocabulary of 248K and 16
  // sequences was most of a GPU decode step's host time. On error `results` holds unspecified
  // values.
  virtual absl::Status ForwardBatchInto(absl::Span<const SequencePass> batch,
                                        std::vector<std::vector<float>>& results) = 0;

  // ForwardBatch whose logits are read in place: on return `views` holds batch.size() spans,
  // each sequence's logits (the same bits as ForwardBatch), valid until the model's next
  // forward call of any kind. A model that downloads its logits from a device points the spans
  // into its page-locked staging where one download holds the whole batch (a decode step),
  // saving the copy into result vectors (16 sequences of a 152K vocabulary: 9.7 MB, about
  // 1.6 ms of host time a step on the H200's host); otherwise, and by default, the logits go
  // through ForwardBatchInto into vectors the model keeps. On error `views` holds unspecified
  // values.
  virtual absl::Status ForwardBatchViews(absl::Span<const SequencePass> batch,
                                         std::vector<absl::Span<const float>>& views) {
    absl::Status s = ForwardBatchInto(batch, view_results_);
    if (!s.ok()) return s;
    views.assign(view_results_.begin(), view_results_.end());
    return absl::OkStatus();
  }

  // A fault after which this model can run no pass at all (its backend's device was lost, or a
  // kernel failed on it: KernelBackend::Fault); OK while passes can run. A failed pass alone is
  // not a fault (device memory that ran out, arguments the backend does not take): the model
  // has its backend recover from it, and the next pass may succeed.
  virtual absl::Status Fault() const { return absl::OkStatus(); }

  // Runs one pass of one sequence: ForwardBatch of a single sequence.
  absl::StatusOr<std::vector<float>> Forward(SlotState* slot, absl::Span<const int32_t> tokens,
                                             const ForwardOptions& options) {
    const SequencePass pass{slot, tokens, options.all_logits};
    absl::StatusOr<std::vector<std::vector<float>>> out =
        ForwardBatch(absl::MakeConstSpan(&pass, 1));
    if (!out.ok()) return out.status();
    return std::move(out->front());
  }

 private:
  // The results behind ForwardBatchViews' default.
  std::vector<std::vector<float>> view_results_;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_MODELS_MODEL_H_
