// Tensor maps of the tensor memory accelerator (hip_kernels.h, "Tensor maps"): their encoding
// on the host through the driver's cuTensorMapEncodeTiled, and TensorMapBoxesToRows, which copies
// a matrix box by box through shared memory for the tests.
//
// Why the driver's entry point: the encoding is a driver call (libcuda), which the static
// runtime the backend links does not export; cudaGetDriverEntryPointByVersion finds it in the
// driver already loaded, so the build links nothing more and needs no driver at build time.

#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/hip/moe_stream_device.h"
#include "services/infer/kernels/hip/tma_device.h"

#if !defined(__HIP_PLATFORM_AMD__) && defined(CAIRN_HIP_WGMMA)
#include <cuda.h>
#endif

namespace cairn::infer::hip {

#if defined(__HIP_PLATFORM_AMD__) || !defined(CAIRN_HIP_WGMMA)

bool TensorMapsSupported() { return false; }
hipError_t EncodeBf16TensorMap(TensorMap*, const void*, int64_t, int64_t, int64_t, int, int, bool) {
  return hipErrorNotSupported;
}
hipError_t TensorMapBoxesToRows(const TensorMap*, int, int, bool, int64_t, int64_t, uint16_t*,
                                hipStream_t) {
  return hipErrorNotSupported;
}

#else

namespace {

static_assert(sizeof(TensorMap) == sizeof(CUtensorMap) && alignof(TensorMap) >= 64,
              "hip::TensorMap holds a CUtensorMap");

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled (null where the driver has none), looked up once.
EncodeTiled EncodeTiledFunction() {
  static const EncodeTiled f = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    // 12000: the entry point's version since CUDA 12.0.
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      static_cast<void>(cudaGetLastError());
      return static_cast<EncodeTiled>(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return f;
}

constexpr int kBoxThreads = 128;
constexpr uint32_t kBoxAlign = 1024;  // A swizzled box's alignment in shared memory.

// Block (j, i) copies box (i, j) into shared memory with one tensor copy, then writes it to
// `out` in matrix order (rows of ld values).
__global__ void __launch_bounds__(kBoxThreads)
    BoxesToRowsKernel(const TensorMap* map, int box_rows, int box_cols, bool swizzle128,
                      uint16_t* out, int64_t ld) {
  // The box at the first 1024-byte boundary of the dynamic shared memory (the swizzle's period;
  // the launch asks for that much more).
  extern __shared__ __align__(16) unsigned char raw[];
  __shared__ uint64_t bar;
  KernelEntry();
  const uint32_t raw_at = moe_stream::SharedAddress(raw);
  const uint32_t at = (raw_at + kBoxAlign - 1) / kBoxAlign * kBoxAlign;
  const unsigned char* box = raw + (at - raw_at);
  const uint32_t bytes = static_cast<uint32_t>(box_rows) * static_cast<uint32_t>(box_cols) * 2;
  if (threadIdx.x == 0) {
    tma::PrefetchTensorMap(map);
    moe_stream::BarrierInit(&bar, 1);
    moe_stream::BarrierInitFence();
    moe_stream::BarrierArriveExpect(&bar, bytes);
    tma::LoadBox(at, map, static_cast<int32_t>(blockIdx.x) * box_cols,
                 static_cast<int32_t>(blockIdx.y) * box_rows, moe_stream::SharedAddress(&bar));
  }
  __syncthreads();  // The barrier is initialised before anyone waits on it.
  moe_stream::BarrierWait(&bar, 0);
  const auto* values = reinterpret_cast<const uint16_t*>(box);
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * box_rows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * box_cols;
  for (int e = threadIdx.x; e < box_rows * box_cols; e += kBoxThreads) {
    const int r = e / box_cols;
    const int c = e % box_cols;
    // Swizzled: 16-byte chunk c / 8 of row r sits at chunk (c / 8) ^ (r % 8).
    const int at_value =
        swizzle128 ? r * kSwizzledBoxCols + (((c / 8) ^ (r % 8)) * 8) + c % 8 : r * box_cols + c;
    out[(row0 + r) * ld + col0 + c] = values[at_value];
  }
}

}  // namespace

bool TensorMapsSupported() {
  // Asked once a process: the backend computes on one device, and the MoE prefill asks at
  // every call.
  static const bool supported = [] {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return false;
    }
    return major == 9 && EncodeTiledFunction() != nullptr;
  }();
  return supported;
}

hipError_t EncodeBf16TensorMap(TensorMap* map, const void* base, int64_t rows, int64_t cols,
                               int64_t row_stride, int box_rows, int box_cols, bool swizzle128) {
  if (!TensorMapsSupported()) return hipErrorNotSupported;
  if (map == nullptr || base == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 ||
      rows < 1 || cols < 1 || row_stride < cols || row_stride % 8 != 0 || box_rows < 1 ||
      box_rows > 256 || box_cols < 8 || box_cols > 256 || box_cols % 8 != 0 ||
      (swizzle128 && box_cols != kSwizzledBoxCols) || rows > (int64_t{1} << 32) ||
      cols > (int64_t{1} << 32)) {
    return hipErrorInvalidValue;
  }
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t steps[2] = {1, 1};
  CUtensorMap encoded;
  const CUresult r =
      EncodeTiledFunction()(&encoded, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base),
                            dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return hipErrorInvalidValue;
  static_assert(sizeof(encoded) == sizeof(map->bytes));
  __builtin_memcpy(map->bytes, &encoded, sizeof(encoded));
  return hipSuccess;
}

hipError_t TensorMapBoxesToRows(const TensorMap* map, int box_rows, int box_cols, bool swizzle128,
                                int64_t row_boxes, int64_t col_boxes, uint16_t* out,
                                hipStream_t stream) {
  if (!TensorMapsSupported()) return hipErrorNotSupported;
  if (map == nullptr || out == nullptr || reinterpret_cast<uintptr_t>(map) % 64 != 0 ||
      box_rows < 1 || box_rows > 256 || box_cols < 8 || box_cols > 256 || row_boxes < 1 ||
      col_boxes < 1 || row_boxes > 65535 || col_boxes > 0x7fffffff ||
      (swizzle128 && box_cols != kSwizzledBoxCols)) {
    return hipErrorInvalidValue;
  }
  const size_t shared =
      static_cast<size_t>(box_rows) * static_cast<size_t>(box_cols) * 2 + kBoxAlign;
  hipError_t e = AllowSharedBytes(BoxesToRowsKernel, shared);
  if (e != hipSuccess) return e;
  LaunchKernel(BoxesToRowsKernel,
               dim3(static_cast<unsigned int>(col_boxes), static_cast<unsigned int>(row_boxes)),
               dim3(kBoxThreads), shared, stream, map, box_rows, box_cols, swizzle128, out,
               col_boxes * box_cols);
  return hipGetLastError();
}

#endif

}  // namespace cairn::infer::hip
