#include "common/shm/bulk_copy.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace cairn {
namespace {

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + i / 251);
  return v;
}

TEST(BulkCopyTest, CopiesEveryByteAtAnyAlignmentAndSize) {
  const std::vector<size_t> sizes = {0,
                                     1,
                                     63,
                                     kBulkCopyStreamingMinBytes - 1,
                                     kBulkCopyStreamingMinBytes,
                                     kBulkCopyStreamingMinBytes + 17,
                                     size_t{1} << 20};
  for (size_t n : sizes) {
    for (size_t dst_offset : {0, 1, 8, 15}) {
      for (size_t src_offset : {0, 3}) {
        const std::vector<uint8_t> src = Pattern(n + src_offset);
        std::vector<uint8_t> dst(n + dst_offset + 1, 0xEE);

        BulkCopy(dst.data() + dst_offset, src.data() + src_offset, n);

        for (size_t i = 0; i < dst_offset; ++i) ASSERT_EQ(dst[i], 0xEE) << n << " " << i;
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(dst[dst_offset + i], src[src_offset + i])
              << "size " << n << ", offsets " << dst_offset << "/" << src_offset << ", byte " << i;
        }
        EXPECT_EQ(dst[dst_offset + n], 0xEE) << "wrote past the end, size " << n;
      }
    }
  }
}

}  // namespace
}  // namespace cairn
