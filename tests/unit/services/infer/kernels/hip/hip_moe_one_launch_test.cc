// The MoE decode layer's one launch (hip::MoeLayerStream, moe_stream_products 3 to 5) against
// the grouped launches and routing it replaces, bit for bit: its routing of hostile logits and
// near ties, a grid the device cannot hold at once, its phase stamps, and its loads taken from
// counters (moe_one_launch_static_sixteenths). The router product inside it and the other
// decode paths: hip_moe_experts_test.cc. Skips without a device.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/scratch_arena.h"
#include "tests/unit/services/infer/kernels/hip/hip_kernel_test_fixture.h"
#include "tests/unit/services/infer/kernels/hip/hip_moe_test_fixture.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer::testing {
namespace {

TEST_F(HipMoeExpertsTest, TheOneLaunchRoutesHostileLogitsAsTheRoutingLaunchDoes) {
  // moe_stream_products 5 (the one launch routing, sorting and summing the call itself) and 3
  // (the products only, the routing and the sum in launches of their own) against the grouped
  // launches (0), out and the residual bit for bit, on router logits with a NaN, all NaN (no
  // picks at all), a +inf, all -inf, all equal, and fewer finite logits than top_k (picks that
  // name no expert): the shared expert folded in, its gate and the residual in the sum. Mode
  // 5 twice: the routing's unrolled code and its compact code (moe_compact_route).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::unique_ptr<HipKernelBackend>> backends;
  for (const int mode : {0, 3, 5, 6}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> b = HipKernelBackend::Create(
        {.moe_stream_products = mode == 6 ? 5 : mode, .moe_compact_route = mode == 6});
    ASSERT_TRUE(b.ok()) << b.status();
    backends.push_back(*std::move(b));
  }
  for (const MoeShape& s : {MoeShape{"512 experts", 7, 256, 64, 512, 10, false, 0.0f},
                            MoeShape{"12 experts", 7, 256, 64, 12, 5, true, 0.0f},
                            MoeShape{"one token", 1, 256, 64, 512, 8, false, 0.0f}}) {
    SCOPED_TRACE(s.name);
    std::vector<DeviceBuffer> keep;
    std::vector<WeightMatrix> gate_up, down, shared_gate_up, shared_down;
    UploadWithShared(s, 601, keep, gate_up, down, shared_gate_up, shared_down);
    std::vector<float> logits = RandomFloats(s.tokens * s.experts, 603, -3.0f, 3.0f);
    const auto row = [&](int64_t t) { return logits.begin() + t * s.experts; };
    if (s.tokens > 1) {
      row(1)[s.experts / 2] = nan;
      std::fill(row(2), row(2) + s.experts, nan);
      row(3)[s.experts - 1] = inf;
      std::fill(row(4), row(4) + s.experts, -inf);
      std::fill(row(5), row(5) + s.experts, nan);  // Three finite logits, two of them tied.
      row(5)[0] = 1.0f;
      row(5)[s.experts - 1] = 1.0f;
      row(5)[s.experts / 3] = -2.0f;
      std::fill(row(6), row(6) + s.experts, 0.5f);
    } else {
      std::fill(row(0), row(0) + s.experts, nan);  // A call without a single pick.
    }
    const std::vector<float> x = RandomFloats(s.tokens * s.hidden, 604);
    const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 605);
    const std::vector<float> h0 = RandomFloats(s.tokens * s.hidden, 606);
    const std::vector<float> gate = RandomFloats(s.tokens, 607, -4.0f, 4.0f);
    DeviceBuffer dx = Up(x), dl = Up(logits), dg = Up(gate);
    MoeExpertsArgs a = WithSharedExpert(ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, true),
                                        s, shared_gate_up, shared_down);
    a.out_gate = dg.floats();
    std::vector<std::vector<float>> outs, hs;
    RunOnEach(backends, a, out0, h0, &outs, &hs);
    ASSERT_EQ(outs.size(), backends.size());
    for (size_t i = 1; i < outs.size(); ++i) {
      EXPECT_TRUE(SameBits(outs[0], outs[i])) << "out, way " << i;
      EXPECT_TRUE(SameBits(hs[0], hs[i])) << "residual, way " << i;
    }
    EXPECT_FALSE(SameBits(hs[0], h0));  // It did add.
  }
}

TEST_F(HipMoeExpertsTest, TheOneLaunchRoutesNearTiesAsTheRoutingLaunchDoes) {
  // Decode calls of one to four tokens, which the one launch routes itself (moe_stream_products
  // 5), against the grouped launches' routing (0), out and the residual bit for bit. The
  // logits at the picks' boundary come in near ties (adjacent floats, equal values), whose exps
  // or probabilities may round together, and hostile rows (a NaN, all equal, a +inf); with and
  // without renormalising, top 1, 8 and 10 of 512 experts, and a top 5 of 12. The one launch
  // twice: the routing's unrolled code and its compact code (moe_compact_route).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::unique_ptr<HipKernelBackend>> backends;
  for (const int mode : {0, 5, 6}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> b = HipKernelBackend::Create(
        {.moe_stream_products = mode == 6 ? 5 : mode, .moe_compact_route = mode == 6});
    ASSERT_TRUE(b.ok()) << b.status();
    backends.push_back(*std::move(b));
  }
  std::mt19937 rng(611);
  int call = 0;
  const int64_t one_launch_before = hip::MoeLayerStreamLaunches();
  for (const MoeShape& base : {MoeShape{"512 experts, top 10", 4, 256, 64, 512, 10, false, 0.0f},
                               MoeShape{"512 experts, top 8", 4, 256, 64, 512, 8, false, 0.0f},
                               MoeShape{"512 experts, top 1", 4, 256, 64, 512, 1, false, 0.0f},
                               MoeShape{"12 experts, top 5", 4, 256, 64, 12, 5, true, 0.0f}}) {
    std::vector<DeviceBuffer> keep;
    std::vector<WeightMatrix> gate_up, down, shared_gate_up, shared_down;
    UploadWithShared(base, 613, keep, gate_up, down, shared_gate_up, shared_down);
    for (int trial = 0; trial < 24; ++trial, ++call) {
      MoeShape s = base;
      s.tokens = 1 + trial % 4;
      const bool renormalise = trial % 8 < 4;
      SCOPED_TRACE(::testing::Message() << s.name << ", trial " << trial << ", " << s.tokens
                                        << " tokens" << (renormalise ? ", renormalised" : ""));
      std::vector<float> logits = RandomFloats(s.tokens * s.experts, 620 + call, -3.0f, 3.0f);
      for (int64_t t = 0; t < s.tokens; ++t) {
        float* row = logits.data() + t * s.experts;
        std::vector<int> order(static_cast<size_t>(s.experts));
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
        const int kth = order[static_cast<size_t>(s.top_k - 1)];
        switch ((trial + t) % 6) {
          case 0:  // Two to four logits at the boundary, each the float below the one before.
          case 1:
            for (int i = 0; i < 1 + (trial + t) % 3 && s.top_k + i < s.experts; ++i) {
              const int at = order[static_cast<size_t>(s.top_k + i)];
              row[at] = std::nextafter(row[order[static_cast<size_t>(s.top_k + i - 1)]], -inf);
            }
            break;
          case 2:  // The boundary's logit also at the experts just below and above it.
            if (s.top_k < s.experts) row[order[static_cast<size_t>(s.top_k)]] = row[kth];
            if (s.top_k > 1) row[order[static_cast<size_t>(s.top_k - 2)]] = row[kth];
            break;
          case 3: {  // The float above the boundary's logit at a random other expert.
            const int at = static_cast<int>(rng() % static_cast<uint32_t>(s.experts));
            if (at != kth) row[at] = std::nextafter(row[kth], inf);
            break;
          }
          case 4:  // A hostile row: a NaN, then all equal, then a +inf.
            if (trial % 3 == 0) row[rng() % static_cast<uint32_t>(s.experts)] = nan;
            if (trial % 3 == 1) std::fill(row, row + s.experts, 0.25f);
            if (trial % 3 == 2) row[rng() % static_cast<uint32_t>(s.experts)] = inf;
            break;
          default:
            break;
        }
      }
      const std::vector<float> x = RandomFloats(s.tokens * s.hidden, 640 + call);
      const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 660 + call);
      const std::vector<float> h0 = RandomFloats(s.tokens * s.hidden, 680 + call);
      const std::vector<float> gate = RandomFloats(s.tokens, 700 + call, -4.0f, 4.0f);
      DeviceBuffer dx = Up(x), dl = Up(logits), dg = Up(gate);
      MoeExpertsArgs a =
          WithSharedExpert(ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, true, renormalise),
                           s, shared_gate_up, shared_down);
      a.out_gate = dg.floats();
      std::vector<std::vector<float>> outs, hs;
      RunOnEach(backends, a, out0, h0, &outs, &hs);
      ASSERT_EQ(outs.size(), 3u);
      for (size_t i = 1; i < outs.size(); ++i) {
        EXPECT_TRUE(SameBits(outs[0], outs[i])) << "out, way " << i;
        EXPECT_TRUE(SameBits(hs[0], hs[i])) << "residual, way " << i;
      }
    }
  }
  // The one launch did route these calls itself, both ways.
  EXPECT_GE(hip::MoeLayerStreamLaunches() - one_launch_before, 2 * 4 * 24);
}

TEST_F(HipMoeExpertsTest, AOneLaunchTheDeviceCannotHoldAtOnceTakesTheGroupedLaunches) {
  // The one launch's blocks wait for one another; launched cooperatively, a device that cannot
  // hold its grid at once (here a backend counting twice the multiprocessors there are, as a
  // process under MPS given fewer might) refuses it, and the call takes the grouped launches:
  // their bits, no one launch run, no error.
  int multiprocessors = 0;
  ASSERT_EQ(hipDeviceGetAttribute(&multiprocessors, hipDeviceAttributeMultiprocessorCount, 0),
            hipSuccess);
  std::vector<std::unique_ptr<HipKernelBackend>> backends;
  for (const int mode : {0, 5}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> b =
        HipKernelBackend::Create({.moe_stream_products = mode, .moe_one_launch_cooperative = true});
    ASSERT_TRUE(b.ok()) << b.status();
    backends.push_back(*std::move(b));
  }
  backends[1]->SetMultiprocessorsForTest(2 * multiprocessors);
  const MoeShape s{"80B-like layer, 4 slots", 4, 2048, 512, 512, 10, false, 0.0f};
  std::vector<DeviceBuffer> keep;
  std::vector<WeightMatrix> gate_up, down, shared_gate_up, shared_down;
  UploadWithShared(s, 611, keep, gate_up, down, shared_gate_up, shared_down);
  const std::vector<float> logits = RouterLogits(s, 612, /*tied_pairs=*/false);
  const std::vector<float> x = RandomFloats(s.tokens * s.hidden, 613);
  const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 614);
  DeviceBuffer dx = Up(x), dl = Up(logits);
  MoeExpertsArgs a = WithSharedExpert(ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, true),
                                      s, shared_gate_up, shared_down);
  std::vector<std::vector<float>> outs;
  const int64_t one_launch_before = hip::MoeLayerStreamLaunches();
  for (const std::unique_ptr<HipKernelBackend>& b : backends) {
    DeviceBuffer out = Up(out0);
    a.out = out.floats();
    ScratchArena scratch(b->memory());
    ASSERT_TRUE(b->MoeExperts(a, scratch).ok()) << b->status();
    ASSERT_TRUE(b->Synchronize().ok()) << b->status();
    outs.push_back(Down(out, out0.size()));
  }
  EXPECT_TRUE(SameBits(outs[0], outs[1]));
  EXPECT_FALSE(SameBits(outs[0], out0));  // It did write.
  EXPECT_EQ(hip::MoeLayerStreamLaunches(), one_launch_before);
}

TEST_F(HipMoeExpertsTest, TheOneLaunchStampsItsPhasesInOrderAndKeepsItsBits) {
  // The benchmark's phase stamps (HipKernelBackend::SetMoeLayerTraceForTest, --moe-trace): one
  // and four tokens of the 80B-like layer, one launch stamped each, then one token routed twice
  // more first (route_twice), then a call past the buffer's launches stamping nothing. Each block
  // stamps its entry, the wait, the routing, both products, the sum's barrier, the sum and the
  // producer's last stage, in that order on the device's clock (the producer's after the
  // routing; the extra routings' between the wait and the routing, and only where asked for;
  // the routing's own two stamps between the wait and the sort's), and a stamped launch gives
  // the bits of one that is not. Both with the routing's unrolled code and with its compact
  // code (moe_compact_route, whose extra routings are turns of the routing's own loop).
  for (const bool compact : {false, true}) {
    SCOPED_TRACE(compact ? "compact routing" : "unrolled routing");
    constexpr int kPoints = hip::kMoeLayerTracePoints;
    std::vector<std::unique_ptr<HipKernelBackend>> backends;
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<std::unique_ptr<HipKernelBackend>> b =
          HipKernelBackend::Create({.moe_stream_products = 5, .moe_compact_route = compact});
      ASSERT_TRUE(b.ok()) << b.status();
      backends.push_back(*std::move(b));
    }
    HipKernelBackend& traced = *backends[1];
    const int blocks = traced.MultiprocessorsForTest();
    ASSERT_GT(blocks, 0);
    DeviceBuffer stamps = Up(std::vector<uint64_t>(static_cast<size_t>(3 * blocks * kPoints), 0));
    auto* const stamp_data = static_cast<uint64_t*>(stamps.data());
    traced.SetMoeLayerTraceForTest(stamp_data, 2);
    const MoeShape layer{"80B-like layer", 4, 2048, 512, 512, 10, false, 0.0f};
    std::vector<DeviceBuffer> keep;
    std::vector<WeightMatrix> gate_up, down, shared_gate_up, shared_down;
    UploadWithShared(layer, 621, keep, gate_up, down, shared_gate_up, shared_down);
    for (const int64_t tokens : {1, 4, 1, 1}) {
      MoeShape s = layer;
      s.tokens = tokens;
      SCOPED_TRACE(::testing::Message() << tokens << " tokens");
      if (traced.MoeLayerTracedForTest() == 2) {  // The third call: one launch, routing twice more.
        traced.SetMoeLayerTraceForTest(stamp_data + 2 * blocks * kPoints, 1, /*route_twice=*/true);
      }
      const std::vector<float> logits = RouterLogits(s, 622, /*tied_pairs=*/false);
      const std::vector<float> x = RandomFloats(s.tokens * s.hidden, 623);
      const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 624);
      const std::vector<float> h0 = RandomFloats(s.tokens * s.hidden, 625);
      DeviceBuffer dx = Up(x), dl = Up(logits);
      MoeExpertsArgs a =
          WithSharedExpert(ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, true), s,
                           shared_gate_up, shared_down);
      std::vector<std::vector<float>> outs, hs;
      RunOnEach(backends, a, out0, h0, &outs, &hs);
      ASSERT_EQ(outs.size(), 2u);
      EXPECT_TRUE(SameBits(outs[0], outs[1])) << "out";
      EXPECT_TRUE(SameBits(hs[0], hs[1])) << "residual";
    }
    EXPECT_EQ(traced.MoeLayerTracedForTest(), 1);  // The third call's, the fourth past it.
    std::vector<uint64_t> host(static_cast<size_t>(3 * blocks * kPoints));
    ASSERT_TRUE(traced.memory()->Download(host.data(), stamps.data(), host.size() * 8).ok());
    for (int l = 0; l < 3; ++l) {
      for (int b = 0; b < blocks; ++b) {
        SCOPED_TRACE(::testing::Message() << "launch " << l << ", block " << b);
        const uint64_t* t = host.data() + (static_cast<int64_t>(l) * blocks + b) * kPoints;
        for (const int p : {0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12})
          EXPECT_NE(t[p], 0u) << "point " << p;
        for (int p = 1; p < 8; ++p) EXPECT_LE(t[p - 1], t[p]) << "point " << p;
        EXPECT_LE(t[2], t[8]);
        // The routing proper: warp 0's tokens, then every warp's, before the sort ends.
        EXPECT_LE(t[1], t[11]);
        EXPECT_LE(t[11], t[12]);
        EXPECT_LE(t[12], t[2]);
        if (l < 2) {
          EXPECT_EQ(t[9], 0u);
          EXPECT_EQ(t[10], 0u);
        } else if (b == 0) {  // Warp 0 of every block routes twice more; block 0's checked.
          EXPECT_LE(t[1], t[9]);
          EXPECT_LE(t[9], t[10]);
          EXPECT_LE(t[10], t[11]);
        }
      }
    }
  }
}

TEST_F(HipMoeExpertsTest, TheOneLaunchTakingLoadsFromCountersGivesTheBitsOfFixedShares) {
  // moe_one_launch_static_sixteenths below 16: each product's loads past the blocks' fixed
  // shares taken from a counter by whichever block is ready first (none fixed at 0), against
  // fixed shares only (16). One, four and eight tokens of the 80B-like layer and a small layer
  // (fewer loads than blocks), with and without the shared expert, both input roundings: out
  // and the residual bit for bit. Where the one launch took the call, the backends below 16
  // took loads from their counters (at least one a block's producer a product) and 16 none.
  const std::vector<MoeShape> shapes = {
      {"80B-like layer, one token", 1, 2048, 512, 512, 10, true, 0.0f},
      {"80B-like layer, 4 slots", 4, 2048, 512, 512, 10, false, 0.0f},
      {"80B-like layer, 8 slots, hot experts", 8, 2048, 512, 512, 10, false, 8.0f},
      {"small layer", 3, 256, 64, 32, 4, false, 0.0f},
  };
  const std::vector<int> sixteenths = {16, 12, 8, 1, 0};
  for (const bool bf16_inputs : {true, false}) {
    std::vector<std::unique_ptr<HipKernelBackend>> backends;
    for (const int v : sixteenths) {
      absl::StatusOr<std::unique_ptr<HipKernelBackend>> b = HipKernelBackend::Create(
          {.mma_rows_bf16_inputs = bf16_inputs, .moe_one_launch_static_sixteenths = v});
      ASSERT_TRUE(b.ok()) << b.status();
      backends.push_back(*std::move(b));
    }
    const int blocks = backends[0]->MultiprocessorsForTest();
    for (const MoeShape& s : shapes) {
      for (const bool with_shared : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << s.name << (bf16_inputs ? ", bf16 inputs" : ", exact inputs")
                     << (with_shared ? ", shared expert" : ""));
        std::vector<DeviceBuffer> keep;
        std::vector<WeightMatrix> gate_up, down, shared_gate_up, shared_down;
        UploadWithShared(s, 631, keep, gate_up, down, shared_gate_up, shared_down);
        const std::vector<float> logits = RouterLogits(s, 633, /*tied_pairs=*/false);
        const std::vector<float> x = RandomFloats(s.tokens * s.hidden, 635);
        const std::vector<float> out0 = RandomFloats(s.tokens * s.hidden, 637);
        const std::vector<float> h0 = RandomFloats(s.tokens * s.hidden, 639);
        DeviceBuffer dx = Up(x), dl = Up(logits);
        MoeExpertsArgs a = ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, true);
        if (with_shared) a = WithSharedExpert(a, s, shared_gate_up, shared_down);
        std::vector<std::vector<float>> outs, hs;
        for (size_t i = 0; i < backends.size(); ++i) {
          HipKernelBackend& be = *backends[i];
          // Twice: the counters' two arrays.
          for (int call = 0; call < 2; ++call) {
            SCOPED_TRACE(::testing::Message() << sixteenths[i] << " sixteenths, call " << call);
            DeviceBuffer out = Up(out0), h = Up(h0);
            a.out = out.floats();
            a.residual = h.floats();
            const int64_t launches = hip::MoeLayerStreamLaunches();
            ScratchArena scratch(be.memory());
            ASSERT_TRUE(be.MoeExperts(a, scratch).ok()) << be.status();
            ASSERT_TRUE(be.Synchronize().ok()) << be.status();
            const bool one_launch = hip::MoeLayerStreamLaunches() > launches;
            EXPECT_EQ(one_launch, hip::MoeLayerStreamSupported());
            const absl::StatusOr<int64_t> taken = be.MoeOneLaunchTakenLoadsForTest();
            ASSERT_TRUE(taken.ok()) << taken.status();
            if (one_launch && sixteenths[i] < 16) {
              EXPECT_GE(*taken, 2 * blocks);
            } else if (one_launch) {
              EXPECT_EQ(*taken, 0);
            }
            outs.push_back(Down(out, out0.size()));
            hs.push_back(Down(h, h0.size()));
          }
        }
        for (size_t i = 1; i < outs.size(); ++i) {
          SCOPED_TRACE(::testing::Message() << "run " << i);
          EXPECT_TRUE(SameBits(outs[i], outs[0])) << "out";
          EXPECT_TRUE(SameBits(hs[i], hs[0])) << "residual";
        }
        EXPECT_FALSE(SameBits(hs[0], h0));  // It did add.
      }
    }
  }
  // Outside 0 to 16: refused.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> bad =
      HipKernelBackend::Create({.moe_one_launch_static_sixteenths = 17});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cairn::infer::testing
