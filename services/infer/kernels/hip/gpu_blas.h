#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_GPU_BLAS_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_GPU_BLAS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/infer/kernels/hip/hip_compat.h"

namespace cairn::infer {

// The one shim over the vendor BLAS (style.md §9): cuBLAS / cuBLASLt on NVIDIA, hipBLAS on AMD.
// No other file includes a vendor BLAS header.
//
// GemmNT: fp32 math (no TF32 or other reduced-precision modes); for a given shape the vendor
// picks one kernel, so results are deterministic run to run, but the kernel (and so the
// reduction order) may change with m.
//
// GemmNTBf16: bf16 inputs, fp32 accumulation on the matrix units, fp32 output. On NVIDIA it
// runs through cuBLASLt with one algorithm pinned per shape (n, k, strides, alignment): chosen
// once, for kPinnedAlgorithmRows rows, with split-K off, no reduction scheme and no workspace
// (so no stream-K either), then used for every m. Each output element is then one reduction
// over k in the order of that algorithm's k loop, whatever m is: a row's bits do not depend on
// the other rows of the call (tested on the H200). On AMD it is hipblasGemmEx, invariant only
// as far as hipBLAS keeps its kernel for all m (not checked: no AMD device here).
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
  // the matrix units, with the pinned, batch-invariant algorithm (class comment).
  absl::Status GemmNTBf16(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                          const uint16_t* w, int64_t ldw, float* y, int64_t ldy, float beta);
  // The same product with whatever kernel the vendor picks for this m (split-K and all): the
  // fastest path, not batch invariant. For measuring what invariance costs.
  absl::Status GemmNTBf16Unpinned(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                                  const uint16_t* w, int64_t ldw, float* y, int64_t ldy,
                                  float beta);

  // Rows the pinned bf16 algorithm of a shape is chosen for (a long prefill pass).
  static constexpr int64_t kPinnedAlgorithmRows = 4096;

 private:
  struct Pinned;  // The cuBLASLt handle and the pinned algorithms (gpu_blas.cc).
  GpuBlas(void* handle, std::unique_ptr<Pinned> pinned);

  void* handle_;  // cublasHandle_t or hipblasHandle_t; opaque so this header stays vendor-free.
  std::unique_ptr<Pinned> pinned_;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_GPU_BLAS_H_
