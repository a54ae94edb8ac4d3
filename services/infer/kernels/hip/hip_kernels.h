#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_KERNELS_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_KERNELS_H_

// Thin launchers of the HIP kernels (the .hip files in this folder). Every pointer is device
// memory; every launcher enqueues on `stream` and returns the launch's error (hipSuccess when
// it was enqueued). No launcher synchronises, allocates or knows about Status: HipKernelBackend
// checks shapes, provides workspaces and turns errors into Statuses.
//
// Every kernel reduces in an order fixed by the shape alone (no atomics, no order that depends
// on scheduling), so equal inputs give equal bits.

#include <cstddef>
#include <cstdint>

#include "services/infer/kernels/hip/hip_attention_kernels.h"
#include "services/infer/kernels/hip/hip_compat.h"

namespace cairn::infer::hip {

// Overlapped launches (NVIDIA, sm_90 and later; hip_device_util.h, KernelEntry): each kernel may
// be scheduled while the stream's previous kernel finishes, and waits for it before it touches
// memory, so no value depends on the setting. Process-wide (every backend's launches); set by
// HipKernelBackend::Create (HipKernelBackendOptions::overlapped_launches, on by default) and by
// the benchmarks, which time both. Stays off where the device runs kernels compiled without
// the wait (older than sm_90) and on AMD.
void SetOverlappedLaunches(bool on);
bool OverlappedLaunches();

// Early release (NVIDIA sm_90 and later, with overlapped launches): kernels of the kinds set in
// SetEarlyRelease's mask let the stream's next kernel be scheduled as soon as each of their
// blocks has passed its own wait at entry (KernelEntry(true): griddepcontrol.launch_dependents),
// so that kernel's blocks become resident and run up to their wait (their weights' L2
// prefetches) while this one runs, instead of from this one's last block's exit. The next kernel
// still waits for this one to complete before it touches memory: no value depends on the
// setting. Process-wide, as SetOverlappedLaunches (HipKernelBackendOptions::early_release).
enum EarlyReleaseKind : unsigned {
  kReleaseNorms = 1,      // The RMS norms, plain and gated, block and warp kernels.
  kReleaseProducts = 2,   // The matrix-unit row products (MatMulRowsMma and its fusions).
  kReleaseDeltaStep = 4,  // The delta rule's batched decode step.
  kReleaseMoeLayer = 8,   // The MoE decode layer's one launch.
  kReleaseAllKinds = 15,
};
void SetEarlyRelease(unsigned mask);
// Whether kernels of `kind` release early (the mask's bit, and overlapped launches on).
bool EarlyRelease(EarlyReleaseKind kind);

// The norms reduce each row in BlockSum's fixed tree over 256 threads. With `warp_rows`, rows of
// at most 256 values (heads) take a warp each on NVIDIA, which adds the same partial sums in the
// same tree: the same bits. Where `rounded` is not null (rows of a multiple of 8 values, else
// hipErrorInvalidValue), the kernels also write each output value rounded to bf16 as the
// matrix-unit products round their inputs (RoundBf16) at the same index of `rounded`: the
// products' bf16 inputs (MatMulRowsMmaRounded, GEMM inputs) without a launch of their own.
hipError_t RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                   bool zero_centred, float* y, bool warp_rows, uint16_t* rounded,
                   hipStream_t stream);
hipError_t GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w,
                        float eps, float* y, bool warp_rows, uint16_t* rounded, hipStream_t stream);
// KernelBackend::RmsNormHeads and GatedRmsNormHeads in one launch each: the kernels above with
// each row's address from its token and head (the same arithmetic).
hipError_t RmsNormHeads(float* x, int64_t tokens, int heads, int64_t dim, int64_t ld,
                        const float* w, float eps, bool zero_centred, bool warp_rows,
                        hipStream_t stream);
hipError_t GatedRmsNormHeads(const float* x, const float* z, int64_t tokens, int heads, int64_t dim,
                             int64_t z_ld, const float* w, float eps, float* y, bool warp_rows,
                             uint16_t* rounded, hipStream_t stream);
hipError_t L2Normalize(float* x, int64_t rows, int64_t dim, float eps, float scale, bool warp_rows,
                       hipStream_t stream);
// L2Normalize of `a` (scale a_scale) and `b` (b_scale), each `tokens` rows of `heads` rows of
// `dim`, token rows `ld` apart, in one launch.
hipError_t L2NormalizeTwo(float* a, float a_scale, float* b, float b_scale, int64_t tokens,
                          int heads, int64_t dim, int64_t ld, float eps, bool warp_rows,
                          hipStream_t stream);
hipError_t Rope(float* x, int64_t tokens, int64_t ld, int heads, int head_dim, int rotary_dim,
                const float* inv_freq, int64_t first_position, hipStream_t stream);
// One sequence of RopeAppendBatch (KernelBackend::RopeAppendArgs without the shared shape).
struct RopeAppendSequence {
  float* q;
  const float* k;
  const float* v;
  float* k_dst;
  float* v_dst;
  int64_t tokens;
  int64_t position;
};
// For `count` (at most RopeAppendMaxBatch()) sequences of one shape in one launch: Rope of the
// q rows in place, the k and v rows copied to k_dst / v_dst (row stride kv_heads * head_dim)
// and the copied keys rotated; the bits of Rope, two copies and Rope per sequence.
int RopeAppendMaxBatch();
hipError_t RopeAppendBatch(const RopeAppendSequence* seqs, int count, int64_t q_ld, int q_heads,
                           int64_t kv_ld, int kv_heads, int head_dim, int rotary_dim,
                           const float* inv_freq, hipStream_t stream);
// One sequence of NormRopeAppendBatch: RopeAppendSequence's rows, the keys' in place (`k`, not
// read-only: they are normalised there first), and the queries' head pairs and output gate rows
// (both null without the gate).
struct NormRopeSequence {
  float* q;
  const float* qg;
  float* gate;
  float* k;
  const float* v;
  float* k_dst;
  float* v_dst;
  int64_t tokens;
  int64_t position;
};
// KernelBackend::NormRopeAppendBatch for `count` (at most RopeAppendMaxBatch()) sequences of one
// shape in one launch: each sequence's rows as SplitHeadPairs (where qg is set: q rows are then
// q_heads * head_dim apart), RmsNormHeads of its q and k rows (the warp-per-row kernel's
// arithmetic), then RopeAppendBatch. The same bits. NVIDIA only, heads of at most 256 values
// (NormRopeAppendSupported); else hipErrorNotSupported / hipErrorInvalidValue.
bool NormRopeAppendSupported(int head_dim);
hipError_t NormRopeAppendBatch(const NormRopeSequence* seqs, int count, int64_t q_ld, int64_t qg_ld,
                               int q_heads, int64_t kv_ld, int kv_heads, int head_dim,
                               int rotary_dim, const float* inv_freq, const float* q_norm,
                               const float* k_norm, float eps, bool zero_centred,
                               hipStream_t stream);
// `rounded`: as the norms' (dim a multiple of 8, 16-byte aligned).
hipError_t SiluMul(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t rows,
                   int64_t dim, float* out, uint16_t* rounded, hipStream_t stream);
// Outputs first, then the new window per channel, so `state` is read before it is rewritten.
int CausalConvMaxKernel();
// One sequence of CausalConvSiluBatch.
struct ConvSequence {
  const float* in;
  int64_t ld_in;
  int64_t tokens;
  float* state;
  float* out;
};
// CausalConvSilu over `count` (at most CausalConvMaxBatch()) sequences sharing channels,
// weights and kernel, with distinct states and outputs, in one launch (two with the state
// update); each sequence gets the bits of its own CausalConvSilu call.
int CausalConvMaxBatch();
hipError_t CausalConvSiluBatch(const ConvSequence* seqs, int count, int64_t channels,
                               const float* w, int kernel, hipStream_t stream);
hipError_t CausalConvSilu(const float* in, int64_t ld_in, int64_t tokens, int64_t channels,
                          const float* w, int kernel, float* state, float* out, hipStream_t stream);
hipError_t EmbeddingGather(const float* table, int64_t dim, const int32_t* ids, int64_t n,
                           float* out, hipStream_t stream);
// As EmbeddingGather from a table of bf16 rows (raw bits), widened to fp32.
hipError_t EmbeddingGatherBf16(const uint16_t* table, int64_t dim, const int32_t* ids, int64_t n,
                               float* out, hipStream_t stream);
// KernelBackend::SplitHeadPairsStrided (SplitHeadPairs: ld = 2 * heads * head_dim).
hipError_t SplitHeadPairs(const float* in, int64_t ld, int64_t rows, int heads, int head_dim,
                          float* a, float* b, hipStream_t stream);
// `rounded`: as the norms' (any n), x[e] rounded at rounded[e].
hipError_t SigmoidMul(float* x, const float* gate, int64_t n, uint16_t* rounded,
                      hipStream_t stream);
// Asks L2 for bytes [p, p + bytes) (NVIDIA sm_90: bulk L2 prefetches, 64 KiB an instruction,
// the range cut to whole 16-byte units inside it; nothing elsewhere), then waits for the
// stream's previous kernel like every kernel, so that the stream's order is unchanged. A hint:
// no value changes. `evict_last` asks L2 to keep the lines ahead of others.
hipError_t PrefetchL2Range(const void* p, int64_t bytes, bool evict_last, hipStream_t stream);
// KernelBackend::CopyRows as a kernel (so that it takes part in overlapped launches, which a
// 2-D memory copy does not): 16-byte copies where cols, both strides and both pointers allow,
// else a float at a time.
hipError_t CopyRows(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                    int64_t ld_dst, hipStream_t stream);
// KernelBackend::AddScaledRows and SigmoidScaleRows.
hipError_t AddScaledRows(const float* src, int64_t rows, int64_t dim, const int32_t* dst_rows,
                         const float* scales, float* dst, hipStream_t stream);
hipError_t SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* gate,
                            hipStream_t stream);
hipError_t GdnGates(const float* in, int64_t ld, int64_t tokens, int heads, int64_t b_offset,
                    int64_t a_offset, const float* dt_bias, const float* neg_a, float* g,
                    float* beta, hipStream_t stream);
hipError_t MoeRoute(const float* logits, int64_t tokens, int experts, int top_k, bool renormalise,
                    int32_t* ids, float* weights, hipStream_t stream);

// The routed experts of a MoE layer on the device (moe_routing.hip, moe_experts.hip;
// HipKernelBackend::MoeExperts).
// A pick is entry i = token * top_k + j of MoeRoute's ids / weights. MoeSortPicks buckets the
// picks by expert (experts in ascending id, an expert's picks in pick order) and cuts every
// expert's range into tiles of MoeTileRows() picks; MoeRowsMma runs a product over every tile
// with the tile's expert's weights; MoeCombine adds each token's weighted rows to `out` in
// ascending expert id. Picks naming no expert (ids outside [0, experts), from NaN logits) are
// left out.
int MoeMaxExperts();
inline constexpr int kMoeMaxTopK = 32;  // MoeMaxTopK(): a token's picks kept in arrays this long.
int MoeMaxTopK();
int MoeTileRows();
inline constexpr int kMoeMaxParts = 4;
// One expert's bf16 weight matrix (raw bits) in up to kMoeMaxParts parts: part p holds rows
// [end[p - 1], end[p]) (k values each, contiguous). A device table holds one per expert.
struct MoeExpertParts {
  const uint16_t* data[kMoeMaxParts];
  int64_t end[kMoeMaxParts];
  int count;
};
// Rows of one more expert that every token takes (the MoE layer's shared expert), run in the
// grouped products' launches: `rows` input rows of x (ldx apart) in tiles of 8 over the one
// expert at `weights` (device memory), written to y (ldy apart) as the grouped rows are written.
// Null weights: none.
struct MoeSharedRows {
  const MoeExpertParts* weights = nullptr;
  const float* x = nullptr;
  int64_t ldx = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  int64_t rows = 0;
};
// A tile of one expert's picks: slots [start, start + rows) of the sorted order.
struct MoeTile {
  int32_t expert;
  int32_t start;
  int32_t rows;
};
// Sizes of MoeSortPicks' buffers for `picks` picks over `experts` experts, in tiles of
// `tile_rows` picks.
struct MoeSortSizes {
  int64_t chunks = 0;
  int64_t hist_ints = 0;  // hist and base.
  int64_t max_tiles = 0;  // The most tiles any routing gives.
};
MoeSortSizes MoeSortSizesFor(int64_t picks, int experts, int tile_rows);
// MoeRoute with a block per token (experts <= MoeMaxExperts(), top_k <= MoeMaxTopK(); else
// hipErrorInvalidValue): the same ids and weights, bit for bit (the sums in MoeRoute's order;
// tested), without one thread walking every expert top_k + 2 times.
hipError_t MoeRouteBlock(const float* logits, int64_t tokens, int experts, int top_k,
                         bool renormalise, int32_t* ids, float* weights, hipStream_t stream);
struct MoeSortBuffers {
  int32_t* hist;          // [hist_ints]
  int32_t* base;          // [hist_ints]
  int32_t* rank;          // [picks]
  int32_t* offsets;       // [experts]: each expert's first slot.
  MoeTile* tiles;         // [max_tiles]
  int32_t* num_tiles;     // [1]
  int32_t* sorted_picks;  // [picks]: slot -> pick.
  int32_t* slot_of_pick;  // [picks]: pick -> slot (-1: no expert).
};
// Tiles of `tile_rows` picks: MoeTileRows() for MoeRowsMma, MoeGemmTileRows() for MoeGemmBf16.
// `one_block`: calls of at most MoeMaxExperts() picks sort in one launch (the same outputs;
// hist, base and rank are then left unwritten).
hipError_t MoeSortPicks(const int32_t* ids, int64_t picks, int experts, int tile_rows,
                        const MoeSortBuffers& b, hipStream_t stream, bool one_block = false);
// How MoeRouteAndSort routes (every way gives MoeRoute's ids and weights, bit for bit): a
// thread per token (MoeRoute), a block per token (MoeRouteBlock), or a warp per token with the
// experts in registers (up to 512) or shared memory (NVIDIA; elsewhere a block), whose calls of at
// most 32 tokens and MoeMaxExperts() picks also sort in the same launch, and whose sorts of at most
// MoeMaxExperts() picks take one launch (HipKernelBackendOptions::moe_kernels).
enum class MoeRouting { kThread, kBlock, kWarp };
// For tests: adds to *mismatches (device memory) how many floats v the warp routing's division
// (moe_route::Divide, over a sum in [1, 2048]) gives other bits for v / sum than the `/`
// operator: every v in [0, 1] (the exps routing divides), and with `with_nans` every NaN of
// positive sign too (a NaN result matches any NaN). NVIDIA only (hipErrorNotSupported elsewhere).
hipError_t MoeRouteDivisionMismatches(float sum, bool with_nans, unsigned long long* mismatches,
                                      hipStream_t stream);
// Routes `tokens` tokens (ids and weights [tokens * top_k]) and sorts their picks into `b`
// (MoeSortPicks). A token's logits are `logits_ld` floats after the one before it (kWarp only;
// the other ways need logits_ld == experts).
hipError_t MoeRouteAndSort(const float* logits, int64_t logits_ld, int64_t tokens, int experts,
                           int top_k, bool renormalise, MoeRouting routing, int tile_rows,
                           int32_t* ids, float* weights, const MoeSortBuffers& b,
                           hipStream_t stream);
// y row `slot` = x row (sorted_picks[slot] / top_k, or `slot` with null sorted_picks) . the
// slot's expert's weights (n x k)^T, for every slot of the first *num_tiles of `tiles` (at most
// max_tiles; `tiles` must have max_tiles readable entries, past the count unused):
// MatMulRowsMma's arithmetic (its bits for that row and expert, with the same `bf16_inputs`).
// NVIDIA only. `weights_aligned`: every part's data is 16-byte aligned.
// `long_warps`: who does the work, never its arithmetic (the same bits for every value): with
// waves > 0 each warp takes as many of a column tile's k segments as keeps at least `waves`
// blocks for each place the device's `multiprocessors` hold (longer-lived warps where the call
// has many tiles); else a warp a segment, as MatMulRowsMma.
// `stream` (NVIDIA sm_90a builds, MoeRowsStreamSupported()): the call's units instead go to
// MoeRowsStream's long-lived blocks where it takes the shape (16-byte aligned rows and weights,
// k a multiple of 8), with the same bits.
struct MoeLongWarps {
  int multiprocessors = 0;
  int waves = 0;
  bool stream = false;
};
hipError_t MoeRowsMma(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                      const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                      const MoeExpertParts* weights, bool weights_aligned, int64_t n, int64_t k,
                      float* y, int64_t ldy, bool bf16_inputs, hipStream_t stream,
                      const MoeSharedRows& shared = {}, const MoeLongWarps& long_warps = {});
// MoeRowsMma over each expert's [gate; up] rows (2 * width, width a multiple of 8) writing
// act row `slot` (width values) = silu(gate) * up, SiluMul's expression over MoeRowsMma's gate
// and up values (their bits), in one launch: column tile c takes gate rows 8c.. and up rows
// width + 8c.. (as MatMulRowsMmaSiluMul).
hipError_t MoeRowsMmaSiluMul(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                             const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                             const MoeExpertParts* weights, bool weights_aligned, int64_t width,
                             int64_t k, float* act, bool bf16_inputs, hipStream_t stream,
                             const MoeSharedRows& shared = {}, const MoeLongWarps& long_warps = {});
// How many grouped products have run with warps of several segments in this process, for tests.
int64_t MoeLongWarpLaunches();
// The grouped products of MoeRowsMma (silu false: y = x . W^T over n columns) or
// MoeRowsMmaSiluMul (silu true: act over `width`), with MoeRowsMma's k cut (`segments` of
// `segment` values, mma_rows::SegmentsFor(n, k)) and bits, by one long-lived block for each of
// `multiprocessors` (moe_stream.hip): a producer warp streams each unit's 16 weight rows into
// shared memory with bulk asynchronous copies, a warp a segment computes. The caller vouches
// that every weight part is 16-byte aligned; hipErrorNotSupported (nothing launched) where k %
// 8 != 0, x or the shared rows are not 16-byte aligned rows, the units do not fit its shared
// memory, or where not built (AMD, or without CAIRN_HIP_WGMMA).
bool MoeRowsStreamSupported();
hipError_t MoeRowsStream(bool silu, const float* x, int64_t ldx, const int32_t* sorted_picks,
                         int top_k, const MoeTile* tiles, const int32_t* num_tiles,
                         int64_t max_tiles, const MoeExpertParts* weights, int64_t n, int64_t k,
                         float* y, int64_t ldy, bool bf16_inputs, int64_t width, int segments,
                         int64_t segment, int multiprocessors, hipStream_t stream,
                         const MoeSharedRows& shared);
// Launches of MoeRowsStream so far in this process (for tests).
int64_t MoeStreamLaunches();
// The stamps a block of MoeLayerStream's launch leaves in MoeLayerStreamArgs::trace, in order
// (the device's %globaltimer, ns; 0 where the block did not get there): its entry, past the wait
// for the kernel before, the routing and sort done (every warp), consumer warp 0 done with its
// gate/up units, every consumer done with them, warp 0 done with its down units, the grid's count
// of finished blocks reached (the sum's barrier), thread 0's share of the sum done, the
// producer's last stage issued, with MoeLayerStreamArgs::trace_route_twice only, warp 0's
// extra routings of the first token (between the wait and the routing proper): once, twice;
// then warp 0 done routing its tokens, and every consumer warp done routing (before the sort).
inline constexpr int kMoeLayerTracePoints = 13;

// Both grouped products of a MoE decode layer in one launch (moe_stream_layer.hip): the
// gate/up product with SiLU-mul into `act`, then the down product into `ys` (and the shared
// expert's rows, as MoeRowsMmaSiluMul and MoeRowsMma fold them), by one long-lived block for
// each of `multiprocessors`, its producer warp streaming the block's gate/up and then down
// weight rows through shared memory; each tile's down units wait for its activations on a
// counter in `counters`. The bits of MoeRowsMmaSiluMul followed by MoeRowsMma (the segments of
// mma_rows::SegmentsFor). The caller vouches that every weight part is 16-byte aligned.
struct MoeLayerStreamArgs {
  // The routing's tiles (MoeRouteAndSort), or, where `logits` is given, none: the launch routes
  // and sorts the call itself (MoeLayerStreamRoutes).
  const MoeTile* tiles = nullptr;
  const int32_t* num_tiles = nullptr;
  int64_t max_tiles = 0;  // MoeSortSizesFor's, for the call's picks either way.
  const int32_t* sorted_picks = nullptr;
  int top_k = 0;
  // Routing inside the launch: MoeRouteAndSort's inputs (MoeRouting::kWarp), and where the
  // launch stores the picks for MoeCombine (ids, weights and slot_of_pick, picks long).
  const float* logits = nullptr;
  int64_t logits_ld = 0;
  int64_t tokens = 0;
  int experts = 0;
  int tile_rows = 0;
  bool renormalise = false;
  int32_t* ids = nullptr;
  float* weights = nullptr;
  int32_t* slot_of_pick = nullptr;
  // The sum inside the launch too (needs the routing inside): MoeCombine's wide sum into `out`
  // (tokens x hidden, the shared expert's rows already there or written by this launch), with
  // its gate and residual (either may be null); null out: MoeCombine after the launch.
  float* out = nullptr;
  const float* out_gate = nullptr;
  int64_t out_gate_ld = 0;
  float* residual = nullptr;
  // The router product inside the launch too (needs the routing inside): router_out = x
  // router^T (router_rows rows of hidden: the experts' rows, then any such as the shared gate's,
  // at most logits_ld), tokens rows logits_ld apart, with MatMulRowsMma's bits; router_out must
  // be `logits`, which the routing (and out_gate, where it points there) then reads. One more
  // counter (max_tiles + the shared rows' tiles + 2). Null: the logits are given.
  const MoeExpertParts* router = nullptr;
  int64_t router_rows = 0;
  float* router_out = nullptr;
  const float* x = nullptr;  // Token rows, ldx apart: the gate/up inputs.
  int64_t ldx = 0;
  const MoeExpertParts* gate_up = nullptr;  // Each expert 2 width x hidden.
  const MoeExpertParts* down = nullptr;     // Each expert hidden x width.
  int64_t hidden = 0;
  int64_t width = 0;                     // A multiple of 8.
  float* act = nullptr;                  // Picks x width, by slot.
  float* ys = nullptr;                   // Picks x hidden, by slot.
  MoeSharedRows shared_up, shared_down;  // The shared expert's rows (both or neither).
  bool bf16_inputs = false;
  int multiprocessors = 0;
  // A cooperative launch (LaunchKernelWhole: the device starts the grid only with every block
  // resident, which the waits inside rest on), else a plain one; a device that cannot hold the
  // grid at once refuses the cooperative launch (hipErrorNotSupported, nothing launched).
  bool cooperative = false;
  // Where each block stamps its phases (kMoeLayerTracePoints values a block, block b's at
  // trace + b kMoeLayerTracePoints; null: none), for the benchmark.
  uint64_t* trace = nullptr;
  // With `trace`: warp 0 first routes the call's first token twice more (its picks overwritten
  // by the routing proper), stamping each, so that a cold routing can be told from a warm one.
  bool trace_route_twice = false;
  // The share of each product's stage loads the blocks split evenly ahead of the launch, in
  // sixteenths: 16, all of them (block b takes loads [b L / G, (b + 1) L / G)); below 16, the
  // rest are taken one at a time from a counter by whichever block's producer is ready first,
  // so a block that streams slower than the others takes fewer (two more counters: max_tiles +
  // the shared rows' tiles + 4). Which block runs a load never enters its arithmetic: the same
  // bits.
  int static_sixteenths = 16;
  // The routing inside in code of a fraction of the size (RouteTokenInWarp<true>: each
  // expert's exp and division in a loop of a few experts a turn instead of unrolled for all, one
  // copy of the routing in the kernel), which each launch's blocks fetch cold from memory. The
  // same bits; false: the unrolled code.
  bool compact_route = true;
  // Two arrays of counter_capacity counters, each at least max_tiles + the shared rows' tiles:
  // `counters` zero at the launch, `next_counters` zeroed by it for the next one.
  uint32_t* counters = nullptr;
  uint32_t* next_counters = nullptr;
  int64_t counter_capacity = 0;
};
// hipErrorNotSupported (nothing launched) where the shapes' segments do not fit a stage (at
// most 256 values a segment), k % 8 != 0 for either product, an input or activation row is not
// 16-byte aligned, the counters are too few (max_tiles + the shared rows' tiles, one more with
// the sum inside, two with the router, four where loads are taken from counters), the stages do not
// fit shared memory, there is no tile at all, the routing or the sum inside is asked for where
// MoeLayerStreamRoutes / MoeLayerStreamSums say no, or where not built (AMD, or without
// CAIRN_HIP_WGMMA), or where a cooperative launch is asked for and the device cannot hold the grid
// at once. Its grid must become resident whole (moe_stream_layer.hip): the cooperative launch makes
// sure of it; with a plain one the caller launches nothing beside it that holds multiprocessors for
// good.
bool MoeLayerStreamSupported();
// Whether the launch routes and sorts a call of `tokens` x `top_k` picks over `experts` itself
// (at most 512 experts and 128 picks), and whether it can also sum it into `out` (hidden % 4
// == 0, 16-byte aligned rows).
bool MoeLayerStreamRoutes(int64_t tokens, int experts, int top_k);
bool MoeLayerStreamSums(int64_t hidden, const float* ys, const float* out, const float* residual);
hipError_t MoeLayerStream(const MoeLayerStreamArgs& args, hipStream_t stream);
// Launches of MoeLayerStream so far in this process (for tests).
int64_t MoeLayerStreamLaunches();
// The prefill path (calls that are not row-invariant; bf16 GEMM inputs): the picks' input rows
// rounded to bf16 once, a grouped bf16 GEMM on the matrix units over every expert's tiles of
// MoeGemmTileRows() picks, SiLU-mul rounded to bf16, the grouped GEMM again, MoeCombine.
// MoeGemmBf16: y row `slot` = a row `slot` (bf16) . the slot's expert's weights (n x k, bf16)^T,
// fp32 accumulation, for every slot of the first *num_tiles of `tiles`; an output element is
// one chain of matrix instructions over its own row and weight column, k in steps of 16 from 0,
// so its bits depend on k alone, never on the tile, the slot or the other rows. Needs k % 8 ==
// 0, 16-byte aligned `a` rows (lda % 8 == 0) and weights (`weights_aligned`); NVIDIA only
// (MoeGemmSupported()).
bool MoeGemmSupported();
int MoeGemmTileRows();
hipError_t MoeGemmBf16(const uint16_t* a, int64_t lda, const MoeTile* tiles,
                       const int32_t* num_tiles, int64_t max_tiles, const MoeExpertParts* weights,
                       bool weights_aligned, int64_t n, int64_t k, float* y, int64_t ldy,
                       hipStream_t stream);
// MoeGemmBf16's products on Hopper's warpgroup instructions (moe_gemm_wgmma.hip; builds for
// sm_90a only, MoeGemmWgmmaSupported()) over tiles of MoeGemmWgmmaTileRows(warpgroups) picks
// (blocks of `warpgroups` warpgroups, 2 or 3: 64 picks each), with the same conditions and
// n % 8 == 0; the same bits for either count. MoeGemmWgmmaSiluMul takes each expert's
// [gate; up] rows (2 * width, width % 8 == 0) and writes act row `slot` (width bf16 values,
// width apart) = bf16(silu(gate) * up), MoeSiluMulBf16's expression and rounding of the gate/up
// products; its input row for `slot` is a row `slot`, or with sorted_picks a row
// sorted_picks[slot] / top_k (the token's row, as MoeGatherBf16 would have copied it).
bool MoeGemmWgmmaSupported();
int MoeGemmWgmmaTileRows(int warpgroups);
hipError_t MoeGemmWgmma(const uint16_t* a, int64_t lda, const MoeTile* tiles,
                        const int32_t* num_tiles, int64_t max_tiles, const MoeExpertParts* weights,
                        bool weights_aligned, int64_t n, int64_t k, float* y, int64_t ldy,
                        int warpgroups, hipStream_t stream);
hipError_t MoeGemmWgmmaSiluMul(const uint16_t* a, int64_t lda, const int32_t* sorted_picks,
                               int top_k, const MoeTile* tiles, const int32_t* num_tiles,
                               int64_t max_tiles, const MoeExpertParts* weights,
                               bool weights_aligned, int64_t width, int64_t k, uint16_t* act,
                               int warpgroups, hipStream_t stream);
// MoeGemmWgmma's products with a producer warpgroup (moe_gemm_tma.hip; sm_90a builds on a device
// with tensor maps, MoeGemmTmaSupported()) over tiles of MoeGemmTmaTileRows(variant) picks: the
// weights by the tensor memory accelerator from `maps` (device memory, one MoeExpertMaps an
// expert beside its MoeExpertParts: part p's matrix encoded by EncodeBf16TensorMap with rows of
// k values, boxes of MoeGemmTmaBoxRows(variant, silu) rows by 64, swizzled; every part but the
// last a multiple of those rows long), the inputs by asynchronous copies. MoeGemmWgmma's
// conditions, arguments and bits (MoeGemmTmaSiluMul: MoeGemmWgmmaSiluMul's). `variant`: 1,
// blocks of 256 weight columns by 128 picks (two multiplying warpgroups); 2, 128 columns by 192
// picks (three); else hipErrorInvalidValue.
struct alignas(128) TensorMap {  // A tensor map: see "Tensor maps" below.
  unsigned char bytes[128];
};
// The values of a swizzled box's row: 128 bytes of bf16, the warpgroup instructions' k step
// of a stage.
inline constexpr int kSwizzledBoxCols = 64;
struct MoeExpertMaps {
  TensorMap part[kMoeMaxParts];
};
bool MoeGemmTmaSupported();
// Both 0 for a variant that is not 1 or 2.
int MoeGemmTmaTileRows(int variant);
int MoeGemmTmaBoxRows(int variant, bool silu);
// MoeGemmTma and MoeGemmTmaSiluMul launches so far in this process (for the tests).
int64_t MoeGemmTmaLaunches();
hipError_t MoeGemmTma(const uint16_t* a, int64_t lda, const MoeTile* tiles,
                      const int32_t* num_tiles, int64_t max_tiles, const MoeExpertParts* weights,
                      const MoeExpertMaps* maps, int64_t n, int64_t k, float* y, int64_t ldy,
                      int variant, hipStream_t stream);
hipError_t MoeGemmTmaSiluMul(const uint16_t* a, int64_t lda, const int32_t* sorted_picks, int top_k,
                             const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                             const MoeExpertParts* weights, const MoeExpertMaps* maps,
                             int64_t width, int64_t k, uint16_t* act, int variant,
                             hipStream_t stream);
// out row `slot` = x row sorted_picks[slot] / top_k rounded to bf16 (nearest even:
// RoundRowsToBf16's bits), k values, for every slot of the first *num_tiles of `tiles` (tiles of
// at most `tile_rows` picks, a multiple of 8).
hipError_t MoeGatherBf16(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                         const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                         int64_t k, uint16_t* out, int64_t ld_out, int tile_rows,
                         hipStream_t stream);
// out[r, i] = bf16(silu(gu[r, i]) * gu[r, width + i]) for `rows` rows of gu (row stride
// 2 * width): SiluMul's expression, then RoundRowsToBf16's rounding (their bits).
hipError_t MoeSiluMulBf16(const float* gu, int64_t rows, int64_t width, uint16_t* out,
                          hipStream_t stream);
// out row t = out row t + weights[i] * y row slot_of_pick[i] for t's picks i in ascending
// expert id, one rounded addition a pick. `wide`: a block per (token, 256 columns), the picks'
// rows loaded eight at a time (the same bits; HipKernelBackendOptions::moe_kernels). With
// `wide` only: a non-null `gate` (token t's at gate[t * gate_ld]) first scales out row t by its
// sigmoid as SigmoidScaleRows does, and a non-null `residual` ([tokens, dim]) then has out row t
// added as AddScaledRows adds it (their bits; out is written as without them).
hipError_t MoeCombine(const float* y, const int32_t* ids, const float* weights,
                      const int32_t* slot_of_pick, int64_t tokens, int top_k, int64_t dim,
                      float* out, hipStream_t stream, bool wide = false,
                      const float* gate = nullptr, float* residual = nullptr, int64_t gate_ld = 1);

// y[m, n] (+)= x[m, k] . w[n, k]^T where every element is one reduction over k in an order that
// depends on k alone: rows never influence each other's bits. `multi_row`: calls of 2 or more
// rows take the kernel that shares each weight load among up to 16 rows (the same bits; slower
// on the H200, so HipKernelBackendOptions::multi_row_decode is off by default).
int64_t MatMulRowsMaxColumns();
hipError_t MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                      float* y, int64_t ldy, bool accumulate, bool multi_row, hipStream_t stream);
// A weight matrix of 1 to 4 parts for MatMulRowsParts: part p holds the next rows[p] rows (k
// values each, contiguous), fp32 or bf16 (raw bits).
struct RowWeights {
  const void* data[4];
  int64_t rows[4];
  int count;
  bool bf16;
  // The matrix-unit products (MatMulRowsMma*) load these weights as lines L2 evicts first (an
  // evict_first cache policy): the same values, other kernels' lines kept longer.
  bool streamed = false;
};
// MatMulRows over every part of `w` (n = the parts' rows together, at most
// MatMulRowsMaxColumns()): one launch per part, or one for all with `multi_row` (2 or more
// rows). bf16 weights widen exactly in registers: the bits of MatMulRows over the widened
// weights, reading half the bytes.
hipError_t MatMulRowsParts(const float* x, int64_t m, int64_t k, int64_t ldx, const RowWeights& w,
                           float* y, int64_t ldy, bool accumulate, bool multi_row,
                           hipStream_t stream);
// MatMulRowsParts over bf16 weights on the matrix units (NVIDIA; false / hipErrorNotSupported
// on AMD): every fp32 input split exactly into three bf16 pieces, or with `bf16_inputs` rounded
// to bf16 (nearest even, as the prefill GEMM's inputs; a third of the matrix instructions), each
// output element a fixed sequence of matrix instructions over its own input row and weight
// column, k cut into segments chosen by n and k alone and summed in order. Rows never influence
// each other's bits; with three pieces the bits differ from MatMulRowsParts' (another order)
// within fp32 rounding of the product, with bf16 inputs by the inputs' rounding.
// `tiles_of_8`: calls of 9 to 16 rows run two tiles of 8 rows instead of one of 16 (the same
// bits). `variant` picks how tiles of 8 rows on the vector path (k % 8 == 0, 16-byte aligned
// rows) load: 0, four steps of k in flight a warp, two blocks a multiprocessor; 1, three steps
// and three blocks; -1, whichever fills `multiprocessors` multiprocessors better for the call's
// grid, and for calls of 9 to 16 rows with `tiles_of_8` variant 2's tile where its grid fills
// the device; 2, calls of 9 to 16 rows as one tile of 16 whose second set's inputs are loaded
// with the weights (three steps in flight), other calls as -1. The same bits. Other values:
// hipErrorInvalidValue. k is cut into segments by (segment_n, k) (segment_n: the columns of the
// whole matrix where `w` is a range of it, else w's own), so that a range's columns are the
// whole product's bits. With `bf16_inputs` and a non-null `staging` (16-byte aligned device
// memory of MatMulRowsMmaStagingBytes(m, k)), one kernel first rounds the inputs into it as the
// product would round them, and the product loads them as bf16: half the bytes of fp32 inputs,
// the same bits. Ignored without bf16_inputs. `prefetch_k` > 0: each warp first asks the first
// prefetch_k weights of each of its columns' k segment into L2, before the kernel's wait for
// the previous one (overlapped launches), so that their fetch overlaps that kernel's end. The
// same bits.
bool MatMulRowsMmaSupported();
int64_t MatMulRowsMmaStagingBytes(int64_t m, int64_t k);
hipError_t MatMulRowsMma(const float* x, int64_t m, int64_t k, int64_t ldx, const RowWeights& w,
                         float* y, int64_t ldy, bool accumulate, bool bf16_inputs, bool tiles_of_8,
                         int variant, int multiprocessors, int64_t segment_n, uint16_t* staging,
                         int64_t prefetch_k, hipStream_t stream);
// MatMulRowsMma with bf16_inputs over inputs already rounded to bf16 as it rounds them (a
// norm's or SiLU-mul's `rounded` rows, RoundBf16), `xb` rows `ldxb` apart: the bits of
// MatMulRowsMma with bf16_inputs over the fp32 rows they were rounded from.
hipError_t MatMulRowsMmaRounded(const uint16_t* xb, int64_t m, int64_t k, int64_t ldxb,
                                const RowWeights& w, float* y, int64_t ldy, bool accumulate,
                                bool tiles_of_8, int variant, int multiprocessors,
                                int64_t segment_n, int64_t prefetch_k, hipStream_t stream);
// act[r * width + j] = silu(gate_j . x_r) * (up_j . x_r) for w = [gate; up] (2 * width rows,
// width a multiple of 8, vector loads possible: 16-byte aligned parts and rows), inputs with
// bf16_inputs as fp32 rows `x` or already rounded rows `xb` (exactly one non-null), rows `ldx`
// apart: the bits of MatMulRowsMma into gate/up rows then SiluMul, in one launch (column tile c
// takes gate rows 8c.. and up rows width + 8c..); where `act_rounded` is not null, the
// activation rounded as SiluMul's `rounded`. Other arguments as MatMulRowsMma's;
// hipErrorInvalidValue for shapes it does not take.
hipError_t MatMulRowsMmaSiluMul(const float* x, const uint16_t* xb, int64_t m, int64_t k,
                                int64_t ldx, const RowWeights& w, int64_t width, float* act,
                                uint16_t* act_rounded, bool tiles_of_8, int variant,
                                int multiprocessors, int64_t prefetch_k, hipStream_t stream);
// The causal conv MatMulRowsMmaConv does after its product: row r of the call is the one token
// of a sequence whose conv window state (kernel - 1 rows of `channels` values, oldest first) is
// `state[r]` and whose conv output row is `out[r]`; `w` holds `kernel` taps a channel.
constexpr int kMatMulRowsConvMaxRows = 16;
constexpr int kMatMulRowsConvMaxTaps = 4;  // The models' conv has 4.
struct RowsConv {
  const float* w = nullptr;
  int kernel = 0;
  int64_t channels = 0;
  float* state[kMatMulRowsConvMaxRows] = {};
  float* out[kMatMulRowsConvMaxRows] = {};
};
// MatMulRowsMma (or MatMulRowsMmaRounded where `xb` is not null; exactly one of x and xb) with
// bf16 inputs into y (not accumulating), then, in the same launch, the causal conv with SiLU of
// columns [0, conv.channels) of each of the m <= kMatMulRowsConvMaxRows rows as one token of
// its sequence (CausalConvSiluBatch's bits for `in` = that row of y, one token each: the output
// and the state advanced by the row's values), by the lane that writes the column's value.
// Vector loads only (as MatMulRowsMmaSiluMul); hipErrorInvalidValue for what it does not take.
hipError_t MatMulRowsMmaConv(const float* x, const uint16_t* xb, int64_t m, int64_t k, int64_t ldx,
                             const RowWeights& w, float* y, int64_t ldy, const RowsConv& conv,
                             bool tiles_of_8, int variant, int multiprocessors, int64_t segment_n,
                             int64_t prefetch_k, hipStream_t stream);
// out row r (row stride ld_out) = x row r rounded to bf16 (nearest even), `k` values per row:
// the input of a bf16 GEMM.
hipError_t RoundRowsToBf16(const float* x, int64_t m, int64_t k, int64_t ldx, uint16_t* out,
                           int64_t ld_out, hipStream_t stream);
// out[i] = in[i] widened from bf16 to fp32 (exact), `n` values.
hipError_t WidenBf16(const uint16_t* in, int64_t n, float* out, hipStream_t stream);

// The gated delta rule (the layout of GatedDeltaArgs). chunk == 0: the recurrent form, one
// token after another. chunk > 0: the chunked form; the chunk-local products of up to
// `segment_tokens` tokens (a multiple of chunk) are computed in parallel into the workspace,
// then one pass per head walks the chunks, carrying the state.
struct GatedDeltaLaunch {
  const float* q;
  const float* k;
  const float* v;
  const float* g;
  const float* beta;
  float* state;
  float* out;
  int64_t tokens;
  int k_heads;
  int v_heads;
  int dk;
  int dv;
  int chunk;
  int64_t qk_ld;  // Floats between tokens' rows of q and k (at least k_heads * dk).
  int64_t v_ld;   // Of v (at least v_heads * dv); out's rows are packed.
};
// GatedDeltaRecurrentBatch over one token a sequence whose q and k have not been L2-normalised
// and whose gates have not been worked out: each block normalises its key head's k and q rows
// (L2NormalizeTwo's arithmetic, q scaled by q_scale) and works out its head's g and beta from
// gate_rows[i] (sequence i's projection row: b at b_offset + head, a at a_offset + head;
// GdnGates' arithmetic): the bits of L2NormalizeTwo, GdnGates and GatedDeltaRecurrentBatch, in
// one launch, without writing q, k, g or beta. dk at most 256; NVIDIA only.
struct GatedDeltaPrepArgs {
  int64_t b_offset;
  int64_t a_offset;
  const float* dt_bias;
  const float* neg_a;
  float q_scale;
  float eps;
};
// With `norm`: then the gated RMS norm of each head's outputs (GatedRmsNormHeads' arithmetic
// and bits, the rows `norm->rows[i]` of its x, which is the calls' outputs), by the head's blocks
// in one cluster; the raw outputs are then written only where y is not out. dv as
// GatedDeltaNormSupported allows. min_blocks: 4 compiles the kernel for four resident blocks a
// multiprocessor (one wave of four sequences' blocks on a 132-multiprocessor device; dk up to
// 128, else as 1); 1 lets the compiler take the registers it likes. Every call of the same dk,
// dv and v_heads. The same bits for every min_blocks.
struct GatedDeltaNorm {
  const float* z;  // Row r's gates of head h at z + r z_ld + h dv.
  int64_t z_ld;
  const float* w;  // dv weights.
  float eps;
  float* y;             // Row r's head h at y + (r v_heads + h) dv; may be x.
  uint16_t* rounded;    // Null, or y's values rounded to bf16 (RoundBf16), laid out as y.
  const int64_t* rows;  // Host array: call i's row.
};
hipError_t GatedDeltaRecurrentPrepared(const GatedDeltaLaunch* a, const float* const* gate_rows,
                                       int count, const GatedDeltaPrepArgs& prep,
                                       const GatedDeltaNorm* norm, int min_blocks,
                                       hipStream_t stream);
bool GatedDeltaPreparedSupported();  // NVIDIA builds.
bool GatedDeltaNormSupported(int dv);  // NVIDIA builds: dv a multiple of 32, at most 256.
int GatedDeltaPreparedMaxHeadDim();
int GatedDeltaMaxHeadDim();
int GatedDeltaMaxChunk();
size_t GatedDeltaPrepSharedBytes(int chunk, int dk, int dv);
size_t GatedDeltaScanSharedBytes(int chunk, int dk);
int64_t GatedDeltaWorkspaceFloats(const GatedDeltaLaunch& a, int64_t segment_tokens);
hipError_t GatedDelta(const GatedDeltaLaunch& a, int64_t segment_tokens, float* workspace,
                      hipStream_t stream);
// The chunked form on the matrix units (gated_delta_mma.hip): the same chunk algorithm with
// every matrix product on NVIDIA's mma.sync, each fp32 operand split into two bf16 pieces (a
// product within a few 2^-17 of fp32); state, decays and the triangular solve stay fp32.
// Supported: NVIDIA, chunk 64, dk 64 or 128, dv a multiple of 8, enough shared
// memory. `workspace` (GatedDeltaMmaWorkspaceFloats) must be 16-byte aligned.
bool GatedDeltaMmaSupported(const GatedDeltaLaunch& a, int max_shared_bytes);
int64_t GatedDeltaMmaWorkspaceFloats(const GatedDeltaLaunch& a, int64_t segment_tokens);
hipError_t GatedDeltaMma(const GatedDeltaLaunch& a, int64_t segment_tokens, float* workspace,
                         hipStream_t stream);
// GatedDeltaMma over q and k not yet L2-normalised and gates not yet worked out: the prepare
// kernel of each (v-head, chunk) normalises its chunk's k and q rows (L2NormalizeTwo's
// arithmetic, q scaled by prep.q_scale) and works out its head's g and beta from the tokens'
// projection rows (token t's at gate_rows + t gate_ld: b at prep.b_offset + head, a at
// prep.a_offset + head; GdnGates' arithmetic). The bits of L2NormalizeTwo, GdnGates and
// GatedDeltaMma, without writing q, k, g or beta, or reading g and beta.
struct GatedDeltaMmaInputs {
  const float* gate_rows;
  int64_t gate_ld;
  GatedDeltaPrepArgs prep;
};
// GatedDeltaMma with its kernels chosen: the prepare kernels, the scans, or both (the kernel
// benchmark times them apart; a scan alone reads what an earlier prepare left); `inputs` null,
// or the rule's inputs as they come (GatedDeltaMmaInputs).
hipError_t GatedDeltaMmaParts(const GatedDeltaLaunch& a, int64_t segment_tokens, float* workspace,
                              bool prepare, bool scan, const GatedDeltaMmaInputs* inputs,
                              hipStream_t stream);
// The recurrent form (chunk ignored) of up to GatedDeltaMaxBatch() sequences in one launch:
// `count` launches of equal k_heads, v_heads, dk and dv with distinct states. Each sequence's
// blocks run the one-sequence kernel's code, so its bits are those of its own GatedDelta call.
int GatedDeltaMaxBatch();
hipError_t GatedDeltaRecurrentBatch(const GatedDeltaLaunch* a, int count, hipStream_t stream);

// Tensor maps of the tensor memory accelerator (NVIDIA sm_90: cp.async.bulk.tensor; tensor_map.hip,
// tma_device.h): a box of a matrix copied into shared memory by one instruction, counted on a
// shared-memory barrier, optionally in the 128-byte swizzled layout Hopper's warpgroup
// instructions read. The groundwork for GEMMs whose operands a producer warp feeds (HIP README,
// forty-fifth round). A map (TensorMap, above) is 128 bytes the driver encodes; kernels read it
// from global or parameter memory.
// Whether this build and its device can encode and use tensor maps (NVIDIA sm_90a builds on an
// sm_90 device; false on AMD and elsewhere).
bool TensorMapsSupported();
// Encodes into `map` the bf16 matrix at `base` (16-byte aligned): `rows` rows of `cols` values,
// rows `row_stride` values apart (a multiple of 8), read in boxes of box_rows x box_cols values
// (box_rows 1 to 256; box_cols a multiple of 8, at most 256, and kSwizzledBoxCols with
// `swizzle128`),
// values past the matrix reading as zeros. With `swizzle128` a box lands in shared memory
// (1024-byte aligned) as rows of 128 bytes whose 16-byte chunk c of row r sits at chunk c ^ (r %
// 8), the layout of wgmma_device.h's Swizzled; else as plain rows of box_cols values.
// hipErrorNotSupported where TensorMapsSupported() is false; hipErrorInvalidValue for arguments
// outside those bounds or a map the driver refuses.
hipError_t EncodeBf16TensorMap(TensorMap* map, const void* base, int64_t rows, int64_t cols,
                               int64_t row_stride, int box_rows, int box_cols, bool swizzle128);
// The boxes of the matrix that `map` (a copy in device memory) describes, box (i, j) at rows
// i box_rows.. and columns j box_cols.. of `out` (box_rows row_boxes rows of box_cols col_boxes
// values), each copied into shared memory by one tensor copy and written out of it in matrix
// order (un-swizzled where `swizzle128`): the matrix itself, zeros past its rows and columns. For
// the tests of the maps and of the swizzled layout.
hipError_t TensorMapBoxesToRows(const TensorMap* map, int box_rows, int box_cols, bool swizzle128,
                                int64_t row_boxes, int64_t col_boxes, uint16_t* out,
                                hipStream_t stream);

}  // namespace cairn::infer::hip

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_KERNELS_H_
