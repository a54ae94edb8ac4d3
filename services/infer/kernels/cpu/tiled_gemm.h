#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_TILED_GEMM_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_TILED_GEMM_H_

#include <cstdint>
#include <vector>

#include "services/infer/kernels/cpu/row_kernels.h"
#include "services/infer/kernels/kernel_backend.h"

// CpuKernelBackend's GEMM path: y = x . w^T (+ y) as single-threaded cblas_sgemm calls, which the
// backend spreads over its threads in one of two ways (CpuKernelBackendOptions::gemm_split):
//
// - by input rows (the default): w in chunks of its rows (GemmChunks), each chunk widened to fp32
//   once into a buffer the threads share (every thread widening a slice), then each thread's
//   sgemm multiplies its block of x's rows by the whole chunk (GemmRowBlocks), so OpenBLAS packs
//   every input row once per chunk;
// - by weight rows: tiles of w's rows (GemmTiles), each widened into the running thread's buffer
//   (it stays in that core's cache) just before its sgemm with all of x, which OpenBLAS packs
//   again for every tile.
//
// Narrow (bf16, f16) weights and the rows of a matrix in the row-tile layout (row_tiles.h) of any
// type are widened; fp32 row-major weights are read in place. Every output element is one sgemm
// reduction over k, and the splits depend only on the shapes and the thread count, so results
// are the same run to run.
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

// The chunks of w for the split by input rows: within one part, whole 16-row blocks (but for a
// part's last), at most `max_elements` weights each (at least 16 rows).
std::vector<GemmTile> GemmChunks(const WeightMatrix& w, int64_t max_elements);

// Whether chunk t of w must be widened (narrow weights or row tiles) before sgemm reads it;
// if not, sgemm reads t.rows in place.
bool GemmChunkNeedsWidening(const WeightMatrix& w);

// Rows [begin, end) of chunk t (0 <= begin <= end <= t.count, begin a multiple of 16) widened to
// fp32 at dst + begin * w.cols, row-major.
void WidenGemmChunkRows(Isa isa, const WeightMatrix& w, const GemmTile& t, int64_t begin,
                        int64_t end, float* dst);

// The blocks of x's m rows for `threads` threads: about `blocks_per_thread` each, at least
// `min_rows` rows a block (but for a product of fewer rows). Block b is rows
// [bounds[b], bounds[b + 1]).
std::vector<int64_t> GemmRowBlocks(int64_t m, int threads, int blocks_per_thread, int64_t min_rows);

// y[r0:r1, t.column, t.column + t.count) = x[r0:r1, k] . chunk^T (+ y) through cblas_sgemm, where
// `chunk` is the chunk's t.count fp32 rows of w.cols, row-major.
void GemmChunkProduct(const float* x, int64_t r0, int64_t r1, int64_t ldx, int64_t k,
                      const float* chunk, const GemmTile& t, float* y, int64_t ldy,
                      bool accumulate);

}  // namespace cairn::infer::cpu

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_TILED_GEMM_H_
