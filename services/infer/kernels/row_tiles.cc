#include "services/infer/kernels/row_tiles.h"

#include <cstring>

namespace cairn::infer {

void PackRowTiles(WeightType type, const void* src, int64_t rows, int64_t cols, void* dst) {
  const int64_t size = WeightTypeSize(type);
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  if (rows <= 0 || cols <= 0) return;
  const int64_t padded = (rows + kRowTileRows - 1) / kRowTileRows * kRowTileRows;
  const int64_t blocks = cols / kRowTileBlock;
  const int64_t tail = cols % kRowTileBlock;
  for (int64_t r = 0; r < padded; ++r) {
    const char* row = in + r * cols * size;
    for (int64_t b = 0; b < blocks; ++b) {
      char* to = out + RowTileBlockOffset(r, b, cols) * size;
      if (r < rows) {
        std::memcpy(to, row + b * kRowTileBlock * size, static_cast<size_t>(kRowTileBlock * size));
      } else {
        std::memset(to, 0, static_cast<size_t>(kRowTileBlock * size));
      }
    }
    if (tail > 0) {
      char* to = out + RowTileTailOffset(r, cols) * size;
      if (r < rows) {
        std::memcpy(to, row + blocks * kRowTileBlock * size, static_cast<size_t>(tail * size));
      } else {
        std::memset(to, 0, static_cast<size_t>(tail * size));
      }
    }
  }
}

}  // namespace cairn::infer
