#include "services/infer/kernels/hip/gpu_blas.h"

#include <array>
#include <cstdint>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

#if defined(__HIP_PLATFORM_AMD__)
#if __has_include(<hipblas/hipblas.h>)
#include <hipblas/hipblas.h>
#else
#include <hipblas.h>
#endif
#else
#include <cublasLt.h>
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

#if defined(__HIP_PLATFORM_AMD__)

// hipBLAS has no pinned algorithms here: GemmNTBf16 is hipblasGemmEx (header comment).
struct GpuBlas::Pinned {
  static absl::StatusOr<std::unique_ptr<Pinned>> Create(hipStream_t) {
    return std::make_unique<Pinned>();
  }
};

absl::Status GpuBlas::GemmNTBf16(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                                 const uint16_t* w, int64_t ldw, float* y, int64_t ldy,
                                 float beta) {
  return GemmNTBf16Unpinned(m, n, k, x, ldx, w, ldw, y, ldy, beta);
}

#else

namespace {

absl::Status LtError(cublasStatus_t s, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("gpu blas: ", what, " failed (cuBLASLt status ", static_cast<int>(s), ")"));
}

// A cuBLASLt matrix layout, destroyed with its owner.
class LtLayout {
 public:
  LtLayout() = default;
  ~LtLayout() {
    if (layout_ != nullptr) cublasLtMatrixLayoutDestroy(layout_);
  }
  LtLayout(const LtLayout&) = delete;
  LtLayout& operator=(const LtLayout&) = delete;
  cublasStatus_t Init(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
    return cublasLtMatrixLayoutCreate(&layout_, type, static_cast<uint64_t>(rows),
                                      static_cast<uint64_t>(cols), ld);
  }
  cublasLtMatrixLayout_t get() const { return layout_; }

 private:
  cublasLtMatrixLayout_t layout_ = nullptr;
};

// The three layouts of the column-major product C[n, m] = W^T[n, k] X[k, m] (row-major
// y = x w^T): W is [k, n] (ld ldw, transposed), X is [k, m] (ld ldx), C is fp32 [n, m] (ld ldy).
struct LtLayouts {
  LtLayout w, x, y;
  absl::Status Init(int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldw, int64_t ldy) {
    cublasStatus_t s = w.Init(CUDA_R_16BF, k, n, ldw);
    if (s == CUBLAS_STATUS_SUCCESS) s = x.Init(CUDA_R_16BF, k, m, ldx);
    if (s == CUBLAS_STATUS_SUCCESS) s = y.Init(CUDA_R_32F, n, m, ldy);
    return s == CUBLAS_STATUS_SUCCESS ? absl::OkStatus() : LtError(s, "creating layouts");
  }
};

// The largest power of two up to 16 dividing every value (addresses and row strides in bytes).
uint32_t Alignment(std::initializer_list<uint64_t> values) {
  uint32_t a = 16;
  for (uint64_t v : values) {
    while (a > 1 && v % a != 0) a /= 2;
  }
  return a;
}

}  // namespace

struct GpuBlas::Pinned {
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatmulAlgo_t algo = {};
  };
  // n, k, ldx, ldw, ldy, alignment.
  using Key = std::array<int64_t, 6>;

  static absl::StatusOr<std::unique_ptr<Pinned>> Create(hipStream_t stream) {
    auto p = std::make_unique<Pinned>();
    p->stream = stream;
    const cublasStatus_t s = cublasLtCreate(&p->lt);
    if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "creating the cuBLASLt handle");
    return p;
  }
  ~Pinned() {
    for (auto& [key, plan] : plans) cublasLtMatmulDescDestroy(plan.op);
    if (lt != nullptr) cublasLtDestroy(lt);
  }

  // The plan of a shape: made on first use, for kPinnedAlgorithmRows rows.
  absl::StatusOr<const Plan*> PlanFor(const Key& key) {
    const auto it = plans.find(key);
    if (it != plans.end()) return &it->second;
    Plan plan;
    const cublasStatus_t s = cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "creating a matmul descriptor");
    const absl::Status chosen = Choose(key, plan);
    if (!chosen.ok()) {
      cublasLtMatmulDescDestroy(plan.op);
      return chosen;
    }
    return &plans.emplace(key, plan).first->second;
  }

  // Configures plan.op for the product and pins plan.algo.
  absl::Status Choose(const Key& key, Plan& plan) {
    const auto [n, k, ldx, ldw, ldy, align] = key;
    const cublasOperation_t transpose = CUBLAS_OP_T;
    const cublasOperation_t none = CUBLAS_OP_N;
    cublasStatus_t s = cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &transpose, sizeof(transpose));
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none));
    }
    if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "configuring a matmul descriptor");
    LtLayouts layouts;
    RETURN_IF_ERROR(layouts.Init(kPinnedAlgorithmRows, n, k, ldx, ldw, ldy));
    cublasLtMatmulPreference_t pref = nullptr;
    s = cublasLtMatmulPreferenceCreate(&pref);
    if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "creating a preference");
    // No workspace and no reduction scheme: no split-K, no stream-K.
    const uint64_t workspace = 0;
    const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    const uint32_t alignment = static_cast<uint32_t>(align);
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace, sizeof(workspace));
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                               &scheme, sizeof(scheme));
    }
    for (const cublasLtMatmulPreferenceAttributes_t a :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      if (s == CUBLAS_STATUS_SUCCESS) {
        s = cublasLtMatmulPreferenceSetAttribute(pref, a, &alignment, sizeof(alignment));
      }
    }
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatmulAlgoGetHeuristic(lt, plan.op, layouts.w.get(), layouts.x.get(),
                                         layouts.y.get(), layouts.y.get(), pref, 1, &result,
                                         &found);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "choosing an algorithm");
    if (found == 0) {
      return absl::InternalError(absl::StrCat("gpu blas: no pinned bf16 algorithm for n=", n,
                                              " k=", k, " alignment ", align));
    }
    const uint32_t splits = 1;
    s = cublasLtMatmulAlgoConfigSetAttribute(&result.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                             sizeof(splits));
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatmulAlgoConfigSetAttribute(&result.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                               &scheme, sizeof(scheme));
    }
    if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "pinning the algorithm");
    plan.algo = result.algo;
    return absl::OkStatus();
  }

  cublasLtHandle_t lt = nullptr;
  hipStream_t stream = nullptr;
  std::map<Key, Plan> plans;
};

absl::Status GpuBlas::GemmNTBf16(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                                 const uint16_t* w, int64_t ldw, float* y, int64_t ldy,
                                 float beta) {
  if (m < 0 || n < 0 || k <= 0 || ldx < k || ldw < k || ldy < n) {
    return absl::InvalidArgumentError(absl::StrCat("gpu blas: bf16 gemm shape m=", m, " n=", n,
                                                   " k=", k, " ldx=", ldx, " ldw=", ldw,
                                                   " ldy=", ldy));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  constexpr uint64_t kBf16 = 2;
  const int64_t align =
      Alignment({reinterpret_cast<uintptr_t>(x), reinterpret_cast<uintptr_t>(w),
                 reinterpret_cast<uintptr_t>(y), ldx * kBf16, ldw * kBf16, ldy * sizeof(float)});
  ASSIGN_OR_RETURN(const Pinned::Plan* plan, pinned_->PlanFor({n, k, ldx, ldw, ldy, align}));
  LtLayouts layouts;
  RETURN_IF_ERROR(layouts.Init(m, n, k, ldx, ldw, ldy));
  const float alpha = 1.0f;
  const cublasStatus_t s = cublasLtMatmul(
      pinned_->lt, plan->op, &alpha, w, layouts.w.get(), x, layouts.x.get(), &beta, y,
      layouts.y.get(), y, layouts.y.get(), &plan->algo, nullptr, 0, pinned_->stream);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return LtError(s, absl::StrCat("pinned bf16 gemm m=", m, " n=", n, " k=", k));
  }
  return absl::OkStatus();
}

#endif

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
  absl::StatusOr<std::unique_ptr<Pinned>> pinned = Pinned::Create(stream);
  if (!pinned.ok()) {
    BlasDestroy(h);
    return pinned.status();
  }
  return std::unique_ptr<GpuBlas>(new GpuBlas(h, *std::move(pinned)));
}

GpuBlas::GpuBlas(void* handle, std::unique_ptr<Pinned> pinned)
    : handle_(handle), pinned_(std::move(pinned)) {}

GpuBlas::~GpuBlas() {
  pinned_.reset();
  BlasDestroy(AsHandle(handle_));
}

absl::Status GpuBlas::GemmNT(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx,
                             const float* w, int64_t ldw, float* y, int64_t ldy, float beta) {
  return RunGemm("sgemm", BlasGemmNT, AsHandle(handle_), m, n, k, x, ldx, w, ldw, y, ldy, beta);
}

absl::Status GpuBlas::GemmNTBf16Unpinned(int64_t m, int64_t n, int64_t k, const uint16_t* x,
                                         int64_t ldx, const uint16_t* w, int64_t ldw, float* y,
                                         int64_t ldy, float beta) {
  return RunGemm("bf16 gemm", BlasGemmNTBf16, AsHandle(handle_), m, n, k, x, ldx, w, ldw, y, ldy,
                 beta);
}

}  // namespace cairn::infer
