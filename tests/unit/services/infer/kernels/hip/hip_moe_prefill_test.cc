// HipKernelBackend::MoeExperts' prefill path on the device (calls that are not row-invariant: the
// grouped bf16 GEMM) against the CPU backend and the default (within the bf16 GEMM's
// tolerance), its bits repeated, and a token's rows in calls of other compositions; the warp
// routing against MoeRoute's on hostile logits, and the eighth round's kernels against the
// earlier ones. The decode path: hip_moe_experts_test.cc. Skips without a device.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
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

void HipMoeExpertsTest::PrefillRowsDoNotDependOnOtherTokens(const MoeShape& s) {
  const std::shared_ptr<const MoeBits> shared_bits = SharedRandomExperts(s, 201);
  const MoeBits& bits = *shared_bits;
  std::vector<DeviceBuffer> keep;
  std::vector<WeightMatrix> gate_up, down;
  UploadExperts(s, bits, keep, gate_up, down);
  std::vector<float> x = RandomFloats(s.tokens * s.hidden, 203);
  std::vector<float> logits = RandomFloats(s.tokens * s.experts, 205, -3.0f, 3.0f);
  // Tokens 3 and 4 route alike: their experts collide.
  std::copy(logits.begin() + 3 * s.experts, logits.begin() + 4 * s.experts,
            logits.begin() + 4 * s.experts);
  const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 207);
  DeviceBuffer dx = Up(x), dl = Up(logits), all = Up(out0);
  MoeExpertsArgs a = ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, false);
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

  // Runs of 1 to 129 tokens from several starts give the full call's rows; a warm call does not
  // wait for the device.
  for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 1}, {4, 1}, {3, 2}, {11, 7}, {100, 64}, {17, 129}, {255, 1}}) {
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

  // Tokens 200 .. 255 between 40 and 300 other tokens (other rows, other routing): the same rows.
  for (const int64_t after : {int64_t{10}, int64_t{300}}) {
    SCOPED_TRACE(absl::StrCat("40 other tokens before, ", after, " after"));
    const int64_t before = 40, mine = 56, first = 200;
    const int64_t total = before + mine + after;
    std::vector<float> mx = RandomFloats(total * s.hidden, 209 + after);
    std::vector<float> ml = RandomFloats(total * s.experts, 211 + after, -3.0f, 3.0f);
    std::vector<float> mo = RandomFloats(total * s.hidden, 213 + after);
    std::copy(x.begin() + first * s.hidden, x.begin() + (first + mine) * s.hidden,
              mx.begin() + before * s.hidden);
    std::copy(logits.begin() + first * s.experts, logits.begin() + (first + mine) * s.experts,
              ml.begin() + before * s.experts);
    std::copy(out0.begin() + first * s.hidden, out0.begin() + (first + mine) * s.hidden,
              mo.begin() + before * s.hidden);
    DeviceBuffer mdx = Up(mx), mdl = Up(ml), mdo = Up(mo);
    MoeExpertsArgs p = a;
    p.x = mdx.floats();
    p.logits = mdl.floats();
    p.out = mdo.floats();
    p.tokens = total;
    ASSERT_TRUE(gpu_->MoeExperts(p, scratch).ok()) << gpu_->status();
    scratch.EndPass();
    const std::vector<float> got = Down(mdo, mo.size());
    EXPECT_TRUE(SameBits(std::vector<float>(got.begin() + before * s.hidden,
                                            got.begin() + (before + mine) * s.hidden),
                         std::vector<float>(full.begin() + first * s.hidden,
                                            full.begin() + (first + mine) * s.hidden)));
  }
}

namespace {

// Prefill-sized calls: the grouped GEMM's shapes (several tiles an expert, columns past the last
// full block, experts in two parts), and shapes the path does not take (widths that are not a
// multiple of 8: the default serves, so its bits).
std::vector<MoeShape> PrefillShapes() {
  return {
      {"one token", 1, 256, 64, 32, 4, false, 0.0f},
      {"colliding experts", 13, 128, 96, 16, 6, true, 6.0f},
      {"several tiles an expert", 300, 128, 64, 8, 3, false, 0.0f},
      {"ragged columns", 77, 200, 40, 24, 4, true, 0.0f},
      {"unaligned widths (default path)", 21, 70, 36, 12, 5, true, 0.0f},
      {"80B-like layer, 512 tokens", 512, 2048, 512, 512, 10, true, 0.0f},
      // Experts of about 350 picks: full tiles of 128 and of 192 picks, and shorter ones.
      {"many picks an expert", 700, 512, 256, 4, 2, true, 0.0f},
  };
}

TEST_F(HipMoeExpertsTest, PrefillPathMatchesCpuAndTheDefaultAndRepeatsItsBits) {
  for (const MoeShape& s : PrefillShapes()) {
    SCOPED_TRACE(s.name);
    const bool gemm_path = s.hidden % 8 == 0 && s.width % 8 == 0;
    const std::shared_ptr<const MoeBits> shared_bits = SharedRandomExperts(s, 191);
    const MoeBits& bits = *shared_bits;
    std::vector<DeviceBuffer> keep;
    std::vector<WeightMatrix> gate_up, down, host_gate_up, host_down;
    UploadExperts(s, bits, keep, gate_up, down);
    ExpertMatrices(s, bits.gate_up.data(), nullptr, nullptr, bits.down.data(), host_gate_up,
                   host_down);
    std::vector<float> x = RandomFloats(s.tokens * s.hidden, 193);
    const std::vector<float> logits = RouterLogits(s, 195, /*tied_pairs=*/false);
    const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 197);
    DeviceBuffer dx = Up(x), dl = Up(logits), dev_out = Up(out0), again_out = Up(out0),
                 def_out = Up(out0), other_out = Up(out0), wg_out = Up(out0);
    MoeExpertsArgs a = ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, false);
    ScratchArena scratch(gpu_->memory());
    a.out = dev_out.floats();
    ASSERT_TRUE(gpu_->MoeExperts(a, scratch).ok()) << gpu_->status();
    scratch.EndPass();
    a.out = again_out.floats();
    ASSERT_TRUE(gpu_->MoeExperts(a, scratch).ok()) << gpu_->status();
    scratch.EndPass();
    // The other grouped GEMM (moe_gemm_wgmma flipped).
    const bool wgmma = HipKernelBackendOptions().moe_gemm_wgmma;
    gpu_->SetMoeGemmWgmmaForTest(!wgmma);
    a.out = other_out.floats();
    ASSERT_TRUE(gpu_->MoeExperts(a, scratch).ok()) << gpu_->status();
    scratch.EndPass();
    gpu_->SetMoeGemmWgmmaForTest(wgmma);
    // The warpgroup GEMMs with the other block size (tiles of 128 picks against 192).
    const int warpgroups = HipKernelBackendOptions().moe_gemm_wgmma_warpgroups;
    gpu_->SetMoeGemmWgmmaWarpgroupsForTest(5 - warpgroups);
    a.out = wg_out.floats();
    ASSERT_TRUE(gpu_->MoeExperts(a, scratch).ok()) << gpu_->status();
    scratch.EndPass();
    gpu_->SetMoeGemmWgmmaWarpgroupsForTest(warpgroups);
    // The producer-fed GEMMs (moe_gemm_tma, both variants), where the device has tensor maps
    // and the experts' parts take them (a gate/up split at a width that is a multiple of their
    // boxes' rows).
    std::vector<DeviceBuffer> tma_outs;
    std::vector<bool> tma_ran;
    for (const int variant : {1, 2}) {
      const int64_t tma_before = hip::MoeGemmTmaLaunches();
      gpu_->SetMoeGemmTmaForTest(variant);
      tma_outs.push_back(Up(out0));
      a.out = tma_outs.back().floats();
      ASSERT_TRUE(gpu_->MoeExperts(a, scratch).ok()) << gpu_->status();
      scratch.EndPass();
      tma_ran.push_back(hip::MoeGemmTmaLaunches() > tma_before);
      const bool tma_expected =
          hip::MoeGemmTmaSupported() && gemm_path && wgmma &&
          (!s.two_parts || s.width % hip::MoeGemmTmaBoxRows(variant, true) == 0);
      EXPECT_EQ(tma_ran.back(), tma_expected) << "variant " << variant;
    }
    gpu_->SetMoeGemmTmaForTest(HipKernelBackendOptions().moe_gemm_tma);
    a.out = def_out.floats();
    ASSERT_TRUE(gpu_->KernelBackend::MoeExperts(a, scratch).ok()) << gpu_->status();
    ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();

    const std::vector<float> dev = Down(dev_out, out0.size());
    const std::vector<float> def = Down(def_out, out0.size());
    const std::vector<float> other = Down(other_out, out0.size());
    EXPECT_TRUE(SameBits(Down(again_out, out0.size()), dev)) << "a second call";
    EXPECT_TRUE(SameBits(Down(wg_out, out0.size()), dev)) << "two and three warpgroups";
    for (size_t i = 0; i < tma_outs.size(); ++i) {
      EXPECT_TRUE(SameBits(Down(tma_outs[i], out0.size()), dev))
          << "the producer-fed GEMMs, variant " << i + 1;
    }
    if (!gemm_path) {
      EXPECT_TRUE(SameBits(dev, def)) << "the default serves";
    }
    const std::vector<float> ref = CpuMoe(a, x, logits, out0, host_gate_up, host_down);
    // The routed sum alone (out - out0) against the CPU's and the default's.
    std::vector<float> dev_sum(dev.size()), def_sum(def.size()), ref_sum(ref.size()),
        other_sum(other.size());
    for (size_t i = 0; i < dev.size(); ++i) {
      dev_sum[i] = dev[i] - out0[i];
      def_sum[i] = def[i] - out0[i];
      ref_sum[i] = ref[i] - out0[i];
      other_sum[i] = other[i] - out0[i];
    }
    EXPECT_LT(Measured("moe prefill experts, the other grouped GEMM vs cpu, " + s.name,
                       RelErr(other_sum, ref_sum)),
              kBf16InputTolerance);
    std::printf("[ measured ] moe prefill experts, %s: the two grouped GEMMs give %s bits\n",
                s.name.c_str(), SameBits(dev, other) ? "the same" : "different");
    EXPECT_LT(Measured("moe prefill experts vs cpu, " + s.name, RelErr(dev_sum, ref_sum)),
              kBf16InputTolerance);
    // The promise is the tolerance; on the H200 the pinned vendor GEMM the default runs gave
    // the same bits (each output one chain of the same matrix instructions over k in order).
    EXPECT_LT(Measured("moe prefill experts vs the default, " + s.name, RelErr(dev_sum, def_sum)),
              kBf16InputTolerance);
    std::printf("[ measured ] moe prefill experts, %s: %s the default's bits\n", s.name.c_str(),
                SameBits(dev, def) ? "the same as" : "not");
    Measured("moe prefill default vs cpu, " + s.name, RelErr(def_sum, ref_sum));
  }
}

TEST_F(HipMoeExpertsTest, PrefillTokensRowsDoNotDependOnTheCallsOtherTokens) {
  // The 80B-like layer (a few picks an expert), and few experts (tiles of several warpgroups'
  // rows, experts over several tiles), on both grouped GEMMs (warpgroup blocks of three and of
  // two; 0: MoeGemmBf16).
  for (const int warpgroups : {3, 2, 0}) {
    gpu_->SetMoeGemmWgmmaForTest(warpgroups > 0);
    if (warpgroups > 0) gpu_->SetMoeGemmWgmmaWarpgroupsForTest(warpgroups);
    for (const MoeShape& s : {MoeShape{"80B-like layer", 256, 2048, 512, 512, 10, true, 0.0f},
                              MoeShape{"few experts", 256, 256, 64, 6, 3, false, 0.0f}}) {
      SCOPED_TRACE(absl::StrCat(s.name, ", ", warpgroups, " warpgroups (0: MoeGemmBf16)"));
      PrefillRowsDoNotDependOnOtherTokens(s);
    }
  }
  gpu_->SetMoeGemmWgmmaForTest(HipKernelBackendOptions().moe_gemm_wgmma);
  gpu_->SetMoeGemmWgmmaWarpgroupsForTest(HipKernelBackendOptions().moe_gemm_wgmma_warpgroups);
}

// HipKernelBackendOptions::moe_kernels: the eighth round's routing (a warp per token, fused with
// the sort for calls of at most 32 tokens), one-launch sorts and the column-split sum give the
// bits of the earlier kernels, on both device paths, at odd expert counts and top-k (one expert;
// every expert picked; 32 picks of 33; 1000 experts, the most a lane's registers hold), around
// the fused routing's 32 tokens, past the one-block sort's 1024 picks (and the offsets' batches
// of 16 chunks), an unaligned width (the scalar sum), and a token whose logits hold a NaN (no
// expert picked: its row unchanged).
TEST_F(HipMoeExpertsTest, WarpRoutingGivesMoeRoutesPicksOnHostileLogits) {
  // The warp routing (registers up to 512 experts, the fused routing and sort in blocks of 512
  // or 1024 threads) against MoeRoute's thread per token, ids and weights bit for bit, on rows
  // of logits with a NaN, all NaN, a +inf, all -inf, all equal, fewer finite logits than top_k
  // (the picks past them name no expert), and three rows whose exps are subnormal or zero for
  // most experts (the warp's division then differs most from the operator's instructions):
  // logits spread over about 240, one leader above ties 103-113 below it, and exps on both sides
  // of the smallest normal float. 12, 33, 512 and 600 experts, 1, 5, 12 and 20 tokens, top 1 to
  // 10, with and without renormalising.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    int experts, top_k, tokens;
  };
  for (const Case c : {Case{12, 5, 5}, Case{33, 10, 20}, Case{512, 10, 5}, Case{512, 8, 20},
                       Case{512, 10, 12}, Case{600, 10, 12}, Case{512, 1, 1}}) {
    for (const bool renormalise : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << c.experts << " experts, top " << c.top_k << ", " << c.tokens << " tokens"
                   << (renormalise ? ", renormalised" : ""));
      std::vector<float> logits =
          RandomFloats(static_cast<int64_t>(c.tokens) * c.experts, 501, -3.0f, 3.0f);
      const auto row = [&](int t) { return logits.begin() + static_cast<int64_t>(t) * c.experts; };
      const int hostile = std::min(c.tokens, 9);
      if (hostile > 1) row(1)[c.experts / 2] = nan;
      if (hostile > 2) std::fill(row(2), row(2) + c.experts, nan);
      if (hostile > 3) row(3)[c.experts - 1] = inf;
      if (hostile > 4) std::fill(row(4), row(4) + c.experts, -inf);
      if (hostile > 5) {
        // Finite logits at 3 experts only (ties among them), fewer than top_k > 3.
        std::fill(row(5), row(5) + c.experts, nan);
        row(5)[0] = 1.0f;
        row(5)[c.experts - 1] = 1.0f;
        row(5)[c.experts / 3] = -2.0f;
      }
      if (hostile > 6) {
        for (int j = 0; j < c.experts; ++j) row(6)[j] *= 40.0f;
      }
      if (hostile > 7) {
        for (int j = 0; j < c.experts; ++j)
          row(7)[j] = -103.0f - 0.25f * static_cast<float>(j % 40);
        row(7)[c.experts / 2] = 0.0f;
      }
      if (hostile > 8) {
        // exp(-87.3) is about the smallest normal float.
        for (int j = 0; j < c.experts; ++j)
          row(8)[j] = -87.3f + 0.01f * static_cast<float>(j % 9 - 4);
        row(8)[1] = 0.0f;
      }
      if (c.tokens == 1) std::fill(row(0), row(0) + c.experts, 0.5f);
      const int64_t picks = static_cast<int64_t>(c.tokens) * c.top_k;
      const hip::MoeSortSizes sizes = hip::MoeSortSizesFor(picks, c.experts, hip::MoeTileRows());
      DeviceBuffer dl = Up(logits);
      std::vector<std::vector<float>> ids_as_floats, weights;
      for (const hip::MoeRouting routing : {hip::MoeRouting::kWarp, hip::MoeRouting::kThread}) {
        DeviceBuffer ids = Up(std::vector<int32_t>(picks, -7)), w = Poisoned(picks);
        DeviceBuffer hist = Up(std::vector<int32_t>(std::max<int64_t>(sizes.hist_ints, 1)));
        DeviceBuffer base = Up(std::vector<int32_t>(std::max<int64_t>(sizes.hist_ints, 1)));
        DeviceBuffer rank = Up(std::vector<int32_t>(picks)),
                     offsets = Up(std::vector<int32_t>(c.experts));
        DeviceBuffer tiles = Up(std::vector<hip::MoeTile>(std::max<int64_t>(sizes.max_tiles, 1)));
        DeviceBuffer num_tiles = Up(std::vector<int32_t>(1));
        DeviceBuffer sorted = Up(std::vector<int32_t>(picks)),
                     slot = Up(std::vector<int32_t>(picks));
        const hip::MoeSortBuffers b{
            static_cast<int32_t*>(hist.data()),       static_cast<int32_t*>(base.data()),
            static_cast<int32_t*>(rank.data()),       static_cast<int32_t*>(offsets.data()),
            static_cast<hip::MoeTile*>(tiles.data()), static_cast<int32_t*>(num_tiles.data()),
            static_cast<int32_t*>(sorted.data()),     static_cast<int32_t*>(slot.data())};
        ASSERT_EQ(hip::MoeRouteAndSort(dl.floats(), c.experts, c.tokens, c.experts, c.top_k,
                                       renormalise, routing, hip::MoeTileRows(),
                                       static_cast<int32_t*>(ids.data()), w.floats(), b, nullptr),
                  hipSuccess);
        ASSERT_EQ(hipStreamSynchronize(nullptr), hipSuccess);
        ids_as_floats.push_back(Down(ids, picks));  // The ids' bits, compared as bits.
        weights.push_back(Down(w, picks));
      }
      EXPECT_TRUE(SameBits(ids_as_floats[0], ids_as_floats[1])) << "ids";
      EXPECT_TRUE(SameBits(weights[0], weights[1])) << "weights";
    }
  }
}

TEST_F(HipMoeExpertsTest, WarpRoutingDividesEveryExpAsTheOperatorDoes) {
  // The warp routing's division by a token's sum (moe_route::Divide: the same instructions for
  // every exp, none of the operator's calls for tiny ones) against the `/` operator, bit for bit,
  // for every float in [0, 1] and every NaN: sums at the ends of [1, 2048], powers of two, sums
  // just inside them, and random ones.
  std::vector<float> sums = {1.0f,       std::nextafter(1.0f, 2.0f),
                             1.5f,       2.0f,
                             3.0f,       7.0f,
                             512.0f,     std::nextafter(512.0f, 0.0f),
                             2048.0f,    std::nextafter(2048.0f, 0.0f),
                             3.14159274f};
  for (const float s : RandomFloats(12, 941, 1.0f, 2048.0f)) sums.push_back(s);
  for (const float s : RandomFloats(4, 942, 1.0f, 2.0f)) sums.push_back(s);
  DeviceBuffer count = Up(std::vector<uint64_t>(sums.size(), 0));
  auto* const counts = static_cast<unsigned long long*>(count.data());
  for (size_t i = 0; i < sums.size(); ++i) {
    ASSERT_EQ(hip::MoeRouteDivisionMismatches(sums[i], /*with_nans=*/i < 3, counts + i, nullptr),
              hipSuccess);
  }
  ASSERT_EQ(hipStreamSynchronize(nullptr), hipSuccess);
  std::vector<uint64_t> host(sums.size());
  ASSERT_TRUE(gpu_->Download(host.data(), count.data(), host.size() * sizeof(uint64_t)).ok());
  for (size_t i = 0; i < sums.size(); ++i) {
    EXPECT_EQ(host[i], 0u) << "sum " << sums[i];
  }
}

TEST_F(HipMoeExpertsTest, EighthRoundKernelsGiveTheEarlierKernelsBits) {
  const std::vector<MoeShape> shapes = {
      {"one expert, top 1", 5, 64, 32, 1, 1, false, 0.0f},
      {"three experts, all picked", 7, 72, 40, 3, 3, true, 0.0f},
      {"33 experts, top 32", 2, 64, 16, 33, 32, false, 0.0f},
      {"1000 experts, 32 tokens", 32, 128, 64, 1000, 8, false, 6.0f},
      {"1000 experts, 33 tokens", 33, 128, 64, 1000, 8, true, 0.0f},
      {"unaligned width, 1030 picks", 103, 70, 36, 12, 10, true, 0.0f},
      {"500 tokens over 1000 experts", 500, 64, 32, 1000, 10, false, 0.0f},
      {"80B-like layer, 1 token", 1, 2048, 512, 512, 10, true, 0.0f},
  };
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> earlier =
      HipKernelBackend::Create({.moe_kernels = 0});
  ASSERT_TRUE(earlier.ok()) << earlier.status();
  for (const MoeShape& s : shapes) {
    SCOPED_TRACE(s.name);
    const std::shared_ptr<const MoeBits> shared_bits = SharedRandomExperts(s, 301);
    const MoeBits& bits = *shared_bits;
    std::vector<DeviceBuffer> keep;
    std::vector<WeightMatrix> gate_up, down;
    UploadExperts(s, bits, keep, gate_up, down);
    std::vector<float> x = RandomFloats(s.tokens * s.hidden, 303);
    std::vector<float> logits = RandomFloats(s.tokens * s.experts, 305, -3.0f, 3.0f);
    if (s.hot_bias != 0.0f) {
      for (int64_t t = 0; t < s.tokens; ++t) {
        logits[t * s.experts + 1] += s.hot_bias;
        logits[t * s.experts + 5] += s.hot_bias;
      }
      std::fill(logits.begin(), logits.begin() + s.experts, 0.25f);  // Ties.
      if (s.tokens > 2) logits[2 * s.experts + 7] = std::numeric_limits<float>::quiet_NaN();
    }
    const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 307);
    DeviceBuffer dx = Up(x), dl = Up(logits);
    for (const bool row_invariant : {true, false}) {
      SCOPED_TRACE(row_invariant ? "decode path" : "prefill path");
      DeviceBuffer new_out = Up(out0), old_out = Up(out0), def_out = Up(out0);
      MoeExpertsArgs a =
          ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, row_invariant, s.top_k > 1);
      ScratchArena scratch(gpu_->memory());
      a.out = new_out.floats();
      ASSERT_TRUE(gpu_->MoeExperts(a, scratch).ok()) << gpu_->status();
      // The default refuses picks that name no expert: no comparison with it for the NaN.
      const bool nan_token = s.hot_bias != 0.0f && s.tokens > 2;
      if (!nan_token) {
        a.out = def_out.floats();
        ASSERT_TRUE(gpu_->KernelBackend::MoeExperts(a, scratch).ok()) << gpu_->status();
      }
      ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
      {
        ScratchArena other(earlier->get()->memory());
        a.out = old_out.floats();
        ASSERT_TRUE((*earlier)->MoeExperts(a, other).ok()) << (*earlier)->status();
        ASSERT_TRUE((*earlier)->Synchronize().ok()) << (*earlier)->status();
      }
      const std::vector<float> now = Down(new_out, out0.size());
      EXPECT_TRUE(SameBits(now, Down(old_out, out0.size()))) << "moe_kernels 1 against 0";
      if (row_invariant && !nan_token) {
        EXPECT_TRUE(SameBits(now, Down(def_out, out0.size()))) << "against the default";
      }
      if (nan_token) {
        EXPECT_TRUE(
            SameBits(std::vector<float>(now.begin() + 2 * s.hidden, now.begin() + 3 * s.hidden),
                     std::vector<float>(out0.begin() + 2 * s.hidden, out0.begin() + 3 * s.hidden)))
            << "the NaN token";
      }
    }
  }
}

}  // namespace
}  // namespace cairn::infer::testing
