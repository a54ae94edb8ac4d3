// Throughput of the HIP backend's kernels on the device, with the device's own ceilings measured
// in the same run (device-to-device copy bandwidth, pinned host-to-device bandwidth, the vendor
// BLAS's fp32 GEMM rate), and the cost of batch invariance: MatMulRows (fixed reduction order
// per row) against the vendor GEMM (fastest, kernel chosen by shape) at decode and prefill
// shapes. Random inputs (never zeros). Prints one line per measurement.
//
// Usage: cairn_hip_kernel_bench [--quick] [--decode-products] [--moe-prefill]
//                               [--prefill-attention] [--decode-batch] [--moe-decode]
//                               [--launch-chain] [--delta] [--l2-window]
//
// --decode-products: only the decode products at the dense 9B-like model's shapes and four of
// the MoE 80B-A3B-like model's (1, 4 and 16 rows), back-to-back calls over weights that do not
// fit in L2, for each way of loading them (HipKernelBackendOptions::mma_rows_variant, tiles of
// 8 or 16), inputs rounded to bf16 (the default) and split exactly (mma_rows_bf16_inputs off),
// with the bits of every variant compared against variant 0's of the same inputs; and
// decode-sized RMSNorm calls.
//
// --moe-prefill: only one MoE layer's routed experts at the 80B-A3B-like model's shapes (512
// experts of 512, hidden 2048, top 10) at prefill sizes: KernelBackend's default (routing to the
// host, an expert at a time), the grouped device path (HipKernelBackendOptions::
// grouped_moe_prefill; with moe_gemm_wgmma blocks of 2 and 3 warpgroups, where built), and the
// default's per-expert vendor GEMMs alone (every expert the average count of rows), the cost of
// per-expert GEMMs after one download of the counts.
//
// --moe-decode: only one MoE layer's routed experts at decode sizes (1, 4 and 16 tokens, the
// 80B-A3B-like shapes): HipKernelBackend::MoeExperts (its device path) called back to back over
// 16 routings in turn (so the experts come from HBM), then each of its five launches alone the
// same way (route and sort, the gate/up products, SiLU-mul, the down products, the weighted sum),
// the products against the bytes of the experts they read.
//
// --decode-batch: only the batched per-sequence operations of a dense 9B-like decode step (one
// token a sequence, 1, 4 and 16 sequences): decode attention at 4096 keys (16 q / 4 kv heads of
// 256), the delta rule's recurrent step (16 / 32 heads of 128), the causal conv (8192 channels,
// kernel 4) and RoPE with the KV append; each sequence's state and rows its own and, like the
// model's layers, cycled over enough copies that they are not in L2. The bytes each must move
// against the device copy rate of the same run, and the whole step's share: the model has 8
// attention and 24 delta-rule layers.
//
// --launch-chain: only the cost a launch of a chain of small dependent kernels (SigmoidMul on
// 256 values, 200 in a row, as a decode step's small launches): plain launches and overlapped
// ones (hip::SetOverlappedLaunches), each issued one by one (the host's issue rate may set the
// pace), queued behind a long device copy (the device's own cost) and replayed from a captured
// graph.
//
// --delta: only the gated delta rule (one layer at 4096 and 32768 tokens, the matrix-unit
// path's prepare and scan kernels apart), then XXH3 hashes of its outputs and final state
// after one call from fixed inputs at four shapes, to compare builds that should give the
// same bits.
//
// --l2-window: only whether weights asked into L2 ahead of a decode product make it faster:
// the MoE 80B-A3B-like model's delta-rule in_proj and out and the dense 9B-like model's MLP
// down at 1 and 4 rows, each timed alone (events around the product) after L2 is flushed
// and a window of small launches (SigmoidMul, the latency-bound launches between a layer's
// products): cold, with hip::PrefetchL2Range of its weights before the window (plain and
// evict_last), and right after the same product (warm). The flush is a product over 512 MiB
// of other weights, reads only (H200: the in_proj 17.8 us cold, 16.8 prefetched, 16.1 warm);
// --l2-window=memset flushes with a memset instead, which leaves L2 full of dirty lines whose
// write-backs slow the cold product (23.5 us) and make a prefetch look worth far more (17.0).
//
// --prefill-attention: only the matrix-unit prefill attention at the dense 9B-like model's heads
// (16 q / 4 kv heads of 256) for the four 8192-token passes of a 32K prefill and one 4096-token
// pass at the 80B-A3B-like model's heads (16 q / 2 kv), for each block layout
// (HipKernelBackendOptions::attention_mma_variant), with the bits of every variant compared
// against variant 0's.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "services/infer/kernels/hip/gpu_blas.h"
#include "services/infer/kernels/hip/hip_compat.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/scratch_arena.h"
#include "tests/unit/services/infer/kernels/hip/hip_bench_util.h"
#include "tests/unit/services/infer/kernels/hip/hip_delta_bench.h"
#include "tests/unit/services/infer/kernels/hip/hip_moe_bench.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer {
namespace {

// Decode products as the dense 9B-like model's decode step makes them: `calls` back-to-back
// calls per timing, each on the next of several weight matrices (together larger than L2).
int DecodeProducts() {
  struct Variant {
    const char* name;
    HipKernelBackendOptions options;
  };
  // The loads with bf16-rounded inputs (the default), each against variant 0's bits; then the
  // exact three-piece inputs, each against the first of those.
  const std::vector<Variant> variants = {
      {"variant 0 (4 steps, 2 blocks), tiles of 8", {.mma_rows_variant = 0}},
      {"variant 0, tiles of 16", {.mma_rows_tiles_of_8 = false, .mma_rows_variant = 0}},
      {"variant 1 (3 steps, 3 blocks), tiles of 8", {.mma_rows_variant = 1}},
      {"variant -1 (per call; default)", {.mma_rows_variant = -1}},
      {"variant 2 (9-16 rows: a tile of 16, inputs early)", {.mma_rows_variant = 2}},
      {"exact inputs, variant 0", {.mma_rows_bf16_inputs = false, .mma_rows_variant = 0}},
      {"exact inputs, variant 1", {.mma_rows_bf16_inputs = false, .mma_rows_variant = 1}},
      {"exact inputs, variant -1", {.mma_rows_bf16_inputs = false, .mma_rows_variant = -1}},
      {"exact inputs, variant 2", {.mma_rows_bf16_inputs = false, .mma_rows_variant = 2}},
  };
  const size_t first_exact = static_cast<size_t>(
      std::find_if(variants.begin(), variants.end(),
                   [](const Variant& v) { return !v.options.mma_rows_bf16_inputs; }) -
      variants.begin());
  std::vector<std::unique_ptr<HipKernelBackend>> backends;
  for (const Variant& v : variants) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> created = HipKernelBackend::Create(v.options);
    if (!created.ok()) Bench::Fail(created.status().ToString());
    backends.push_back(*std::move(created));
  }
  HipKernelBackend& b = *backends[0];
  Bench bench(&b);
  // bf16 weights: 2.5 GB (the lm head is 2.03 GB), a 64 MiB block of random bf16 values in
  // [-1, 1] repeated, cut into matrices at 4 KiB offsets.
  const int64_t pool_bf16 = int64_t{1280} << 20;
  const int64_t block_bf16 = int64_t{32} << 20;
  absl::StatusOr<DeviceBuffer> pool_buffer = b.Allocate(pool_bf16 * 2);
  if (!pool_buffer.ok()) Bench::Fail(pool_buffer.status().ToString());
  {
    const std::vector<uint16_t> bits = RandomBf16Bits(block_bf16, 40);
    for (int64_t at = 0; at < pool_bf16; at += block_bf16) {
      Bench::Check(
          b.Upload(static_cast<uint16_t*>(pool_buffer->data()) + at, bits.data(), block_bf16 * 2),
          "upload weights");
    }
  }
  const auto* pool = static_cast<const uint16_t*>(pool_buffer->data());
  const int64_t max_k = 12288;
  float* x = bench.Buffer(16 * max_k, 41);
  float* y = bench.Buffer(16 * int64_t{248320}, 42);
  float* y_ref = bench.Buffer(16 * int64_t{248320}, 43);
  struct Shape {
    int64_t n, k;
    const char* what;
  };
  const Shape shapes[] = {
      {24576, 4096, "mlp gate+up"},
      {4096, 12288, "mlp down"},
      {12352, 4096, "delta in_proj"},
      {4096, 4096, "delta out, attn o"},
      {8192, 4096, "attn q"},
      {1024, 4096, "attn k or v"},
      {248320, 4096, "lm head"},
      // The MoE 80B-A3B-like model's: its delta-rule out and attention o (128 blocks, one a
      // multiprocessor), the router with the shared expert's gate, the delta-rule in_proj, the
      // lm head.
      {2048, 4096, "moe delta out, attn o"},
      {513, 2048, "moe router and shared gate"},
      {12352, 2048, "moe delta in_proj"},
      {151936, 2048, "moe lm head"},
  };
  char label[200];
  for (const Shape& sh : shapes) {
    const int64_t bytes = sh.n * sh.k * 2;
    // Enough matrices to cover 400 MB (one for the lm head), each 4 KiB aligned.
    const int64_t stride = (sh.n * sh.k + 2047) / 2048 * 2048;
    const int64_t count = std::max<int64_t>(
        1, std::min<int64_t>((int64_t{400} << 20) / bytes + 1, pool_bf16 / stride));
    for (const int64_t m : {int64_t{1}, int64_t{4}, int64_t{16}}) {
      const int calls = static_cast<int>(std::max<int64_t>(8, std::min<int64_t>(64, 2 * count)));
      std::vector<float> ref, got(m * sh.n);
      for (size_t v = 0; v < backends.size(); ++v) {
        HipKernelBackend& vb = *backends[v];
        const auto call = [&](int i, float* out) {
          const WeightMatrix wm =
              WeightMatrix::Of(pool + (i % count) * stride, WeightType::kBF16, sh.n, sh.k);
          vb.MatMulRowsTyped(x, m, sh.k, wm, out, sh.n, false);
        };
        const bool reference = v == 0 || v == first_exact;
        call(0, reference ? y_ref : y);
        Bench::Check(vb.Synchronize(), "decode product");
        if (reference) {
          ref.resize(m * sh.n);
          Bench::Check(b.Download(ref.data(), y_ref, m * sh.n * 4), "download");
        } else {
          Bench::Check(b.Download(got.data(), y, m * sh.n * 4), "download");
        }
        const bool same = reference || std::memcmp(got.data(), ref.data(), got.size() * 4) == 0;
        std::vector<double> times;
        for (int rep = 0; rep < 3; ++rep) {
          for (int i = 0; i < 2; ++i) call(i, y);
          Bench::Check(vb.Synchronize(), "decode product");
          const auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < calls; ++i) call(i, y);
          Bench::Check(vb.Synchronize(), "decode product");
          times.push_back(Bench::Seconds(start) / calls);
        }
        std::sort(times.begin(), times.end());
        std::snprintf(label, sizeof label, "decode product %s m=%ld n=%ld k=%ld %s%s", sh.what, m,
                      sh.n, sh.k, variants[v].name, same ? "" : " (BITS DIFFER)");
        Row(label, times[1], "GB/s", static_cast<double>(bytes));
        if (!same) std::printf("bits differ from the reference variant's\n");
      }
    }
  }
  // RMSNorm at decode sizes, back-to-back.
  for (const int64_t rows : {int64_t{1}, int64_t{16}}) {
    const int64_t dim = 4096;
    float* w = bench.Buffer(dim, 44);
    const int calls = 200;
    for (int i = 0; i < 4; ++i) b.RmsNorm(x, rows, dim, w, 1e-6f, true, y);
    bench.Sync();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) b.RmsNorm(x, rows, dim, w, 1e-6f, true, y);
    bench.Sync();
    std::snprintf(label, sizeof label, "rmsnorm %ld x 4096, back-to-back calls", rows);
    Row(label, Bench::Seconds(start) / calls, "GB/s", 2.0 * 4.0 * rows * dim);
  }
  return 0;
}

// See --launch-chain above.
int LaunchChain() {
  const std::unique_ptr<HipKernelBackend> backend = Bench::Backend();
  HipKernelBackend& b = *backend;
  Bench bench(&b);
  const hipStream_t stream = b.compute_stream();
  constexpr int kChain = 200, kRepeats = 50, kQueuedRepeats = 10;
  constexpr size_t kBigBytes = size_t{1} << 30;  // Contents unused: never filled.
  absl::StatusOr<DeviceBuffer> big_src = b.Allocate(kBigBytes);
  absl::StatusOr<DeviceBuffer> big_dst = b.Allocate(kBigBytes);
  if (!big_src.ok() || !big_dst.ok()) Bench::Fail("allocating the copy's 2 GiB");
  float* x = bench.Buffer(256, 90);
  float* gate = bench.Buffer(256, 91);
  const auto chain = [&] {
    for (int i = 0; i < kChain; ++i) {
      Bench::Check(hip::SigmoidMul(x, gate, 256, nullptr, stream), "sigmoid mul");
    }
  };
  hipEvent_t start, stop;
  Bench::Check(hipEventCreate(&start), "event");
  Bench::Check(hipEventCreate(&stop), "event");
  // Microseconds a launch of `run` (one chain) over kRepeats chains, after one to warm up.
  const auto time = [&](const std::function<void()>& run) {
    run();
    Bench::Check(hipStreamSynchronize(stream), "sync");
    Bench::Check(hipEventRecord(start, stream), "record");
    for (int r = 0; r < kRepeats; ++r) run();
    Bench::Check(hipEventRecord(stop, stream), "record");
    Bench::Check(hipEventSynchronize(stop), "sync");
    float ms = 0.0f;
    Bench::Check(hipEventElapsedTime(&ms, start, stop), "elapsed");
    return 1000.0 * ms / (kRepeats * kChain);
  };
  const bool before = hip::OverlappedLaunches();
  for (const bool overlapped : {false, true}) {
    hip::SetOverlappedLaunches(overlapped);
    const double issued = time(chain);
    hipGraph_t graph = nullptr;
    hipGraphExec_t exec = nullptr;
    Bench::Check(hipStreamBeginCapture(stream, hipStreamCaptureModeThreadLocal), "capture");
    chain();
    Bench::Check(hipStreamEndCapture(stream, &graph), "end capture");
    Bench::Check(hipGraphInstantiateWithFlags(&exec, graph, 0), "instantiate");
    const double replayed = time([&] { Bench::Check(hipGraphLaunch(exec, stream), "graph"); });
    // The host's cost a launch of capturing the chain again and updating the instantiated graph
    // with it (what a step captured anew each time would pay before its replay), median of 5.
    std::vector<double> captures, updates;
    for (int r = 0; r < 5; ++r) {
      hipGraph_t again = nullptr;
      auto t0 = std::chrono::steady_clock::now();
      Bench::Check(hipStreamBeginCapture(stream, hipStreamCaptureModeThreadLocal), "capture");
      chain();
      Bench::Check(hipStreamEndCapture(stream, &again), "end capture");
      captures.push_back(Bench::Seconds(t0) * 1e6 / kChain);
      t0 = std::chrono::steady_clock::now();
      Bench::Check(hipGraphExecUpdate(exec, again), "graph update");
      updates.push_back(Bench::Seconds(t0) * 1e6 / kChain);
      Bench::Check(hipGraphDestroy(again), "graph");
    }
    std::sort(captures.begin(), captures.end());
    std::sort(updates.begin(), updates.end());
    // The chain issued while the device copies 4 GiB (about 2 ms, longer than the host takes to
    // issue it), timed from the copy's end: the device's own cost a launch, without the host's.
    double queued = 0.0;
    for (int r = 0; r < kQueuedRepeats; ++r) {
      for (int c = 0; c < 4; ++c) {
        Bench::Check(hipMemcpyAsync(big_dst->data(), big_src->data(), kBigBytes,
                                    hipMemcpyDeviceToDevice, stream),
                     "copy");
      }
      Bench::Check(hipEventRecord(start, stream), "record");
      chain();
      Bench::Check(hipEventRecord(stop, stream), "record");
      Bench::Check(hipEventSynchronize(stop), "sync");
      float ms = 0.0f;
      Bench::Check(hipEventElapsedTime(&ms, start, stop), "elapsed");
      queued += 1000.0 * ms / (kQueuedRepeats * kChain);
    }
    Bench::Check(hipGraphExecDestroy(exec), "graph");
    Bench::Check(hipGraphDestroy(graph), "graph");
    std::printf(
        "launch chain, %s launches: issued one by one %.2f us a launch, queued behind a copy "
        "%.2f us, from a graph %.2f us; on the host, captured %.2f us, graph updated %.2f us\n",
        overlapped ? "overlapped" : "plain", issued, queued, replayed, captures[2], updates[2]);
  }
  hip::SetOverlappedLaunches(before);
  Bench::Check(hipEventDestroy(start), "event");
  Bench::Check(hipEventDestroy(stop), "event");
  bench.Free();
  return 0;
}

// The per-sequence operations of a dense decode step (see --decode-batch above).
int DecodeBatch() {
  const std::unique_ptr<HipKernelBackend> backend = Bench::Backend();
  HipKernelBackend& b = *backend;
  Bench bench(&b);
  const Ceilings c = MeasureCeilings(b, bench, 5);
  bench.Free();
  constexpr int kMaxSeqs = 16, kCopies = 4;  // Copies of each sequence's rows and state.
  const int qh = 16, kvh = 4, hd = 256, kh = 16, vh = 32, dk = 128, dv = 128;
  const int64_t past = 4096, kv_width = int64_t{kvh} * hd, channels = 2 * kh * dk + vh * dv;
  const int64_t state_floats = int64_t{vh} * dk * dv, conv_floats = 3 * channels;
  float* q = bench.Buffer(kMaxSeqs * qh * hd, 50, -2.0f, 2.0f);
  float* o = bench.Buffer(kMaxSeqs * int64_t{vh} * dv * 2, 51);
  float* kv_new = bench.Buffer(kMaxSeqs * kv_width, 52);
  float* keys = bench.Buffer(kCopies * kMaxSeqs * (past + 1) * kv_width, 53, -2.0f, 2.0f);
  float* values = bench.Buffer(kCopies * kMaxSeqs * (past + 1) * kv_width, 54);
  float* dq = bench.Buffer(kMaxSeqs * int64_t{kh} * dk, 55, -0.1f, 0.1f);
  float* dkey = bench.Buffer(kMaxSeqs * int64_t{kh} * dk, 56, -0.1f, 0.1f);
  float* dval = bench.Buffer(kMaxSeqs * int64_t{vh} * dv, 57);
  float* gates = bench.Buffer(kMaxSeqs * vh, 58, -0.5f, -0.01f);
  float* beta = bench.Buffer(kMaxSeqs * vh, 59, 0.1f, 0.9f);
  float* states = bench.Buffer(kCopies * kMaxSeqs * state_floats, 60, -0.1f, 0.1f);
  float* conv_in = bench.Buffer(kMaxSeqs * channels, 61);
  float* conv_w = bench.Buffer(channels * 4, 62);
  float* conv_states = bench.Buffer(kCopies * kMaxSeqs * conv_floats, 63);
  float* conv_out = bench.Buffer(kMaxSeqs * channels, 64);
  float* inv_freq = bench.Buffer(32, 65, 0.0f, 1.0f);
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> wide_ranges =
      HipKernelBackend::Create({.attention_split_keys = 256});
  if (!wide_ranges.ok()) Bench::Fail(wide_ranges.status().ToString());
  char label[200];
  for (const int seqs : {1, 4, 16}) {
    int copy = 0;  // Each call on the next copy.
    const auto row_of = [&](int s) { return int64_t{copy} * kMaxSeqs + s; };
    const auto time = [&](const char* what, double bytes, int layers,
                          const std::function<void()>& fn) {
      const double t = bench.Time(
          [&] {
            fn();
            copy = (copy + 1) % kCopies;
          },
          50);
      std::snprintf(label, sizeof label, "%2d seqs: %s", seqs, what);
      std::printf("%-62s %10.4f ms  %8.1f GB/s = %5.1f %% of the copy rate; x%d layers %.3f ms\n",
                  label, t * 1e3, bytes / t / 1e9, 100.0 * bytes / t / c.hbm_bytes_per_s, layers,
                  t * layers * 1e3);
      std::fflush(stdout);
    };
    // Decode attention with each decode variant (the same bits), the default last.
    const int default_variant = HipKernelBackendOptions().attention_decode_variant;
    for (int v = 0; v <= hip::kAttentionDecodeVariants; ++v) {
      const int variant = v < hip::kAttentionDecodeVariants ? v : default_variant;
      if (v < hip::kAttentionDecodeVariants && v == default_variant) continue;
      if (!b.SetAttentionDecodeVariantForTest(variant).ok()) Bench::Fail("decode variant");
      char what[80];
      std::snprintf(what, sizeof what, "decode attention at 4096 keys (variant %d)", variant);
      time(what, 2.0 * 4.0 * seqs * (past + 1) * kv_width, 8, [&] {
        std::vector<AttentionArgs> batch;
        for (int s = 0; s < seqs; ++s) {
          const int64_t rows = row_of(s) * (past + 1) * kv_width;
          batch.push_back({q + s * qh * hd, keys + rows, values + rows, o + s * qh * hd, 1, past,
                           qh, kvh, hd, 0.0625f});
        }
        b.AttentionBatch(batch);
      });
    }
    // The default variant with each count of key ranges a block (the same bits), then ranges of
    // 256 keys instead of 128 (other bits), for comparison.
    const auto attention_on = [&](HipKernelBackend& on) {
      std::vector<AttentionArgs> batch;
      for (int s = 0; s < seqs; ++s) {
        const int64_t rows = row_of(s) * (past + 1) * kv_width;
        batch.push_back({q + s * qh * hd, keys + rows, values + rows, o + s * qh * hd, 1, past, qh,
                         kvh, hd, 0.0625f});
      }
      on.AttentionBatch(batch);
    };
    for (int ranges = 1; ranges <= hip::kAttentionDecodeMaxRangesPerBlock; ranges *= 2) {
      if (!b.SetAttentionDecodeRangesPerBlockForTest(ranges).ok()) Bench::Fail("decode ranges");
      char what[80];
      std::snprintf(what, sizeof what, "decode attention at 4096 keys (%d ranges a block)", ranges);
      time(what, 2.0 * 4.0 * seqs * (past + 1) * kv_width, 8, [&] { attention_on(b); });
    }
    if (!b.SetAttentionDecodeRangesPerBlockForTest(
              HipKernelBackendOptions().attention_decode_ranges_per_block)
             .ok()) {
      Bench::Fail("decode ranges");
    }
    time("decode attention at 4096 keys (ranges of 256 keys)",
         2.0 * 4.0 * seqs * (past + 1) * kv_width, 8, [&] {
           // Its own stream: waited for here, as Bench::Time waits for b's.
           attention_on(**wide_ranges);
           Bench::Check((*wide_ranges)->Synchronize(), "ranges of 256 keys");
         });
    time("rope + kv append", 4.0 * seqs * (2.0 * qh * hd + 4.0 * kv_width), 8, [&] {
      std::vector<RopeAppendArgs> batch;
      for (int s = 0; s < seqs; ++s) {
        const int64_t rows = row_of(s) * (past + 1) * kv_width + past * kv_width;
        batch.push_back({q + s * qh * hd, kv_new + s * kv_width, kv_new + s * kv_width, keys + rows,
                         values + rows, 1, past, qh * hd, kv_width, qh, kvh, hd, 64, inv_freq});
      }
      b.RopeAppendBatch(batch);
    });
    time("delta rule step (state read + write)", 2.0 * 4.0 * seqs * state_floats, 24, [&] {
      std::vector<GatedDeltaArgs> batch;
      for (int s = 0; s < seqs; ++s) {
        batch.push_back({dq + s * kh * dk, dkey + s * kh * dk, dval + s * vh * dv, gates + s * vh,
                         beta + s * vh, states + row_of(s) * state_floats, o + s * vh * dv, 1, kh,
                         vh, dk, dv, 0});
      }
      b.GatedDeltaRuleBatch(batch);
    });
    time("causal conv (input, state, output)", 4.0 * seqs * (2.0 * channels + 2.0 * conv_floats),
         24, [&] {
           std::vector<CausalConvArgs> batch;
           for (int s = 0; s < seqs; ++s) {
             batch.push_back({conv_in + s * channels, channels, 1, channels, conv_w, 4,
                              conv_states + row_of(s) * conv_floats, conv_out + s * channels});
           }
           b.CausalConvSiluBatch(batch);
         });
  }
  return 0;
}

// The matrix-unit prefill attention's block layouts on the passes of a 32K dense prefill.
int PrefillAttention() {
  std::vector<std::unique_ptr<HipKernelBackend>> backends;
  for (int v = 0; v < hip::kAttentionMmaVariants; ++v) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> created =
        HipKernelBackend::Create({.attention_mma_variant = v});
    if (!created.ok()) Bench::Fail(created.status().ToString());
    backends.push_back(*std::move(created));
  }
  HipKernelBackend& b = *backends[0];
  Bench bench(&b);
  char label[160];
  const int qh = 16, d = 256;
  const int64_t pass = 8192, max_keys = 32768;
  float* k = bench.Buffer(max_keys * 4 * d, 10, -2.0f, 2.0f);
  float* v = bench.Buffer(max_keys * 4 * d, 11);
  float* q = bench.Buffer(pass * qh * d, 12, -2.0f, 2.0f);
  float* o = bench.Buffer(pass * qh * d, 13);
  struct Shape {
    int kv_heads;
    int64_t tokens, past;
  };
  const std::vector<Shape> shapes = {
      {4, pass, 0}, {4, pass, pass}, {4, pass, 2 * pass}, {4, pass, 3 * pass}, {2, 4096, 0}};
  std::vector<double> totals(backends.size(), 0.0);
  for (const Shape& sh : shapes) {
    std::vector<float> first;
    for (size_t vi = 0; vi < backends.size(); ++vi) {
      HipKernelBackend& bv = *backends[vi];
      const AttentionArgs args{q, k, v, o, sh.tokens, sh.past, qh, sh.kv_heads, d, 0.0625f};
      // Each backend has its own stream: wait for this one's call in the timed function.
      const double t = bench.Time(
          [&] {
            bv.Attention(args);
            if (!bv.Synchronize().ok()) Bench::Fail(bv.status().ToString());
          },
          5);
      std::vector<float> got(static_cast<size_t>(sh.tokens * qh * d));
      const absl::Status s = bv.Download(got.data(), o, got.size() * sizeof(float));
      if (!s.ok()) Bench::Fail(s.ToString());
      if (vi == 0) first = got;
      const bool same = std::memcmp(first.data(), got.data(), got.size() * sizeof(float)) == 0;
      if (sh.kv_heads == 4) totals[vi] += t;
      const double keys = static_cast<double>(sh.tokens) * (sh.past + (sh.tokens + 1) / 2.0);
      std::snprintf(label, sizeof label,
                    "attention prefill %ld tokens after %ld (16q/%dkv, d256) variant %zu%s",
                    sh.tokens, sh.past, sh.kv_heads, vi, same ? "" : " (BITS DIFFER)");
      Row(label, t, "GFLOP/s", 4.0 * qh * d * keys);
      if (!same) std::printf("bits differ from variant 0's\n");
    }
  }
  for (size_t vi = 0; vi < backends.size(); ++vi) {
    std::printf("attention of one layer of a 32K dense prefill (4 passes), variant %zu: %.3f ms\n",
                vi, totals[vi] * 1e3);
  }
  return 0;
}

int Main(bool quick) {
  const std::unique_ptr<HipKernelBackend> backend = Bench::Backend();
  HipKernelBackend& b = *backend;
  Bench bench(&b);
  const int reps = quick ? 3 : 10;
  char label[160];

  MeasureCeilings(b, bench, reps);

  // GEMMs: vendor (non-invariant) against the row kernel (batch-invariant).
  for (const int64_t n : {int64_t{4096}, int64_t{12288}, int64_t{151936}}) {
    const int64_t k = 4096;
    float* w = bench.Buffer(n * k, 7);
    float* x = bench.Buffer(4096 * k, 8);
    float* y = bench.Buffer(4096 * n, 9);
    for (const int64_t m : {int64_t{1}, int64_t{4}, int64_t{16}, int64_t{64}, int64_t{4096}}) {
      if (n == 151936 && m == 4096) continue;
      const double tv =
          bench.Time([&] { b.MatMulTransposed(x, m, k, k, w, n, y, n, false); }, reps);
      const double tr = bench.Time([&] { b.MatMulRows(x, m, k, k, w, n, y, n, false); }, reps);
      const double flops = 2.0 * m * n * k;
      const double bytes = 4.0 * (n * k + m * k + m * n);
      std::snprintf(label, sizeof label, "gemm m=%ld k=%ld n=%ld vendor", m, k, n);
      Row(label, tv, m >= 64 ? "GFLOP/s" : "GB/s", m >= 64 ? flops : bytes);
      std::snprintf(label, sizeof label, "gemm m=%ld k=%ld n=%ld rows (invariant, x%.2f)", m, k, n,
                    tr / tv);
      Row(label, tr, m >= 64 ? "GFLOP/s" : "GB/s", m >= 64 ? flops : bytes);
    }
    bench.Free();
  }

  // bf16 weights: the pinned GEMM (with the input rounding), the vendor's own choice on the same
  // bf16 inputs (the fastest non-invariant path), and the decode products: the matrix-unit
  // product (the default, HipKernelBackendOptions::mma_rows) and the row kernel.
  {
    absl::StatusOr<std::unique_ptr<GpuBlas>> blas = GpuBlas::Create(nullptr);
    if (!blas.ok()) Bench::Fail(blas.status().ToString());
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> row_kernel =
        HipKernelBackend::Create({.mma_rows = false});
    if (!row_kernel.ok()) Bench::Fail(row_kernel.status().ToString());
    for (const int64_t n : {int64_t{4096}, int64_t{12288}, int64_t{151936}}) {
      const int64_t k = 4096;
      // Random bits as bf16: the fp32 buffers hold twice the elements needed.
      const auto* w = reinterpret_cast<const uint16_t*>(bench.Buffer(n * k / 2, 30, 0.01f, 0.02f));
      const auto* xb =
          reinterpret_cast<const uint16_t*>(bench.Buffer(4096 * k / 2, 31, 0.01f, 0.02f));
      float* x = bench.Buffer(4096 * k, 32);
      float* y = bench.Buffer(4096 * n, 33);
      const WeightMatrix wm = WeightMatrix::Of(w, WeightType::kBF16, n, k);
      for (const int64_t m : {int64_t{1}, int64_t{4}, int64_t{16}, int64_t{64}, int64_t{4096}}) {
        if (n == 151936 && m == 4096) continue;
        const double tp =
            bench.Time([&] { b.MatMulTransposedTyped(x, m, k, wm, y, n, false); }, reps);
        const double tu = bench.Time(
            [&] {
              Bench::Check((*blas)->GemmNTBf16Unpinned(m, n, k, xb, k, w, k, y, n, 0.0f), "gemm");
              if (hipStreamSynchronize(nullptr) != hipSuccess) Bench::Fail("sync");
            },
            reps);
        const double tr = bench.Time([&] { b.MatMulRowsTyped(x, m, k, wm, y, n, false); }, reps);
        const double flops = 2.0 * m * n * k;
        const double bytes = 2.0 * n * k + 4.0 * (m * k + m * n);
        const char* unit = m >= 64 ? "GFLOP/s" : "GB/s";
        std::snprintf(label, sizeof label, "bf16 gemm m=%ld k=%ld n=%ld vendor's choice", m, k, n);
        Row(label, tu, unit, m >= 64 ? flops : bytes);
        std::snprintf(label, sizeof label, "bf16 gemm m=%ld k=%ld n=%ld pinned (x%.2f)", m, k, n,
                      tp / tu);
        Row(label, tp, unit, m >= 64 ? flops : bytes);
        std::snprintf(label, sizeof label, "bf16 rows m=%ld k=%ld n=%ld mma (x%.2f)", m, k, n,
                      tr / tu);
        Row(label, tr, unit, m >= 64 ? flops : bytes);
        if (m <= 64) {
          const double to = bench.Time(
              [&] {
                (*row_kernel)->MatMulRowsTyped(x, m, k, wm, y, n, false);
                Bench::Check((*row_kernel)->Synchronize(), "row kernel");
              },
              reps);
          std::snprintf(label, sizeof label, "bf16 rows m=%ld k=%ld n=%ld row kernel (x%.2f)", m, k,
                        n, to / tu);
          Row(label, to, unit, m >= 64 ? flops : bytes);
        }
      }
      bench.Free();
    }
  }

  // Attention, Qwen3-Next-like heads: 16 q heads, 2 kv heads, head_dim 256.
  {
    const int qh = 16, kvh = 2, d = 256;
    const int64_t max_keys = 100000;
    float* k = bench.Buffer(max_keys * kvh * d, 10, -2.0f, 2.0f);
    float* v = bench.Buffer(max_keys * kvh * d, 11);
    float* q = bench.Buffer(16384 * qh * d, 12, -2.0f, 2.0f);
    float* o = bench.Buffer(16384 * qh * d, 13);
    for (const int64_t tokens : {int64_t{4096}, int64_t{16384}}) {
      if (quick && tokens > 4096) continue;
      const double t = bench.Time(
          [&] {
            b.Attention({q, k, v, o, tokens, 0, qh, kvh, d, 0.0625f});
          },
          quick ? 2 : 5);
      std::snprintf(label, sizeof label, "attention prefill %ld tokens (16q/2kv, d256)", tokens);
      Row(label, t, "GFLOP/s", 4.0 * qh * d * tokens * tokens / 2.0);
    }
    for (const int64_t past : {int64_t{4096}, int64_t{32768}, int64_t{99999}}) {
      const double t = bench.Time(
          [&] {
            b.Attention({q, k, v, o, 1, past, qh, kvh, d, 0.0625f});
          },
          reps * 5);
      std::snprintf(label, sizeof label, "attention decode 1 token at %ld keys (K+V bytes)",
                    past + 1);
      Row(label, t, "GB/s", 2.0 * 4.0 * (past + 1) * kvh * d);
    }
    bench.Free();
  }

  DeltaRuleRows(b, bench, quick, reps);

  // A row kernel: RMSNorm over 4096 x 4096.
  {
    const int64_t rows = 4096, dim = 4096;
    float* x = bench.Buffer(rows * dim, 21);
    float* w = bench.Buffer(dim, 22);
    float* y = bench.Buffer(rows * dim, 23);
    const double t = bench.Time([&] { b.RmsNorm(x, rows, dim, w, 1e-6f, true, y); }, reps * 5);
    Row("rmsnorm 4096 x 4096 (read + write)", t, "GB/s", 2.0 * 4.0 * rows * dim);
    bench.Free();
  }
  return 0;
}

// See --l2-window above.
int L2Window(bool memset_flush) {
  const std::unique_ptr<HipKernelBackend> backend = Bench::Backend();
  HipKernelBackend& b = *backend;
  Bench bench(&b);
  const hipStream_t stream = b.compute_stream();
  constexpr size_t kFlushBytes = size_t{512} << 20;
  absl::StatusOr<DeviceBuffer> flush = b.Allocate(kFlushBytes);
  const int64_t max_elems = int64_t{12352} * 4096;
  absl::StatusOr<DeviceBuffer> weights = b.Allocate(max_elems * 2);
  if (!flush.ok() || !weights.ok()) Bench::Fail("allocating the flush buffer and the weights");
  {
    const std::vector<uint16_t> bits = RandomBf16Bits(max_elems, 70);
    Bench::Check(b.Upload(weights->data(), bits.data(), max_elems * 2), "upload weights");
  }
  // The flush's matrix: the flush buffer as bf16 weights of k 4096 (its contents never enter a
  // timed result).
  constexpr int64_t kFlushK = 4096;
  const WeightMatrix flush_matrix =
      WeightMatrix::Of(flush->data(), WeightType::kBF16, kFlushBytes / 2 / kFlushK, kFlushK);
  Bench::Check(hipMemsetAsync(flush->data(), 0, kFlushBytes, stream), "flush buffer");
  float* x = bench.Buffer(4 * 12288, 71);
  float* y = bench.Buffer(kFlushBytes / 2 / kFlushK, 72);  // The flush's output too.
  float* gx = bench.Buffer(256, 73);
  float* gate = bench.Buffer(256, 74);
  hipEvent_t start, stop;
  Bench::Check(hipEventCreate(&start), "event");
  Bench::Check(hipEventCreate(&stop), "event");
  struct Shape {
    int64_t n, k;
    const char* what;
  };
  const Shape shapes[] = {{12352, 2048, "moe delta in_proj"},
                          {2048, 4096, "moe delta out"},
                          {4096, 12288, "dense mlp down"}};
  constexpr int kReps = 21;
  enum Mode { kCold, kPrefetch, kPrefetchLast, kWarm };
  for (const Shape& sh : shapes) {
    const WeightMatrix wm = WeightMatrix::Of(static_cast<const uint16_t*>(weights->data()),
                                             WeightType::kBF16, sh.n, sh.k);
    const int64_t bytes = sh.n * sh.k * 2;
    for (const int64_t m : {int64_t{1}, int64_t{4}}) {
      for (const int window : {0, 4, 8, 16}) {
        double us[4];
        for (const Mode mode : {kCold, kPrefetch, kPrefetchLast, kWarm}) {
          std::vector<double> times;
          for (int rep = 0; rep < kReps; ++rep) {
            if (memset_flush) {
              Bench::Check(hipMemsetAsync(flush->data(), rep & 0xff, kFlushBytes, stream), "flush");
            } else {
              b.MatMulRowsTyped(x, 1, kFlushK, flush_matrix, y, kFlushBytes / 2 / kFlushK, false);
            }
            if (mode == kPrefetch || mode == kPrefetchLast) {
              Bench::Check(
                  hip::PrefetchL2Range(weights->data(), bytes, mode == kPrefetchLast, stream),
                  "prefetch");
            }
            if (mode == kWarm) b.MatMulRowsTyped(x, m, sh.k, wm, y, sh.n, false);
            for (int i = 0; i < window; ++i) {
              Bench::Check(hip::SigmoidMul(gx, gate, 256, nullptr, stream), "window");
            }
            Bench::Check(hipEventRecord(start, stream), "record");
            b.MatMulRowsTyped(x, m, sh.k, wm, y, sh.n, false);
            Bench::Check(hipEventRecord(stop, stream), "record");
            Bench::Check(hipEventSynchronize(stop), "sync");
            float ms = 0.0f;
            Bench::Check(hipEventElapsedTime(&ms, start, stop), "elapsed");
            times.push_back(1000.0 * ms);
          }
          Bench::Check(b.Synchronize(), "l2 window");
          std::sort(times.begin(), times.end());
          us[mode] = times[kReps / 2];
        }
        std::printf(
            "l2 window: %s m=%ld (%.1f MB), %2d launches between: cold %.1f us, prefetched %.1f "
            "us, prefetched evict_last %.1f us, warm %.1f us\n",
            sh.what, m, bytes / 1e6, window, us[kCold], us[kPrefetch], us[kPrefetchLast],
            us[kWarm]);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace cairn::infer

int main(int argc, char** argv) {
  bool quick = false, decode_products = false, moe_prefill = false, prefill_attention = false,
       decode_batch = false, moe_decode = false, launch_chain = false, delta = false,
       l2_window = false, memset_flush = false;
  for (int i = 1; i < argc; ++i) {
    quick = quick || std::strcmp(argv[i], "--quick") == 0;
    decode_products = decode_products || std::strcmp(argv[i], "--decode-products") == 0;
    moe_prefill = moe_prefill || std::strcmp(argv[i], "--moe-prefill") == 0;
    prefill_attention = prefill_attention || std::strcmp(argv[i], "--prefill-attention") == 0;
    decode_batch = decode_batch || std::strcmp(argv[i], "--decode-batch") == 0;
    moe_decode = moe_decode || std::strcmp(argv[i], "--moe-decode") == 0;
    launch_chain = launch_chain || std::strcmp(argv[i], "--launch-chain") == 0;
    delta = delta || std::strcmp(argv[i], "--delta") == 0;
    if (std::strncmp(argv[i], "--l2-window", 11) == 0) {
      l2_window = true;
      memset_flush = std::strcmp(argv[i], "--l2-window=memset") == 0;
      if (!memset_flush && std::strcmp(argv[i], "--l2-window") != 0) {
        std::fprintf(stderr, "unknown flag %s (--l2-window or --l2-window=memset)\n", argv[i]);
        return 2;
      }
    }
  }
  if (l2_window) return cairn::infer::L2Window(memset_flush);
  if (launch_chain) return cairn::infer::LaunchChain();
  if (delta) return cairn::infer::DeltaRule();
  if (moe_decode) return cairn::infer::MoeDecode();
  if (decode_batch) return cairn::infer::DecodeBatch();
  if (decode_products) return cairn::infer::DecodeProducts();
  if (moe_prefill) return cairn::infer::MoePrefill();
  if (prefill_attention) return cairn::infer::PrefillAttention();
  return cairn::infer::Main(quick);
}
