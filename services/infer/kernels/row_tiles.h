#ifndef CAIRN_SERVICES_INFER_KERNELS_ROW_TILES_H_
#define CAIRN_SERVICES_INFER_KERNELS_ROW_TILES_H_

#include <cstdint>

#include "services/infer/kernels/kernel_backend.h"

// The row-tile layout of a weight matrix part (WeightLayout::kRowTiles; docs/cpu-backend.md §1).
// A part of `rows` rows of `cols` elements is stored as ceil(rows / 4) tiles of 4 * cols
// elements, one after another. Tile t holds rows 4t .. 4t + 3: first, for each block
// b < cols / 16, the sixteen elements [16 b, 16 b + 16) of each of its four rows in turn (row
// c at t * 4 cols + 64 b + 16 c); then the last cols % 16 elements of each row in turn (row c at
// t * 4 cols + 64 (cols / 16) + c (cols % 16)). Rows past the part's last in its last tile are
// zeros and never read into a result.
//
// A product over one row-major row reads it as one stream; four rows side by side (one input
// vector shared by all four) are four streams, which this layout makes one.
namespace cairn::infer {

inline constexpr int kRowTileRows = 4;
inline constexpr int kRowTileBlock = 16;

// Elements a part of `rows` rows of `cols` takes in the row-tile layout.
inline int64_t RowTileElements(int64_t rows, int64_t cols) {
  return (rows + kRowTileRows - 1) / kRowTileRows * kRowTileRows * cols;
}

// Element offsets, within a part in the row-tile layout with `cols` columns, of row `row`'s
// block `b` (its elements [16 b, 16 b + 16)) and of its last cols % 16 elements.
inline int64_t RowTileBlockOffset(int64_t row, int64_t b, int64_t cols) {
  return row / kRowTileRows * kRowTileRows * cols + b * kRowTileRows * kRowTileBlock +
         row % kRowTileRows * kRowTileBlock;
}
inline int64_t RowTileTailOffset(int64_t row, int64_t cols) {
  const int64_t blocks = cols / kRowTileBlock;
  return row / kRowTileRows * kRowTileRows * cols + blocks * kRowTileRows * kRowTileBlock +
         row % kRowTileRows * (cols % kRowTileBlock);
}

// Writes `rows` row-major rows of `cols` elements of `type` at `src` into `dst` in the row-tile
// layout (RowTileElements(rows, cols) elements, the padding rows zeroed). Exact: elements are
// moved, never converted.
void PackRowTiles(WeightType type, const void* src, int64_t rows, int64_t cols, void* dst);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_ROW_TILES_H_
