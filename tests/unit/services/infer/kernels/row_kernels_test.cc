#include "services/infer/kernels/cpu/row_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "services/infer/kernels/half_float.h"
#include "services/infer/kernels/row_tiles.h"

namespace cairn::infer::cpu {
namespace {

uint64_t Next(uint64_t& x) {
  x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x >> 33;
}

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (float& f : v) f = static_cast<float>(Next(seed) % 2000001) / 1e6f - 1.0f;
  return v;
}

// `n` finite weights of `type` (raw bits) and their exact fp32 values.
struct Weights {
  std::vector<uint16_t> narrow;
  std::vector<float> wide;
};

Weights RandomWeights(WeightType type, size_t n, uint64_t seed) {
  Weights w;
  if (type == WeightType::kF32) {
    w.wide = RandomFloats(n, seed);
    return w;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    if (type == WeightType::kBF16) {
      // Sign, an exponent near 1 (2^-8 .. 2^1) and a random mantissa.
      h = static_cast<uint16_t>((Next(seed) & 0x8000) | ((119 + Next(seed) % 10) << 7) |
                                (Next(seed) & 0x7f));
      w.wide.push_back(WidenBf16(h));
    } else {
      // Every finite half, subnormals included.
      h = static_cast<uint16_t>((Next(seed) & 0x8000) | ((Next(seed) % 31) << 10) |
                                (Next(seed) & 0x3ff));
      w.wide.push_back(WidenF16(h));
    }
    w.narrow.push_back(h);
  }
  return w;
}

const void* Data(const Weights& w, WeightType type) {
  return type == WeightType::kF32 ? static_cast<const void*>(w.wide.data())
                                  : static_cast<const void*>(w.narrow.data());
}

std::vector<float> Products(Isa isa, WeightType type, const std::vector<float>& x, int64_t m,
                            const Weights& w, int64_t n, int64_t k) {
  std::vector<const void*> rows;
  for (int64_t j = 0; j < n; ++j) {
    rows.push_back(static_cast<const char*>(Data(w, type)) + j * k * WeightTypeSize(type));
  }
  std::vector<float> y(static_cast<size_t>(m * n), 0.5f);
  RowProducts(isa, type, x.data(), m, k, rows.data(), n, k, y.data(), n, /*accumulate=*/true);
  return y;
}

void ExpectEveryIsaGivesThePortableFp32Bits(int64_t n) {
  for (WeightType type : {WeightType::kF32, WeightType::kBF16, WeightType::kF16}) {
    for (int64_t k : {7, 16, 203, 1024}) {
      const Weights w = RandomWeights(type, static_cast<size_t>(n * k), 3 + k);
      Weights wide;
      wide.wide = w.wide;
      for (int64_t m : {1, 2, 3, 4, 5, 8, 11}) {
        const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 7 + m);
        // The reference: the portable path on the fp32 widening of the weights.
        const std::vector<float> ref = Products(Isa::kPortable, WeightType::kF32, x, m, wide, n, k);
        for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
          if (!IsaSupported(isa)) continue;
          const std::vector<float> y = Products(isa, type, x, m, w, n, k);
          EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)), 0)
              << IsaName(isa) << " type " << static_cast<int>(type) << " k " << k << " m " << m
              << " n " << n;
        }
      }
    }
  }
}

TEST(RowKernelsTest, EveryIsaAndWeightTypeGivesThePortableFp32Bits) {
  // 5 and 11 weight rows: whole groups of the AVX-512 form's 2 or 4 rows side by side and rows
  // left over.
  for (int64_t n : {5, 11}) {
    ExpectEveryIsaGivesThePortableFp32Bits(n);
  }
}

// The documented order, one scalar at a time: lane j of sixteen partial sums adds the products
// at i = 16 b + j, block after block; the lanes folded pairwise (16 -> 8 -> 4 -> 2 -> 1); then the
// elements after the last whole block, in order; every product added with one fused
// multiply-add.
float DocumentedOrderDot(const float* x, const float* w, int64_t k) {
  float s[16] = {};
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    for (int j = 0; j < 16; ++j) s[j] = std::fma(x[i + j], w[i + j], s[j]);
  }
  for (int width = 8; width >= 1; width /= 2) {
    for (int j = 0; j < width; ++j) s[j] = s[j] + s[j + width];
  }
  float sum = s[0];
  for (; i < k; ++i) sum = std::fma(x[i], w[i], sum);
  return sum;
}

TEST(RowKernelsTest, EveryIsaSumsInTheDocumentedOrder) {
  const int64_t n = 6, m = 5;
  for (int64_t k : {15, 16, 64, 77, 512}) {
    const Weights w = RandomWeights(WeightType::kBF16, static_cast<size_t>(n * k), 11 + k);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 13 + k);
    for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
      if (!IsaSupported(isa)) continue;
      const std::vector<float> y = Products(isa, WeightType::kBF16, x, m, w, n, k);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          const float expected =
              0.5f + DocumentedOrderDot(x.data() + r * k, w.wide.data() + j * k, k);
          EXPECT_EQ(y[r * n + j], expected) << IsaName(isa) << " k " << k << " row " << r;
        }
      }
    }
  }
}

TEST(RowKernelsTest, AProductIsTheSameWhateverRowsShareTheCall) {
  const int64_t k = 203, n = 9, m = 11;  // n: whole groups of weight rows and one left over.
  const Weights w = RandomWeights(WeightType::kBF16, n * k, 5);
  const std::vector<float> x = RandomFloats(m * k, 6);
  const std::vector<float> all = Products(BestIsa(), WeightType::kBF16, x, m, w, n, k);

  for (int64_t r = 0; r < m; ++r) {
    const std::vector<float> row(x.begin() + r * k, x.begin() + (r + 1) * k);
    const std::vector<float> one = Products(BestIsa(), WeightType::kBF16, row, 1, w, n, k);
    EXPECT_EQ(std::memcmp(one.data(), all.data() + r * n, n * sizeof(float)), 0) << "row " << r;
  }
}

TEST(RowKernelsTest, WideningIsExactOnEveryIsa) {
  for (WeightType type : {WeightType::kBF16, WeightType::kF16}) {
    const Weights w = RandomWeights(type, 1000, 9);
    for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
      if (!IsaSupported(isa)) continue;
      std::vector<float> out(w.wide.size());
      Widen(isa, type, w.narrow.data(), static_cast<int64_t>(out.size()), out.data());
      EXPECT_EQ(out, w.wide) << IsaName(isa);
    }
  }
}

// The rows of `w` ([n, k] row-major, of `type`) packed into row tiles.
std::vector<char> Packed(const Weights& w, WeightType type, int64_t n, int64_t k) {
  std::vector<char> tiles(static_cast<size_t>(RowTileElements(n, k) * WeightTypeSize(type)), 'x');
  PackRowTiles(type, Data(w, type), n, k, tiles.data());
  return tiles;
}

TEST(RowTilesTest, PackingPutsEachElementWhereTheLayoutSays) {
  for (int64_t n : {1, 3, 4, 5, 9}) {
    for (int64_t k : {1, 15, 16, 17, 40}) {
      std::vector<uint16_t> rows(static_cast<size_t>(n * k));
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint16_t>(i + 1);
      std::vector<uint16_t> tiles(static_cast<size_t>(RowTileElements(n, k)), 0xffff);
      PackRowTiles(WeightType::kBF16, rows.data(), n, k, tiles.data());
      ASSERT_EQ(RowTileElements(n, k), (n + 3) / 4 * 4 * k);
      std::vector<int> seen(tiles.size(), 0);
      for (int64_t r = 0; r < (n + 3) / 4 * 4; ++r) {
        for (int64_t i = 0; i < k; ++i) {
          const int64_t at = i < k / 16 * 16 ? RowTileBlockOffset(r, i / 16, k) + i % 16
                                             : RowTileTailOffset(r, k) + (i - k / 16 * 16);
          ASSERT_LT(at, static_cast<int64_t>(tiles.size()));
          ++seen[static_cast<size_t>(at)];
          // Rows past the last are zeros.
          EXPECT_EQ(tiles[static_cast<size_t>(at)],
                    r < n ? rows[static_cast<size_t>(r * k + i)] : 0)
              << "n " << n << " k " << k << " row " << r << " i " << i;
        }
      }
      // Every element of the packed part is written exactly once.
      for (int count : seen) EXPECT_EQ(count, 1) << "n " << n << " k " << k;
    }
  }
}

TEST(RowKernelsTest, RowTilesGiveTheBitsOfRowMajorRowsOnEveryIsa) {
  // Weight rows: part tiles (1, 2, 3 rows), whole tiles and one left over; input rows: every
  // group of 8, 4, 2 and 1 and several together.
  for (WeightType type : {WeightType::kF32, WeightType::kBF16, WeightType::kF16}) {
    for (int64_t n : {1, 2, 3, 4, 7, 9}) {
      for (int64_t k : {7, 16, 33, 203}) {
        const Weights w = RandomWeights(type, static_cast<size_t>(n * k), 17 + n + k);
        const std::vector<char> tiles = Packed(w, type, n, k);
        for (int64_t m : {1, 2, 3, 4, 5, 8, 11, 16, 17}) {
          const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 19 + m);
          const std::vector<float> ref = Products(Isa::kPortable, type, x, m, w, n, k);
          for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
            if (!IsaSupported(isa)) continue;
            // Asking for the weights ahead or not never changes a bit.
            for (int64_t prefetch : {kTilePrefetchAlways, kTilePrefetchNever, int64_t{1024}}) {
              std::vector<float> y(static_cast<size_t>(m * n), 0.5f);
              RowTileProducts(isa, type, x.data(), m, k, tiles.data(), n, k, y.data(), n,
                              /*accumulate=*/true, prefetch);
              EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)), 0)
                  << IsaName(isa) << " type " << static_cast<int>(type) << " n " << n << " k " << k
                  << " m " << m << " prefetch " << prefetch;
            }
          }
        }
      }
    }
  }
}

TEST(RowKernelsTest, RowTilesWidenExactlyOnEveryIsa) {
  for (WeightType type : {WeightType::kF32, WeightType::kBF16, WeightType::kF16}) {
    const int64_t n = 11, k = 37;
    const Weights w = RandomWeights(type, static_cast<size_t>(n * k), 23);
    const std::vector<char> tiles = Packed(w, type, n, k);
    for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
      if (!IsaSupported(isa)) continue;
      for (int64_t first : {0, 3, 4, 10}) {
        const int64_t count = n - first;
        std::vector<float> out(static_cast<size_t>(count * k), -7.0f);
        WidenTileRows(isa, type, tiles.data(), first, count, k, out.data());
        EXPECT_TRUE(std::equal(out.begin(), out.end(), w.wide.begin() + first * k))
            << IsaName(isa) << " type " << static_cast<int>(type) << " first " << first;
      }
    }
  }
}

}  // namespace
}  // namespace cairn::infer::cpu
