#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_CPU_KERNEL_BACKEND_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_CPU_KERNEL_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/concurrency/mutex.h"
#include "services/infer/kernels/cpu/row_kernels.h"
#include "services/infer/kernels/cpu/worker_team.h"
#include "services/infer/kernels/kernel_backend.h"

namespace cairn::infer {

struct CpuKernelBackendOptions {
  // Worker threads for the backend's own loops and for OpenBLAS; 0 means one per hardware
  // thread. The count is fixed for the backend's lifetime, so work splits (and therefore
  // results) do not depend on load.
  int threads = 0;
  // The instruction set of the row-invariant product and of weight widening: "auto" (the widest
  // this processor runs), "avx512", "avx2" or "portable". Every choice gives the same bits.
  std::string isa = "auto";
  // Accept bf16 / f16 weights of several parts (AcceptsWeightType). Off, the backend takes
  // what a backend without typed weights takes (one fp32 part), so models widen their weights:
  // for tests of that path and for comparisons.
  bool typed_weights = true;
  // With typed weights, ask for bf16 / f16 matrices in the row-tile layout (TakesRowTiles,
  // row_tiles.h): a model in host memory then packs them at load time (a copy of the weights
  // instead of the mapped file) and products read four rows as one stream. Same bits either
  // way; off for comparisons.
  bool row_tiles = true;
  // When the row kernel asks for a row tile's weights ahead of use (cpu::RowTileProducts):
  // "auto" (what measured faster on this kind of processor, DefaultTilePrefetchMinInputBytes),
  // "always", "never", or a size in bytes of a group's input rows from which on. Never changes
  // bits.
  std::string tile_prefetch = "auto";
  // How a prefill GEMM (MatMulTransposedTyped) is spread over the threads (cpu/tiled_gemm.h):
  // "rows" (each thread multiplies a block of the input rows by a chunk of the weights widened
  // once, so OpenBLAS packs each input row once per chunk but every chunk once per thread),
  // "weights" (each thread multiplies every input row by its tiles of the weights, and OpenBLAS
  // packs the input again per tile), or "auto": rows for products of at least
  // kGemmRowSplitMinRows input rows, where packing the input per tile costs more. Every output
  // element is one sgemm reduction over k either way; the bits may differ between the two
  // (OpenBLAS's kernels for the edges of a call), never run to run.
  std::string gemm_split = "auto";
  // Measured on a two-core Xeon, alternating the two splits in one process (cairn-cpu-bench
  // --compare-gemm-split): prompts of 2048 tokens 4.7-5.5 % faster split by rows on bench-50m
  // and bench-500m, prompts of 512 tokens 5-7 % slower.
  static constexpr int64_t kGemmRowSplitMinRows = 1024;
  // How long, in microseconds, a helper thread watches for the backend's next parallel loop
  // before it sleeps (cpu::WorkerTeam); 0: helpers sleep between loops. Watching trades
  // processor time spent waiting for the wake-up a loop otherwise costs. Off here (tests and
  // tools run many backends on few cores: on the shared two-core development machine at load 5 a
  // four-slot decode step of bench-50m read 13.6 and 10.8 GB/s of weights per processor-second
  // without it, 10.8 and 8.8 with 30 us); the serving programs, whose backend has the machine's
  // cores to itself, watch (kServingCpuSpinMicros, backend_factory.h).
  int spin_us = kDefaultSpinMicros;
  static constexpr int kDefaultSpinMicros = 0;
  // Accumulate the wall time of each kind of operation (profile()); for benchmarks. See also
  // CpuKernelBackend::ProfileProcessorTime.
  bool profile = false;
};

// Time a CpuKernelBackend spent in each kind of operation since it was created or last reset
// (CpuKernelBackendOptions::profile): wall-clock seconds, or the process's processor seconds
// (every thread's) while the operation ran.
struct CpuKernelProfile {
  double matmul_s = 0;       // MatMulTransposed (the GEMM path).
  double matmul_rows_s = 0;  // MatMulRows (the row-invariant path).
  double attention_s = 0;
  double delta_rule_s = 0;
  double other_s = 0;  // Norms, RoPE, activations, gathers, convolution, routing.
};

// One blocked (prefill) Attention call, recorded while profiling: it computed
// cpu::BlockedAttentionProducts(tokens, past, head_dim) for each of its q_heads query heads.
struct CpuAttentionCall {
  int64_t tokens = 0;
  int64_t past = 0;
  int q_heads = 0;
  int head_dim = 0;
};

// One GatedDeltaRule call, recorded while profiling: the delta rule over `tokens` tokens for
// each of its v_heads heads, chunked with `chunk` tokens per chunk (0: recurrent).
struct CpuDeltaRuleCall {
  int64_t tokens = 0;
  int v_heads = 0;
  int dk = 0;
  int dv = 0;
  int chunk = 0;
};

// The reference backend: fp32 math on the host. GEMMs, including attention's score and value
// products per head, go through OpenBLAS's cblas_sgemm on one thread: the backend splits each
// product's output (never its reduction) into tiles of weight rows, or attention into heads and
// query blocks, and spreads those over its own threads, widening a tile of bf16 or f16 weights
// to fp32 just before its sgemm. The row-invariant product reads bf16, f16 or fp32 weights directly
// (AVX-512 or AVX2 where the processor has them, chosen at run time; the same bits on every path).
// The other operations are plain loops split over a fixed pool of threads by head or by row. Every
// split assigns each output element to exactly one thread with a fixed reduction order, so results
// are bit-identical run to run for the same shapes.
//
// Thread-compatible (KernelBackend). OpenBLAS's thread count is process-wide; Create() sets it to
// one (OpenBLAS's own workers spin between calls, which took a fifth of the processor time of a
// prefill pass on a two-core machine).
class CpuKernelBackend final : public KernelBackend {
 public:
  // InvalidArgument for a negative thread count or an unknown isa; FailedPrecondition when
  // this processor lacks the isa asked for.
  static absl::StatusOr<std::unique_ptr<CpuKernelBackend>> Create(
      const CpuKernelBackendOptions& options);
  ~CpuKernelBackend() override;

  absl::string_view name() const override { return "cpu-fp32"; }
  int threads() const { return threads_; }
  cpu::Isa isa() const { return isa_; }
  // cpu::RowTileProducts' prefetch threshold (CpuKernelBackendOptions::tile_prefetch resolved).
  int64_t tile_prefetch_min_input_bytes() const { return tile_prefetch_min_input_bytes_; }
  // The time spent per kind of operation, wall-clock and processor time; all zero unless
  // profiling was asked for.
  const CpuKernelProfile& profile() const { return profile_; }
  const CpuKernelProfile& cpu_profile() const { return cpu_profile_; }
  // With profiling on, also accumulate processor time (cpu_profile()). Reading the process's
  // processor time is a system call per operation boundary: it slows a decode step measurably,
  // so it is off until asked for.
  void ProfileProcessorTime(bool on) { profile_cpu_ = on; }
  // The blocked Attention calls since the profile was last reset (with profiling on), so that a
  // benchmark can time the same products bare.
  const std::vector<CpuAttentionCall>& attention_calls() const { return attention_calls_; }
  // The GatedDeltaRule calls since the profile was last reset (with profiling on), so that a
  // benchmark can count their FLOPs and time their products bare.
  const std::vector<CpuDeltaRuleCall>& delta_rule_calls() const { return delta_rule_calls_; }
  void ResetProfile() {
    profile_ = CpuKernelProfile();
    cpu_profile_ = CpuKernelProfile();
    attention_calls_.clear();
    delta_rule_calls_.clear();
  }

  void MatMulTransposed(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                        int64_t n, float* y, int64_t ldy, bool accumulate) override;
  void MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                  float* y, int64_t ldy, bool accumulate) override;
  void EmbeddingGather(const float* table, int64_t dim, const int32_t* ids, int64_t n,
                       float* out) override;
  bool AcceptsWeightType(WeightType) const override { return typed_weights_; }
  bool TakesRowTiles(WeightType type) const override {
    return typed_weights_ && row_tiles_ && type != WeightType::kF32;
  }
  void MatMulTransposedTyped(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                             float* y, int64_t ldy, bool accumulate) override;
  void MatMulRowsTyped(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                       int64_t ldy, bool accumulate) override;
  void EmbeddingGatherTyped(const WeightMatrix& table, const int32_t* ids, int64_t n,
                            float* out) override;
  void SplitHeadPairs(const float* in, int64_t rows, int heads, int head_dim, float* a,
                      float* b) override;
  void SplitHeadPairsStrided(const float* in, int64_t ld, int64_t rows, int heads, int head_dim,
                             float* a, float* b) override;
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
  void RmsNormHeads(float* x, int64_t tokens, int heads, int64_t dim, int64_t ld, const float* w,
                    float eps, bool zero_centred) override;
  void GatedRmsNormHeads(const float* x, const float* z, int64_t tokens, int heads, int64_t dim,
                         int64_t z_ld, const float* w, float eps, float* y) override;
  void L2Normalize(float* x, int64_t rows, int64_t dim, float eps, float scale) override;
  // Both arrays' rows in one spread over the threads (the default makes a call per token when
  // the token rows are apart), each row as L2Normalize computes it.
  void L2NormalizeTwo(float* a, float a_scale, float* b, float b_scale, int64_t tokens, int heads,
                      int64_t dim, int64_t ld, float eps) override;
  void Rope(float* x, int64_t tokens, int64_t ld, int heads, int head_dim, int rotary_dim,
            const float* inv_freq, int64_t first_position) override;
  void SiluMul(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t rows,
               int64_t dim, float* out) override;
  void CausalConvSilu(const float* in, int64_t ld_in, int64_t tokens, int64_t channels,
                      const float* w, int kernel, float* state, float* out) override;
  void Attention(const AttentionArgs& args) override;
  // One parallel loop over every sequence's items where each sequence takes the row-invariant
  // or the short path (decode steps); otherwise Attention for each in order.
  void AttentionBatch(absl::Span<const AttentionArgs> batch) override;
  void GatedDeltaRule(const GatedDeltaArgs& args) override;
  // One parallel loop over every sequence's heads (a decode step's sequences are one token
  // each: a loop per sequence would hand work to the threads once per sequence). Each head is
  // computed as by GatedDeltaRule.
  void GatedDeltaRuleBatch(absl::Span<const GatedDeltaArgs> batch) override;

 private:
  CpuKernelBackend(int threads, cpu::Isa isa, bool typed_weights, bool row_tiles,
                   int64_t tile_prefetch_min_input_bytes, int64_t gemm_split_rows_from,
                   bool profile, int spin_us);

  // Adds the wall and processor time from its construction to its destruction to one field of
  // the profiles.
  class ScopedTimer;

  // Runs fn(i) for every i in [0, n), spread over the pool and the calling thread; returns
  // when all are done.
  void ParallelFor(int64_t n, absl::FunctionRef<void(int64_t)> fn);
  // As ParallelFor, with the index in [0, threads_) of the thread running the item (0 is the
  // calling thread), so that an item can use that thread's buffers.
  void ParallelForWorkers(int64_t n, absl::FunctionRef<void(int64_t, int)> fn);
  // ParallelForWorkers for items that call BLAS; on the calling thread only in builds with
  // ThreadSanitizer, which cannot see OpenBLAS's own synchronisation.
  void BlasFor(int64_t n, absl::FunctionRef<void(int64_t, int)> fn);
  // y = x . w^T (+ y) through single-threaded sgemm calls spread over the threads, split by
  // input rows or by weight rows (gemm_split_rows_from_, cpu/tiled_gemm.h); narrow weights are
  // widened a chunk or tile at a time.
  void TiledGemm(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                 int64_t ldy, bool accumulate);
  // Runs fn(begin, end) over [0, rows) in ranges of rows of about kElementwiseItemElements
  // elements (`row_elements` each) spread over the pool; one range on the calling thread when
  // the work is small. Each row is computed as without the split.
  void ParallelRows(int64_t rows, int64_t row_elements,
                    absl::FunctionRef<void(int64_t, int64_t)> fn);

  const int threads_;
  const cpu::Isa isa_;
  const bool typed_weights_;
  const bool row_tiles_;
  const int64_t tile_prefetch_min_input_bytes_;  // cpu::RowTileProducts' threshold.
  // CpuKernelBackendOptions::gemm_split resolved: input rows from which a GEMM is split by
  // them (0: always, INT64_MAX: never).
  const int64_t gemm_split_rows_from_;
  std::unique_ptr<cpu::WorkerTeam> team_;  // threads_ - 1 helpers; null when threads_ == 1.
  const bool profiling_;
  CpuKernelProfile profile_;
  CpuKernelProfile cpu_profile_;
  bool profile_cpu_ = false;
  std::vector<CpuAttentionCall> attention_calls_;
  std::vector<CpuDeltaRuleCall> delta_rule_calls_;
  // Per thread (ParallelForWorkers' index): a tile of weights widened for sgemm, attention's
  // score block.
  std::vector<std::vector<float>> widened_;
  std::vector<std::vector<float>> scores_;
  // The GEMM's chunk of weights widened for every thread's sgemm (gemm_split "rows").
  std::vector<float> gemm_chunk_;
  // The blocked attention's keys, transposed for its score kernel.
  std::vector<float> transposed_keys_;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_CPU_KERNEL_BACKEND_H_
