#include "services/infer/kernels/row_tiles.h"

#include <cstring>

namespace cairn::infer {
namespace {

// PackRowTiles for elements of kSize bytes: tile by tile, each tile's rows block by block (a
// fixed-size copy the compiler turns into a few vector moves), so that packing a model's weights
// runs near memory speed.
template <int64_t kSize>
void Pack(const char* in, int64_t rows, int64_t cols, char* out) {
  constexpr int64_t kBlockBytes = kRowTileBlock * kSize;
  const int64_t blocks = cols / kRowTileBlock;
  const int64_t tail_bytes = cols % kRowTileBlock * kSize;
  const int64_t row_bytes = cols * kSize;
  for (int64_t t0 = 0; t0 < rows; t0 += kRowTileRows) {
    char* tile = out + t0 * row_bytes;
    for (int c = 0; c < kRowTileRows; ++c) {
      const int64_t r = t0 + c;
      char* to = tile + c * kBlockBytes;
      char* tail = tile + blocks * kRowTileRows * kBlockBytes + c * tail_bytes;
      if (r >= rows) {
        // Padding rows: zeros.
        for (int64_t b = 0; b < blocks; ++b)
          std::memset(to + b * kRowTileRows * kBlockBytes, 0, kBlockBytes);
        std::memset(tail, 0, static_cast<size_t>(tail_bytes));
        continue;
      }
      const char* row = in + r * row_bytes;
      for (int64_t b = 0; b < blocks; ++b) {
        std::memcpy(to + b * kRowTileRows * kBlockBytes, row + b * kBlockBytes, kBlockBytes);
      }
      std::memcpy(tail, row + blocks * kBlockBytes, static_cast<size_t>(tail_bytes));
    }
  }
}

}  // namespace

void PackRowTiles(WeightType type, const void* src, int64_t rows, int64_t cols, void* dst) {
  if (rows <= 0 || cols <= 0) return;
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  if (WeightTypeSize(type) == 4) {
    Pack<4>(in, rows, cols, out);
  } else {
    Pack<2>(in, rows, cols, out);
  }
}

}  // namespace cairn::infer
