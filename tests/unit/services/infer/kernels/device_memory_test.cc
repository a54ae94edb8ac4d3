// DeviceMemory's default DownloadRowsQueued (host memory: each row copied at once) and its
// shape checks.

#include "services/infer/kernels/device_memory.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

TEST(DeviceMemoryTest, QueuedRowDownloadsCopyEachRowBetweenThePitches) {
  DeviceMemory* memory = HostDeviceMemory();
  // 3 rows of 4 floats, 6 apart in the source, into rows 5 apart.
  std::vector<float> src(3 * 6);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  std::vector<float> dst(3 * 5, -1.0f);
  CAIRN_ASSERT_OK(memory->DownloadRowsQueued(dst.data(), 5 * 4, src.data(), 6 * 4, 4 * 4, 3));
  CAIRN_ASSERT_OK(memory->WaitQueuedDownloads());
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 5; ++c) {
      EXPECT_EQ(dst[static_cast<size_t>(r * 5 + c)], c < 4 ? static_cast<float>(r * 6 + c) : -1.0f)
          << r << "," << c;
    }
  }
}

TEST(DeviceMemoryTest, QueuedRowDownloadsRefuseBadShapes) {
  DeviceMemory* memory = HostDeviceMemory();
  std::vector<float> buf(16);
  EXPECT_THAT(memory->DownloadRowsQueued(buf.data(), 8, buf.data() + 8, 16, 12, 1),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(memory->DownloadRowsQueued(buf.data(), 16, buf.data() + 8, 16, 8, -1),
              cairn::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  CAIRN_EXPECT_OK(memory->DownloadRowsQueued(buf.data(), 16, buf.data() + 8, 16, 8, 0));
}

}  // namespace
}  // namespace cairn::infer
