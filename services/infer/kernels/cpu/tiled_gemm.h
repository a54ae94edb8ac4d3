#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_TILED_GEMM_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_TILED_GEMM_H_

#include <cstdint>
#include <vector>

#include "services/infer/kernels/cpu/row_kernels.h"
#include "services/infer/kernels/kernel_backend.h"

// CpuKernelBackend's GEMM path: y = x . w^T (+ y) as single-threaded cblas_sgemm calls on tiles
// of w's rows, which the backend spreads over its threads. A tile of bf16 or f16 weights is
// widened to fp32 into the running thread's buffer (it stays in that core's cache) just before
// its sgemm, as are the rows of a matrix in the row-tile layout (row_tiles.h) of any type. Every
// output element is one sgemm reduction over k, and the tiles depend only on the shapes and the
// thread count, so results are the same run to run.
namespace cairn::infer::cpu {

struct GemmTile {
  const char* rows;   // The tile's first weight row (row tiles: its part's first tile).
  int64_t count;      // Weight rows in the tile.
  int64_t column;     // Its first output column.
  int64_t first_row;  // Row tiles: the tile's first row in its part (a multiple of 16).
};

// The tiles of w for `threads` threads: whole 16-row blocks, about two per thread, at most about
// a million widened weights each.
std::vector<GemmTile> GemmTiles(const WeightMatrix& w, int threads);

// y[:, t.column, t.column + t.count) = x[m, k] . (tile t of w)^T (+ y) through cblas_sgemm,
// widening narrow weights into `widened` first.
void GemmTileProduct(Isa isa, const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                     const GemmTile& t, std::vector<float>* widened, float* y, int64_t ldy,
                     bool accumulate);

}  // namespace cairn::infer::cpu

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_TILED_GEMM_H_
