// Tensor maps (hip_kernels.h, "Tensor maps"): boxes of a bf16 matrix copied into shared memory by
// the tensor memory accelerator, swizzled or not, give back the matrix, zeros past its rows and
// columns, and never a value of the padding between its rows. Skipped where the build or the
// device has no tensor maps (AMD, or not an sm_90a build on an sm_90 device).

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "tests/unit/services/infer/kernels/hip/hip_kernel_test_fixture.h"

namespace cairn::infer::testing {
namespace {

TEST_F(HipKernelBackendTest, TensorMapBoxesGiveBackTheMatrix) {
  if (!hip::TensorMapsSupported()) GTEST_SKIP() << "no tensor maps in this build or device";
  // 300 rows of 200 values, rows 208 apart: the last boxes cross both edges, and the padding
  // (a NaN pattern) must never show.
  const int64_t rows = 300, cols = 200, stride = 208;
  constexpr uint16_t kPadding = 0x7fc1;
  std::vector<uint16_t> matrix(static_cast<size_t>(rows * stride), kPadding);
  const std::vector<uint16_t> values = RandomBf16ValueBits(static_cast<size_t>(rows * cols), 81);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) matrix[r * stride + c] = values[r * cols + c];
  }
  DeviceBuffer dm = Up(matrix);
  struct Box {
    int rows, cols;
    bool swizzled;
  };
  for (const Box& box : {Box{64, 64, true}, Box{256, 64, true}, Box{1, 64, true},
                         Box{32, 40, false}, Box{7, 8, false}, Box{256, 256, false}}) {
    SCOPED_TRACE(::testing::Message()
                 << box.rows << " x " << box.cols << (box.swizzled ? " swizzled" : " plain"));
    hip::TensorMap map;
    ASSERT_EQ(hip::EncodeBf16TensorMap(&map, dm.data(), rows, cols, stride, box.rows, box.cols,
                                       box.swizzled),
              hipSuccess);
    const std::vector<unsigned char> map_bytes(map.bytes, map.bytes + sizeof(map.bytes));
    DeviceBuffer dmap = Up(map_bytes);
    const int64_t row_boxes = (rows + box.rows - 1) / box.rows;
    const int64_t col_boxes = (cols + box.cols - 1) / box.cols;
    const int64_t out_rows = row_boxes * box.rows, out_cols = col_boxes * box.cols;
    DeviceBuffer out = Up(std::vector<uint16_t>(static_cast<size_t>(out_rows * out_cols), 0xaaaa));
    ASSERT_EQ(hip::TensorMapBoxesToRows(static_cast<const hip::TensorMap*>(dmap.data()), box.rows,
                                        box.cols, box.swizzled, row_boxes, col_boxes,
                                        static_cast<uint16_t*>(out.data()), gpu_->compute_stream()),
              hipSuccess);
    ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
    std::vector<uint16_t> got(static_cast<size_t>(out_rows * out_cols));
    ASSERT_TRUE(gpu_->Download(got.data(), out.data(), got.size() * 2).ok());
    int64_t wrong = 0;
    for (int64_t r = 0; r < out_rows; ++r) {
      for (int64_t c = 0; c < out_cols; ++c) {
        const uint16_t want = r < rows && c < cols ? values[r * cols + c] : 0;
        if (got[r * out_cols + c] != want && wrong++ < 5) {
          ADD_FAILURE() << "row " << r << " column " << c << ": " << got[r * out_cols + c]
                        << " against " << want;
        }
      }
    }
    EXPECT_EQ(wrong, 0);
  }

  // Arguments the maps cannot take.
  hip::TensorMap map;
  EXPECT_EQ(hip::EncodeBf16TensorMap(&map, dm.data(), rows, cols, stride, 64, 32, true),
            hipErrorInvalidValue);  // A swizzled box row is 64 values.
  EXPECT_EQ(hip::EncodeBf16TensorMap(&map, dm.data(), rows, cols, 204, 64, 64, true),
            hipErrorInvalidValue);  // Rows 16-byte aligned.
  EXPECT_EQ(hip::EncodeBf16TensorMap(&map, static_cast<const uint16_t*>(dm.data()) + 1, rows, cols,
                                     stride, 64, 64, true),
            hipErrorInvalidValue);  // The base 16-byte aligned.
  EXPECT_EQ(hip::EncodeBf16TensorMap(&map, dm.data(), rows, cols, stride, 257, 64, true),
            hipErrorInvalidValue);
}

}  // namespace
}  // namespace cairn::infer::testing
