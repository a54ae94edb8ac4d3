// WeightMatrix::RowRange: a range of a matrix's rows over the same memory, across its parts, and
// the whole matrix's rows kept for backends that decide their arithmetic by them.

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "services/infer/kernels/kernel_backend.h"

namespace cairn::infer {
namespace {

// A bf16 matrix of 3 columns in two parts of 5 and 7 rows.
struct TwoParts {
  std::vector<uint16_t> a = std::vector<uint16_t>(5 * 3);
  std::vector<uint16_t> b = std::vector<uint16_t>(7 * 3);
  WeightMatrix Matrix() const {
    WeightMatrix w = WeightMatrix::Of(a.data(), WeightType::kBF16, 5, 3);
    w.parts[1] = {b.data(), 7};
    w.num_parts = 2;
    return w;
  }
};

TEST(WeightMatrixTest, ARangeAcrossTwoPartsTakesTheRowsOfEach) {
  const TwoParts m;
  const WeightMatrix r = m.Matrix().RowRange(3, 9);
  EXPECT_EQ(r.type, WeightType::kBF16);
  EXPECT_EQ(r.layout, WeightLayout::kRows);
  EXPECT_EQ(r.cols, 3);
  ASSERT_EQ(r.num_parts, 2);
  EXPECT_EQ(r.parts[0].data, m.a.data() + 3 * 3);
  EXPECT_EQ(r.parts[0].rows, 2);
  EXPECT_EQ(r.parts[1].data, m.b.data());
  EXPECT_EQ(r.parts[1].rows, 4);
  EXPECT_EQ(r.rows(), 6);
  EXPECT_EQ(r.whole_rows, 12);
}

TEST(WeightMatrixTest, ARangeInsideOnePartIsOnePartAndARangeOfARangeKeepsTheWholeRows) {
  const TwoParts m;
  const WeightMatrix r = m.Matrix().RowRange(6, 8);
  ASSERT_EQ(r.num_parts, 1);
  EXPECT_EQ(r.parts[0].data, m.b.data() + 1 * 3);
  EXPECT_EQ(r.parts[0].rows, 2);
  EXPECT_EQ(r.whole_rows, 12);
  const WeightMatrix inner = m.Matrix().RowRange(2, 10).RowRange(1, 4);
  ASSERT_EQ(inner.num_parts, 2);
  EXPECT_EQ(inner.parts[0].data, m.a.data() + 3 * 3);
  EXPECT_EQ(inner.parts[0].rows, 2);
  EXPECT_EQ(inner.parts[1].rows, 1);
  EXPECT_EQ(inner.whole_rows, 12);
}

TEST(WeightMatrixTest, TheWholeRangeIsTheMatrixAndAnEmptyRangeHasNoParts) {
  const TwoParts m;
  const WeightMatrix all = m.Matrix().RowRange(0, 12);
  ASSERT_EQ(all.num_parts, 2);
  EXPECT_EQ(all.parts[0].data, m.a.data());
  EXPECT_EQ(all.parts[1].rows, 7);
  EXPECT_EQ(m.Matrix().whole_rows, 0);
  EXPECT_EQ(m.Matrix().RowRange(4, 4).num_parts, 0);
}

}  // namespace
}  // namespace cairn::infer
