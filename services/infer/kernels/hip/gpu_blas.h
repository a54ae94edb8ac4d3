#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_GPU_BLAS_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_GPU_BLAS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/infer/kernels/hip/hip_compat.h"

namespace cairn::infer {

// The one shim over the vendor BLAS (style.md §9): cuBLAS on NVIDIA, hipBLAS on AMD. No other
// file includes a vendor BLAS header. fp32 math (no TF32 or other reduced-precision modes);
// for a given shape the vendor picks one kernel, so results are deterministic run to run, but
// the kernel (and so the reduction order) may change with m: batch-invariant products use the
// backend's own row kernel instead.
//
// Thread-compatible; every call is enqueued on the stream given to Create().
class GpuBlas {
 public:
  // Creates a handle bound to `stream`, which must outlive this object. Returns Unavailable if
  // the vendor library cannot start (no device, out of memory).
  static absl::StatusOr<std::unique_ptr<GpuBlas>> Create(hipStream_t stream);
  ~GpuBlas();
  GpuBlas(const GpuBlas&) = delete;
  GpuBlas& operator=(const GpuBlas&) = delete;

  // Row-major y[m, n] = x[m, k] . w[n, k]^T + beta * y, device pointers, row strides `ldx`,
  // `ldw`, `ldy`. Returns InvalidArgument for sizes the vendor's 32-bit interface cannot take
  // and Internal for a vendor failure.
  absl::Status GemmNT(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                      int64_t ldw, float* y, int64_t ldy, float beta);
  // As GemmNT with bf16 x and w (raw bf16 bit patterns) and fp32 y, accumulating in fp32 on
  // the matrix units. Not yet used by the backend (its interface is fp32); it measures the bf16
  // matrix rate and is where bf16 weights will go.
  absl::Status GemmNTBf16(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                          const uint16_t* w, int64_t ldw, float* y, int64_t ldy, float beta);

 private:
  explicit GpuBlas(void* handle) : handle_(handle) {}

  void* handle_;  // cublasHandle_t or hipblasHandle_t; opaque so this header stays vendor-free.
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_GPU_BLAS_H_
