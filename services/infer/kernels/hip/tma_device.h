#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_TMA_DEVICE_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_TMA_DEVICE_H_

// Device helpers for the tensor memory accelerator (NVIDIA sm_90a builds, CAIRN_HIP_WGMMA):
// a box of a matrix that a hip::TensorMap describes (hip_kernels.h, EncodeBf16TensorMap), copied
// into shared memory by one instruction and counted on a shared-memory barrier
// (moe_stream_device.h's BarrierArriveExpect / BarrierWait). Included only by kernel sources.

#include <cstdint>

#include "services/infer/kernels/hip/hip_kernels.h"

#if !defined(__HIP_PLATFORM_AMD__) && defined(CAIRN_HIP_WGMMA)

namespace cairn::infer::hip::tma {

// Asks for the map's 128 bytes ahead of the copies that read it (`map` in global or parameter
// memory).
__device__ inline void PrefetchTensorMap(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// The box whose first value is column `col`, row `row` of the map's matrix into shared memory
// at `dst` (a shared-space address, 1024-byte aligned for a swizzled map, else 128), its bytes
// counted on the barrier at shared address `bar` when they land. Values past the matrix arrive
// as zeros and count too: a box always brings box_rows x box_cols x 2 bytes.
__device__ inline void LoadBox(uint32_t dst, const TensorMap* map, int32_t col, int32_t row,
                               uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(col), "r"(row), "r"(bar)
      : "memory");
}

}  // namespace cairn::infer::hip::tma

#endif  // !__HIP_PLATFORM_AMD__ && CAIRN_HIP_WGMMA

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_TMA_DEVICE_H_
