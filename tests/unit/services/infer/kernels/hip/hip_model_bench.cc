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
//          [--fuse-delta=1,0] [--fold-shared=1,0] [--moe-waves=4,0] [--moe-stream=0,1,2,3,4,5]
//          [--moe-cooperative=0,1] [--stream-products=-1,0,1] [--fuse-conv=1,0]
//          [--early-release=0,1] [--fuse-delta-norm=0,1] [--delta-step-blocks=1,4]
//          [--router-inside=0,1] [--static-sixteenths=16,12,8] [--compact-route=0,1]
//          [--fuse-qk-rope=1,0]
// The decode variants: each slot count's decode steps run once for every combination of the
// values listed, in the flags' order below, the last innermost: --mma-bf16-inputs,
// --mma-variants, --decode-attention-variants, --decode-ranges, --moe-kernels,
// --overlapped-launches (hip::SetOverlappedLaunches), --copy-rows-kernel, --mma-staged-rows (0:
// never), --mma-staged-mb (MB; where staged rows are 0, only the first value),
// --mma-prefetch-k (0: none), --round-inputs-mb (MB, 0: off; the prefill runs, not the TTFT
// run, also once for each value), --fuse-silu, --fuse-delta, --fold-shared, --moe-waves,
// --moe-stream, --moe-cooperative, --stream-products, --fuse-conv, --early-release
// (hip::SetEarlyRelease's mask, hip::EarlyReleaseKind bits), --fuse-delta-norm,
// --delta-step-blocks, --router-inside, --static-sixteenths, --compact-route and --fuse-qk-rope.
// Each sets the HipKernelBackendOptions field of its name (copy_rows_kernel,
// mma_rows_staged_min_rows, mma_rows_staged_min_bytes, mma_rows_prefetch_k,
// round_product_inputs_max_bytes, fuse_gate_up_silu, fuse_delta_inputs, fold_shared_expert,
// moe_product_waves, moe_stream_products, moe_one_launch_cooperative, stream_product_weights,
// fuse_conv_product, early_release, fuse_delta_norm, delta_step_min_blocks, moe_router_inside,
// moe_one_launch_static_sixteenths, moe_compact_route, fuse_qk_norm_rope; each option's comment
// says whether it changes any bits).
// --logits-parts: outermost, every slot count's decode steps once for each value listed (the
// model made again for each change; the same bits): N >= 1, Qwen3HybridOptions::logits_parts N
// with the logits downloaded (logits_direct_max_bytes 0); 0, the logits written by the product
// straight into the page-locked staging (logits_direct_max_bytes unlimited); -1 (the default),
// the model's defaults. The prefill and TTFT runs use the first.
// --op-times=1: after each slot count's decode measurements, --decode-steps more steps with a
// device event before every backend operation (OpTimingBackend) and the step's time by operation.
// --moe-trace=1: after each slot count's decode measurements, one more step whose MoE one
// launches (hip::MoeLayerStream) stamp each block's phases with the device's clock
// (hip::kMoeLayerTracePoints): the phases' times after the launch's first block entered, over
// the blocks and then over the step's launches. --moe-trace=2: the stamped launches' warp 0 also
// routes the first token twice before the routing proper, stamping each (a cold routing against a
// warm one; later phases shift by those two).
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
// grouped GEMM, MoeGemmBf16; 2 and 3: the same on the warpgroup GEMMs, moe_gemm_wgmma, where
// built, with blocks of 2 and 3 warpgroups; 4 and 5: the producer-fed GEMMs, moe_gemm_tma
// variants 1 and 2, where the device has tensor maps; 0: KernelBackend's default), in turn; the
// last value stays for the rest.
// --moe-kernels: each prefill length (except the TTFT run) and each slot count's decode steps
// run once for each value listed of HipKernelBackendOptions::moe_kernels (the MoE device paths'
// routing, sort and sum: 1 the eighth round's, 0 the earlier ones; the same bits), in turn.

#include "tests/unit/services/infer/kernels/hip/hip_model_bench.h"

#include <limits>

#include "tests/unit/services/infer/kernels/hip/hip_model_shapes.h"

namespace cairn::infer::model_bench {
namespace {

std::vector<int32_t> RandomIds(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int32_t& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

Costs CountCosts(const RandomCheckpointOptions& o, const std::vector<RandomTensorShape>& tensors) {
  Costs c;
  const double active = o.num_experts > 0 ? static_cast<double>(o.top_k) / o.num_experts : 1.0;
  for (const RandomTensorShape& t : tensors) {
    double n = 1;
    for (int64_t d : t.shape) n *= static_cast<double>(d);
    c.tensor_bytes += 2 * n;
    if (t.name.find("lm_head") != std::string::npos) c.head_bytes = 2 * n;
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

}  // namespace

void Print(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void ModelBench::Run(const std::string& name, const RandomCheckpointOptions& o) {
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

double ModelBench::MakeModel(int logits_parts) {
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
  // The LM head of an untied shape gets bytes of its own: a stored head with the embedding's
  // bytes is the embedding (the loader shares it, as transformers' tie_weights does), which
  // would make the untied shapes tied.
  head_values_.clear();
  std::vector<TensorView> views;
  for (const RandomTensorShape& t : tensors_) {
    TensorView v;
    v.name = t.name;
    v.dtype = DType::kBF16;
    v.shape = t.shape;
    v.bytes = v.elements() * 2;
    v.data = reinterpret_cast<const uint8_t*>(values.data());
    if (t.name.find("lm_head") != std::string::npos) {
      head_values_.assign(values.begin(), values.begin() + v.elements());
      head_values_[0] ^= 1;
      v.data = reinterpret_cast<const uint8_t*>(head_values_.data());
    }
    views.push_back(std::move(v));
  }
  absl::StatusOr<std::unique_ptr<TensorStore>> store = TensorStore::FromViews(std::move(views));
  if (!store.ok()) Bench::Fail(store.status().ToString());
  Qwen3HybridOptions options;
  if (logits_parts == 0) {  // Written by the product straight into the staging.
    options.logits_parts = 1;
    options.logits_direct_max_bytes = std::numeric_limits<int64_t>::max();
  } else if (logits_parts > 0) {  // In parts (or one), then downloaded.
    options.logits_parts = logits_parts;
    options.logits_direct_max_bytes = 0;
  }
  const auto start = Clock::now();
  absl::StatusOr<std::unique_ptr<Model>> model =
      CreateQwen3HybridModel(config_, *std::move(store), 0, &timing_, options);
  if (!model.ok()) Bench::Fail(model.status().ToString());
  const double seconds = Bench::Seconds(start);
  model_ = *std::move(model);
  logits_parts_ = logits_parts;
  return seconds;
}

int64_t ModelBench::MaxDepth() const {
  int64_t d = f_.ttft_depth;
  for (int64_t t : f_.prefill) d = std::max(d, t);
  return d;
}

void ModelBench::PrintOpTotals(const std::string& before, const std::string& after,
                               const std::map<std::string, std::pair<double, int64_t>>& totals,
                               double per, int decimals, const char* unit) {
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
                          static_cast<double>(totals.at(what).second) / per, 100.0 * ms / all_ms));
  }
}

void ModelBench::ProfilerRange(int slots, bool start) {
  if (slots != f_.profile_slots) return;
  ProfilerRange(start);
}

void ModelBench::ProfilerRange(bool start) {
#if defined(CAIRN_HIP_PLATFORM_NVIDIA)
  if (start) {
    cudaProfilerStart();
  } else {
    cudaProfilerStop();
  }
#endif
}

namespace {

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
      if (!IntList(value, 0, 5, &f->moe_prefill)) return false;
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
    } else if (key == "early-release") {
      if (!IntList(value, 0, hip::kReleaseAllKinds, &f->early_release)) return false;
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
    } else if (key == "moe-stream") {
      if (!IntList(value, 0, 5, &f->moe_stream)) return false;
    } else if (key == "moe-cooperative") {
      if (!IntList(value, 0, 1, &f->moe_cooperative)) return false;
    } else if (key == "stream-products") {
      if (!IntList(value, -1, 1, &f->stream_products)) return false;
    } else if (key == "fuse-conv") {
      if (!IntList(value, 0, 1, &f->fuse_conv)) return false;
    } else if (key == "fuse-delta-norm") {
      if (!IntList(value, 0, 1, &f->fuse_delta_norm)) return false;
    } else if (key == "delta-step-blocks") {
      if (!IntList(value, 1, 4, &f->delta_step_blocks)) return false;
    } else if (key == "router-inside") {
      if (!IntList(value, 0, 1, &f->router_inside)) return false;
    } else if (key == "static-sixteenths") {
      if (!IntList(value, 0, 16, &f->static_sixteenths)) return false;
    } else if (key == "compact-route") {
      if (!IntList(value, 0, 1, &f->compact_route)) return false;
    } else if (key == "fuse-qk-rope") {
      if (!IntList(value, 0, 1, &f->fuse_qk_rope)) return false;
    } else if (key == "fuse-silu") {
      if (!IntList(value, 0, 1, &f->fuse_silu)) return false;
    } else if (key == "round-inputs-mb") {
      if (!IntList(value, 0, 1 << 20, &f->round_inputs_mb)) return false;
    } else if (key == "mma-prefetch-k") {
      if (!IntList(value, 0, 1 << 20, &f->mma_prefetch_k)) return false;
    } else if (key == "logits-parts") {
      if (!IntList(value, -1, 64, &f->logits_parts)) return false;
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
    } else if (key == "moe-trace" && number && n >= 0 && n <= 2) {
      f->moe_trace = static_cast<int>(n);
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
                 "[--background-spill-mb=N] [--prefill-op-times=1] [--moe-trace=1|2] "
                 "[--stream-products=N,N,...]\n");
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
  if (flags.model != "moe") run.Run("dense", testing::DenseModelShape(flags.dense_layers));
  if (flags.model != "dense") run.Run("moe", testing::MoeModelShape(flags.moe_layers));
  return 0;
}

}  // namespace
}  // namespace cairn::infer::model_bench

int main(int argc, char** argv) { return cairn::infer::model_bench::Main(argc, argv); }
