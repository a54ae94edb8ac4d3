// Each HIP kernel against the CPU reference backend on random inputs of several shapes (odd
// sizes, GQA ratios, one token, lengths crossing the chunk size, long contexts), plus
// determinism (the same inputs twice give the same bits) and batch invariance. Skips without a
// device.
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
using testing::kBf16AttentionTolerance;
using testing::kRecurrenceTolerance;
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

TEST_F(HipKernelBackendTest, RopeAppendBatchGivesTheBitsOfThePerSequenceCallsAndMatchesCpu) {
  // 19 sequences (more than one launch holds): one token each at positions from 4096 to 100000,
  // one of 3 tokens, and one with a full rotary width (a run of its own); padded row strides.
  const int q_heads = 16, kv_heads = 4, hd = 256;
  const int64_t q_ld = q_heads * hd + 40, width = kv_heads * hd, kv_ld = width + 12;
  const int n = 19;
  std::vector<int64_t> tokens(n, 1), positions(n);
  std::vector<int> rotary(n, 64);
  tokens[3] = 3;
  rotary[10] = hd;
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    positions[i] = i == 7 ? 100000 : 4096 + 37 * i;
    total += tokens[i];
  }
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / 64.0f);
  const int64_t slot_rows = 8;  // Each sequence's slot rows: [slot_rows, width].
  const std::vector<float> q = RandomFloats(total * q_ld, 90), k = RandomFloats(total * kv_ld, 91),
                           v = RandomFloats(total * kv_ld, 92),
                           slots = RandomFloats(n * slot_rows * width, 93);
  DeviceBuffer dfreq = Up(inv_freq), dk = Up(k), dv = Up(v);
  DeviceBuffer q_batch = Up(q), q_one = Up(q), k_batch = Up(slots), k_one = Up(slots),
               v_batch = Up(slots), v_one = Up(slots);
  std::vector<float> q_cpu = q, k_cpu = slots, v_cpu = slots;
  const auto args_for = [&](float* qb, const float* kb, const float* vb, float* kd, float* vd,
                            const float* freq) {
    std::vector<RopeAppendArgs> args;
    int64_t row = 0;
    for (int i = 0; i < n; ++i) {
      RopeAppendArgs& a = args.emplace_back();
      a.q = qb + row * q_ld;
      a.k = kb + row * kv_ld;
      a.v = vb + row * kv_ld;
      a.k_dst = kd + (i * slot_rows + 2) * width;
      a.v_dst = vd + (i * slot_rows + 2) * width;
      a.tokens = tokens[i];
      a.position = positions[i];
      a.q_ld = q_ld;
      a.kv_ld = kv_ld;
      a.q_heads = q_heads;
      a.kv_heads = kv_heads;
      a.head_dim = hd;
      a.rotary_dim = rotary[i];
      a.inv_freq = freq;
      row += tokens[i];
    }
    return args;
  };

  gpu_->RopeAppendBatch(args_for(q_batch.floats(), dk.floats(), dv.floats(), k_batch.floats(),
                                 v_batch.floats(), dfreq.floats()));
  for (const RopeAppendArgs& a : args_for(q_one.floats(), dk.floats(), dv.floats(), k_one.floats(),
                                          v_one.floats(), dfreq.floats())) {
    gpu_->Rope(a.q, a.tokens, a.q_ld, a.q_heads, a.head_dim, a.rotary_dim, a.inv_freq, a.position);
    gpu_->CopyRows(a.k, a.kv_ld, a.tokens, width, a.k_dst, width);
    gpu_->CopyRows(a.v, a.kv_ld, a.tokens, width, a.v_dst, width);
    gpu_->Rope(a.k_dst, a.tokens, width, a.kv_heads, a.head_dim, a.rotary_dim, a.inv_freq,
               a.position);
  }
  cpu_->RopeAppendBatch(
      args_for(q_cpu.data(), k.data(), v.data(), k_cpu.data(), v_cpu.data(), inv_freq.data()));

  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
  const std::vector<float> got_q = Down(q_batch, q.size()), got_k = Down(k_batch, slots.size()),
                           got_v = Down(v_batch, slots.size());
  EXPECT_TRUE(SameBits(got_q, Down(q_one, q.size())));
  EXPECT_TRUE(SameBits(got_k, Down(k_one, slots.size())));
  EXPECT_TRUE(SameBits(got_v, Down(v_one, slots.size())));
  EXPECT_TRUE(SameBits(got_v, v_cpu));  // Copies are exact.
  EXPECT_LT(Measured("rope append q", RelErr(got_q, q_cpu)), 1e-5f);
  EXPECT_LT(Measured("rope append k", RelErr(got_k, k_cpu)), 1e-5f);
  EXPECT_NE(got_k, slots);
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

struct AttentionCase {
  int64_t tokens, past;
  int q_heads, kv_heads, head_dim;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.tokens << " tokens after " << c.past << ", " << c.q_heads << "q/" << c.kv_heads
      << "kv, d" << c.head_dim;
}

class HipAttentionTest : public HipKernelBackendTest,
                         public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(HipAttentionTest, MatchesCpuAndRepeatsBitForBit) {
  const AttentionCase c = GetParam();
  const int64_t rows = c.past + c.tokens;
  const int64_t q_ld = static_cast<int64_t>(c.q_heads) * c.head_dim;
  const int64_t kv_ld = static_cast<int64_t>(c.kv_heads) * c.head_dim;
  const std::vector<float> q = RandomFloats(c.tokens * q_ld, 15, -2.0f, 2.0f);
  const std::vector<float> k = RandomFloats(rows * kv_ld, 16, -2.0f, 2.0f),
                           v = RandomFloats(rows * kv_ld, 17);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> ref(c.tokens * q_ld);
  cpu_->Attention({q.data(), k.data(), v.data(), ref.data(), c.tokens, c.past, c.q_heads,
                   c.kv_heads, c.head_dim, scale});
  DeviceBuffer dq = Up(q), dk = Up(k), dv = Up(v), o1 = Poisoned(ref.size()),
               o2 = Poisoned(ref.size());

  gpu_->Attention({dq.floats(), dk.floats(), dv.floats(), o1.floats(), c.tokens, c.past, c.q_heads,
                   c.kv_heads, c.head_dim, scale});
  gpu_->Attention({dq.floats(), dk.floats(), dv.floats(), o2.floats(), c.tokens, c.past, c.q_heads,
                   c.kv_heads, c.head_dim, scale});
  // The fp32 kernels on the same inputs (the prefill path otherwise runs on the matrix units).
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> fp32 =
      HipKernelBackend::Create({.bf16_attention = false});
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  DeviceBuffer o3 = Poisoned(ref.size());
  (*fp32)->Attention({dq.floats(), dk.floats(), dv.floats(), o3.floats(), c.tokens, c.past,
                      c.q_heads, c.kv_heads, c.head_dim, scale});
  ASSERT_TRUE((*fp32)->Synchronize().ok()) << (*fp32)->status();

  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
  const std::vector<float> got = Down(o1, ref.size());
  const std::string name = ::testing::PrintToString(
      std::vector<int64_t>{c.tokens, c.past, c.q_heads, c.kv_heads, c.head_dim});
  const bool matrix_units = c.tokens > HipKernelBackendOptions().attention_decode_max_tokens;
  EXPECT_LT(Measured(name + (matrix_units ? " attention (bf16 matrix units)" : " attention"),
                     RelErr(got, ref)),
            matrix_units ? kBf16AttentionTolerance : kReductionTolerance);
  EXPECT_LT(Measured(name + " attention fp32", RelErr(Down(o3, ref.size()), ref)),
            kReductionTolerance);
  EXPECT_TRUE(SameBits(got, Down(o2, ref.size())));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HipAttentionTest,
    ::testing::Values(AttentionCase{1, 0, 8, 2, 64},       // First token, decode path.
                      AttentionCase{1, 5000, 16, 2, 256},  // Long-context decode (splits).
                      AttentionCase{3, 1023, 8, 8, 128},   // Few tokens across a split edge.
                      AttentionCase{7, 100, 6, 3, 80},     // Odd head_dim, group 2.
                      AttentionCase{129, 40, 4, 4, 32},    // Prefill, tiles not aligned.
                      AttentionCase{300, 0, 12, 2, 128},   // Prefill, group 6.
                      AttentionCase{1500, 0, 16, 2, 256},
                      AttentionCase{2, 99998, 16, 2, 256}),  // 100K keys: 391 ranges.
    [](const ::testing::TestParamInfo<AttentionCase>& p) {
      const AttentionCase& c = p.param;
      return absl::StrCat(c.tokens, "tokens_after", c.past, "_q", c.q_heads, "_kv", c.kv_heads,
                          "_d", c.head_dim);
    });

TEST_F(HipKernelBackendTest, AttentionRowsDoNotDependOnHowThePassIsCut) {
  const int q_heads = 8, kv_heads = 2, hd = 128;
  const int64_t total = 200;
  const int64_t q_ld = q_heads * hd, kv_ld = kv_heads * hd;
  const std::vector<float> q = RandomFloats(total * q_ld, 18, -2.0f, 2.0f);
  const std::vector<float> k = RandomFloats(total * kv_ld, 19, -2.0f, 2.0f),
                           v = RandomFloats(total * kv_ld, 20);
  DeviceBuffer dq = Up(q), dk = Up(k), dv = Up(v), whole = Poisoned(total * q_ld),
               cut = Poisoned(total * q_ld);
  const float scale = 0.1f;
  auto run = [&](float* out, int64_t first, int64_t n) {
    gpu_->Attention({dq.floats() + first * q_ld, dk.floats(), dv.floats(), out + first * q_ld, n,
                     first, q_heads, kv_heads, hd, scale});
  };

  // Prefill: one pass of 200 against passes of 77, 40 and 83 (all above the decode limit).
  run(whole.floats(), 0, total);
  run(cut.floats(), 0, 77);
  run(cut.floats(), 77, 40);
  run(cut.floats(), 117, 83);
  const std::vector<float> a = Down(whole, total * q_ld), b = Down(cut, total * q_ld);
  // Decode path: token 150 alone against tokens 148..150 in one call.
  DeviceBuffer one = Poisoned(total * q_ld), three = Poisoned(total * q_ld);
  run(one.floats(), 150, 1);
  run(three.floats(), 148, 3);
  const std::vector<float> c = Down(one, total * q_ld), d = Down(three, total * q_ld);

  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_TRUE(SameBits(a, b));
  EXPECT_TRUE(SameBits(std::vector<float>(c.begin() + 150 * q_ld, c.begin() + 151 * q_ld),
                       std::vector<float>(d.begin() + 150 * q_ld, d.begin() + 151 * q_ld)));
}

TEST_F(HipKernelBackendTest, AttentionMmaVariantsGiveTheBitsOfVariantZero) {
  // Each block layout of the matrix-unit prefill attention against variant 0 (128 rows a block,
  // 32-bit fragment loads), on passes after earlier keys and cut inside a block, at each head
  // dimension the kernel has (64, 128, 256; 80 and 32 padded), GQA groups 1 to 6; and with
  // scores scaled up (scale x 12) so that many weights fall below 2^-126 of their row's
  // largest (exp2f's scaled path; elsewhere variants 3-6 take the bare instruction).
  struct Case {
    int64_t tokens, past;
    int q_heads, kv_heads, head_dim;
    float scale_mul = 1.0f;
  };
  const std::vector<Case> cases = {{300, 0, 12, 2, 128},          {1500, 0, 16, 2, 256},
                                   {700, 901, 16, 4, 256},        {129, 40, 4, 4, 32},
                                   {200, 77, 6, 3, 80},           {1000, 0, 8, 8, 64},
                                   {700, 901, 16, 4, 256, 12.0f}, {300, 20, 12, 2, 128, 12.0f}};
  std::vector<std::unique_ptr<HipKernelBackend>> variants;
  for (int variant = 0; variant < hip::kAttentionMmaVariants; ++variant) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> b =
        HipKernelBackend::Create({.attention_mma_variant = variant});
    ASSERT_TRUE(b.ok()) << b.status();
    variants.push_back(*std::move(b));
  }
  EXPECT_THAT(
      HipKernelBackend::Create({.attention_mma_variant = hip::kAttentionMmaVariants}).status(),
      cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  for (const Case& c : cases) {
    const int64_t rows = c.past + c.tokens;
    const int64_t q_ld = static_cast<int64_t>(c.q_heads) * c.head_dim;
    const int64_t kv_ld = static_cast<int64_t>(c.kv_heads) * c.head_dim;
    const std::vector<float> q = RandomFloats(c.tokens * q_ld, 31, -2.0f, 2.0f);
    const std::vector<float> k = RandomFloats(rows * kv_ld, 32, -2.0f, 2.0f),
                             v = RandomFloats(rows * kv_ld, 33);
    const float scale = c.scale_mul / std::sqrt(static_cast<float>(c.head_dim));
    DeviceBuffer dq = Up(q), dk = Up(k), dv = Up(v);
    const std::vector<std::vector<float>> outs =
        AttentionOnEach(variants, {dq.floats(), dk.floats(), dv.floats(), nullptr, c.tokens, c.past,
                                   c.q_heads, c.kv_heads, c.head_dim, scale});
    // The last variant again with the pass cut at 77 tokens (inside a block of every layout).
    DeviceBuffer cut = Poisoned(c.tokens * q_ld);
    HipKernelBackend& last = *variants.back();
    last.Attention({dq.floats(), dk.floats(), dv.floats(), cut.floats(), 77, c.past, c.q_heads,
                    c.kv_heads, c.head_dim, scale});
    last.Attention({dq.floats() + 77 * q_ld, dk.floats(), dv.floats(), cut.floats() + 77 * q_ld,
                    c.tokens - 77, c.past + 77, c.q_heads, c.kv_heads, c.head_dim, scale});
    ASSERT_TRUE(last.Synchronize().ok()) << last.status();
    const std::string name =
        absl::StrCat(c.tokens, " tokens after ", c.past, ", ", c.q_heads, "q/", c.kv_heads, "kv, d",
                     c.head_dim, ", scale x ", c.scale_mul);
    for (size_t i = 1; i < outs.size(); ++i) {
      EXPECT_TRUE(SameBits(outs[0], outs[i])) << name << ", variant " << i;
    }
    EXPECT_TRUE(SameBits(outs[0], Down(cut, c.tokens * q_ld))) << name << ", cut";
  }
}

TEST_F(HipKernelBackendTest, AttentionDecodeVariantsGiveTheBitsOfVariantZero) {
  // The split path's decode blocks (attention_decode_variant 1, 2 with blocks of 4 rows where
  // a call has no more, and 3 also where blocks of 8 would leave multiprocessors idle: the
  // one-token case of 6 rows and two ranges) against the tile kernel (0):
  // single calls of 1 to 8 rows a kv head (GQA groups 1 to 6, several tokens whose positions
  // differ inside a tile), head dimensions 32 to 256 (36 and 80 not multiples of 32), first
  // keys, unaligned ends, 100K keys; then a batch of decode calls in one launch. Variants 1 to 3
  // also with 2 and 4 key ranges a block (attention_decode_ranges_per_block; the automatic
  // choice is the variants' own), whose ranges end inside a block and whose last block has
  // fewer ranges than the others.
  struct Case {
    int64_t tokens, past;
    int q_heads, kv_heads, head_dim;
  };
  const std::vector<Case> cases = {
      {1, 4095, 16, 4, 256}, {1, 0, 8, 2, 64},   {3, 1023, 8, 8, 128}, {1, 200, 12, 2, 80},
      {2, 130, 8, 2, 32},    {5, 37, 3, 3, 128}, {1, 70, 4, 1, 36},    {1, 99999, 16, 2, 256}};
  std::vector<std::unique_ptr<HipKernelBackend>> variants;
  for (int variant = 0; variant < hip::kAttentionDecodeVariants; ++variant) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> b =
        HipKernelBackend::Create({.attention_decode_variant = variant});
    ASSERT_TRUE(b.ok()) << b.status();
    variants.push_back(*std::move(b));
  }
  for (const int variant : {1, 2, 3}) {
    for (const int ranges : {1, 2, 4}) {
      absl::StatusOr<std::unique_ptr<HipKernelBackend>> b = HipKernelBackend::Create(
          {.attention_decode_variant = variant, .attention_decode_ranges_per_block = ranges});
      ASSERT_TRUE(b.ok()) << b.status();
      variants.push_back(*std::move(b));
    }
  }
  EXPECT_THAT(HipKernelBackend::Create({.attention_decode_variant = hip::kAttentionDecodeVariants})
                  .status(),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(HipKernelBackend::Create({.attention_decode_ranges_per_block = 3}).status(),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(variants[0]->SetAttentionDecodeRangesPerBlockForTest(8),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(variants[0]->SetAttentionDecodeVariantForTest(-1),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  for (const Case& c : cases) {
    const int64_t rows = c.past + c.tokens;
    const int64_t q_ld = static_cast<int64_t>(c.q_heads) * c.head_dim;
    const int64_t kv_ld = static_cast<int64_t>(c.kv_heads) * c.head_dim;
    const std::vector<float> q = RandomFloats(c.tokens * q_ld, 41, -2.0f, 2.0f);
    const std::vector<float> k = RandomFloats(rows * kv_ld, 42, -2.0f, 2.0f),
                             v = RandomFloats(rows * kv_ld, 43);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    DeviceBuffer dq = Up(q), dk = Up(k), dv = Up(v);
    const std::vector<std::vector<float>> outs =
        AttentionOnEach(variants, {dq.floats(), dk.floats(), dv.floats(), nullptr, c.tokens, c.past,
                                   c.q_heads, c.kv_heads, c.head_dim, scale});
    const std::string name = absl::StrCat(c.tokens, " tokens after ", c.past, ", ", c.q_heads, "q/",
                                          c.kv_heads, "kv, d", c.head_dim);
    for (size_t i = 1; i < outs.size(); ++i) {
      EXPECT_TRUE(SameBits(outs[0], outs[i])) << name << ", variant " << i;
    }
  }

  // A batch (one launch of each kernel): 16 q / 4 kv heads of 256, decode steps at 1 to 5000
  // keys and a 2-token call (8 rows a kv head).
  const int q_heads = 16, kv_heads = 4, hd = 256;
  const int64_t q_ld = q_heads * hd, kv_ld = kv_heads * hd;
  const std::vector<std::pair<int64_t, int64_t>> seqs = {{1, 0},    {1, 4095}, {2, 700}, {1, 31},
                                                         {1, 4999}, {1, 128},  {1, 1000}};
  std::vector<DeviceBuffer> keys, values;
  int64_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t n = seqs[i].first + seqs[i].second;
    keys.push_back(Up(RandomFloats(n * kv_ld, 500 + i, -2.0f, 2.0f)));
    values.push_back(Up(RandomFloats(n * kv_ld, 600 + i)));
    total += seqs[i].first;
  }
  DeviceBuffer dq = Up(RandomFloats(total * q_ld, 499, -2.0f, 2.0f));
  std::vector<std::vector<float>> outs;
  for (const std::unique_ptr<HipKernelBackend>& b : variants) {
    DeviceBuffer o = Poisoned(total * q_ld);
    std::vector<AttentionArgs> args;
    int64_t at = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      args.push_back({dq.floats() + at * q_ld, keys[i].floats(), values[i].floats(),
                      o.floats() + at * q_ld, seqs[i].first, seqs[i].second, q_heads, kv_heads, hd,
                      0.0625f});
      at += seqs[i].first;
    }
    b->AttentionBatch(args);
    ASSERT_TRUE(b->Synchronize().ok()) << b->status();
    outs.push_back(Down(o, total * q_ld));
  }
  for (size_t i = 1; i < outs.size(); ++i) EXPECT_TRUE(SameBits(outs[0], outs[i])) << "batch " << i;
}

TEST_F(HipKernelBackendTest, AttentionMmaVariantsAgreeAtShortAndTileCrossingLengths) {
  // The matrix-unit path for calls of every size (attention_decode_max_tokens 0): one token,
  // lengths around the key tile (64) and the row blocks (64 and 128), after no keys, keys
  // inside a tile and whole tiles; every variant against variant 0, bit for bit.
  std::vector<std::unique_ptr<HipKernelBackend>> variants;
  for (int variant = 0; variant < hip::kAttentionMmaVariants; ++variant) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> b = HipKernelBackend::Create(
        {.attention_decode_max_tokens = 0, .attention_mma_variant = variant});
    ASSERT_TRUE(b.ok()) << b.status();
    variants.push_back(*std::move(b));
  }
  struct Shape {
    int q_heads, kv_heads, head_dim;
  };
  const int64_t max_keys = 200 + 193;
  for (const Shape sh : {Shape{16, 4, 256}, Shape{6, 2, 128}, Shape{4, 4, 64}}) {
    const int64_t q_ld = static_cast<int64_t>(sh.q_heads) * sh.head_dim;
    const int64_t kv_ld = static_cast<int64_t>(sh.kv_heads) * sh.head_dim;
    const std::vector<float> q = RandomFloats(193 * q_ld, 41, -2.0f, 2.0f);
    const std::vector<float> k = RandomFloats(max_keys * kv_ld, 42, -2.0f, 2.0f),
                             v = RandomFloats(max_keys * kv_ld, 43);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
    DeviceBuffer dq = Up(q), dk = Up(k), dv = Up(v);
    for (const int64_t tokens : {1, 2, 63, 64, 65, 127, 128, 129, 193}) {
      for (const int64_t past : {0, 1, 63, 64, 200}) {
        const std::vector<std::vector<float>> outs =
            AttentionOnEach(variants, {dq.floats(), dk.floats(), dv.floats(), nullptr, tokens, past,
                                       sh.q_heads, sh.kv_heads, sh.head_dim, scale});
        for (size_t i = 1; i < outs.size(); ++i) {
          EXPECT_TRUE(SameBits(outs[0], outs[i]))
              << tokens << " tokens after " << past << ", d" << sh.head_dim << ", variant " << i;
        }
      }
    }
  }
}

TEST_F(HipKernelBackendTest, AttentionBatchGivesTheBitsOfOneCallPerSequenceAndMatchesCpu) {
  // Sequences of one pass over their own caches: decode steps at short and long positions (more
  // calls than one launch takes, ranges from 1 to 40), a 3-token call, a prefill call in the
  // middle (its own path) and a row-invariant call.
  const int q_heads = 8, kv_heads = 2, hd = 128;
  const int64_t q_ld = q_heads * hd, kv_ld = kv_heads * hd;
  struct Seq {
    int64_t tokens, past;
    bool invariant;
  };
  std::vector<Seq> seqs;
  for (int i = 0; i < 19; ++i) seqs.push_back({1, 37 + 271 * i, false});
  seqs.insert(seqs.begin() + 4, Seq{3, 500, false});
  seqs.insert(seqs.begin() + 8, Seq{40, 90, false});
  seqs.insert(seqs.begin() + 12, Seq{2, 128, true});
  std::vector<DeviceBuffer> keys, values;
  std::vector<std::vector<float>> host_k, host_v;
  int64_t rows = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t n = seqs[i].past + seqs[i].tokens;
    host_k.push_back(RandomFloats(n * kv_ld, 300 + i, -2.0f, 2.0f));
    host_v.push_back(RandomFloats(n * kv_ld, 400 + i));
    keys.push_back(Up(host_k.back()));
    values.push_back(Up(host_v.back()));
    rows += seqs[i].tokens;
  }
  const std::vector<float> q = RandomFloats(rows * q_ld, 299, -2.0f, 2.0f);
  DeviceBuffer dq = Up(q), batch_out = Poisoned(rows * q_ld), one_out = Poisoned(rows * q_ld);
  std::vector<float> ref(rows * q_ld);
  const auto args_for = [&](float* qp, float* out, const std::vector<float>* hk,
                            const std::vector<float>* hv) {
    std::vector<AttentionArgs> args;
    int64_t at = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      AttentionArgs a{qp + at * q_ld,
                      hk != nullptr ? hk[i].data() : keys[i].floats(),
                      hv != nullptr ? hv[i].data() : values[i].floats(),
                      out + at * q_ld,
                      seqs[i].tokens,
                      seqs[i].past,
                      q_heads,
                      kv_heads,
                      hd,
                      0.09f};
      a.row_invariant = seqs[i].invariant;
      args.push_back(a);
      at += seqs[i].tokens;
    }
    return args;
  };
  gpu_->AttentionBatch(args_for(dq.floats(), batch_out.floats(), nullptr, nullptr));
  for (const AttentionArgs& a : args_for(dq.floats(), one_out.floats(), nullptr, nullptr)) {
    gpu_->Attention(a);
  }
  std::vector<float> hq = q;
  cpu_->AttentionBatch(args_for(hq.data(), ref.data(), host_k.data(), host_v.data()));
  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
  const std::vector<float> batched = Down(batch_out, rows * q_ld);
  EXPECT_TRUE(SameBits(batched, Down(one_out, rows * q_ld)));
  // The prefill call takes the bf16 path: the loosest tolerance of the ones in the batch.
  EXPECT_LT(Measured("attention batch", RelErr(batched, ref)), kBf16AttentionTolerance);
}

struct DeltaCase {
  int64_t tokens;
  int k_heads, v_heads, dk, dv, chunk;
};

void PrintTo(const DeltaCase& c, std::ostream* os) {
  *os << c.tokens << " tokens, " << c.k_heads << "k/" << c.v_heads << "v heads, " << c.dk << "x"
      << c.dv << ", chunk " << c.chunk;
}

class HipGatedDeltaTest : public HipKernelBackendTest,
                          public ::testing::WithParamInterface<DeltaCase> {};

TEST_P(HipGatedDeltaTest, MatchesCpuAndRepeatsBitForBit) {
  const DeltaCase c = GetParam();
  const int64_t qk_n = c.tokens * c.k_heads * c.dk;
  std::vector<float> q = RandomFloats(qk_n, 21), k = RandomFloats(qk_n, 22);
  const std::vector<float> v = RandomFloats(c.tokens * c.v_heads * c.dv, 23);
  const std::vector<float> g = RandomFloats(c.tokens * c.v_heads, 24, -0.5f, -0.01f);
  const std::vector<float> beta = RandomFloats(c.tokens * c.v_heads, 25, 0.1f, 0.9f);
  const std::vector<float> state0 = RandomFloats(c.v_heads * c.dk * c.dv, 26, -0.2f, 0.2f);
  // Unit-norm keys and scaled queries, as the model passes them.
  cpu_->L2Normalize(k.data(), c.tokens * c.k_heads, c.dk, 1e-6f, 1.0f);
  cpu_->L2Normalize(q.data(), c.tokens * c.k_heads, c.dk, 1e-6f,
                    1.0f / std::sqrt(static_cast<float>(c.dk)));
  std::vector<float> ref_state = state0, ref(c.tokens * c.v_heads * c.dv);
  cpu_->GatedDeltaRule({q.data(), k.data(), v.data(), g.data(), beta.data(), ref_state.data(),
                        ref.data(), c.tokens, c.k_heads, c.v_heads, c.dk, c.dv, c.chunk});
  DeviceBuffer dq = Up(q), dk = Up(k), dv = Up(v), dg = Up(g), db = Up(beta);
  DeviceBuffer s1 = Up(state0), s2 = Up(state0), o1 = Poisoned(ref.size()),
               o2 = Poisoned(ref.size());

  for (auto [s, o] : {std::pair{&s1, &o1}, std::pair{&s2, &o2}}) {
    gpu_->GatedDeltaRule({dq.floats(), dk.floats(), dv.floats(), dg.floats(), db.floats(),
                          s->floats(), o->floats(), c.tokens, c.k_heads, c.v_heads, c.dk, c.dv,
                          c.chunk});
  }

  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
  const std::vector<float> out = Down(o1, ref.size()), state = Down(s1, ref_state.size());
  const std::string name = ::testing::PrintToString(
      std::vector<int64_t>{c.tokens, c.k_heads, c.v_heads, c.dk, c.dv, c.chunk});
  EXPECT_LT(Measured(name + " delta out", RelErr(out, ref)), kRecurrenceTolerance);
  EXPECT_LT(Measured(name + " delta state", RelErr(state, ref_state)), kRecurrenceTolerance);
  EXPECT_TRUE(SameBits(out, Down(o2, ref.size())));
  EXPECT_TRUE(SameBits(state, Down(s2, ref_state.size())));
}

TEST_F(HipKernelBackendTest, GatedDeltaBatchGivesTheBitsOfOneCallPerSequence) {
  // 21 sequences: decode steps (more than one launch holds), a 3-token recurrent call, a chunked
  // pass in the middle, and a last step on the first sequence's state again (after its update).
  const int kh = 4, vh = 8, dk = 128, dv = 96;
  struct Seq {
    int64_t tokens;
    int chunk;
    int state;
  };
  std::vector<Seq> seqs;
  for (int i = 0; i < 18; ++i) seqs.push_back({1, 0, i});
  seqs.insert(seqs.begin() + 5, Seq{3, 0, 18});
  seqs.insert(seqs.begin() + 9, Seq{70, 64, 19});
  seqs.push_back({1, 0, 0});
  int64_t total = 0;
  for (const Seq& q : seqs) total += q.tokens;
  std::vector<float> q = RandomFloats(total * kh * dk, 60), k = RandomFloats(total * kh * dk, 61);
  cpu_->L2Normalize(k.data(), total * kh, dk, 1e-6f, 1.0f);
  cpu_->L2Normalize(q.data(), total * kh, dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(dk)));
  const std::vector<float> v = RandomFloats(total * vh * dv, 62),
                           g = RandomFloats(total * vh, 63, -0.5f, -0.01f),
                           beta = RandomFloats(total * vh, 64, 0.1f, 0.9f),
                           states0 = RandomFloats(20 * vh * dk * dv, 65, -0.2f, 0.2f);
  DeviceBuffer dq = Up(q), dk_ = Up(k), dv_ = Up(v), dg = Up(g), db = Up(beta);
  DeviceBuffer batch_states = Up(states0), one_states = Up(states0);
  DeviceBuffer batch_out = Poisoned(total * vh * dv), one_out = Poisoned(total * vh * dv);
  const auto args_for = [&](DeviceBuffer& states, DeviceBuffer& out) {
    std::vector<GatedDeltaArgs> args;
    int64_t at = 0;
    for (const Seq& s : seqs) {
      args.push_back({dq.floats() + at * kh * dk, dk_.floats() + at * kh * dk,
                      dv_.floats() + at * vh * dv, dg.floats() + at * vh, db.floats() + at * vh,
                      states.floats() + int64_t{s.state} * vh * dk * dv,
                      out.floats() + at * vh * dv, s.tokens, kh, vh, dk, dv, s.chunk});
      at += s.tokens;
    }
    return args;
  };
  gpu_->GatedDeltaRuleBatch(args_for(batch_states, batch_out));
  for (const GatedDeltaArgs& a : args_for(one_states, one_out)) gpu_->GatedDeltaRule(a);
  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
  EXPECT_TRUE(SameBits(Down(batch_out, total * vh * dv), Down(one_out, total * vh * dv)));
  EXPECT_TRUE(SameBits(Down(batch_states, states0.size()), Down(one_states, states0.size())));
}

TEST_F(HipKernelBackendTest, GatedDeltaStepWithItsInputsGivesTheBitsOfTheThreeCalls) {
  // GatedDeltaStepBatch over decode steps (one token a sequence, q and k as the conv leaves them,
  // the gates in the projection rows), in one launch (fuse_delta_inputs) against GdnGates,
  // L2NormalizeTwo and GatedDeltaRuleBatch: the same outputs and states, bit for bit. Head
  // sizes 128 (the 9B-like model's), 256 (the largest the launch takes) and 40 (not a multiple
  // of the warp), two v-heads a k-head, sequences in an order other than their token rows; a
  // batch whose first step is chunked and one whose sequences differ in dv take the three calls
  // on both backends.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> apart =
      HipKernelBackend::Create({.fuse_delta_inputs = false});
  ASSERT_TRUE(apart.ok()) << apart.status();
  struct Case {
    int kh, dk, dv, seqs;
    bool chunked_first, mixed_dv;
  };
  for (const Case c : {Case{4, 128, 96, 16, false, false}, Case{2, 256, 64, 3, false, false},
                       Case{3, 40, 24, 5, false, false}, Case{4, 128, 96, 4, true, false},
                       Case{4, 128, 96, 4, false, true}}) {
    SCOPED_TRACE(::testing::Message() << "dk=" << c.dk << " sequences " << c.seqs);
    const int vh = 2 * c.kh;
    const int64_t tokens = c.seqs;
    const int64_t qk = static_cast<int64_t>(c.kh) * c.dk;
    // Rows as the model lays them out: [q | k | v] a token, and a projection row whose tail
    // holds b and a for every v-head.
    const int64_t conv_ld = 2 * qk + static_cast<int64_t>(vh) * c.dv;
    const int64_t proj_ld = conv_ld + 2 * vh + 5;
    const std::vector<float> conv = RandomFloats(tokens * conv_ld, 90),
                             proj = RandomFloats(tokens * proj_ld, 91, -3.0f, 3.0f),
                             dt_bias = RandomFloats(vh, 92),
                             neg_a = RandomFloats(vh, 93, -2.0f, -0.1f),
                             states0 = RandomFloats(c.seqs * vh * c.dk * c.dv, 94, -0.2f, 0.2f);
    DeviceBuffer dproj = Up(proj), ddt = Up(dt_bias), dna = Up(neg_a);
    std::vector<std::vector<float>> outs, states;
    for (int b = 0; b < 2; ++b) {
      HipKernelBackend& be = b == 0 ? **apart : *gpu_;
      DeviceBuffer dconv = Up(conv), dstates = Up(states0), dout = Poisoned(tokens * vh * c.dv),
                   dg = Poisoned(tokens * vh), dbeta = Poisoned(tokens * vh);
      GatedDeltaInputs in;
      in.proj = dproj.floats();
      in.proj_ld = proj_ld;
      in.tokens = tokens;
      in.v_heads = vh;
      in.b_offset = conv_ld + 3;
      in.a_offset = conv_ld + 3 + vh;
      in.dt_bias = ddt.floats();
      in.neg_a = dna.floats();
      in.g = dg.floats();
      in.beta = dbeta.floats();
      in.q = dconv.floats();
      in.k = dconv.floats() + qk;
      in.q_scale = 1.0f / std::sqrt(static_cast<float>(c.dk));
      in.k_heads = c.kh;
      in.dk = c.dk;
      in.qk_ld = conv_ld;
      in.eps = 1e-6f;
      std::vector<GatedDeltaArgs> args;
      for (int i = 0; i < c.seqs; ++i) {
        const int64_t row = c.seqs - 1 - i;  // Sequence i's token row.
        args.push_back(
            {in.q + row * conv_ld, in.k + row * conv_ld, dconv.floats() + row * conv_ld + 2 * qk,
             in.g + row * vh, in.beta + row * vh, dstates.floats() + int64_t{i} * vh * c.dk * c.dv,
             dout.floats() + row * vh * c.dv, 1, c.kh, vh, c.dk,
             c.mixed_dv && i % 2 == 1 ? c.dv / 2 : c.dv, c.chunked_first && i == 0 ? 64 : 0});
      }
      be.GatedDeltaStepBatch(in, args);
      ASSERT_TRUE(be.Synchronize().ok()) << be.status();
      outs.push_back(Down(dout, tokens * vh * c.dv));
      states.push_back(Down(dstates, states0.size()));
      // The one launch leaves the gates unwritten; the three calls write them.
      const std::vector<float> gates = Down(dg, tokens * vh);
      const bool one_launch = b == 1 && !c.chunked_first && !c.mixed_dv;
      EXPECT_EQ(std::count_if(gates.begin(), gates.end(), [](float v) { return std::isnan(v); }),
                one_launch ? tokens * vh : 0);
    }
    EXPECT_TRUE(SameBits(outs[1], outs[0]));
    EXPECT_TRUE(SameBits(states[1], states[0]));
    // Every output written (with mixed dv, half of the narrower sequences' rows stay unwritten).
    EXPECT_EQ(std::count_if(outs[1].begin(), outs[1].end(), [](float v) { return std::isnan(v); }),
              c.mixed_dv ? (c.seqs / 2) * vh * (c.dv - c.dv / 2) : 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HipGatedDeltaTest,
    ::testing::Values(DeltaCase{1, 2, 6, 8, 12, 0},        // One decode step, odd sizes.
                      DeltaCase{37, 2, 6, 8, 12, 0},       // Recurrent over a short prompt.
                      DeltaCase{1, 2, 6, 8, 12, 64},       // One token, chunked.
                      DeltaCase{150, 2, 6, 8, 12, 64},     // Two chunks and a partial one.
                      DeltaCase{100, 2, 6, 8, 12, 4},      // Small chunks.
                      DeltaCase{65, 4, 8, 128, 128, 64},   // Real head sizes across a chunk.
                      DeltaCase{20, 4, 8, 128, 128, 0},    // Real head sizes, recurrent.
                      DeltaCase{1000, 2, 4, 256, 96, 64},  // Largest dk, dv not a multiple of 32.
                      DeltaCase{5000, 1, 2, 64, 64, 64}),  // Longer than one segment.
    [](const ::testing::TestParamInfo<DeltaCase>& p) {
      const DeltaCase& c = p.param;
      return absl::StrCat(
          c.tokens, "tokens_k", c.k_heads, "_v", c.v_heads, "_", c.dk, "x", c.dv,
          c.chunk == 0 ? std::string("_recurrent") : absl::StrCat("_chunk", c.chunk));
    });

TEST_F(HipKernelBackendTest, RowInvariantAttentionIsTheSameBitsInEveryPassAndMatchesCpu) {
  const int q_heads = 8, kv_heads = 2, hd = 128;
  const int64_t total = 300;  // Several 64-token groups, and one pass shorter than a group.
  const int64_t q_ld = q_heads * hd, kv_ld = kv_heads * hd;
  const std::vector<float> q = RandomFloats(total * q_ld, 50, -2.0f, 2.0f);
  const std::vector<float> k = RandomFloats(total * kv_ld, 51, -2.0f, 2.0f);
  const std::vector<float> v = RandomFloats(total * kv_ld, 52);
  std::vector<float> ref(total * q_ld);
  AttentionArgs cpu_args{q.data(), k.data(), v.data(), ref.data(), total,
                         0,        q_heads,  kv_heads, hd,         0.1f};
  cpu_args.row_invariant = true;
  cpu_->Attention(cpu_args);
  DeviceBuffer dq = Up(q), dk = Up(k), dv = Up(v), whole = Poisoned(total * q_ld),
               cut = Poisoned(total * q_ld);
  auto run = [&](float* out, int64_t first, int64_t n) {
    AttentionArgs args{dq.floats() + first * q_ld,
                       dk.floats(),
                       dv.floats(),
                       out + first * q_ld,
                       n,
                       first,
                       q_heads,
                       kv_heads,
                       hd,
                       0.1f};
    args.row_invariant = true;
    gpu_->Attention(args);
  };

  run(whole.floats(), 0, total);
  run(cut.floats(), 0, 77);
  run(cut.floats(), 77, 1);  // A decode-sized pass.
  run(cut.floats(), 78, 139);
  run(cut.floats(), 217, 83);

  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
  const std::vector<float> a = Down(whole, total * q_ld);
  EXPECT_TRUE(SameBits(a, Down(cut, total * q_ld)));
  EXPECT_LT(Measured("row-invariant attention", RelErr(a, ref)), kReductionTolerance);
}

TEST_F(HipKernelBackendTest, ChunkedDeltaRuleDoesNotDependOnSegmentsOrCallBoundaries) {
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> small =
      HipKernelBackend::Create({.delta_segment_tokens = 128});
  ASSERT_TRUE(small.ok()) << small.status();
  const int64_t tokens = 640;
  const int kh = 2, vh = 4, dk = 64, dv = 64, chunk = 64;
  std::vector<float> q = RandomFloats(tokens * kh * dk, 27), k = RandomFloats(tokens * kh * dk, 28);
  cpu_->L2Normalize(k.data(), tokens * kh, dk, 1e-6f, 1.0f);
  cpu_->L2Normalize(q.data(), tokens * kh, dk, 1e-6f, 0.125f);
  const std::vector<float> v = RandomFloats(tokens * vh * dv, 29);
  const std::vector<float> g = RandomFloats(tokens * vh, 30, -0.5f, -0.01f);
  const std::vector<float> beta = RandomFloats(tokens * vh, 31, 0.1f, 0.9f);
  const std::vector<float> state0 = RandomFloats(vh * dk * dv, 32, -0.2f, 0.2f);
  auto run = [&](HipKernelBackend& b, const std::vector<int64_t>& passes) {
    DeviceBuffer dq = Up(q), dk_ = Up(k), dv_ = Up(v), dg = Up(g), db = Up(beta), s = Up(state0),
                 o = Poisoned(tokens * vh * dv);
    int64_t first = 0;
    for (const int64_t n : passes) {
      b.GatedDeltaRule({dq.floats() + first * kh * dk, dk_.floats() + first * kh * dk,
                        dv_.floats() + first * vh * dv, dg.floats() + first * vh,
                        db.floats() + first * vh, s.floats(), o.floats() + first * vh * dv, n, kh,
                        vh, dk, dv, chunk});
      first += n;
    }
    // Up() and Down() use gpu_'s stream: wait for `b`'s own first.
    EXPECT_TRUE(b.Synchronize().ok());
    std::vector<float> out = Down(o, tokens * vh * dv);
    const std::vector<float> state = Down(s, vh * dk * dv);
    out.insert(out.end(), state.begin(), state.end());
    return out;
  };

  const std::vector<float> whole = run(*gpu_, {tokens});
  const std::vector<float> segmented = run(**small, {tokens});
  const std::vector<float> passes = run(*gpu_, {128, 320, 192});

  ASSERT_TRUE(gpu_->Synchronize().ok());
  ASSERT_TRUE((*small)->Synchronize().ok());
  EXPECT_TRUE(SameBits(whole, segmented));
  EXPECT_TRUE(SameBits(whole, passes));
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

TEST_F(HipKernelBackendTest, UnsupportedShapesAreKeptAsErrors) {
  DeviceBuffer buf = Poisoned(1024);

  gpu_->Attention({buf.floats(), buf.floats(), buf.floats(), buf.floats(), 1, 0, 1, 1, 512, 1.0f});

  EXPECT_THAT(gpu_->Synchronize(), cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
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
