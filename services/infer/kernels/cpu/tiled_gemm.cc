#include "services/infer/kernels/cpu/tiled_gemm.h"

#include <cblas.h>

#include <algorithm>

namespace cairn::infer::cpu {
namespace {

// Weights widened per sgemm call (rows * cols): large enough for the GEMM to run near its peak
// on the tile, small enough to stay in the last-level cache.
constexpr int64_t kWidenTileElements = int64_t{1} << 20;

// Tiles of a GEMM's weight rows per backend thread: more than one, so that a thread the machine
// delays takes fewer of them; few, because each tile's sgemm packs the whole input again.
constexpr int64_t kGemmTilesPerThread = 2;
// The fewest weight rows of a tile (a multiple of 16, sgemm's widest register block).
constexpr int64_t kGemmMinTileRows = 64;

// y[m, n] = x[m, k] . w[n, k]^T (+ y) through OpenBLAS.
void Sgemm(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n, float* y,
           int64_t ldy, bool accumulate) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(ldx),
              w, static_cast<blasint>(k), accumulate ? 1.0f : 0.0f, y, static_cast<blasint>(ldy));
}

}  // namespace

std::vector<GemmTile> GemmTiles(const WeightMatrix& w, int threads) {
  const int64_t k = w.cols;
  const int64_t n = w.rows();
  std::vector<GemmTile> tiles;
  if (n == 0) return tiles;
  int64_t tile = (n + threads * kGemmTilesPerThread - 1) / (threads * kGemmTilesPerThread);
  tile = std::max(kGemmMinTileRows, (tile + 15) / 16 * 16);
  if (w.type != WeightType::kF32) {
    tile = std::min(tile, std::max<int64_t>(16, kWidenTileElements / k / 16 * 16));
  }
  const int64_t row_bytes = k * WeightTypeSize(w.type);
  int64_t column = 0;
  for (int p = 0; p < w.num_parts; ++p) {
    const WeightMatrix::Part& part = w.parts[p];
    for (int64_t r0 = 0; r0 < part.rows; r0 += tile) {
      if (w.layout == WeightLayout::kRowTiles) {
        tiles.push_back(
            {static_cast<const char*>(part.data), std::min(tile, part.rows - r0), column + r0, r0});
      } else {
        tiles.push_back({static_cast<const char*>(part.data) + r0 * row_bytes,
                         std::min(tile, part.rows - r0), column + r0, 0});
      }
    }
    column += part.rows;
  }
  return tiles;
}

void GemmTileProduct(Isa isa, const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                     const GemmTile& t, std::vector<float>* widened, float* y, int64_t ldy,
                     bool accumulate) {
  const int64_t k = w.cols;
  const float* weights = reinterpret_cast<const float*>(t.rows);
  if (w.layout == WeightLayout::kRowTiles) {
    widened->resize(static_cast<size_t>(t.count * k));
    WidenTileRows(isa, w.type, t.rows, t.first_row, t.count, k, widened->data());
    weights = widened->data();
  } else if (w.type != WeightType::kF32) {
    widened->resize(static_cast<size_t>(t.count * k));
    Widen(isa, w.type, t.rows, t.count * k, widened->data());
    weights = widened->data();
  }
  Sgemm(x, m, k, ldx, weights, t.count, y + t.column, ldy, accumulate);
}

}  // namespace cairn::infer::cpu
