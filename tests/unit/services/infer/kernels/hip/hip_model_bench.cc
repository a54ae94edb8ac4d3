// The whole model on the GPU with realistic shapes and random bf16 weights (issue 12's
// benchmark): a Qwen3.5-9B-like dense configuration and a Qwen3-Next-80B-A3B-like MoE
// configuration with fewer layers, built in host memory (no checkpoint file) and uploaded once.
// Measures, with the device's limits from the same run:
//   - prefill tokens/s at each --prefill length (passes of --pass-tokens), as a share of the
//     bf16 matrix rate for the model's FLOPs (GEMMs, attention, delta rule);
//   - decode tokens/s at 1, 4 and 16 slots (--decode-depth tokens each), as a share of the HBM
//     bound (weights read once per step, plus each slot's rows and recurrent state), with the
//     logits read in place (ForwardBatchViews, as the scheduler's decode) and, for comparison,
//     in vectors kept between steps (ForwardBatchInto) and in fresh vectors each step
//     (ForwardBatch), and how often a step waits for the device;
//   - restore of a --ttft-depth checkpoint from pinned host memory (the arena) in GB/s, against
//     pinned host-to-device bandwidth; capture time of its private state;
//   - the seed's time-to-first-token table at --ttft-depth: cold (prefill from scratch), disk
//     (read the checkpoint file, restore, prefill the turn), RAM (restore, prefill the turn) and
//     live (prefill the turn), for a --turn-tokens turn.
// Weights are one random block shared by every tensor (throughput does not depend on values).
//
// Usage: cairn_hip_model_bench [--model=dense|moe|both] [--prefill=4096,32768,100000]
//          [--ttft-depth=95439] [--turn-tokens=40] [--pass-tokens=8192] [--decode-depth=4096]
//          [--decode-steps=16] [--dense-layers=32] [--moe-layers=12] [--disk-dir=DIR]
//          [--decode-slots=1,4,16] [--profile-slots=N] [--mma-tiles-of-8=0|1]
//          [--grouped-moe=0|1] [--mma-variants=N,N,...] [--moe-prefill=N,N,...]
//          [--attention-variants=N,N,...] [--profile-prefill=N] [--moe-kernels=N,N,...]
//          [--decode-attention-variants=N,N,...] [--mma-bf16-inputs=1,0] [--op-times=1]
//          [--prefill-op-times=1]
//          [--overlapped-launches=1,0] [--copy-rows-kernel=1,0] [--logits-parts=4,1]
//          [--mma-staged-rows=0,2] [--mma-staged-mb=0,64] [--host-lead-mb=N]
//          [--attention-split-keys=N] [--decode-ranges=0,1,2,4] [--background-spill-mb=N]
//          [--mma-prefetch-k=0,256] [--round-inputs-mb=64,0] [--fuse-silu=1,0]
//          [--fuse-delta=1,0] [--fold-shared=1,0] [--moe-waves=4,0]
// --mma-prefetch-k: innermost, each slot count's decode steps once for each value listed of
// HipKernelBackendOptions::mma_rows_prefetch_k (0: none; the same bits).
// --round-inputs-mb: within that, once for each value listed of
// HipKernelBackendOptions::round_product_inputs_max_bytes in MB (0: off; the same bits); the
// prefill runs (not the TTFT run) likewise, each length once for each value.
// --fuse-silu: within that, once for each value listed of
// HipKernelBackendOptions::fuse_gate_up_silu (the same bits), and within that of
// HipKernelBackendOptions::fuse_delta_inputs (--fuse-delta; the same bits), and within that of
// HipKernelBackendOptions::fold_shared_expert (--fold-shared; the same bits), and innermost
// of HipKernelBackendOptions::moe_product_waves (--moe-waves; the same bits).
// --overlapped-launches: each slot count's decode steps once for each value listed
// (hip::SetOverlappedLaunches; the same bits). --copy-rows-kernel: within that (innermost), once
// for each value of HipKernelBackendOptions::copy_rows_kernel listed (the same bytes), and
// within that once for each value of HipKernelBackendOptions::mma_rows_staged_min_rows listed
// (0: never; the same bits) and, innermost, of mma_rows_staged_min_bytes in MB
// (--mma-staged-mb; where staged rows are 0, only the first).
// --logits-parts: outermost, every slot count's decode steps once for each value of
// Qwen3HybridOptions::logits_parts listed (the model made again for each change; the same
// bits); the prefill and TTFT runs use the first.
// --op-times=1: after each slot count's decode measurements, --decode-steps more steps with a
// device event before every backend operation (OpTimingBackend) and the step's time by operation.
// --prefill-op-times=1: after each prefill length's run (not the TTFT run's), the same prefill
// again with an event before every operation, and its time by operation (the events end the
// overlap of consecutive launches, a few microseconds each: small against a prefill's kernels).
// --host-lead-mb=N: after each slot count's decode measurements, --decode-steps more steps each
// enqueued behind a device-to-device copy of N MB on the compute stream, so that the host
// enqueues the step while the device is still copying: the step's time less the copy's (timed
// alone) is the device's own time for the step, without waits for the host's launches.
// --background-spill-mb=N: after each slot count's decode measurements, --decode-steps more
// steps, each issued right after a background download of N MB (DeviceMemory::
// DownloadBackground into page-locked memory, as cairn-infer's idle spills): the step's time
// beside the copies, and the copies' rate.
// --attention-split-keys=N: HipKernelBackendOptions::attention_split_keys (other bits).
// --decode-ranges: within --decode-attention-variants, once for each value listed of
// HipKernelBackendOptions::attention_decode_ranges_per_block (0: automatic; the same bits).
// --mma-bf16-inputs: each slot count's decode steps run once for each value listed, outermost:
// 1, the decode products' inputs rounded to bf16 (HipKernelBackendOptions::mma_rows_bf16_inputs,
// the default), 0, split exactly into three pieces (other bits).
// --mma-variants: each slot count's decode steps run once for each value of
// HipKernelBackendOptions::mma_rows_variant listed (the same bits), in turn.
// --decode-attention-variants: within that, once for each value of
// HipKernelBackendOptions::attention_decode_variant listed (the same bits), in turn.
// --attention-variants: each prefill length (not the TTFT run) runs once for each value of
// HipKernelBackendOptions::attention_mma_variant listed (the same bits), in turn.
// --profile-prefill=N brackets the last pass of each N-token prefill with cudaProfilerStart/Stop
// (for `ncu --profile-from-start off`).
// --profile-slots=N brackets the timed decode steps at N slots with cudaProfilerStart/Stop (on
// NVIDIA), for `nsys profile --capture-range=cudaProfilerApi`. --grouped-moe=0 runs the MoE
// layers' routed experts through KernelBackend's default (routing to the host, an expert at a
// time) instead of the device path (HipKernelBackendOptions::grouped_moe). --moe-prefill: each
// prefill length (except the TTFT run) runs once for each value listed of
// HipKernelBackendOptions::grouped_moe_prefill (1: the MoE layers' prefill calls on the device's
// grouped GEMM, MoeGemmBf16; 2: the same on the warpgroup GEMMs, moe_gemm_wgmma, where built;
// 0: KernelBackend's default), in turn; the last value stays for the rest.
// --moe-kernels: each prefill length (except the TTFT run) and each slot count's decode steps
// run once for each value listed of HipKernelBackendOptions::moe_kernels (the MoE device paths'
// routing, sort and sum: 1 the eighth round's, 0 the earlier ones; the same bits), in turn.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#if defined(CAIRN_HIP_PLATFORM_NVIDIA)
#include <cuda_profiler_api.h>
#endif

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/models/model_config.h"
#include "services/infer/models/qwen3_hybrid/qwen3_hybrid_model.h"
#include "services/infer/models/random_checkpoint_writer.h"
#include "services/infer/models/safetensors.h"
#include "tests/unit/services/infer/kernels/hip/hip_bench_util.h"
#include "tests/unit/services/infer/kernels/hip/op_timing_backend.h"

namespace cairn::infer {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string model = "both";
  std::vector<int64_t> prefill = {4096, 32768, 100000};
  int64_t ttft_depth = 95439;  // The seed's measured conversation.
  int64_t turn_tokens = 40;    // A sentence: the seed's turns add 20 to 70 tokens.
  int64_t pass_tokens = 8192;
  int64_t decode_depth = 4096;
  int decode_steps = 16;
  int dense_layers = 32;
  int moe_layers = 12;
  std::string disk_dir;
  std::vector<int64_t> decode_slots = {1, 4, 16};
  int profile_slots = 0;  // 0: no profiler range.
  bool mma_tiles_of_8 = HipKernelBackendOptions().mma_rows_tiles_of_8;
  bool grouped_moe = HipKernelBackendOptions().grouped_moe;
  std::vector<int> mma_variants = {HipKernelBackendOptions().mma_rows_variant};
  std::vector<int> mma_bf16_inputs = {HipKernelBackendOptions().mma_rows_bf16_inputs ? 1 : 0};
  std::vector<int> moe_prefill = {
      !HipKernelBackendOptions().grouped_moe_prefill                             ? 0
      : HipKernelBackendOptions().moe_gemm_wgmma && hip::MoeGemmWgmmaSupported() ? 2
                                                                                 : 1};
  std::vector<int> attention_variants = {HipKernelBackendOptions().attention_mma_variant};
  std::vector<int> decode_attention_variants = {HipKernelBackendOptions().attention_decode_variant};
  std::vector<int> decode_ranges = {HipKernelBackendOptions().attention_decode_ranges_per_block};
  std::vector<int> overlapped_launches = {HipKernelBackendOptions().overlapped_launches ? 1 : 0};
  std::vector<int> copy_rows_kernel = {HipKernelBackendOptions().copy_rows_kernel ? 1 : 0};
  std::vector<int> mma_staged_rows = {HipKernelBackendOptions().mma_rows_staged_min_rows};
  std::vector<int> mma_staged_mb = {
      static_cast<int>(HipKernelBackendOptions().mma_rows_staged_min_bytes >> 20)};
  std::vector<int> logits_parts = {Qwen3HybridOptions().logits_parts};
  std::vector<int> mma_prefetch_k = {
      static_cast<int>(HipKernelBackendOptions().mma_rows_prefetch_k)};
  std::vector<int> round_inputs_mb = {
      static_cast<int>(HipKernelBackendOptions().round_product_inputs_max_bytes >> 20)};
  std::vector<int> fuse_silu = {HipKernelBackendOptions().fuse_gate_up_silu ? 1 : 0};
  std::vector<int> fuse_delta = {HipKernelBackendOptions().fuse_delta_inputs ? 1 : 0};
  std::vector<int> fold_shared = {HipKernelBackendOptions().fold_shared_expert ? 1 : 0};
  std::vector<int> moe_waves = {HipKernelBackendOptions().moe_product_waves};
  int64_t profile_prefill = 0;  // 0: no profiler range.
  std::vector<int> moe_kernels = {HipKernelBackendOptions().moe_kernels};
  bool op_times = false;
  bool prefill_op_times = false;
  int64_t host_lead_mb = 0;         // 0: no host-lead steps.
  int64_t background_spill_mb = 0;  // 0: no steps beside background downloads.
  int64_t attention_split_keys = HipKernelBackendOptions().attention_split_keys;
};

// What both shapes share: 16 q heads of 256 in the full-attention layers (every fourth), Gated
// DeltaNet layers of 16 k / 32 v heads of 128, a 256K context.
RandomCheckpointOptions HybridShape(const char* model_type, int layers, int kv_heads) {
  RandomCheckpointOptions o;
  o.model_type = model_type;
  o.num_layers = layers;
  o.num_heads = 16;
  o.num_kv_heads = kv_heads;
  o.head_dim = 256;
  o.linear_k_heads = 16;
  o.linear_v_heads = 32;
  o.linear_k_dim = 128;
  o.linear_v_dim = 128;
  o.max_position_embeddings = 262144;
  return o;
}

// Qwen3.5-9B-like: hidden 4096, 4 kv heads, MLP 12288, vocabulary 248320, untied.
RandomCheckpointOptions DenseShape(int layers) {
  RandomCheckpointOptions o = HybridShape("qwen3_5_text", layers, 4);
  o.vocab_size = 248320;
  o.hidden_size = 4096;
  o.intermediate_size = 12288;
  return o;
}

// Qwen3-Next-80B-A3B-like: hidden 2048, 2 kv heads, 512 experts of 512 (top 10) plus a shared
// expert of 512, vocabulary 151936; 48 layers in the real model, fewer here so the weights fit.
RandomCheckpointOptions MoeShape(int layers) {
  RandomCheckpointOptions o = HybridShape("qwen3_5_moe_text", layers, 2);
  o.vocab_size = 151936;
  o.hidden_size = 2048;
  o.num_experts = 512;
  o.top_k = 10;
  o.moe_intermediate_size = 512;
  o.shared_intermediate_size = 512;
  return o;
}

void Print(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::vector<int32_t> RandomIds(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int32_t& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

// What a model's passes cost, counted from its shapes.
struct Costs {
  double matrix_params = 0;  // Weights a token multiplies, embeddings and lm head excepted.
  double expert_bytes = 0;   // Bytes of routed-expert weights.
  double embed_bytes = 0;    // The input embedding table (gathered, never read whole).
  int full_layers = 0;
  int delta_layers = 0;
};

Costs CountCosts(const RandomCheckpointOptions& o, const std::vector<RandomTensorShape>& tensors) {
  Costs c;
  const double active = o.num_experts > 0 ? static_cast<double>(o.top_k) / o.num_experts : 1.0;
  for (const RandomTensorShape& t : tensors) {
    double n = 1;
    for (int64_t d : t.shape) n *= static_cast<double>(d);
    if (t.name.find("embed_tokens") != std::string::npos) {
      c.embed_bytes = 2 * n;
      continue;
    }
    if (t.shape.size() < 2 || t.name.find("lm_head") != std::string::npos ||
        t.name.find("conv1d") != std::string::npos) {
      continue;
    }
    const bool routed = t.name.find(".experts.") != std::string::npos;
    if (routed) c.expert_bytes += 2 * n;
    c.matrix_params += routed ? n * active : n;
  }
  for (int i = 0; i < o.num_layers; ++i) {
    ((i + 1) % o.full_attention_interval == 0 ? c.full_layers : c.delta_layers)++;
  }
  return c;
}

class ModelBench {
 public:
  ModelBench(const Flags& flags, HipKernelBackend& backend, const Ceilings& ceilings)
      : f_(flags), b_(backend), ceil_(ceilings) {}

  void Run(const std::string& name, const RandomCheckpointOptions& o) {
    name_ = name;
    o_ = o;
    absl::StatusOr<std::vector<RandomTensorShape>> tensors = RandomCheckpointTensors(o);
    absl::StatusOr<std::string> config_text = RandomCheckpointConfig(o);
    if (!tensors.ok() || !config_text.ok()) Bench::Fail("random checkpoint shapes");
    costs_ = CountCosts(o, *tensors);
    absl::StatusOr<HybridConfig> config = ParseHybridConfig(*config_text);
    if (!config.ok()) Bench::Fail(config.status().ToString());
    config_ = *std::move(config);
    tensors_ = *std::move(tensors);
    const double load_seconds = MakeModel(f_.logits_parts[0]);
    const ModelInfo& info = model_->info();
    Print(absl::StrCat("== ", name, ": ", o.num_layers, " layers (", costs_.full_layers,
                       " full attention), ", info.num_parameters / 1e9, "B parameters, ",
                       info.weight_bytes / 1e9, " GB on the device (bf16 matrices), ",
                       costs_.matrix_params / 1e9, "B multiplied per token; load ", load_seconds,
                       " s"));
    const StateLayout& layout = model_->state_layout();
    Print(absl::StrCat("   state: ", layout.row_bytes(), " bytes of rows per token, ",
                       layout.private_bytes() / 1e6, " MB private"));
    tokens_ = RandomIds(std::max<int64_t>(MaxDepth(), f_.decode_depth) + f_.turn_tokens + 64,
                        info.vocab_size, 7);
    PrefillAndTtft();
    Decode();
    model_.reset();
  }

 private:
  // (Re)makes model_ from config_ and tensors_ with `logits_parts` (Qwen3HybridOptions), the
  // earlier model freed first; returns the seconds CreateQwen3HybridModel took (the load).
  double MakeModel(int logits_parts) {
    model_.reset();
    // One random block of bf16 values behind every tensor.
    int64_t largest = 0;
    for (const RandomTensorShape& t : tensors_) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      largest = std::max(largest, n);
    }
    std::vector<uint16_t>& values = values_;
    values.assign(static_cast<size_t>(largest), 0);
    const RandomBf16 block = RandomBf16Values(size_t{1} << 20, 1);
    for (size_t i = 0; i < values.size(); i += block.bits.size()) {
      const size_t n = std::min(block.bits.size(), values.size() - i);
      std::memcpy(values.data() + i, block.bits.data(), n * sizeof(uint16_t));
    }
    std::vector<TensorView> views;
    for (const RandomTensorShape& t : tensors_) {
      TensorView v;
      v.name = t.name;
      v.dtype = DType::kBF16;
      v.shape = t.shape;
      v.data = reinterpret_cast<const uint8_t*>(values.data());
      v.bytes = v.elements() * 2;
      views.push_back(std::move(v));
    }
    absl::StatusOr<std::unique_ptr<TensorStore>> store = TensorStore::FromViews(std::move(views));
    if (!store.ok()) Bench::Fail(store.status().ToString());
    Qwen3HybridOptions options;
    options.logits_parts = logits_parts;
    const auto start = Clock::now();
    absl::StatusOr<std::unique_ptr<Model>> model =
        CreateQwen3HybridModel(config_, *std::move(store), 0, &timing_, options);
    if (!model.ok()) Bench::Fail(model.status().ToString());
    const double seconds = Bench::Seconds(start);
    model_ = *std::move(model);
    logits_parts_ = logits_parts;
    return seconds;
  }

  int64_t MaxDepth() const {
    int64_t d = f_.ttft_depth;
    for (int64_t t : f_.prefill) d = std::max(d, t);
    return d;
  }

  // FLOPs of a prefill from token `from` to `to`.
  double PrefillFlops(int64_t from, int64_t to) const {
    const double t = static_cast<double>(to - from);
    const double gemm = 2.0 * costs_.matrix_params * t;
    // Causal attention: QK^T and PV over the keys up to each query.
    const double keys = (static_cast<double>(to) * to - static_cast<double>(from) * from) / 2.0;
    const double attention =
        costs_.full_layers * 4.0 * o_.num_heads * static_cast<double>(o_.head_dim) * keys;
    // Delta rule: S^T k, k (x) delta and S^T q per token and v-head.
    const double delta = costs_.delta_layers * 6.0 * o_.linear_v_heads *
                         static_cast<double>(o_.linear_k_dim) * o_.linear_v_dim * t;
    return gemm + attention + delta;
  }

  // Prefills tokens [from, to) of tokens_ into `slot` in passes of pass_tokens; returns seconds
  // (the logits of each pass's last token downloaded, as the engine does).
  double Prefill(SlotState* slot, int64_t from, int64_t to) {
    const auto start = Clock::now();
    for (int64_t at = from; at < to;) {
      const int64_t end = std::min(to, at + f_.pass_tokens);
      const auto pass = absl::MakeConstSpan(tokens_).subspan(at, end - at);
      const bool profile = from == 0 && to == f_.profile_prefill && end == to;
      if (profile) ProfilerRange(true);
      absl::StatusOr<std::vector<float>> logits = model_->Forward(slot, pass, {});
      if (!logits.ok()) Bench::Fail(logits.status().ToString());
      if (profile) ProfilerRange(false);
      at = end;
    }
    return Bench::Seconds(start);
  }

  void ReportPrefill(int64_t tokens, double seconds, const std::string& suffix = "") {
    const double flops = PrefillFlops(0, tokens);
    const double gemm = 2.0 * costs_.matrix_params * tokens;
    Print(absl::StrFormat(
        "%s prefill %7ld tokens: %8.3f s  %9.0f tokens/s  %6.1f TFLOP/s = %5.1f %% of the bf16 "
        "matrix rate (GEMM share of the FLOPs %4.1f %%)%s",
        name_.c_str(), tokens, seconds, tokens / seconds, flops / seconds / 1e12,
        100.0 * flops / seconds / ceil_.bf16_flops, 100.0 * gemm / flops, suffix.c_str()));
  }

  void PrefillAndTtft() {
    const StateLayout& layout = model_->state_layout();
    absl::StatusOr<std::unique_ptr<SlotKvMemory>> kv = SlotKvMemory::Create(
        layout, {.slots = 1, .max_rows = MaxDepth() + f_.turn_tokens + 8, .memory = b_.memory()});
    if (!kv.ok()) Bench::Fail(kv.status().ToString());
    SlotState* slot = (*kv)->slot(0);
    // The checkpoint at ttft_depth, in page-locked memory as the arena is.
    const int64_t state_bytes = layout.private_bytes() + f_.ttft_depth * layout.row_bytes();
    std::unique_ptr<uint8_t[]> state(new uint8_t[static_cast<size_t>(state_bytes)]);
    std::memset(state.get(), 0, static_cast<size_t>(state_bytes));
    Bench::Check(b_.RegisterHost(state.get(), state_bytes), "register the checkpoint buffer");
    const auto whole = absl::MakeSpan(state.get(), static_cast<size_t>(state_bytes));

    double cold = 0, capture_private = 0, capture_rows = 0;
    for (const int64_t t : f_.prefill) {
      if (t < f_.ttft_depth || t != MaxDepth()) {
        for (const int on : f_.moe_prefill) {
          b_.SetGroupedMoePrefillForTest(on >= 1);
          b_.SetMoeGemmWgmmaForTest(on == 2);
          for (const int variant : f_.attention_variants) {
            for (const int kernels : f_.moe_kernels) {
              for (const int round_mb : f_.round_inputs_mb) {
                b_.SetMoeKernelsForTest(kernels);
                b_.SetRoundProductInputsMaxBytesForTest(int64_t{round_mb} << 20);
                Bench::Check(b_.SetAttentionMmaVariantForTest(variant), "attention variant");
                Bench::Check((*kv)->Reset(0), "reset");
                std::string label;
                if (costs_.expert_bytes > 0) {  // Models with routed experts only.
                  label = absl::StrFormat(" (grouped moe prefill %s)", on == 2   ? "wgmma"
                                                                       : on == 1 ? "on"
                                                                                 : "off");
                }
                if (f_.attention_variants.size() > 1) {
                  absl::StrAppend(&label, absl::StrFormat(" (attention variant %d)", variant));
                }
                if (f_.moe_kernels.size() > 1) {
                  absl::StrAppend(&label, absl::StrFormat(" (moe kernels %d)", kernels));
                }
                if (f_.round_inputs_mb.size() > 1) {
                  absl::StrAppend(&label,
                                  absl::StrFormat(" (rounded inputs up to %d MB)", round_mb));
                }
                ReportPrefill(t, Prefill(slot, 0, t), label);
                if (f_.prefill_op_times) PrefillOpTimes(**kv, slot, t, label);
              }
            }
          }
        }
        Bench::Check(
            b_.SetAttentionMmaVariantForTest(HipKernelBackendOptions().attention_mma_variant),
            "attention variant");
        b_.SetRoundProductInputsMaxBytesForTest(
            HipKernelBackendOptions().round_product_inputs_max_bytes);
        continue;
      }
      Bench::Check((*kv)->Reset(0), "reset");
      // The longest run also gives the cold TTFT and the capture at ttft_depth.
      cold = Prefill(slot, 0, f_.ttft_depth);
      auto start = Clock::now();
      absl::StatusOr<int64_t> at =
          (*kv)->CapturePrivateState(0, whole.subspan(0, layout.private_bytes()));
      if (!at.ok()) Bench::Fail(at.status().ToString());
      capture_private = Bench::Seconds(start);
      start = Clock::now();
      int64_t offset = layout.private_bytes();
      for (size_t c = 0; c < layout.components.size(); ++c) {
        const StateComponent& comp = layout.components[c];
        if (comp.kind != ComponentKind::kRows) continue;
        const int64_t n = f_.ttft_depth * comp.bytes();
        Bench::Check(
            (*kv)->CopyRowsOut(0, static_cast<int>(c), 0, f_.ttft_depth, whole.subspan(offset, n)),
            "rows out");
        offset += n;
      }
      capture_rows = Bench::Seconds(start);
      ReportPrefill(t, cold + Prefill(slot, f_.ttft_depth, t));
    }
    if (cold == 0) {
      Bench::Check(b_.UnregisterHost(state.get()), "unregister");
      return;
    }
    const double private_mb = layout.private_bytes() / 1e6;
    Print(absl::StrFormat(
        "%s capture at %ld tokens: private state %.1f MB in %.2f ms (%.1f GB/s); all %.2f GB of "
        "rows out in %.1f ms (%.1f GB/s; a capture borrows them)",
        name_.c_str(), f_.ttft_depth, private_mb, capture_private * 1e3,
        private_mb / 1e3 / capture_private, (state_bytes - layout.private_bytes()) / 1e9,
        capture_rows * 1e3, (state_bytes - layout.private_bytes()) / 1e9 / capture_rows));

    // Restore from the page-locked copy, as from the arena.
    const double restore = Restore(**kv, whole);
    Print(absl::StrFormat(
        "%s restore %.2f GB from pinned memory: %.1f ms  %.1f GB/s = %.1f %% of pinned "
        "host-to-device",
        name_.c_str(), state_bytes / 1e9, restore * 1e3, state_bytes / 1e9 / restore,
        100.0 * state_bytes / restore / ceil_.h2d_bytes_per_s));
    const double live = Prefill(slot, f_.ttft_depth, f_.ttft_depth + f_.turn_tokens);
    double disk_read = -1;
    if (!f_.disk_dir.empty()) disk_read = ReadFromDisk(whole);
    Print(absl::StrFormat("%s TTFT at %ld tokens + a %ld-token turn:", name_.c_str(), f_.ttft_depth,
                          f_.turn_tokens));
    Print(absl::StrFormat("   cold (prefill from scratch)    %9.3f s", cold));
    if (disk_read >= 0) {
      Print(absl::StrFormat(
          "   disk (read, restore, turn)     %9.3f s  (read %.3f s, restore %.3f s)",
          disk_read + restore + live, disk_read, restore));
    }
    Print(absl::StrFormat("   RAM (restore, turn)            %9.3f s  (restore %.3f s)",
                          restore + live, restore));
    Print(absl::StrFormat("   live (turn only)               %9.3f s", live));
    Bench::Check(b_.UnregisterHost(state.get()), "unregister");
  }

  // Restores `state` (private state, then each rows component) into slot 0; returns seconds.
  double Restore(SlotKvMemory& kv, absl::Span<uint8_t> state) {
    const StateLayout& layout = model_->state_layout();
    const auto start = Clock::now();
    Bench::Check(kv.BeginRestore(0), "begin restore");
    int64_t offset = layout.private_bytes();
    const int64_t depth =
        (static_cast<int64_t>(state.size()) - offset) / std::max<int64_t>(1, layout.row_bytes());
    for (size_t c = 0; c < layout.components.size(); ++c) {
      const StateComponent& comp = layout.components[c];
      if (comp.kind != ComponentKind::kRows) continue;
      const int64_t n = depth * comp.bytes();
      Bench::Check(kv.CopyRowsIn(0, static_cast<int>(c), 0, state.subspan(offset, n)), "rows in");
      offset += n;
    }
    Bench::Check(kv.LoadPrivateState(0, depth, state.subspan(0, layout.private_bytes())),
                 "private state in");
    Bench::Check(kv.Validate(0, depth), "validate");
    return Bench::Seconds(start);
  }

  // Writes `state` to a file, drops it from the page cache, and times reading it back into
  // `state`. Returns seconds.
  double ReadFromDisk(absl::Span<uint8_t> state) {
    const std::string path = f_.disk_dir + "/cairn-bench-checkpoint";
    int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    if (fd < 0) Bench::Fail("cannot create " + path);
    for (size_t at = 0; at < state.size();) {
      const ssize_t n =
          ::write(fd, state.data() + at, std::min<size_t>(state.size() - at, 1 << 26));
      if (n <= 0) Bench::Fail("write " + path);
      at += static_cast<size_t>(n);
    }
    ::fsync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) Bench::Fail("cannot open " + path);
    const auto start = Clock::now();
    for (size_t at = 0; at < state.size();) {
      const ssize_t n = ::read(fd, state.data() + at, std::min<size_t>(state.size() - at, 1 << 26));
      if (n <= 0) Bench::Fail("read " + path);
      at += static_cast<size_t>(n);
    }
    const double seconds = Bench::Seconds(start);
    ::close(fd);
    ::unlink(path.c_str());
    Print(absl::StrFormat("%s disk read %.2f GB: %.3f s (%.2f GB/s)", name_.c_str(),
                          state.size() / 1e9, seconds, state.size() / 1e9 / seconds));
    return seconds;
  }

  void Decode() {
    // A copy: --logits-parts may make model_ again below.
    const StateLayout layout = model_->state_layout();
    constexpr int kMaxSlots = 16;
    const int warm = 2;
    // Each slot count runs its steps once per way of returning the logits (DecodeSteps'
    // kDecodeModes) for each combination of variants listed.
    const int64_t runs = static_cast<int64_t>(
        f_.decode_slots.size() * f_.mma_bf16_inputs.size() * f_.mma_variants.size() *
        f_.decode_attention_variants.size() * f_.decode_ranges.size() * f_.moe_kernels.size() *
        f_.overlapped_launches.size() * f_.copy_rows_kernel.size() * f_.mma_staged_rows.size() *
        f_.mma_staged_mb.size() * f_.logits_parts.size() * f_.mma_prefetch_k.size() *
        f_.round_inputs_mb.size() * f_.fuse_silu.size() * f_.fuse_delta.size() *
        f_.fold_shared.size() * f_.moe_waves.size());
    const int64_t rows = f_.decode_depth +
                         (kDecodeModes + (f_.op_times ? 1 : 0) + (f_.host_lead_mb > 0 ? 1 : 0) +
                          (f_.background_spill_mb > 0 ? 1 : 0)) *
                             runs * (f_.decode_steps + warm) +
                         8;
    absl::StatusOr<std::unique_ptr<SlotKvMemory>> kv =
        SlotKvMemory::Create(layout, {.slots = kMaxSlots, .max_rows = rows, .memory = b_.memory()});
    if (!kv.ok()) Bench::Fail(kv.status().ToString());
    // Slot 0 prefilled, its state copied into the other slots.
    Prefill((*kv)->slot(0), 0, f_.decode_depth);
    std::vector<uint8_t> state(
        static_cast<size_t>(layout.private_bytes() + f_.decode_depth * layout.row_bytes()));
    absl::StatusOr<int64_t> at =
        (*kv)->CapturePrivateState(0, absl::MakeSpan(state).subspan(0, layout.private_bytes()));
    if (!at.ok()) Bench::Fail(at.status().ToString());
    int64_t offset = layout.private_bytes();
    for (size_t c = 0; c < layout.components.size(); ++c) {
      const StateComponent& comp = layout.components[c];
      if (comp.kind != ComponentKind::kRows) continue;
      const int64_t n = f_.decode_depth * comp.bytes();
      Bench::Check((*kv)->CopyRowsOut(0, static_cast<int>(c), 0, f_.decode_depth,
                                      absl::MakeSpan(state).subspan(offset, n)),
                   "rows out");
      offset += n;
    }
    for (int s = 1; s < kMaxSlots; ++s) {
      Bench::Check((*kv)->BeginRestore(s), "begin restore");
      offset = layout.private_bytes();
      for (size_t c = 0; c < layout.components.size(); ++c) {
        const StateComponent& comp = layout.components[c];
        if (comp.kind != ComponentKind::kRows) continue;
        const int64_t n = f_.decode_depth * comp.bytes();
        Bench::Check((*kv)->CopyRowsIn(s, static_cast<int>(c), 0,
                                       absl::MakeConstSpan(state).subspan(offset, n)),
                     "rows in");
        offset += n;
      }
      Bench::Check(
          (*kv)->LoadPrivateState(s, f_.decode_depth,
                                  absl::MakeConstSpan(state).subspan(0, layout.private_bytes())),
          "private in");
      Bench::Check((*kv)->Validate(s, f_.decode_depth), "validate");
    }
    const double weights_other =
        model_->info().weight_bytes - costs_.embed_bytes - costs_.expert_bytes;
    // Every combination of the variants listed, the last listed innermost.
    struct Config {
      int bf16_inputs, variant, attention, ranges, kernels, overlapped, copy_kernel, staged_rows,
          staged_mb, prefetch_k, round_mb, fuse_silu, fuse_delta, fold_shared, moe_waves;
    };
    std::vector<Config> configs;
    for (const int bf16_inputs : f_.mma_bf16_inputs) {
      for (const int variant : f_.mma_variants) {
        for (const int attention : f_.decode_attention_variants) {
          for (const int ranges : f_.decode_ranges) {
            for (const int kernels : f_.moe_kernels) {
              for (const int overlapped : f_.overlapped_launches) {
                for (const int copy_kernel : f_.copy_rows_kernel) {
                  for (const int staged_rows : f_.mma_staged_rows) {
                    for (const int staged_mb : f_.mma_staged_mb) {
                      for (const int prefetch_k : f_.mma_prefetch_k) {
                        for (const int round_mb : f_.round_inputs_mb) {
                          for (const int fuse : f_.fuse_silu) {
                            for (const int delta : f_.fuse_delta) {
                              for (const int fold : f_.fold_shared) {
                                for (const int waves : f_.moe_waves) {
                                  configs.push_back({bf16_inputs, variant, attention, ranges,
                                                     kernels, overlapped, copy_kernel, staged_rows,
                                                     staged_mb, prefetch_k, round_mb, fuse, delta,
                                                     fold, waves});
                                }
                              }
                            }
                          }
                        }
                      }
                      if (staged_rows == 0) break;  // The threshold does not enter.
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
    for (const int parts : f_.logits_parts) {
      // The same weights and state layout, so the slots' contents stay valid.
      if (parts != logits_parts_) MakeModel(parts);
      for (const int64_t slot_count : f_.decode_slots) {
        for (const Config& c : configs) {
          b_.SetMmaRowsBf16InputsForTest(c.bf16_inputs == 1);
          Bench::Check(b_.SetMmaRowsVariantForTest(c.variant), "mma variant");
          Bench::Check(b_.SetAttentionDecodeVariantForTest(c.attention),
                       "decode attention variant");
          Bench::Check(b_.SetAttentionDecodeRangesPerBlockForTest(c.ranges),
                       "decode attention ranges");
          b_.SetMoeKernelsForTest(c.kernels);
          hip::SetOverlappedLaunches(c.overlapped == 1);
          b_.SetCopyRowsKernelForTest(c.copy_kernel == 1);
          b_.SetMmaRowsStagedMinRowsForTest(c.staged_rows);
          b_.SetMmaRowsStagedMinBytesForTest(int64_t{c.staged_mb} << 20);
          b_.SetMmaRowsPrefetchKForTest(c.prefetch_k);
          b_.SetRoundProductInputsMaxBytesForTest(int64_t{c.round_mb} << 20);
          b_.SetFuseGateUpSiluForTest(c.fuse_silu == 1);
          b_.SetFuseDeltaInputsForTest(c.fuse_delta == 1);
          b_.SetFoldSharedExpertForTest(c.fold_shared == 1);
          b_.SetMoeProductWavesForTest(c.moe_waves);
          std::string suffix;
          if (f_.mma_bf16_inputs.size() > 1) {
            suffix += c.bf16_inputs == 1 ? " (bf16 product inputs)" : " (exact product inputs)";
          }
          if (f_.mma_variants.size() > 1) suffix += absl::StrFormat(" (mma variant %d)", c.variant);
          if (f_.decode_attention_variants.size() > 1) {
            suffix += absl::StrFormat(" (decode attention variant %d)", c.attention);
          }
          if (f_.decode_ranges.size() > 1) {
            suffix += absl::StrFormat(" (decode attention ranges a block %d)", c.ranges);
          }
          if (f_.moe_kernels.size() > 1) suffix += absl::StrFormat(" (moe kernels %d)", c.kernels);
          if (f_.overlapped_launches.size() > 1) {
            suffix += absl::StrFormat(" (overlapped launches %d)", c.overlapped);
          }
          if (f_.copy_rows_kernel.size() > 1) {
            suffix += absl::StrFormat(" (copy rows kernel %d)", c.copy_kernel);
          }
          if (f_.mma_staged_rows.size() > 1) {
            suffix += absl::StrFormat(" (staged inputs from %d rows)", c.staged_rows);
          }
          if (f_.mma_staged_mb.size() > 1 && c.staged_rows > 0) {
            suffix += absl::StrFormat(" (staged from %d MB of weights)", c.staged_mb);
          }
          if (f_.logits_parts.size() > 1) suffix += absl::StrFormat(" (logits parts %d)", parts);
          if (f_.mma_prefetch_k.size() > 1) {
            suffix += absl::StrFormat(" (mma prefetch %d)", c.prefetch_k);
          }
          if (f_.round_inputs_mb.size() > 1) {
            suffix += absl::StrFormat(" (rounded inputs up to %d MB)", c.round_mb);
          }
          if (f_.fuse_silu.size() > 1) suffix += absl::StrFormat(" (fused silu %d)", c.fuse_silu);
          if (f_.fuse_delta.size() > 1) {
            suffix += absl::StrFormat(" (fused delta inputs %d)", c.fuse_delta);
          }
          if (f_.fold_shared.size() > 1) {
            suffix += absl::StrFormat(" (shared expert folded %d)", c.fold_shared);
          }
          if (f_.moe_waves.size() > 1) {
            suffix += absl::StrFormat(" (moe product waves %d)", c.moe_waves);
          }
          DecodeSteps(static_cast<int>(slot_count), **kv, weights_other, suffix);
        }
        const HipKernelBackendOptions defaults;
        hip::SetOverlappedLaunches(defaults.overlapped_launches);
        b_.SetCopyRowsKernelForTest(defaults.copy_rows_kernel);
        b_.SetMmaRowsStagedMinRowsForTest(defaults.mma_rows_staged_min_rows);
        b_.SetMmaRowsStagedMinBytesForTest(defaults.mma_rows_staged_min_bytes);
        b_.SetMmaRowsPrefetchKForTest(defaults.mma_rows_prefetch_k);
        b_.SetRoundProductInputsMaxBytesForTest(defaults.round_product_inputs_max_bytes);
        b_.SetFuseGateUpSiluForTest(defaults.fuse_gate_up_silu);
        b_.SetFuseDeltaInputsForTest(defaults.fuse_delta_inputs);
        b_.SetFoldSharedExpertForTest(defaults.fold_shared_expert);
        b_.SetMoeProductWavesForTest(defaults.moe_product_waves);
        b_.SetMoeKernelsForTest(defaults.moe_kernels);
        b_.SetMmaRowsBf16InputsForTest(defaults.mma_rows_bf16_inputs);
        Bench::Check(b_.SetMmaRowsVariantForTest(defaults.mma_rows_variant), "mma variant");
        Bench::Check(b_.SetAttentionDecodeVariantForTest(defaults.attention_decode_variant),
                     "decode attention variant");
        Bench::Check(
            b_.SetAttentionDecodeRangesPerBlockForTest(defaults.attention_decode_ranges_per_block),
            "decode attention ranges");
      }
    }
  }

  // How DecodeSteps returns a step's logits, in the order it runs them.
  enum Mode { kFresh = 0, kKept = 1, kViews = 2 };
  static constexpr int kDecodeModes = 3;

  // Times --decode-steps steps of `slots` slots of `kv` (each slot's sequence one token
  // deeper a step), first with fresh result vectors, then with kept ones, then read in place,
  // and prints them against the HBM bound; `suffix` ends the lines.
  void DecodeSteps(int slots, SlotKvMemory& kv_memory, double weights_other,
                   const std::string& suffix) {
    const StateLayout& layout = model_->state_layout();
    const int warm = 2;
    std::vector<std::vector<int32_t>> next(slots);
    // Each step's logits in fresh vectors (ForwardBatch), then in vectors kept between steps
    // (ForwardBatchInto), then read in place (ForwardBatchViews, as the scheduler's decode).
    double fresh_seconds = 0;
    double kept_seconds = 0;
    double seconds = 0;
    int64_t waits = 0;
    std::vector<std::vector<float>> kept;
    std::vector<absl::Span<const float>> views;
    for (const Mode mode : {kFresh, kKept, kViews}) {
      double& total = mode == kViews ? seconds : mode == kKept ? kept_seconds : fresh_seconds;
      for (int step = 0; step < warm + f_.decode_steps; ++step) {
        std::vector<SequencePass> batch;
        for (int s = 0; s < slots; ++s) {
          next[s] = {tokens_[static_cast<size_t>((step * 31 + s) % 1000)]};
          batch.push_back({kv_memory.slot(s), next[s]});
        }
        if (mode == kViews) ProfilerRange(slots, step == warm);
        // Fresh results are freed after the step's time is taken (as before).
        absl::StatusOr<std::vector<std::vector<float>>> fresh;
        const int64_t waits_before = b_.host_waits();
        const auto start = Clock::now();
        if (mode == kViews) {
          const absl::Status st = model_->ForwardBatchViews(batch, views);
          if (!st.ok()) Bench::Fail(st.ToString());
        } else if (mode == kKept) {
          const absl::Status st = model_->ForwardBatchInto(batch, kept);
          if (!st.ok()) Bench::Fail(st.ToString());
        } else {
          fresh = model_->ForwardBatch(batch);
          if (!fresh.ok()) Bench::Fail(fresh.status().ToString());
        }
        if (step >= warm) {
          total += Bench::Seconds(start);
          if (mode == kViews) waits += b_.host_waits() - waits_before;
        }
      }
    }
    ProfilerRange(slots, false);
    // Bytes one step must read: the weights (embeddings gathered, not read; of the routed
    // experts, the share random routing of `slots` tokens touches), each slot's rows, and
    // each slot's private state read and written.
    double expert_share = 1.0;
    if (o_.num_experts > 0) {
      expert_share = 1.0 - std::pow(1.0 - static_cast<double>(o_.top_k) / o_.num_experts, slots);
    }
    const double bytes = weights_other + costs_.expert_bytes * expert_share +
                         slots * (static_cast<double>(f_.decode_depth) * layout.row_bytes() +
                                  2.0 * layout.private_bytes());
    const double tokens_per_s = slots * f_.decode_steps / seconds;
    const double bound = slots / (bytes / ceil_.hbm_bytes_per_s);
    Print(absl::StrFormat(
        "%s decode %2d slots at %ld tokens: %7.2f ms a step  %8.1f tokens/s  HBM bound %8.1f "
        "tokens/s (%.2f GB a step) = %5.1f %%%s",
        name_.c_str(), slots, f_.decode_depth, seconds / f_.decode_steps * 1e3, tokens_per_s, bound,
        bytes / 1e9, 100.0 * tokens_per_s / bound, suffix));
    const double kept_tokens_per_s = slots * f_.decode_steps / kept_seconds;
    const double fresh_tokens_per_s = slots * f_.decode_steps / fresh_seconds;
    Print(absl::StrFormat(
        "%s decode %2d slots, logits copied into kept vectors (ForwardBatchInto): %7.2f ms a "
        "step = %5.1f %%; into fresh vectors each step (ForwardBatch): %7.2f ms = %5.1f %%; host "
        "waits a step (in place): %.1f%s",
        name_.c_str(), slots, kept_seconds / f_.decode_steps * 1e3,
        100.0 * kept_tokens_per_s / bound, fresh_seconds / f_.decode_steps * 1e3,
        100.0 * fresh_tokens_per_s / bound, static_cast<double>(waits) / f_.decode_steps, suffix));
    // The host's share of a step that copies the logits from page-locked staging into kept
    // result vectors: the same bytes copied between kept host vectors (median of 5).
    std::vector<std::vector<float>> copies(kept.size());
    std::vector<double> copy_seconds;
    for (int rep = 0; rep < 5; ++rep) {
      const auto start = Clock::now();
      for (size_t i = 0; i < kept.size(); ++i) copies[i].assign(kept[i].begin(), kept[i].end());
      copy_seconds.push_back(Bench::Seconds(start));
    }
    std::sort(copy_seconds.begin(), copy_seconds.end());
    if (f_.op_times) OpTimes(slots, kv_memory, suffix);
    if (f_.host_lead_mb > 0) HostLead(slots, kv_memory, seconds / f_.decode_steps, bound, suffix);
    if (f_.background_spill_mb > 0) {
      BesideSpills(slots, kv_memory, seconds / f_.decode_steps, bound, suffix);
    }
    Print(
        absl::StrFormat("%s decode %2d slots: copying a step's logits (%.1f MB) between kept host "
                        "vectors takes %.3f ms%s",
                        name_.c_str(), slots, slots * static_cast<double>(kept[0].size()) * 4e-6,
                        copy_seconds[2] * 1e3, suffix));
  }

  // One decode step's batch over slots 0 .. next.size() - 1: slot s takes the prompt's token
  // (offset + s) % 1000, kept in next[s].
  std::vector<SequencePass> StepBatch(SlotKvMemory& kv_memory, int offset,
                                      std::vector<int32_t>& next) {
    std::vector<SequencePass> batch;
    for (size_t s = 0; s < next.size(); ++s) {
      next[s] = tokens_[(static_cast<size_t>(offset) + s) % 1000];
      batch.push_back({kv_memory.slot(static_cast<int>(s)), absl::MakeConstSpan(&next[s], 1)});
    }
    return batch;
  }

  // A heading, `before` the total time of `totals` (ms, calls by operation) divided by `per`
  // (`decimals` places) and `after` it, then each operation's time, largest first, divided by
  // `per` (calls and times a step where `per` counts steps), and its share of the whole.
  void PrintOpTotals(const std::string& before, const std::string& after,
                     const std::map<std::string, std::pair<double, int64_t>>& totals, double per,
                     int decimals, const char* unit) {
    std::vector<std::pair<double, std::string>> order;
    double all_ms = 0;
    for (const auto& [what, t] : totals) {
      order.emplace_back(t.first, what);
      all_ms += t.first;
    }
    Print(absl::StrFormat("%s%.*f%s", before, decimals, all_ms / per, after));
    std::sort(order.rbegin(), order.rend());
    for (const auto& [ms, what] : order) {
      Print(absl::StrFormat("   %-40s %8.4f ms%s %6.1f calls %5.1f %%", what, ms / per, unit,
                            static_cast<double>(totals.at(what).second) / per,
                            100.0 * ms / all_ms));
    }
  }

  // --prefill-op-times: the prefill of `tokens` tokens into `slot` (reset first) again, in passes
  // of pass_tokens, with an event before every backend operation, and its time by operation.
  void PrefillOpTimes(SlotKvMemory& kv, SlotState* slot, int64_t tokens, const std::string& label) {
    std::map<std::string, std::pair<double, int64_t>> totals;
    Bench::Check(kv.Reset(0), "reset");
    for (int64_t at = 0; at < tokens;) {
      const int64_t end = std::min(tokens, at + f_.pass_tokens);
      timing_.SetTiming(true);
      absl::StatusOr<std::vector<float>> logits =
          model_->Forward(slot, absl::MakeConstSpan(tokens_).subspan(at, end - at), {});
      if (!logits.ok()) Bench::Fail(logits.status().ToString());
      Bench::Check(timing_.Collect(totals), "prefill op times");
      at = end;
    }
    timing_.SetTiming(false);
    PrintOpTotals(absl::StrFormat("%s prefill %ld tokens by operation (events on the stream, ",
                                  name_.c_str(), tokens),
                  absl::StrCat(" ms with them)", label, ":"), totals, 1.0, 1, "");
  }

  // --op-times: --decode-steps more steps of `slots` slots (as the in-place ones) with an event
  // before every backend operation (OpTimingBackend), and each operation's share of a step.
  void OpTimes(int slots, SlotKvMemory& kv_memory, const std::string& suffix) {
    std::map<std::string, std::pair<double, int64_t>> totals;
    std::vector<int32_t> next(slots);
    std::vector<absl::Span<const float>> views;
    for (int step = 0; step < 2 + f_.decode_steps; ++step) {
      const std::vector<SequencePass> batch = StepBatch(kv_memory, step * 37, next);
      timing_.SetTiming(step >= 2);
      Bench::Check(model_->ForwardBatchViews(batch, views), "op-timed step");
      Bench::Check(timing_.Collect(totals), "op times");
    }
    timing_.SetTiming(false);
    PrintOpTotals(absl::StrFormat("%s decode %2d slots by operation (events on the stream, ",
                                  name_.c_str(), slots),
                  absl::StrCat(" ms a step with them)", suffix, ":"), totals, f_.decode_steps, 2,
                  " a step");
  }

  // --host-lead-mb: --decode-steps more in-place steps of `slots` slots, each enqueued behind a
  // device copy of --host-lead-mb MB; `step_seconds` is the in-place steps' time without it.
  void HostLead(int slots, SlotKvMemory& kv_memory, double step_seconds, double bound,
                const std::string& suffix) {
    const size_t bytes = static_cast<size_t>(f_.host_lead_mb) << 20;
    absl::StatusOr<DeviceBuffer> src = b_.Allocate(bytes);
    absl::StatusOr<DeviceBuffer> dst = b_.Allocate(bytes);
    if (!src.ok() || !dst.ok()) Bench::Fail("host lead buffers");
    hipStream_t stream = b_.compute_stream();
    auto copy = [&] {
      if (hipMemcpyAsync(dst->data(), src->data(), bytes, hipMemcpyDeviceToDevice, stream) !=
          hipSuccess) {
        Bench::Fail("host lead copy");
      }
    };
    std::vector<double> copy_seconds;
    for (int rep = 0; rep < 5; ++rep) {
      const auto start = Clock::now();
      copy();
      if (hipStreamSynchronize(stream) != hipSuccess) Bench::Fail("host lead sync");
      copy_seconds.push_back(Bench::Seconds(start));
    }
    std::sort(copy_seconds.begin(), copy_seconds.end());
    const double copy_s = copy_seconds[2];
    std::vector<int32_t> next(slots);
    std::vector<absl::Span<const float>> views;
    double total = 0;
    for (int step = 0; step < 2 + f_.decode_steps; ++step) {
      const std::vector<SequencePass> batch = StepBatch(kv_memory, step * 41, next);
      const auto start = Clock::now();
      copy();
      Bench::Check(model_->ForwardBatchViews(batch, views), "host-lead step");
      if (step >= 2) total += Bench::Seconds(start);
    }
    const double device_s = total / f_.decode_steps - copy_s;
    Print(absl::StrFormat(
        "%s decode %2d slots behind a %.2f ms device copy: %.2f ms a step of the device's own "
        "(= %5.1f %% of the HBM bound) against %.2f ms as enqueued%s",
        name_.c_str(), slots, copy_s * 1e3, device_s * 1e3, 100.0 * slots / device_s / bound,
        step_seconds * 1e3, suffix));
  }

  // --background-spill-mb: --decode-steps more in-place steps of `slots` slots, each issued
  // right after a background download of --background-spill-mb MB into page-locked memory;
  // `step_seconds` is the in-place steps' time without them.
  void BesideSpills(int slots, SlotKvMemory& kv_memory, double step_seconds, double bound,
                    const std::string& suffix) {
    const int64_t bytes = f_.background_spill_mb << 20;
    absl::StatusOr<DeviceBuffer> src = b_.Allocate(bytes);
    if (!src.ok()) Bench::Fail("background spill source");
    std::vector<uint8_t> host(static_cast<size_t>(bytes));
    DeviceMemory* memory = b_.memory();
    Bench::Check(memory->RegisterHost(host.data(), bytes), "pinning the spill destination");
    std::vector<int32_t> next(slots);
    std::vector<absl::Span<const float>> views;
    double total = 0;
    uint64_t ticket = 0;
    Clock::time_point first;
    for (int step = 0; step < 2 + f_.decode_steps; ++step) {
      const std::vector<SequencePass> batch = StepBatch(kv_memory, step * 43, next);
      const auto start = Clock::now();
      if (step == 2) first = start;
      absl::StatusOr<uint64_t> t = memory->DownloadBackground(host.data(), src->data(), bytes);
      Bench::Check(t.status(), "background download");
      ticket = *t;
      Bench::Check(model_->ForwardBatchViews(batch, views), "step beside a background download");
      if (step >= 2) total += Bench::Seconds(start);
    }
    Bench::Check(memory->WaitBackground(ticket), "background downloads");
    const double copies_s = Bench::Seconds(first);
    Bench::Check(memory->UnregisterHost(host.data()), "unpinning the spill destination");
    const double step_s = total / f_.decode_steps;
    Print(absl::StrFormat(
        "%s decode %2d slots beside %ld MB of background downloads a step: %.2f ms a step "
        "(= %5.1f %% of the HBM bound) against %.2f ms without; the downloads %.1f GB/s%s",
        name_.c_str(), slots, f_.background_spill_mb, step_s * 1e3, 100.0 * slots / step_s / bound,
        step_seconds * 1e3, static_cast<double>(bytes) * f_.decode_steps / copies_s / 1e9, suffix));
  }

  // Starts (`start`) or stops the profiler's capture range when `slots` is --profile-slots.
  void ProfilerRange(int slots, bool start) {
    if (slots != f_.profile_slots) return;
    ProfilerRange(start);
  }
  void ProfilerRange(bool start) {
#if defined(CAIRN_HIP_PLATFORM_NVIDIA)
    if (start) {
      cudaProfilerStart();
    } else {
      cudaProfilerStop();
    }
#endif
  }

  const Flags& f_;
  HipKernelBackend& b_;
  // What the models run on: b_'s operations, timed per operation under --op-times.
  OpTimingBackend timing_{&b_};
  const Ceilings& ceil_;
  std::string name_;
  RandomCheckpointOptions o_;
  HybridConfig config_;
  std::vector<RandomTensorShape> tensors_;
  std::vector<uint16_t> values_;  // Behind every tensor of model_ (kept while it lives).
  int logits_parts_ = 0;          // model_'s.
  Costs costs_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> tokens_;
};

// Parses a comma-separated list of integers in [lo, hi] into `out`.
bool IntList(const std::string& value, int lo, int hi, std::vector<int>* out) {
  out->clear();
  for (absl::string_view v : absl::StrSplit(value, ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(v, &n) || n < lo || n > hi) return false;
    out->push_back(n);
  }
  return true;
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) return false;
    const std::string key = a.substr(2, eq - 2);
    const std::string value = a.substr(eq + 1);
    int64_t n = 0;
    const bool number = absl::SimpleAtoi(value, &n);
    if (key == "model") {
      f->model = value;
    } else if (key == "disk-dir") {
      f->disk_dir = value;
    } else if (key == "prefill") {
      f->prefill.clear();
      for (absl::string_view v : absl::StrSplit(value, ',')) {
        if (!absl::SimpleAtoi(v, &n) || n <= 0) return false;
        f->prefill.push_back(n);
      }
      std::sort(f->prefill.begin(), f->prefill.end());
    } else if (key == "decode-slots") {
      f->decode_slots.clear();
      for (absl::string_view v : absl::StrSplit(value, ',')) {
        if (!absl::SimpleAtoi(v, &n) || n <= 0 || n > 16) return false;
        f->decode_slots.push_back(n);
      }
    } else if (key == "mma-variants") {
      if (!IntList(value, -1, 2, &f->mma_variants)) return false;
    } else if (key == "mma-bf16-inputs") {
      if (!IntList(value, 0, 1, &f->mma_bf16_inputs)) return false;
    } else if (key == "moe-prefill") {
      if (!IntList(value, 0, 2, &f->moe_prefill)) return false;
    } else if (key == "moe-kernels") {
      if (!IntList(value, 0, 1, &f->moe_kernels)) return false;
    } else if (key == "attention-variants") {
      if (!IntList(value, 0, hip::kAttentionMmaVariants - 1, &f->attention_variants)) return false;
    } else if (key == "decode-ranges") {
      if (!IntList(value, 0, hip::kAttentionDecodeMaxRangesPerBlock, &f->decode_ranges)) {
        return false;
      }
      for (const int r : f->decode_ranges) {
        if ((r & (r - 1)) != 0) return false;  // 0 or a power of two.
      }
    } else if (key == "overlapped-launches") {
      if (!IntList(value, 0, 1, &f->overlapped_launches)) return false;
    } else if (key == "copy-rows-kernel") {
      if (!IntList(value, 0, 1, &f->copy_rows_kernel)) return false;
    } else if (key == "mma-staged-rows") {
      if (!IntList(value, 0, 64, &f->mma_staged_rows)) return false;
    } else if (key == "mma-staged-mb") {
      if (!IntList(value, 0, 1 << 20, &f->mma_staged_mb)) return false;
    } else if (key == "fuse-delta") {
      if (!IntList(value, 0, 1, &f->fuse_delta)) return false;
    } else if (key == "fold-shared") {
      if (!IntList(value, 0, 1, &f->fold_shared)) return false;
    } else if (key == "moe-waves") {
      if (!IntList(value, 0, 64, &f->moe_waves)) return false;
    } else if (key == "fuse-silu") {
      if (!IntList(value, 0, 1, &f->fuse_silu)) return false;
    } else if (key == "round-inputs-mb") {
      if (!IntList(value, 0, 1 << 20, &f->round_inputs_mb)) return false;
    } else if (key == "mma-prefetch-k") {
      if (!IntList(value, 0, 1 << 20, &f->mma_prefetch_k)) return false;
    } else if (key == "logits-parts") {
      if (!IntList(value, 1, 64, &f->logits_parts)) return false;
    } else if (key == "decode-attention-variants") {
      if (!IntList(value, 0, hip::kAttentionDecodeVariants - 1, &f->decode_attention_variants)) {
        return false;
      }
    } else if (key == "mma-tiles-of-8" && number && (n == 0 || n == 1)) {
      f->mma_tiles_of_8 = n == 1;
    } else if (key == "grouped-moe" && number && (n == 0 || n == 1)) {
      f->grouped_moe = n == 1;
    } else if (!number || n <= 0) {
      return false;
    } else if (key == "ttft-depth") {
      f->ttft_depth = n;
    } else if (key == "turn-tokens") {
      f->turn_tokens = n;
    } else if (key == "pass-tokens") {
      f->pass_tokens = n;
    } else if (key == "decode-depth") {
      f->decode_depth = n;
    } else if (key == "decode-steps") {
      f->decode_steps = static_cast<int>(n);
    } else if (key == "dense-layers") {
      f->dense_layers = static_cast<int>(n);
    } else if (key == "moe-layers") {
      f->moe_layers = static_cast<int>(n);
    } else if (key == "op-times") {
      f->op_times = n != 0;
    } else if (key == "prefill-op-times") {
      f->prefill_op_times = n != 0;
    } else if (key == "attention-split-keys") {
      f->attention_split_keys = n;
    } else if (key == "host-lead-mb") {
      f->host_lead_mb = n;
    } else if (key == "background-spill-mb" && number && n >= 0 && n <= (1 << 16)) {
      f->background_spill_mb = n;
    } else if (key == "profile-slots") {
      f->profile_slots = static_cast<int>(n);
    } else if (key == "profile-prefill") {
      f->profile_prefill = n;
    } else {
      return false;
    }
  }
  return f->model == "dense" || f->model == "moe" || f->model == "both";
}

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: cairn_hip_model_bench [--model=dense|moe|both] [--prefill=N,N,...] "
                 "[--ttft-depth=N] [--turn-tokens=N] [--pass-tokens=N] [--decode-depth=N] "
                 "[--decode-steps=N] [--dense-layers=N] [--moe-layers=N] [--disk-dir=DIR] "
                 "[--decode-slots=N,N,...] [--profile-slots=N] [--mma-tiles-of-8=0|1] "
                 "[--grouped-moe=0|1] [--mma-variants=N,N,...] [--moe-prefill=N,N,...] "
                 "[--attention-variants=N,N,...] [--profile-prefill=N] [--moe-kernels=N,N,...] "
                 "[--decode-attention-variants=N,N,...] [--mma-bf16-inputs=1,0] [--op-times=1] "
                 "[--host-lead-mb=N] [--attention-split-keys=N] [--decode-ranges=N,N,...] "
                 "[--background-spill-mb=N] [--prefill-op-times=1]\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> created =
      HipKernelBackend::Create({.attention_split_keys = flags.attention_split_keys,
                                .mma_rows_tiles_of_8 = flags.mma_tiles_of_8,
                                .grouped_moe = flags.grouped_moe});
  if (!created.ok()) Bench::Fail(created.status().ToString());
  HipKernelBackend& b = **created;
  Bench bench(&b);
  const Ceilings ceilings = MeasureCeilings(b, bench, 5);
  bench.Free();
  ModelBench run(flags, b, ceilings);
  if (flags.model != "moe") run.Run("dense", DenseShape(flags.dense_layers));
  if (flags.model != "dense") run.Run("moe", MoeShape(flags.moe_layers));
  return 0;
}

}  // namespace
}  // namespace cairn::infer

int main(int argc, char** argv) { return cairn::infer::Main(argc, argv); }
