#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_KERNEL_BACKEND_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_KERNEL_BACKEND_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/infer/kernels/hip/gpu_blas.h"
#include "services/infer/kernels/hip/hip_compat.h"
#include "services/infer/kernels/hip/hip_kernel_backend_options.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/kernel_backend.h"

namespace cairn::infer {

// The streams a copy can run on: kernels run on kCompute; kTransfer is for copies that overlap
// compute (background spill, restores).
enum class HipStream { kCompute, kTransfer };

class HipKernelBackend;

// The HIP backend's device memory (KernelBackend::memory()): hipMalloc'd allocations, copies
// on the backend's compute stream that complete before returning. Thread roles: as the backend.
class HipDeviceMemory final : public DeviceMemory {
 public:
  explicit HipDeviceMemory(HipKernelBackend* backend) : backend_(backend) {}
  const char* name() const override { return "hip"; }
  bool host_visible() const override { return false; }
  absl::StatusOr<void*> Allocate(int64_t bytes) override;
  void Free(void* device) override;
  absl::Status UploadQueued(void* device_dst, const void* host_src, int64_t bytes) override;
  absl::Status Upload(void* device_dst, const void* host_src, int64_t bytes) override;
  absl::Status Download(void* host_dst, const void* device_src, int64_t bytes) override;
  absl::Status DownloadRowsQueued(void* host_dst, int64_t dst_pitch, const void* device_src,
                                  int64_t src_pitch, int64_t row_bytes, int64_t rows) override;
  absl::Status WaitQueuedDownloads() override;
  absl::StatusOr<uint64_t> DownloadBackground(void* host_dst, const void* device_src,
                                              int64_t bytes) override;
  absl::StatusOr<bool> BackgroundDone(uint64_t ticket) override;
  absl::Status WaitBackground(uint64_t ticket) override;
  absl::Status Copy(void* device_dst, const void* device_src, int64_t bytes) override;
  absl::Status Zero(void* device_dst, int64_t bytes) override;
  absl::Status RegisterHost(void* host, int64_t bytes) override;
  absl::Status UnregisterHost(void* host) override;
  void* HostAlias(void* host) override;
  absl::Status Synchronize() override;

 private:
  HipKernelBackend* const backend_;
};

// The GPU backend: HIP kernels (kernels/hip/*.hip), GEMMs through the vendor BLAS shim, device
// memory, two streams and a workspace. Every pointer given to a KernelBackend operation is
// device memory from Allocate() (or inside it). Operations are enqueued on the compute stream
// and return before the device is done; Synchronize() waits and reports.
//
// Errors: KernelBackend's operations return nothing, so the first failure (a shape the kernels
// cannot take: InvalidArgument; a launch or device failure: Internal; out of memory:
// ResourceExhausted) is kept, later operations become no-ops, and status() / Synchronize()
// return it. Every hip* error becomes a Status here; nothing aborts.
//
// Numerics: fp32 activations with fp32 accumulation; every kernel reduces in an order fixed by
// the shape, so equal inputs give equal bits. bf16 weights stay bf16 on the device; the GEMM
// over them takes bf16-rounded inputs by default (HipKernelBackendOptions::bf16_gemm_inputs) and
// runs with a pinned algorithm, so a row's bits do not depend on m. The fp32 MatMulTransposed
// uses the vendor BLAS (deterministic per shape; its kernel may change with m); the row kernels
// behind MatMulRows, and Attention, never let a row's bits depend on the other rows of the call.
//
// Thread-compatible (KernelBackend): one caller thread at a time; each call makes the backend's
// device current on the calling thread.
class HipKernelBackend final : public KernelBackend {
 public:
  // Returns Unavailable when there is no usable device (no driver, no GPU, bad ordinal) and
  // InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<HipKernelBackend>> Create(
      const HipKernelBackendOptions& options);
  ~HipKernelBackend() override;

  // "hip-bf16" when GEMMs or prefill attention take bf16 inputs (options), "hip-fp32"
  // otherwise.
  absl::string_view name() const override;
  DeviceMemory* memory() override { return &memory_; }
  // The first error that leaves the device in doubt: a failed runtime call other than an
  // allocation (a kernel that faulted, a lost device, a failed copy). Kept for good: the
  // backend can run nothing more and its owner starts afresh. OK while it can run.
  absl::Status Fault() const override { return fault_; }
  // After a failed pass: forgets a kept error that is not a fault (device memory that could
  // not be allocated: ResourceExhausted; arguments an operation does not take:
  // InvalidArgument), waits for the work queued before it and returns OK; returns the fault
  // where there is one (or where the wait finds one).
  absl::Status Recover() override;

  // fp32 matrices of up to WeightMatrix::kMaxParts parts, and bf16 ones with bf16_weights.
  bool AcceptsWeightType(WeightType type) const override {
    return type == WeightType::kF32 || (type == WeightType::kBF16 && options_.bf16_weights);
  }
  void MatMulTransposedTyped(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                             float* y, int64_t ldy, bool accumulate) override;
  void MatMulRowsSiluMul(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* gu,
                         float* act) override;
  void MatMulRowsCausalConv(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                            int64_t ldy, absl::Span<const CausalConvArgs> convs) override;
  void MatMulRowsTyped(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                       int64_t ldy, bool accumulate) override;
  void EmbeddingGatherTyped(const WeightMatrix& table, const int32_t* ids, int64_t n,
                            float* out) override;

  void MatMulTransposed(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                        int64_t n, float* y, int64_t ldy, bool accumulate) override;
  void MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                  float* y, int64_t ldy, bool accumulate) override;
  void EmbeddingGather(const float* table, int64_t dim, const int32_t* ids, int64_t n,
                       float* out) override;
  void SplitHeadPairs(const float* in, int64_t rows, int heads, int head_dim, float* a,
                      float* b) override;
  void SplitHeadPairsStrided(const float* in, int64_t ld, int64_t rows, int heads, int head_dim,
                             float* a, float* b) override;
  void SigmoidMul(float* x, const float* gate, int64_t n) override;
  void GdnGates(const float* in, int64_t ld, int64_t tokens, int heads, int64_t b_offset,
                int64_t a_offset, const float* dt_bias, const float* neg_a, float* g,
                float* beta) override;
  void MoeRoute(const float* logits, int64_t tokens, int experts, int top_k, bool renormalise,
                int32_t* ids, float* weights) override;
  void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
               bool zero_centred, float* y) override;
  void GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w,
                    float eps, float* y) override;
  void RmsNormHeads(float* x, int64_t tokens, int heads, int64_t dim, int64_t ld, const float* w,
                    float eps, bool zero_centred) override;
  void GatedRmsNormHeads(const float* x, const float* z, int64_t tokens, int heads, int64_t dim,
                         int64_t z_ld, const float* w, float eps, float* y) override;
  void L2Normalize(float* x, int64_t rows, int64_t dim, float eps, float scale) override;
  void L2NormalizeTwo(float* a, float a_scale, float* b, float b_scale, int64_t tokens, int heads,
                      int64_t dim, int64_t ld, float eps) override;
  void Rope(float* x, int64_t tokens, int64_t ld, int heads, int head_dim, int rotary_dim,
            const float* inv_freq, int64_t first_position) override;
  void SiluMul(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t rows,
               int64_t dim, float* out) override;
  void CausalConvSilu(const float* in, int64_t ld_in, int64_t tokens, int64_t channels,
                      const float* w, int kernel, float* state, float* out) override;
  // Runs of calls of one shape (strides, heads, head_dim, rotary_dim, inv_freq) take one launch
  // per hip::RopeAppendMaxBatch() sequences; the bits of the per-sequence calls.
  void RopeAppendBatch(absl::Span<const RopeAppendArgs> batch) override;
  // In one launch a run of up to hip::RopeAppendMaxBatch() sequences where fuse_qk_norm_rope
  // allows and every sequence's rows lie in `n`'s at its shape; else the default's calls.
  void NormRopeAppendBatch(const QkNormArgs& n, absl::Span<const RopeAppendArgs> batch) override;
  void Attention(const AttentionArgs& args) override;
  // Runs of consecutive decode-path calls (at most attention_decode_max_tokens tokens, not
  // row_invariant) of equal heads and head_dim take one launch of each split-path kernel, up to
  // hip::AttentionMaxBatch() calls; the rest are Attention calls. The same bits as one call each.
  void AttentionBatch(absl::Span<const AttentionArgs> batch) override;
  void GatedDeltaRule(const GatedDeltaArgs& args) override;
  // Runs of calls with the same channels, weights and kernel and distinct states take one
  // launch (two with the state update) per hip::CausalConvMaxBatch() sequences.
  void CausalConvSiluBatch(absl::Span<const CausalConvArgs> batch) override;
  // With fuse_delta_inputs, where every call's q, k, g and beta are the inputs' rows of its
  // own tokens: the decode steps (one token, chunk 0, equal dv) in launches of up to
  // hip::GatedDeltaMaxBatch() sequences that normalise q and k and work out the gates inside
  // the rule (hip::GatedDeltaRecurrentPrepared), and the chunked calls on the matrix units with
  // that done by their prepare kernels (hip::GatedDeltaMmaInputs); q, k, g and beta are then
  // not written. Otherwise (any call neither takes) the default's three calls.
  void GatedDeltaStepBatch(const GatedDeltaInputs& inputs,
                           absl::Span<const GatedDeltaArgs> batch) override;
  // With fuse_delta_norm, where GatedDeltaStepBatch takes every call as a fused decode step and
  // the norm's rows are exactly those steps' outputs (dv as hip::GatedDeltaNormSupported
  // allows): the steps norm their heads inside their launch (hip::GatedDeltaNorm). Otherwise
  // GatedDeltaStepBatch, then GatedRmsNormHeads. The same bits.
  void GatedDeltaStepNormBatch(const GatedDeltaInputs& inputs,
                               absl::Span<const GatedDeltaArgs> batch,
                               const GatedNormHeadsArgs& norm) override;
  void GatedDeltaRuleBatch(absl::Span<const GatedDeltaArgs> batch) override;
  void CopyRows(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                int64_t ld_dst) override;
  void AddScaledRows(const float* src, int64_t rows, int64_t dim, const int32_t* dst_rows,
                     const float* scales, float* dst) override;
  void SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* gate) override;
  // See HipKernelBackendOptions::grouped_moe. Returns the backend's first error so far (the
  // device path does not wait for the device).
  absl::Status MoeExperts(const MoeExpertsArgs& args, ScratchArena& scratch) override;

  // A zero-filled buffer of device memory (memory()). Returns ResourceExhausted when the device
  // is full, InvalidArgument for a negative size. A zero-byte buffer has a null pointer.
  absl::StatusOr<DeviceBuffer> Allocate(int64_t bytes) {
    return DeviceBuffer::Allocate(&memory_, bytes);
  }
  // Copies `bytes` from host memory to device memory (or back) and waits for the copy.
  absl::Status Upload(void* device_dst, const void* host_src, int64_t bytes);
  absl::Status Download(void* host_dst, const void* device_src, int64_t bytes);
  // Enqueues a copy on `stream` between device memory and page-locked host memory, cut at every
  // address of `pin_boundaries` (the starts and ends of host registrations) that falls inside
  // the host range: a single copy across two registrations fails. The host memory must stay
  // valid until the stream is synchronised.
  absl::Status CopyToDevice(void* device_dst, const void* host_src, int64_t bytes,
                            absl::Span<const uintptr_t> pin_boundaries, HipStream stream);
  absl::Status CopyToHost(void* host_dst, const void* device_src, int64_t bytes,
                          absl::Span<const uintptr_t> pin_boundaries, HipStream stream);
  // Page-locks (registers) host memory for fast copies, and releases it.
  absl::Status RegisterHost(void* host, int64_t bytes);
  absl::Status UnregisterHost(void* host);
  // Waits for everything enqueued on `stream`; returns the first error of any operation since
  // Create or the last Recover.
  // Queued downloads (HipDeviceMemory::DownloadRowsQueued) run on a stream of their own and are
  // waited for by WaitQueuedDownloads, not here.
  absl::Status Synchronize(HipStream stream = HipStream::kCompute);
  // The first error of any operation since Create or the last Recover (without waiting for
  // the device): while it is kept, every operation fails with it.
  absl::Status status() const { return error_; }
  // How many times so far the host waited for the device: stream synchronisations (Upload,
  // Download, Synchronize, a new allocation's zeroing), device frees and an UploadQueued whose
  // staging was still being read. A steady decode step should wait once (the logits' download;
  // its token ids go up queued).
  int64_t host_waits() const { return host_waits_; }
  // Products and GEMMs so far that read a norm's or SiLU-mul's rounded copy of their inputs
  // (round_product_inputs_max_bytes) instead of their fp32 rows.
  int64_t rounded_input_reads() const { return rounded_input_reads_; }
  // One launches that ran a MoE layer's router product inside (moe_router_inside), and decode
  // step launches that normed their heads inside (fuse_delta_norm), so far.
  int64_t moe_router_inside_launches() const { return moe_router_inside_launches_; }
  int64_t delta_norm_inside_launches() const { return delta_norm_inside_launches_; }
  // The stream every kernel and the memory's copies run on, in order (for a benchmark's events).
  hipStream_t compute_stream() const { return compute_; }
  // Changes how later MatMulRowsTyped calls load (HipKernelBackendOptions::mma_rows_variant: -1
  // to 2; the same bits), so that a benchmark can compare them over one model. Returns
  // InvalidArgument for other values.
  absl::Status SetMmaRowsVariantForTest(int variant);
  // Sets HipKernelBackendOptions::mma_rows_bf16_inputs for later calls (the benchmark compares
  // both; they differ in bits).
  void SetMmaRowsBf16InputsForTest(bool on) { mma_rows_bf16_inputs_ = on; }
  // Sets HipKernelBackendOptions::grouped_moe_prefill (the benchmark compares both paths).
  void SetGroupedMoePrefillForTest(bool on) { grouped_moe_prefill_ = on; }
  // Sets HipKernelBackendOptions::moe_gemm_wgmma (the benchmark and tests compare both).
  void SetMoeGemmWgmmaForTest(bool on) { moe_gemm_wgmma_ = on; }
  // Sets HipKernelBackendOptions::moe_gemm_wgmma_warpgroups (2 or 3).
  void SetMoeGemmWgmmaWarpgroupsForTest(int n) { moe_wgmma_groups_ = n; }
  // Sets HipKernelBackendOptions::moe_gemm_tma (the same bits), for the benchmark.
  void SetMoeGemmTmaForTest(int variant) { moe_gemm_tma_ = variant; }
  // Sets HipKernelBackendOptions::moe_kernels (0 or 1; the same bits), for the benchmark.
  void SetMoeKernelsForTest(int kernels) { moe_kernels_ = kernels; }
  // Sets HipKernelBackendOptions::copy_rows_kernel (the same bytes), for the benchmark.
  void SetCopyRowsKernelForTest(bool on) { copy_rows_kernel_ = on; }
  // Sets HipKernelBackendOptions::mma_rows_staged_min_rows (the same bits), for the benchmark.
  void SetMmaRowsStagedMinRowsForTest(int rows) { mma_rows_staged_min_rows_ = rows; }
  // Sets HipKernelBackendOptions::mma_rows_staged_min_bytes (the same bits), for the benchmark.
  void SetMmaRowsStagedMinBytesForTest(int64_t bytes) { mma_rows_staged_min_bytes_ = bytes; }
  // Sets HipKernelBackendOptions::mma_rows_prefetch_k (the same bits), for the benchmark.
  void SetMmaRowsPrefetchKForTest(int64_t k) { mma_rows_prefetch_k_ = k; }
  // Sets HipKernelBackendOptions::round_product_inputs_max_bytes (the same bits), for the
  // benchmark.
  void SetRoundProductInputsMaxBytesForTest(int64_t bytes) {
    round_product_inputs_max_bytes_ = bytes;
  }
  // Sets HipKernelBackendOptions::fuse_gate_up_silu (the same bits), for the benchmark.
  void SetFuseGateUpSiluForTest(bool on) { fuse_gate_up_silu_ = on; }
  // Sets HipKernelBackendOptions::fuse_delta_inputs (the same bits), for the benchmark.
  void SetFuseDeltaInputsForTest(bool on) { fuse_delta_inputs_ = on; }
  // Sets HipKernelBackendOptions::fuse_conv_product (the same bits), for the benchmark.
  void SetFuseConvProductForTest(bool on) { fuse_conv_product_ = on; }
  // Sets HipKernelBackendOptions::fuse_qk_norm_rope (the same bits), for the benchmark.
  void SetFuseQkNormRopeForTest(bool on) { fuse_qk_norm_rope_ = on; }
  // NormRopeAppendBatch calls that took the one launch, for the tests.
  int64_t norm_rope_launches() const { return norm_rope_launches_; }
  // Sets HipKernelBackendOptions::fuse_delta_norm and delta_step_min_blocks (the same bits),
  // for the benchmark.
  void SetFuseDeltaNormForTest(bool on) { fuse_delta_norm_ = on; }
  // Every cluster launch of the delta rule's steps with the norm inside answers as a refused one
  // (hipErrorNotSupported, nothing run), as a device without room for a cluster would; clears
  // an earlier refusal, so the next call tries the cluster launch again.
  void SetRefuseClusterLaunchesForTest(bool on) {
    refuse_cluster_launches_for_test_ = on;
    delta_norm_refused_ = false;
  }
  void SetDeltaStepMinBlocksForTest(int blocks) { delta_step_min_blocks_ = blocks == 4 ? 4 : 1; }
  // Sets HipKernelBackendOptions::fold_shared_expert (the same bits), for the benchmark.
  void SetFoldSharedExpertForTest(bool on) { fold_shared_expert_ = on; }
  // Sets HipKernelBackendOptions::moe_product_waves (the same bits), for the benchmark.
  void SetMoeProductWavesForTest(int waves) { moe_product_waves_ = waves; }
  // Sets HipKernelBackendOptions::moe_stream_products (the same bits), for the benchmark.
  void SetMoeStreamProductsForTest(int mode) { moe_stream_products_ = mode; }
  // Sets HipKernelBackendOptions::moe_one_launch_max_tokens (the same bits), for the benchmark.
  void SetMoeOneLaunchMaxTokensForTest(int tokens) { moe_one_launch_max_tokens_ = tokens; }
  // Sets HipKernelBackendOptions::moe_router_inside (the same bits), for the benchmark.
  void SetMoeRouterInsideForTest(bool on) { moe_router_inside_ = on; }
  // Sets HipKernelBackendOptions::moe_one_launch_cooperative (the same bits), for the benchmark.
  void SetMoeOneLaunchCooperativeForTest(bool on) { moe_one_launch_cooperative_ = on; }
  // Sets HipKernelBackendOptions::moe_one_launch_static_sixteenths (0 to 16; the same bits),
  // for the benchmark.
  absl::Status SetMoeOneLaunchStaticSixteenthsForTest(int sixteenths);
  // Sets HipKernelBackendOptions::moe_compact_route (the same bits), for the benchmark.
  void SetMoeCompactRouteForTest(bool on) { moe_compact_route_ = on; }
  // The stage loads the last MoE one launch took from its counters (each block's producer
  // counts one more where it found none left), both products together; 0 where it took none
  // (static_sixteenths 16). Waits for the device; for tests.
  absl::StatusOr<int64_t> MoeOneLaunchTakenLoadsForTest();
  // Sets HipKernelBackendOptions::stream_product_weights (the same bits), for the benchmark.
  void SetStreamProductWeightsForTest(int mode) { stream_product_weights_ = mode; }
  // The next `launches` MoE one launches (hip::MoeLayerStream) stamp their blocks' phases into
  // `trace`, device memory of launches x MultiprocessorsForTest() x hip::kMoeLayerTracePoints
  // values, launch after launch (null: none), for the benchmark; MoeLayerTracedForTest() counts
  // the launches stamped since. `route_twice`: MoeLayerStreamArgs::trace_route_twice.
  void SetMoeLayerTraceForTest(uint64_t* trace, int64_t launches, bool route_twice = false) {
    moe_layer_trace_ = trace;
    moe_layer_trace_launches_ = launches;
    moe_layer_traced_ = 0;
    moe_layer_trace_twice_ = route_twice;
  }
  int64_t MoeLayerTracedForTest() const { return moe_layer_traced_; }
  int MultiprocessorsForTest() const { return multiprocessors_; }
  // Counts `n` multiprocessors on the device instead of the device's own count (the grids sized
  // by it; a one launch of more blocks than the device holds at once is refused), for tests.
  void SetMultiprocessorsForTest(int n) { multiprocessors_ = n; }
  // Makes later device allocations of more than `bytes` fail as the device's would without the
  // memory (ResourceExhausted); -1 (the default) takes the limit off. For tests of recovery.
  void SetAllocationLimitForTest(int64_t bytes) { allocation_limit_for_test_ = bytes; }
  // Changes the layout of later matrix-unit prefill attention calls
  // (HipKernelBackendOptions::attention_mma_variant; the same bits). InvalidArgument for values
  // outside 0 to hip::kAttentionMmaVariants - 1.
  absl::Status SetAttentionMmaVariantForTest(int variant);
  // Changes the split path's blocks of later calls (HipKernelBackendOptions::
  // attention_decode_variant; the same bits). InvalidArgument outside 0 to
  // hip::kAttentionDecodeVariants - 1.
  absl::Status SetAttentionDecodeVariantForTest(int variant);
  // Changes the key ranges a decode block of later calls takes
  // (HipKernelBackendOptions::attention_decode_ranges_per_block; the same bits).
  // InvalidArgument unless 0, 1, 2 or 4.
  absl::Status SetAttentionDecodeRangesPerBlockForTest(int ranges);

  // Returns the [offset, length) pieces of a host range [host, host + bytes) cut at the
  // boundaries inside it. Exposed for tests.
  static std::vector<std::pair<int64_t, int64_t>> SplitAtBoundaries(
      uintptr_t host, int64_t bytes, absl::Span<const uintptr_t> boundaries);

 private:
  friend class HipDeviceMemory;
  HipKernelBackend(const HipKernelBackendOptions& options, int max_shared_bytes);

  // hipMalloc of `bytes` (> 0), zero-filled.
  absl::StatusOr<void*> AllocateDevice(int64_t bytes);

  // Makes the device current; false when an earlier error stopped the backend. Forgets the
  // rounded rows (rounded_) unless `keep_rounded` (the products, which only read them).
  bool Enter(bool keep_rounded = false);
  // Where an operation writing `count` floats in `rows` rows (tokens) of `width` should also
  // write them rounded to bf16 (hip::RmsNorm's `rounded`), or null: rows of a multiple of 8
  // values within round_product_inputs_max_bytes and _min_rows (rows -1: not known), with
  // products to read them and the buffer there.
  // The buffer is the one of rounded_buffers_ that rounded_ does not use (*buffer), so that an
  // operation may read one rounded copy and write the next.
  uint16_t* RoundedOutput(int64_t rows, int64_t count, int64_t width, int* buffer);
  // GatedDeltaStepBatch, and with `norm` GatedDeltaStepNormBatch's norm where the steps take it
  // (fuse_delta_norm): true when the norm is done (or the backend failed), false when the
  // caller must still run it.
  bool StepBatch(const GatedDeltaInputs& inputs, absl::Span<const GatedDeltaArgs> batch,
                 const GatedNormHeadsArgs* norm);
  // The rounded copy of the rows a product reads (m rows of k values, ldx apart, at x), or null
  // where rounded_ does not hold all of them at a 16-byte aligned start and stride.
  // `w`'s bf16 parts (at most hip::RowWeights' count) for a one-launch product of m rows.
  hip::RowWeights Bf16Parts(const WeightMatrix& w, int64_t m) const;
  // Whether MatMulRowsMma takes `w` for m rows in one launch with the fused epilogues (bf16
  // weights in 16-byte aligned parts on the matrix units, k a multiple of 8).
  bool OneLaunchMmaProduct(const WeightMatrix& w, int64_t m, int64_t ldy) const;
  // Whether the product's launch can do `convs` (each one token whose input is the product's
  // row of its index; one shape; distinct states); fills `conv` where it can.
  static bool ConvFitsProduct(absl::Span<const CausalConvArgs> convs, int64_t m,
                              const WeightMatrix& w, const float* y, int64_t ldy,
                              hip::RowsConv* conv);
  const uint16_t* RoundedInputs(const float* x, int64_t m, int64_t k, int64_t ldx) const;
  // Forgets rounded_ where [begin, end) overlaps the rows it was made from.
  void ForgetRoundedRowsIn(const void* begin, const void* end);
  // The prefetch a product of m rows asks for (mma_rows_prefetch_k and _max_rows).
  int64_t PrefetchK(int64_t m) const {
    return m <= options_.mma_rows_prefetch_max_rows ? mma_rows_prefetch_k_ : 0;
  }
  // Whether a product of m rows loads its weights streamed (stream_product_weights; below 0:
  // automatic).
  bool StreamProductWeights(int64_t m) const {
    return stream_product_weights_ > 0 ||
           (stream_product_weights_ < 0 && moe_one_launch_ran_ && moe_stream_products_ >= 3 &&
            m <= options_.stream_product_weights_max_rows);
  }
  // Keeps the first error (error_), and the first fault (fault_: an error Recover cannot
  // forget); returns false when `s` is not ok.
  bool Keep(const absl::Status& s);
  // Turns a hip error of `what` into a kept Status.
  bool Check(hipError_t e, const char* what);
  // Returns at least `floats` floats of workspace (valid until the next call that asks).
  float* Workspace(int64_t floats);
  // How the decode attention blocks share out key ranges (attention_decode_ranges_per_block).
  hip::AttentionDecodeSpread DecodeSpread() const;
  // Keeps InvalidArgument and returns false unless `w` is a matrix this backend takes whose
  // columns fit x's row stride `ldx` and whose rows fit y's `ldy`.
  bool CheckTyped(const char* op, const WeightMatrix& w, int64_t m, int64_t ldx, int64_t ldy);
  // Keeps InvalidArgument and returns false unless the kernels take `a`'s heads, dims and chunk.
  bool CheckGatedDelta(const GatedDeltaArgs& a);
  // Tokens a segment of the delta rule's launches for calls of this chunk (0: recurrent).
  int64_t DeltaSegment(int chunk) const;
  // The chunked rule on the matrix units (hip::GatedDeltaMmaParts with `inputs`), its
  // workspace from Workspace().
  void GatedDeltaMmaCall(const hip::GatedDeltaLaunch& l, const hip::GatedDeltaMmaInputs* inputs);
  bool CheckAttention(const AttentionArgs& a);
  hipStream_t StreamOf(HipStream s) const {
    return s == HipStream::kCompute ? compute_ : transfer_;
  }
  absl::Status CopySplit(void* dst, const void* src, int64_t bytes, uintptr_t host,
                         absl::Span<const uintptr_t> pin_boundaries, hipMemcpyKind kind,
                         HipStream stream);
  // HipDeviceMemory::UploadQueued: the source copied into upload_staging_, which the compute
  // stream copies to the device; upload_done_ marks when the device has read it.
  absl::Status UploadQueued(void* device_dst, const void* host_src, int64_t bytes);
  // HipDeviceMemory::DownloadRowsQueued: a 2-D copy on download_, after an event recorded on
  // the compute stream; WaitQueuedDownloads waits for download_.
  absl::Status DownloadRowsQueued(void* host_dst, int64_t dst_pitch, const void* device_src,
                                  int64_t src_pitch, int64_t row_bytes, int64_t rows);
  absl::Status WaitQueuedDownloads();
  // HipDeviceMemory's background copies: each on transfer_ after an event recorded on the
  // compute stream, then an event of its own recorded after it (background_events_, in ticket
  // order, retired as they complete).
  absl::StatusOr<uint64_t> DownloadBackground(void* host_dst, const void* device_src,
                                              int64_t bytes);
  absl::StatusOr<bool> BackgroundDone(uint64_t ticket);
  absl::Status WaitBackground(uint64_t ticket);
  // Both: whether `ticket` is done, waiting for it with `wait`.
  absl::StatusOr<bool> BackgroundState(uint64_t ticket, bool wait);
  // Retires background_events_ from the front while they have completed (`wait`: waits for
  // each up to `ticket`).
  absl::Status RetireBackground(uint64_t ticket, bool wait);
  // Waits for everything on transfer_ (errors ignored): on an error path, so that no copy
  // still writes a destination its caller is about to give up.
  void DrainBackground();

  // A device table of the experts' weight parts for hip::MoeRowsMma, made once for an array of
  // expert matrices (the first call, which waits for its upload) and checked against it on
  // every later call.
  struct MoeTable {
    std::vector<hip::MoeExpertParts> host;
    DeviceBuffer device;
    bool aligned = false;
    // hip::MoeGemmTma's tensor maps of each expert's parts (MoeMapsFor) by the boxes' rows,
    // made at the first call that asks for them; an empty buffer where the parts do not take
    // them. (Made after the table, on the scheduler's thread like the rest of it.)
    mutable std::map<int, DeviceBuffer> maps;
  };
  // The tensor maps of `table`'s experts (matrices of `cols` columns) in boxes of `box_rows`
  // rows, or null where the device has none or a part boundary does not fall on a box. Boxes
  // start at multiples of box_rows below row `second_start` and at second_start plus multiples
  // above it (gate/up: the up rows start at the width; else 0).
  const hip::MoeExpertMaps* MoeMapsFor(const MoeTable& table, int64_t cols, int box_rows,
                                       int64_t second_start);
  // Returns the device table of `experts` matrices at `w` (each bf16, of `rows` rows and `cols`
  // columns), or null (and nothing kept) when a matrix does not fit the device path.
  const MoeTable* MoeTableFor(const WeightMatrix* w, int experts, int64_t rows, int64_t cols);
  // How the MoE device paths route (HipKernelBackendOptions::moe_block_route, moe_kernels).
  hip::MoeRouting MoeRoutingFor() const;
  // Whether the MoE decode path runs an expert width's gate/up product and SiLU-mul as one
  // launch (fuse_gate_up_silu; hip::MoeRowsMmaSiluMul takes widths that are multiples of 8).
  bool MoeFusesGateUpSilu(int64_t width) const;
  // The tables of a MoE layer's shared expert folded into the decode path's launches (both null:
  // none).
  struct MoeShared {
    const MoeTable* gate_up = nullptr;
    const MoeTable* down = nullptr;
  };
  // The routed experts on the device (the decode path, or the grouped GEMM where `gemm_path`),
  // with a's gate and residual in the sum's launch (moe_kernels 1 only), and the shared expert
  // in the products' launches where `shared` has it (the decode path with the fused gate/up;
  // then out's contents are not read).
  absl::Status MoeExpertsOnDevice(const MoeExpertsArgs& a, const MoeTable& gate_up,
                                  const MoeTable& down, const MoeShared& shared, bool gemm_path,
                                  ScratchArena& scratch);
  // Makes hip::MoeLayerStream's counter arrays at least `counters` long (zeroed; a new
  // allocation waits for the device, so Create makes enough for the calls moe_stream_products
  // 3-5 take by default, and a decode step never waits here).
  absl::Status EnsureMoeCounters(int64_t counters);
  // hip::MoeLayerStream's counters for a call of `tokens` whose routing has at most `max_tiles`
  // tiles: one a tile (the routed ones and the shared rows' tiles of 8), the blocks done (the
  // sum's grid barrier, then the router's), and the loads taken (static_sixteenths < 16), two.
  static int64_t MoeCountersFor(int64_t max_tiles, int64_t tokens) {
    return max_tiles + (tokens + 7) / 8 + 4;
  }
  // MoeExperts' prefill path (HipKernelBackendOptions::grouped_moe_prefill) over the tables.
  absl::Status MoeExpertsGemm(const MoeExpertsArgs& a, const MoeTable& gate_up,
                              const MoeTable& down, ScratchArena& scratch);

  const HipKernelBackendOptions options_;
  const int max_shared_bytes_;  // Dynamic shared memory a block may opt into.
  hipStream_t compute_ = nullptr;
  hipStream_t transfer_ = nullptr;
  std::unique_ptr<GpuBlas> blas_;
  HipDeviceMemory memory_{this};
  DeviceBuffer workspace_;  // From memory_; declared after it, so freed before it goes.
  // The last rounded output (round_product_inputs_max_bytes): `count` floats at `x`, their
  // bf16 copy at `data` (in rounded_buffers_[buffer]), at the same indices. Null x: none.
  struct RoundedRows {
    const float* x = nullptr;
    int64_t count = 0;
    const uint16_t* data = nullptr;
    int buffer = 0;
  };
  RoundedRows rounded_;
  int64_t rounded_input_reads_ = 0;  // See rounded_input_reads().
  DeviceBuffer rounded_buffers_[2];  // From memory_, as workspace_.
  // The first error since Create or the last Recover; once set, operations are no-ops.
  absl::Status error_;
  absl::Status fault_;                      // The first fault (Fault()); error_ holds it too.
  int64_t allocation_limit_for_test_ = -1;  // SetAllocationLimitForTest.
  // MoeTableFor's tables by the address of the host array they were made from.
  std::map<const WeightMatrix*, MoeTable> moe_tables_;
  // hip::MoeLayerStream's two arrays of tile counters (moe_stream_products 3-5), each
  // moe_counter_capacity_ long, zeroed at allocation; a launch counts on array
  // moe_counter_parity_ and zeroes the other for the next.
  // Create makes counters for calls of up to this many tokens (fewer where
  // moe_one_launch_max_tokens says so); an array is never shorter than kMoeCountersMinCapacity.
  static constexpr int kMoeCountersAtCreationMaxTokens = 64;
  static constexpr int64_t kMoeCountersMinCapacity = 256;
  DeviceBuffer moe_counters_;
  int64_t moe_counter_capacity_ = 0;
  int moe_counter_parity_ = 0;
  int64_t host_waits_ = 0;  // See host_waits().
  // UploadQueued's host copy of its source, and the event recorded after the device read it
  // (created at the first call; upload_recorded_ once recorded).
  std::vector<uint8_t> upload_staging_;
  hipEvent_t upload_done_ = nullptr;
  bool upload_recorded_ = false;
  // DownloadRowsQueued's stream (not transfer_, whose spills and restores may be long) and the
  // event each copy waits for; created at the first call. downloads_queued_ until waited for.
  hipStream_t download_ = nullptr;
  hipEvent_t download_after_ = nullptr;
  bool downloads_queued_ = false;
  // Background copies (DownloadBackground): the event transfer_ waits for, the events recorded
  // after each copy by ticket (oldest first; spare_events_ for reuse), the last ticket given
  // and the last one known complete.
  hipEvent_t background_after_ = nullptr;
  std::deque<std::pair<uint64_t, hipEvent_t>> background_events_;
  std::vector<hipEvent_t> spare_events_;
  uint64_t background_issued_ = 0;
  uint64_t background_done_ = 0;
  int mma_rows_variant_;          // options_.mma_rows_variant unless changed for a test.
  bool mma_rows_bf16_inputs_;     // options_.mma_rows_bf16_inputs unless changed for a test.
  bool grouped_moe_prefill_;      // options_.grouped_moe_prefill unless changed for a test.
  bool moe_gemm_wgmma_;           // options_.moe_gemm_wgmma unless changed for a test.
  int moe_wgmma_groups_;          // options_.moe_gemm_wgmma_warpgroups, likewise.
  int moe_gemm_tma_;              // options_.moe_gemm_tma, likewise.
  int moe_kernels_;               // options_.moe_kernels unless changed for a test.
  bool copy_rows_kernel_;         // options_.copy_rows_kernel unless changed for a test.
  int mma_rows_staged_min_rows_;  // options_.mma_rows_staged_min_rows unless changed for a test.
  int64_t mma_rows_staged_min_bytes_;  // options_.mma_rows_staged_min_bytes, likewise.
  int64_t mma_rows_prefetch_k_;        // options_.mma_rows_prefetch_k unless changed for a test.
  int64_t round_product_inputs_max_bytes_;  // options_.round_product_inputs_max_bytes, likewise.
  bool fuse_gate_up_silu_;                  // options_.fuse_gate_up_silu, likewise.
  bool fuse_delta_inputs_;                  // options_.fuse_delta_inputs, likewise.
  bool fuse_conv_product_;                  // options_.fuse_conv_product, likewise.
  bool fuse_qk_norm_rope_;                  // options_.fuse_qk_norm_rope, likewise.
  int64_t norm_rope_launches_ = 0;
  bool fuse_delta_norm_;                    // options_.fuse_delta_norm, likewise.
  int delta_step_min_blocks_;               // options_.delta_step_min_blocks, likewise.
  bool fold_shared_expert_;                 // options_.fold_shared_expert, likewise.
  int moe_product_waves_;                   // options_.moe_product_waves, likewise.
  int moe_stream_products_;                 // options_.moe_stream_products, likewise.
  int moe_one_launch_max_tokens_;           // options_.moe_one_launch_max_tokens, likewise.
  bool moe_one_launch_cooperative_;         // options_.moe_one_launch_cooperative, likewise.
  int moe_one_launch_static_sixteenths_;    // options_.moe_one_launch_static_sixteenths, too.
  bool moe_compact_route_;                  // options_.moe_compact_route, too.
  int64_t moe_taken_counters_at_ = -1;      // The last one launch's taken-load counters' index.
  bool moe_router_inside_;                  // options_.moe_router_inside, likewise.
  int64_t moe_router_inside_launches_ = 0;  // See moe_router_inside_launches().
  int64_t delta_norm_inside_launches_ = 0;  // See delta_norm_inside_launches().
  bool delta_norm_refused_ = false;         // A cluster launch refused: norms apart from then.
  bool refuse_cluster_launches_for_test_ = false;  // SetRefuseClusterLaunchesForTest.
  int stream_product_weights_;              // options_.stream_product_weights, likewise.
  bool moe_one_launch_ran_ = false;         // A MoE one launch enqueued (StreamProductWeights).
  uint64_t* moe_layer_trace_ = nullptr;     // SetMoeLayerTraceForTest's.
  int64_t moe_layer_trace_launches_ = 0;
  int64_t moe_layer_traced_ = 0;
  bool moe_layer_trace_twice_ = false;
  int attention_mma_variant_;     // options_.attention_mma_variant unless changed for a test.
  int attention_decode_variant_;  // options_.attention_decode_variant unless changed for a test.
  int attention_decode_ranges_;   // options_.attention_decode_ranges_per_block, likewise.
  int multiprocessors_ = 0;       // The device's.
};

// Returns the number of devices the HIP runtime sees (0 when there is no driver or device).
int HipDeviceCount();

// The factory the engine calls to make the GPU backend (see HipKernelBackend::Create).
absl::StatusOr<std::unique_ptr<KernelBackend>> CreateHipKernelBackend(
    const HipKernelBackendOptions& options);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_KERNEL_BACKEND_H_
