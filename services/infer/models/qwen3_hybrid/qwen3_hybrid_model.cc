#include "services/infer/models/qwen3_hybrid/qwen3_hybrid_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status/status_macros.h"
#include "services/infer/kernels/pinned_host_buffer.h"
#include "services/infer/kernels/row_tiles.h"
#include "services/infer/kernels/scratch_arena.h"
#include "services/infer/models/qwen3_hybrid/weight_reader.h"

namespace cairn::infer {
namespace {

using Shape = std::vector<int64_t>;

// Epsilon inside the L2 norm of GDN q and k (docs/model.md §3.6.4); fixed by the architecture.
constexpr float kL2NormEps = 1e-6f;
// The most logits a pass stages through page-locked memory on a device backend (64 MiB).
constexpr int64_t kMaxStagedLogits = int64_t{1} << 24;

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

absl::Status Qwen3HybridModel::LoadAttention(WeightReader& r, const std::string& p,
                                             AttentionWeights& w) {
  const int64_t d = c_.hidden_size;
  const int64_t hd = c_.head_dim;
  // With the output gate, q_proj's rows are [q_h | gate_h] per head.
  const int64_t q_rows = c_.num_heads * hd * (c_.attention_gate ? 2 : 1);
  ASSIGN_OR_RETURN(w.q, r.Matrix(p + "q_proj.weight", {q_rows, d}));
  ASSIGN_OR_RETURN(w.k, r.Matrix(p + "k_proj.weight", {c_.num_kv_heads * hd, d}));
  ASSIGN_OR_RETURN(w.v, r.Matrix(p + "v_proj.weight", {c_.num_kv_heads * hd, d}));
  ASSIGN_OR_RETURN(w.o, r.Matrix(p + "o_proj.weight", {d, c_.num_heads * hd}));
  ASSIGN_OR_RETURN(w.q_norm.host, r.Read(p + "q_norm.weight", {hd}));
  ASSIGN_OR_RETURN(w.k_norm.host, r.Read(p + "k_norm.weight", {hd}));
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::LoadGdn(WeightReader& r, const std::string& p, GdnWeights& w) {
  const int64_t d = c_.hidden_size;
  const int64_t kd = c_.key_dim();
  const int64_t vd = c_.value_dim();
  const int64_t hv = c_.linear_v_heads;
  const int64_t hk = c_.linear_k_heads;
  const int64_t conv_dim = c_.conv_dim();
  if (c_.family == HybridFamily::kQwen3Next) {
    // in_proj_qkvz: per K-group g, [q_g (dk) | k_g (dk) | v_g (r dv) | z_g (r dv)];
    // in_proj_ba: per K-group g, [b (r) | a (r)] (docs/model.md §3.6.1). Regrouped into a copy.
    const int64_t dk = c_.linear_k_dim;
    const int64_t rdv = vd / hk;
    const int64_t r_heads = hv / hk;
    const int64_t group = 2 * dk + 2 * rdv;
    ASSIGN_OR_RETURN(WeightMatrix qkvz, r.Matrix(p + "in_proj_qkvz.weight", {2 * kd + 2 * vd, d}));
    ASSIGN_OR_RETURN(WeightMatrix ba, r.Matrix(p + "in_proj_ba.weight", {2 * hv, d}));
    if (qkvz.type != ba.type) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, "in_proj_qkvz.weight and in_proj_ba.weight differ in dtype"));
    }
    std::vector<WeightReader::RowRange> ranges;
    for (int64_t g = 0; g < hk; ++g) {
      ranges.push_back({&qkvz, g * group, g * dk, dk});
      ranges.push_back({&qkvz, g * group + dk, kd + g * dk, dk});
      ranges.push_back({&qkvz, g * group + 2 * dk, 2 * kd + g * rdv, rdv});
      ranges.push_back({&qkvz, g * group + 2 * dk + rdv, conv_dim + g * rdv, rdv});
      ranges.push_back({&ba, g * 2 * r_heads, conv_dim + vd + g * r_heads, r_heads});
      ranges.push_back({&ba, g * 2 * r_heads + r_heads, conv_dim + vd + hv + g * r_heads, r_heads});
    }
    w.in_proj = r.Gather(ranges, conv_dim + vd + 2 * hv);
  } else {
    ASSIGN_OR_RETURN(WeightMatrix qkv, r.Matrix(p + "in_proj_qkv.weight", {conv_dim, d}));
    ASSIGN_OR_RETURN(WeightMatrix z, r.Matrix(p + "in_proj_z.weight", {vd, d}));
    ASSIGN_OR_RETURN(WeightMatrix b, r.Matrix(p + "in_proj_b.weight", {hv, d}));
    ASSIGN_OR_RETURN(WeightMatrix a, r.Matrix(p + "in_proj_a.weight", {hv, d}));
    if (qkv.type != z.type || qkv.type != b.type || qkv.type != a.type) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, "in_proj_{qkv,z,b,a}.weight differ in dtype"));
    }
    w.in_proj = r.Concat({qkv, z, b, a});
  }
  ASSIGN_OR_RETURN(w.conv.host, r.Read(p + "conv1d.weight", {conv_dim, 1, c_.conv_kernel}));
  ASSIGN_OR_RETURN(w.dt_bias.host, r.Read(p + "dt_bias", {hv}));
  ASSIGN_OR_RETURN(std::vector<float> a_log, r.Read(p + "A_log", {hv}));
  w.neg_a.host.resize(a_log.size());
  for (size_t i = 0; i < a_log.size(); ++i) w.neg_a.host[i] = -std::exp(a_log[i]);
  ASSIGN_OR_RETURN(w.norm.host, r.Read(p + "norm.weight", {c_.linear_v_dim}));
  ASSIGN_OR_RETURN(w.out, r.Matrix(p + "out_proj.weight", {d, vd}));
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::LoadSwiGlu(WeightReader& r, const std::string& p, int64_t width,
                                          SwiGlu& w) {
  const int64_t d = c_.hidden_size;
  w.width = width;
  ASSIGN_OR_RETURN(WeightMatrix gate, r.Matrix(p + "gate_proj.weight", {width, d}));
  ASSIGN_OR_RETURN(WeightMatrix up, r.Matrix(p + "up_proj.weight", {width, d}));
  ASSIGN_OR_RETURN(w.down, r.Matrix(p + "down_proj.weight", {d, width}));
  if (gate.type != up.type) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, "gate_proj.weight and up_proj.weight differ in dtype"));
  }
  w.gate_up = r.Concat({gate, up});
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::LoadMoe(WeightReader& r, const std::string& p, MoeWeights& w) {
  const int64_t d = c_.hidden_size;
  const int64_t e = c_.num_experts;
  const int64_t inter = c_.moe_intermediate_size;
  ASSIGN_OR_RETURN(w.router, r.Matrix(p + "gate.weight", {e, d}));
  w.gate_up.resize(static_cast<size_t>(e));
  w.down.resize(static_cast<size_t>(e));
  if (r.Has(p + "experts.gate_up_proj")) {
    ASSIGN_OR_RETURN(WeightMatrix gate_up, r.Matrix(p + "experts.gate_up_proj", {e, 2 * inter, d}));
    ASSIGN_OR_RETURN(WeightMatrix down, r.Matrix(p + "experts.down_proj", {e, d, inter}));
    for (int64_t i = 0; i < e; ++i) {
      w.gate_up[static_cast<size_t>(i)] = RowsOf(gate_up, i * 2 * inter, 2 * inter);
      w.down[static_cast<size_t>(i)] = RowsOf(down, i * d, d);
    }
  } else {
    for (int64_t i = 0; i < e; ++i) {
      SwiGlu one;
      RETURN_IF_ERROR(LoadSwiGlu(r, absl::StrCat(p, "experts.", i, "."), inter, one));
      w.gate_up[static_cast<size_t>(i)] = one.gate_up;
      w.down[static_cast<size_t>(i)] = one.down;
    }
  }
  RETURN_IF_ERROR(LoadSwiGlu(r, p + "shared_expert.", c_.shared_intermediate_size, w.shared));
  ASSIGN_OR_RETURN(w.shared_gate, r.Matrix(p + "shared_expert_gate.weight", {1, d}));
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::Place(WeightMatrix& w) {
  if (memory_->host_visible()) {
    if (!backend_->TakesRowTiles(w.type) || w.layout != WeightLayout::kRows) {
      every_matrix_packed_ = false;
      return absl::OkStatus();
    }
    // A packed copy (row_tiles.h) of each part, in memory from the backend's (host) memory:
    // aligned to a cache line, and not cleared first (packing writes every byte).
    for (int i = 0; i < w.num_parts; ++i) {
      const int64_t bytes = RowTileElements(w.parts[i].rows, w.cols) * WeightTypeSize(w.type);
      ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::AllocateUninitialized(memory_, bytes));
      char* aligned = static_cast<char*>(buffer.data());
      device_weights_.push_back(std::move(buffer));
      PackRowTiles(w.type, w.parts[i].data, w.parts[i].rows, w.cols, aligned);
      // A row-major copy the reader made of exactly this part (a regrouped matrix) is no longer
      // needed.
      const size_t part_bytes = static_cast<size_t>(w.parts[i].rows * w.cols) *
                                static_cast<size_t>(WeightTypeSize(w.type));
      for (std::vector<char>& copy : owned_) {
        if (copy.data() == w.parts[i].data && copy.size() == part_bytes) {
          copy = std::vector<char>();
          break;
        }
      }
      w.parts[i].data = aligned;
    }
    w.layout = WeightLayout::kRowTiles;
    return absl::OkStatus();
  }
  for (int i = 0; i < w.num_parts; ++i) {
    const int64_t bytes = w.parts[i].rows * w.cols * WeightTypeSize(w.type);
    ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(memory_, bytes));
    RETURN_IF_ERROR(memory_->Upload(buffer.data(), w.parts[i].data, bytes));
    w.parts[i].data = buffer.data();
    device_weights_.push_back(std::move(buffer));
  }
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::Place(Params& v) {
  if (memory_->host_visible()) {
    v.data = v.host.data();
    return absl::OkStatus();
  }
  const int64_t bytes = static_cast<int64_t>(v.host.size() * sizeof(float));
  ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(memory_, bytes));
  RETURN_IF_ERROR(memory_->Upload(buffer.data(), v.host.data(), bytes));
  v.data = buffer.floats();
  device_weights_.push_back(std::move(buffer));
  v.host = std::vector<float>();
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::Place(SwiGlu& w) {
  RETURN_IF_ERROR(Place(w.gate_up));
  return Place(w.down);
}

WeightMatrix Qwen3HybridModel::JoinedRows(
    std::initializer_list<const WeightMatrix*> matrices) const {
  const WeightMatrix& first = **matrices.begin();
  if (!backend_->AcceptsWeightType(first.type)) return WeightMatrix();
  WeightMatrix joined = first;
  joined.num_parts = 0;
  for (const WeightMatrix* m : matrices) {
    if (m->type != first.type || m->layout != first.layout || m->cols != first.cols ||
        joined.num_parts + m->num_parts > WeightMatrix::kMaxParts) {
      return WeightMatrix();
    }
    for (int i = 0; i < m->num_parts; ++i) joined.parts[joined.num_parts++] = m->parts[i];
  }
  return joined;
}

absl::Status Qwen3HybridModel::PlaceLayer(LayerWeights& lw) {
  RETURN_IF_ERROR(Place(lw.input_norm));
  RETURN_IF_ERROR(Place(lw.post_norm));
  if (lw.full_attention) {
    AttentionWeights& a = lw.attn;
    for (WeightMatrix* m : {&a.q, &a.k, &a.v, &a.o}) RETURN_IF_ERROR(Place(*m));
    a.qkv = JoinedRows({&a.q, &a.k, &a.v});
    RETURN_IF_ERROR(Place(a.q_norm));
    RETURN_IF_ERROR(Place(a.k_norm));
  } else {
    GdnWeights& g = lw.gdn;
    RETURN_IF_ERROR(Place(g.in_proj));
    RETURN_IF_ERROR(Place(g.out));
    for (Params* v : {&g.conv, &g.dt_bias, &g.neg_a, &g.norm}) RETURN_IF_ERROR(Place(*v));
  }
  if (lw.moe) {
    MoeWeights& m = lw.experts;
    RETURN_IF_ERROR(Place(m.router));
    RETURN_IF_ERROR(Place(m.shared_gate));
    m.router_gate = JoinedRows({&m.router, &m.shared_gate});
    RETURN_IF_ERROR(Place(m.shared));
    for (WeightMatrix& e : m.gate_up) RETURN_IF_ERROR(Place(e));
    for (WeightMatrix& e : m.down) RETURN_IF_ERROR(Place(e));
  } else {
    RETURN_IF_ERROR(Place(lw.mlp));
  }
  return absl::OkStatus();
}

void Qwen3HybridModel::DropHostCopies() {
  if (!memory_->host_visible()) owned_.clear();
}

absl::Status Qwen3HybridModel::Load(const TensorStore& store, uint64_t weights_digest) {
  std::string prefix;
  if (store.Find("model.language_model.embed_tokens.weight") != nullptr) {
    prefix = "model.language_model.";
  } else if (store.Find("model.embed_tokens.weight") != nullptr) {
    prefix = "model.";
  } else {
    return absl::InvalidArgumentError(
        "missing tensor model.embed_tokens.weight (or model.language_model.embed_tokens.weight)");
  }
  WeightReader r(store, prefix, *backend_, owned_);
  const int64_t d = c_.hidden_size;
  ASSIGN_OR_RETURN(embed_, r.Matrix("embed_tokens.weight", {c_.vocab_size, d}));
  RETURN_IF_ERROR(Place(embed_));
  lm_head_ = embed_;
  ASSIGN_OR_RETURN(final_norm_.host, r.Read("norm.weight", {d}));
  RETURN_IF_ERROR(Place(final_norm_));
  if (!c_.tie_word_embeddings) {
    ASSIGN_OR_RETURN(lm_head_, r.Matrix("lm_head.weight", {c_.vocab_size, d}, /*prefixed=*/false));
    RETURN_IF_ERROR(Place(lm_head_));
  }
  DropHostCopies();
  for (int i = 0; i < c_.num_layers; ++i) {
    LayerWeights lw;
    const std::string p = absl::StrCat("layers.", i, ".");
    lw.full_attention = c_.full_attention[i];
    lw.moe = c_.IsMoeLayer(i);
    ASSIGN_OR_RETURN(lw.input_norm.host, r.Read(p + "input_layernorm.weight", {d}));
    ASSIGN_OR_RETURN(lw.post_norm.host, r.Read(p + "post_attention_layernorm.weight", {d}));
    const int64_t kv_floats = static_cast<int64_t>(c_.num_kv_heads) * c_.head_dim;
    if (lw.full_attention) {
      RETURN_IF_ERROR(LoadAttention(r, p + "self_attn.", lw.attn));
      lw.attn.k_component = static_cast<int>(layout_.components.size());
      layout_.components.push_back(
          {absl::StrCat("layers.", i, ".k"), ComponentKind::kRows, i, kv_floats});
      lw.attn.v_component = static_cast<int>(layout_.components.size());
      layout_.components.push_back(
          {absl::StrCat("layers.", i, ".v"), ComponentKind::kRows, i, kv_floats});
    } else {
      RETURN_IF_ERROR(LoadGdn(r, p + "linear_attn.", lw.gdn));
      lw.gdn.conv_component = static_cast<int>(layout_.components.size());
      layout_.components.push_back({absl::StrCat("layers.", i, ".conv"), ComponentKind::kPrivate, i,
                                    (c_.conv_kernel - 1) * c_.conv_dim()});
      lw.gdn.recurrent_component = static_cast<int>(layout_.components.size());
      layout_.components.push_back(
          {absl::StrCat("layers.", i, ".recurrent"), ComponentKind::kPrivate, i,
           static_cast<int64_t>(c_.linear_v_heads) * c_.linear_k_dim * c_.linear_v_dim});
    }
    if (lw.moe) {
      RETURN_IF_ERROR(LoadMoe(r, p + "mlp.", lw.experts));
    } else {
      RETURN_IF_ERROR(LoadSwiGlu(r, p + "mlp.", c_.intermediate_size, lw.mlp));
    }
    RETURN_IF_ERROR(PlaceLayer(lw));
    DropHostCopies();
    layers_.push_back(std::move(lw));
  }
  for (int i = 0; i < c_.rotary_dim / 2; ++i) {
    // As transformers computes it: fp32 base ** (2i / rotary_dim), inverted in fp32.
    inv_freq_.host.push_back(
        1.0f / std::pow(static_cast<float>(c_.rope_theta),
                        static_cast<float>(2 * i) / static_cast<float>(c_.rotary_dim)));
  }
  RETURN_IF_ERROR(Place(inv_freq_));
  info_.architecture = c_.model_type;
  info_.vocab_size = c_.vocab_size;
  info_.num_parameters = r.parameters();
  info_.weight_bytes = r.bytes();
  // A device copy of a weight does not need the mapped file.
  // Nor does a packed copy (Place).
  store_needed_ = r.in_place() && memory_->host_visible() && !every_matrix_packed_;
  info_.weights_digest = weights_digest;
  return absl::OkStatus();
}

void Qwen3HybridModel::MatMul(const Group& g, const float* x, int64_t m, int64_t ldx,
                              const WeightMatrix& w, float* y, int64_t ldy, bool accumulate) {
  if (g.row_kernel) {
    backend_->MatMulRowsTyped(x, m, ldx, w, y, ldy, accumulate);
  } else {
    backend_->MatMulTransposedTyped(x, m, ldx, w, y, ldy, accumulate);
  }
}

absl::Status Qwen3HybridModel::RunSwiGlu(const Group& g, const SwiGlu& w, const float* x, int64_t t,
                                         float* y, bool accumulate) {
  const int64_t d = c_.hidden_size;
  ScratchArena::Frame frame(scratch_);
  ASSIGN_OR_RETURN(float* gu, scratch_.Take<float>(t * 2 * w.width));
  ASSIGN_OR_RETURN(float* act, scratch_.Take<float>(t * w.width));
  if (g.row_kernel) {
    backend_->MatMulRowsSiluMul(x, t, d, w.gate_up, gu, act);
  } else {
    MatMul(g, x, t, d, w.gate_up, gu, 2 * w.width, false);
    backend_->SiluMul(gu, 2 * w.width, gu + w.width, 2 * w.width, t, w.width, act);
  }
  MatMul(g, act, t, w.width, w.down, y, d, accumulate);
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::RunAttention(const Group& g, const AttentionWeights& w,
                                            const float* x, float* h) {
  const int64_t d = c_.hidden_size;
  const int hq = c_.num_heads;
  const int hd = c_.head_dim;
  const int64_t t = g.rows;
  const int64_t q_width = static_cast<int64_t>(hq) * hd;
  const int64_t kv_width = static_cast<int64_t>(c_.num_kv_heads) * hd;
  ScratchArena::Frame frame(scratch_);
  // q_proj's output: [q_h | gate_h] per head with the output gate, else q.
  const int64_t q_out = c_.attention_gate ? 2 * q_width : q_width;
  ASSIGN_OR_RETURN(float* q, scratch_.Take<float>(t * q_width));
  float* k = nullptr;
  float* v = nullptr;
  float* qg = q;
  // Between consecutive tokens' rows of qg, q (as the norm, RoPE and attention read it) and k
  // and v.
  int64_t qg_ld = q_out;
  int64_t q_ld = q_width;
  int64_t kv_ld = kv_width;
  if (g.row_kernel && w.qkv.num_parts > 0) {
    // One product for the three (a decode step's few rows: one pass over the weights instead of
    // three), each block used where the product put it, token rows `width` apart: k normalised
    // in place there and appended from there with v, the output gate's pairs split from there.
    // Queries without the gate stay there too where every sequence has one token (attention
    // reads a sequence's query rows q_width apart), else they are copied into rows of their own.
    const int64_t width = q_out + 2 * kv_width;
    ASSIGN_OR_RETURN(float* qkv, scratch_.Take<float>(t * width));
    MatMul(g, x, t, d, w.qkv, qkv, width, false);
    bool one_token_each = true;
    for (const Sequence& s : g.seqs) one_token_each = one_token_each && s.tokens == 1;
    k = qkv + q_out;
    v = qkv + q_out + kv_width;
    kv_ld = width;
    if (c_.attention_gate) {
      qg = qkv;
      qg_ld = width;
    } else if (one_token_each) {
      q = qg = qkv;
      q_ld = width;
    } else {
      backend_->CopyRows(qkv, width, t, q_width, q, q_width);
    }
  } else {
    if (c_.attention_gate) {
      ASSIGN_OR_RETURN(qg, scratch_.Take<float>(t * q_out));
    }
    ASSIGN_OR_RETURN(k, scratch_.Take<float>(t * kv_width));
    ASSIGN_OR_RETURN(v, scratch_.Take<float>(t * kv_width));
    MatMul(g, x, t, d, w.q, qg, q_out, false);
    MatMul(g, x, t, d, w.k, k, kv_width, false);
    MatMul(g, x, t, d, w.v, v, kv_width, false);
  }
  float* gate = nullptr;
  if (c_.attention_gate) {
    ASSIGN_OR_RETURN(gate, scratch_.Take<float>(t * q_width));
    backend_->SplitHeadPairsStrided(qg, qg_ld, t, hq, hd, q, gate);
  }
  backend_->RmsNormHeads(q, t, hq, hd, q_ld, w.q_norm.data, c_.rms_norm_eps, c_.zero_centred_norm);
  backend_->RmsNormHeads(k, t, c_.num_kv_heads, hd, kv_ld, w.k_norm.data, c_.rms_norm_eps,
                         c_.zero_centred_norm);
  ASSIGN_OR_RETURN(float* o, scratch_.Take<float>(t * q_width));
  // RoPE of the queries and the new key rows, appended to each slot: one call for the group's
  // sequences (a device backend runs them together).
  std::vector<RopeAppendArgs> appends;
  appends.reserve(g.seqs.size());
  for (const Sequence& s : g.seqs) {
    const int64_t pos = s.slot->position();
    RopeAppendArgs& a = appends.emplace_back();
    a.q = q + s.row * q_ld;
    a.k = k + s.row * kv_ld;
    a.v = v + s.row * kv_ld;
    a.k_dst = s.slot->data(w.k_component) + pos * kv_width;
    a.v_dst = s.slot->data(w.v_component) + pos * kv_width;
    a.tokens = s.tokens;
    a.position = pos;
    a.q_ld = q_ld;
    a.kv_ld = kv_ld;
    a.q_heads = hq;
    a.kv_heads = c_.num_kv_heads;
    a.head_dim = hd;
    a.rotary_dim = c_.rotary_dim;
    a.inv_freq = inv_freq_.data;
  }
  backend_->RopeAppendBatch(appends);
  std::vector<AttentionArgs> batch;
  batch.reserve(g.seqs.size());
  for (const Sequence& s : g.seqs) {
    const int64_t pos = s.slot->position();
    AttentionArgs args;
    args.q = q + s.row * q_ld;
    args.k = s.slot->data(w.k_component);
    args.v = s.slot->data(w.v_component);
    args.out = o + s.row * q_width;
    args.tokens = s.tokens;
    args.past = pos;
    args.q_heads = hq;
    args.kv_heads = c_.num_kv_heads;
    args.head_dim = hd;
    args.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    args.row_invariant = options_.pass_invariant;
    batch.push_back(args);
  }
  backend_->AttentionBatch(batch);
  if (gate != nullptr) backend_->SigmoidMul(o, gate, t * q_width);
  MatMul(g, o, t, q_width, w.o, h, d, true);
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::RunGdn(const Group& g, const GdnWeights& w, const float* x,
                                      float* h) {
  const int64_t d = c_.hidden_size;
  const int64_t kd = c_.key_dim();
  const int64_t vd = c_.value_dim();
  const int hv = c_.linear_v_heads;
  const int64_t conv_dim = c_.conv_dim();
  const int64_t width = conv_dim + vd + 2 * hv;
  const int64_t t = g.rows;
  ScratchArena::Frame frame(scratch_);
  ASSIGN_OR_RETURN(float* proj, scratch_.Take<float>(t * width));
  MatMul(g, x, t, d, w.in_proj, proj, width, false);
  ASSIGN_OR_RETURN(float* conv, scratch_.Take<float>(t * conv_dim));
  // One call for the group's sequences: a device backend runs them together.
  std::vector<CausalConvArgs> convs;
  convs.reserve(g.seqs.size());
  for (const Sequence& s : g.seqs) {
    convs.push_back({proj + s.row * width, width, s.tokens, conv_dim, w.conv.data, c_.conv_kernel,
                     s.slot->data(w.conv_component), conv + s.row * conv_dim});
  }
  backend_->CausalConvSiluBatch(convs);
  // q, k and v are the conv output's column blocks, read in place (token rows conv_dim apart):
  // q and k are normalised there (`conv` is used by nothing else) and the rule takes the row
  // strides. z, a block of the projection, is read there too by the gated norm.
  float* q = conv;
  float* k = conv + kd;
  float* v = conv + 2 * kd;
  const int64_t qk_ld = conv_dim;    // Between tokens' rows of q and of k.
  const int64_t v_ld = conv_dim;     // Between tokens' rows of v.
  const float* z = proj + conv_dim;  // Token rows `width` apart.
  ASSIGN_OR_RETURN(float* gates, scratch_.Take<float>(t * hv));
  ASSIGN_OR_RETURN(float* beta, scratch_.Take<float>(t * hv));
  const int dk = c_.linear_k_dim;
  // The gates and q / k's normalisation, then the rule: one call (a device backend may do them
  // inside the rule's decode steps).
  GatedDeltaInputs inputs;
  inputs.proj = proj;
  inputs.proj_ld = width;
  inputs.tokens = t;
  inputs.v_heads = hv;
  inputs.b_offset = conv_dim + vd;
  inputs.a_offset = conv_dim + vd + hv;
  inputs.dt_bias = w.dt_bias.data;
  inputs.neg_a = w.neg_a.data;
  inputs.g = gates;
  inputs.beta = beta;
  inputs.q = q;
  inputs.k = k;
  inputs.q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  inputs.k_heads = c_.linear_k_heads;
  inputs.dk = dk;
  inputs.qk_ld = qk_ld;
  inputs.eps = kL2NormEps;
  ASSIGN_OR_RETURN(float* o, scratch_.Take<float>(t * vd));
  // One call for the group's sequences: a device backend runs their decode steps together.
  std::vector<GatedDeltaArgs> batch;
  batch.reserve(g.seqs.size());
  for (const Sequence& s : g.seqs) {
    GatedDeltaArgs& args = batch.emplace_back();
    args.q = q + s.row * qk_ld;
    args.k = k + s.row * qk_ld;
    args.v = v + s.row * v_ld;
    args.g = gates + s.row * hv;
    args.beta = beta + s.row * hv;
    args.state = s.slot->data(w.recurrent_component);
    args.out = o + s.row * vd;
    args.tokens = s.tokens;
    args.k_heads = c_.linear_k_heads;
    args.v_heads = hv;
    args.dk = dk;
    args.dv = c_.linear_v_dim;
    args.chunk = s.tokens == 1 || options_.pass_invariant ? 0 : options_.gdn_chunk;
    args.qk_ld = qk_ld;
    args.v_ld = v_ld;
  }
  backend_->GatedDeltaStepBatch(inputs, batch);
  backend_->GatedRmsNormHeads(o, z, t, hv, c_.linear_v_dim, width, w.norm.data, c_.rms_norm_eps, o);
  MatMul(g, o, t, vd, w.out, h, d, true);
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::RunMoe(const Group& g, const MoeWeights& w, const float* x,
                                      float* h) {
  const int64_t d = c_.hidden_size;
  const int e = c_.num_experts;
  const int64_t t = g.rows;
  ScratchArena::Frame frame(scratch_);
  // Decode's router logits and shared gate from one product (token rows e + 1 apart, the gate
  // last), else two.
  const bool one_product = g.row_kernel && w.router_gate.num_parts > 0;
  const int64_t logits_ld = one_product ? e + 1 : e;
  ASSIGN_OR_RETURN(float* logits, scratch_.Take<float>(t * logits_ld));
  float* sg = logits + e;
  if (one_product) {
    MatMul(g, x, t, d, w.router_gate, logits, logits_ld, false);
  } else {
    MatMul(g, x, t, d, w.router, logits, e, false);
  }
  // The shared expert first, then the routed experts in ascending id (MoeExperts, which runs
  // the shared expert too, as RunSwiGlu would); every token's sum has a fixed order.
  ASSIGN_OR_RETURN(float* out, scratch_.Take<float>(t * d));
  if (!one_product) {
    ASSIGN_OR_RETURN(sg, scratch_.Take<float>(t));
    MatMul(g, x, t, d, w.shared_gate, sg, 1, false);
  }
  // The shared expert's gate, the routed experts, then the layer's output into the residual
  // stream: one call (a device backend may do the three in one launch).
  MoeExpertsArgs args;
  args.x = x;
  args.logits = logits;
  args.out = out;
  args.tokens = t;
  args.hidden = d;
  args.width = c_.moe_intermediate_size;
  args.experts = e;
  args.top_k = c_.top_k;
  args.renormalise = c_.norm_topk_prob;
  args.gate_up = w.gate_up.data();
  args.down = w.down.data();
  args.row_invariant = g.row_kernel;
  args.out_gate = sg;
  args.logits_ld = logits_ld;
  args.out_gate_ld = one_product ? logits_ld : 1;
  args.shared_gate_up = &w.shared.gate_up;
  args.shared_down = &w.shared.down;
  args.shared_width = w.shared.width;
  args.residual = h;
  return backend_->MoeExperts(args, scratch_);
}

absl::Status Qwen3HybridModel::CheckPass(const SequencePass& pass) const {
  if (pass.slot == nullptr) return absl::InvalidArgumentError("forward pass without a slot");
  if (pass.tokens.empty()) return absl::InvalidArgumentError("empty forward pass");
  for (int32_t id : pass.tokens) {
    if (id < 0 || id >= c_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " outside vocabulary of ", c_.vocab_size));
    }
  }
  if (!(pass.slot->layout() == layout_)) {
    return absl::InvalidArgumentError("slot was not created with this model's state layout");
  }
  if (!pass.slot->runnable()) {
    return absl::FailedPreconditionError("slot is being restored and cannot run");
  }
  const int64_t t = static_cast<int64_t>(pass.tokens.size());
  if (pass.slot->memory() != memory_) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot state is in ", pass.slot->memory()->name(), " memory but the ",
                     backend_->name(), " backend computes in ", memory_->name(), " memory"));
  }
  if (pass.slot->position() + t > pass.slot->max_rows()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("pass of ", t, " tokens at position ", pass.slot->position(),
                     " does not fit the slot's ", pass.slot->max_rows(), " rows"));
  }
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::RunGroup(Group& g, absl::Span<const SequencePass> batch,
                                        std::vector<std::vector<float>>& results,
                                        std::vector<absl::Span<const float>>* views) {
  const int64_t d = c_.hidden_size;
  const int64_t t = g.rows;
  ScratchArena::Frame frame(scratch_);
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(t));
  for (const Sequence& s : g.seqs) {
    const SequencePass& pass = batch[s.index];
    ids.insert(ids.end(), pass.tokens.begin(), pass.tokens.end());
  }
  ASSIGN_OR_RETURN(int32_t * ids_dev, scratch_.Take<int32_t>(t));
  // Queued: the host goes on launching the pass while the ids go up (a decode step waits for
  // the device once, at its logits' download).
  RETURN_IF_ERROR(memory_->UploadQueued(ids_dev, ids.data(), t * 4));
  ASSIGN_OR_RETURN(float* h, scratch_.Take<float>(t * d));
  ASSIGN_OR_RETURN(float* xn, scratch_.Take<float>(t * d));
  backend_->EmbeddingGatherTyped(embed_, ids_dev, t, h);
  for (const LayerWeights& lw : layers_) {
    backend_->RmsNorm(h, t, d, lw.input_norm.data, c_.rms_norm_eps, c_.zero_centred_norm, xn);
    if (lw.full_attention) {
      RETURN_IF_ERROR(RunAttention(g, lw.attn, xn, h));
    } else {
      RETURN_IF_ERROR(RunGdn(g, lw.gdn, xn, h));
    }
    backend_->RmsNorm(h, t, d, lw.post_norm.data, c_.rms_norm_eps, c_.zero_centred_norm, xn);
    if (lw.moe) {
      RETURN_IF_ERROR(RunMoe(g, lw.experts, xn, h));
    } else {
      RETURN_IF_ERROR(RunSwiGlu(g, lw.mlp, xn, t, h, true));
    }
  }
  // The rows whose logits are returned: every row of an all_logits pass, else its last.
  // Where those are every row of the group in order (a decode step: one token a sequence), they
  // are `h` itself and need no gathering.
  int64_t rows = 0;
  bool every_row = true;
  for (const Sequence& s : g.seqs) {
    const int64_t n = batch[s.index].all_logits ? s.tokens : 1;
    every_row = every_row && s.row == rows && n == s.tokens;
    rows += n;
  }
  const float* last = h;
  if (!every_row) {
    ASSIGN_OR_RETURN(float* gathered, scratch_.Take<float>(rows * d));
    int64_t row = 0;
    for (const Sequence& s : g.seqs) {
      const int64_t n = batch[s.index].all_logits ? s.tokens : 1;
      backend_->CopyRows(h + (s.row + s.tokens - n) * d, d, n, d, gathered + row * d, d);
      row += n;
    }
    last = gathered;
  }
  ASSIGN_OR_RETURN(float* normed, scratch_.Take<float>(rows * d));
  backend_->RmsNorm(last, rows, d, final_norm_.data, c_.rms_norm_eps, c_.zero_centred_norm, normed);
  ASSIGN_OR_RETURN(float* logits, scratch_.Take<float>(rows * c_.vocab_size));
  const int64_t floats = rows * c_.vocab_size;
  if (views != nullptr || (!memory_->host_visible() && floats <= kMaxStagedLogits)) {
    // Device memory: every row in one copy into page-locked staging (not one pageable copy a
    // sequence), then each sequence's rows into its result. The download waits for the device
    // and reports any error of the pass.
    float* staged = logits_host_.Get(floats);
    RETURN_IF_ERROR(LogitsIntoStaging(g, normed, rows, logits, staged));
    int64_t row = 0;
    for (const Sequence& s : g.seqs) {
      const int64_t n = batch[s.index].all_logits ? s.tokens : 1;
      const float* from = staged + row * c_.vocab_size;
      if (views != nullptr) {
        (*views)[s.index] = absl::MakeConstSpan(from, static_cast<size_t>(n * c_.vocab_size));
      } else {
        results[s.index].assign(from, from + n * c_.vocab_size);
      }
      row += n;
    }
  } else {
    MatMul(g, normed, rows, d, lm_head_, logits, c_.vocab_size, false);
    int64_t row = 0;
    for (const Sequence& s : g.seqs) {
      const int64_t n = batch[s.index].all_logits ? s.tokens : 1;
      std::vector<float>& out = results[s.index];
      out.resize(static_cast<size_t>(n * c_.vocab_size));
      // The first download waits for the device and reports any error of the pass.
      RETURN_IF_ERROR(memory_->Download(out.data(), logits + row * c_.vocab_size,
                                        n * c_.vocab_size * static_cast<int64_t>(sizeof(float))));
      row += n;
    }
  }
  for (const Sequence& s : g.seqs) s.slot->CommitAppend(s.tokens);
  return absl::OkStatus();
}

absl::Status Qwen3HybridModel::LogitsIntoStaging(const Group& g, const float* normed, int64_t rows,
                                                 float* logits, float* staged) {
  const int64_t vocab = c_.vocab_size;
  const int64_t bytes = rows * vocab * static_cast<int64_t>(sizeof(float));
  // Parts of whole groups of kLogitsPartRows rows, so that each part's rows keep the
  // alignment of the whole matrix's.
  constexpr int64_t kLogitsPartRows = 128;
  const int parts = static_cast<int>(
      std::min<int64_t>(options_.logits_parts, std::max<int64_t>(1, vocab / kLogitsPartRows)));
  // Only the row kernels promise that a logit does not depend on the other weight rows of its
  // call (the GEMMs may pick their blocking by the call's shape; the row kernels decide theirs
  // by the whole matrix, WeightMatrix::whole_rows). A download into pageable memory would wait
  // for its part's product, so parts would only add launches.
  if (parts <= 1 || !g.row_kernel || memory_->host_visible() || !logits_host_.pinned() ||
      lm_head_.layout != WeightLayout::kRows || bytes < options_.logits_parts_min_bytes) {
    MatMul(g, normed, rows, c_.hidden_size, lm_head_, logits, vocab, false);
    return memory_->Download(staged, logits, bytes);
  }
  const int64_t pitch = vocab * static_cast<int64_t>(sizeof(float));
  absl::Status queued;
  for (int p = 0; p < parts && queued.ok(); ++p) {
    const int64_t begin = vocab * p / parts / kLogitsPartRows * kLogitsPartRows;
    const int64_t end =
        p + 1 == parts ? vocab : vocab * (p + 1) / parts / kLogitsPartRows * kLogitsPartRows;
    MatMul(g, normed, rows, c_.hidden_size, lm_head_.RowRange(begin, end), logits + begin, vocab,
           false);
    queued = memory_->DownloadRowsQueued(staged + begin, pitch, logits + begin, pitch,
                                         (end - begin) * static_cast<int64_t>(sizeof(float)), rows);
  }
  // Waited for even after an error: no queued copy may still write the staging afterwards.
  const absl::Status waited = memory_->WaitQueuedDownloads();
  RETURN_IF_ERROR(queued);
  return waited;
}

absl::Status Qwen3HybridModel::PrepareBatch(absl::Span<const SequencePass> batch) const {
  if (batch.empty()) return absl::InvalidArgumentError("empty forward batch");
  for (size_t i = 0; i < batch.size(); ++i) {
    RETURN_IF_ERROR(CheckPass(batch[i]));
    for (size_t j = 0; j < i; ++j) {
      if (batch[j].slot == batch[i].slot) {
        return absl::InvalidArgumentError(
            absl::StrCat("forward batch names one slot twice (sequences ", j, " and ", i, ")"));
      }
    }
  }
  for (const SequencePass& pass : batch) {
    RETURN_IF_ERROR(pass.slot->PrepareAppend(static_cast<int64_t>(pass.tokens.size())));
  }
  return absl::OkStatus();
}

Qwen3HybridModel::Group Qwen3HybridModel::SharedGroup(absl::Span<const SequencePass> batch) const {
  Group small;
  small.row_kernel = true;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t t = static_cast<int64_t>(batch[i].tokens.size());
    if (InSharedGroup(t)) {
      small.seqs.push_back({static_cast<int>(i), batch[i].slot, small.rows, t});
      small.rows += t;
    }
  }
  return small;
}

absl::Status Qwen3HybridModel::ForwardBatchViews(absl::Span<const SequencePass> batch,
                                                 std::vector<absl::Span<const float>>& views) {
  // In place only where one staged download holds every sequence's logits: device memory, one
  // shared group (every pass short), at most kMaxStagedLogits floats.
  Group all = SharedGroup(batch);
  int64_t floats = 0;
  for (const SequencePass& pass : batch) {
    floats += (pass.all_logits ? static_cast<int64_t>(pass.tokens.size()) : 1) * c_.vocab_size;
  }
  if (memory_->host_visible() || batch.empty() || all.seqs.size() != batch.size() ||
      floats > kMaxStagedLogits) {
    return Model::ForwardBatchViews(batch, views);
  }
  RETURN_IF_ERROR(PrepareBatch(batch));
  views.assign(batch.size(), {});
  const EndPassOnReturn end_pass{scratch_};
  std::vector<std::vector<float>> unused;
  return RunGroup(all, batch, unused, &views);
}

absl::Status Qwen3HybridModel::ForwardBatchInto(absl::Span<const SequencePass> batch,
                                                std::vector<std::vector<float>>& results) {
  RETURN_IF_ERROR(PrepareBatch(batch));
  // Short passes (decode steps) share one group computed with the row-invariant product;
  // each longer pass runs alone through the GEMM. Which path a sequence takes depends only
  // on its own length, so its bits never depend on the rest of the batch.
  // Every result is assigned or resized in RunGroup, keeping the vectors' memory.
  results.resize(batch.size());
  Group small = SharedGroup(batch);
  const EndPassOnReturn end_pass{scratch_};
  if (!small.seqs.empty()) RETURN_IF_ERROR(RunGroup(small, batch, results));
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t t = static_cast<int64_t>(batch[i].tokens.size());
    if (InSharedGroup(t)) continue;
    Group alone;
    alone.seqs.push_back({static_cast<int>(i), batch[i].slot, 0, t});
    alone.rows = t;
    RETURN_IF_ERROR(RunGroup(alone, batch, results));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateQwen3HybridModel(const HybridConfig& config,
                                                              std::unique_ptr<TensorStore> store,
                                                              uint64_t weights_digest,
                                                              KernelBackend* backend,
                                                              const Qwen3HybridOptions& options) {
  if (options.gdn_chunk < 1) return absl::InvalidArgumentError("gdn_chunk must be >= 1");
  auto model = std::make_unique<Qwen3HybridModel>(config, backend, options);
  RETURN_IF_ERROR(model->Load(*store, weights_digest));
  if (model->store_needed()) model->KeepStore(std::move(store));
  return model;
}

}  // namespace cairn::infer
