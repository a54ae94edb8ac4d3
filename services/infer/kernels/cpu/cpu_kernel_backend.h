#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_CPU_KERNEL_BACKEND_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_CPU_KERNEL_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/thread_pool.h"
#include "services/infer/kernels/kernel_backend.h"

namespace cairn::infer {

struct CpuKernelBackendOptions {
  // Worker threads for the backend's own loops and for OpenBLAS; 0 means one per hardware
  // thread. The count is fixed for the backend's lifetime, so work splits (and therefore
  // results) do not depend on load.
  int threads = 0;
};

// The reference backend: fp32 math on the host. GEMMs, including attention's score and value
// products per head, go through OpenBLAS (cblas_sgemm, which splits the output, never the
// reduction, over its threads); the other operations are plain loops split over a fixed pool
// of threads by head or by row. Every split assigns each output element to exactly one thread
// with a fixed reduction order, so results are bit-identical run to run for the same shapes.
//
// Thread-compatible (KernelBackend). OpenBLAS's thread count is process-wide; Create() sets it.
class CpuKernelBackend final : public KernelBackend {
 public:
  static absl::StatusOr<std::unique_ptr<CpuKernelBackend>> Create(
      const CpuKernelBackendOptions& options);
  ~CpuKernelBackend() override;

  absl::string_view name() const override { return "cpu-fp32"; }
  int threads() const { return threads_; }

  void MatMulTransposed(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                        int64_t n, float* y, int64_t ldy, bool accumulate) override;
  void MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                  float* y, int64_t ldy, bool accumulate) override;
  void EmbeddingGather(const float* table, int64_t dim, const int32_t* ids, int64_t n,
                       float* out) override;
  void SplitHeadPairs(const float* in, int64_t rows, int heads, int head_dim, float* a,
                      float* b) override;
  void SigmoidMul(float* x, const float* gate, int64_t n) override;
  void GdnGates(const float* in, int64_t ld, int64_t tokens, int heads, int64_t b_offset,
                int64_t a_offset, const float* dt_bias, const float* neg_a, float* g,
                float* beta) override;
  void MoeRoute(const float* logits, int64_t tokens, int experts, int top_k, bool renormalise,
                int32_t* ids, float* weights) override;
  void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
               bool zero_centred, float* y) override;
  void GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w,
                    float eps, float* y) override;
  void L2Normalize(float* x, int64_t rows, int64_t dim, float eps, float scale) override;
  void Rope(float* x, int64_t tokens, int64_t ld, int heads, int head_dim, int rotary_dim,
            const float* inv_freq, int64_t first_position) override;
  void SiluMul(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t rows,
               int64_t dim, float* out) override;
  void CausalConvSilu(const float* in, int64_t ld_in, int64_t tokens, int64_t channels,
                      const float* w, int kernel, float* state, float* out) override;
  void Attention(const AttentionArgs& args) override;
  void GatedDeltaRule(const GatedDeltaArgs& args) override;

 private:
  explicit CpuKernelBackend(int threads);

  void RowInvariantAttention(const AttentionArgs& args);

  // Runs fn(i) for every i in [0, n), spread over the pool and the calling thread; returns
  // when all are done.
  void ParallelFor(int64_t n, absl::FunctionRef<void(int64_t)> fn);

  const int threads_;
  std::unique_ptr<ThreadPool> pool_;  // threads_ - 1 workers; null when threads_ == 1.
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_CPU_KERNEL_BACKEND_H_
