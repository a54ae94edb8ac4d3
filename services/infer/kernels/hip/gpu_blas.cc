#include "services/infer/kernels/hip/gpu_blas.h"

#include <limits>

#include "absl/strings/str_cat.h"

#if defined(__HIP_PLATFORM_AMD__)
#if __has_include(<hipblas/hipblas.h>)
#include <hipblas/hipblas.h>
#else
#include <hipblas.h>
#endif
#else
#include <cublas_v2.h>
#endif

namespace cairn::infer {
namespace {

#if defined(__HIP_PLATFORM_AMD__)
using BlasHandle = hipblasHandle_t;
using BlasStatus = hipblasStatus_t;
constexpr BlasStatus kBlasOk = HIPBLAS_STATUS_SUCCESS;
BlasStatus BlasCreate(BlasHandle* h) { return hipblasCreate(h); }
BlasStatus BlasDestroy(BlasHandle h) { return hipblasDestroy(h); }
BlasStatus BlasSetStream(BlasHandle h, hipStream_t s) { return hipblasSetStream(h, s); }
BlasStatus BlasSetup(BlasHandle) { return HIPBLAS_STATUS_SUCCESS; }
// Column-major C[n, m] = W^T[n, k] X[k, m]: the row-major product y = x w^T.
BlasStatus BlasGemmNT(BlasHandle h, int m, int n, int k, const float* alpha, const float* x,
                      int ldx, const float* w, int ldw, const float* beta, float* y, int ldy) {
  return hipblasSgemm(h, HIPBLAS_OP_T, HIPBLAS_OP_N, n, m, k, alpha, w, ldw, x, ldx, beta, y, ldy);
}
BlasStatus BlasGemmNTBf16(BlasHandle h, int m, int n, int k, const float* alpha, const uint16_t* x,
                          int ldx, const uint16_t* w, int ldw, const float* beta, float* y,
                          int ldy) {
  return hipblasGemmEx(h, HIPBLAS_OP_T, HIPBLAS_OP_N, n, m, k, alpha, w, HIP_R_16BF, ldw, x,
                       HIP_R_16BF, ldx, beta, y, HIP_R_32F, ldy, HIPBLAS_COMPUTE_32F,
                       HIPBLAS_GEMM_DEFAULT);
}
#else
using BlasHandle = cublasHandle_t;
using BlasStatus = cublasStatus_t;
constexpr BlasStatus kBlasOk = CUBLAS_STATUS_SUCCESS;
BlasStatus BlasCreate(BlasHandle* h) { return cublasCreate(h); }
BlasStatus BlasDestroy(BlasHandle h) { return cublasDestroy(h); }
BlasStatus BlasSetStream(BlasHandle h, hipStream_t s) { return cublasSetStream(h, s); }
// Plain fp32: no TF32 tensor-op math, whatever NVIDIA_TF32_OVERRIDE says.
BlasStatus BlasSetup(BlasHandle h) { return cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH); }
BlasStatus BlasGemmNT(BlasHandle h, int m, int n, int k, const float* alpha, const float* x,
                      int ldx, const float* w, int ldw, const float* beta, float* y, int ldy) {
  return cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, alpha, w, ldw, x, ldx, beta, y, ldy);
}
// bf16 products need the default math mode (tensor ops); the fp32 path stays pedantic.
BlasStatus BlasGemmNTBf16(BlasHandle h, int m, int n, int k, const float* alpha, const uint16_t* x,
                          int ldx, const uint16_t* w, int ldw, const float* beta, float* y,
                          int ldy) {
  BlasStatus s = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  s = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, alpha, w, CUDA_R_16BF, ldw, x, CUDA_R_16BF,
                   ldx, beta, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  const BlasStatus restore = cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
  return s != CUBLAS_STATUS_SUCCESS ? s : restore;
}
#endif

BlasHandle AsHandle(void* h) { return static_cast<BlasHandle>(h); }

bool FitsInt(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

// Runs `gemm` (one of the BlasGemmNT* above) on int sizes, or says why it cannot.
template <typename T, typename Gemm>
absl::Status RunGemm(const char* what, Gemm gemm, BlasHandle h, int64_t m, int64_t n, int64_t k,
                     const T* x, int64_t ldx, const T* w, int64_t ldw, float* y, int64_t ldy,
                     float beta) {
  if (!FitsInt(m) || !FitsInt(n) || !FitsInt(k) || !FitsInt(ldx) || !FitsInt(ldw) ||
      !FitsInt(ldy)) {
    return absl::InvalidArgumentError(absl::StrCat("gpu blas: ", what, " sizes m=", m, " n=", n,
                                                   " k=", k, " exceed the 32-bit interface"));
  }
  const float alpha = 1.0f;
  const BlasStatus s =
      gemm(h, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha, x,
           static_cast<int>(ldx), w, static_cast<int>(ldw), &beta, y, static_cast<int>(ldy));
  if (s != kBlasOk) {
    return absl::InternalError(absl::StrCat("gpu blas: ", what, " m=", m, " n=", n, " k=", k,
                                            " failed (status ", static_cast<int>(s), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuBlas>> GpuBlas::Create(hipStream_t stream) {
  BlasHandle h = nullptr;
  BlasStatus s = BlasCreate(&h);
  if (s != kBlasOk) {
    return absl::UnavailableError(
        absl::StrCat("gpu blas: creating a handle failed (status ", static_cast<int>(s), ")"));
  }
  s = BlasSetStream(h, stream);
  if (s == kBlasOk) s = BlasSetup(h);
  if (s != kBlasOk) {
    BlasDestroy(h);
    return absl::InternalError(
        absl::StrCat("gpu blas: configuring the handle failed (status ", static_cast<int>(s), ")"));
  }
  return std::unique_ptr<GpuBlas>(new GpuBlas(h));
}

GpuBlas::~GpuBlas() { BlasDestroy(AsHandle(handle_)); }

absl::Status GpuBlas::GemmNT(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx,
                             const float* w, int64_t ldw, float* y, int64_t ldy, float beta) {
  return RunGemm("sgemm", BlasGemmNT, AsHandle(handle_), m, n, k, x, ldx, w, ldw, y, ldy, beta);
}

absl::Status GpuBlas::GemmNTBf16(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                                 const uint16_t* w, int64_t ldw, float* y, int64_t ldy,
                                 float beta) {
  return RunGemm("bf16 gemm", BlasGemmNTBf16, AsHandle(handle_), m, n, k, x, ldx, w, ldw, y, ldy,
                 beta);
}

}  // namespace cairn::infer
