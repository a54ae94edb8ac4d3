#include "services/infer/models/qwen3_hybrid/qwen3_hybrid_model.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/annotate.h"
#include "common/status/status_macros.h"
#include "services/infer/kernels/row_tiles.h"
#include "services/infer/models/qwen3_hybrid/qwen3_hybrid_model_impl.h"
#include "services/infer/models/qwen3_hybrid/weight_reader.h"

namespace cairn::infer {
namespace qwen3_hybrid {

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
  // As transformers 5's tie_weights: a stored lm_head.weight whose values differ from the
  // embedding's is the LM head even when the config says tied (it is then left untied); one with
  // the same bytes changes nothing, so the embedding is shared (docs/model.md §1.1).
  const TensorView* stored_head = store.Find("lm_head.weight");
  const TensorView* embed_view = store.Find(prefix + "embed_tokens.weight");
  const bool head_is_embedding =
      stored_head != nullptr && stored_head->dtype == embed_view->dtype &&
      stored_head->shape == embed_view->shape && stored_head->bytes == embed_view->bytes &&
      std::memcmp(stored_head->data, embed_view->data, static_cast<size_t>(stored_head->bytes)) ==
          0;
  if (stored_head != nullptr ? !head_is_embedding : !c_.tie_word_embeddings) {
    absl::StatusOr<WeightMatrix> head =
        r.Matrix("lm_head.weight", {c_.vocab_size, d}, /*prefixed=*/false);
    if (!head.ok() && stored_head == nullptr) {
      return Annotate(head.status(),
                      "tie_word_embeddings is false (at the top level and, for a qwen3_5 / "
                      "qwen3_5_moe wrapper, in text_config)");
    }
    ASSIGN_OR_RETURN(lm_head_, std::move(head));
    RETURN_IF_ERROR(Place(lm_head_));
  }
  DropHostCopies();
  const auto report = [this](int64_t layers) {
    if (options_.progress == nullptr) return;
    options_.progress(
        {.phase = "placing the weights", .done = layers, .total = c_.num_layers, .unit = "layers"});
  };
  report(0);
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
    report(i + 1);
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

}  // namespace qwen3_hybrid

absl::StatusOr<std::unique_ptr<Model>> CreateQwen3HybridModel(const HybridConfig& config,
                                                              std::unique_ptr<TensorStore> store,
                                                              uint64_t weights_digest,
                                                              KernelBackend* backend,
                                                              const Qwen3HybridOptions& options) {
  if (options.gdn_chunk < 1) return absl::InvalidArgumentError("gdn_chunk must be >= 1");
  auto model = std::make_unique<qwen3_hybrid::Qwen3HybridModel>(config, backend, options);
  RETURN_IF_ERROR(model->Load(*store, weights_digest));
  if (model->store_needed()) model->KeepStore(std::move(store));
  return model;
}

}  // namespace cairn::infer
