// The HIP backend's products over bf16 weights against the CPU backend: the row kernel, the
// multi-row kernel and the matrix-unit row product (each row's bits independent of the others in
// the call), the bf16 GEMMs, the embedding gather, and weight matrices split into two parts (as
// the arena's pin boundaries split them). Skips without a device.

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
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
using testing::kBf16InputTolerance;
using testing::kReductionTolerance;
using testing::Measured;
using testing::RelErr;
using testing::SameBits;

// x with every value rounded to bf16 (nearest even; the values are finite), kept as floats: the
// inputs the matrix-unit row product multiplies with mma_rows_bf16_inputs.
std::vector<float> RoundedToBf16(std::vector<float> x) {
  for (float& v : x) v = WideOfBf16(Bf16BitsOf(v));
  return x;
}

// A bf16 matrix of two parts: rows [0, split) from `a`, the rest from `b`.
WeightMatrix TwoParts(const void* a, const void* b, int64_t split, int64_t rows, int64_t cols) {
  WeightMatrix w = WeightMatrix::Of(a, WeightType::kBF16, split, cols);
  w.parts[1] = {b, rows - split};
  w.num_parts = 2;
  return w;
}

// One backend created with `options` for each matrix-unit product variant (-1, 0, 1, 2): a
// fused path's test runs each against a backend with the path off.
std::vector<std::unique_ptr<HipKernelBackend>> EveryMmaVariant(HipKernelBackendOptions options) {
  std::vector<std::unique_ptr<HipKernelBackend>> backends;
  for (const int variant : {-1, 0, 1, 2}) {
    options.mma_rows_variant = variant;
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> b = HipKernelBackend::Create(options);
    EXPECT_TRUE(b.ok()) << b.status();
    if (b.ok()) backends.push_back(*std::move(b));
  }
  return backends;
}

TEST_F(HipKernelBackendTest, Bf16RowKernelHasTheBitsOfTheFp32KernelOverTheWidenedWeights) {
  // The row kernel serves bf16 weights with mma_rows off.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> row_kernel =
      HipKernelBackend::Create({.mma_rows = false});
  ASSERT_TRUE(row_kernel.ok()) << row_kernel.status();
  gpu_ = *std::move(row_kernel);
  // k = 70: the scalar path; k = 4096: 8-byte bf16 loads.
  for (const int64_t k : {int64_t{70}, int64_t{4096}}) {
    SCOPED_TRACE(::testing::Message() << "k=" << k);
    const int64_t m = 13, n = 203, split = 100;
    const std::vector<float> x = RandomFloats(m * k, 40);
    const RandomBf16 w = RandomBf16Values(n * k, 41);
    const std::vector<uint16_t> w1(w.bits.begin(), w.bits.begin() + split * k);
    const std::vector<uint16_t> w2(w.bits.begin() + split * k, w.bits.end());
    std::vector<float> ref(m * n);
    cpu_->MatMulRowsTyped(x.data(), m, k, TwoParts(w1.data(), w2.data(), split, n, k), ref.data(),
                          n, false);
    DeviceBuffer dx = Up(x), dw1 = Up(w1), dw2 = Up(w2), dwide = Up(w.wide);
    DeviceBuffer typed = Poisoned(m * n), wide = Poisoned(m * n), one = Poisoned(n);

    gpu_->MatMulRowsTyped(dx.floats(), m, k, TwoParts(dw1.data(), dw2.data(), split, n, k),
                          typed.floats(), n, false);
    gpu_->MatMulRows(dx.floats(), m, k, k, dwide.floats(), n, wide.floats(), n, false);
    gpu_->MatMulRowsTyped(dx.floats() + 5 * k, 1, k, TwoParts(dw1.data(), dw2.data(), split, n, k),
                          one.floats(), n, false);
    const std::vector<float> got = Down(typed, m * n);

    ASSERT_TRUE(gpu_->Synchronize().ok());
    EXPECT_TRUE(SameBits(got, Down(wide, m * n)));
    EXPECT_TRUE(
        SameBits(Down(one, n), std::vector<float>(got.begin() + 5 * n, got.begin() + 6 * n)));
    EXPECT_LT(Measured("bf16 matmul rows k=" + std::to_string(k), RelErr(got, ref)),
              kReductionTolerance);
  }
}

TEST_F(HipKernelBackendTest, MultiRowKernelHasTheBitsOfTheOneRowKernelForEveryRowCount) {
  // The row kernel (mma_rows and multi_row_decode off) gives the reference bits; the multi-row
  // kernel must give them for calls of 2 to 40 rows starting at any row, over bf16 and fp32
  // weights, with and without accumulation.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> one_row =
      HipKernelBackend::Create({.mma_rows = false});
  ASSERT_TRUE(one_row.ok()) << one_row.status();
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> multi =
      HipKernelBackend::Create({.mma_rows = false, .multi_row_decode = true});
  ASSERT_TRUE(multi.ok()) << multi.status();
  for (const int64_t k : {int64_t{70}, int64_t{4096}}) {
    SCOPED_TRACE(::testing::Message() << "k=" << k);
    const int64_t rows = 40, n = 203;
    const std::vector<float> x = RandomFloats(rows * k, 50), y0 = RandomFloats(rows * n, 52);
    const RandomBf16 w = RandomBf16Values(n * k, 51);
    const std::vector<float> ref = CpuRows(x, rows, w, n, k);
    DeviceBuffer dx = Up(x), dw = Up(w.bits), dwide = Up(w.wide), base = Poisoned(rows * n),
                 base_acc = Up(y0);
    // Two parts, the second starting at a column no block boundary falls on.
    const int64_t split = 77;
    const WeightMatrix wm =
        TwoParts(dw.data(), static_cast<const char*>(dw.data()) + split * k * 2, split, n, k);
    (*one_row)->MatMulRowsTyped(dx.floats(), rows, k, wm, base.floats(), n, false);
    (*one_row)->MatMulRowsTyped(dx.floats(), rows, k, wm, base_acc.floats(), n, true);
    ASSERT_TRUE((*one_row)->Synchronize().ok());
    const std::vector<float> expect = Down(base, rows * n), expect_acc = Down(base_acc, rows * n);
    EXPECT_LT(Measured("one-row layout k=" + std::to_string(k), RelErr(expect, ref)),
              kReductionTolerance);
    for (const int64_t m : {2, 3, 4, 5, 8, 9, 16, 17, 33, 40}) {
      SCOPED_TRACE(::testing::Message() << "m=" << m);
      const int64_t first = (rows - m) / 2;
      const auto slice = [&](const std::vector<float>& v) {
        return std::vector<float>(v.begin() + first * n, v.begin() + (first + m) * n);
      };
      DeviceBuffer typed = Poisoned(m * n), wide = Poisoned(m * n);
      DeviceBuffer acc = Up(slice(y0));
      (*multi)->MatMulRowsTyped(dx.floats() + first * k, m, k, wm, typed.floats(), n, false);
      (*multi)->MatMulRows(dx.floats() + first * k, m, k, k, dwide.floats(), n, wide.floats(), n,
                           false);
      (*multi)->MatMulRowsTyped(dx.floats() + first * k, m, k, wm, acc.floats(), n, true);
      ASSERT_TRUE((*multi)->Synchronize().ok());
      EXPECT_TRUE(SameBits(Down(typed, m * n), slice(expect)));
      EXPECT_TRUE(SameBits(Down(wide, m * n), slice(expect)));
      EXPECT_TRUE(SameBits(Down(acc, m * n), slice(expect_acc)));
    }
  }
}

TEST_F(HipKernelBackendTest, MmaRowProductMatchesCpuAndNoRowDependsOnTheOthers) {
  // The decode product over bf16 weights (mma_rows), inputs split exactly or rounded to bf16
  // (mma_rows_bf16_inputs, the default): within the fp32 tolerance of the CPU backend over the
  // same inputs (the rounded ones for the latter: the rounding is nearest even, and each product
  // of a bf16 input and a bf16 weight is exact), and a row's bits the same in calls of 1 to 40
  // rows starting at any row, with and without accumulation, run twice. n = 203: k cut into
  // segments (k = 4096, 4104: a last step past k; k = 12288) or not (k = 70: the scalar path);
  // n = 33000: one segment.
  for (const bool bf16_inputs : {false, true}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> mode =
        HipKernelBackend::Create({.mma_rows_bf16_inputs = bf16_inputs});
    ASSERT_TRUE(mode.ok()) << mode.status();
    HipKernelBackend* gpu = mode->get();
    for (const int64_t n : {int64_t{203}, int64_t{33000}}) {
      for (const int64_t k : {int64_t{70}, int64_t{4096}, int64_t{4104}, int64_t{12288}}) {
        if (n == 33000 && k != 4096) continue;
        SCOPED_TRACE(::testing::Message()
                     << "n=" << n << " k=" << k << " bf16 inputs " << bf16_inputs);
        const int64_t rows = 40, split = 77;
        const std::vector<float> x = RandomFloats(rows * k, 60), y0 = RandomFloats(rows * n, 62);
        const RandomBf16 w = RandomBf16Values(n * k, 61);
        const std::vector<float> ref = CpuRows(bf16_inputs ? RoundedToBf16(x) : x, rows, w, n, k);
        DeviceBuffer dx = Up(x), dw = Up(w.bits), base = Poisoned(rows * n), base_acc = Up(y0);
        const WeightMatrix wm =
            TwoParts(dw.data(), static_cast<const char*>(dw.data()) + split * k * 2, split, n, k);
        gpu->MatMulRowsTyped(dx.floats(), rows, k, wm, base.floats(), n, false);
        gpu->MatMulRowsTyped(dx.floats(), rows, k, wm, base_acc.floats(), n, true);
        ASSERT_TRUE(gpu->Synchronize().ok());
        const std::vector<float> expect = Down(base, rows * n),
                                 expect_acc = Down(base_acc, rows * n);
        const std::string name = std::string(bf16_inputs ? "mma rows (bf16 inputs)" : "mma rows") +
                                 " n=" + std::to_string(n) + " k=" + std::to_string(k);
        EXPECT_LT(Measured(name, RelErr(expect, ref)), kReductionTolerance);
        if (bf16_inputs) {
          EXPECT_LT(
              Measured(name + " vs unrounded inputs", RelErr(expect, CpuRows(x, rows, w, n, k))),
              kBf16InputTolerance);
        }
        for (const int64_t m : {1, 2, 3, 5, 8, 9, 16, 17, 33, 40}) {
          SCOPED_TRACE(::testing::Message() << "m=" << m);
          const int64_t first = (rows - m) / 3;
          const auto slice = [&](const std::vector<float>& v) {
            return std::vector<float>(v.begin() + first * n, v.begin() + (first + m) * n);
          };
          DeviceBuffer once = Poisoned(m * n), twice = Poisoned(m * n), acc = Up(slice(y0));
          gpu->MatMulRowsTyped(dx.floats() + first * k, m, k, wm, once.floats(), n, false);
          gpu->MatMulRowsTyped(dx.floats() + first * k, m, k, wm, twice.floats(), n, false);
          gpu->MatMulRowsTyped(dx.floats() + first * k, m, k, wm, acc.floats(), n, true);
          ASSERT_TRUE(gpu->Synchronize().ok());
          EXPECT_TRUE(SameBits(Down(once, m * n), slice(expect)));
          EXPECT_TRUE(SameBits(Down(twice, m * n), slice(expect)));
          EXPECT_TRUE(SameBits(Down(acc, m * n), slice(expect_acc)));
        }
      }
    }
  }
}

TEST_F(HipKernelBackendTest, MmaRowProductGivesTheSameBitsInTilesOf8AndOf16) {
  // Calls of 9 to 16 rows in tiles of 8 (the default) against tiles of 16 (the second
  // instruction set): the same bits, with and without accumulation, vector and scalar paths
  // (and calls of other sizes, which take the same tiles either way); inputs exact and rounded.
  for (const bool bf16_inputs : {false, true}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> of8 =
        HipKernelBackend::Create({.mma_rows_bf16_inputs = bf16_inputs});
    ASSERT_TRUE(of8.ok()) << of8.status();
    HipKernelBackend* gpu = of8->get();
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> of16 = HipKernelBackend::Create(
        {.mma_rows_bf16_inputs = bf16_inputs, .mma_rows_tiles_of_8 = false});
    ASSERT_TRUE(of16.ok()) << of16.status();
    for (const int64_t n : {int64_t{203}, int64_t{33000}}) {
      for (const int64_t k : {int64_t{70}, int64_t{4096}, int64_t{4104}}) {
        if (n == 33000 && k != 4096) continue;
        SCOPED_TRACE(::testing::Message()
                     << "n=" << n << " k=" << k << " bf16 inputs " << bf16_inputs);
        const int64_t rows = 40;
        const std::vector<float> x = RandomFloats(rows * k, 63), y0 = RandomFloats(rows * n, 65);
        const RandomBf16 w = RandomBf16Values(n * k, 64);
        DeviceBuffer dx = Up(x), dw = Up(w.bits);
        const WeightMatrix wm = WeightMatrix::Of(dw.data(), WeightType::kBF16, n, k);
        for (const int64_t m : {1, 8, 9, 13, 16, 17, 40}) {
          SCOPED_TRACE(::testing::Message() << "m=" << m);
          const std::vector<float> y0m(y0.begin(), y0.begin() + m * n);
          DeviceBuffer a = Poisoned(m * n), b = Poisoned(m * n), a_acc = Up(y0m), b_acc = Up(y0m);
          gpu->MatMulRowsTyped(dx.floats(), m, k, wm, a.floats(), n, false);
          gpu->MatMulRowsTyped(dx.floats(), m, k, wm, a_acc.floats(), n, true);
          (*of16)->MatMulRowsTyped(dx.floats(), m, k, wm, b.floats(), n, false);
          (*of16)->MatMulRowsTyped(dx.floats(), m, k, wm, b_acc.floats(), n, true);
          ASSERT_TRUE(gpu->Synchronize().ok()) << gpu->status();
          ASSERT_TRUE((*of16)->Synchronize().ok()) << (*of16)->status();
          const std::vector<float> got = Down(a, m * n);
          EXPECT_TRUE(SameBits(got, Down(b, m * n)));
          EXPECT_TRUE(SameBits(Down(a_acc, m * n), Down(b_acc, m * n)));
          EXPECT_EQ(std::count_if(got.begin(), got.end(), [](float v) { return std::isnan(v); }),
                    0);
        }
      }
    }
  }
}

TEST_F(HipKernelBackendTest, MmaRowProductGivesTheSameBitsInEveryVariant) {
  // Tiles of 8 rows loading three steps of k at a time with three blocks a multiprocessor
  // (mma_rows_variant 1), the variant chosen per call (-1) or one tile of 16 rows with both
  // sets' inputs loaded early for 9 to 16 rows (2), in tiles of 8 and of 16, against
  // variant 0: the same bits, with and without accumulation, at one segment and at several
  // (n = 33000 and 203), a last step past k (k = 4104), k = 12288 and the scalar path (k = 70),
  // rows starting inside the input; inputs exact and rounded to bf16, and with bf16 inputs the
  // inputs staged (rounded into the workspace first, mma_rows_staged_min_rows) in each variant,
  // and each variant with its weights prefetched into L2 (mma_rows_prefetch_k); the prefetching
  // and the staged backends load the weights streamed (stream_product_weights).
  EXPECT_FALSE(HipKernelBackend::Create({.mma_rows_variant = 3}).ok());
  EXPECT_FALSE(HipKernelBackend::Create({.mma_rows_variant = -2}).ok());
  for (const bool bf16_inputs : {false, true}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> registers = HipKernelBackend::Create(
        {.mma_rows_bf16_inputs = bf16_inputs, .mma_rows_variant = 0, .mma_rows_prefetch_k = 0});
    ASSERT_TRUE(registers.ok()) << registers.status();
    std::vector<std::unique_ptr<HipKernelBackend>> variants;
    for (const int variant : {1, -1, 2}) {
      for (const bool tiles_of_8 : {true, false}) {
        absl::StatusOr<std::unique_ptr<HipKernelBackend>> v =
            HipKernelBackend::Create({.mma_rows_bf16_inputs = bf16_inputs,
                                      .mma_rows_tiles_of_8 = tiles_of_8,
                                      .mma_rows_variant = variant});
        ASSERT_TRUE(v.ok()) << v.status();
        variants.push_back(*std::move(v));
        // Weights asked into L2 before the wait: part of a segment, and more than any has.
        v = HipKernelBackend::Create({.mma_rows_bf16_inputs = bf16_inputs,
                                      .mma_rows_tiles_of_8 = tiles_of_8,
                                      .mma_rows_variant = variant,
                                      .mma_rows_prefetch_k = variant == 2 ? 1 << 20 : 100,
                                      .stream_product_weights = 1});
        ASSERT_TRUE(v.ok()) << v.status();
        variants.push_back(*std::move(v));
        if (!bf16_inputs) continue;
        v = HipKernelBackend::Create({.mma_rows_bf16_inputs = true,
                                      .mma_rows_tiles_of_8 = tiles_of_8,
                                      .mma_rows_variant = variant,
                                      .mma_rows_staged_min_rows = 1,
                                      .stream_product_weights = 1});
        ASSERT_TRUE(v.ok()) << v.status();
        variants.push_back(*std::move(v));
      }
    }
    for (const int64_t n : {int64_t{203}, int64_t{33000}}) {
      for (const int64_t k : {int64_t{70}, int64_t{4096}, int64_t{4104}, int64_t{12288}}) {
        if (n == 33000 && k != 4096) continue;
        SCOPED_TRACE(::testing::Message()
                     << "n=" << n << " k=" << k << " bf16 inputs " << bf16_inputs);
        const int64_t rows = 40;
        const std::vector<float> x = RandomFloats(rows * k, 66), y0 = RandomFloats(rows * n, 67);
        const RandomBf16 w = RandomBf16Values(n * k, 68);
        DeviceBuffer dx = Up(x), dw = Up(w.bits);
        const WeightMatrix wm = WeightMatrix::Of(dw.data(), WeightType::kBF16, n, k);
        for (const int64_t m : {1, 2, 8, 9, 13, 16, 17, 40}) {
          SCOPED_TRACE(::testing::Message() << "m=" << m);
          const int64_t first = (rows - m) / 2;
          const std::vector<float> y0m(y0.begin(), y0.begin() + m * n);
          DeviceBuffer ref = Poisoned(m * n), ref_acc = Up(y0m);
          (*registers)->MatMulRowsTyped(dx.floats() + first * k, m, k, wm, ref.floats(), n, false);
          (*registers)
              ->MatMulRowsTyped(dx.floats() + first * k, m, k, wm, ref_acc.floats(), n, true);
          ASSERT_TRUE((*registers)->Synchronize().ok()) << (*registers)->status();
          const std::vector<float> expect = Down(ref, m * n), expect_acc = Down(ref_acc, m * n);
          EXPECT_EQ(
              std::count_if(expect.begin(), expect.end(), [](float v) { return std::isnan(v); }),
              0);
          for (size_t i = 0; i < variants.size(); ++i) {
            SCOPED_TRACE(::testing::Message() << "variant " << i);
            DeviceBuffer got = Poisoned(m * n), got_acc = Up(y0m);
            variants[i]->MatMulRowsTyped(dx.floats() + first * k, m, k, wm, got.floats(), n, false);
            variants[i]->MatMulRowsTyped(dx.floats() + first * k, m, k, wm, got_acc.floats(), n,
                                         true);
            ASSERT_TRUE(variants[i]->Synchronize().ok()) << variants[i]->status();
            EXPECT_TRUE(SameBits(Down(got, m * n), expect));
            EXPECT_TRUE(SameBits(Down(got_acc, m * n), expect_acc));
          }
        }
      }
    }
  }
}

// Ranges of a matrix's rows (WeightMatrix::RowRange, as the model's logits come in parts of the
// vocabulary) give the whole product's bits: the matrix-unit product cuts k by the whole
// matrix's columns (33000 x 4096: one segment; a range of 8250 alone would take four), in one
// part and across two, exact and bf16 inputs, one row and a batch of 16.
TEST_F(HipKernelBackendTest, MmaRowProductOfARowRangeGivesTheWholeProductsBits) {
  const int64_t n = 33000, k = 4096, split = 20000, rows = 16;
  const std::vector<float> x = RandomFloats(rows * k, 71);
  const RandomBf16 w = RandomBf16Values(n * k, 72);
  DeviceBuffer dx = Up(x), dw = Up(w.bits);
  const auto* base = static_cast<const uint16_t*>(dw.data());
  const WeightMatrix whole = TwoParts(base, base + split * k, split, n, k);
  for (const bool bf16_inputs : {false, true}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> b =
        HipKernelBackend::Create({.mma_rows_bf16_inputs = bf16_inputs});
    ASSERT_TRUE(b.ok()) << b.status();
    for (const int64_t m : {int64_t{1}, rows}) {
      SCOPED_TRACE(::testing::Message() << "m=" << m << " bf16 inputs " << bf16_inputs);
      DeviceBuffer all = Poisoned(m * n), parts = Poisoned(m * n);
      (*b)->MatMulRowsTyped(dx.floats(), m, k, whole, all.floats(), n, false);
      // Four ranges; the second crosses the parts' boundary.
      for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
               {0, 8192}, {8192, 24576}, {24576, 32768}, {32768, n}}) {
        (*b)->MatMulRowsTyped(dx.floats(), m, k, whole.RowRange(begin, end), parts.floats() + begin,
                              n, false);
      }
      ASSERT_TRUE((*b)->Synchronize().ok()) << (*b)->status();
      EXPECT_TRUE(SameBits(Down(parts, m * n), Down(all, m * n)));
    }
  }
}

TEST_F(HipKernelBackendTest, Bf16GemmMatchesCpuWithinTheInputRoundingOrExactlyWithFp32Inputs) {
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> fp32_inputs = HipKernelBackend::Create(
      {.bf16_gemm_inputs = false, .bf16_attention = false, .mma_rows_bf16_inputs = false});
  ASSERT_TRUE(fp32_inputs.ok()) << fp32_inputs.status();
  EXPECT_EQ((*fp32_inputs)->name(), "hip-fp32");
  struct Shape {
    int64_t m, k, n;
  };
  for (const Shape s :
       {Shape{1, 64, 33}, Shape{37, 70, 129}, Shape{300, 1024, 520}, Shape{64, 4096, 1000}}) {
    SCOPED_TRACE(::testing::Message() << "m=" << s.m << " k=" << s.k << " n=" << s.n);
    const int64_t split = s.n / 3;
    const std::vector<float> x = RandomFloats(s.m * s.k, 42);
    const std::vector<float> y0 = RandomFloats(s.m * s.n, 43);
    const RandomBf16 w = RandomBf16Values(s.n * s.k, 44);
    const std::vector<uint16_t> w1(w.bits.begin(), w.bits.begin() + split * s.k);
    const std::vector<uint16_t> w2(w.bits.begin() + split * s.k, w.bits.end());
    std::vector<float> ref = y0;
    cpu_->MatMulTransposedTyped(x.data(), s.m, s.k, TwoParts(w1.data(), w2.data(), split, s.n, s.k),
                                ref.data(), s.n, true);
    DeviceBuffer dx = Up(x), dw1 = Up(w1), dw2 = Up(w2), dy = Up(y0);
    const WeightMatrix dw = TwoParts(dw1.data(), dw2.data(), split, s.n, s.k);

    gpu_->MatMulTransposedTyped(dx.floats(), s.m, s.k, dw, dy.floats(), s.n, true);
    const std::vector<float> bf16_inputs = Down(dy, y0.size());
    ASSERT_TRUE(gpu_->Upload(dy.data(), y0.data(), y0.size() * sizeof(float)).ok());
    (*fp32_inputs)->MatMulTransposedTyped(dx.floats(), s.m, s.k, dw, dy.floats(), s.n, true);
    ASSERT_TRUE((*fp32_inputs)->Synchronize().ok());
    const std::vector<float> exact = Down(dy, y0.size());

    ASSERT_TRUE(gpu_->Synchronize().ok());
    const std::string shape = absl::StrCat(s.m, "x", s.k, "x", s.n);
    EXPECT_LT(Measured("bf16 gemm, bf16 inputs " + shape, RelErr(bf16_inputs, ref)),
              kBf16InputTolerance);
    EXPECT_LT(Measured("bf16 gemm, fp32 inputs " + shape, RelErr(exact, ref)), kReductionTolerance);
  }
}

TEST_F(HipKernelBackendTest, PinnedBf16GemmRowsDoNotDependOnTheOtherRows) {
  struct Shape {
    int64_t rows, k, n;
  };
  // The algorithm's reference row count, and an unaligned k (its own pinned algorithm).
  for (const Shape s : {Shape{GpuBlas::kPinnedAlgorithmRows, 4096, 1000}, Shape{300, 70, 129}}) {
    SCOPED_TRACE(::testing::Message() << "k=" << s.k << " n=" << s.n);
    const std::vector<float> x = RandomFloats(s.rows * s.k, 45);
    const RandomBf16 w = RandomBf16Values(s.n * s.k, 46);
    DeviceBuffer dx = Up(x), dw = Up(w.bits), all = Poisoned(s.rows * s.n);
    const WeightMatrix wm = WeightMatrix::Of(dw.data(), WeightType::kBF16, s.n, s.k);
    gpu_->MatMulTransposedTyped(dx.floats(), s.rows, s.k, wm, all.floats(), s.n, false);
    const std::vector<float> together = Down(all, s.rows * s.n);
    ASSERT_TRUE(gpu_->Synchronize().ok());

    // Batches of 1, 2, 7, 64 and 129 rows starting at row 3 give the bits of those rows in the
    // full call.
    for (const int64_t m : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{64}, int64_t{129}}) {
      DeviceBuffer part = Poisoned(m * s.n);
      gpu_->MatMulTransposedTyped(dx.floats() + 3 * s.k, m, s.k, wm, part.floats(), s.n, false);
      EXPECT_TRUE(SameBits(
          Down(part, m * s.n),
          std::vector<float>(together.begin() + 3 * s.n, together.begin() + (3 + m) * s.n)))
          << "m=" << m;
    }
    ASSERT_TRUE(gpu_->Synchronize().ok());
  }
}

TEST_F(HipKernelBackendTest, ProductsOverANormsRoundedOutputGiveTheBitsOfTheirFp32Rows) {
  // The norms, SiLU-mul and SigmoidMul also write their outputs rounded to bf16, and the products
  // and GEMMs that read those rows load the rounded copy (round_product_inputs_max_bytes): against
  // a backend that never rounds ahead, the same bits, for rows starting inside the output, one row
  // (read only where round_product_inputs_min_rows allows), 9, 13 and 40 rows, the GEMM; after an
  // operation or an upload rewrites the rows, the products read the new values.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> plain =
      HipKernelBackend::Create({.round_product_inputs_max_bytes = 0});
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> one_row =
      HipKernelBackend::Create({.round_product_inputs_min_rows = 1});
  ASSERT_TRUE(one_row.ok()) << one_row.status();
  const int64_t rows = 40, k = 4096, n = 203, heads = 32, head_dim = 128;
  const std::vector<float> x = RandomFloats(rows * k, 70), norm_w = RandomFloats(k, 71),
                           gu = RandomFloats(rows * 2 * k, 72), z = RandomFloats(rows * 2 * k, 73),
                           head_w = RandomFloats(head_dim, 74), fresh = RandomFloats(rows * k, 75);
  const RandomBf16 w = RandomBf16Values(n * k, 76);
  DeviceBuffer dx = Up(x), dnw = Up(norm_w), dgu = Up(gu), dz = Up(z), dhw = Up(head_w),
               dw = Up(w.bits);
  const WeightMatrix wm = WeightMatrix::Of(dw.data(), WeightType::kBF16, n, k);
  constexpr int kOuts = 9;
  std::vector<std::vector<float>> got[3];
  for (int b = 0; b < 3; ++b) {
    HipKernelBackend& be = b == 0 ? **plain : b == 1 ? *gpu_ : **one_row;
    DeviceBuffer y = Poisoned(rows * k), act = Poisoned(rows * k), yh = Poisoned(rows * k);
    std::vector<DeviceBuffer> outs;
    for (int i = 0; i < kOuts; ++i) outs.push_back(Poisoned(rows * n));
    be.RmsNorm(dx.floats(), rows, k, dnw.floats(), 1e-6f, false, y.floats());
    be.MatMulRowsTyped(y.floats() + 3 * k, 13, k, wm, outs[0].floats(), n, false);
    be.MatMulRowsTyped(y.floats() + 39 * k, 1, k, wm, outs[1].floats(), n, false);
    be.MatMulTransposedTyped(y.floats(), rows, k, wm, outs[2].floats(), n, false);
    be.SigmoidMul(y.floats(), dx.floats(), rows * k);  // Rewrites y in place, rounded.
    be.MatMulRowsTyped(y.floats(), 16, k, wm, outs[3].floats(), n, false);
    be.L2Normalize(y.floats(), rows, k, 1e-6f, 1.0f);  // Rewrites y in place, not rounded.
    be.MatMulRowsTyped(y.floats(), 16, k, wm, outs[8].floats(), n, false);
    be.SiluMul(dgu.floats(), 2 * k, dgu.floats() + k, 2 * k, 16, k, act.floats());
    be.MatMulRowsTyped(act.floats(), 16, k, wm, outs[4].floats(), n, false);
    be.GatedRmsNormHeads(dx.floats(), dz.floats(), 9, heads, head_dim, 2 * k, dhw.floats(), 1e-6f,
                         yh.floats());
    be.MatMulRowsTyped(yh.floats(), 9, k, wm, outs[5].floats(), n, false);
    be.RmsNorm(dx.floats(), rows, k, dnw.floats(), 1e-6f, true, y.floats());
    ASSERT_TRUE(be.Upload(y.data(), fresh.data(), 8 * k * sizeof(float)).ok());
    be.MatMulRowsTyped(y.floats(), 16, k, wm, outs[6].floats(), n, false);
    be.MatMulTransposedTyped(y.floats(), rows, k, wm, outs[7].floats(), n, false);
    ASSERT_TRUE(be.Synchronize().ok()) << be.status();
    for (int i = 0; i < kOuts; ++i) got[b].push_back(Down(outs[i], rows * n));
  }
  EXPECT_EQ((*plain)->rounded_input_reads(), 0);
  // The first three products (the one-row product only from one row) and the sigmoid's, the
  // SiLU-mul's and the gated norm's read rounded copies.
  EXPECT_EQ(gpu_->rounded_input_reads(), 5);
  EXPECT_EQ((*one_row)->rounded_input_reads(), 6);
  for (int i = 0; i < kOuts; ++i) {
    SCOPED_TRACE(::testing::Message() << "product " << i);
    EXPECT_TRUE(SameBits(got[1][i], got[0][i]));
    EXPECT_TRUE(SameBits(got[2][i], got[0][i]));
  }
}

TEST_F(HipKernelBackendTest, FusedGateUpSiluGivesTheBitsOfTheProductThenSiluMul) {
  // MatMulRowsSiluMul in one launch (fuse_gate_up_silu) against the product into gate/up rows
  // then SiluMul: the same activation bits, over fp32 inputs and over a norm's rounded copy, in
  // every product variant, for widths of one and of many column tiles and the weights in two
  // parts; a down product over the activation (reading its rounded copy) gives the same bits
  // too. The fused launch leaves the caller's gate/up scratch unwritten; shapes it does not take
  // fall back to the two calls.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> apart =
      HipKernelBackend::Create({.fuse_gate_up_silu = false});
  ASSERT_TRUE(apart.ok()) << apart.status();
  const std::vector<std::unique_ptr<HipKernelBackend>> fused = EveryMmaVariant({});
  ASSERT_EQ(fused.size(), 4u);
  const int64_t rows = 40, k = 2048, d = 520;
  const std::vector<float> x = RandomFloats(rows * k, 80), norm_w = RandomFloats(k, 81);
  DeviceBuffer dx = Up(x), dnw = Up(norm_w);
  for (const int64_t width : {int64_t{8}, int64_t{1032}}) {
    const RandomBf16 gu_w = RandomBf16Values(2 * width * k, 82),
                     down_w = RandomBf16Values(d * width, 83);
    DeviceBuffer dgu = Up(gu_w.bits), ddown = Up(down_w.bits);
    // The gate/up matrix in two parts, split inside the gate half.
    const WeightMatrix gu =
        TwoParts(dgu.data(), static_cast<const uint16_t*>(dgu.data()) + 3 * k, 3, 2 * width, k);
    const WeightMatrix down = WeightMatrix::Of(ddown.data(), WeightType::kBF16, d, width);
    for (const int64_t m : {1, 4, 9, 16, 33}) {
      for (const bool norm_first : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "width=" << width << " m=" << m << " after a norm " << norm_first);
        std::vector<std::vector<float>> acts, outs;
        for (size_t b = 0; b <= fused.size(); ++b) {
          HipKernelBackend& be = b == 0 ? **apart : *fused[b - 1];
          DeviceBuffer xn = Poisoned(rows * k), scratch = Poisoned(rows * 2 * width),
                       act = Poisoned(rows * width), out = Poisoned(rows * d);
          const float* in = dx.floats();
          if (norm_first) {
            be.RmsNorm(dx.floats(), rows, k, dnw.floats(), 1e-6f, false, xn.floats());
            in = xn.floats();
          }
          be.MatMulRowsSiluMul(in + 2 * k, m, k, gu, scratch.floats(), act.floats());
          be.MatMulRowsTyped(act.floats(), m, width, down, out.floats(), d, false);
          ASSERT_TRUE(be.Synchronize().ok()) << be.status();
          acts.push_back(Down(act, rows * width));
          outs.push_back(Down(out, rows * d));
          // The fused launch never writes the gate/up rows.
          const std::vector<float> g = Down(scratch, rows * 2 * width);
          EXPECT_EQ(std::count_if(g.begin(), g.end(), [](float v) { return !std::isnan(v); }),
                    b == 0 ? m * 2 * width : 0);
        }
        for (size_t b = 1; b < acts.size(); ++b) {
          EXPECT_TRUE(SameBits(acts[b], acts[0])) << "variant backend " << b;
          EXPECT_TRUE(SameBits(outs[b], outs[0])) << "variant backend " << b;
        }
      }
    }
  }
  // Shapes the one launch does not take (k not a multiple of 8, inputs not 16-byte aligned)
  // take the two calls on every backend: the same bits, the scratch written.
  const int64_t k2 = 70, width2 = 16, m2 = 4;
  const std::vector<float> x2 = RandomFloats(8 * k2 + 1, 84);
  const RandomBf16 w2 = RandomBf16Values(2 * width2 * k2, 85);
  DeviceBuffer dx2 = Up(x2), dw2 = Up(w2.bits);
  const WeightMatrix gu2 = WeightMatrix::Of(dw2.data(), WeightType::kBF16, 2 * width2, k2);
  for (const bool unaligned : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "k=" << k2 << " unaligned inputs " << unaligned);
    std::vector<std::vector<float>> acts;
    for (size_t b = 0; b <= fused.size(); ++b) {
      HipKernelBackend& be = b == 0 ? **apart : *fused[b - 1];
      DeviceBuffer scratch = Poisoned(m2 * 2 * width2), act = Poisoned(m2 * width2);
      be.MatMulRowsSiluMul(dx2.floats() + (unaligned ? 1 : 0), m2, k2, gu2, scratch.floats(),
                           act.floats());
      ASSERT_TRUE(be.Synchronize().ok()) << be.status();
      acts.push_back(Down(act, m2 * width2));
      const std::vector<float> g = Down(scratch, m2 * 2 * width2);
      EXPECT_EQ(std::count_if(g.begin(), g.end(), [](float v) { return std::isnan(v); }), 0);
    }
    for (size_t b = 1; b < acts.size(); ++b) EXPECT_TRUE(SameBits(acts[b], acts[0]));
  }
}

TEST_F(HipKernelBackendTest, FusedProductConvGivesTheBitsOfTheProductThenTheConv) {
  // MatMulRowsCausalConv in one launch (fuse_conv_product) against the product then
  // CausalConvSiluBatch: the same product rows, conv outputs and advanced conv states, two
  // steps in a row (the second reads the state the first wrote), over fp32 inputs and over a
  // norm's rounded copy, in every product variant, for 1 to 16 rows, conv widths that end
  // inside a column tile and in the matrix's second part, and 4, 2 and 1 taps. Calls it does
  // not take (17 rows, a call of two tokens, an input that is not the product's row) take the
  // two calls, with the same results.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> apart =
      HipKernelBackend::Create({.fuse_conv_product = false});
  ASSERT_TRUE(apart.ok()) << apart.status();
  const std::vector<std::unique_ptr<HipKernelBackend>> fused = EveryMmaVariant({});
  ASSERT_EQ(fused.size(), 4u);
  const int64_t rows = 20, k = 512, n = 360;
  const std::vector<float> x = RandomFloats(rows * k, 90), norm_w = RandomFloats(k, 91);
  const RandomBf16 w = RandomBf16Values(n * k, 92);
  DeviceBuffer dx = Up(x), dnw = Up(norm_w), dw = Up(w.bits);
  const WeightMatrix wm =
      TwoParts(dw.data(), static_cast<const uint16_t*>(dw.data()) + 200 * k, 200, n, k);
  const std::vector<float> taps = RandomFloats(n * 4, 93);
  DeviceBuffer dtaps = Up(taps);
  struct Case {
    int64_t m;
    int64_t channels;
    int kernel;
    int tokens;        // Tokens a call (1: the fused launch's calls).
    bool other_input;  // A call's input is not the product's row.
  };
  const std::vector<Case> cases = {
      {1, 264, 4, 1, false},  {3, 264, 4, 1, false},  {8, 8, 4, 1, false},
      {9, 212, 2, 1, false},  {16, 360, 4, 1, false}, {5, 100, 1, 1, false},
      {17, 264, 4, 1, false}, {4, 264, 4, 2, false},  {4, 264, 4, 1, true}};
  for (const Case& c : cases) {
    for (const bool norm_first : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "m=" << c.m << " channels=" << c.channels << " taps="
                                        << c.kernel << " tokens=" << c.tokens << " other input "
                                        << c.other_input << " after a norm " << norm_first);
      const int64_t hist = c.kernel - 1;
      const int64_t calls = c.m / c.tokens;
      const std::vector<float> state0 =
          RandomFloats(std::max<int64_t>(1, calls * hist * c.channels), 94);
      std::vector<std::vector<float>> ys, outs, states;
      for (size_t b = 0; b <= fused.size(); ++b) {
        HipKernelBackend& be = b == 0 ? **apart : *fused[b - 1];
        DeviceBuffer xn = Poisoned(rows * k), y = Poisoned(rows * n), other = Up(x),
                     out = Poisoned(c.m * c.channels), state = Up(state0);
        for (int step = 0; step < 2; ++step) {
          const float* in = dx.floats() + step * k;
          if (norm_first) {
            be.RmsNorm(dx.floats() + step * k, rows - 1, k, dnw.floats(), 1e-6f, false,
                       xn.floats());
            in = xn.floats();
          }
          std::vector<CausalConvArgs> convs;
          for (int64_t i = 0; i < calls; ++i) {
            const float* conv_in = y.floats() + i * c.tokens * n;
            if (c.other_input && i == 1) conv_in = other.floats();
            convs.push_back({conv_in, n, c.tokens, c.channels, dtaps.floats(), c.kernel,
                             state.floats() + i * hist * c.channels,
                             out.floats() + i * c.tokens * c.channels});
          }
          be.MatMulRowsCausalConv(in, c.m, k, wm, y.floats(), n, convs);
        }
        ASSERT_TRUE(be.Synchronize().ok()) << be.status();
        ys.push_back(Down(y, rows * n));
        outs.push_back(Down(out, c.m * c.channels));
        states.push_back(Down(state, std::max<int64_t>(1, calls * hist * c.channels)));
      }
      for (size_t b = 1; b < ys.size(); ++b) {
        EXPECT_TRUE(SameBits(ys[b], ys[0])) << "variant backend " << b;
        EXPECT_TRUE(SameBits(outs[b], outs[0])) << "variant backend " << b;
        EXPECT_TRUE(SameBits(states[b], states[0])) << "variant backend " << b;
      }
      // The product's rows are written, the rows past m not.
      EXPECT_EQ(std::count_if(ys[0].begin(), ys[0].end(), [](float v) { return !std::isnan(v); }),
                c.m * n);
      if (c.kernel > 1) {
        EXPECT_FALSE(SameBits(states[0], state0));
      }
    }
  }
}

TEST_F(HipKernelBackendTest, Bf16EmbeddingGatherWidensExactly) {
  const int64_t vocab = 50, dim = 70;
  const RandomBf16 table = RandomBf16Values(vocab * dim, 47);
  const std::vector<int32_t> ids = {3, 0, 49, 3};
  DeviceBuffer dt = Up(table.bits), out = Poisoned(ids.size() * dim);
  absl::StatusOr<DeviceBuffer> dids = gpu_->Allocate(ids.size() * sizeof(int32_t));
  ASSERT_TRUE(dids.ok());
  ASSERT_TRUE(gpu_->Upload(dids->data(), ids.data(), ids.size() * sizeof(int32_t)).ok());

  gpu_->EmbeddingGatherTyped(WeightMatrix::Of(dt.data(), WeightType::kBF16, vocab, dim),
                             static_cast<const int32_t*>(dids->data()), ids.size(), out.floats());

  std::vector<float> expected;
  for (int32_t id : ids) {
    expected.insert(expected.end(), table.wide.begin() + id * dim,
                    table.wide.begin() + (id + 1) * dim);
  }
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_TRUE(SameBits(Down(out, expected.size()), expected));
}

TEST_F(HipKernelBackendTest, AnF16MatrixIsRefused) {
  DeviceBuffer buf = Poisoned(1024);

  gpu_->MatMulRowsTyped(buf.floats(), 1, 16, WeightMatrix::Of(buf.data(), WeightType::kF16, 4, 16),
                        buf.floats() + 512, 4, false);

  EXPECT_FALSE(gpu_->AcceptsWeightType(WeightType::kF16));
  EXPECT_THAT(gpu_->Synchronize(), cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn::infer
