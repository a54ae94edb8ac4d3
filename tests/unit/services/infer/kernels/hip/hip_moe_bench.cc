// cairn_hip_kernel_bench's MoE modes: one MoE layer's routed experts at the 80B-A3B-like model's
// shapes, at prefill sizes (--moe-prefill) and decode sizes (--moe-decode); the usage is in
// hip_kernel_bench.cc.
#include "tests/unit/services/infer/kernels/hip/hip_moe_bench.h"

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

#include "services/infer/kernels/hip/hip_compat.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/scratch_arena.h"
#include "tests/unit/services/infer/kernels/hip/hip_bench_util.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer {
namespace {

// One MoE layer's experts at the 80B-A3B-like model's shapes (512 experts of 512, hidden 2048,
// top 10): every expert's gate/up and down matrices in one device pool (3.2 GB, far larger than
// L2), bf16 random values.
struct MoePool {
  static constexpr int64_t kHidden = 2048, kWidth = 512;
  static constexpr int kExperts = 512, kTopK = 10;
  static constexpr int64_t kExpertBf16 = 3 * kWidth * kHidden;  // gate, up and down.
  DeviceBuffer pool;
  std::vector<WeightMatrix> gate_up, down;

  explicit MoePool(HipKernelBackend& b) {
    absl::StatusOr<DeviceBuffer> buffer = b.Allocate(kExperts * kExpertBf16 * 2);
    if (!buffer.ok()) Bench::Fail(buffer.status().ToString());
    pool = *std::move(buffer);
    const std::vector<uint16_t> bits = RandomBf16Bits(kExpertBf16, 50);
    auto* base = static_cast<uint16_t*>(pool.data());
    for (int e = 0; e < kExperts; ++e) {
      Bench::Check(b.Upload(base + e * kExpertBf16, bits.data(), kExpertBf16 * 2),
                   "upload experts");
      gate_up.push_back(
          WeightMatrix::Of(base + e * kExpertBf16, WeightType::kBF16, 2 * kWidth, kHidden));
      down.push_back(WeightMatrix::Of(base + e * kExpertBf16 + 2 * kWidth * kHidden,
                                      WeightType::kBF16, kHidden, kWidth));
    }
  }
  // A MoeExperts call over these experts for `tokens` tokens (row_invariant: a decode step's).
  MoeExpertsArgs Args(const float* x, const float* logits, float* out, int64_t tokens,
                      bool row_invariant) const {
    MoeExpertsArgs a;
    a.x = x;
    a.logits = logits;
    a.out = out;
    a.tokens = tokens;
    a.hidden = kHidden;
    a.width = kWidth;
    a.experts = kExperts;
    a.top_k = kTopK;
    a.renormalise = true;
    a.row_invariant = row_invariant;
    a.gate_up = gate_up.data();
    a.down = down.data();
    return a;
  }
};

// Seconds per call of fn(i), i = 0 .. calls - 1, run back to back after one warm-up round:
// work of a few microseconds timed as the device runs it in a step, without a wait per call.
double BackToBack(Bench& bench, int calls, const std::function<void(int)>& fn) {
  for (int i = 0; i < calls; ++i) fn(i);
  bench.Sync();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) fn(i);
  bench.Sync();
  return Bench::Seconds(start) / calls;
}

// A device copy of `in` holding the host array `host`'s bytes.
template <typename T>
T* DeviceCopy(HipKernelBackend& b, std::vector<DeviceBuffer>& keep, const std::vector<T>& host) {
  absl::StatusOr<DeviceBuffer> d = b.Allocate(static_cast<int64_t>(host.size() * sizeof(T)));
  if (!d.ok()) Bench::Fail(d.status().ToString());
  Bench::Check(b.Upload(d->data(), host.data(), static_cast<int64_t>(host.size() * sizeof(T))),
               "upload");
  keep.push_back(*std::move(d));
  return static_cast<T*>(keep.back().data());
}

}  // namespace

// One MoE layer's routed experts at prefill sizes (see --moe-prefill above).
int MoePrefill() {
  const std::unique_ptr<HipKernelBackend> backend = Bench::Backend();
  HipKernelBackend& b = *backend;
  Bench bench(&b);
  const MoePool m(b);
  const int64_t hidden = MoePool::kHidden, width = MoePool::kWidth;
  const int experts = MoePool::kExperts, top_k = MoePool::kTopK;
  const std::vector<WeightMatrix>& gate_up = m.gate_up;
  const std::vector<WeightMatrix>& down = m.down;
  char label[200];
  for (const int64_t tokens : {int64_t{4096}, int64_t{8192}, int64_t{32768}}) {
    float* x = bench.Buffer(tokens * hidden, 51);
    float* logits = bench.Buffer(tokens * experts, 52, -3.0f, 3.0f);
    float* out = bench.Buffer(tokens * hidden, 53);
    ScratchArena scratch(b.memory());
    const MoeExpertsArgs a = m.Args(x, logits, out, tokens, false);
    const double flops = 2.0 * tokens * top_k * 3.0 * width * hidden;
    // 0: the default (host routing); 1: the grouped device path on MoeGemmBf16; 2 and 3: on the
    // warpgroup GEMMs (moe_gemm_wgmma, where built) with blocks of 2 and 3 warpgroups; 4 and 5:
    // the producer-fed GEMMs (moe_gemm_tma variants 1 and 2).
    for (const int path : {0, 1, 2, 3, 4, 5}) {
      if (path >= 2 && !hip::MoeGemmWgmmaSupported()) continue;
      if (path >= 4 && !hip::MoeGemmTmaSupported()) continue;
      b.SetGroupedMoePrefillForTest(path > 0);
      b.SetMoeGemmWgmmaForTest(path >= 2);
      if (path >= 2) b.SetMoeGemmWgmmaWarpgroupsForTest(path >= 4 ? 2 : path);
      b.SetMoeGemmTmaForTest(path >= 4 ? path - 3 : 0);
      const int64_t tma_before = hip::MoeGemmTmaLaunches();
      const double t = bench.Time(
          [&] {
            Bench::Check(b.MoeExperts(a, scratch), "moe experts");
            scratch.EndPass();
          },
          5);
      const bool tma_ran = hip::MoeGemmTmaLaunches() > tma_before;
      static constexpr const char* kPaths[] = {"default (host routing)",
                                               "grouped device path",
                                               "grouped device path, wgmma 2 groups",
                                               "grouped device path, wgmma 3 groups",
                                               "grouped device path, producer-fed (tma 1)",
                                               "grouped device path, producer-fed (tma 2)"};
      std::snprintf(label, sizeof label, "moe layer routed experts, %ld tokens, %s%s", tokens,
                    kPaths[path], path >= 4 && !tma_ran ? " (not taken: wgmma 2 ran)" : "");
      Row(label, t, "TFLOP/s", flops, 1e12);
    }
    b.SetMoeGemmTmaForTest(HipKernelBackendOptions().moe_gemm_tma);
    b.SetMoeGemmWgmmaForTest(HipKernelBackendOptions().moe_gemm_wgmma);
    b.SetMoeGemmWgmmaWarpgroupsForTest(HipKernelBackendOptions().moe_gemm_wgmma_warpgroups);
    // The default's per-expert products alone: every expert the average rows, gate/up then down.
    const int64_t rows = tokens * top_k / experts;
    float* xs = bench.Buffer(rows * hidden, 54);
    float* gu = bench.Buffer(rows * 2 * width, 55);
    float* ys = bench.Buffer(rows * hidden, 56);
    const double t = bench.Time(
        [&] {
          for (int e = 0; e < experts; ++e) {
            b.MatMulTransposedTyped(xs, rows, hidden, gate_up[e], gu, 2 * width, false);
            b.MatMulTransposedTyped(gu, rows, width, down[e], ys, hidden, false);
          }
        },
        5);
    std::snprintf(label, sizeof label, "moe layer, %ld vendor GEMM pairs of %ld rows alone",
                  static_cast<int64_t>(experts), rows);
    Row(label, t, "TFLOP/s", flops, 1e12);
    bench.Free();
  }
  return 0;
}

// One MoE layer's routed experts at decode sizes (see --moe-decode above).
int MoeDecode() {
  const std::unique_ptr<HipKernelBackend> backend = Bench::Backend();
  HipKernelBackend& b = *backend;
  Bench bench(&b);
  const MoePool m(b);
  const int64_t hidden = MoePool::kHidden, width = MoePool::kWidth;
  const int experts = MoePool::kExperts, top_k = MoePool::kTopK;
  const hipStream_t stream = b.compute_stream();
  int multiprocessors = 0;
  if (hipDeviceGetAttribute(&multiprocessors, hipDeviceAttributeMultiprocessorCount, 0) !=
      hipSuccess) {
    Bench::Fail("multiprocessor count");
  }
  {
    const int64_t n = int64_t{1} << 28;  // 1 GiB of floats.
    float* src = bench.Buffer(n, 1);
    float* dst = bench.Buffer(n, 2);
    const double t = BackToBack(bench, 5, [&](int) {
      Bench::Check(hipMemcpyAsync(dst, src, n * 4, hipMemcpyDeviceToDevice, stream), "copy");
    });
    Row("ceiling: device copy 1 GiB (read + write)", t, "GB/s", 2.0 * n * 4);
    bench.Free();
  }
  // The experts' tables as HipKernelBackend::MoeTableFor makes them (one part each).
  std::vector<DeviceBuffer> keep;
  std::vector<hip::MoeExpertParts> gu_host(experts), down_host(experts);
  for (int e = 0; e < experts; ++e) {
    gu_host[e].data[0] = static_cast<const uint16_t*>(m.gate_up[e].parts[0].data);
    gu_host[e].end[0] = 2 * width;
    gu_host[e].count = 1;
    down_host[e].data[0] = static_cast<const uint16_t*>(m.down[e].parts[0].data);
    down_host[e].end[0] = hidden;
    down_host[e].count = 1;
  }
  const hip::MoeExpertParts* gu_table = DeviceCopy(b, keep, gu_host);
  const hip::MoeExpertParts* down_table = DeviceCopy(b, keep, down_host);
  // Different routings in turn, so that a call's experts are not in L2 from the call before.
  constexpr int kRoutings = 16;
  char label[200];
  for (const int64_t tokens : {int64_t{1}, int64_t{4}, int64_t{16}}) {
    const int64_t picks = tokens * top_k;
    // The experts a call reads (expected distinct picks of uniform routing) and their bytes.
    const double distinct =
        experts * (1.0 - std::pow(1.0 - static_cast<double>(top_k) / experts, tokens));
    const double gu_bytes = distinct * 2 * width * hidden * 2;
    const double down_bytes = distinct * hidden * width * 2;
    float* x = bench.Buffer(tokens * hidden, 51);
    float* out = bench.Buffer(tokens * hidden, 53);
    std::vector<float*> logits;
    for (int r = 0; r < kRoutings; ++r) {
      logits.push_back(bench.Buffer(tokens * experts, 60 + r, -3.0f, 3.0f));
    }
    ScratchArena scratch(b.memory());
    MoeExpertsArgs a = m.Args(x, logits[0], out, tokens, true);  // The device path.
    b.SetMoeStreamProductsForTest(0);                            // The grouped launches.
    const double whole = BackToBack(bench, 2 * kRoutings, [&](int i) {
      a.logits = logits[i % kRoutings];
      Bench::Check(b.MoeExperts(a, scratch), "moe experts");
      scratch.EndPass();
    });
    std::snprintf(label, sizeof label,
                  "moe decode, %ld tokens: MoeExperts, grouped launches (%.0f experts)", tokens,
                  distinct);
    Row(label, whole, "GB/s", gu_bytes + down_bytes);
    // The whole layer with the products streamed (moe_stream_products 1 and 2, and 3-5: both in
    // one launch, 4 and 5 with the routing, 5 with the sum): whether what a streamed launch saves
    // alone survives its neighbours (routing before it, the down product and the sum after).
    if (hip::MoeRowsStreamSupported()) {
      b.SetMoeOneLaunchMaxTokensForTest(1 << 20);  // Mode 3 at every token count here.
      for (const int mode : {1, 2, 3, 4, 5}) {
        b.SetMoeStreamProductsForTest(mode);
        const double streamed = BackToBack(bench, 2 * kRoutings, [&](int i) {
          a.logits = logits[i % kRoutings];
          Bench::Check(b.MoeExperts(a, scratch), "moe experts, streamed");
          scratch.EndPass();
        });
        std::snprintf(label, sizeof label, "  MoeExperts, %s streamed",
                      mode == 1   ? "gate/up"
                      : mode == 2 ? "gate/up and down"
                      : mode == 3 ? "both products in one launch"
                      : mode == 4 ? "routing and both products in one launch"
                                  : "routing, both products and the sum in one launch");
        Row(label, streamed, "GB/s", gu_bytes + down_bytes);
      }
      // Mode 5 by a cooperative launch, against the plain one above (the default).
      b.SetMoeOneLaunchCooperativeForTest(true);
      const double cooperative = BackToBack(bench, 2 * kRoutings, [&](int i) {
        a.logits = logits[i % kRoutings];
        Bench::Check(b.MoeExperts(a, scratch), "moe experts, cooperative launch");
        scratch.EndPass();
      });
      Row("  the same, a cooperative launch", cooperative, "GB/s", gu_bytes + down_bytes);
      b.SetMoeOneLaunchCooperativeForTest(HipKernelBackendOptions().moe_one_launch_cooperative);
      b.SetMoeOneLaunchMaxTokensForTest(HipKernelBackendOptions().moe_one_launch_max_tokens);
    }
    b.SetMoeStreamProductsForTest(HipKernelBackendOptions().moe_stream_products);

    // The device path's launches, one kind at a time over the routings.
    const hip::MoeSortSizes sizes = hip::MoeSortSizesFor(picks, experts, hip::MoeTileRows());
    auto ints = [&](int64_t n) {
      return DeviceCopy(b, keep,
                        std::vector<int32_t>(static_cast<size_t>(std::max<int64_t>(n, 1))));
    };
    std::vector<int32_t*> ids(kRoutings);
    std::vector<float*> weights(kRoutings);
    std::vector<hip::MoeSortBuffers> sorted(kRoutings);
    for (int r = 0; r < kRoutings; ++r) {
      ids[r] = ints(picks);
      weights[r] = bench.Buffer(picks, 70);
      hip::MoeSortBuffers& sb = sorted[r];
      sb.hist = ints(sizes.hist_ints);
      sb.base = ints(sizes.hist_ints);
      sb.rank = ints(picks);
      sb.offsets = ints(experts);
      sb.tiles = DeviceCopy(b, keep, std::vector<hip::MoeTile>(sizes.max_tiles));
      sb.num_tiles = ints(1);
      sb.sorted_picks = ints(picks);
      sb.slot_of_pick = ints(picks);
    }
    float* gu = bench.Buffer(picks * 2 * width, 71);
    float* act = bench.Buffer(picks * width, 72);
    float* ys = bench.Buffer(picks * hidden, 73);
    const double route = BackToBack(bench, kRoutings, [&](int r) {
      Bench::Check(hip::MoeRouteAndSort(logits[r], experts, tokens, experts, top_k, true,
                                        hip::MoeRouting::kWarp, hip::MoeTileRows(), ids[r],
                                        weights[r], sorted[r], stream),
                   "route and sort");
    });
    // The grouped products, and the gate/up product with SiLU-mul in one launch.
    const double up = BackToBack(bench, kRoutings, [&](int r) {
      Bench::Check(hip::MoeRowsMma(x, hidden, sorted[r].sorted_picks, top_k, sorted[r].tiles,
                                   sorted[r].num_tiles, sizes.max_tiles, gu_table, true, 2 * width,
                                   hidden, gu, 2 * width, true, stream),
                   "gate/up");
    });
    const double up_silu = BackToBack(bench, kRoutings, [&](int r) {
      Bench::Check(hip::MoeRowsMmaSiluMul(x, hidden, sorted[r].sorted_picks, top_k, sorted[r].tiles,
                                          sorted[r].num_tiles, sizes.max_tiles, gu_table, true,
                                          width, hidden, act, true, stream),
                   "gate/up and silu mul");
    });
    const double dn = BackToBack(bench, kRoutings, [&](int r) {
      Bench::Check(hip::MoeRowsMma(act, width, nullptr, top_k, sorted[r].tiles, sorted[r].num_tiles,
                                   sizes.max_tiles, down_table, true, hidden, width, ys, hidden,
                                   true, stream),
                   "down");
    });
    // The same two products with warps of several segments (moe_product_waves; the same bits).
    const std::vector<int> waves = {2, 4, 8};
    std::vector<double> up_silu_long, dn_long;
    for (const int w : waves) {
      const hip::MoeLongWarps lw{.multiprocessors = multiprocessors, .waves = w};
      up_silu_long.push_back(BackToBack(bench, kRoutings, [&](int r) {
        Bench::Check(
            hip::MoeRowsMmaSiluMul(x, hidden, sorted[r].sorted_picks, top_k, sorted[r].tiles,
                                   sorted[r].num_tiles, sizes.max_tiles, gu_table, true, width,
                                   hidden, act, true, stream, {}, lw),
            "gate/up and silu mul, long warps");
      }));
      dn_long.push_back(BackToBack(bench, kRoutings, [&](int r) {
        Bench::Check(hip::MoeRowsMma(act, width, nullptr, top_k, sorted[r].tiles,
                                     sorted[r].num_tiles, sizes.max_tiles, down_table, true, hidden,
                                     width, ys, hidden, true, stream, {}, lw),
                     "down, long warps");
      }));
    }
    // The same two products streamed (moe_stream_products; the same bits), where built.
    double up_silu_stream = 0, dn_stream = 0;
    if (hip::MoeRowsStreamSupported()) {
      const hip::MoeLongWarps st{.multiprocessors = multiprocessors,
                                 .waves = HipKernelBackendOptions().moe_product_waves,
                                 .stream = true};
      up_silu_stream = BackToBack(bench, kRoutings, [&](int r) {
        Bench::Check(
            hip::MoeRowsMmaSiluMul(x, hidden, sorted[r].sorted_picks, top_k, sorted[r].tiles,
                                   sorted[r].num_tiles, sizes.max_tiles, gu_table, true, width,
                                   hidden, act, true, stream, {}, st),
            "gate/up and silu mul, streamed");
      });
      dn_stream = BackToBack(bench, kRoutings, [&](int r) {
        Bench::Check(hip::MoeRowsMma(act, width, nullptr, top_k, sorted[r].tiles,
                                     sorted[r].num_tiles, sizes.max_tiles, down_table, true, hidden,
                                     width, ys, hidden, true, stream, {}, st),
                     "down, streamed");
      });
    }
    // The earlier routing for comparison (moe_kernels 0: a block per token, then the sort in
    // three launches; the same ids, weights and slots).
    const double route_block = BackToBack(bench, kRoutings, [&](int r) {
      Bench::Check(hip::MoeRouteAndSort(logits[r], experts, tokens, experts, top_k, true,
                                        hip::MoeRouting::kBlock, hip::MoeTileRows(), ids[r],
                                        weights[r], sorted[r], stream),
                   "route and sort, block per token");
    });
    // The sort alone (the routed ids above, one block), so that the routing's share shows.
    const double sort = BackToBack(bench, kRoutings, [&](int r) {
      Bench::Check(hip::MoeSortPicks(ids[r], picks, experts, hip::MoeTileRows(), sorted[r], stream,
                                     /*one_block=*/true),
                   "sort");
    });
    const double silu = BackToBack(bench, kRoutings, [&](int) {
      Bench::Check(
          hip::SiluMul(gu, 2 * width, gu + width, 2 * width, picks, width, act, nullptr, stream),
          "silu mul");
    });
    const double combine = BackToBack(bench, kRoutings, [&](int r) {
      Bench::Check(hip::MoeCombine(ys, ids[r], weights[r], sorted[r].slot_of_pick, tokens, top_k,
                                   hidden, out, stream, true),
                   "combine");
    });
    std::snprintf(label, sizeof label, "  route and sort (one launch)");
    Row(label, route, "calls/s", 1.0, 1.0);
    std::snprintf(label, sizeof label, "    of which the sort alone (one block)");
    Row(label, sort, "calls/s", 1.0, 1.0);
    std::snprintf(label, sizeof label, "  (moe_kernels 0: block routing, sort in three launches)");
    Row(label, route_block, "calls/s", 1.0, 1.0);
    std::snprintf(label, sizeof label, "  gate/up products, %ld picks", picks);
    Row(label, up, "GB/s", gu_bytes);
    std::snprintf(label, sizeof label, "  gate/up and silu mul, one launch");
    Row(label, up_silu, "GB/s", gu_bytes);
    for (size_t i = 0; i < waves.size(); ++i) {
      std::snprintf(label, sizeof label, "  gate/up and silu mul, long warps (%d waves)", waves[i]);
      Row(label, up_silu_long[i], "GB/s", gu_bytes);
    }
    if (up_silu_stream > 0) {
      std::snprintf(label, sizeof label, "  gate/up and silu mul, streamed");
      Row(label, up_silu_stream, "GB/s", gu_bytes);
    }
    std::snprintf(label, sizeof label, "  silu mul");
    Row(label, silu, "calls/s", 1.0, 1.0);
    std::snprintf(label, sizeof label, "  down products");
    Row(label, dn, "GB/s", down_bytes);
    for (size_t i = 0; i < waves.size(); ++i) {
      std::snprintf(label, sizeof label, "  down products, long warps (%d waves)", waves[i]);
      Row(label, dn_long[i], "GB/s", down_bytes);
    }
    if (dn_stream > 0) {
      std::snprintf(label, sizeof label, "  down products, streamed");
      Row(label, dn_stream, "GB/s", down_bytes);
    }
    std::snprintf(label, sizeof label, "  combine");
    Row(label, combine, "calls/s", 1.0, 1.0);
    std::snprintf(label, sizeof label, "  sum of the four launches alone (fused gate/up)");
    Row(label, route + up_silu + dn + combine, "GB/s", gu_bytes + down_bytes);
    bench.Free();
  }
  return 0;
}

}  // namespace cairn::infer
