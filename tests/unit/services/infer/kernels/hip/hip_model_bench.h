#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MODEL_BENCH_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MODEL_BENCH_H_

// cairn_hip_model_bench's parts (hip_model_bench.cc has what it measures and its flags): the
// flags, what a model costs, and the bench of one model, whose methods are in
// hip_model_bench.cc (making the model, running it), hip_model_bench_prefill.cc (prefill,
// restore, capture, the TTFT table) and hip_model_bench_decode.cc (decode steps).

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
#include <utility>
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

namespace cairn::infer::model_bench {

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
  std::vector<int> moe_prefill = {!HipKernelBackendOptions().grouped_moe_prefill ? 0
                                  : HipKernelBackendOptions().moe_gemm_wgmma &&
                                          hip::MoeGemmWgmmaSupported()
                                      ? HipKernelBackendOptions().moe_gemm_wgmma_warpgroups
                                      : 1};
  std::vector<int> attention_variants = {HipKernelBackendOptions().attention_mma_variant};
  std::vector<int> decode_attention_variants = {HipKernelBackendOptions().attention_decode_variant};
  std::vector<int> decode_ranges = {HipKernelBackendOptions().attention_decode_ranges_per_block};
  std::vector<int> overlapped_launches = {HipKernelBackendOptions().overlapped_launches ? 1 : 0};
  std::vector<int> early_release = {static_cast<int>(HipKernelBackendOptions().early_release)};
  std::vector<int> copy_rows_kernel = {HipKernelBackendOptions().copy_rows_kernel ? 1 : 0};
  std::vector<int> mma_staged_rows = {HipKernelBackendOptions().mma_rows_staged_min_rows};
  std::vector<int> mma_staged_mb = {
      static_cast<int>(HipKernelBackendOptions().mma_rows_staged_min_bytes >> 20)};
  // -1: the model's defaults; 0: straight into the staging (logits_direct_max_bytes); N: N
  // parts, downloaded.
  std::vector<int> logits_parts = {-1};
  std::vector<int> mma_prefetch_k = {
      static_cast<int>(HipKernelBackendOptions().mma_rows_prefetch_k)};
  std::vector<int> round_inputs_mb = {
      static_cast<int>(HipKernelBackendOptions().round_product_inputs_max_bytes >> 20)};
  std::vector<int> fuse_silu = {HipKernelBackendOptions().fuse_gate_up_silu ? 1 : 0};
  std::vector<int> fuse_delta = {HipKernelBackendOptions().fuse_delta_inputs ? 1 : 0};
  std::vector<int> fold_shared = {HipKernelBackendOptions().fold_shared_expert ? 1 : 0};
  std::vector<int> moe_waves = {HipKernelBackendOptions().moe_product_waves};
  std::vector<int> moe_stream = {HipKernelBackendOptions().moe_stream_products};
  std::vector<int> moe_cooperative = {HipKernelBackendOptions().moe_one_launch_cooperative ? 1 : 0};
  std::vector<int> stream_products = {HipKernelBackendOptions().stream_product_weights};
  std::vector<int> fuse_conv = {HipKernelBackendOptions().fuse_conv_product ? 1 : 0};
  std::vector<int> fuse_delta_norm = {HipKernelBackendOptions().fuse_delta_norm ? 1 : 0};
  std::vector<int> delta_step_blocks = {HipKernelBackendOptions().delta_step_min_blocks};
  std::vector<int> router_inside = {HipKernelBackendOptions().moe_router_inside ? 1 : 0};
  std::vector<int> static_sixteenths = {HipKernelBackendOptions().moe_one_launch_static_sixteenths};
  std::vector<int> compact_route = {HipKernelBackendOptions().moe_compact_route ? 1 : 0};
  std::vector<int> fuse_qk_rope = {HipKernelBackendOptions().fuse_qk_norm_rope ? 1 : 0};
  int64_t profile_prefill = 0;  // 0: no profiler range.
  std::vector<int> moe_kernels = {HipKernelBackendOptions().moe_kernels};
  bool op_times = false;
  int moe_trace = 0;  // 2: the stamped launches also route their first token twice first.
  bool prefill_op_times = false;
  int64_t host_lead_mb = 0;         // 0: no host-lead steps.
  int64_t background_spill_mb = 0;  // 0: no steps beside background downloads.
  int64_t attention_split_keys = HipKernelBackendOptions().attention_split_keys;
};

// What a model's passes cost, counted from its shapes.
struct Costs {
  double matrix_params = 0;  // Weights a token multiplies, embeddings and lm head excepted.
  double expert_bytes = 0;   // Bytes of routed-expert weights.
  double embed_bytes = 0;    // The input embedding table (gathered, never read whole).
  double head_bytes = 0;     // A stored LM head (untied shapes; 0 when tied).
  double tensor_bytes = 0;   // Every tensor's, as stored.
  int full_layers = 0;
  int delta_layers = 0;
};

// Prints `line` and flushes.
void Print(const std::string& line);

class ModelBench {
 public:
  ModelBench(const Flags& flags, HipKernelBackend& backend, const Ceilings& ceilings)
      : f_(flags), b_(backend), ceil_(ceilings) {}

  void Run(const std::string& name, const RandomCheckpointOptions& o);

 private:
  // (Re)makes model_ from config_ and tensors_ with `logits_parts` (Qwen3HybridOptions), the
  // earlier model freed first; returns the seconds CreateQwen3HybridModel took (the load).
  double MakeModel(int logits_parts);

  int64_t MaxDepth() const;

  // FLOPs of a prefill from token `from` to `to`.
  double PrefillFlops(int64_t from, int64_t to) const;

  // Prefills tokens [from, to) of tokens_ into `slot` in passes of pass_tokens; returns seconds
  // (the logits of each pass's last token downloaded, as the engine does).
  double Prefill(SlotState* slot, int64_t from, int64_t to);

  void ReportPrefill(int64_t tokens, double seconds, const std::string& suffix = "");

  void PrefillAndTtft();

  // Restores `state` (private state, then each rows component) into slot 0; returns seconds.
  double Restore(SlotKvMemory& kv, absl::Span<uint8_t> state);

  // Writes `state` to a file, drops it from the page cache, and times reading it back into
  // `state`. Returns seconds.
  double ReadFromDisk(absl::Span<uint8_t> state);

  void Decode();

  // How DecodeSteps returns a step's logits, in the order it runs them.
  enum Mode { kFresh = 0, kKept = 1, kViews = 2 };
  static constexpr int kDecodeModes = 3;

  // Times --decode-steps steps of `slots` slots of `kv` (each slot's sequence one token
  // deeper a step), first with fresh result vectors, then with kept ones, then read in place,
  // and prints them against the HBM bound; `suffix` ends the lines.
  void DecodeSteps(int slots, SlotKvMemory& kv_memory, double weights_other,
                   const std::string& suffix);

  // One decode step's batch over slots 0 .. next.size() - 1: slot s takes the prompt's token
  // (offset + s) % 1000, kept in next[s].
  std::vector<SequencePass> StepBatch(SlotKvMemory& kv_memory, int offset,
                                      std::vector<int32_t>& next);

  // A heading, `before` the total time of `totals` (ms, calls by operation) divided by `per`
  // (`decimals` places) and `after` it, then each operation's time, largest first, divided by
  // `per` (calls and times a step where `per` counts steps), and its share of the whole.
  void PrintOpTotals(const std::string& before, const std::string& after,
                     const std::map<std::string, std::pair<double, int64_t>>& totals, double per,
                     int decimals, const char* unit);

  // --prefill-op-times: the prefill of `tokens` tokens into `slot` (reset first) again, in passes
  // of pass_tokens, with an event before every backend operation, and its time by operation.
  void PrefillOpTimes(SlotKvMemory& kv, SlotState* slot, int64_t tokens, const std::string& label);

  // --op-times: --decode-steps more steps of `slots` slots (as the in-place ones) with an event
  // before every backend operation (OpTimingBackend), and each operation's share of a step.
  void OpTimes(int slots, SlotKvMemory& kv_memory, const std::string& suffix);
  // --moe-trace: one step's MoE one launches stamped by phase (hip::kMoeLayerTracePoints).
  void MoeTrace(int slots, SlotKvMemory& kv_memory, const std::string& suffix);

  // --host-lead-mb: --decode-steps more in-place steps of `slots` slots, each enqueued behind a
  // device copy of --host-lead-mb MB; `step_seconds` is the in-place steps' time without it.
  void HostLead(int slots, SlotKvMemory& kv_memory, double step_seconds, double bound,
                const std::string& suffix);

  // --background-spill-mb: --decode-steps more in-place steps of `slots` slots, each issued
  // right after a background download of --background-spill-mb MB into page-locked memory;
  // `step_seconds` is the in-place steps' time without them.
  void BesideSpills(int slots, SlotKvMemory& kv_memory, double step_seconds, double bound,
                    const std::string& suffix);

  // Starts (`start`) or stops the profiler's capture range when `slots` is --profile-slots.
  void ProfilerRange(int slots, bool start);
  void ProfilerRange(bool start);

  const Flags& f_;
  HipKernelBackend& b_;
  // What the models run on: b_'s operations, timed per operation under --op-times.
  OpTimingBackend timing_{&b_};
  const Ceilings& ceil_;
  std::string name_;
  RandomCheckpointOptions o_;
  HybridConfig config_;
  std::vector<RandomTensorShape> tensors_;
  std::vector<uint16_t> values_;       // Behind every tensor of model_ (kept while it lives).
  std::vector<uint16_t> head_values_;  // Behind an untied LM head (its bytes are its own).
  int logits_parts_ = 0;               // model_'s.
  Costs costs_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> tokens_;
};

}  // namespace cairn::infer::model_bench

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MODEL_BENCH_H_
