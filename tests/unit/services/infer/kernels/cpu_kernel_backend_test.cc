#include "services/infer/kernels/cpu/cpu_kernel_backend.h"

#include <xmmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "services/infer/kernels/cpu/attention.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/kernels/cpu_backend_test_util.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer {
namespace {

using testing::CpuKernelBackendTest;
using testing::MaxAbsDiff;
using testing::Random;

// Inputs of one gated delta rule call: 2 key heads, 6 value heads (r = 3), dk 8 and dv 12
// unless given.
struct DeltaCase {
  static constexpr int kKHeads = 2, kVHeads = 6;
  int64_t tokens;
  int kDk, kDv;
  std::vector<float> q, k, v, g, beta, state;

  explicit DeltaCase(int64_t t, int dk = 8, int dv = 12) : tokens(t), kDk(dk), kDv(dv) {
    q = Random(t * kKHeads * kDk, 1);
    k = Random(t * kKHeads * kDk, 2);
    v = Random(t * kVHeads * kDv, 3);
    g = Random(t * kVHeads, 4, -0.5f, -0.01f);
    beta = Random(t * kVHeads, 5, 0.1f, 0.9f);
    state = Random(kVHeads * kDk * kDv, 6, -0.2f, 0.2f);
    // Unit-norm keys and queries of norm 1 / sqrt(dk), as the model passes them.
    for (int64_t r = 0; r < t * kKHeads; ++r) {
      float ss = 0.0f;
      for (int i = 0; i < kDk; ++i) ss += k[r * kDk + i] * k[r * kDk + i];
      for (int i = 0; i < kDk; ++i) k[r * kDk + i] /= std::sqrt(ss);
      if (kDk == 8) continue;  // The narrow case keeps the queries it was written with.
      float qq = 0.0f;
      for (int i = 0; i < kDk; ++i) qq += q[r * kDk + i] * q[r * kDk + i];
      for (int i = 0; i < kDk; ++i) q[r * kDk + i] /= std::sqrt(qq * static_cast<float>(kDk));
    }
  }

  // Runs rows [first, first + n) with `chunk`, updating `s`; returns the outputs.
  std::vector<float> Run(KernelBackend& b, std::vector<float>& s, int chunk, int64_t first,
                         int64_t n) const {
    std::vector<float> out(n * kVHeads * kDv);
    GatedDeltaArgs a;
    a.q = q.data() + first * kKHeads * kDk;
    a.k = k.data() + first * kKHeads * kDk;
    a.v = v.data() + first * kVHeads * kDv;
    a.g = g.data() + first * kVHeads;
    a.beta = beta.data() + first * kVHeads;
    a.state = s.data();
    a.out = out.data();
    a.tokens = n;
    a.k_heads = kKHeads;
    a.v_heads = kVHeads;
    a.dk = kDk;
    a.dv = kDv;
    a.chunk = chunk;
    b.GatedDeltaRule(a);
    return out;
  }
};

TEST_F(CpuKernelBackendTest, ChunkedDeltaRuleMatchesRecurrent) {
  const DeltaCase c(150);  // Two full chunks of 64 and a partial one.
  std::vector<float> s_rec = c.state;
  std::vector<float> s_chunk = c.state;

  const std::vector<float> rec = c.Run(*backend_, s_rec, 0, 0, c.tokens);
  const std::vector<float> chunked = c.Run(*backend_, s_chunk, 64, 0, c.tokens);

  EXPECT_LT(MaxAbsDiff(rec, chunked), 1e-4f);
  EXPECT_LT(MaxAbsDiff(s_rec, s_chunk), 1e-4f);
  EXPECT_GT(MaxAbsDiff(s_rec, c.state), 1e-2f);  // The state did move.
}

// Heads of 64 and 128 values take the chunked form's blocked products.
TEST_F(CpuKernelBackendTest, ChunkedDeltaRuleMatchesRecurrentOnWideHeads) {
  for (int d : {64, 128}) {
    const DeltaCase c(150, d, d);
    std::vector<float> s_rec = c.state;
    std::vector<float> s_chunk = c.state;

    const std::vector<float> rec = c.Run(*backend_, s_rec, 0, 0, c.tokens);
    const std::vector<float> chunked = c.Run(*backend_, s_chunk, 64, 0, c.tokens);

    EXPECT_LT(MaxAbsDiff(rec, chunked), 1e-4f) << "d " << d;
    EXPECT_LT(MaxAbsDiff(s_rec, s_chunk), 1e-4f) << "d " << d;
    EXPECT_GT(MaxAbsDiff(s_rec, c.state), 1e-2f) << "d " << d;
  }
}

// A head that forgets fast (log-decays of -4 to -1 a token) drives the chunked form's decays
// and products below 2^-126. The delta rule flushes such values to zero (they cost an assist
// per operand on Intel cores): no subnormal reaches the outputs or the state, both forms still
// agree, and the caller's floating-point mode is what it was.
TEST_F(CpuKernelBackendTest, DeltaRuleFlushesSubnormalsAndKeepsTheCallersMode) {
  for (int d : {8, 64, 128}) {
    DeltaCase c(150, d, d);
    c.g = Random(c.tokens * DeltaCase::kVHeads, 4, -4.0f, -1.0f);
    std::vector<float> s_rec = c.state;
    std::vector<float> s_chunk = c.state;
    const unsigned int mode = _mm_getcsr();

    const std::vector<float> rec = c.Run(*backend_, s_rec, 0, 0, c.tokens);
    const std::vector<float> chunked = c.Run(*backend_, s_chunk, 64, 0, c.tokens);

    EXPECT_EQ(_mm_getcsr(), mode);
    EXPECT_LT(MaxAbsDiff(rec, chunked), 1e-4f) << "d " << d;
    EXPECT_LT(MaxAbsDiff(s_rec, s_chunk), 1e-4f) << "d " << d;
    const std::vector<float>* const results[] = {&rec, &chunked, &s_rec, &s_chunk};
    for (const std::vector<float>* values : results) {
      EXPECT_EQ(std::count_if(values->begin(), values->end(),
                              [](float x) { return std::fpclassify(x) == FP_SUBNORMAL; }),
                0)
          << "d " << d;
    }
  }
}

TEST_F(CpuKernelBackendTest, ChunkSizeOnlyChangesRounding) {
  const DeltaCase c(100);
  std::vector<float> s4 = c.state;
  std::vector<float> s64 = c.state;

  const std::vector<float> o4 = c.Run(*backend_, s4, 4, 0, c.tokens);
  const std::vector<float> o64 = c.Run(*backend_, s64, 64, 0, c.tokens);

  EXPECT_LT(MaxAbsDiff(o4, o64), 1e-4f);
  EXPECT_LT(MaxAbsDiff(s4, s64), 1e-4f);
}

TEST_F(CpuKernelBackendTest, SplittingAtAChunkBoundaryIsBitExact) {
  const DeltaCase c(192);
  std::vector<float> whole = c.state;
  std::vector<float> split = c.state;

  const std::vector<float> o = c.Run(*backend_, whole, 64, 0, 192);
  const std::vector<float> a = c.Run(*backend_, split, 64, 0, 128);
  const std::vector<float> b = c.Run(*backend_, split, 64, 128, 64);

  std::vector<float> joined = a;
  joined.insert(joined.end(), b.begin(), b.end());
  EXPECT_EQ(std::memcmp(o.data(), joined.data(), o.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)), 0);
}

// q, k and v read in place from wider token rows (the model's conv output, [q | k | v] a
// token; qk_ld and v_ld) give the bits of packed rows, in both forms and at both head widths.
TEST_F(CpuKernelBackendTest, DeltaRuleReadsStridedRowsAsPackedOnes) {
  for (int d : {8, 128}) {
    const DeltaCase c(150, d, d + 4);
    const int64_t qk = int64_t{DeltaCase::kKHeads} * c.kDk;
    const int64_t vw = int64_t{DeltaCase::kVHeads} * c.kDv;
    const int64_t ld = 2 * qk + vw + 3;  // The conv output's row, and some.
    const std::vector<float> wide =
        WideDeltaRows(c.q.data(), c.k.data(), c.v.data(), c.tokens, qk, vw, ld);
    for (const int chunk : {0, 64}) {
      std::vector<float> s_packed = c.state, s_wide = c.state;
      const std::vector<float> packed = c.Run(*backend_, s_packed, chunk, 0, c.tokens);
      std::vector<float> out(c.tokens * vw);
      GatedDeltaArgs a;
      a.q = wide.data();
      a.k = wide.data() + qk;
      a.v = wide.data() + 2 * qk;
      a.g = c.g.data();
      a.beta = c.beta.data();
      a.state = s_wide.data();
      a.out = out.data();
      a.tokens = c.tokens;
      a.k_heads = DeltaCase::kKHeads;
      a.v_heads = DeltaCase::kVHeads;
      a.dk = c.kDk;
      a.dv = c.kDv;
      a.chunk = chunk;
      a.qk_ld = ld;
      a.v_ld = ld;
      backend_->GatedDeltaRule(a);
      EXPECT_EQ(0, std::memcmp(packed.data(), out.data(), out.size() * sizeof(float)))
          << "d " << d << ", chunk " << chunk;
      EXPECT_EQ(0, std::memcmp(s_packed.data(), s_wide.data(), s_wide.size() * sizeof(float)))
          << "d " << d << ", chunk " << chunk;
    }
  }
}

TEST_F(CpuKernelBackendTest, MatMulTransposedMatchesNaiveAndIsDeterministic) {
  const int64_t m = 37, k = 70, n = 129;
  const std::vector<float> x = Random(m * k, 7);
  const std::vector<float> w = Random(n * k, 8);
  std::vector<float> y1(m * n), y2(m * n), naive(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += static_cast<double>(x[i * k + p]) * w[j * k + p];
      naive[i * n + j] = static_cast<float>(s);
    }
  }

  backend_->MatMulTransposed(x.data(), m, k, k, w.data(), n, y1.data(), n, false);
  backend_->MatMulTransposed(x.data(), m, k, k, w.data(), n, y2.data(), n, false);

  EXPECT_LT(MaxAbsDiff(y1, naive), 1e-4f);
  EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0);
}

TEST_F(CpuKernelBackendTest, CausalConvCarriesItsWindowAcrossCalls) {
  const int64_t t = 10, ch = 5;
  const int kernel = 4;
  const std::vector<float> in = Random(t * ch, 9);
  const std::vector<float> w = Random(ch * kernel, 10);
  std::vector<float> state_whole((kernel - 1) * ch, 0.0f), state_split = state_whole;
  std::vector<float> whole(t * ch), split(t * ch);

  backend_->CausalConvSilu(in.data(), ch, t, ch, w.data(), kernel, state_whole.data(),
                           whole.data());
  backend_->CausalConvSilu(in.data(), ch, 2, ch, w.data(), kernel, state_split.data(),
                           split.data());
  backend_->CausalConvSilu(in.data() + 2 * ch, ch, t - 2, ch, w.data(), kernel, state_split.data(),
                           split.data() + 2 * ch);

  EXPECT_EQ(whole, split);
  EXPECT_EQ(state_whole, state_split);
  // First output: only the current input (zero history) times the last tap.
  const float pre = w[kernel - 1] * in[0];
  EXPECT_FLOAT_EQ(whole[0], pre / (1.0f + std::exp(-pre)));
  EXPECT_EQ(std::vector<float>(state_whole.end() - ch, state_whole.end()),
            std::vector<float>(in.end() - ch, in.end()));
}

TEST_F(CpuKernelBackendTest, AttentionIsCausalAndGrouped) {
  // Two query heads share one kv head; every key equal so the softmax is uniform.
  const int64_t t = 3;
  const int hd = 4;
  std::vector<float> q = Random(t * 2 * hd, 11);
  std::vector<float> k(t * hd, 0.5f);
  std::vector<float> v = Random(t * hd, 12);
  std::vector<float> out(t * 2 * hd);
  AttentionArgs a{q.data(), k.data(), v.data(), out.data(), t, 0, 2, 1, hd, 0.5f};

  backend_->Attention(a);

  for (int64_t i = 0; i < t; ++i) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < hd; ++d) {
        float mean = 0.0f;
        for (int64_t j = 0; j <= i; ++j) mean += v[j * hd + d];
        EXPECT_NEAR(out[(i * 2 + h) * hd + d], mean / static_cast<float>(i + 1), 1e-6f);
      }
    }
  }
}

TEST_F(CpuKernelBackendTest, NormsFollowTheirConventions) {
  std::vector<float> x = {3.0f, 4.0f};
  const std::vector<float> w = {0.5f, -0.5f};
  std::vector<float> zc(2), plain(2);
  const float inv = 1.0f / std::sqrt(12.5f);

  backend_->RmsNorm(x.data(), 1, 2, w.data(), 0.0f, true, zc.data());
  backend_->RmsNorm(x.data(), 1, 2, w.data(), 0.0f, false, plain.data());
  backend_->L2Normalize(x.data(), 1, 2, 0.0f, 2.0f);

  EXPECT_FLOAT_EQ(zc[0], 3.0f * inv * 1.5f);
  EXPECT_FLOAT_EQ(zc[1], 4.0f * inv * 0.5f);
  EXPECT_FLOAT_EQ(plain[1], 4.0f * inv * -0.5f);
  EXPECT_FLOAT_EQ(x[0], 1.2f);
  EXPECT_FLOAT_EQ(x[1], 1.6f);
}

// Wide rows (the sum of squares in sixteen lanes and a tree, a tail of 7): within a few float
// roundings of a double-precision norm, and a row's bits do not depend on how many rows the
// call has (ParallelRows splits many rows over the threads).
TEST_F(CpuKernelBackendTest, WideNormsMatchDoubleAndDoNotDependOnTheRowCount) {
  const int64_t rows = 300, dim = 1000 + 7;
  const std::vector<float> x = Random(rows * dim, 41);
  const std::vector<float> w = Random(dim, 42);
  std::vector<float> all(rows * dim), alone(dim), gated(rows * dim), unit = x;
  backend_->RmsNorm(x.data(), rows, dim, w.data(), 1e-6f, false, all.data());
  backend_->GatedRmsNorm(x.data(), x.data(), rows, dim, w.data(), 1e-6f, gated.data());
  backend_->L2Normalize(unit.data(), rows, dim, 0.0f, 1.0f);
  for (int64_t r : {int64_t{0}, int64_t{137}, rows - 1}) {
    const float* xr = x.data() + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
    double norm = 0;
    for (int64_t i = 0; i < dim; ++i) {
      EXPECT_NEAR(all[r * dim + i], xr[i] * inv * w[i], 1e-5) << r << " " << i;
      norm += static_cast<double>(unit[r * dim + i]) * unit[r * dim + i];
    }
    EXPECT_NEAR(norm, 1.0, 1e-5) << r;
    backend_->RmsNorm(xr, 1, dim, w.data(), 1e-6f, false, alone.data());
    EXPECT_EQ(std::memcmp(alone.data(), all.data() + r * dim, dim * sizeof(float)), 0) << r;
  }
  EXPECT_NE(gated, all);  // The gate did apply.
}

// L2NormalizeTwo (the delta rule's q and k, token rows apart in the conv output): each row the
// bits of L2Normalize, the padding between token rows untouched, over enough rows that the call
// spreads over the threads.
TEST_F(CpuKernelBackendTest, L2NormalizeTwoGivesTheBitsOfOneCallPerToken) {
  const int64_t tokens = 200, dim = 64;
  const int heads = 3;
  const int64_t ld = heads * dim + 11;
  const std::vector<float> a = Random(tokens * ld, 43), b = Random(tokens * ld, 44);
  std::vector<float> a1 = a, b1 = b, a2 = a, b2 = b;
  backend_->L2NormalizeTwo(a1.data(), 0.125f, b1.data(), 1.0f, tokens, heads, dim, ld, 1e-6f);
  for (int64_t t = 0; t < tokens; ++t) {
    backend_->L2Normalize(a2.data() + t * ld, heads, dim, 1e-6f, 0.125f);
    backend_->L2Normalize(b2.data() + t * ld, heads, dim, 1e-6f, 1.0f);
  }
  EXPECT_EQ(std::memcmp(a1.data(), a2.data(), a1.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(b1.data(), b2.data(), b1.size() * sizeof(float)), 0);
  EXPECT_NE(a1, a);
  EXPECT_EQ(a1[heads * dim + 5], a[heads * dim + 5]);  // Padding.
}

// The strided forms the models use on a fused product's column blocks: the CPU backend's
// overrides and KernelBackend's defaults (a call a token) both give the bits of the contiguous
// operation over the rows copied out, and leave the rest of the wide rows alone.
TEST_F(CpuKernelBackendTest, HeadRowsGiveTheBitsOfRowsOfTheirOwn) {
  const int64_t tokens = 37, dim = 24;
  const int heads = 3;
  const int64_t width = heads * dim, ld = width + 13;
  const std::vector<float> wide = Random(tokens * ld, 45), w = Random(dim, 46);
  const std::vector<float> x = Random(tokens * width, 47);
  // The blocks copied into rows of their own.
  std::vector<float> rows(tokens * width);
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(wide.data() + t * ld, width, rows.data() + t * width);
  }
  const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (const bool base : {false, true}) {
    SCOPED_TRACE(base ? "KernelBackend's default" : "CpuKernelBackend");
    KernelBackend& b = *backend_;
    for (const bool zero_centred : {false, true}) {
      std::vector<float> want = rows, got = wide;
      b.RmsNorm(want.data(), tokens * heads, dim, w.data(), 1e-6f, zero_centred, want.data());
      if (base) {
        b.KernelBackend::RmsNormHeads(got.data(), tokens, heads, dim, ld, w.data(), 1e-6f,
                                      zero_centred);
      } else {
        b.RmsNormHeads(got.data(), tokens, heads, dim, ld, w.data(), 1e-6f, zero_centred);
      }
      for (int64_t t = 0; t < tokens; ++t) {
        ASSERT_EQ(std::memcmp(got.data() + t * ld, want.data() + t * width, width * sizeof(float)),
                  0)
            << "token " << t;
        ASSERT_TRUE(std::equal(got.begin() + t * ld + width, got.begin() + (t + 1) * ld,
                               wide.begin() + t * ld + width));
      }
    }
    std::vector<float> want(tokens * width), got(tokens * width);
    b.GatedRmsNorm(x.data(), rows.data(), tokens * heads, dim, w.data(), 1e-6f, want.data());
    if (base) {
      b.KernelBackend::GatedRmsNormHeads(x.data(), wide.data(), tokens, heads, dim, ld, w.data(),
                                         1e-6f, got.data());
    } else {
      b.GatedRmsNormHeads(x.data(), wide.data(), tokens, heads, dim, ld, w.data(), 1e-6f,
                          got.data());
    }
    EXPECT_TRUE(same(got, want));
    // Two pairs of heads of dim / 4 (dim values) at the start of each wide row.
    const int pair_heads = 2;
    const int pair_dim = dim / 4;
    std::vector<float> wa(tokens * pair_heads * pair_dim), wb = wa, ga = wa, gb = wa;
    std::vector<float> packed(tokens * dim);
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy_n(wide.data() + t * ld, dim, packed.data() + t * dim);
    }
    b.SplitHeadPairs(packed.data(), tokens, pair_heads, pair_dim, wa.data(), wb.data());
    if (base) {
      b.KernelBackend::SplitHeadPairsStrided(wide.data(), ld, tokens, pair_heads, pair_dim,
                                             ga.data(), gb.data());
    } else {
      b.SplitHeadPairsStrided(wide.data(), ld, tokens, pair_heads, pair_dim, ga.data(), gb.data());
    }
    EXPECT_TRUE(same(ga, wa));
    EXPECT_TRUE(same(gb, wb));
  }
}

TEST_F(CpuKernelBackendTest, RopeRotatesPairsHalfApart) {
  // head_dim 6, rotary 4: pairs (0, 2) and (1, 3); dims 4, 5 untouched.
  std::vector<float> x = {1, 0, 0, 1, 7, 8};
  const std::vector<float> inv_freq = {1.0f, 0.5f};

  backend_->Rope(x.data(), 1, 6, 1, 6, 4, inv_freq.data(), 2);

  EXPECT_NEAR(x[0], std::cos(2.0f), 1e-6f);
  EXPECT_NEAR(x[2], std::sin(2.0f), 1e-6f);
  EXPECT_NEAR(x[1], -std::sin(1.0f), 1e-6f);
  EXPECT_NEAR(x[3], std::cos(1.0f), 1e-6f);
  EXPECT_EQ(x[4], 7);
  EXPECT_EQ(x[5], 8);
}

TEST_F(CpuKernelBackendTest, RopeAppendBatchGivesTheBitsOfThePerSequenceCalls) {
  // Three sequences (one of 3 tokens), partial rotary width, padded row strides: the batch
  // against Rope of q, the two row copies and Rope of the copied keys per sequence.
  const int q_heads = 4, kv_heads = 2, hd = 16, rotary = 8;
  const int64_t q_ld = q_heads * hd + 5, width = kv_heads * hd, kv_ld = width + 3;
  const int64_t tokens[] = {1, 3, 1}, positions[] = {0, 17, 100000};
  const int64_t total = 5, slot_rows = 6;
  const std::vector<float> inv_freq = Random(rotary / 2, 40, 0.0f, 1.0f);
  const std::vector<float> q = Random(total * q_ld, 41), k = Random(total * kv_ld, 42),
                           v = Random(total * kv_ld, 43), slots = Random(3 * slot_rows * width, 44);
  std::vector<float> q_batch = q, k_batch = slots, v_batch = slots;
  std::vector<float> q_one = q, k_one = slots, v_one = slots;
  std::vector<RopeAppendArgs> batch;
  int64_t row = 0;
  for (int i = 0; i < 3; ++i) {
    RopeAppendArgs a;
    a.q = q_batch.data() + row * q_ld;
    a.k = k.data() + row * kv_ld;
    a.v = v.data() + row * kv_ld;
    a.k_dst = k_batch.data() + (i * slot_rows + 1) * width;
    a.v_dst = v_batch.data() + (i * slot_rows + 1) * width;
    a.tokens = tokens[i];
    a.position = positions[i];
    a.q_ld = q_ld;
    a.kv_ld = kv_ld;
    a.q_heads = q_heads;
    a.kv_heads = kv_heads;
    a.head_dim = hd;
    a.rotary_dim = rotary;
    a.inv_freq = inv_freq.data();
    batch.push_back(a);
    float* k_dst = k_one.data() + (i * slot_rows + 1) * width;
    backend_->Rope(q_one.data() + row * q_ld, tokens[i], q_ld, q_heads, hd, rotary, inv_freq.data(),
                   positions[i]);
    backend_->CopyRows(a.k, kv_ld, tokens[i], width, k_dst, width);
    backend_->CopyRows(a.v, kv_ld, tokens[i], width, v_one.data() + (i * slot_rows + 1) * width,
                       width);
    backend_->Rope(k_dst, tokens[i], width, kv_heads, hd, rotary, inv_freq.data(), positions[i]);
    row += tokens[i];
  }

  backend_->RopeAppendBatch(batch);

  EXPECT_EQ(std::memcmp(q_batch.data(), q_one.data(), q.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(k_batch.data(), k_one.data(), slots.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(v_batch.data(), v_one.data(), slots.size() * sizeof(float)), 0);
  EXPECT_NE(q_batch, q);
  EXPECT_NE(k_batch, slots);
}

TEST(CpuKernelBackendCreateTest, NegativeThreadsAreInvalid) {
  EXPECT_THAT(CpuKernelBackend::Create({.threads = -1}).status(),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CpuKernelBackendCreateTest, IsaIsCheckedByName) {
  EXPECT_THAT(CpuKernelBackend::Create({.isa = "sse9"}).status(),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<std::unique_ptr<CpuKernelBackend>> portable =
      CpuKernelBackend::Create({.threads = 1, .isa = "portable"});
  ASSERT_TRUE(portable.ok()) << portable.status();
  EXPECT_EQ((*portable)->isa(), cpu::Isa::kPortable);
}

TEST(CpuKernelBackendCreateTest, TilePrefetchIsAutoAlwaysNeverOrBytes) {
  for (const char* bad : {"sometimes", "-5", "4k", ""}) {
    EXPECT_THAT(CpuKernelBackend::Create({.threads = 1, .tile_prefetch = bad}).status(),
                cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  for (const char* good : {"auto", "always", "never", "0", "24576"}) {
    EXPECT_TRUE(CpuKernelBackend::Create({.threads = 1, .tile_prefetch = good}).ok()) << good;
  }
}

TEST_F(CpuKernelBackendTest, GatherSplitAndGates) {
  const std::vector<float> table = {0, 1, 2, 3, 4, 5};  // 3 rows of 2.
  const int32_t ids[] = {2, 0};
  std::vector<float> rows(4);
  backend_->EmbeddingGather(table.data(), 2, ids, 2, rows.data());
  EXPECT_EQ(rows, (std::vector<float>{4, 5, 0, 1}));

  // One row, two heads of dim 2: [a0 a0 b0 b0 a1 a1 b1 b1].
  const std::vector<float> pairs = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> a(4), b(4);
  backend_->SplitHeadPairs(pairs.data(), 1, 2, 2, a.data(), b.data());
  EXPECT_EQ(a, (std::vector<float>{1, 2, 5, 6}));
  EXPECT_EQ(b, (std::vector<float>{3, 4, 7, 8}));

  // b at offset 0, a at offset 1, one head: beta = sigmoid(0) = 0.5, g = -1 * softplus(0 + 0).
  const std::vector<float> in = {0.0f, 0.0f};
  const float dt_bias = 0.0f, neg_a = -1.0f;
  float g = 0, beta = 0;
  backend_->GdnGates(in.data(), 2, 1, 1, 0, 1, &dt_bias, &neg_a, &g, &beta);
  EXPECT_FLOAT_EQ(beta, 0.5f);
  EXPECT_NEAR(g, -std::log(2.0f), 1e-6f);
}

// SiLU and sigmoid run sixteen lanes at a time with a polynomial exponential: close to the
// libm formulas over the whole range (no overflow far below zero), and an element's bits do not
// depend on where it stands in the call.
TEST_F(CpuKernelBackendTest, SiluAndSigmoidAreAccurateAndPositionIndependent) {
  std::vector<float> x = Random(37, 21, -12.0f, 12.0f);
  x[0] = -200.0f;
  x[1] = 200.0f;
  x[2] = 0.0f;
  x[3] = -0.0f;
  x[4] = -88.5f;
  const std::vector<float> up = Random(37, 22, -2.0f, 2.0f);
  std::vector<float> silu(37);
  backend_->SiluMul(x.data(), 37, up.data(), 37, 1, 37, silu.data());
  std::vector<float> gated = up;
  backend_->SigmoidMul(gated.data(), x.data(), 37);
  for (int i = 0; i < 37; ++i) {
    const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
    const double want_silu = x[i] * sig * up[i];
    const double want_gated = up[i] * sig;
    EXPECT_NEAR(silu[i], want_silu, 1e-6 * std::fabs(want_silu) + 1e-30) << "x " << x[i];
    EXPECT_NEAR(gated[i], want_gated, 1e-6 * std::fabs(want_gated) + 1e-30) << "x " << x[i];
  }
  // Each element alone (the padded tail) gives the bits it had inside the call.
  for (int i = 0; i < 37; ++i) {
    float one = 0.0f;
    backend_->SiluMul(x.data() + i, 1, up.data() + i, 1, 1, 1, &one);
    EXPECT_EQ(std::memcmp(&one, &silu[i], sizeof(float)), 0) << "element " << i;
  }
}

TEST_F(CpuKernelBackendTest, MoeRouteBreaksTiesTowardsTheLowerExpert) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.0f};
  int32_t ids[2];
  float weights[2];

  backend_->MoeRoute(logits.data(), 1, 4, 2, /*renormalise=*/true, ids, weights);

  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_FLOAT_EQ(weights[0], 0.5f);
  EXPECT_FLOAT_EQ(weights[1], 0.5f);
}

// MoeExperts (the default, the reference) against its definition written out a token at a time:
// route, then for each pick in ascending expert id out = out + w * down(silu(gate) * up) with
// the row product over the token's row alone. With the row-invariant product the two agree bit
// for bit, whatever the other tokens (one token, tokens whose experts collide, many tokens per
// expert).
// The blocked path's vectorised softmax (its own exp) against the row-invariant path's std::exp,
// over rows of up to 300 keys whose scores span about 60 (down to exp(-60) weights).
TEST_F(CpuKernelBackendTest, BlockedSoftmaxMatchesTheRowInvariantOneOverManyKeys) {
  const int64_t t = 300;
  const int hd = 16;
  const std::vector<float> q = Random(t * hd, 61, -2.0f, 2.0f);
  const std::vector<float> k = Random(t * hd, 62, -2.0f, 2.0f);
  const std::vector<float> v = Random(t * hd, 63);
  std::vector<float> blocked(t * hd), invariant(t * hd);
  for (bool row_invariant : {false, true}) {
    AttentionArgs a;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.out = row_invariant ? invariant.data() : blocked.data();
    a.tokens = t;
    a.q_heads = 1;
    a.kv_heads = 1;
    a.head_dim = hd;
    a.scale = 1.0f;
    a.row_invariant = row_invariant;
    backend_->Attention(a);
  }

  EXPECT_LT(MaxAbsDiff(blocked, invariant), 2e-6f);
}

TEST_F(CpuKernelBackendTest, RowInvariantAttentionMatchesTheBlockedOneAndIgnoresPassStart) {
  const int64_t t = 9;
  const int hd = 8;
  const std::vector<float> q = Random(t * 2 * hd, 31);
  const std::vector<float> k = Random(t * hd, 32);
  const std::vector<float> v = Random(t * hd, 33);
  auto run = [&](bool invariant, int64_t past, int64_t tokens) {
    std::vector<float> out(tokens * 2 * hd);
    AttentionArgs a;
    a.q = q.data() + past * 2 * hd;
    a.k = k.data();
    a.v = v.data();
    a.out = out.data();
    a.tokens = tokens;
    a.past = past;
    a.q_heads = 2;
    a.kv_heads = 1;
    a.head_dim = hd;
    a.scale = 0.35f;
    a.row_invariant = invariant;
    backend_->Attention(a);
    return out;
  };

  const std::vector<float> blocked = run(false, 0, t);
  const std::vector<float> whole = run(true, 0, t);
  const std::vector<float> tail = run(true, 4, t - 4);

  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(whole[i], blocked[i], 1e-5f) << i;
  EXPECT_EQ(std::memcmp(tail.data(), whole.data() + 4 * 2 * hd, tail.size() * sizeof(float)), 0);
}

// One Attention call of `tokens` queries after `past` keys (q: tokens rows of q_heads heads; k, v:
// past + tokens rows of kv_heads heads); returns its output.
std::vector<float> RunAttention(KernelBackend& backend, const std::vector<float>& q,
                                const std::vector<float>& k, const std::vector<float>& v,
                                int64_t tokens, int64_t past, int q_heads, int kv_heads, int hd,
                                float scale, bool row_invariant) {
  std::vector<float> out(tokens * q_heads * hd);
  AttentionArgs a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.out = out.data();
  a.tokens = tokens;
  a.past = past;
  a.q_heads = q_heads;
  a.kv_heads = kv_heads;
  a.head_dim = hd;
  a.scale = scale;
  a.row_invariant = row_invariant;
  backend.Attention(a);
  return out;
}

// The blocked attention against the row-invariant one (and itself, twice) with head size hd,
// 70 query rows after 300 keys, and scores that grow along the keys.
void ExpectBlockedAttentionRescales(KernelBackend& backend, int hd) {
  const int64_t past = 300, t = 70;
  const int q_heads = 2, kv_heads = 1;
  const int64_t keys = past + t;
  const std::vector<float> q = Random(t * q_heads * hd, 51, 0.5f, 1.0f);
  std::vector<float> k = Random(keys * kv_heads * hd, 52, 0.0f, 1.0f);
  for (int64_t j = 0; j < keys; ++j) {
    for (int x = 0; x < hd; ++x) k[j * hd + x] *= 1.0f + 4.0f * static_cast<float>(j) / keys;
  }
  const std::vector<float> v = Random(keys * kv_heads * hd, 53);
  auto run = [&](bool invariant) {
    return RunAttention(backend, q, k, v, t, past, q_heads, kv_heads, hd, 0.2f, invariant);
  };
  const std::vector<float> blocked = run(false);
  const std::vector<float> invariant = run(true);
  for (size_t i = 0; i < blocked.size(); ++i) {
    EXPECT_NEAR(blocked[i], invariant[i], 1e-5f) << "hd " << hd << " at " << i;
  }
  const std::vector<float> again = run(false);
  EXPECT_EQ(std::memcmp(again.data(), blocked.data(), blocked.size() * sizeof(float)), 0);
}

TEST_F(CpuKernelBackendTest, BlockedAttentionMatchesTheRowInvariantOneOnWideHeads) {
  // Head size 64, two query heads per kv head, more than one block of query rows, and row and
  // key counts that leave partial tiles of the score kernel (rows % 8, keys % 32).
  const int64_t past = 37, t = 301;
  const int hd = 64, q_heads = 4, kv_heads = 2;
  const std::vector<float> q = Random(t * q_heads * hd, 41);
  const std::vector<float> k = Random((past + t) * kv_heads * hd, 42);
  const std::vector<float> v = Random((past + t) * kv_heads * hd, 43);
  auto run = [&](bool invariant) {
    return RunAttention(*backend_, q, k, v, t, past, q_heads, kv_heads, hd, 0.125f, invariant);
  };
  const std::vector<float> blocked = run(false);
  const std::vector<float> invariant = run(true);
  for (size_t i = 0; i < blocked.size(); ++i) EXPECT_NEAR(blocked[i], invariant[i], 1e-5f) << i;
}

TEST_F(CpuKernelBackendTest, ShortAttentionMatchesTheRowInvariantOne) {
  // Calls of fewer than 32 query rows (decode steps) take the short path: the query heads of a
  // kv head together (four, or six: a block of four and one of two), heads of 64 and 128.
  struct Shape {
    int64_t past, tokens;
    int q_heads, kv_heads, hd;
  };
  for (const Shape& s : {Shape{300, 1, 8, 2, 64}, Shape{300, 5, 8, 2, 64}, Shape{17, 31, 6, 1, 64},
                         Shape{0, 1, 4, 1, 128}, Shape{129, 3, 12, 2, 128}}) {
    ASSERT_TRUE(cpu::UseShortAttention(
        {.tokens = s.tokens, .q_heads = s.q_heads, .kv_heads = s.kv_heads, .head_dim = s.hd}));
    const std::vector<float> q = Random(s.tokens * s.q_heads * s.hd, 51);
    const std::vector<float> k = Random((s.past + s.tokens) * s.kv_heads * s.hd, 52);
    const std::vector<float> v = Random((s.past + s.tokens) * s.kv_heads * s.hd, 53);
    auto run = [&](bool invariant) {
      return RunAttention(*backend_, q, k, v, s.tokens, s.past, s.q_heads, s.kv_heads, s.hd, 0.125f,
                          invariant);
    };
    const std::vector<float> short_path = run(false);
    const std::vector<float> invariant = run(true);
    for (size_t i = 0; i < short_path.size(); ++i) {
      ASSERT_NEAR(short_path[i], invariant[i], 1e-5f) << i << " past " << s.past;
    }
  }
}

TEST_F(CpuKernelBackendTest, AttentionBatchGivesEachSequenceItsOwnCallsBits) {
  // Four decode-like sequences of different lengths in one AttentionBatch call, against one
  // Attention call each: the same bytes.
  const int q_heads = 8, kv_heads = 2, hd = 64;
  const int64_t pasts[] = {0, 40, 301, 7};
  std::vector<std::vector<float>> qs, ks, vs, batched, alone;
  std::vector<AttentionArgs> batch;
  for (int s = 0; s < 4; ++s) {
    qs.push_back(Random(q_heads * hd, 60 + s));
    ks.push_back(Random((pasts[s] + 1) * kv_heads * hd, 70 + s));
    vs.push_back(Random((pasts[s] + 1) * kv_heads * hd, 80 + s));
    alone.push_back(RunAttention(*backend_, qs[s], ks[s], vs[s], 1, pasts[s], q_heads, kv_heads, hd,
                                 0.125f, false));
    batched.emplace_back(q_heads * hd);
  }
  for (int s = 0; s < 4; ++s) {
    batch.push_back({qs[s].data(), ks[s].data(), vs[s].data(), batched[s].data(), 1, pasts[s],
                     q_heads, kv_heads, hd, 0.125f});
  }
  backend_->AttentionBatch(batch);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(std::memcmp(batched[s].data(), alone[s].data(), alone[s].size() * sizeof(float)), 0)
        << s;
  }
}

TEST_F(CpuKernelBackendTest, BlockedAttentionRescalesAsLaterKeysScoreHigher) {
  // Head sizes 32 and 64 (the fused attention's two- and four-vector value tiles), several
  // blocks of keys whose scores grow along the keys, so that each row's running maximum rises
  // block after block, and a partial group of query rows after a whole one.
  for (const int hd : {32, 64}) {
    ExpectBlockedAttentionRescales(*backend_, hd);
  }
}

TEST_F(CpuKernelBackendTest, BlockedAttentionRescalesOnWideHeadsToo) {
  // Head size 128: the unfused form (the score kernel, then sgemm).
  ExpectBlockedAttentionRescales(*backend_, 128);
}

TEST(CpuKernelBackendProfileTest, RecordsTheBlockedAttentionCallsAndTheirProducts) {
  CpuKernelBackendOptions options;
  options.threads = 2;
  options.profile = true;
  absl::StatusOr<std::unique_ptr<CpuKernelBackend>> backend = CpuKernelBackend::Create(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const int64_t t = 300, past = 100;
  const int hd = 8;
  std::vector<float> q = Random(t * 2 * hd, 21);
  std::vector<float> k = Random((past + t) * hd, 22);
  std::vector<float> v = Random((past + t) * hd, 23);
  std::vector<float> out(t * 2 * hd);
  AttentionArgs a{q.data(), k.data(), v.data(), out.data(), t, past, 2, 1, hd, 0.5f};
  (*backend)->Attention(a);
  a.row_invariant = true;
  (*backend)->Attention(a);  // Not a blocked call: not recorded.

  ASSERT_EQ((*backend)->attention_calls().size(), 1u);
  const CpuAttentionCall& call = (*backend)->attention_calls()[0];
  EXPECT_EQ(call.tokens, t);
  EXPECT_EQ(call.past, past);
  EXPECT_EQ(call.q_heads, 2);
  EXPECT_EQ(call.head_dim, hd);
  // Blocks of 256 query rows, each with the keys its last row sees.
  const std::vector<cpu::AttentionProduct> products =
      cpu::BlockedAttentionProducts(call.tokens, call.past, call.head_dim);
  ASSERT_EQ(products.size(), 4u);
  EXPECT_EQ(products[0].m, 256);
  EXPECT_EQ(products[0].n, past + 256);
  EXPECT_EQ(products[0].k, hd);
  EXPECT_TRUE(products[0].transposed_b);
  EXPECT_EQ(products[1].m, 256);
  EXPECT_EQ(products[1].n, hd);
  EXPECT_EQ(products[1].k, past + 256);
  EXPECT_FALSE(products[1].transposed_b);
  EXPECT_EQ(products[2].m, t - 256);
  EXPECT_EQ(products[2].n, past + t);
  EXPECT_EQ(products[3].k, past + t);

  (*backend)->ResetProfile();
  EXPECT_TRUE((*backend)->attention_calls().empty());
}

}  // namespace
}  // namespace cairn::infer
