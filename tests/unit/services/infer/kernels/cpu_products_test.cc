// The CPU backend's products: the row-invariant product, typed (bf16) weights in parts and in
// row tiles, and the MoE layer's routed experts.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#include "services/infer/kernels/row_tiles.h"
#include "services/infer/kernels/scratch_arena.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/kernels/cpu_backend_test_util.h"

namespace cairn::infer {
namespace {

using testing::CpuKernelBackendTest;
using testing::MaxAbsDiff;
using testing::Random;
using testing::ToBf16;

TEST_F(CpuKernelBackendTest, MatMulRowsRowsDoNotDependOnTheirNeighbours) {
  const int64_t k = 203, n = 130;  // Odd sizes: a remainder past the 16-lane loop.
  const std::vector<float> x = Random(5 * k, 21);
  const std::vector<float> w = Random(n * k, 22);
  std::vector<float> all(5 * n), one(n), gemm(5 * n);

  backend_->MatMulRows(x.data(), 5, k, k, w.data(), n, all.data(), n, false);
  backend_->MatMulTransposed(x.data(), 5, k, k, w.data(), n, gemm.data(), n, false);

  for (int64_t r = 0; r < 5; ++r) {
    backend_->MatMulRows(x.data() + r * k, 1, k, k, w.data(), n, one.data(), n, false);
    EXPECT_EQ(std::memcmp(one.data(), all.data() + r * n, n * sizeof(float)), 0) << "row " << r;
  }
  for (size_t i = 0; i < all.size(); ++i) EXPECT_NEAR(all[i], gemm[i], 1e-4f) << i;
}

// A bf16 matrix of n rows split into three parts at `cut0` and `cut1`.
WeightMatrix ThreeParts(const std::vector<uint16_t>& w, int64_t k, int64_t cut0, int64_t cut1,
                        int64_t n) {
  WeightMatrix m;
  m.type = WeightType::kBF16;
  m.cols = k;
  m.parts[0] = {w.data(), cut0};
  m.parts[1] = {w.data() + cut0 * k, cut1 - cut0};
  m.parts[2] = {w.data() + cut1 * k, n - cut1};
  m.num_parts = 3;
  return m;
}

TEST_F(CpuKernelBackendTest, TypedRowProductIsTheFp32OneOnTheWidenedWeights) {
  const int64_t k = 203, n = 150, m = 5;
  const std::vector<float> x = Random(m * k, 31);
  std::vector<float> wide = Random(n * k, 32);
  const std::vector<uint16_t> narrow = ToBf16(wide);
  std::vector<float> typed(m * n, 1.0f), fp32(m * n, 1.0f);

  backend_->MatMulRowsTyped(x.data(), m, k, ThreeParts(narrow, k, 64, 70, n), typed.data(), n,
                            true);
  backend_->MatMulRows(x.data(), m, k, k, wide.data(), n, fp32.data(), n, true);

  EXPECT_EQ(std::memcmp(typed.data(), fp32.data(), typed.size() * sizeof(float)), 0);
}

TEST_F(CpuKernelBackendTest, TypedGemmMatchesTheFp32GemmOnTheWidenedWeights) {
  const int64_t k = 96, n = 70;
  for (int64_t m : {3, 40}) {  // The row kernel below kGemmMinRows rows, the GEMM above.
    const std::vector<float> x = Random(m * k, 41);
    std::vector<float> wide = Random(n * k, 42);
    const std::vector<uint16_t> narrow = ToBf16(wide);
    std::vector<float> typed(m * n, 1.0f), fp32(m * n, 1.0f);

    backend_->MatMulTransposedTyped(x.data(), m, k, ThreeParts(narrow, k, 10, 33, n), typed.data(),
                                    n, true);
    backend_->MatMulTransposed(x.data(), m, k, k, wide.data(), n, fp32.data(), n, true);

    EXPECT_LT(MaxAbsDiff(typed, fp32), 1e-4f) << "m " << m;
  }
}

TEST_F(CpuKernelBackendTest, TypedGatherWidensRows) {
  std::vector<float> wide = Random(3 * 20, 51);
  const std::vector<uint16_t> narrow = ToBf16(wide);
  const int32_t ids[] = {2, 0};
  std::vector<float> rows(2 * 20);

  backend_->EmbeddingGatherTyped(WeightMatrix::Of(narrow.data(), WeightType::kBF16, 3, 20), ids, 2,
                                 rows.data());

  EXPECT_EQ(std::vector<float>(rows.begin(), rows.begin() + 20),
            std::vector<float>(wide.begin() + 40, wide.end()));
  EXPECT_EQ(std::vector<float>(rows.begin() + 20, rows.end()),
            std::vector<float>(wide.begin(), wide.begin() + 20));
}

// `w` (bf16, row-major parts) with every part packed into row tiles, in `storage`.
WeightMatrix PackedTiles(const WeightMatrix& w, std::vector<std::vector<char>>& storage) {
  WeightMatrix out = w;
  out.layout = WeightLayout::kRowTiles;
  for (int i = 0; i < w.num_parts; ++i) {
    storage.emplace_back(static_cast<size_t>(RowTileElements(w.parts[i].rows, w.cols) * 2));
    PackRowTiles(w.type, w.parts[i].data, w.parts[i].rows, w.cols, storage.back().data());
    out.parts[i].data = storage.back().data();
  }
  return out;
}

TEST_F(CpuKernelBackendTest, RowTileMatricesGiveTheRowMajorBits) {
  // Parts of 1, 63 and 86 rows: tiles cut short at a part's end and blocks that end inside a
  // part. The row kernel up to kGemmMinRows input rows, the GEMM above.
  const int64_t k = 203, n = 150;
  std::vector<float> wide = Random(n * k, 61);
  const std::vector<uint16_t> narrow = ToBf16(wide);
  const WeightMatrix rows = ThreeParts(narrow, k, 1, 64, n);
  std::vector<std::vector<char>> storage;
  const WeightMatrix tiles = PackedTiles(rows, storage);
  for (int64_t m : {1, 4, 5, 16, 40}) {
    const std::vector<float> x = Random(m * k, 62 + m);
    std::vector<float> a(m * n, 1.0f), b(m * n, 1.0f), c(m * n, 1.0f), d(m * n, 1.0f);
    backend_->MatMulRowsTyped(x.data(), m, k, rows, a.data(), n, true);
    backend_->MatMulRowsTyped(x.data(), m, k, tiles, b.data(), n, true);
    backend_->MatMulTransposedTyped(x.data(), m, k, rows, c.data(), n, true);
    backend_->MatMulTransposedTyped(x.data(), m, k, tiles, d.data(), n, true);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "m " << m;
    EXPECT_EQ(std::memcmp(c.data(), d.data(), c.size() * sizeof(float)), 0) << "m " << m;
  }
  const int32_t ids[] = {0, 1, 63, 64, 149, 2};
  std::vector<float> from_rows(6 * k), from_tiles(6 * k);
  backend_->EmbeddingGatherTyped(rows, ids, 6, from_rows.data());
  backend_->EmbeddingGatherTyped(tiles, ids, 6, from_tiles.data());
  EXPECT_EQ(from_rows, from_tiles);
}

// Every GEMM split (by input rows, by weight rows, and auto's choice) gives the fp32 product of
// the widened weights, the same bits run to run, and agrees with the others: fp32 and bf16
// weights, parts, row tiles, a part of more rows than one widened chunk holds, thread counts
// that do not divide the blocks.
TEST(CpuGemmSplitTest, EverySplitGivesTheProductOnEveryLayout) {
  const int64_t k = 64;
  // Part 0 alone outgrows one chunk of widened weights (2^21 floats: 32768 rows of 64).
  const int64_t n = 33000 + 7 + 90;
  std::vector<float> wide = Random(n * k, 71);
  const std::vector<uint16_t> narrow = ToBf16(wide);
  const WeightMatrix parts = ThreeParts(narrow, k, 33000, 33007, n);
  std::vector<std::vector<char>> storage;
  const WeightMatrix tiles = PackedTiles(parts, storage);
  const WeightMatrix fp32 = WeightMatrix::Of(wide.data(), WeightType::kF32, n, k);
  for (const int64_t m : {int64_t{17}, int64_t{70}}) {
    const std::vector<float> x = Random(m * k, 72 + m);
    std::vector<float> naive(m * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += static_cast<double>(x[i * k + p]) * wide[j * k + p];
        naive[i * n + j] = static_cast<float>(sum);
      }
    }
    std::vector<float> first;
    for (const char* split : {"rows", "weights", "auto"}) {
      for (const int threads : {1, 2, 3}) {
        absl::StatusOr<std::unique_ptr<CpuKernelBackend>> backend =
            CpuKernelBackend::Create({.threads = threads, .gemm_split = split});
        ASSERT_TRUE(backend.ok()) << backend.status();
        for (const WeightMatrix* w : {&fp32, &parts, &tiles}) {
          SCOPED_TRACE(::testing::Message()
                       << split << ", " << threads << " threads, m " << m << ", layout "
                       << (w == &fp32    ? "fp32"
                           : w == &parts ? "bf16 parts"
                                         : "row tiles"));
          std::vector<float> y(m * n, 1.0f), again(m * n, 1.0f);
          (*backend)->MatMulTransposedTyped(x.data(), m, k, *w, y.data(), n, false);
          (*backend)->MatMulTransposedTyped(x.data(), m, k, *w, again.data(), n, false);
          EXPECT_LT(MaxAbsDiff(y, naive), 1e-4f);
          EXPECT_EQ(std::memcmp(y.data(), again.data(), y.size() * sizeof(float)), 0);
          if (first.empty()) first = y;
          EXPECT_LT(MaxAbsDiff(y, first), 1e-5f);
          // Accumulating adds the product to what is there.
          std::vector<float> twice = y;
          (*backend)->MatMulTransposedTyped(x.data(), m, k, *w, twice.data(), n, true);
          for (size_t i = 0; i < y.size(); i += 997) EXPECT_NEAR(twice[i], 2 * y[i], 1e-4f) << i;
        }
      }
    }
  }
}

TEST(CpuKernelBackendCreateTest, GemmSplitIsAutoRowsOrWeights) {
  for (const char* bad : {"", "columns", "Rows"}) {
    EXPECT_THAT(CpuKernelBackend::Create({.threads = 1, .gemm_split = bad}).status(),
                cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  for (const char* good : {"auto", "rows", "weights"}) {
    EXPECT_TRUE(CpuKernelBackend::Create({.threads = 1, .gemm_split = good}).ok()) << good;
  }
}

TEST(CpuKernelBackendCreateTest, RowTilesAreAskedForNarrowTypedWeightsOnly) {
  CpuKernelBackendOptions options;
  options.threads = 1;
  auto on = CpuKernelBackend::Create(options);
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE((*on)->TakesRowTiles(WeightType::kBF16));
  EXPECT_TRUE((*on)->TakesRowTiles(WeightType::kF16));
  EXPECT_FALSE((*on)->TakesRowTiles(WeightType::kF32));
  options.row_tiles = false;
  auto off = CpuKernelBackend::Create(options);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->TakesRowTiles(WeightType::kBF16));
  options.row_tiles = true;
  options.typed_weights = false;
  auto untyped = CpuKernelBackend::Create(options);
  ASSERT_TRUE(untyped.ok());
  EXPECT_FALSE((*untyped)->TakesRowTiles(WeightType::kBF16));
}

TEST_F(CpuKernelBackendTest, MoeExpertsIsEachTokensPicksInAscendingExpertOrder) {
  struct Shape {
    int64_t tokens, hidden, width;
    int experts, top_k;
    float hot;  // Added to experts 1 and 5's logits: every token picks them.
  };
  for (const Shape& s :
       {Shape{1, 24, 8, 6, 3, 0.0f}, Shape{9, 16, 12, 8, 4, 8.0f}, Shape{70, 16, 8, 4, 2, 0.0f}}) {
    SCOPED_TRACE(s.tokens);
    const std::vector<float> x = Random(s.tokens * s.hidden, 71);
    std::vector<float> logits = Random(s.tokens * s.experts, 72, -3.0f, 3.0f);
    for (int64_t t = 0; t < s.tokens; ++t) {
      logits[t * s.experts + 1] += s.hot;
      logits[t * s.experts + 5 % s.experts] += s.hot;
    }
    const std::vector<float> gate_up = Random(s.experts * 2 * s.width * s.hidden, 73);
    const std::vector<float> down = Random(s.experts * s.hidden * s.width, 74);
    std::vector<WeightMatrix> gu, dn;
    for (int e = 0; e < s.experts; ++e) {
      gu.push_back(WeightMatrix::Of(gate_up.data() + e * 2 * s.width * s.hidden, WeightType::kF32,
                                    2 * s.width, s.hidden));
      dn.push_back(WeightMatrix::Of(down.data() + e * s.hidden * s.width, WeightType::kF32,
                                    s.hidden, s.width));
    }
    const std::vector<float> out0 = Random(s.tokens * s.hidden, 75);
    std::vector<float> got = out0;
    MoeExpertsArgs a;
    a.x = x.data();
    a.logits = logits.data();
    a.out = got.data();
    a.tokens = s.tokens;
    a.hidden = s.hidden;
    a.width = s.width;
    a.experts = s.experts;
    a.top_k = s.top_k;
    a.renormalise = true;
    a.gate_up = gu.data();
    a.down = dn.data();
    a.row_invariant = true;
    ScratchArena scratch(backend_->memory());

    CAIRN_ASSERT_OK(backend_->MoeExperts(a, scratch));

    std::vector<float> want = out0;
    std::vector<int32_t> ids(s.top_k);
    std::vector<float> w(s.top_k), g(2 * s.width), act(s.width), y(s.hidden);
    for (int64_t t = 0; t < s.tokens; ++t) {
      backend_->MoeRoute(logits.data() + t * s.experts, 1, s.experts, s.top_k, true, ids.data(),
                         w.data());
      std::vector<int> order(s.top_k);
      for (int j = 0; j < s.top_k; ++j) order[j] = j;
      std::sort(order.begin(), order.end(), [&](int i, int j) { return ids[i] < ids[j]; });
      for (int j : order) {
        backend_->MatMulRowsTyped(x.data() + t * s.hidden, 1, s.hidden, gu[ids[j]], g.data(),
                                  2 * s.width, false);
        backend_->SiluMul(g.data(), 2 * s.width, g.data() + s.width, 2 * s.width, 1, s.width,
                          act.data());
        backend_->MatMulRowsTyped(act.data(), 1, s.width, dn[ids[j]], y.data(), s.hidden, false);
        for (int64_t c = 0; c < s.hidden; ++c) want[t * s.hidden + c] += w[j] * y[c];
      }
    }
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  }
}

TEST_F(CpuKernelBackendTest, MoeExpertsReadsLogitsAndGatesRowsApartAndRunsTheSharedExpert) {
  // The router's logits and the shared gate from one product: token rows experts + 1 apart, the
  // gate last. The same bits as the packed arrays; a stride below the experts is refused.
  const int64_t tokens = 5, hidden = 16, width = 8;
  const int experts = 6, top_k = 2;
  const std::vector<float> x = Random(tokens * hidden, 81);
  const std::vector<float> both = Random(tokens * (experts + 1), 82, -3.0f, 3.0f);
  std::vector<float> logits, gates;
  for (int64_t t = 0; t < tokens; ++t) {
    logits.insert(logits.end(), both.begin() + t * (experts + 1),
                  both.begin() + t * (experts + 1) + experts);
    gates.push_back(both[t * (experts + 1) + experts]);
  }
  const std::vector<float> gate_up = Random(experts * 2 * width * hidden, 83);
  const std::vector<float> down = Random(experts * hidden * width, 84);
  std::vector<WeightMatrix> gu, dn;
  for (int e = 0; e < experts; ++e) {
    gu.push_back(WeightMatrix::Of(gate_up.data() + e * 2 * width * hidden, WeightType::kF32,
                                  2 * width, hidden));
    dn.push_back(
        WeightMatrix::Of(down.data() + e * hidden * width, WeightType::kF32, hidden, width));
  }
  const std::vector<float> out0 = Random(tokens * hidden, 85);
  const std::vector<float> residual0 = Random(tokens * hidden, 86);
  MoeExpertsArgs a;
  a.x = x.data();
  a.tokens = tokens;
  a.hidden = hidden;
  a.width = width;
  a.experts = experts;
  a.top_k = top_k;
  a.renormalise = true;
  a.gate_up = gu.data();
  a.down = dn.data();
  a.row_invariant = true;
  ScratchArena scratch(backend_->memory());
  std::vector<float> packed_out = out0, packed_res = residual0;
  a.logits = logits.data();
  a.out_gate = gates.data();
  a.out = packed_out.data();
  a.residual = packed_res.data();
  CAIRN_ASSERT_OK(backend_->MoeExperts(a, scratch));
  std::vector<float> strided_out = out0, strided_res = residual0;
  a.logits = both.data();
  a.out_gate = both.data() + experts;
  a.logits_ld = experts + 1;
  a.out_gate_ld = experts + 1;
  a.out = strided_out.data();
  a.residual = strided_res.data();
  CAIRN_ASSERT_OK(backend_->MoeExperts(a, scratch));
  EXPECT_EQ(std::memcmp(packed_out.data(), strided_out.data(), packed_out.size() * 4), 0);
  EXPECT_EQ(std::memcmp(packed_res.data(), strided_res.data(), packed_res.size() * 4), 0);

  // The shared expert given to MoeExperts: out = its SwiGLU of x first, as the separate calls.
  const std::vector<float> shared_gu = Random(2 * width * hidden, 87);
  const std::vector<float> shared_dn = Random(hidden * width, 88);
  const WeightMatrix sgu = WeightMatrix::Of(shared_gu.data(), WeightType::kF32, 2 * width, hidden);
  const WeightMatrix sdn = WeightMatrix::Of(shared_dn.data(), WeightType::kF32, hidden, width);
  std::vector<float> apart_out(out0.size()), apart_res = residual0, gu_rows(tokens * 2 * width),
                                             act(tokens * width);
  backend_->MatMulRowsSiluMul(x.data(), tokens, hidden, sgu, gu_rows.data(), act.data());
  backend_->MatMulRowsTyped(act.data(), tokens, width, sdn, apart_out.data(), hidden, false);
  a.out = apart_out.data();
  a.residual = apart_res.data();
  CAIRN_ASSERT_OK(backend_->MoeExperts(a, scratch));
  std::vector<float> folded_out = out0, folded_res = residual0;
  a.out = folded_out.data();
  a.residual = folded_res.data();
  a.shared_gate_up = &sgu;
  a.shared_down = &sdn;
  a.shared_width = width;
  CAIRN_ASSERT_OK(backend_->MoeExperts(a, scratch));
  EXPECT_EQ(std::memcmp(apart_out.data(), folded_out.data(), apart_out.size() * 4), 0);
  EXPECT_EQ(std::memcmp(apart_res.data(), folded_res.data(), apart_res.size() * 4), 0);
  a.shared_width = width + 1;
  EXPECT_EQ(backend_->MoeExperts(a, scratch).code(), absl::StatusCode::kInvalidArgument);
  a.shared_gate_up = nullptr;
  a.shared_down = nullptr;

  a.logits_ld = experts - 1;
  EXPECT_EQ(backend_->MoeExperts(a, scratch).code(), absl::StatusCode::kInvalidArgument);
  a.logits_ld = 0;
  a.out_gate_ld = -1;
  EXPECT_EQ(backend_->MoeExperts(a, scratch).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cairn::infer
