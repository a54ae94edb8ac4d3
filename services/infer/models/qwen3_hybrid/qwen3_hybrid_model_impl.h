#ifndef CAIRN_SERVICES_INFER_MODELS_QWEN3_HYBRID_QWEN3_HYBRID_MODEL_IMPL_H_
#define CAIRN_SERVICES_INFER_MODELS_QWEN3_HYBRID_QWEN3_HYBRID_MODEL_IMPL_H_

// The hybrid model's class and weights, shared by its two sources: qwen3_hybrid_model.cc (loading
// the checkpoint, the factory) and qwen3_hybrid_forward.cc (the forward passes). Internal to
// them; callers use qwen3_hybrid_model.h.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "services/infer/kernels/kernel_backend.h"
#include "services/infer/kernels/pinned_host_buffer.h"
#include "services/infer/kernels/scratch_arena.h"
#include "services/infer/models/model.h"
#include "services/infer/models/model_config.h"
#include "services/infer/models/qwen3_hybrid/qwen3_hybrid_model.h"
#include "services/infer/models/qwen3_hybrid/weight_reader.h"

namespace cairn::infer::qwen3_hybrid {

// Epsilon inside the L2 norm of GDN q and k (docs/model.md §3.6.4); fixed by the architecture.
inline constexpr float kL2NormEps = 1e-6f;
// The most logits a pass stages through page-locked memory on a device backend (64 MiB).
inline constexpr int64_t kMaxStagedLogits = int64_t{1} << 24;

// An fp32 parameter vector (norm weights, conv taps, gate constants): read on the host at load
// time, then given to the backend where its memory is, `data` (the host vector itself for a
// host-visible memory, else a device copy, and the host vector is dropped).
struct Params {
  std::vector<float> host;
  const float* data = nullptr;
};

// SwiGLU weights: gate_up [2 * width, D] (gate rows, then up rows), down [D, width].
struct SwiGlu {
  WeightMatrix gate_up;
  WeightMatrix down;
  int64_t width = 0;
};

struct AttentionWeights {
  WeightMatrix q, k, v, o;
  // q, k and v as the parts of one matrix (rows q | k | v) where the backend takes several parts
  // (else num_parts == 0): a row-kernel group's three products in one call, with the bits of
  // three (MatMulRows reduces each output alone).
  WeightMatrix qkv;
  Params q_norm, k_norm;
  int k_component = 0;
  int v_component = 0;
};

// GDN weights with the input projections as one matrix whose rows are
// [q (key_dim) | k (key_dim) | v (value_dim) | z (value_dim) | b (Hv) | a (Hv)], v-heads in
// grouped order; Qwen3-Next's per-group interleaving is undone at load time (into a copy).
struct GdnWeights {
  WeightMatrix in_proj;
  Params conv;       // [conv_dim, Kc]
  Params dt_bias;    // [Hv]
  Params neg_a;      // -exp(A_log), [Hv]
  Params norm;       // [dv]
  WeightMatrix out;  // [D, value_dim]
  int conv_component = 0;
  int recurrent_component = 0;
};

struct MoeWeights {
  WeightMatrix router;  // [E, D]
  // The E routed experts of width moe_intermediate_size (MoeExpertsArgs): gate_up [2 * width, D]
  // (gate rows, then up rows) and down [D, width] of each.
  std::vector<WeightMatrix> gate_up;
  std::vector<WeightMatrix> down;
  SwiGlu shared;
  WeightMatrix shared_gate;  // [1, D]
  // The router's rows, then the shared gate's, as one matrix [E + 1, D] over the same memory
  // (no parts where they cannot be one product): decode's one product for both.
  WeightMatrix router_gate;
};

struct LayerWeights {
  bool full_attention = false;
  bool moe = false;
  Params input_norm, post_norm;
  AttentionWeights attn;
  GdnWeights gdn;
  SwiGlu mlp;
  MoeWeights experts;
};

// The decoder of docs/model.md §3: per layer, a (gated) full-attention or Gated DeltaNet mixer
// and a SwiGLU MLP or sparse MoE block. Plain Qwen3 is the case of every layer full attention,
// no output gate and plain RMSNorm; the config's switches say so (docs/model.md §1.2).
//
// Memory: everything the backend's operations read or write lives in the backend's memory
// (KernelBackend::memory()), and the model never dereferences a pointer into it. For a host
// backend, weight matrices stay in the mapped checkpoint in its type where the backend takes it
// (KernelBackend::AcceptsWeightType), or become packed copies in that type where it asks for row
// tiles (TakesRowTiles; the mapped file is then let go once every matrix is packed), and norms
// and other vectors are fp32 host copies. For a
// device backend every weight is uploaded once at load time, in the type the backend takes
// (else widened to fp32 first), and the mapped checkpoint is let go. Per-pass activations come
// from a ScratchArena over the same memory; token ids go up and logits come down (and, where the
// backend's MoeExperts is the default, the MoE routing lists).
// Thread-compatible (Model).
class Qwen3HybridModel final : public Model {
 public:
  Qwen3HybridModel(HybridConfig config, KernelBackend* backend, Qwen3HybridOptions options)
      : c_(std::move(config)),
        backend_(backend),
        memory_(backend->memory()),
        options_(options),
        logits_host_(memory_),
        scratch_(memory_) {}

  // Reads every tensor of `store` the model uses and builds the state layout.

  // `store` must outlive the model when Load() returns with store_needed().
  absl::Status Load(const TensorStore& store, uint64_t weights_digest);
  // Whether a weight is read in place from the mapped checkpoint.
  bool store_needed() const { return store_needed_; }
  void KeepStore(std::unique_ptr<TensorStore> store) { store_ = std::move(store); }

  const ModelInfo& info() const override { return info_; }
  const StateLayout& state_layout() const override { return layout_; }
  absl::Status Fault() const override { return backend_->Fault(); }
  absl::Status ForwardBatchInto(absl::Span<const SequencePass> batch,
                                std::vector<std::vector<float>>& results) override;
  absl::Status ForwardBatchViews(absl::Span<const SequencePass> batch,
                                 std::vector<absl::Span<const float>>& views) override;

 private:
  absl::Status LoadAttention(WeightReader& r, const std::string& p, AttentionWeights& w);
  absl::Status LoadGdn(WeightReader& r, const std::string& p, GdnWeights& w);
  absl::Status LoadSwiGlu(WeightReader& r, const std::string& p, int64_t width, SwiGlu& w);
  absl::Status LoadMoe(WeightReader& r, const std::string& p, MoeWeights& w);
  // Puts a loaded weight where the backend reads it (see the class comment): nothing to do for
  // host-visible memory, else an upload into a buffer of device_weights_.
  absl::Status Place(WeightMatrix& w);
  absl::Status Place(Params& v);
  absl::Status Place(SwiGlu& w);
  absl::Status PlaceLayer(LayerWeights& lw);
  // `matrices` (placed) as the parts of one matrix, rows in order, where the backend takes
  // their type and they share it, the layout and the columns within WeightMatrix::kMaxParts
  // parts; else an empty matrix (no parts): one product for several.
  WeightMatrix JoinedRows(std::initializer_list<const WeightMatrix*> matrices) const;
  // Frees the host copies the reader made once they are on the device.
  void DropHostCopies();

  // ForwardBatchInto and ForwardBatchViews before a failure's recovery (FailedPass).
  absl::Status RunBatchInto(absl::Span<const SequencePass> batch,
                            std::vector<std::vector<float>>& results);
  absl::Status RunBatchViews(absl::Span<const SequencePass> batch,
                             std::vector<absl::Span<const float>>& views);
  // `failed` (a pass's error), after the backend recovered from it where it can
  // (KernelBackend::Recover); a fault stays for Fault() to report.
  absl::Status FailedPass(absl::Status failed);

  // Ends the scratch arena's pass when it goes out of scope: its device blocks are merged for
  // the next pass however this one ends.
  struct EndPassOnReturn {
    ScratchArena& arena;
    ~EndPassOnReturn() { arena.EndPass(); }
  };
  // One sequence of a group: its index in the batch, its slot and its rows in the group's
  // activations.
  struct Sequence {
    int index = 0;
    SlotState* slot = nullptr;
    int64_t row = 0;
    int64_t tokens = 0;
  };
  // Sequences whose rows run through the row-wise layers together.
  struct Group {
    std::vector<Sequence> seqs;
    int64_t rows = 0;
    bool row_kernel = false;  // MatMulRows (batch invariant) instead of the GEMM.
  };

  absl::Status CheckPass(const SequencePass& pass) const;
  // The lm head over `rows` rows of `normed` into `logits` (device memory, [rows, vocab]) and
  // down into `staged` (host, [rows, vocab]), in parts where Qwen3HybridOptions::logits_parts
  // allows; waits for the download and reports any error of the pass.
  absl::Status LogitsIntoStaging(const Group& g, const float* normed, int64_t rows, float* logits,
                                 float* staged);
  // Checks `batch` (ForwardBatch's errors) and prepares its slots for appending.
  absl::Status PrepareBatch(absl::Span<const SequencePass> batch) const;
  // Whether a pass of `tokens` tokens runs in the batch's shared row-kernel group.
  bool InSharedGroup(int64_t tokens) const {
    return tokens <= options_.row_kernel_max_tokens || options_.pass_invariant;
  }
  // The batch's shared row-kernel group: its passes that are InSharedGroup, in batch order.
  Group SharedGroup(absl::Span<const SequencePass> batch) const;
  // Runs group `g` of `batch` and hands each of its sequences' logits out: into `results`, or,
  // with `views` (device memory and staged logits only: the caller checks), as spans of the
  // page-locked staging.
  absl::Status RunGroup(Group& g, absl::Span<const SequencePass> batch,
                        std::vector<std::vector<float>>& results,
                        std::vector<absl::Span<const float>>* views = nullptr);
  void MatMul(const Group& g, const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
              float* y, int64_t ldy, bool accumulate);
  // The layers' parts: x is the normed input [g.rows, D], h the residual stream they add to
  // (RunSwiGlu writes y, or adds to it when `accumulate`). All pointers are backend memory.
  absl::Status RunAttention(const Group& g, const AttentionWeights& w, const float* x, float* h);
  absl::Status RunGdn(const Group& g, const GdnWeights& w, const float* x, float* h);
  absl::Status RunSwiGlu(const Group& g, const SwiGlu& w, const float* x, int64_t t, float* y,
                         bool accumulate);
  absl::Status RunMoe(const Group& g, const MoeWeights& w, const float* x, float* h);

  const HybridConfig c_;
  KernelBackend* const backend_;
  DeviceMemory* const memory_;  // backend_->memory().
  const Qwen3HybridOptions options_;
  ModelInfo info_;
  StateLayout layout_;
  std::unique_ptr<TensorStore> store_;    // The mapped checkpoint, when weights live in it.
  std::vector<std::vector<char>> owned_;  // Host weights the model copied (rearranged, widened).
  // Weights uploaded to a device memory, and packed copies (row tiles) in host memory.
  std::vector<DeviceBuffer> device_weights_;
  bool store_needed_ = false;
  // Whether Place packed every matrix it was given in host memory into row tiles.
  bool every_matrix_packed_ = true;
  WeightMatrix embed_;    // [vocab, D]
  WeightMatrix lm_head_;  // [vocab, D]; embed_ when tied.
  Params final_norm_;
  Params inv_freq_;  // [rotary_dim / 2]
  std::vector<LayerWeights> layers_;
  // Device memory only: a pass's logits come down here in one copy (at most
  // kMaxStagedLogits floats; larger all-logits passes go straight into their results).
  PinnedHostBuffer logits_host_;
  ScratchArena scratch_;  // Per-pass temporaries; declared last, freed first.
};

}  // namespace cairn::infer::qwen3_hybrid

#endif  // CAIRN_SERVICES_INFER_MODELS_QWEN3_HYBRID_QWEN3_HYBRID_MODEL_IMPL_H_
