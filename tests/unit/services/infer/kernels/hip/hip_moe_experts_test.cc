// HipKernelBackend::MoeExperts' decode path on the device (routing, bucketing by expert, grouped
// products and the ordered sum without waiting for the device) against the default path on the
// same device (bit for bit) and the CPU backend (within the row product's tolerance), on shapes
// with one token, tokens whose experts collide, many tokens per expert, unaligned widths and
// experts stored in two parts. The prefill path and the routing: hip_moe_prefill_test.cc; the one
// launch's routing, stamps and loads taken from counters: hip_moe_one_launch_test.cc. Skips
// without a device.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/scratch_arena.h"
#include "tests/unit/services/infer/kernels/hip/hip_kernel_test_fixture.h"
#include "tests/unit/services/infer/kernels/hip/hip_moe_test_fixture.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer::testing {
namespace {

std::vector<MoeShape> Shapes() {
  return {
      {"one token", 1, 256, 64, 32, 4, false, 0.0f},
      {"colliding experts", 13, 128, 96, 16, 6, true, 6.0f},
      {"many tokens per expert", 200, 128, 64, 8, 3, false, 0.0f},
      {"unaligned widths", 21, 70, 36, 12, 5, true, 0.0f},
      {"80B-like layer, 16 slots", 16, 2048, 512, 512, 10, true, 0.0f},
      // More than 512 experts (a routing warp's lanes take 19 or 18 each).
      // One launch routes and sorts 5 tokens; 40 take a warp each, then the sort.
      {"600 experts", 5, 64, 32, 600, 8, false, 0.0f},
      {"600 experts, 40 tokens", 40, 64, 32, 600, 8, false, 0.0f},
  };
}

TEST_F(HipMoeExpertsTest, DevicePathGivesTheDefaultsBitsAndMatchesCpu) {
  // Both input roundings of the decode products (HipKernelBackendOptions::mma_rows_bf16_inputs):
  // exact inputs within the fp32 tolerance of the CPU backend, bf16-rounded ones within the
  // input rounding's; the device path gives the default's bits in each.
  for (const bool bf16_inputs : {false, true}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> mode =
        HipKernelBackend::Create({.mma_rows_bf16_inputs = bf16_inputs});
    ASSERT_TRUE(mode.ok()) << mode.status();
    HipKernelBackend* gpu = mode->get();
    const float tolerance = bf16_inputs ? kBf16InputTolerance : kReductionTolerance;
    for (const MoeShape& s : Shapes()) {
      SCOPED_TRACE(::testing::Message()
                   << s.name << (bf16_inputs ? ", bf16 inputs" : ", exact inputs"));
      const std::shared_ptr<const MoeBits> shared_bits = SharedRandomExperts(s, 91);
      const MoeBits& bits = *shared_bits;
      std::vector<DeviceBuffer> keep;
      std::vector<WeightMatrix> gate_up, down, host_gate_up, host_down;
      UploadExperts(s, bits, keep, gate_up, down);
      ExpertMatrices(s, bits.gate_up.data(), nullptr, nullptr, bits.down.data(), host_gate_up,
                     host_down);
      std::vector<float> x = RandomFloats(s.tokens * s.hidden, 93);
      const std::vector<float> logits = RouterLogits(s, 95, /*tied_pairs=*/true);
      const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 97);
      DeviceBuffer dx = Up(x), dl = Up(logits), dev_out = Up(out0), def_out = Up(out0);
      MoeExpertsArgs a = ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, true);
      ScratchArena scratch(gpu->memory());

      a.out = dev_out.floats();
      ASSERT_TRUE(gpu->MoeExperts(a, scratch).ok()) << gpu->status();
      a.out = def_out.floats();
      ASSERT_TRUE(gpu->KernelBackend::MoeExperts(a, scratch).ok()) << gpu->status();
      ASSERT_TRUE(gpu->Synchronize().ok()) << gpu->status();
      // The device path with MoeRoute's thread per token instead of a block per token.
      DeviceBuffer thread_out = Up(out0);
      {
        absl::StatusOr<std::unique_ptr<HipKernelBackend>> b = HipKernelBackend::Create(
            {.mma_rows_bf16_inputs = bf16_inputs, .moe_block_route = false});
        ASSERT_TRUE(b.ok()) << b.status();
        ScratchArena other(b->get()->memory());
        a.out = thread_out.floats();
        ASSERT_TRUE((*b)->MoeExperts(a, other).ok()) << (*b)->status();
        ASSERT_TRUE((*b)->Synchronize().ok()) << (*b)->status();
      }

      const std::vector<float> dev = Down(dev_out, out0.size());
      const std::vector<float> def = Down(def_out, out0.size());
      EXPECT_TRUE(SameBits(Down(thread_out, out0.size()), def)) << "thread-per-token routing";
      EXPECT_TRUE(SameBits(dev, def)) << "block-per-token routing";
      const std::vector<float> ref = CpuMoe(a, x, logits, out0, host_gate_up, host_down);
      // The routed sum alone (out - out0) against the CPU's.
      std::vector<float> dev_sum(dev.size()), ref_sum(ref.size());
      for (size_t i = 0; i < dev.size(); ++i) {
        dev_sum[i] = dev[i] - out0[i];
        ref_sum[i] = ref[i] - out0[i];
      }
      EXPECT_LT(
          Measured(std::string("moe experts ") + (bf16_inputs ? "(bf16 inputs) " : "") + s.name,
                   RelErr(dev_sum, ref_sum)),
          tolerance);
    }
  }
}

TEST_F(HipMoeExpertsTest, TheGateAndTheResidualGiveTheBitsOfTheirOwnLaunches) {
  // MoeExpertsArgs::out_gate and residual (the shared expert's gate and the residual stream,
  // taken into the sum's launch by moe_kernels 1) against SigmoidScaleRows, MoeExperts and
  // AddScaledRows as separate calls: the decode and prefill paths, both sum kernels, 16-byte and
  // scalar sums (widths 128 and 70); out and the residual bit for bit. Also with the logits and
  // gate rows apart in one buffer, read there or copied into rows of their own.
  // moe_kernels 1 also with moe_stream_products 5 at every token count: the decode path's one
  // launch then routes, sorts and sums (gate and residual included) itself.
  for (const auto& [kernels, stream] : std::vector<std::pair<int, int>>{{1, 3}, {1, 5}, {0, 3}}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> mode =
        HipKernelBackend::Create({.moe_stream_products = stream,
                                  .moe_one_launch_max_tokens = stream == 5 ? 1 << 20 : 8,
                                  .moe_kernels = kernels});
    ASSERT_TRUE(mode.ok()) << mode.status();
    HipKernelBackend* gpu = mode->get();
    for (const MoeShape& s : Shapes()) {
      if (s.tokens > 100) continue;
      for (const bool row_invariant : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << s.name << ", moe_kernels " << kernels << ", moe_stream_products " << stream
                     << (row_invariant ? ", decode" : ", prefill"));
        const std::shared_ptr<const MoeBits> shared_bits = SharedRandomExperts(s, 191);
        const MoeBits& bits = *shared_bits;
        std::vector<DeviceBuffer> keep;
        std::vector<WeightMatrix> gate_up, down;
        UploadExperts(s, bits, keep, gate_up, down);
        const std::vector<float> x = RandomFloats(s.tokens * s.hidden, 193);
        const std::vector<float> logits = RouterLogits(s, 195, /*tied_pairs=*/false);
        const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 197);
        const std::vector<float> h0 = RandomFloats(s.tokens * s.hidden, 198);
        const std::vector<float> gate = RandomFloats(s.tokens, 199, -4.0f, 4.0f);
        DeviceBuffer dx = Up(x), dl = Up(logits), dg = Up(gate), fused_out = Up(out0),
                     fused_h = Up(h0), apart_out = Up(out0), apart_h = Up(h0);
        MoeExpertsArgs a = ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, row_invariant);
        ScratchArena scratch(gpu->memory());
        a.out = fused_out.floats();
        a.out_gate = dg.floats();
        a.residual = fused_h.floats();
        ASSERT_TRUE(gpu->MoeExperts(a, scratch).ok()) << gpu->status();
        a.out = apart_out.floats();
        a.out_gate = nullptr;
        a.residual = nullptr;
        gpu->SigmoidScaleRows(a.out, s.tokens, s.hidden, dg.floats());
        ASSERT_TRUE(gpu->MoeExperts(a, scratch).ok()) << gpu->status();
        gpu->AddScaledRows(a.out, s.tokens, s.hidden, nullptr, nullptr, apart_h.floats());
        // The logits and the gate as one product gives them: token rows experts + 1 apart, the
        // gate last (MoeExpertsArgs::logits_ld and out_gate_ld).
        std::vector<float> both;
        for (int64_t t = 0; t < s.tokens; ++t) {
          both.insert(both.end(), logits.begin() + t * s.experts,
                      logits.begin() + (t + 1) * s.experts);
          both.push_back(gate[t]);
        }
        DeviceBuffer db = Up(both), strided_out = Up(out0), strided_h = Up(h0);
        a.logits = db.floats();
        a.logits_ld = s.experts + 1;
        a.out_gate = db.floats() + s.experts;
        a.out_gate_ld = s.experts + 1;
        a.out = strided_out.floats();
        a.residual = strided_h.floats();
        ASSERT_TRUE(gpu->MoeExperts(a, scratch).ok()) << gpu->status();
        ASSERT_TRUE(gpu->Synchronize().ok()) << gpu->status();
        const size_t n = out0.size();
        EXPECT_TRUE(SameBits(Down(fused_out, n), Down(apart_out, n))) << "out";
        const std::vector<float> h = Down(fused_h, n);
        EXPECT_TRUE(SameBits(h, Down(apart_h, n))) << "residual";
        EXPECT_TRUE(SameBits(Down(strided_out, n), Down(fused_out, n))) << "strided out";
        EXPECT_TRUE(SameBits(Down(strided_h, n), h)) << "strided residual";
        EXPECT_FALSE(SameBits(h, h0));  // It did add.
      }
    }
  }
}

TEST_F(HipMoeExpertsTest, TheRouterInsideTheOneLaunchGivesTheBitsOfItsProductLaunch) {
  // MoeExpertsArgs::router (decode's router product, run by MoeExperts) inside the one launch
  // (moe_router_inside: its units ahead of the routing, a grid barrier between) against its own
  // launch first (the option off, and the default KernelBackend::MoeExperts): the logits, out
  // and the residual bit for bit, both input roundings, with the shared expert folded in and
  // its gate as the router's last row (logits experts + 1 apart), and without (router rows of
  // the experts only). One and four tokens of the 80B-like layer and a small layer take the
  // launch; 12 tokens (past moe_one_launch_max_tokens) and unaligned widths run the product
  // first on every backend. Each backend runs each call twice (the counters' two arrays).
  const std::vector<MoeShape> shapes = {
      {"80B-like layer, one token", 1, 2048, 512, 512, 10, true, 0.0f},
      {"80B-like layer, 4 slots", 4, 2048, 512, 512, 10, false, 0.0f},
      {"small layer", 3, 256, 64, 32, 4, false, 0.0f},
      {"80B-like layer, 12 slots", 12, 2048, 512, 512, 10, false, 0.0f},
      {"unaligned widths", 5, 70, 36, 12, 5, true, 0.0f},
  };
  const int64_t one_launch_before = hip::MoeLayerStreamLaunches();
  for (const bool bf16_inputs : {true, false}) {
    std::vector<std::unique_ptr<HipKernelBackend>> backends;
    for (const bool inside : {false, true}) {
      absl::StatusOr<std::unique_ptr<HipKernelBackend>> b = HipKernelBackend::Create(
          {.mma_rows_bf16_inputs = bf16_inputs, .moe_router_inside = inside});
      ASSERT_TRUE(b.ok()) << b.status();
      backends.push_back(*std::move(b));
    }
    for (const MoeShape& s : shapes) {
      for (const bool with_shared : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << s.name << (bf16_inputs ? ", bf16 inputs" : ", exact inputs")
                     << (with_shared ? ", shared expert and gate" : ""));
        std::vector<DeviceBuffer> keep;
        std::vector<WeightMatrix> gate_up, down, shared_gate_up, shared_down;
        UploadWithShared(s, 611, keep, gate_up, down, shared_gate_up, shared_down);
        const int64_t rows = s.experts + (with_shared ? 1 : 0);
        const RandomBf16 router = RandomBf16Values(rows * s.hidden, 613);
        const std::vector<float> x = RandomFloats(s.tokens * s.hidden, 615);
        const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 617);
        const std::vector<float> h0 = RandomFloats(s.tokens * s.hidden, 619);
        DeviceBuffer dx = Up(x), dr = Up(router.bits);
        const WeightMatrix wr = WeightMatrix::Of(dr.data(), WeightType::kBF16, rows, s.hidden);
        std::vector<std::vector<float>> logits, outs, hs;
        const int64_t inside_before = backends[1]->moe_router_inside_launches();
        for (int way = 0; way < 5; ++way) {
          // The option off twice, on twice, then the default's product launch first.
          HipKernelBackend& be = *backends[way == 4 ? 0 : way / 2];
          DeviceBuffer dl = Poisoned(s.tokens * rows), out = Up(out0), h = Up(h0);
          MoeExpertsArgs a = ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, true);
          if (with_shared) a = WithSharedExpert(a, s, shared_gate_up, shared_down);
          a.logits_ld = rows;
          a.out_gate = with_shared ? dl.floats() + s.experts : nullptr;
          a.out_gate_ld = rows;
          a.router = &wr;
          a.router_logits = dl.floats();
          a.out = out.floats();
          a.residual = h.floats();
          ScratchArena scratch(be.memory());
          const absl::Status st =
              way == 4 ? be.KernelBackend::MoeExperts(a, scratch) : be.MoeExperts(a, scratch);
          ASSERT_TRUE(st.ok()) << st << " " << be.status();
          ASSERT_TRUE(be.Synchronize().ok()) << be.status();
          logits.push_back(Down(dl, s.tokens * rows));
          outs.push_back(Down(out, out0.size()));
          hs.push_back(Down(h, h0.size()));
        }
        for (int way = 1; way < 5; ++way) {
          SCOPED_TRACE(::testing::Message() << "way " << way);
          EXPECT_TRUE(SameBits(logits[way], logits[0]));
          EXPECT_TRUE(SameBits(outs[way], outs[0]));
          EXPECT_TRUE(SameBits(hs[way], hs[0]));
        }
        EXPECT_FALSE(SameBits(hs[0], h0));  // It did add.
        // The 80B-like layer's decode calls of one and four tokens took the router inside,
        // twice each; the option off never does.
        EXPECT_EQ(backends[0]->moe_router_inside_launches(), 0);
        if (hip::MoeLayerStreamSupported() && s.hidden == 2048 && s.tokens <= 8) {
          EXPECT_EQ(backends[1]->moe_router_inside_launches() - inside_before, 2);
        }
      }
    }
  }
  if (hip::MoeLayerStreamSupported()) {
    EXPECT_GT(hip::MoeLayerStreamLaunches(), one_launch_before);
  }
}

TEST_F(HipMoeExpertsTest, TheSharedExpertInTheGroupedLaunchesGivesTheBitsOfItsOwnLaunches) {
  // MoeExpertsArgs::shared_gate_up folded into the decode path's grouped launches
  // (fold_shared_expert) against the shared expert run first on its own (fold off) and against
  // the default (KernelBackend::MoeExperts): out and the residual bit for bit, with the gate.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> apart_backend =
      HipKernelBackend::Create({.fold_shared_expert = false});
  ASSERT_TRUE(apart_backend.ok()) << apart_backend.status();
  HipKernelBackend* apart = apart_backend->get();
  for (const MoeShape& s : Shapes()) {
    if (s.tokens > 100) continue;
    SCOPED_TRACE(s.name);
    std::vector<DeviceBuffer> keep;
    std::vector<WeightMatrix> gate_up, down, shared_gate_up, shared_down;
    UploadWithShared(s, 291, keep, gate_up, down, shared_gate_up, shared_down);
    const std::vector<float> x = RandomFloats(s.tokens * s.hidden, 293);
    const std::vector<float> logits = RouterLogits(s, 295, /*tied_pairs=*/false);
    const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 297);
    const std::vector<float> h0 = RandomFloats(s.tokens * s.hidden, 298);
    const std::vector<float> gate = RandomFloats(s.tokens, 299, -4.0f, 4.0f);
    DeviceBuffer dx = Up(x), dl = Up(logits), dg = Up(gate);
    MoeExpertsArgs a = ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, true);
    a.out_gate = dg.floats();
    a.shared_gate_up = &shared_gate_up[0];
    a.shared_down = &shared_down[0];
    a.shared_width = s.width;
    const size_t n = out0.size();
    std::vector<std::vector<float>> outs, hs;
    for (int way = 0; way < 3; ++way) {
      DeviceBuffer out = Up(out0), h = Up(h0);
      a.out = out.floats();
      a.residual = h.floats();
      HipKernelBackend* b = way == 1 ? apart : gpu_.get();
      ScratchArena scratch(b->memory());
      const absl::Status st =
          way == 2 ? b->KernelBackend::MoeExperts(a, scratch) : b->MoeExperts(a, scratch);
      ASSERT_TRUE(st.ok()) << st << " " << b->status();
      ASSERT_TRUE(b->Synchronize().ok()) << b->status();
      outs.push_back(Down(out, n));
      hs.push_back(Down(h, n));
    }
    EXPECT_TRUE(SameBits(outs[0], outs[1])) << "out, fold off";
    EXPECT_TRUE(SameBits(outs[0], outs[2])) << "out, the default";
    EXPECT_TRUE(SameBits(hs[0], hs[1])) << "residual, fold off";
    EXPECT_TRUE(SameBits(hs[0], hs[2])) << "residual, the default";
    EXPECT_FALSE(SameBits(outs[0], out0));  // It did write.
  }
}

TEST_F(HipMoeExpertsTest, LongWarpsGiveTheBitsOfAWarpASegment) {
  // The decode path's grouped products with warps of several k segments (moe_product_waves)
  // against a warp a segment (0) and the default (KernelBackend::MoeExperts: MatMulRowsMma per
  // expert), with both input roundings and the shared expert folded in. On the H200 (132
  // multiprocessors, two blocks each), warps a column tile of the gate/up product at waves 1 /
  // 2 / 4: one token of the 80B-like layer 4 / 8 / 8 of its 8 segments, 16 tokens 1 / 1 / 1
  // (a warp all 8), the long segments (last step past k) with the shared expert 2 / 4 / 8 (parts
  // past 0 handing over 4 sums), the unaligned inputs of several segments (the scalar loads) 1
  // or 2 of 4.
  const std::vector<MoeShape> shapes = {
      {"80B-like layer, one token", 1, 2048, 512, 512, 10, true, 0.0f},
      {"80B-like layer, 16 slots", 16, 2048, 512, 512, 10, false, 0.0f},
      {"long segments", 9, 2056, 1024, 4, 2, true, 0.0f},
      {"narrow", 20, 256, 40, 16, 4, false, 6.0f},
      {"unaligned", 21, 70, 36, 12, 5, true, 0.0f},
      {"unaligned, several segments", 64, 1030, 256, 64, 8, false, 0.0f},
  };
  const std::vector<int> waves = {0, 1, 2, 4};
  const int64_t long_before = hip::MoeLongWarpLaunches();
  for (const bool bf16_inputs : {true, false}) {
    std::vector<std::unique_ptr<HipKernelBackend>> backends;
    for (const int w : waves) {
      // The grouped launches (not the default one-launch products of small calls).
      absl::StatusOr<std::unique_ptr<HipKernelBackend>> b = HipKernelBackend::Create(
          {.mma_rows_bf16_inputs = bf16_inputs, .moe_product_waves = w, .moe_stream_products = 0});
      ASSERT_TRUE(b.ok()) << b.status();
      backends.push_back(*std::move(b));
    }
    std::vector<HipKernelBackend*> ways;
    for (const auto& b : backends) ways.push_back(b.get());
    ways.push_back(nullptr);  // The default, last.
    for (const MoeShape& s : shapes) {
      SCOPED_TRACE(::testing::Message()
                   << s.name << (bf16_inputs ? ", bf16 inputs" : ", exact inputs"));
      for (const bool with_shared : {false, true}) {
        SCOPED_TRACE(with_shared ? "shared expert folded" : "routed experts only");
        std::vector<std::vector<float>> outs;
        std::vector<float> out0;
        RunWays(s, 391, /*tied_pairs=*/false, with_shared, ways, &outs, &out0);
        if (HasFatalFailure()) return;
        for (size_t way = 1; way < outs.size(); ++way) {
          EXPECT_TRUE(SameBits(outs[0], outs[way]))
              << (way < waves.size() ? absl::StrCat("waves ", waves[way]) : "the default")
              << " against a warp a segment";
        }
        EXPECT_FALSE(SameBits(outs[0], out0));  // It did write.
      }
    }
  }
  // Warps of several segments did run (none where the matrix-unit path is not built: AMD).
  if (hip::MatMulRowsMmaSupported()) {
    EXPECT_GT(hip::MoeLongWarpLaunches(), long_before);
  } else {
    EXPECT_EQ(hip::MoeLongWarpLaunches(), long_before);
  }
}

TEST_F(HipMoeExpertsTest, StreamedProductsGiveTheBitsOfTheGroupedLaunches) {
  // moe_stream_products (hip::MoeRowsStream: long-lived blocks fed by bulk copies into shared
  // memory) against the grouped launches and the default (MatMulRowsMma per expert), with both
  // input roundings, the shared expert folded in or not, and routings that collide. The shapes
  // take every path of the streamed kernel: segments of one stage (the 80B-like layer: gate/up
  // 8 segments, down 2 in four consumer groups), segments of two stages, the last one partial
  // ("long segments", k 2056: 8 segments of 288), two-stage units over several consumer groups
  // ("width 384", "wide experts"), one segment ("narrow"), gate and up rows in separate buffers
  // (each row copied from its own part), more units than blocks and fewer, and inputs the
  // kernel does not take (unaligned rows: the grouped launches run). Mode 3 (both products in
  // one launch, hip::MoeLayerStream) takes the 80B-like layer (a stage a gate/up unit, four down
  // units a stage), "narrow" and "many tokens per expert" (eight units a stage; more tiles than
  // blocks, the shared rows in many tiles) and the two shapes at the end; the others fall back
  // to the grouped launches (segments longer than a stage, widths not a multiple of 8). Modes 4
  // and 5 (the one launch routing and sorting the call itself, and 5 summing it too) take the
  // mode 3 shapes of at most 128 picks; "many tokens per expert" (600 picks) and the 80B-like
  // layer at 16 tokens (160) route in their own launch before them.
  const std::vector<MoeShape> shapes = {
      {"80B-like layer, one token", 1, 2048, 512, 512, 10, true, 0.0f},
      {"80B-like layer, 4 slots", 4, 2048, 512, 512, 10, false, 0.0f},
      {"80B-like layer, 16 slots", 16, 2048, 512, 512, 10, false, 6.0f},
      {"long segments", 9, 2056, 1024, 4, 2, true, 0.0f},
      {"narrow", 20, 256, 40, 16, 4, false, 6.0f},
      {"many tokens per expert", 200, 128, 64, 8, 3, false, 0.0f},
      // Consumer groups sharing the block's stages: the down product's one segment of 384 in
      // two stages, eight groups (a review found the first ring hang here); gate/up of four
      // segments of 512 in two stages, two groups.
      {"width 384", 4, 2048, 384, 64, 4, false, 0.0f},
      {"wide experts", 4, 2048, 4096, 4, 2, false, 0.0f},
      {"unaligned", 21, 70, 36, 12, 5, true, 0.0f},
      // Mode 3 with more k segments in the down product than in gate/up, and gate/up groups
      // that skip a tile's last unit (column tiles not a multiple of the groups): a down group
      // joins warps of several gate/up groups (2 -> 4 and 4 -> 8 segments); a review found
      // their sums' buffers out of step there.
      {"down of more segments", 4, 512, 1000, 8, 2, true, 0.0f},
      {"down of eight segments", 4, 1024, 2040, 8, 2, false, 0.0f},
  };
  const int64_t streamed_before = hip::MoeStreamLaunches();
  const int64_t one_launch_before = hip::MoeLayerStreamLaunches();
  for (const bool bf16_inputs : {true, false}) {
    std::vector<std::unique_ptr<HipKernelBackend>> backends;
    for (const int mode : {0, 1, 2, 3, 4, 5}) {
      // Modes 3-5 take every call here, however many tokens.
      absl::StatusOr<std::unique_ptr<HipKernelBackend>> b =
          HipKernelBackend::Create({.mma_rows_bf16_inputs = bf16_inputs,
                                    .moe_stream_products = mode,
                                    .moe_one_launch_max_tokens = 1 << 20});
      ASSERT_TRUE(b.ok()) << b.status();
      backends.push_back(*std::move(b));
    }
    // Mode 5 by a cooperative launch (the others' one launch is a plain one, the default).
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> cooperative =
        HipKernelBackend::Create({.mma_rows_bf16_inputs = bf16_inputs,
                                  .moe_stream_products = 5,
                                  .moe_one_launch_max_tokens = 1 << 20,
                                  .moe_one_launch_cooperative = true});
    ASSERT_TRUE(cooperative.ok()) << cooperative.status();
    backends.push_back(*std::move(cooperative));
    // The grouped launches, the gate/up product streamed, both products streamed twice (a
    // second call on the same backend must not depend on the first's barriers), the default,
    // both products in one launch three times (the calls count on its two counter arrays in
    // turn, each zeroed by the call before), then with the routing inside three times, then
    // with the routing and the sum inside three times, by plain and by cooperative launches.
    const std::vector<HipKernelBackend*> ways = {
        backends[0].get(), backends[1].get(), backends[2].get(), backends[2].get(),
        nullptr,           backends[3].get(), backends[3].get(), backends[3].get(),
        backends[4].get(), backends[4].get(), backends[4].get(), backends[5].get(),
        backends[5].get(), backends[5].get(), backends[6].get(), backends[6].get(),
        backends[6].get()};
    for (const MoeShape& s : shapes) {
      SCOPED_TRACE(::testing::Message()
                   << s.name << (bf16_inputs ? ", bf16 inputs" : ", exact inputs"));
      for (const bool with_shared : {false, true}) {
        SCOPED_TRACE(with_shared ? "shared expert folded" : "routed experts only");
        std::vector<std::vector<float>> outs;
        std::vector<float> out0;
        RunWays(s, 491, /*tied_pairs=*/true, with_shared, ways, &outs, &out0);
        if (HasFatalFailure()) return;
        EXPECT_TRUE(SameBits(outs[0], outs[1])) << "gate/up streamed against grouped launches";
        EXPECT_TRUE(SameBits(outs[0], outs[2])) << "both streamed against grouped launches";
        EXPECT_TRUE(SameBits(outs[2], outs[3])) << "both streamed, second call";
        EXPECT_TRUE(SameBits(outs[0], outs[4])) << "grouped launches against the default";
        for (size_t way = 5; way < outs.size(); ++way) {
          const int mode = static_cast<int>(std::min<size_t>(3 + (way - 5) / 3, 5));
          EXPECT_TRUE(SameBits(outs[0], outs[way]))
              << "one launch, mode " << mode << (way >= 14 ? ", cooperative launch" : "")
              << " (call " << (way - 5) % 3 + 1 << ") against grouped launches";
        }
        EXPECT_FALSE(SameBits(outs[2], out0));  // It did write.
      }
    }
  }
  // The streamed kernel did run where it is built (NVIDIA sm_90a).
  if (hip::MoeRowsStreamSupported()) {
    EXPECT_GT(hip::MoeStreamLaunches(), streamed_before);
  } else {
    EXPECT_EQ(hip::MoeStreamLaunches(), streamed_before);
  }
  if (hip::MoeLayerStreamSupported()) {
    EXPECT_GT(hip::MoeLayerStreamLaunches(), one_launch_before);
  } else {
    EXPECT_EQ(hip::MoeLayerStreamLaunches(), one_launch_before);
  }
}

TEST_F(HipMoeExpertsTest, ATokensRowsDoNotDependOnTheOtherTokensAndNoStepWaits) {
  const MoeShape s{"80B-like layer", 16, 2048, 512, 512, 10, true, 0.0f};
  const std::shared_ptr<const MoeBits> shared_bits = SharedRandomExperts(s, 101);
  const MoeBits& bits = *shared_bits;
  std::vector<DeviceBuffer> keep;
  std::vector<WeightMatrix> gate_up, down;
  UploadExperts(s, bits, keep, gate_up, down);
  std::vector<float> x = RandomFloats(s.tokens * s.hidden, 103);
  std::vector<float> logits = RandomFloats(s.tokens * s.experts, 105, -3.0f, 3.0f);
  // Tokens 3 and 4 route alike: their experts collide.
  std::copy(logits.begin() + 3 * s.experts, logits.begin() + 4 * s.experts,
            logits.begin() + 4 * s.experts);
  const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 107);
  DeviceBuffer dx = Up(x), dl = Up(logits), all = Up(out0);
  MoeExpertsArgs a = ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, true);
  a.out = all.floats();
  ScratchArena scratch(gpu_->memory());
  ASSERT_TRUE(gpu_->MoeExperts(a, scratch).ok()) << gpu_->status();
  scratch.EndPass();
  const std::vector<float> full = Down(all, out0.size());
  // A second pass takes the arena's merged block (the one allocation a warm-up makes).
  DeviceBuffer again = Up(out0);
  a.out = again.floats();
  ASSERT_TRUE(gpu_->MoeExperts(a, scratch).ok()) << gpu_->status();
  scratch.EndPass();
  EXPECT_TRUE(SameBits(Down(again, out0.size()), full));

  // Runs of 1, 2 and 5 tokens from several starts give the full call's rows; a warm call does
  // not wait for the device.
  for (const auto& [first, count] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {4, 1}, {3, 2}, {11, 5}, {0, 16}}) {
    SCOPED_TRACE(absl::StrCat("tokens ", first, " + ", count));
    DeviceBuffer part = Up(std::vector<float>(out0.begin() + first * s.hidden,
                                              out0.begin() + (first + count) * s.hidden));
    MoeExpertsArgs p = a;
    p.x = dx.floats() + first * s.hidden;
    p.logits = dl.floats() + first * s.experts;
    p.out = part.floats();
    p.tokens = count;
    const int64_t waits = gpu_->host_waits();
    ASSERT_TRUE(gpu_->MoeExperts(p, scratch).ok()) << gpu_->status();
    EXPECT_EQ(gpu_->host_waits(), waits);
    scratch.EndPass();
    EXPECT_TRUE(SameBits(Down(part, count * s.hidden),
                         std::vector<float>(full.begin() + first * s.hidden,
                                            full.begin() + (first + count) * s.hidden)));
  }
}

}  // namespace
}  // namespace cairn::infer::testing
