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

// w's parts cut into pieces of at most `rows` rows each (a multiple of 16), in output order.
std::vector<GemmTile> CutParts(const WeightMatrix& w, int64_t rows) {
  const int64_t row_bytes = w.cols * WeightTypeSize(w.type);
  std::vector<GemmTile> pieces;
  int64_t column = 0;
  for (int p = 0; p < w.num_parts; ++p) {
    const WeightMatrix::Part& part = w.parts[p];
    for (int64_t r0 = 0; r0 < part.rows; r0 += rows) {
      const int64_t count = std::min(rows, part.rows - r0);
      if (w.layout == WeightLayout::kRowTiles) {
        pieces.push_back({static_cast<const char*>(part.data), count, column + r0, r0});
      } else {
        pieces.push_back(
            {static_cast<const char*>(part.data) + r0 * row_bytes, count, column + r0, 0});
      }
    }
    column += part.rows;
  }
  return pieces;
}

}  // namespace

std::vector<GemmTile> GemmTiles(const WeightMatrix& w, int threads) {
  const int64_t k = w.cols;
  const int64_t n = w.rows();
  if (n == 0) return {};
  int64_t tile = (n + threads * kGemmTilesPerThread - 1) / (threads * kGemmTilesPerThread);
  tile = std::max(kGemmMinTileRows, (tile + 15) / 16 * 16);
  if (w.type != WeightType::kF32) {
    tile = std::min(tile, std::max<int64_t>(16, kWidenTileElements / k / 16 * 16));
  }
  return CutParts(w, tile);
}

void GemmTileProduct(Isa isa, const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                     const GemmTile& t, std::vector<float>* widened, float* y, int64_t ldy,
                     bool accumulate) {
  const int64_t k = w.cols;
  const float* weights = reinterpret_cast<const float*>(t.rows);
  if (GemmChunkNeedsWidening(w)) {
    widened->resize(static_cast<size_t>(t.count * k));
    WidenGemmChunkRows(isa, w, t, 0, t.count, widened->data());
    weights = widened->data();
  }
  Sgemm(x, m, k, ldx, weights, t.count, y + t.column, ldy, accumulate);
}

std::vector<GemmTile> GemmChunks(const WeightMatrix& w, int64_t max_elements) {
  return CutParts(w, std::max<int64_t>(16, max_elements / std::max<int64_t>(1, w.cols) / 16 * 16));
}

bool GemmChunkNeedsWidening(const WeightMatrix& w) {
  return w.layout == WeightLayout::kRowTiles || w.type != WeightType::kF32;
}

void WidenGemmChunkRows(Isa isa, const WeightMatrix& w, const GemmTile& t, int64_t begin,
                        int64_t end, float* dst) {
  if (end <= begin) return;
  const int64_t k = w.cols;
  if (w.layout == WeightLayout::kRowTiles) {
    WidenTileRows(isa, w.type, t.rows, t.first_row + begin, end - begin, k, dst + begin * k);
  } else {
    Widen(isa, w.type, t.rows + begin * k * WeightTypeSize(w.type), (end - begin) * k,
          dst + begin * k);
  }
}

std::vector<int64_t> GemmRowBlocks(int64_t m, int threads, int blocks_per_thread,
                                   int64_t min_rows) {
  const int64_t most = std::max<int64_t>(1, m / std::max<int64_t>(1, min_rows));
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>(most, static_cast<int64_t>(threads) * blocks_per_thread));
  std::vector<int64_t> bounds(static_cast<size_t>(blocks + 1));
  for (int64_t b = 0; b <= blocks; ++b) bounds[static_cast<size_t>(b)] = b * m / blocks;
  return bounds;
}

void GemmChunkProduct(const float* x, int64_t r0, int64_t r1, int64_t ldx, int64_t k,
                      const float* chunk, const GemmTile& t, float* y, int64_t ldy,
                      bool accumulate) {
  Sgemm(x + r0 * ldx, r1 - r0, k, ldx, chunk, t.count, y + r0 * ldy + t.column, ldy, accumulate);
}

}  // namespace cairn::infer::cpu
