// The HIP backend's attention against the CPU reference (prefill and decode paths, GQA, long
// contexts), and its bits: every block layout of the matrix-unit prefill (attention_mma_variant)
// and of the decode path (attention_decode_variant) against variant 0, rows independent of how
// a pass is cut and of what shares a batch, and the row-invariant path. Skips without a device.

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/kernels/hip/hip_kernel_test_fixture.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer {
namespace {

using testing::HipKernelBackendTest;
using testing::kBf16AttentionTolerance;
using testing::kReductionTolerance;
using testing::Measured;
using testing::RelErr;
using testing::SameBits;

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
    const int64_t q_ld = static_cast<int64_t>(c.q_heads) * c.head_dim;
    const float scale = c.scale_mul / std::sqrt(static_cast<float>(c.head_dim));
    const AttentionInputs in =
        RandomAttentionInputs(c.tokens, c.past, c.q_heads, c.kv_heads, c.head_dim, 31);
    const DeviceBuffer &dq = in.q, &dk = in.k, &dv = in.v;
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

// A single attention call of the split path's tests.
struct DecodeCase {
  int64_t tokens, past;
  int q_heads, kv_heads, head_dim;
};

TEST_F(HipKernelBackendTest, AttentionDecodeVariantsGiveTheBitsOfVariantZero) {
  // The split path's decode blocks (attention_decode_variant 1, 2 with blocks of 4 rows where
  // a call has no more, and 3 also where blocks of 8 would leave multiprocessors idle: the
  // one-token case of 6 rows and two ranges, and 4 the streamed blocks) against the tile kernel
  // (0):
  // single calls of 1 to 8 rows a kv head (GQA groups 1 to 6, several tokens whose positions
  // differ inside a tile), head dimensions 32 to 256 (36 and 80 not multiples of 32), first
  // keys, unaligned ends, 100K keys; then a batch of decode calls in one launch. Variants 1 to 4
  // also with 2 and 4 key ranges a block (attention_decode_ranges_per_block; the automatic
  // choice is the variants' own), whose ranges end inside a block and whose last block has
  // fewer ranges than the others.
  const std::vector<DecodeCase> cases = {
      {1, 4095, 16, 4, 256}, {1, 0, 8, 2, 64},   {3, 1023, 8, 8, 128}, {1, 200, 12, 2, 80},
      {2, 130, 8, 2, 32},    {5, 37, 3, 3, 128}, {1, 70, 4, 1, 36},    {1, 99999, 16, 2, 256}};
  std::vector<std::unique_ptr<HipKernelBackend>> variants;
  for (int variant = 0; variant < hip::kAttentionDecodeSameBitsVariants; ++variant) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> b =
        HipKernelBackend::Create({.attention_decode_variant = variant});
    ASSERT_TRUE(b.ok()) << b.status();
    variants.push_back(*std::move(b));
  }
  for (const int variant : {1, 2, 3, 4}) {
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
  for (const DecodeCase& c : cases) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const AttentionInputs in =
        RandomAttentionInputs(c.tokens, c.past, c.q_heads, c.kv_heads, c.head_dim, 41);
    const DeviceBuffer &dq = in.q, &dk = in.k, &dv = in.v;
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

TEST_F(HipKernelBackendTest, MatrixUnitDecodeAttentionMatchesCpuAndIsBatchInvariant) {
  // Variant 5 (the decode path on the matrix units, bf16 operands): within the bf16 prefill's
  // tolerance of the CPU backend, the same bits twice and alone or in a batch. Single calls of
  // 1 to 8 rows a kv head, first keys, ranges cut inside a tile, 100K keys; head dimensions 36
  // (not a multiple of 16) and ranges of 256 keys fall back to variant 3's fp32 blocks.
  const std::vector<DecodeCase> cases = {
      {1, 4096, 16, 2, 256}, {1, 0, 8, 2, 64},   {3, 1023, 8, 8, 128}, {1, 200, 12, 2, 80},
      {2, 130, 8, 2, 32},    {5, 37, 3, 3, 128}, {1, 70, 4, 1, 36},    {1, 99999, 16, 2, 256}};
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> mma =
      HipKernelBackend::Create({.attention_decode_variant = 5});
  ASSERT_TRUE(mma.ok()) << mma.status();
  HipKernelBackend& b = **mma;
  int64_t expected_launches = 0;
  const int64_t launches_before = hip::AttentionDecodeMmaLaunches();
  for (const DecodeCase& c : cases) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const int64_t q_ld = static_cast<int64_t>(c.q_heads) * c.head_dim;
    const int64_t kv_ld = static_cast<int64_t>(c.kv_heads) * c.head_dim;
    const int64_t rows = c.past + c.tokens;
    const std::vector<float> q = RandomFloats(c.tokens * q_ld, 71, -2.0f, 2.0f);
    const std::vector<float> k = RandomFloats(rows * kv_ld, 72, -2.0f, 2.0f),
                             v = RandomFloats(rows * kv_ld, 73);
    std::vector<float> ref(c.tokens * q_ld);
    cpu_->Attention({q.data(), k.data(), v.data(), ref.data(), c.tokens, c.past, c.q_heads,
                     c.kv_heads, c.head_dim, scale});
    DeviceBuffer dq = Up(q), dk = Up(k), dv = Up(v), o1 = Poisoned(ref.size()),
                 o2 = Poisoned(ref.size());
    for (DeviceBuffer* o : {&o1, &o2}) {
      b.Attention({dq.floats(), dk.floats(), dv.floats(), o->floats(), c.tokens, c.past, c.q_heads,
                   c.kv_heads, c.head_dim, scale});
    }
    ASSERT_TRUE(b.Synchronize().ok()) << b.status();
    const std::vector<float> got = Down(o1, ref.size());
    const std::string name = absl::StrCat(c.tokens, " tokens after ", c.past, ", ", c.q_heads, "q/",
                                          c.kv_heads, "kv, d", c.head_dim);
    const bool takes = c.head_dim % 16 == 0;
    EXPECT_LT(Measured(name + " decode attention (variant 5)", RelErr(got, ref)),
              takes ? kBf16AttentionTolerance : kReductionTolerance);
    EXPECT_TRUE(SameBits(got, Down(o2, ref.size()))) << name;
    expected_launches += takes ? 2 : 0;
  }
  EXPECT_EQ(hip::AttentionDecodeMmaLaunches() - launches_before, expected_launches);

  // A batch of decode steps (the MoE model's 16 q / 2 kv heads of 256) against each sequence
  // alone, bit for bit, and against the CPU backend.
  const int q_heads = 16, kv_heads = 2, hd = 256;
  const int64_t q_ld = q_heads * hd, kv_ld = kv_heads * hd;
  const std::vector<int64_t> pasts = {0, 4096, 31, 4999, 127, 1000};
  const int64_t total = static_cast<int64_t>(pasts.size());
  const std::vector<float> q = RandomFloats(total * q_ld, 799, -2.0f, 2.0f);
  DeviceBuffer dq = Up(q), batched = Poisoned(total * q_ld), alone = Poisoned(total * q_ld);
  std::vector<std::vector<float>> k(pasts.size()), v(pasts.size());
  std::vector<DeviceBuffer> dk, dv;
  std::vector<AttentionArgs> args;
  for (size_t i = 0; i < pasts.size(); ++i) {
    k[i] = RandomFloats((pasts[i] + 1) * kv_ld, 900 + i, -2.0f, 2.0f);
    v[i] = RandomFloats((pasts[i] + 1) * kv_ld, 950 + i);
    dk.push_back(Up(k[i]));
    dv.push_back(Up(v[i]));
  }
  for (size_t i = 0; i < pasts.size(); ++i) {
    args.push_back({dq.floats() + i * q_ld, dk[i].floats(), dv[i].floats(),
                    batched.floats() + i * q_ld, 1, pasts[i], q_heads, kv_heads, hd, 0.0625f});
    b.Attention({dq.floats() + i * q_ld, dk[i].floats(), dv[i].floats(), alone.floats() + i * q_ld,
                 1, pasts[i], q_heads, kv_heads, hd, 0.0625f});
  }
  b.AttentionBatch(args);
  ASSERT_TRUE(b.Synchronize().ok()) << b.status();
  const std::vector<float> got = Down(batched, total * q_ld);
  EXPECT_TRUE(SameBits(got, Down(alone, total * q_ld)));
  for (size_t i = 0; i < pasts.size(); ++i) {
    std::vector<float> ref(q_ld);
    cpu_->Attention({q.data() + i * q_ld, k[i].data(), v[i].data(), ref.data(), 1, pasts[i],
                     q_heads, kv_heads, hd, 0.0625f});
    const std::vector<float> row(got.begin() + i * q_ld, got.begin() + (i + 1) * q_ld);
    EXPECT_LT(Measured(absl::StrCat("batched decode attention (variant 5) at ", pasts[i]),
                       RelErr(row, ref)),
              kBf16AttentionTolerance);
  }

  // A batch that mixes calls variant 5 takes with one it does not (two tokens: 16 rows a kv
  // head): the backend launches them apart, so the decode steps keep their bits.
  const std::vector<float> q2 = RandomFloats(2 * q_ld, 801, -2.0f, 2.0f);
  const std::vector<float> k2 = RandomFloats(102 * kv_ld, 802, -2.0f, 2.0f),
                           v2 = RandomFloats(102 * kv_ld, 803);
  DeviceBuffer dq2 = Up(q2), dk2 = Up(k2), dv2 = Up(v2), o2 = Poisoned(2 * q_ld),
               mixed = Poisoned(total * q_ld);
  std::vector<AttentionArgs> mixed_args;
  for (size_t i = 0; i < pasts.size(); ++i) {
    if (i == 2) {
      mixed_args.push_back({dq2.floats(), dk2.floats(), dv2.floats(), o2.floats(), 2, 100, q_heads,
                            kv_heads, hd, 0.0625f});
    }
    mixed_args.push_back(args[i]);
    mixed_args.back().out = mixed.floats() + i * q_ld;
  }
  const int64_t before_mixed = hip::AttentionDecodeMmaLaunches();
  b.AttentionBatch(mixed_args);
  ASSERT_TRUE(b.Synchronize().ok()) << b.status();
  EXPECT_TRUE(SameBits(Down(mixed, total * q_ld), got)) << "a batch with a two-token call";
  EXPECT_EQ(hip::AttentionDecodeMmaLaunches() - before_mixed, 2);  // The calls before and after.
  std::vector<float> ref2(2 * q_ld);
  cpu_->Attention(
      {q2.data(), k2.data(), v2.data(), ref2.data(), 2, 100, q_heads, kv_heads, hd, 0.0625f});
  EXPECT_LT(Measured("the two-token call of the mixed batch", RelErr(Down(o2, 2 * q_ld), ref2)),
            kReductionTolerance);

  // Ranges longer than four tiles: variant 3's blocks (no launch of variant 5's).
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> wide =
      HipKernelBackend::Create({.attention_split_keys = 256, .attention_decode_variant = 5});
  ASSERT_TRUE(wide.ok()) << wide.status();
  const int64_t before_wide = hip::AttentionDecodeMmaLaunches();
  (*wide)->AttentionBatch(args);
  ASSERT_TRUE((*wide)->Synchronize().ok()) << (*wide)->status();
  EXPECT_EQ(hip::AttentionDecodeMmaLaunches(), before_wide);
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

}  // namespace
}  // namespace cairn::infer
