#ifndef CAIRN_SERVICES_INFER_KERNELS_KERNEL_BACKEND_H_
#define CAIRN_SERVICES_INFER_KERNELS_KERNEL_BACKEND_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status/check.h"
#include "services/infer/kernels/device_memory.h"
#include "services/infer/kernels/scratch_arena.h"

namespace cairn::infer {

// Element type of a weight matrix as a checkpoint stores it. bf16 and f16 values widen to fp32
// exactly, so a product over them equals the product over their fp32 widening.
enum class WeightType { kF32, kBF16, kF16 };

// Bytes per element of `type`.
inline int WeightTypeSize(WeightType type) { return type == WeightType::kF32 ? 4 : 2; }

// How a WeightMatrix part orders its rows' elements in memory.
enum class WeightLayout {
  // Row-major: row r of the part at data + r * cols elements (as the checkpoint stores it).
  kRows,
  // Row tiles (row_tiles.h): the rows in tiles of four, each tile's rows interleaved in blocks
  // of sixteen elements, so that a product streams four rows from one ascending address range.
  // Only a backend that says so (KernelBackend::TakesRowTiles) is given such matrices.
  kRowTiles,
};

// A weight matrix [rows(), cols] of one element type in backend memory, as a linear layer
// holds it (output features by input features), row-major unless `layout` says otherwise. Its
// rows may lie in up to kMaxParts places: part i holds the next parts[i].rows rows, each part
// laid out on its own (row stride `cols` when row-major). That lets one product run over
// several checkpoint tensors (q, k and v, say) where the checkpoint has put them, without
// copying them together.
struct WeightMatrix {
  static constexpr int kMaxParts = 4;
  struct Part {
    const void* data = nullptr;
    int64_t rows = 0;
  };

  WeightType type = WeightType::kF32;
  WeightLayout layout = WeightLayout::kRows;
  int64_t cols = 0;
  Part parts[kMaxParts];
  int num_parts = 0;
  // For a RowRange, the rows of the matrix it was cut from (0: the matrix is whole). A backend
  // whose arithmetic for an output depends on the rows of the call (how it cuts k, say) decides
  // it by these, so that a range's outputs are the whole product's bits.
  int64_t whole_rows = 0;

  // A matrix of one part.
  static WeightMatrix Of(const void* data, WeightType type, int64_t rows, int64_t cols) {
    WeightMatrix w;
    w.type = type;
    w.cols = cols;
    w.parts[0] = {data, rows};
    w.num_parts = 1;
    return w;
  }
  int64_t rows() const {
    int64_t n = 0;
    for (int i = 0; i < num_parts; ++i) n += parts[i].rows;
    return n;
  }
  // Rows [begin, end) of a row-major matrix (layout kRows, 0 <= begin <= end <= rows()) as a
  // matrix over the same memory, in as many parts as that range touches (whole_rows: this
  // matrix's).
  WeightMatrix RowRange(int64_t begin, int64_t end) const;
};

// Arguments of KernelBackend::Attention. Causal GQA softmax attention of `tokens` queries at
// absolute positions `past .. past+tokens-1` over key/value rows `0 .. past+tokens-1`.
struct AttentionArgs {
  const float* q = nullptr;  // [tokens, q_heads * head_dim], post-norm, post-RoPE.
  const float* k = nullptr;  // [>= past+tokens, kv_heads * head_dim] rows.
  const float* v = nullptr;  // Same layout as `k`.
  float* out = nullptr;      // [tokens, q_heads * head_dim], head-major.
  int64_t tokens = 0;
  int64_t past = 0;
  int q_heads = 0;
  int kv_heads = 0;  // q head j reads kv head j / (q_heads / kv_heads).
  int head_dim = 0;
  float scale = 0.0f;
  // Compute each query row on its own, with reductions over head_dim and over keys in a fixed
  // order that depends only on the row's absolute position: the row's output is then the same
  // bits whatever pass it belongs to (where the pass starts, how many rows it has).
  bool row_invariant = false;
};

// Arguments of KernelBackend::GatedDeltaRule (docs/model.md §3.6.5). Per v-head h the fp32 state
// S[h] in R^{dk x dv} (layout [v_heads, dk, dv]) is updated token by token:
//   S = exp(g_t) S;  delta = beta_t (v_t - S^T k_t);  S += k_t (x) delta;  o_t = S^T q_t.
// v-head h reads q/k head h / (v_heads / k_heads). q must already be L2-normalised and scaled,
// k L2-normalised.
struct GatedDeltaArgs {
  const float* q = nullptr;     // [tokens, k_heads * dk]
  const float* k = nullptr;     // [tokens, k_heads * dk]
  const float* v = nullptr;     // [tokens, v_heads * dv]
  const float* g = nullptr;     // [tokens, v_heads], log-decay (<= 0).
  const float* beta = nullptr;  // [tokens, v_heads]
  float* state = nullptr;       // [v_heads, dk, dv], read and updated in place.
  float* out = nullptr;         // [tokens, v_heads * dv]
  int64_t tokens = 0;
  int k_heads = 0;
  int v_heads = 0;
  int dk = 0;
  int dv = 0;
  // 0: the recurrent (token by token) form. > 0: the chunked form with chunks of this many
  // tokens counted from the first token of the call.
  int chunk = 0;
  // Floats between consecutive tokens' rows of q and k, and of v (0: the rows are packed,
  // k_heads * dk and v_heads * dv apart). out's rows are packed.
  int64_t qk_ld = 0;
  int64_t v_ld = 0;

  int64_t qk_stride() const { return qk_ld > 0 ? qk_ld : static_cast<int64_t>(k_heads) * dk; }
  int64_t v_stride() const { return v_ld > 0 ? v_ld : static_cast<int64_t>(v_heads) * dv; }
};

// The delta-rule layer's inputs before KernelBackend::GatedDeltaStepBatch's rule: the GdnGates
// call that fills g and beta and the L2NormalizeTwo call that normalises q and k in place.
struct GatedDeltaInputs {
  // GdnGates(proj, proj_ld, tokens, v_heads, b_offset, a_offset, dt_bias, neg_a, g, beta).
  const float* proj = nullptr;
  int64_t proj_ld = 0;
  int64_t tokens = 0;
  int v_heads = 0;
  int64_t b_offset = 0;
  int64_t a_offset = 0;
  const float* dt_bias = nullptr;
  const float* neg_a = nullptr;
  float* g = nullptr;
  float* beta = nullptr;
  // L2NormalizeTwo(q, q_scale, k, 1, tokens, k_heads, dk, qk_ld, eps).
  float* q = nullptr;
  float* k = nullptr;
  float q_scale = 1.0f;
  int k_heads = 0;
  int64_t dk = 0;
  int64_t qk_ld = 0;
  float eps = 0.0f;
};

// One GatedRmsNormHeads call (KernelBackend::GatedDeltaStepNormBatch): its arguments by name.
// y is x, or rows disjoint from every input of the steps before it.
struct GatedNormHeadsArgs {
  const float* x = nullptr;
  const float* z = nullptr;
  int64_t tokens = 0;
  int heads = 0;
  int64_t dim = 0;
  int64_t z_ld = 0;
  const float* w = nullptr;
  float eps = 0.0f;
  float* y = nullptr;
};

// One CausalConvSilu call (KernelBackend::CausalConvSiluBatch): its arguments by name.
struct CausalConvArgs {
  const float* in = nullptr;
  int64_t ld_in = 0;
  int64_t tokens = 0;
  int64_t channels = 0;
  const float* w = nullptr;
  int kernel = 0;
  float* state = nullptr;
  float* out = nullptr;
};

// One sequence of KernelBackend::RopeAppendBatch: a pass's new query rows are rotated in place
// and its new key and value rows appended to the slot's rows, the keys rotated there.
struct RopeAppendArgs {
  float* q = nullptr;        // [tokens, q_heads * head_dim] rows of stride q_ld, in place.
  const float* k = nullptr;  // [tokens, kv_heads * head_dim] new keys, row stride kv_ld.
  const float* v = nullptr;  // New values, the layout of `k`.
  float* k_dst = nullptr;    // [tokens, kv_heads * head_dim] contiguous: the slot's key rows.
  float* v_dst = nullptr;    // The slot's value rows, as `k_dst`.
  int64_t tokens = 0;
  int64_t position = 0;  // Absolute position of the first token.
  int64_t q_ld = 0;
  int64_t kv_ld = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int rotary_dim = 0;
  const float* inv_freq = nullptr;  // rotary_dim / 2 entries.
};

// The query and key norms of one pass's attention inputs (KernelBackend::NormRopeAppendBatch):
// `rows` token rows of the pass's sequences together.
struct QkNormArgs {
  int64_t rows = 0;
  // Where not null: the queries come as per-head pairs [q_h | gate_h] (rows qg_ld apart), split
  // into `q` (whose rows are then q_heads * head_dim apart) and `gate` ([rows, q_heads *
  // head_dim]) first. Else the queries are `q` already.
  const float* qg = nullptr;
  int64_t qg_ld = 0;
  float* gate = nullptr;
  float* q = nullptr;  // [rows, q_heads * head_dim], rows q_ld apart; normalised in place.
  int64_t q_ld = 0;
  float* k = nullptr;  // [rows, kv_heads * head_dim], rows kv_ld apart; normalised in place.
  int64_t kv_ld = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  const float* q_norm = nullptr;  // [head_dim] each.
  const float* k_norm = nullptr;
  float eps = 0.0f;
  bool zero_centred = false;
};

// Arguments of KernelBackend::MoeExperts: the routed experts of one sparse MoE layer
// (docs/model.md §3.7) over `tokens` rows. Pointers other than `gate_up` and `down` are backend
// memory; those two are host arrays of `experts` matrices whose data is backend memory.
struct MoeExpertsArgs {
  const float* x = nullptr;       // [tokens, hidden]: the layer's normed input.
  const float* logits = nullptr;  // [tokens, experts]: router logits.
  float* out = nullptr;           // [tokens, hidden]: the routed experts are added to it.
  int64_t tokens = 0;
  int64_t hidden = 0;
  int64_t width = 0;  // Every expert's SwiGLU width.
  int experts = 0;
  int top_k = 0;
  bool renormalise = false;
  const WeightMatrix* gate_up = nullptr;  // Expert e: [2 * width, hidden], gate rows then up rows.
  const WeightMatrix* down = nullptr;     // Expert e: [hidden, width].
  // The experts' products as MatMulRowsTyped (the row-invariant product, as decode runs) instead
  // of MatMulTransposedTyped.
  bool row_invariant = false;
  // Optional, backend memory. [tokens]: before the routed experts are added, out's rows are
  // scaled as SigmoidScaleRows(out, tokens, hidden, out_gate) scales them (a shared expert's
  // gate).
  const float* out_gate = nullptr;
  // Optional, backend memory. [tokens, hidden]: after, out's rows are added to these as
  // AddScaledRows(out, tokens, hidden, nullptr, nullptr, residual) adds them (the residual
  // stream). A device backend may do either in the launch that adds the routed experts.
  float* residual = nullptr;
  // Floats from one token's logits to the next's (0: experts) and from one token's out_gate to
  // the next's (0: 1), so that one product can give both: the router's rows and the shared
  // expert's gate row as one matrix, token rows experts + 1 apart.
  int64_t logits_ld = 0;
  int64_t out_gate_ld = 0;
  // Optional: the layer's shared expert, a SwiGLU of `shared_width` ([2 * shared_width, hidden]
  // gate rows then up rows, and [hidden, shared_width]). Then out's contents are not read:
  // MoeExperts first writes out = the shared expert of x, as MatMulRowsSiluMul and
  // MatMulRowsTyped give it with `row_invariant` (else MatMulTransposedTyped, SiluMul and
  // MatMulTransposedTyped), so that a device backend may run it in the routed experts' launches.
  const WeightMatrix* shared_gate_up = nullptr;
  const WeightMatrix* shared_down = nullptr;
  int64_t shared_width = 0;
  // Optional: the router product, not yet run. Then MoeExperts first writes router_logits = x
  // router^T (the router's rows, at most LogitsLd(), token rows LogitsLd() apart) as
  // MatMulRowsTyped gives it with `row_invariant` (else MatMulTransposedTyped); `logits` must be
  // router_logits, and out_gate may point into them. A device backend may run it in the routed
  // experts' launch.
  const WeightMatrix* router = nullptr;
  float* router_logits = nullptr;

  bool StridesValid() const {
    return logits_ld >= 0 && out_gate_ld >= 0 && (logits_ld == 0 || logits_ld >= experts);
  }
  int64_t LogitsLd() const { return logits_ld > 0 ? logits_ld : experts; }
  int64_t OutGateLd() const { return out_gate_ld > 0 ? out_gate_ld : 1; }
};

// The device seam of the inference engine: every numerical operation the models run. A backend
// is chosen when the engine starts; the CPU backend (kernels/cpu/) is always built and is the
// reference; a HIP backend (kernels/hip/) implements the same operations on a GPU.
//
// Pointers are to memory of the backend's device (host memory for the CPU backend). All matrices
// are row-major fp32. Every operation is deterministic: the same inputs and shapes give
// bit-identical outputs.
//
// Thread-compatible: one caller thread at a time (the backend may use its own workers inside a
// call).
class KernelBackend {
 public:
  virtual ~KernelBackend() = default;

  // Returns a short name of the backend and its numerics class, e.g. "cpu-fp32".
  virtual absl::string_view name() const = 0;

  // The memory every pointer given to this backend's operations lives in: slot state is
  // allocated from it (engine/slot_state.h). Host memory unless a device backend overrides it.
  virtual DeviceMemory* memory() { return HostDeviceMemory(); }
  // A fault after which this backend runs nothing more (a device lost, a kernel that failed on
  // the device); OK while it can run. The default: a backend without such faults.
  virtual absl::Status Fault() const { return absl::OkStatus(); }
  // Called by the model after a pass failed. A backend that keeps an operation's error and
  // makes later calls fail with it (the HIP backend) forgets an error that left the device
  // sound (memory it could not allocate, arguments it does not take), waits for the work the
  // pass had queued and returns OK, so the next pass runs; it returns the fault where there is
  // one. The pass's outputs and the slot state it wrote are not to be trusted either way.
  virtual absl::Status Recover() { return Fault(); }

  // y[m, n] = x[m, k] . w[n, k]^T, plus the old y when `accumulate`. `ldx` and `ldy` are the
  // row strides of x and y (>= k and >= n).
  virtual void MatMulTransposed(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                                int64_t n, float* y, int64_t ldy, bool accumulate) = 0;

  // As MatMulTransposed, with one more promise: every output element is one reduction over k
  // in an order that depends only on k, never on m, n or how work is split. A row of y is
  // therefore bit-identical whatever other rows share the call: this is what batched decode
  // uses, so that a request's logits never depend on which requests share its batch.
  virtual void MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                          int64_t n, float* y, int64_t ldy, bool accumulate) = 0;

  // out[i] = table[ids[i]] for `n` ids, rows of `dim` values. The caller has checked the ids.
  virtual void EmbeddingGather(const float* table, int64_t dim, const int32_t* ids, int64_t n,
                               float* out) = 0;

  // Typed weights. Returns whether the *Typed operations below accept matrices of `type` in up
  // to WeightMatrix::kMaxParts parts. The default implementations take one fp32 part only (and
  // accept nothing here); a model gives such a backend its weights widened to fp32, in one
  // part each.
  virtual bool AcceptsWeightType(WeightType) const { return false; }
  // Whether the *Typed operations read matrices of `type` fastest in the row-tile layout
  // (WeightLayout::kRowTiles); a model whose weights are in host memory then packs them so at
  // load time (row_tiles.h). Implies AcceptsWeightType(type). The layout changes where the
  // elements lie, never a result's bits.
  virtual bool TakesRowTiles(WeightType) const { return false; }
  virtual void MatMulTransposedTyped(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                                     float* y, int64_t ldy, bool accumulate);
  virtual void MatMulRowsTyped(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                               float* y, int64_t ldy, bool accumulate);
  // A SwiGLU's first half in decode: act[m, width] = silu(x . gate^T) * (x . up^T) for `w`
  // = [gate; up] (2 * width rows), with the bits of MatMulRowsTyped into `gu` ([m, 2 * width],
  // scratch the caller provides) then SiluMul into `act`, which is what the default does. A
  // backend may skip `gu` and compute both halves of a column pair in one launch.
  virtual void MatMulRowsSiluMul(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                                 float* gu, float* act);
  // A delta-rule layer's input projection and causal conv in decode: MatMulRowsTyped into `y`
  // (not accumulating), then CausalConvSiluBatch(convs), whose inputs are columns of y's rows;
  // which is what the default does. A backend may do the conv in the product's launch where
  // each call of `convs` is one token whose input is one of y's rows.
  virtual void MatMulRowsCausalConv(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                                    float* y, int64_t ldy, absl::Span<const CausalConvArgs> convs);
  // EmbeddingGather from rows of `table` (dim = table.cols), widened to fp32.
  virtual void EmbeddingGatherTyped(const WeightMatrix& table, const int32_t* ids, int64_t n,
                                    float* out);

  // Splits rows of interleaved per-head [a_h (head_dim) | b_h (head_dim)] pairs (`heads` pairs
  // per row, `rows` rows) into a [rows, heads * head_dim] and b [rows, heads * head_dim].
  virtual void SplitHeadPairs(const float* in, int64_t rows, int heads, int head_dim, float* a,
                              float* b) = 0;

  // SplitHeadPairs of `rows` input rows `ld` apart (ld >= 2 * heads * head_dim): the pairs
  // can be a column block of a wider row, such as a fused product's output. The default calls
  // SplitHeadPairs once where ld is 2 * heads * head_dim and once a row otherwise.
  virtual void SplitHeadPairsStrided(const float* in, int64_t ld, int64_t rows, int heads,
                                     int head_dim, float* a, float* b);

  // x[i] *= sigmoid(gate[i]) for `n` values.
  virtual void SigmoidMul(float* x, const float* gate, int64_t n) = 0;

  // The Gated DeltaNet gates of `tokens` rows (docs/model.md §3.6.3): with b = row[b_offset + j]
  // and a = row[a_offset + j] for head j < heads (row stride `ld`),
  //   beta[t, j] = sigmoid(b),  g[t, j] = neg_a[j] * softplus(a + dt_bias[j]).
  virtual void GdnGates(const float* in, int64_t ld, int64_t tokens, int heads, int64_t b_offset,
                        int64_t a_offset, const float* dt_bias, const float* neg_a, float* g,
                        float* beta) = 0;

  // Routes each of `tokens` rows of router logits ([tokens, experts]): softmax over all
  // experts, the `top_k` largest probabilities (ties to the lower expert id), renormalised to
  // sum to one when `renormalise`. Writes ids [tokens, top_k] and weights [tokens, top_k], in
  // descending probability.
  virtual void MoeRoute(const float* logits, int64_t tokens, int experts, int top_k,
                        bool renormalise, int32_t* ids, float* weights) = 0;

  // The routed experts of a sparse MoE layer; see MoeExpertsArgs. Each token is routed as
  // MoeRoute routes it; then, for its picks in ascending expert id,
  //   out[t] = out[t] + weight * down_e(silu(gate_e(x[t])) * up_e(x[t]))
  // one rounded addition a pick, so a token's sum has a fixed order. The default
  // (kernel_backend.cc) is the reference: it routes with MoeRoute, brings the routing to the host
  // (memory()), sorts the picks by expert (a token's picks in token order) and per expert with
  // tokens gathers their rows (EmbeddingGather), runs the SwiGLU through MatMulRowsTyped (with
  // `row_invariant`) or MatMulTransposedTyped and SiluMul, and adds the scaled rows to `out`
  // (AddScaledRows), experts in ascending id. With `row_invariant` every token's result then
  // depends only on its own rows of `x` and `logits`; a backend's override must keep that
  // promise, and may run every expert in grouped launches without bringing the routing to the
  // host. Temporaries come from `scratch` (memory()). Returns Internal when the routing names an
  // expert outside [0, experts), or the memory's error.
  virtual absl::Status MoeExperts(const MoeExpertsArgs& args, ScratchArena& scratch);
  // MoeExperts without out_gate and residual (which MoeExperts' default applies around it).
  // Needs `args`' logits in rows of their own (PackedMoeArgs).
  absl::Status MoeRoutedExperts(const MoeExpertsArgs& args, ScratchArena& scratch);
  // `args` with its logits and out_gate each in rows of their own (logits_ld experts,
  // out_gate_ld 1), copied into `scratch` by CopyRows where they are not already (the copies
  // live until the caller's frame ends). InvalidArgument for a logits_ld below experts or a
  // negative stride.
  absl::StatusOr<MoeExpertsArgs> PackedMoeArgs(const MoeExpertsArgs& args, ScratchArena& scratch);
  // Writes out = args' shared expert of x (MoeExpertsArgs::shared_gate_up), its temporaries
  // from `scratch`; nothing without one.
  absl::Status MoeSharedExpert(const MoeExpertsArgs& args, ScratchArena& scratch);
  // Runs args' router product (MoeExpertsArgs::router) into router_logits; nothing without one.
  // InvalidArgument where it would not give the call's logits (CheckMoeRouter).
  absl::Status MoeRouter(const MoeExpertsArgs& args);
  // InvalidArgument where args' router product would not give the call's logits (its rows, its
  // columns, the shared gate among its columns); OK without a router. A backend that runs the
  // product elsewhere checks it here.
  static absl::Status CheckMoeRouter(const MoeExpertsArgs& args);

  // RMSNorm of each of `rows` rows of `dim` values: y = x / sqrt(mean(x^2) + eps) * s, where
  // s = 1 + w when `zero_centred` and s = w otherwise. `y` may equal `x`.
  virtual void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                       bool zero_centred, float* y) = 0;

  // Gated RMSNorm (norm before gate): y = x / sqrt(mean(x^2) + eps) * w * silu(z), per row of
  // `dim`. `y` may equal `x`.
  virtual void GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim,
                            const float* w, float eps, float* y) = 0;

  // RmsNorm in place of `tokens` rows of `heads` heads of `dim` values, token rows `ld` apart
  // (ld >= heads * dim; a token's heads consecutive), such as a column block of a fused
  // product's output: each head the bits RmsNorm gives it as a row of its own. The default
  // calls RmsNorm once where ld is heads * dim and once a token otherwise.
  virtual void RmsNormHeads(float* x, int64_t tokens, int heads, int64_t dim, int64_t ld,
                            const float* w, float eps, bool zero_centred);
  // GatedRmsNorm of `tokens * heads` rows of `dim` (x and y contiguous) whose gates are
  // `tokens` rows of `heads` heads of `dim`, z's token rows `z_ld` apart (z_ld >= heads * dim):
  // the bits of GatedRmsNorm over the gates copied into rows of their own. The default calls
  // GatedRmsNorm once where z_ld is heads * dim and once a token otherwise.
  virtual void GatedRmsNormHeads(const float* x, const float* z, int64_t tokens, int heads,
                                 int64_t dim, int64_t z_ld, const float* w, float eps, float* y);

  // Scales each of `rows` rows of `dim` values to unit L2 norm: x / sqrt(sum(x^2) + eps), then
  // multiplies by `scale`. In place.
  virtual void L2Normalize(float* x, int64_t rows, int64_t dim, float eps, float scale) = 0;
  // L2Normalize of `a` with a_scale, then of `b` with b_scale, each `tokens` rows of `heads`
  // heads of `dim` values, token rows `ld` apart (>= heads * dim; heads are consecutive): a
  // device backend does both in one launch, with the same bits as L2Normalize calls.
  virtual void L2NormalizeTwo(float* a, float a_scale, float* b, float b_scale, int64_t tokens,
                              int heads, int64_t dim, int64_t ld, float eps);

  // NeoX (rotate-half) RoPE on the first `rotary_dim` values of each head: row t of `x`
  // ([tokens, heads * head_dim], row stride `ld`) is at position `first_position + t`.
  // `inv_freq` has rotary_dim / 2 entries. In place.
  virtual void Rope(float* x, int64_t tokens, int64_t ld, int heads, int head_dim, int rotary_dim,
                    const float* inv_freq, int64_t first_position) = 0;

  // out[i] = silu(gate[i]) * up[i] for `rows` rows of `dim` (row strides `ld_gate`, `ld_up`,
  // `dim` for out).
  virtual void SiluMul(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up,
                       int64_t rows, int64_t dim, float* out) = 0;

  // Causal depthwise conv of kernel `kernel` followed by SiLU over `tokens` rows of `channels`:
  // out[t][c] = silu(sum_m w[c][m] * u[t - kernel + 1 + m][c]) where rows before the first
  // token come from `state` ([kernel - 1, channels], oldest first). On return `state` holds
  // the last kernel - 1 input rows. `in` has row stride `ld_in`.
  virtual void CausalConvSilu(const float* in, int64_t ld_in, int64_t tokens, int64_t channels,
                              const float* w, int kernel, float* state, float* out) = 0;
  // CausalConvSilu for each element of `batch` (the sequences of one pass; their states and
  // outputs are distinct). Each result is bit-identical to that of its own call. The default
  // (kernel_backend.cc) makes those calls in order; a device backend may run several sequences
  // in one launch.
  virtual void CausalConvSiluBatch(absl::Span<const CausalConvArgs> batch);

  // For each element a of `batch` (the sequences of one pass; their rows are distinct), as the
  // calls
  //   Rope(a.q, a.tokens, a.q_ld, a.q_heads, a.head_dim, a.rotary_dim, a.inv_freq, a.position);
  //   CopyRows(a.k, a.kv_ld, a.tokens, w, a.k_dst, w);  CopyRows(a.v, a.kv_ld, a.tokens, w,
  //   a.v_dst, w);  Rope(a.k_dst, a.tokens, w, a.kv_heads, ...same rotary..., a.position);
  // with w = kv_heads * head_dim, and bit-identical to them. The default (kernel_backend.cc)
  // makes those calls in order; a device backend may run a pass's sequences in one launch.
  virtual void RopeAppendBatch(absl::Span<const RopeAppendArgs> batch);
  // The attention inputs of one pass: as the calls
  //   SplitHeadPairsStrided(n.qg, n.qg_ld, n.rows, n.q_heads, n.head_dim, n.q, n.gate)
  //   (where n.qg is set);  RmsNormHeads(n.q, n.rows, n.q_heads, n.head_dim, n.q_ld,
  //   n.q_norm, n.eps, n.zero_centred);  RmsNormHeads(n.k, ...n.kv_heads, n.kv_ld, n.k_norm...);
  //   RopeAppendBatch(batch);
  // and bit-identical to them, where `batch`'s sequences hold the pass's rows of `n` (their q
  // and k rows within n.q and n.k, at the shape of `n`). The default (kernel_backend.cc) makes
  // those calls; a device backend may do it all in one launch.
  virtual void NormRopeAppendBatch(const QkNormArgs& n, absl::Span<const RopeAppendArgs> batch);

  // Causal softmax attention; see AttentionArgs.
  virtual void Attention(const AttentionArgs& args) = 0;
  // Attention for each element of `batch` (the sequences of one pass; their outputs are
  // distinct). Each result is bit-identical to that of its own Attention call. The default
  // (kernel_backend.cc) makes those calls in order; a device backend may run several sequences'
  // decode steps in one launch, the CPU backend spreads their work over its threads together.
  virtual void AttentionBatch(absl::Span<const AttentionArgs> batch);

  // The gated delta rule; see GatedDeltaArgs. The chunked and recurrent forms compute the same
  // function up to rounding.
  virtual void GatedDeltaRule(const GatedDeltaArgs& args) = 0;
  // GatedDeltaRule for each element of `batch` (the sequences of one pass; their states are
  // distinct). Each result is bit-identical to that of its own GatedDeltaRule call. The default
  // (kernel_backend.cc) makes those calls in order; a device backend may run the recurrent
  // (decode) steps of several sequences in one launch.
  virtual void GatedDeltaRuleBatch(absl::Span<const GatedDeltaArgs> batch);
  // `inputs`' GdnGates and L2NormalizeTwo calls, then GatedDeltaRuleBatch(batch), whose q, k, g
  // and beta point into inputs.q, .k, .g and .beta (sequence rows of the same token rows). The
  // default makes the three calls; a device backend may instead normalise and gate inside the
  // rule (its decode steps, its chunked form's preparation), with the same outputs and states,
  // leaving q, k, g and beta unwritten (the caller must not read them afterwards).
  virtual void GatedDeltaStepBatch(const GatedDeltaInputs& inputs,
                                   absl::Span<const GatedDeltaArgs> batch);
  // GatedDeltaStepBatch(inputs, batch), then GatedRmsNormHeads over its outputs (`norm`; the
  // delta-rule layer's gated norm, x the rows the calls write). The default makes the two
  // calls; a device backend may norm each head inside the rule's decode steps, with the same
  // outputs and states.
  virtual void GatedDeltaStepNormBatch(const GatedDeltaInputs& inputs,
                                       absl::Span<const GatedDeltaArgs> batch,
                                       const GatedNormHeadsArgs& norm);

  // Data movement and small row operations the models need between the products. The defaults
  // (kernel_backend.cc) run on the host over host pointers; a device backend overrides them.

  // Copies `rows` rows of `cols` values: dst row r (row stride ld_dst) = src row r (ld_src).
  // The two ranges do not overlap.
  virtual void CopyRows(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                        int64_t ld_dst);

  // For r < rows: dst row dst_rows[r] += scales[r] * src row r, rows of `dim` values (src
  // contiguous). A null `dst_rows` means row r; a null `scales` adds the rows unscaled. The
  // dst rows of one call are distinct, so the result does not depend on an order.
  virtual void AddScaledRows(const float* src, int64_t rows, int64_t dim, const int32_t* dst_rows,
                             const float* scales, float* dst);

  // x[i][j] *= sigmoid(gate[i]) for `rows` rows of `dim` values (a gate per row).
  virtual void SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* gate);
};

inline void KernelBackend::MatMulTransposedTyped(const float* x, int64_t m, int64_t ldx,
                                                 const WeightMatrix& w, float* y, int64_t ldy,
                                                 bool accumulate) {
  CAIRN_CHECK(w.type == WeightType::kF32 && w.layout == WeightLayout::kRows && w.num_parts == 1);
  MatMulTransposed(x, m, w.cols, ldx, static_cast<const float*>(w.parts[0].data), w.parts[0].rows,
                   y, ldy, accumulate);
}

inline void KernelBackend::MatMulRowsTyped(const float* x, int64_t m, int64_t ldx,
                                           const WeightMatrix& w, float* y, int64_t ldy,
                                           bool accumulate) {
  CAIRN_CHECK(w.type == WeightType::kF32 && w.layout == WeightLayout::kRows && w.num_parts == 1);
  MatMulRows(x, m, w.cols, ldx, static_cast<const float*>(w.parts[0].data), w.parts[0].rows, y, ldy,
             accumulate);
}

inline void KernelBackend::MatMulRowsSiluMul(const float* x, int64_t m, int64_t ldx,
                                             const WeightMatrix& w, float* gu, float* act) {
  const int64_t width = w.rows() / 2;
  MatMulRowsTyped(x, m, ldx, w, gu, 2 * width, false);
  SiluMul(gu, 2 * width, gu + width, 2 * width, m, width, act);
}

inline void KernelBackend::MatMulRowsCausalConv(const float* x, int64_t m, int64_t ldx,
                                                const WeightMatrix& w, float* y, int64_t ldy,
                                                absl::Span<const CausalConvArgs> convs) {
  MatMulRowsTyped(x, m, ldx, w, y, ldy, false);
  CausalConvSiluBatch(convs);
}

inline void KernelBackend::EmbeddingGatherTyped(const WeightMatrix& table, const int32_t* ids,
                                                int64_t n, float* out) {
  CAIRN_CHECK(table.type == WeightType::kF32 && table.layout == WeightLayout::kRows &&
              table.num_parts == 1);
  EmbeddingGather(static_cast<const float*>(table.parts[0].data), table.cols, ids, n, out);
}

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_KERNEL_BACKEND_H_
