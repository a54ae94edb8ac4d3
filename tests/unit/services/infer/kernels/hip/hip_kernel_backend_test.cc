// Each HIP kernel against the CPU reference backend on random inputs of several shapes (odd
// sizes, GQA ratios, one token, lengths crossing the chunk size, long contexts), plus
// determinism (the same inputs twice give the same bits) and batch invariance. Skips without a
// device.
//
// The attention's tests are in hip_attention_test.cc, its inputs' (RoPE, the append, the q / k
// norms in one launch) in hip_attention_inputs_test.cc, the delta rule's in
// hip_gated_delta_test.cc.
//
// Tolerances are relative to the largest magnitude of the reference output: kernels and the CPU
// reduce in different orders (and the GPU contracts to fused multiply-adds), so results agree
// to a few fp32 ulps times the reduction depth, not bit for bit.

#include "services/infer/kernels/hip/hip_kernel_backend.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/kernels/hip/hip_kernel_test_fixture.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer {
namespace {

using testing::HipKernelBackendTest;
using testing::kReductionTolerance;
using testing::kTightTolerance;
using testing::Measured;
using testing::RelErr;
using testing::SameBits;

TEST(HipKernelBackendSplitTest, CopiesAreCutOnlyAtBoundariesInsideTheRange) {
  const uintptr_t base = 4096;
  const std::vector<uintptr_t> boundaries = {0, 4096, 5000, 6000, 6000, 9000};

  const auto pieces = HipKernelBackend::SplitAtBoundaries(base, 3000, boundaries);

  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], std::make_pair(int64_t{0}, int64_t{904}));
  EXPECT_EQ(pieces[1], std::make_pair(int64_t{904}, int64_t{1000}));
  EXPECT_EQ(pieces[2], std::make_pair(int64_t{1904}, int64_t{1096}));
}

TEST(HipKernelBackendCreateTest, BadOptionsAreInvalidArguments) {
  EXPECT_THAT(HipKernelBackend::Create({.attention_split_keys = 100}).status(),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(HipKernelBackend::Create({.delta_segment_tokens = 0}).status(),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  for (const int warpgroups : {0, 1, 4}) {
    HipKernelBackendOptions o;
    o.moe_gemm_wgmma_warpgroups = warpgroups;
    EXPECT_THAT(HipKernelBackend::Create(o).status(),
                cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(HipKernelBackend::Create({.moe_product_waves = -1}).status(),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  for (const int mode : {-1, 6}) {
    EXPECT_THAT(HipKernelBackend::Create({.moe_stream_products = mode}).status(),
                cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(HipKernelBackend::Create({.moe_one_launch_max_tokens = -1}).status(),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(HipKernelBackendCreateTest, TheFactoryGivesAKernelBackendWhereThereIsADevice) {
  absl::StatusOr<std::unique_ptr<KernelBackend>> b = CreateHipKernelBackend({});

  if (HipDeviceCount() == 0) {
    EXPECT_THAT(b.status(), cairn::testing::StatusIs(absl::StatusCode::kUnavailable));
  } else {
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->name(), "hip-bf16");
  }
}

TEST(HipKernelBackendCreateTest, AMissingDeviceIsUnavailable) {
  EXPECT_THAT(HipKernelBackend::Create({.device = 4096}).status(),
              cairn::testing::StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(HipKernelBackendTest, MatMulTransposedMatchesCpu) {
  struct Shape {
    int64_t m, k, n;
  };
  for (const Shape s : {Shape{1, 64, 33}, Shape{37, 70, 129}, Shape{300, 1024, 520}}) {
    SCOPED_TRACE(::testing::Message() << "m=" << s.m << " k=" << s.k << " n=" << s.n);
    const std::vector<float> x = RandomFloats(s.m * s.k, 1), w = RandomFloats(s.n * s.k, 2);
    const std::vector<float> y0 = RandomFloats(s.m * s.n, 3);
    std::vector<float> ref = y0;
    cpu_->MatMulTransposed(x.data(), s.m, s.k, s.k, w.data(), s.n, ref.data(), s.n, true);
    DeviceBuffer dx = Up(x), dw = Up(w), dy = Up(y0);

    gpu_->MatMulTransposed(dx.floats(), s.m, s.k, s.k, dw.floats(), s.n, dy.floats(), s.n, true);
    const std::vector<float> got = Down(dy, y0.size());

    ASSERT_TRUE(gpu_->Synchronize().ok());
    EXPECT_LT(Measured(::testing::PrintToString(std::vector<int64_t>{s.m, s.k, s.n}) + " matmul",
                       RelErr(got, ref)),
              kReductionTolerance);
  }
}

TEST_F(HipKernelBackendTest, MatMulRowsMatchesCpuAndNoRowDependsOnTheOthers) {
  // k = 70 takes the scalar path (rows not 16-byte aligned), k = 4096 the vector path.
  for (const int64_t k : {int64_t{70}, int64_t{4096}}) {
    SCOPED_TRACE(::testing::Message() << "k=" << k);
    const int64_t m = 13, n = 203;
    const std::vector<float> x = RandomFloats(m * k, 4), w = RandomFloats(n * k, 5);
    std::vector<float> ref(m * n);
    cpu_->MatMulTransposed(x.data(), m, k, k, w.data(), n, ref.data(), n, false);
    DeviceBuffer dx = Up(x), dw = Up(w), all = Poisoned(m * n), all2 = Poisoned(m * n);

    gpu_->MatMulRows(dx.floats(), m, k, k, dw.floats(), n, all.floats(), n, false);
    gpu_->MatMulRows(dx.floats(), m, k, k, dw.floats(), n, all2.floats(), n, false);
    const std::vector<float> together = Down(all, m * n);

    ASSERT_TRUE(gpu_->Synchronize().ok());
    EXPECT_LT(Measured("matmul rows k=" + std::to_string(k), RelErr(together, ref)),
              kReductionTolerance);
    EXPECT_TRUE(SameBits(together, Down(all2, m * n)));
    // Each row alone, and rows 3..7 as a batch of 5, give the same bits as the batch of 13.
    for (int64_t r = 0; r < m; ++r) {
      DeviceBuffer one = Poisoned(n);
      gpu_->MatMulRows(dx.floats() + r * k, 1, k, k, dw.floats(), n, one.floats(), n, false);
      const std::vector<float> alone = Down(one, n);
      EXPECT_TRUE(SameBits(
          alone, std::vector<float>(together.begin() + r * n, together.begin() + (r + 1) * n)))
          << "row " << r;
    }
    DeviceBuffer five = Poisoned(5 * n);
    gpu_->MatMulRows(dx.floats() + 3 * k, 5, k, k, dw.floats(), n, five.floats(), n, false);
    EXPECT_TRUE(SameBits(Down(five, 5 * n),
                         std::vector<float>(together.begin() + 3 * n, together.begin() + 8 * n)));
  }
}

TEST_F(HipKernelBackendTest, NormsMatchCpu) {
  for (const int64_t dim : {int64_t{1}, int64_t{7}, int64_t{256}, int64_t{2049}}) {
    SCOPED_TRACE(::testing::Message() << "dim=" << dim);
    const int64_t rows = 37;
    const std::vector<float> x = RandomFloats(rows * dim, 6, -3.0f, 3.0f),
                             z = RandomFloats(rows * dim, 7);
    const std::vector<float> w = RandomFloats(dim, 8);
    std::vector<float> rms(rows * dim), rms_zc(rows * dim), gated(rows * dim), l2 = x;
    cpu_->RmsNorm(x.data(), rows, dim, w.data(), 1e-6f, false, rms.data());
    cpu_->RmsNorm(x.data(), rows, dim, w.data(), 1e-6f, true, rms_zc.data());
    cpu_->GatedRmsNorm(x.data(), z.data(), rows, dim, w.data(), 1e-6f, gated.data());
    cpu_->L2Normalize(l2.data(), rows, dim, 1e-6f, 0.5f);
    DeviceBuffer dx = Up(x), dz = Up(z), dw = Up(w), d1 = Poisoned(x.size()),
                 d2 = Poisoned(x.size()), d3 = Poisoned(x.size()), d4 = Up(x);

    gpu_->RmsNorm(dx.floats(), rows, dim, dw.floats(), 1e-6f, false, d1.floats());
    gpu_->RmsNorm(dx.floats(), rows, dim, dw.floats(), 1e-6f, true, d2.floats());
    gpu_->GatedRmsNorm(dx.floats(), dz.floats(), rows, dim, dw.floats(), 1e-6f, d3.floats());
    gpu_->L2Normalize(d4.floats(), rows, dim, 1e-6f, 0.5f);

    ASSERT_TRUE(gpu_->Synchronize().ok());
    const std::string dims = "dim=" + std::to_string(dim);
    EXPECT_LT(Measured("rmsnorm " + dims, RelErr(Down(d1, x.size()), rms)), kTightTolerance);
    EXPECT_LT(Measured("rmsnorm zero-centred " + dims, RelErr(Down(d2, x.size()), rms_zc)),
              kTightTolerance);
    EXPECT_LT(Measured("gated rmsnorm " + dims, RelErr(Down(d3, x.size()), gated)),
              kTightTolerance);
    EXPECT_LT(Measured("l2 normalize " + dims, RelErr(Down(d4, x.size()), l2)), kTightTolerance);
  }
}

TEST_F(HipKernelBackendTest, WarpRowNormsGiveTheBitsOfTheBlockKernels) {
  // warp_row_norms (the default) against a block of 256 threads per row, at head sizes and
  // around the warp kernels' limit (257 takes the block kernel in both), 1000 rows.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> block =
      HipKernelBackend::Create({.warp_row_norms = false});
  ASSERT_TRUE(block.ok()) << block.status();
  for (const int64_t dim :
       {int64_t{1}, int64_t{7}, int64_t{128}, int64_t{200}, int64_t{256}, int64_t{257}}) {
    SCOPED_TRACE(::testing::Message() << "dim=" << dim);
    const int64_t rows = 1000;
    const std::vector<float> x = RandomFloats(rows * dim, 36, -3.0f, 3.0f),
                             z = RandomFloats(rows * dim, 37, -4.0f, 4.0f);
    const std::vector<float> w = RandomFloats(dim, 38);
    DeviceBuffer dx = Up(x), dz = Up(z), dw = Up(w);
    std::vector<std::vector<float>> outs[2];
    HipKernelBackend* backends[2] = {gpu_.get(), block->get()};
    for (int b = 0; b < 2; ++b) {
      DeviceBuffer d1 = Poisoned(x.size()), d2 = Poisoned(x.size()), d3 = Poisoned(x.size()),
                   d4 = Up(x);
      backends[b]->RmsNorm(dx.floats(), rows, dim, dw.floats(), 1e-6f, false, d1.floats());
      backends[b]->RmsNorm(dx.floats(), rows, dim, dw.floats(), 1e-6f, true, d2.floats());
      backends[b]->GatedRmsNorm(dx.floats(), dz.floats(), rows, dim, dw.floats(), 1e-6f,
                                d3.floats());
      backends[b]->L2Normalize(d4.floats(), rows, dim, 1e-6f, 0.5f);
      ASSERT_TRUE(backends[b]->Synchronize().ok()) << backends[b]->status();
      for (const DeviceBuffer* d : {&d1, &d2, &d3, &d4}) outs[b].push_back(Down(*d, x.size()));
    }
    for (size_t i = 0; i < outs[0].size(); ++i) {
      EXPECT_TRUE(SameBits(outs[0][i], outs[1][i])) << "norm " << i;
    }
  }
}

TEST_F(HipKernelBackendTest, L2NormalizeTwoGivesTheBitsOfOneCallPerToken) {
  // Both kernels (warp rows and a block a row), a width past the warp kernels' limit, token rows
  // packed and apart (the padding between them untouched).
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> block =
      HipKernelBackend::Create({.warp_row_norms = false});
  ASSERT_TRUE(block.ok()) << block.status();
  const int64_t tokens = 100;
  const int heads = 3;
  for (const int64_t dim : {int64_t{1}, int64_t{128}, int64_t{257}}) {
    for (const int64_t pad : {int64_t{0}, int64_t{5}}) {
      SCOPED_TRACE(::testing::Message() << "dim=" << dim << " pad=" << pad);
      const int64_t ld = heads * dim + pad;
      const std::vector<float> a = RandomFloats(tokens * ld, 40, -3.0f, 3.0f),
                               b = RandomFloats(tokens * ld, 41, -5.0f, 5.0f);
      for (HipKernelBackend* backend : {gpu_.get(), block->get()}) {
        DeviceBuffer a1 = Up(a), b1 = Up(b), a2 = Up(a), b2 = Up(b);
        backend->L2NormalizeTwo(a1.floats(), 0.125f, b1.floats(), 1.0f, tokens, heads, dim, ld,
                                1e-6f);
        for (int64_t t = 0; t < tokens; ++t) {
          backend->L2Normalize(a2.floats() + t * ld, heads, dim, 1e-6f, 0.125f);
          backend->L2Normalize(b2.floats() + t * ld, heads, dim, 1e-6f, 1.0f);
        }
        ASSERT_TRUE(backend->Synchronize().ok()) << backend->status();
        EXPECT_TRUE(SameBits(Down(a1, a.size()), Down(a2, a.size())));
        EXPECT_TRUE(SameBits(Down(b1, b.size()), Down(b2, b.size())));
        EXPECT_FALSE(SameBits(Down(a1, a.size()), a));  // It did normalise.
      }
    }
  }
  gpu_->L2NormalizeTwo(nullptr, 1.0f, nullptr, 1.0f, 1, heads, 4, 4 * heads - 1, 1e-6f);
  EXPECT_EQ(gpu_->status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HipKernelBackendTest, HeadRowNormsAndSplitsGiveTheBitsOfOneCallPerToken) {
  // RmsNormHeads, GatedRmsNormHeads and SplitHeadPairsStrided (a fused product's column blocks,
  // token rows ld apart) against the contiguous operations a token at a time: both norm kernels,
  // a width past the warp kernels' limit, rows packed and apart, the split's 16-byte and scalar
  // paths (ld a multiple of 4 or not); the padding between token rows untouched.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> block =
      HipKernelBackend::Create({.warp_row_norms = false});
  ASSERT_TRUE(block.ok()) << block.status();
  const int64_t tokens = 100;
  const int heads = 3;
  for (const int64_t dim : {int64_t{1}, int64_t{128}, int64_t{257}}) {
    for (const int64_t pad : {int64_t{0}, int64_t{4}, int64_t{5}}) {
      SCOPED_TRACE(::testing::Message() << "dim=" << dim << " pad=" << pad);
      const int64_t width = heads * dim, ld = width + pad;
      const std::vector<float> x = RandomFloats(tokens * ld, 42, -3.0f, 3.0f),
                               z = RandomFloats(tokens * ld, 43, -4.0f, 4.0f),
                               g = RandomFloats(tokens * width, 44, -3.0f, 3.0f),
                               w = RandomFloats(dim, 45);
      DeviceBuffer dw = Up(w), dz = Up(z), dg = Up(g);
      for (HipKernelBackend* backend : {gpu_.get(), block->get()}) {
        for (const bool zero_centred : {false, true}) {
          DeviceBuffer one = Up(x), each = Up(x);
          backend->RmsNormHeads(one.floats(), tokens, heads, dim, ld, dw.floats(), 1e-6f,
                                zero_centred);
          for (int64_t t = 0; t < tokens; ++t) {
            backend->RmsNorm(each.floats() + t * ld, heads, dim, dw.floats(), 1e-6f, zero_centred,
                             each.floats() + t * ld);
          }
          ASSERT_TRUE(backend->Synchronize().ok()) << backend->status();
          const std::vector<float> got = Down(one, x.size());
          EXPECT_TRUE(SameBits(got, Down(each, x.size())));
          EXPECT_FALSE(SameBits(got, x));  // It did normalise.
        }
        DeviceBuffer one = Poisoned(g.size()), each = Poisoned(g.size());
        backend->GatedRmsNormHeads(dg.floats(), dz.floats(), tokens, heads, dim, ld, dw.floats(),
                                   1e-6f, one.floats());
        for (int64_t t = 0; t < tokens; ++t) {
          backend->GatedRmsNorm(dg.floats() + t * width, dz.floats() + t * ld, heads, dim,
                                dw.floats(), 1e-6f, each.floats() + t * width);
        }
        ASSERT_TRUE(backend->Synchronize().ok()) << backend->status();
        EXPECT_TRUE(SameBits(Down(one, g.size()), Down(each, g.size())));
      }
      if (dim % 2 != 0) continue;
      // Pairs: heads of dim / 2, a row's first `width` values.
      const int64_t half = dim / 2;
      DeviceBuffer dx = Up(x), a1 = Poisoned(tokens * width / 2), b1 = Poisoned(tokens * width / 2),
                   a2 = Poisoned(tokens * width / 2), b2 = Poisoned(tokens * width / 2);
      gpu_->SplitHeadPairsStrided(dx.floats(), ld, tokens, heads, static_cast<int>(half),
                                  a1.floats(), b1.floats());
      for (int64_t t = 0; t < tokens; ++t) {
        gpu_->SplitHeadPairs(dx.floats() + t * ld, 1, heads, static_cast<int>(half),
                             a2.floats() + t * width / 2, b2.floats() + t * width / 2);
      }
      ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
      EXPECT_TRUE(SameBits(Down(a1, tokens * width / 2), Down(a2, tokens * width / 2)));
      EXPECT_TRUE(SameBits(Down(b1, tokens * width / 2), Down(b2, tokens * width / 2)));
    }
  }
  gpu_->RmsNormHeads(nullptr, 1, heads, 4, 4 * heads - 1, nullptr, 1e-6f, false);
  EXPECT_EQ(gpu_->status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HipKernelBackendTest, SiluMulGivesTheSameBitsAlignedOrNot) {
  // Aligned rows take the 16-byte kernel; the same values one float off take the element kernel.
  const int64_t rows = 300, dim = 1024, ld = 2 * dim;
  const std::vector<float> gu = RandomFloats(rows * ld, 39, -6.0f, 6.0f);
  std::vector<float> shifted(gu.size() + 1, 0.0f);
  std::copy(gu.begin(), gu.end(), shifted.begin() + 1);
  DeviceBuffer aligned = Up(gu), off = Up(shifted), out1 = Poisoned(rows * dim),
               out2 = Poisoned(rows * dim + 1);

  gpu_->SiluMul(aligned.floats(), ld, aligned.floats() + dim, ld, rows, dim, out1.floats());
  gpu_->SiluMul(off.floats() + 1, ld, off.floats() + 1 + dim, ld, rows, dim, out2.floats() + 1);

  ASSERT_TRUE(gpu_->Synchronize().ok());
  const std::vector<float> b = Down(out2, rows * dim + 1);
  EXPECT_TRUE(SameBits(Down(out1, rows * dim), std::vector<float>(b.begin() + 1, b.end())));
}

TEST_F(HipKernelBackendTest, RopeAndSiluMulMatchCpu) {
  const int64_t tokens = 19;
  const int heads = 5, head_dim = 34, rotary = 18;
  const int64_t ld = heads * head_dim + 3;  // Rows padded: only the heads are touched.
  const std::vector<float> x = RandomFloats(tokens * ld, 9);
  std::vector<float> inv_freq(rotary / 2);
  for (int i = 0; i < rotary / 2; ++i) {
    inv_freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / rotary);
  }
  std::vector<float> ref = x;
  cpu_->Rope(ref.data(), tokens, ld, heads, head_dim, rotary, inv_freq.data(), 100000);
  const std::vector<float> gate = RandomFloats(tokens * 40, 10, -6.0f, 6.0f),
                           up = RandomFloats(tokens * 30, 11);
  std::vector<float> swiglu(tokens * 25);
  cpu_->SiluMul(gate.data(), 40, up.data(), 30, tokens, 25, swiglu.data());
  DeviceBuffer dx = Up(x), dfreq = Up(inv_freq), dgate = Up(gate), dup = Up(up),
               dout = Poisoned(swiglu.size());

  gpu_->Rope(dx.floats(), tokens, ld, heads, head_dim, rotary, dfreq.floats(), 100000);
  gpu_->SiluMul(dgate.floats(), 40, dup.floats(), 30, tokens, 25, dout.floats());

  ASSERT_TRUE(gpu_->Synchronize().ok());
  // Angles near 1e5 radians: cos/sin of the same fp32 angle, each within an ulp or two.
  EXPECT_LT(Measured("rope at 1e5", RelErr(Down(dx, x.size()), ref)), 1e-5f);
  EXPECT_LT(Measured("silu mul", RelErr(Down(dout, swiglu.size()), swiglu)), kTightTolerance);
}

TEST_F(HipKernelBackendTest, CausalConvMatchesCpuAcrossCalls) {
  const int64_t channels = 301, tokens = 23;
  const int kernel = 4;
  const int64_t ld = channels + 5;
  const std::vector<float> in = RandomFloats(tokens * ld, 12),
                           w = RandomFloats(channels * kernel, 13);
  const std::vector<float> state0 = RandomFloats((kernel - 1) * channels, 14);
  std::vector<float> ref_state = state0, ref(tokens * channels);
  cpu_->CausalConvSilu(in.data(), ld, tokens, channels, w.data(), kernel, ref_state.data(),
                       ref.data());
  DeviceBuffer din = Up(in), dw = Up(w), dstate = Up(state0), dout = Poisoned(ref.size());

  // One token, then two (fewer than the window), then the rest: the state carries over.
  int64_t done = 0;
  for (const int64_t n : {int64_t{1}, int64_t{2}, tokens - 3}) {
    gpu_->CausalConvSilu(din.floats() + done * ld, ld, n, channels, dw.floats(), kernel,
                         dstate.floats(), dout.floats() + done * channels);
    done += n;
  }

  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_LT(Measured("causal conv", RelErr(Down(dout, ref.size()), ref)), kTightTolerance);
  EXPECT_LT(Measured("causal conv state", RelErr(Down(dstate, ref_state.size()), ref_state)),
            kTightTolerance);
}

TEST_F(HipKernelBackendTest, CausalConvBatchGivesTheBitsOfOneCallPerSequence) {
  // 20 sequences of one token (more than one launch holds), ones of 7, 8, 29 and 40 tokens (the
  // batch kernel's chunks of 8 tokens, or 16 over 4 channels a thread: short, whole, and
  // several and a part), and a last one on the first sequence's state again (after its
  // update). The second launch (sequences 16 to 19, at most 8 tokens each) writes the states in
  // the same kernel as the outputs. 301 channels take the scalar kernel, 304 (rows of a
  // multiple of 4 floats) the 16-byte one.
  for (const auto& [channels, ld] :
       {std::pair<int64_t, int64_t>{301, 306}, std::pair<int64_t, int64_t>{304, 308}}) {
    SCOPED_TRACE(absl::StrCat(channels, " channels"));
    const int kernel = 4;
    std::vector<int64_t> tokens(19, 1);
    tokens[2] = 40;
    tokens[4] = 7;
    tokens[7] = 29;
    tokens[12] = 8;
    tokens[17] = 8;
    tokens[18] = 2;
    std::vector<int> state_of(19);
    for (int i = 0; i < 19; ++i) state_of[i] = i;
    tokens.push_back(1);
    state_of.push_back(0);
    int64_t total = 0;
    for (const int64_t t : tokens) total += t;
    const std::vector<float> in = RandomFloats(total * ld, 70),
                             w = RandomFloats(channels * kernel, 71),
                             states0 = RandomFloats(19 * (kernel - 1) * channels, 72);
    DeviceBuffer din = Up(in), dw = Up(w), batch_states = Up(states0), one_states = Up(states0);
    DeviceBuffer batch_out = Poisoned(total * channels), one_out = Poisoned(total * channels);
    const auto args_for = [&](DeviceBuffer& states, DeviceBuffer& out) {
      std::vector<CausalConvArgs> args;
      int64_t at = 0;
      for (size_t i = 0; i < tokens.size(); ++i) {
        args.push_back({din.floats() + at * ld, ld, tokens[i], channels, dw.floats(), kernel,
                        states.floats() + int64_t{state_of[i]} * (kernel - 1) * channels,
                        out.floats() + at * channels});
        at += tokens[i];
      }
      return args;
    };
    gpu_->CausalConvSiluBatch(args_for(batch_states, batch_out));
    for (const CausalConvArgs& a : args_for(one_states, one_out)) {
      gpu_->CausalConvSilu(a.in, a.ld_in, a.tokens, a.channels, a.w, a.kernel, a.state, a.out);
    }
    ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
    EXPECT_TRUE(SameBits(Down(batch_out, total * channels), Down(one_out, total * channels)));
    EXPECT_TRUE(SameBits(Down(batch_states, states0.size()), Down(one_states, states0.size())));
  }
}

TEST_F(HipKernelBackendTest, GathersSplitsAndGatesMatchCpu) {
  const int64_t vocab = 97, dim = 130, n = 23;
  const std::vector<float> table = RandomFloats(vocab * dim, 40);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % vocab);
  std::vector<float> gathered(n * dim);
  cpu_->EmbeddingGather(table.data(), dim, ids.data(), n, gathered.data());
  const int64_t rows = 9;
  const int heads = 3, hd = 17;
  const std::vector<float> pairs = RandomFloats(rows * 2 * heads * hd, 41);
  std::vector<float> a(rows * heads * hd), b(rows * heads * hd);
  cpu_->SplitHeadPairs(pairs.data(), rows, heads, hd, a.data(), b.data());
  std::vector<float> x = RandomFloats(1000, 42);
  const std::vector<float> gate = RandomFloats(1000, 43, -8.0f, 8.0f);
  std::vector<float> gated = x;
  cpu_->SigmoidMul(gated.data(), gate.data(), 1000);
  const int64_t tokens = 31, ld = 70;
  const int gheads = 12;
  const std::vector<float> in =
      RandomFloats(tokens * ld, 44, -30.0f, 30.0f);  // Past softplus's switch.
  const std::vector<float> dt_bias = RandomFloats(gheads, 45),
                           neg_a = RandomFloats(gheads, 46, -8.0f, -0.1f);
  std::vector<float> g(tokens * gheads), beta(tokens * gheads);
  cpu_->GdnGates(in.data(), ld, tokens, gheads, 3, 40, dt_bias.data(), neg_a.data(), g.data(),
                 beta.data());
  DeviceBuffer dtable = Up(table), dpairs = Up(pairs), dx = Up(x), dgate = Up(gate), din = Up(in),
               ddt = Up(dt_bias), dnega = Up(neg_a), dgath = Poisoned(gathered.size()),
               da = Poisoned(a.size()), db = Poisoned(b.size()), dg = Poisoned(g.size()),
               dbeta = Poisoned(beta.size());
  absl::StatusOr<DeviceBuffer> dids = gpu_->Allocate(n * sizeof(int32_t));
  ASSERT_TRUE(dids.ok()) << dids.status();
  ASSERT_TRUE(gpu_->Upload(dids->data(), ids.data(), n * sizeof(int32_t)).ok());

  gpu_->EmbeddingGather(dtable.floats(), dim, static_cast<const int32_t*>(dids->data()), n,
                        dgath.floats());
  gpu_->SplitHeadPairs(dpairs.floats(), rows, heads, hd, da.floats(), db.floats());
  gpu_->SigmoidMul(dx.floats(), dgate.floats(), 1000);
  gpu_->GdnGates(din.floats(), ld, tokens, gheads, 3, 40, ddt.floats(), dnega.floats(), dg.floats(),
                 dbeta.floats());

  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
  EXPECT_TRUE(SameBits(Down(dgath, gathered.size()), gathered));
  EXPECT_TRUE(SameBits(Down(da, a.size()), a));
  EXPECT_TRUE(SameBits(Down(db, b.size()), b));
  // Heads of a multiple of 4 values take the 16-byte copy kernel.
  const int hd4 = 16;
  const std::vector<float> pairs4 = RandomFloats(rows * 2 * heads * hd4, 48);
  std::vector<float> a4(rows * heads * hd4), b4(rows * heads * hd4);
  cpu_->SplitHeadPairs(pairs4.data(), rows, heads, hd4, a4.data(), b4.data());
  DeviceBuffer dpairs4 = Up(pairs4), da4 = Poisoned(a4.size()), db4 = Poisoned(b4.size());
  gpu_->SplitHeadPairs(dpairs4.floats(), rows, heads, hd4, da4.floats(), db4.floats());
  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
  EXPECT_TRUE(SameBits(Down(da4, a4.size()), a4));
  EXPECT_TRUE(SameBits(Down(db4, b4.size()), b4));
  EXPECT_LT(Measured("sigmoid mul", RelErr(Down(dx, x.size()), gated)), kTightTolerance);
  EXPECT_LT(Measured("gdn gates g", RelErr(Down(dg, g.size()), g)), kTightTolerance);
  EXPECT_LT(Measured("gdn gates beta", RelErr(Down(dbeta, beta.size()), beta)), kTightTolerance);
}

TEST_F(HipKernelBackendTest, MoeRoutingMatchesCpuWithTiesToTheLowerId) {
  const int64_t tokens = 57;
  const int experts = 512, top_k = 10;
  std::vector<float> logits = RandomFloats(tokens * experts, 47, -4.0f, 4.0f);
  // Token 0: every logit equal, so the picks are experts 0..9 in order.
  std::fill(logits.begin(), logits.begin() + experts, 0.5f);
  for (const bool renormalise : {false, true}) {
    SCOPED_TRACE(renormalise ? "renormalised" : "plain");
    std::vector<int32_t> ids(tokens * top_k);
    std::vector<float> weights(tokens * top_k);
    cpu_->MoeRoute(logits.data(), tokens, experts, top_k, renormalise, ids.data(), weights.data());
    DeviceBuffer dl = Up(logits), dw = Poisoned(weights.size());
    absl::StatusOr<DeviceBuffer> dids = gpu_->Allocate(ids.size() * sizeof(int32_t));
    ASSERT_TRUE(dids.ok()) << dids.status();

    gpu_->MoeRoute(dl.floats(), tokens, experts, top_k, renormalise,
                   static_cast<int32_t*>(dids->data()), dw.floats());

    ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
    std::vector<int32_t> got_ids(ids.size());
    ASSERT_TRUE(gpu_->Download(got_ids.data(), dids->data(), ids.size() * sizeof(int32_t)).ok());
    EXPECT_EQ(got_ids, ids);
    EXPECT_EQ(std::vector<int32_t>(got_ids.begin(), got_ids.begin() + top_k),
              (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    EXPECT_LT(Measured("moe route weights", RelErr(Down(dw, weights.size()), weights)),
              kTightTolerance);
  }
}

// CopyRows by the kernel (16-byte copies where the shape and pointers allow, else a float at a
// time, rows past the grid's 65535) and by the 2-D memory copy leave the bytes a host copy
// does, and nothing outside the rows' columns.
TEST_F(HipKernelBackendTest, CopyRowsKernelWritesWhatTheMemoryCopyWrites) {
  struct Shape {
    int64_t rows, cols, ld_src, ld_dst, src_at, dst_at;
  };
  for (const Shape& c :
       {Shape{1, 1, 1, 1, 0, 0}, Shape{7, 5, 9, 6, 1, 3}, Shape{300, 1024, 3072, 1024, 0, 0},
        Shape{17, 8, 12, 8, 0, 4}, Shape{3, 8, 12, 8, 1, 0}, Shape{70000, 4, 8, 4, 4, 0}}) {
    const std::string what = absl::StrCat(c.rows, " rows of ", c.cols, ", strides ", c.ld_src,
                                          " -> ", c.ld_dst, ", at ", c.src_at, " -> ", c.dst_at);
    const size_t src_n = static_cast<size_t>(c.src_at + c.rows * c.ld_src);
    const size_t dst_n = static_cast<size_t>(c.dst_at + c.rows * c.ld_dst);
    const std::vector<float> src = RandomFloats(static_cast<int64_t>(src_n), 41, -3.0f, 3.0f);
    std::vector<float> want(dst_n, NAN);
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t j = 0; j < c.cols; ++j) {
        want[static_cast<size_t>(c.dst_at + r * c.ld_dst + j)] =
            src[static_cast<size_t>(c.src_at + r * c.ld_src + j)];
      }
    }
    DeviceBuffer dsrc = Up(src);
    for (const bool kernel : {true, false}) {
      gpu_->SetCopyRowsKernelForTest(kernel);
      DeviceBuffer dst = Poisoned(dst_n);
      gpu_->CopyRows(dsrc.floats() + c.src_at, c.ld_src, c.rows, c.cols, dst.floats() + c.dst_at,
                     c.ld_dst);
      ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
      EXPECT_TRUE(SameBits(Down(dst, dst_n), want)) << what << (kernel ? " (kernel)" : " (copy)");
    }
  }
  gpu_->SetCopyRowsKernelForTest(HipKernelBackendOptions().copy_rows_kernel);
}

// Queued 2-D downloads of column ranges (as the model's logits come down in parts of the
// vocabulary, each part's product writing other columns) each wait for the kernels before them
// and together give the whole matrix.
TEST_F(HipKernelBackendTest, QueuedRowDownloadsFollowTheKernelsBeforeThem) {
  const int64_t rows = 16, cols = 1000, split = 384;
  const size_t n = static_cast<size_t>(rows * cols);
  const std::vector<float> gate = RandomFloats(rows * cols, 44, -2.0f, 2.0f);
  DeviceBuffer x = Up(RandomFloats(rows * cols, 43, -2.0f, 2.0f));
  DeviceBuffer y = Up(RandomFloats(rows * cols, 45, -2.0f, 2.0f));
  DeviceBuffer g = Up(gate);
  std::vector<float> got(n, NAN);
  DeviceMemory* memory = gpu_->memory();
  // Page-locked, so the copies run beside the kernels (into pageable memory they would wait);
  // waited for and released however the test ends.
  CAIRN_ASSERT_OK(memory->RegisterHost(got.data(), static_cast<int64_t>(n * sizeof(float))));
  const absl::Cleanup release = [&] {
    static_cast<void>(memory->WaitQueuedDownloads());
    static_cast<void>(memory->UnregisterHost(got.data()));
  };
  const int64_t pitch = cols * static_cast<int64_t>(sizeof(float));
  // Columns [0, split) of x after a kernel on x, the rest of y after a kernel on y.
  gpu_->SigmoidMul(x.floats(), g.floats(), rows * cols);
  CAIRN_ASSERT_OK(memory->DownloadRowsQueued(got.data(), pitch, x.data(), pitch, split * 4, rows));
  gpu_->SigmoidMul(y.floats(), g.floats(), rows * cols);
  CAIRN_ASSERT_OK(memory->DownloadRowsQueued(got.data() + split, pitch, y.floats() + split, pitch,
                                             (cols - split) * 4, rows));
  CAIRN_ASSERT_OK(memory->WaitQueuedDownloads());
  const std::vector<float> xs = Down(x, n), ys = Down(y, n);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) {
    want[i] = static_cast<int64_t>(i) % cols < split ? xs[i] : ys[i];
  }
  EXPECT_TRUE(SameBits(got, want));
  EXPECT_THAT(memory->DownloadRowsQueued(got.data(), 4, x.data(), 4, 8, 1),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

// Errors that leave the device sound are kept until Recover, and are no fault: arguments an
// operation does not take, and device memory that could not be had (a prefill attention's
// workspace). While kept, every call fails; after Recover, the same call gives the bits of a
// backend that never failed.
TEST_F(HipKernelBackendTest, ErrorsThatLeaveTheDeviceSoundAreKeptUntilRecover) {
  DeviceBuffer buf = Poisoned(1024);
  std::vector<float> four(4, 1.0f);
  gpu_->Attention({buf.floats(), buf.floats(), buf.floats(), buf.floats(), 1, 0, 1, 1, 512, 1.0f});
  EXPECT_THAT(gpu_->Synchronize(), cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  CAIRN_EXPECT_OK(gpu_->Fault());
  EXPECT_FALSE(gpu_->Upload(buf.data(), four.data(), 16).ok());
  CAIRN_EXPECT_OK(gpu_->Recover());
  CAIRN_EXPECT_OK(gpu_->Upload(buf.data(), four.data(), 16));

  const int64_t tokens = 300;
  const int q_heads = 12, kv_heads = 2, head_dim = 128;
  const size_t n = static_cast<size_t>(tokens * q_heads * head_dim);
  AttentionInputs in = RandomAttentionInputs(tokens, 0, q_heads, kv_heads, head_dim, 61);
  AttentionArgs args{in.q.floats(), in.k.floats(), in.v.floats(), nullptr, tokens, 0,
                     q_heads,       kv_heads,      head_dim,      0.088f};
  DeviceBuffer want = Poisoned(n), got = Poisoned(n);
  args.out = want.floats();
  gpu_->Attention(args);
  CAIRN_ASSERT_OK(gpu_->Synchronize());

  absl::StatusOr<std::unique_ptr<HipKernelBackend>> other = HipKernelBackend::Create({});
  ASSERT_TRUE(other.ok()) << other.status();
  HipKernelBackend& b = **other;
  b.SetAllocationLimitForTest(0);
  args.out = got.floats();
  b.Attention(args);
  EXPECT_THAT(b.Synchronize(), cairn::testing::StatusIs(absl::StatusCode::kResourceExhausted));
  CAIRN_EXPECT_OK(b.Fault());
  b.SetAllocationLimitForTest(-1);
  CAIRN_EXPECT_OK(b.Recover());
  b.Attention(args);
  CAIRN_ASSERT_OK(b.Synchronize());
  EXPECT_TRUE(SameBits(Down(want, n), Down(got, n)));
}

TEST_F(HipKernelBackendTest, SplitCopiesRoundTripThroughRegisteredMemory) {
  const int64_t n = 1 << 20;
  std::vector<float> host = RandomFloats(n, 33), back(n, 0.0f);
  ASSERT_TRUE(gpu_->RegisterHost(host.data(), n * sizeof(float)).ok());
  absl::StatusOr<DeviceBuffer> dev = gpu_->Allocate(n * sizeof(float));
  ASSERT_TRUE(dev.ok()) << dev.status();
  const uintptr_t base = reinterpret_cast<uintptr_t>(host.data());
  const std::vector<uintptr_t> cuts = {base + 4096, base + 1000000};

  ASSERT_TRUE(
      gpu_->CopyToDevice(dev->data(), host.data(), n * sizeof(float), cuts, HipStream::kTransfer)
          .ok());
  ASSERT_TRUE(gpu_->Synchronize(HipStream::kTransfer).ok());
  ASSERT_TRUE(gpu_->Download(back.data(), dev->data(), n * sizeof(float)).ok());

  EXPECT_TRUE(SameBits(host, back));
  EXPECT_TRUE(gpu_->UnregisterHost(host.data()).ok());
}

}  // namespace
}  // namespace cairn::infer
