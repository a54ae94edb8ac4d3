#include "services/infer/kernels/hip/hip_kernel_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/infer/kernels/hip/hip_errors.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer {
namespace {

// InvalidArgument naming the option where `value` < 0.
absl::Status AtLeastZero(const char* option, int value) {
  if (value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("hip backend: ", option, " must be at least 0, got ", value));
}

using hip::HipError;
using hip::Invalid;

// The loads hip::MatMulRowsMma takes (HipKernelBackendOptions::mma_rows_variant).
bool ValidMmaRowsVariant(int variant) { return variant >= -1 && variant <= 2; }

// HipKernelBackendOptions::attention_mma_variant.
bool ValidAttentionMmaVariant(int variant) {
  return variant >= 0 && variant < hip::kAttentionMmaVariants;
}

absl::Status InvalidAttentionMmaVariant(int variant) {
  return absl::InvalidArgumentError(absl::StrCat("hip backend: attention_mma_variant must be 0 to ",
                                                 hip::kAttentionMmaVariants - 1, ", got ",
                                                 variant));
}

absl::Status ValidAttentionDecodeVariant(int variant) {
  if (variant >= 0 && variant < hip::kAttentionDecodeVariants) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("hip backend: attention_decode_variant must be 0 to ",
                   hip::kAttentionDecodeVariants - 1, ", got ", variant));
}

absl::Status ValidDecodeRangesPerBlock(int ranges) {
  if (ranges >= 0 && ranges <= hip::kAttentionDecodeMaxRangesPerBlock &&
      (ranges & (ranges - 1)) == 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "hip backend: attention_decode_ranges_per_block must be 0 (automatic) or a power of two up "
      "to ",
      hip::kAttentionDecodeMaxRangesPerBlock, ", got ", ranges));
}

}  // namespace

int HipDeviceCount() {
  int n = 0;
  if (hipGetDeviceCount(&n) != hipSuccess) {
    static_cast<void>(hipGetLastError());  // Clear the runtime's error for later callers.
    return 0;
  }
  return n;
}

absl::StatusOr<std::unique_ptr<HipKernelBackend>> HipKernelBackend::Create(
    const HipKernelBackendOptions& options) {
  if (options.attention_split_keys <= 0 ||
      options.attention_split_keys % hip::AttentionKeyTile() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hip backend: attention_split_keys must be a positive multiple of ",
                     hip::AttentionKeyTile(), ", got ", options.attention_split_keys));
  }
  if (options.attention_decode_max_tokens < 0 || options.delta_segment_tokens <= 0 ||
      options.attention_invariant_group_tokens <= 0) {
    return absl::InvalidArgumentError(
        "hip backend: attention_decode_max_tokens must be >= 0, delta_segment_tokens and "
        "attention_invariant_group_tokens > 0");
  }
  if (!ValidMmaRowsVariant(options.mma_rows_variant)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hip backend: mma_rows_variant must be -1 to 2, got ", options.mma_rows_variant));
  }
  if (!ValidAttentionMmaVariant(options.attention_mma_variant)) {
    return InvalidAttentionMmaVariant(options.attention_mma_variant);
  }
  RETURN_IF_ERROR(ValidAttentionDecodeVariant(options.attention_decode_variant));
  RETURN_IF_ERROR(ValidDecodeRangesPerBlock(options.attention_decode_ranges_per_block));
  if (options.moe_stream_products < 0 || options.moe_stream_products > 5) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hip backend: moe_stream_products must be 0 to 5, got ", options.moe_stream_products));
  }
  RETURN_IF_ERROR(AtLeastZero("moe_one_launch_max_tokens", options.moe_one_launch_max_tokens));
  RETURN_IF_ERROR(AtLeastZero("moe_product_waves", options.moe_product_waves));
  if (options.moe_one_launch_static_sixteenths < 0 ||
      options.moe_one_launch_static_sixteenths > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("hip backend: moe_one_launch_static_sixteenths must be 0 to 16, got ",
                     options.moe_one_launch_static_sixteenths));
  }
  if (options.moe_gemm_wgmma_warpgroups != 2 && options.moe_gemm_wgmma_warpgroups != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("hip backend: moe_gemm_wgmma_warpgroups must be 2 or 3, got ",
                     options.moe_gemm_wgmma_warpgroups));
  }
  RETURN_IF_ERROR(AtLeastZero("attention_decode_min_waves", options.attention_decode_min_waves));
  if (options.delta_step_min_blocks != 1 && options.delta_step_min_blocks != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hip backend: delta_step_min_blocks must be 1 or 4, got ", options.delta_step_min_blocks));
  }
  const int count = HipDeviceCount();
  if (options.device < 0 || options.device >= count) {
    return absl::UnavailableError(
        absl::StrCat("hip backend: device ", options.device, " not present (", count, " devices)"));
  }
  hipError_t e = hipSetDevice(options.device);
  if (e != hipSuccess) return HipError(e, "selecting the device");
  int max_shared = 0;
  e = hipDeviceGetAttribute(&max_shared, kCairnMaxSharedPerBlockAttribute, options.device);
  if (e != hipSuccess) return HipError(e, "reading the shared memory limit");
  hip::SetOverlappedLaunches(options.overlapped_launches);
  hip::SetEarlyRelease(options.early_release);
  std::unique_ptr<HipKernelBackend> b(new HipKernelBackend(options, max_shared));
  e = hipDeviceGetAttribute(&b->multiprocessors_, hipDeviceAttributeMultiprocessorCount,
                            options.device);
  if (e != hipSuccess) return HipError(e, "reading the multiprocessor count");
  e = hipStreamCreateWithFlags(&b->compute_, hipStreamNonBlocking);
  if (e != hipSuccess) return HipError(e, "creating the compute stream");
  e = hipStreamCreateWithFlags(&b->transfer_, hipStreamNonBlocking);
  if (e != hipSuccess) return HipError(e, "creating the transfer stream");
  ASSIGN_OR_RETURN(b->blas_, GpuBlas::Create(b->compute_));
  if (options.moe_stream_products >= 3 && hip::MoeLayerStreamSupported()) {
    // The one-launch MoE products' counters for calls of up to moe_one_launch_max_tokens
    // tokens (at most kMoeCountersAtCreationMaxTokens counted here; larger calls grow them at
    // their first call).
    const int64_t tokens =
        std::min(options.moe_one_launch_max_tokens, kMoeCountersAtCreationMaxTokens);
    RETURN_IF_ERROR(b->EnsureMoeCounters(MoeCountersFor(tokens * hip::MoeMaxTopK(), tokens)));
  }
  return b;
}

absl::StatusOr<std::unique_ptr<KernelBackend>> CreateHipKernelBackend(
    const HipKernelBackendOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<HipKernelBackend> b, HipKernelBackend::Create(options));
  return std::unique_ptr<KernelBackend>(std::move(b));
}

HipKernelBackend::HipKernelBackend(const HipKernelBackendOptions& options, int max_shared_bytes)
    : options_(options),
      max_shared_bytes_(max_shared_bytes),
      mma_rows_variant_(options.mma_rows_variant),
      mma_rows_bf16_inputs_(options.mma_rows_bf16_inputs),
      grouped_moe_prefill_(options.grouped_moe_prefill),
      moe_gemm_wgmma_(options.moe_gemm_wgmma),
      moe_wgmma_groups_(options.moe_gemm_wgmma_warpgroups),
      moe_gemm_tma_(options.moe_gemm_tma),
      moe_kernels_(options.moe_kernels),
      copy_rows_kernel_(options.copy_rows_kernel),
      mma_rows_staged_min_rows_(options.mma_rows_staged_min_rows),
      mma_rows_staged_min_bytes_(options.mma_rows_staged_min_bytes),
      mma_rows_prefetch_k_(options.mma_rows_prefetch_k),
      round_product_inputs_max_bytes_(options.round_product_inputs_max_bytes),
      fuse_gate_up_silu_(options.fuse_gate_up_silu),
      fuse_delta_inputs_(options.fuse_delta_inputs),
      fuse_conv_product_(options.fuse_conv_product),
      fuse_qk_norm_rope_(options.fuse_qk_norm_rope),
      fuse_delta_norm_(options.fuse_delta_norm),
      delta_step_min_blocks_(options.delta_step_min_blocks),
      fold_shared_expert_(options.fold_shared_expert),
      moe_product_waves_(options.moe_product_waves),
      moe_stream_products_(options.moe_stream_products),
      moe_one_launch_max_tokens_(options.moe_one_launch_max_tokens),
      moe_one_launch_cooperative_(options.moe_one_launch_cooperative),
      moe_one_launch_static_sixteenths_(options.moe_one_launch_static_sixteenths),
      moe_compact_route_(options.moe_compact_route),
      moe_router_inside_(options.moe_router_inside),
      stream_product_weights_(options.stream_product_weights),
      attention_mma_variant_(options.attention_mma_variant),
      attention_decode_variant_(options.attention_decode_variant),
      attention_decode_ranges_(options.attention_decode_ranges_per_block) {}

absl::Status HipKernelBackend::SetAttentionMmaVariantForTest(int variant) {
  if (!ValidAttentionMmaVariant(variant)) return InvalidAttentionMmaVariant(variant);
  attention_mma_variant_ = variant;
  return absl::OkStatus();
}

absl::Status HipKernelBackend::SetAttentionDecodeVariantForTest(int variant) {
  RETURN_IF_ERROR(ValidAttentionDecodeVariant(variant));
  attention_decode_variant_ = variant;
  return absl::OkStatus();
}

absl::Status HipKernelBackend::SetAttentionDecodeRangesPerBlockForTest(int ranges) {
  RETURN_IF_ERROR(ValidDecodeRangesPerBlock(ranges));
  attention_decode_ranges_ = ranges;
  return absl::OkStatus();
}

hip::AttentionDecodeSpread HipKernelBackend::DecodeSpread() const {
  return {.ranges_per_block = attention_decode_ranges_,
          .multiprocessors = multiprocessors_,
          .min_waves = options_.attention_decode_min_waves};
}

absl::Status HipKernelBackend::SetMmaRowsVariantForTest(int variant) {
  if (!ValidMmaRowsVariant(variant)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hip backend: mma_rows_variant must be -1 to 2, got ", variant));
  }
  mma_rows_variant_ = variant;
  return absl::OkStatus();
}

HipKernelBackend::~HipKernelBackend() {
  // Teardown cannot report: wait for queued work so buffers are not freed under it.
  static_cast<void>(hipSetDevice(options_.device));
  if (compute_ != nullptr) static_cast<void>(hipStreamSynchronize(compute_));
  if (transfer_ != nullptr) static_cast<void>(hipStreamSynchronize(transfer_));
  if (download_ != nullptr) static_cast<void>(hipStreamSynchronize(download_));
  blas_.reset();
  workspace_.Reset();
  moe_tables_.clear();
  if (upload_done_ != nullptr) static_cast<void>(hipEventDestroy(upload_done_));
  if (compute_ != nullptr) static_cast<void>(hipStreamDestroy(compute_));
  if (transfer_ != nullptr) static_cast<void>(hipStreamDestroy(transfer_));
  if (download_after_ != nullptr) static_cast<void>(hipEventDestroy(download_after_));
  if (background_after_ != nullptr) static_cast<void>(hipEventDestroy(background_after_));
  for (const auto& [ticket, event] : background_events_) {
    static_cast<void>(hipEventDestroy(event));
  }
  for (hipEvent_t event : spare_events_) static_cast<void>(hipEventDestroy(event));
  if (download_ != nullptr) static_cast<void>(hipStreamDestroy(download_));
}

bool HipKernelBackend::Keep(const absl::Status& s) {
  if (s.ok()) return true;
  if (error_.ok()) error_ = s;
  // What leaves the device sound: an allocation that failed (hipMalloc's failure is not sticky,
  // and AllocateDevice clears it) and arguments refused before anything was launched. Every
  // other error is a runtime call's that failed, which may have been the device's.
  const bool sound = s.code() == absl::StatusCode::kResourceExhausted ||
                     s.code() == absl::StatusCode::kInvalidArgument;
  if (!sound && fault_.ok()) fault_ = s;
  return false;
}

absl::Status HipKernelBackend::Recover() {
  if (!fault_.ok()) return fault_;
  if (error_.ok()) return absl::OkStatus();
  error_ = absl::OkStatus();
  rounded_ = {};  // The failed pass may not have written the rows it was made from.
  // The pass's launches before its error still run: a fault among them shows here.
  if (!Enter()) return fault_;
  ++host_waits_;
  if (!Check(hipStreamSynchronize(compute_), "waiting for a failed pass's launches")) {
    return fault_;
  }
  return absl::OkStatus();
}

bool HipKernelBackend::Check(hipError_t e, const char* what) {
  return e == hipSuccess || Keep(HipError(e, what));
}

bool HipKernelBackend::Enter(bool keep_rounded) {
  if (!keep_rounded) rounded_ = {};
  if (!error_.ok()) return false;
  return Check(hipSetDevice(options_.device), "selecting the device");
}

float* HipKernelBackend::Workspace(int64_t floats) {
  const int64_t bytes = floats * static_cast<int64_t>(sizeof(float));
  if (bytes <= workspace_.size()) return workspace_.floats();
  workspace_.Reset();  // hipFree waits for the kernels still using it.
  absl::StatusOr<DeviceBuffer> b = Allocate(bytes);
  if (!Keep(b.status())) return nullptr;
  workspace_ = *std::move(b);
  return workspace_.floats();
}

absl::string_view HipKernelBackend::name() const {
  const bool bf16_products =
      options_.bf16_weights &&
      (options_.bf16_gemm_inputs || (options_.mma_rows && options_.mma_rows_bf16_inputs));
  return bf16_products || options_.bf16_attention ? "hip-bf16" : "hip-fp32";
}

void HipKernelBackend::EmbeddingGatherTyped(const WeightMatrix& table, const int32_t* ids,
                                            int64_t n, float* out) {
  if (!Enter()) return;
  if (!AcceptsWeightType(table.type) || table.layout != WeightLayout::kRows ||
      table.num_parts != 1 || table.cols < 0) {
    Keep(Invalid("embedding gather",
                 "the table must be one row-major part of a type this backend takes"));
    return;
  }
  const hipError_t e =
      table.type == WeightType::kF32
          ? hip::EmbeddingGather(static_cast<const float*>(table.parts[0].data), table.cols, ids, n,
                                 out, compute_)
          : hip::EmbeddingGatherBf16(static_cast<const uint16_t*>(table.parts[0].data), table.cols,
                                     ids, n, out, compute_);
  Check(e, "embedding gather launch");
}

void HipKernelBackend::EmbeddingGather(const float* table, int64_t dim, const int32_t* ids,
                                       int64_t n, float* out) {
  if (!Enter()) return;
  Check(hip::EmbeddingGather(table, dim, ids, n, out, compute_), "embedding gather launch");
}

void HipKernelBackend::SplitHeadPairs(const float* in, int64_t rows, int heads, int head_dim,
                                      float* a, float* b) {
  if (!Enter()) return;
  Check(hip::SplitHeadPairs(in, 2 * static_cast<int64_t>(heads) * head_dim, rows, heads, head_dim,
                            a, b, compute_),
        "split head pairs launch");
}

void HipKernelBackend::SplitHeadPairsStrided(const float* in, int64_t ld, int64_t rows, int heads,
                                             int head_dim, float* a, float* b) {
  if (!Enter()) return;
  if (heads < 1 || head_dim < 0 || ld < 2 * static_cast<int64_t>(heads) * head_dim) {
    Keep(Invalid("split head pairs",
                 absl::StrCat("row stride ", ld, " under ", heads, " pairs of ", head_dim)));
    return;
  }
  Check(hip::SplitHeadPairs(in, ld, rows, heads, head_dim, a, b, compute_),
        "split head pairs launch");
}

void HipKernelBackend::SigmoidMul(float* x, const float* gate, int64_t n) {
  if (!Enter()) return;
  // The rows are not known here: the products check their own (round_product_inputs_min_rows).
  int buffer = 0;
  uint16_t* rounded = RoundedOutput(-1, n, 8, &buffer);
  if (Check(hip::SigmoidMul(x, gate, n, rounded, compute_), "sigmoid mul launch") &&
      rounded != nullptr) {
    rounded_ = {x, n, rounded, buffer};
  }
}

void HipKernelBackend::GdnGates(const float* in, int64_t ld, int64_t tokens, int heads,
                                int64_t b_offset, int64_t a_offset, const float* dt_bias,
                                const float* neg_a, float* g, float* beta) {
  if (!Enter()) return;
  Check(hip::GdnGates(in, ld, tokens, heads, b_offset, a_offset, dt_bias, neg_a, g, beta, compute_),
        "gdn gates launch");
}

void HipKernelBackend::MoeRoute(const float* logits, int64_t tokens, int experts, int top_k,
                                bool renormalise, int32_t* ids, float* weights) {
  if (!Enter()) return;
  if (top_k < 1 || top_k > experts) {
    Keep(
        Invalid("moe route", absl::StrCat("top_k ", top_k, " outside [1, experts ", experts, "]")));
    return;
  }
  Check(hip::MoeRoute(logits, tokens, experts, top_k, renormalise, ids, weights, compute_),
        "moe route launch");
}

void HipKernelBackend::RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                               bool zero_centred, float* y) {
  if (!Enter()) return;
  int buffer = 0;
  uint16_t* rounded = RoundedOutput(rows, rows * dim, dim, &buffer);
  if (Check(hip::RmsNorm(x, rows, dim, w, eps, zero_centred, y, options_.warp_row_norms, rounded,
                         compute_),
            "rmsnorm launch") &&
      rounded != nullptr) {
    rounded_ = {y, rows * dim, rounded, buffer};
  }
}

void HipKernelBackend::GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim,
                                    const float* w, float eps, float* y) {
  if (!Enter()) return;
  int buffer = 0;
  uint16_t* rounded = RoundedOutput(rows, rows * dim, dim, &buffer);
  if (Check(
          hip::GatedRmsNorm(x, z, rows, dim, w, eps, y, options_.warp_row_norms, rounded, compute_),
          "gated rmsnorm launch") &&
      rounded != nullptr) {
    rounded_ = {y, rows * dim, rounded, buffer};
  }
}

void HipKernelBackend::RmsNormHeads(float* x, int64_t tokens, int heads, int64_t dim, int64_t ld,
                                    const float* w, float eps, bool zero_centred) {
  if (!Enter()) return;
  if (heads < 1 || ld < heads * dim) {
    Keep(Invalid("rmsnorm heads",
                 absl::StrCat("row stride ", ld, " under ", heads, " heads of ", dim)));
    return;
  }
  Check(hip::RmsNormHeads(x, tokens, heads, dim, ld, w, eps, zero_centred, options_.warp_row_norms,
                          compute_),
        "rmsnorm heads launch");
}

void HipKernelBackend::GatedRmsNormHeads(const float* x, const float* z, int64_t tokens, int heads,
                                         int64_t dim, int64_t z_ld, const float* w, float eps,
                                         float* y) {
  if (!Enter()) return;
  if (heads < 1 || z_ld < heads * dim) {
    Keep(Invalid("gated rmsnorm heads",
                 absl::StrCat("gate row stride ", z_ld, " under ", heads, " heads of ", dim)));
    return;
  }
  int buffer = 0;
  uint16_t* rounded = RoundedOutput(tokens, tokens * heads * dim, heads * dim, &buffer);
  if (Check(hip::GatedRmsNormHeads(x, z, tokens, heads, dim, z_ld, w, eps, y,
                                   options_.warp_row_norms, rounded, compute_),
            "gated rmsnorm heads launch") &&
      rounded != nullptr) {
    rounded_ = {y, tokens * heads * dim, rounded, buffer};
  }
}

void HipKernelBackend::L2Normalize(float* x, int64_t rows, int64_t dim, float eps, float scale) {
  if (!Enter()) return;
  Check(hip::L2Normalize(x, rows, dim, eps, scale, options_.warp_row_norms, compute_),
        "l2 normalize launch");
}

void HipKernelBackend::L2NormalizeTwo(float* a, float a_scale, float* b, float b_scale,
                                      int64_t tokens, int heads, int64_t dim, int64_t ld,
                                      float eps) {
  if (!Enter()) return;
  if (heads < 1 || ld < heads * dim) {
    Keep(Invalid("l2 normalize",
                 absl::StrCat("row stride ", ld, " under ", heads, " heads of ", dim)));
    return;
  }
  Check(hip::L2NormalizeTwo(a, a_scale, b, b_scale, tokens, heads, dim, ld, eps,
                            options_.warp_row_norms, compute_),
        "l2 normalize launch");
}

void HipKernelBackend::Rope(float* x, int64_t tokens, int64_t ld, int heads, int head_dim,
                            int rotary_dim, const float* inv_freq, int64_t first_position) {
  if (!Enter()) return;
  if (rotary_dim > head_dim || rotary_dim < 0 || heads < 0) {
    Keep(Invalid("rope", absl::StrCat("rotary_dim ", rotary_dim, " exceeds head_dim ", head_dim)));
    return;
  }
  Check(hip::Rope(x, tokens, ld, heads, head_dim, rotary_dim, inv_freq, first_position, compute_),
        "rope launch");
}

void HipKernelBackend::SiluMul(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up,
                               int64_t rows, int64_t dim, float* out) {
  if (!Enter()) return;
  int buffer = 0;
  uint16_t* rounded = RoundedOutput(rows, rows * dim, dim, &buffer);
  if (Check(hip::SiluMul(gate, ld_gate, up, ld_up, rows, dim, out, rounded, compute_),
            "silu mul launch") &&
      rounded != nullptr) {
    rounded_ = {out, rows * dim, rounded, buffer};
  }
}

void HipKernelBackend::CausalConvSilu(const float* in, int64_t ld_in, int64_t tokens,
                                      int64_t channels, const float* w, int kernel, float* state,
                                      float* out) {
  if (!Enter()) return;
  if (kernel < 1 || kernel > hip::CausalConvMaxKernel()) {
    Keep(Invalid("causal conv", absl::StrCat("kernel ", kernel, " outside [1, ",
                                             hip::CausalConvMaxKernel(), "]")));
    return;
  }
  Check(hip::CausalConvSilu(in, ld_in, tokens, channels, w, kernel, state, out, compute_),
        "causal conv launch");
}

void HipKernelBackend::CausalConvSiluBatch(absl::Span<const CausalConvArgs> batch) {
  std::vector<hip::ConvSequence> run;
  const CausalConvArgs* shape = nullptr;  // The run's channels, weights and kernel.
  const auto flush = [&] {
    if (!run.empty() && Enter()) {
      Check(hip::CausalConvSiluBatch(run.data(), static_cast<int>(run.size()), shape->channels,
                                     shape->w, shape->kernel, compute_),
            "causal conv batch launch");
    }
    run.clear();
  };
  for (const CausalConvArgs& a : batch) {
    if (!Enter()) return;
    if (a.kernel < 1 || a.kernel > hip::CausalConvMaxKernel()) {
      Keep(Invalid("causal conv", absl::StrCat("kernel ", a.kernel, " outside [1, ",
                                               hip::CausalConvMaxKernel(), "]")));
      return;
    }
    bool joins = static_cast<int>(run.size()) < hip::CausalConvMaxBatch() && shape != nullptr &&
                 a.channels == shape->channels && a.w == shape->w && a.kernel == shape->kernel;
    for (const hip::ConvSequence& s : run) joins = joins && s.state != a.state && s.out != a.out;
    if (!joins) {
      flush();
      shape = &a;
    }
    run.push_back({a.in, a.ld_in, a.tokens, a.state, a.out});
  }
  flush();
}

void HipKernelBackend::CopyRows(const float* src, int64_t ld_src, int64_t rows, int64_t cols,
                                float* dst, int64_t ld_dst) {
  if (!Enter() || rows == 0 || cols == 0) return;
  if (rows < 0 || cols < 0 || ld_src < cols || ld_dst < cols) {
    Keep(Invalid("copy rows", absl::StrCat("bad shape rows=", rows, " cols=", cols)));
    return;
  }
  if (copy_rows_kernel_) {
    Check(hip::CopyRows(src, ld_src, rows, cols, dst, ld_dst, compute_), "copy rows launch");
    return;
  }
  constexpr size_t kFloat = sizeof(float);
  Check(hipMemcpy2DAsync(dst, static_cast<size_t>(ld_dst) * kFloat, src,
                         static_cast<size_t>(ld_src) * kFloat, static_cast<size_t>(cols) * kFloat,
                         static_cast<size_t>(rows), hipMemcpyDeviceToDevice, compute_),
        "copy rows");
}

void HipKernelBackend::AddScaledRows(const float* src, int64_t rows, int64_t dim,
                                     const int32_t* dst_rows, const float* scales, float* dst) {
  if (!Enter()) return;
  if (rows < 0 || dim < 0) {
    Keep(Invalid("add scaled rows", absl::StrCat("bad shape rows=", rows, " dim=", dim)));
    return;
  }
  Check(hip::AddScaledRows(src, rows, dim, dst_rows, scales, dst, compute_),
        "add scaled rows launch");
}

void HipKernelBackend::SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* gate) {
  if (!Enter()) return;
  if (rows < 0 || dim < 0) {
    Keep(Invalid("sigmoid scale rows", absl::StrCat("bad shape rows=", rows, " dim=", dim)));
    return;
  }
  Check(hip::SigmoidScaleRows(x, rows, dim, gate, compute_), "sigmoid scale rows launch");
}

}  // namespace cairn::infer
