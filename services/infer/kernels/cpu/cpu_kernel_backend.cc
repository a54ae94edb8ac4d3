#include "services/infer/kernels/cpu/cpu_kernel_backend.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status/check.h"
#include "services/infer/kernels/cpu/attention.h"
#include "services/infer/kernels/cpu/delta_rule.h"
#include "services/infer/kernels/cpu/simd.h"
#include "services/infer/kernels/cpu/tiled_gemm.h"
#include "services/infer/kernels/row_tiles.h"

// OpenBLAS is not built with ThreadSanitizer: its accesses and its internal locking are
// invisible to it, so TSan builds call BLAS from the calling thread only.
#if defined(__SANITIZE_THREAD__)
#define CAIRN_BLAS_CALLER_ONLY 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CAIRN_BLAS_CALLER_ONLY 1
#endif
#endif

namespace cairn::infer {
namespace {

using cpu::ExpNonPositive16;
using cpu::F32x16;

// Output columns per block of MatMulRows (a multiple of kRowTileRows): small enough that a
// block of weight rows stays in cache while every group of input rows passes over it.
constexpr int64_t kRowMatMulBlock = 64;

// Work items of MatMulRows per backend thread, each a contiguous run of blocks: the weights a
// thread reads are then one ascending stream per item, which the prefetcher follows (blocks
// taken one at a time in turn break every thread's stream every block; measured on bench-50m
// decoding one slot: 46-48 % of the read loop per processor-second with single blocks, 57-58 %
// with one or two runs per thread). More than one, so that a thread the machine delays takes
// fewer of them.
constexpr int64_t kRowItemsPerThread = 2;

// MatMulTransposedTyped runs products of at most this many rows through the row kernel: it
// reads narrow weights in place, where the GEMM would first widen all of them.
constexpr int64_t kGemmMinRows = 16;

// The split of a GEMM by input rows (CpuKernelBackendOptions::gemm_split "rows"): the most
// weights widened at once into the shared chunk (8 MiB of fp32: a whole projection of the small
// models, 512 rows of a 4096-wide one), blocks of input rows per thread (one: each block's sgemm
// packs the whole chunk again) and the fewest rows of a block.
constexpr int64_t kGemmChunkElements = int64_t{1} << 21;
constexpr int kGemmRowBlocksPerThread = 1;
constexpr int64_t kGemmMinBlockRows = 32;

// Elements of an elementwise operation (a norm, an activation, RoPE) per work item: enough to
// amortise handing the item to another thread, so that a decode step's few rows stay on the
// calling thread.
constexpr int64_t kElementwiseItemElements = int64_t{1} << 15;

// Returns row `j` of `w`.
const void* WeightRow(const WeightMatrix& w, int64_t j) {
  for (int p = 0; p < w.num_parts; ++p) {
    if (j < w.parts[p].rows) {
      return static_cast<const char*>(w.parts[p].data) + j * w.cols * WeightTypeSize(w.type);
    }
    j -= w.parts[p].rows;
  }
  CAIRN_CHECK(false);  // j < w.rows(): the caller's loop bound.
  return nullptr;
}

// rows[i] = row `first + i` of `w` for i < count, walking the parts once.
void WeightRows(const WeightMatrix& w, int64_t first, int64_t count, const void** rows) {
  const int64_t row_bytes = w.cols * WeightTypeSize(w.type);
  int p = 0;
  int64_t j = first;
  while (j >= w.parts[p].rows) j -= w.parts[p++].rows;
  for (int64_t i = 0; i < count; ++i, ++j) {
    while (j == w.parts[p].rows) {
      j = 0;
      ++p;
    }
    rows[i] = static_cast<const char*>(w.parts[p].data) + j * row_bytes;
  }
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// torch softplus switches to the identity above this input.
constexpr float kSoftplusThreshold = 20.0f;
float Softplus(float x) { return x > kSoftplusThreshold ? x : std::log1p(std::exp(x)); }

// p[0, 16) = sigmoid(p[0, 16)): 1 / (1 + e) for x >= 0 and e / (1 + e) below, e = exp(-|x|),
// so that the exponential never overflows.
inline __attribute__((always_inline)) void Sigmoid16(float* p) {
  F32x16 x;
  std::memcpy(&x, p, sizeof(x));
  const F32x16 neg_abs = x < 0.0f ? x : -x;
  alignas(64) float e[16];
  std::memcpy(e, &neg_abs, sizeof(e));
  ExpNonPositive16(e);
  F32x16 ev;
  std::memcpy(&ev, e, sizeof(ev));
  const F32x16 inv = 1.0f / (1.0f + ev);
  const F32x16 y = x >= 0.0f ? inv : ev * inv;
  std::memcpy(p, &y, sizeof(y));
}

// out[0, 16) = a * sigmoid(g) (* b where b is given), lane-wise.
inline __attribute__((always_inline)) void SigmoidProducts16(const float* a, const float* g,
                                                             const float* b, float* out) {
  alignas(64) float sig[16];
  std::memcpy(sig, g, sizeof(sig));
  Sigmoid16(sig);
  F32x16 av, sv;
  std::memcpy(&av, a, sizeof(av));
  std::memcpy(&sv, sig, sizeof(sv));
  F32x16 y = av * sv;
  if (b != nullptr) {
    F32x16 bv;
    std::memcpy(&bv, b, sizeof(bv));
    y = y * bv;
  }
  std::memcpy(out, &y, sizeof(y));
}

// out[i] = a[i] * sigmoid(g[i]) (* b[i] where b is given) for i < n, sixteen lanes at a time;
// the last partial vector is padded, so that an element's bits do not depend on its position.
// With a = g it is SiLU.
CAIRN_SIMD_CLONES void SigmoidProducts(const float* a, const float* g, const float* b, int64_t n,
                                       float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    SigmoidProducts16(a + i, g + i, b == nullptr ? nullptr : b + i, out + i);
  }
  if (i == n) return;
  // The last partial vector, padded with zeros.
  alignas(64) float ta[16] = {}, tg[16] = {}, tb[16] = {}, to[16];
  const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
  std::memcpy(ta, a + i, bytes);
  std::memcpy(tg, g + i, bytes);
  if (b != nullptr) std::memcpy(tb, b + i, bytes);
  SigmoidProducts16(ta, tg, b == nullptr ? nullptr : tb, to);
  std::memcpy(out + i, to, bytes);
}

// The sum of x[i]^2 for i < n: sixteen lane sums (lane l takes i = l mod 16, in order; the last
// partial vector padded with zeros), then the lanes in a fixed tree (l + 8, then + 4, + 2, + 1).
// A plain running sum is a chain of dependent additions, one element per add latency, which
// made the norms of a 512-wide prefill pass a visible share of it; this order is the same in
// every clone.
CAIRN_SIMD_CLONES float SumOfSquares(const float* x, int64_t n) {
  F32x16 acc = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    F32x16 v;
    std::memcpy(&v, x + i, sizeof(v));
    acc += v * v;
  }
  if (i < n) {
    alignas(64) float tail[16] = {};
    std::memcpy(tail, x + i, static_cast<size_t>(n - i) * sizeof(float));
    F32x16 v;
    std::memcpy(&v, tail, sizeof(v));
    acc += v * v;
  }
  alignas(64) float lanes[16];
  std::memcpy(lanes, &acc, sizeof(lanes));
  for (int half = 8; half >= 1; half /= 2) {
    for (int l = 0; l < half; ++l) lanes[l] += lanes[l + half];
  }
  return lanes[0];
}

// y[i] = x[i] * a * (w[i], or 1 + w[i] when zero-centred, or b when w is null) for i < n,
// multiplied in that order: the arithmetic of the scalar loops the norms had, lane-wise.
CAIRN_SIMD_CLONES void ScaleRow(const float* x, float a, const float* w, bool zero_centred, float b,
                                int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    F32x16 v;
    std::memcpy(&v, x + i, sizeof(v));
    F32x16 f;
    if (w == nullptr) {
      f = F32x16{} + b;
    } else {
      std::memcpy(&f, w + i, sizeof(f));
      if (zero_centred) f = 1.0f + f;
    }
    v = v * a * f;
    std::memcpy(y + i, &v, sizeof(v));
  }
  for (; i < n; ++i) {
    const float f = w == nullptr ? b : zero_centred ? 1.0f + w[i] : w[i];
    y[i] = x[i] * a * f;
  }
}

// o[ch] = silu(sum over m < kernel, in order from zero, of taps[m][ch] * window[m][ch]) for
// ch < channels, sixteen channels at a time (lane-wise, so the same bits as one at a time).
CAIRN_SIMD_CLONES void ConvSiluRow(const float* taps, const float* const* window, int kernel,
                                   int64_t channels, float* o) {
  int64_t ch = 0;
  for (; ch + 16 <= channels; ch += 16) {
    F32x16 acc = {};
    for (int m = 0; m < kernel; ++m) {
      F32x16 wv, xv;
      std::memcpy(&wv, taps + m * channels + ch, sizeof(wv));
      std::memcpy(&xv, window[m] + ch, sizeof(xv));
      acc += wv * xv;
    }
    std::memcpy(o + ch, &acc, sizeof(acc));
  }
  for (; ch < channels; ++ch) {
    float acc = 0.0f;
    for (int m = 0; m < kernel; ++m) acc += taps[m * channels + ch] * window[m][ch];
    o[ch] = acc;
  }
  SigmoidProducts(o, o, nullptr, channels, o);  // silu
}

// The processor time of this process (every thread), in seconds.
double ProcessCpuSeconds() {
  timespec ts;
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

class CpuKernelBackend::ScopedTimer {
 public:
  ScopedTimer(CpuKernelBackend* backend, double CpuKernelProfile::*field)
      : backend_(backend->profiling_ ? backend : nullptr), field_(field) {
    if (backend_ == nullptr) return;
    start_ = std::chrono::steady_clock::now();
    if (backend_->profile_cpu_) start_cpu_ = ProcessCpuSeconds();
  }
  ~ScopedTimer() {
    if (backend_ == nullptr) return;
    backend_->profile_.*field_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (backend_->profile_cpu_) backend_->cpu_profile_.*field_ += ProcessCpuSeconds() - start_cpu_;
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  CpuKernelBackend* backend_;  // Null when not profiling.
  double CpuKernelProfile::*field_;
  std::chrono::steady_clock::time_point start_;
  double start_cpu_ = 0;
};

absl::StatusOr<std::unique_ptr<CpuKernelBackend>> CpuKernelBackend::Create(
    const CpuKernelBackendOptions& options) {
  if (options.threads < 0) {
    return absl::InvalidArgumentError("cpu backend threads must be >= 0");
  }
  if (options.spin_us < 0) {
    return absl::InvalidArgumentError("cpu backend spin_us must be >= 0");
  }
  cpu::Isa isa = cpu::BestIsa();
  if (options.isa != "auto") {
    bool known = false;
    for (cpu::Isa i : {cpu::Isa::kAvx512, cpu::Isa::kAvx2, cpu::Isa::kPortable}) {
      if (options.isa == cpu::IsaName(i)) {
        known = true;
        isa = i;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("unknown cpu backend isa '", options.isa,
                                                     "' (auto, avx512, avx2, portable)"));
    }
    if (!cpu::IsaSupported(isa)) {
      return absl::FailedPreconditionError(
          absl::StrCat("this processor lacks the cpu backend isa ", options.isa));
    }
  }
  int64_t tile_prefetch = cpu::DefaultTilePrefetchMinInputBytes();
  if (options.tile_prefetch == "always") {
    tile_prefetch = cpu::kTilePrefetchAlways;
  } else if (options.tile_prefetch == "never") {
    tile_prefetch = cpu::kTilePrefetchNever;
  } else if (options.tile_prefetch != "auto" &&
             (!absl::SimpleAtoi(options.tile_prefetch, &tile_prefetch) || tile_prefetch < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu backend tile_prefetch '", options.tile_prefetch,
                     "' is not auto, always, never or a byte count >= 0"));
  }
  int64_t gemm_split_rows_from = CpuKernelBackendOptions::kGemmRowSplitMinRows;
  if (options.gemm_split == "rows") {
    gemm_split_rows_from = 0;
  } else if (options.gemm_split == "weights") {
    gemm_split_rows_from = std::numeric_limits<int64_t>::max();
  } else if (options.gemm_split != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend gemm_split '", options.gemm_split,
                                                   "' is not auto, rows or weights"));
  }
  int threads = options.threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  // The backend spreads its GEMMs over its own threads; OpenBLAS's workers would spin between
  // calls (and are invisible to ThreadSanitizer).
  openblas_set_num_threads(1);
  return std::unique_ptr<CpuKernelBackend>(
      new CpuKernelBackend(threads, isa, options.typed_weights, options.row_tiles, tile_prefetch,
                           gemm_split_rows_from, options.profile, options.spin_us));
}

CpuKernelBackend::CpuKernelBackend(int threads, cpu::Isa isa, bool typed_weights, bool row_tiles,
                                   int64_t tile_prefetch_min_input_bytes,
                                   int64_t gemm_split_rows_from, bool profile, int spin_us)
    : threads_(threads),
      isa_(isa),
      typed_weights_(typed_weights),
      row_tiles_(row_tiles),
      tile_prefetch_min_input_bytes_(tile_prefetch_min_input_bytes),
      gemm_split_rows_from_(gemm_split_rows_from),
      profiling_(profile),
      widened_(static_cast<size_t>(threads)),
      scores_(static_cast<size_t>(threads)) {
  if (threads_ > 1) {
    team_ = std::make_unique<cpu::WorkerTeam>(threads_ - 1, absl::Microseconds(spin_us));
  }
}

CpuKernelBackend::~CpuKernelBackend() = default;

void CpuKernelBackend::ParallelFor(int64_t n, absl::FunctionRef<void(int64_t)> fn) {
  ParallelForWorkers(n, [&](int64_t i, int) { fn(i); });
}

void CpuKernelBackend::BlasFor(int64_t n, absl::FunctionRef<void(int64_t, int)> fn) {
#ifdef CAIRN_BLAS_CALLER_ONLY
  for (int64_t i = 0; i < n; ++i) fn(i, 0);
#else
  ParallelForWorkers(n, fn);
#endif
}

void CpuKernelBackend::ParallelForWorkers(int64_t n, absl::FunctionRef<void(int64_t, int)> fn) {
  if (team_ == nullptr || n <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  team_->Run(n, threads_ - 1, fn);
}

void CpuKernelBackend::ParallelRows(int64_t rows, int64_t row_elements,
                                    absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (rows <= 0) return;
  const int64_t per_item =
      std::max<int64_t>(1, kElementwiseItemElements / std::max<int64_t>(1, row_elements));
  const int64_t items = (rows + per_item - 1) / per_item;
  ParallelFor(items, [&](int64_t item) {
    const int64_t r0 = item * per_item;
    fn(r0, std::min(rows, r0 + per_item));
  });
}

void CpuKernelBackend::MatMulTransposed(const float* x, int64_t m, int64_t k, int64_t ldx,
                                        const float* w, int64_t n, float* y, int64_t ldy,
                                        bool accumulate) {
  const ScopedTimer timer(this, &CpuKernelProfile::matmul_s);
  TiledGemm(x, m, ldx, WeightMatrix::Of(w, WeightType::kF32, n, k), y, ldy, accumulate);
}

void CpuKernelBackend::MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                                  int64_t n, float* y, int64_t ldy, bool accumulate) {
  MatMulRowsTyped(x, m, ldx, WeightMatrix::Of(w, WeightType::kF32, n, k), y, ldy, accumulate);
}

void CpuKernelBackend::MatMulRowsTyped(const float* x, int64_t m, int64_t ldx,
                                       const WeightMatrix& w, float* y, int64_t ldy,
                                       bool accumulate) {
  const ScopedTimer timer(this, &CpuKernelProfile::matmul_rows_s);
  const int64_t n = w.rows();
  if (m == 0 || n == 0) return;
  // Blocks of kRowMatMulBlock rows within a part (a block never straddles two parts), handed out
  // in kRowItemsPerThread contiguous runs per thread.
  int64_t first_block[WeightMatrix::kMaxParts + 1] = {0};
  for (int p = 0; p < w.num_parts; ++p) {
    first_block[p + 1] = first_block[p] + (w.parts[p].rows + kRowMatMulBlock - 1) / kRowMatMulBlock;
  }
  const int64_t blocks = first_block[w.num_parts];
  const int64_t items = std::min<int64_t>(blocks, threads_ * kRowItemsPerThread);
  const bool tiles = w.layout == WeightLayout::kRowTiles;
  const int64_t tile_bytes = kRowTileRows * w.cols * WeightTypeSize(w.type);
  ParallelFor(items, [&](int64_t item) {
    int p = 0;
    int64_t column = 0;
    for (int64_t b = item * blocks / items; b < (item + 1) * blocks / items; ++b) {
      while (b >= first_block[p + 1]) column += w.parts[p++].rows;
      const int64_t r0 = (b - first_block[p]) * kRowMatMulBlock;
      const int64_t count = std::min(kRowMatMulBlock, w.parts[p].rows - r0);
      if (tiles) {
        cpu::RowTileProducts(
            isa_, w.type, x, m, ldx,
            static_cast<const char*>(w.parts[p].data) + r0 / kRowTileRows * tile_bytes, count,
            w.cols, y + column + r0, ldy, accumulate, tile_prefetch_min_input_bytes_);
      } else {
        const void* rows[kRowMatMulBlock];
        WeightRows(w, column + r0, count, rows);
        cpu::RowProducts(isa_, w.type, x, m, ldx, rows, count, w.cols, y + column + r0, ldy,
                         accumulate);
      }
    }
  });
}

void CpuKernelBackend::MatMulTransposedTyped(const float* x, int64_t m, int64_t ldx,
                                             const WeightMatrix& w, float* y, int64_t ldy,
                                             bool accumulate) {
  if (m <= kGemmMinRows && w.type != WeightType::kF32) {
    MatMulRowsTyped(x, m, ldx, w, y, ldy, accumulate);
    return;
  }
  const ScopedTimer timer(this, &CpuKernelProfile::matmul_s);
  TiledGemm(x, m, ldx, w, y, ldy, accumulate);
}

void CpuKernelBackend::TiledGemm(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                                 float* y, int64_t ldy, bool accumulate) {
  if (m == 0) return;
  if (m >= gemm_split_rows_from_) {
    const std::vector<int64_t> blocks =
        cpu::GemmRowBlocks(m, threads_, kGemmRowBlocksPerThread, kGemmMinBlockRows);
    const bool widen = cpu::GemmChunkNeedsWidening(w);
    for (const cpu::GemmTile& chunk : cpu::GemmChunks(w, kGemmChunkElements)) {
      const float* weights = reinterpret_cast<const float*>(chunk.rows);
      if (widen) {
        gemm_chunk_.resize(static_cast<size_t>(chunk.count * w.cols));
        // Slices of whole 16-row blocks, one per thread.
        const int64_t blocks16 = (chunk.count + 15) / 16;
        const int64_t slices = std::min<int64_t>(threads_, blocks16);
        ParallelFor(slices, [&](int64_t s) {
          cpu::WidenGemmChunkRows(isa_, w, chunk, std::min(chunk.count, s * blocks16 / slices * 16),
                                  std::min(chunk.count, (s + 1) * blocks16 / slices * 16),
                                  gemm_chunk_.data());
        });
        weights = gemm_chunk_.data();
      }
      BlasFor(static_cast<int64_t>(blocks.size()) - 1, [&](int64_t b, int) {
        cpu::GemmChunkProduct(x, blocks[static_cast<size_t>(b)], blocks[static_cast<size_t>(b) + 1],
                              ldx, w.cols, weights, chunk, y, ldy, accumulate);
      });
    }
    return;
  }
  const std::vector<cpu::GemmTile> tiles = cpu::GemmTiles(w, threads_);
  BlasFor(static_cast<int64_t>(tiles.size()), [&](int64_t i, int worker) {
    cpu::GemmTileProduct(isa_, x, m, ldx, w, tiles[static_cast<size_t>(i)],
                         &widened_[static_cast<size_t>(worker)], y, ldy, accumulate);
  });
}

void CpuKernelBackend::EmbeddingGatherTyped(const WeightMatrix& table, const int32_t* ids,
                                            int64_t n, float* out) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(n, table.cols, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      if (table.layout == WeightLayout::kRowTiles) {
        int p = 0;
        int64_t row = ids[i];
        while (row >= table.parts[p].rows) {
          row -= table.parts[p++].rows;
          CAIRN_CHECK(p < table.num_parts);  // ids[i] < table.rows(): the caller's check.
        }
        cpu::WidenTileRows(isa_, table.type, table.parts[p].data, row, 1, table.cols,
                           out + i * table.cols);
      } else {
        cpu::Widen(isa_, table.type, WeightRow(table, ids[i]), table.cols, out + i * table.cols);
      }
    }
  });
}

void CpuKernelBackend::EmbeddingGather(const float* table, int64_t dim, const int32_t* ids,
                                       int64_t n, float* out) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  for (int64_t i = 0; i < n; ++i) {
    const float* src = table + static_cast<int64_t>(ids[i]) * dim;
    std::copy(src, src + dim, out + i * dim);
  }
}

void CpuKernelBackend::SplitHeadPairs(const float* in, int64_t rows, int heads, int head_dim,
                                      float* a, float* b) {
  SplitHeadPairsStrided(in, 2 * static_cast<int64_t>(heads) * head_dim, rows, heads, head_dim, a,
                        b);
}

void CpuKernelBackend::SplitHeadPairsStrided(const float* in, int64_t ld, int64_t rows, int heads,
                                             int head_dim, float* a, float* b) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  const int64_t width = static_cast<int64_t>(heads) * head_dim;
  ParallelRows(rows, 2 * width, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int h = 0; h < heads; ++h) {
        const float* src = in + r * ld + static_cast<int64_t>(h) * 2 * head_dim;
        const int64_t dst = r * width + static_cast<int64_t>(h) * head_dim;
        std::copy(src, src + head_dim, a + dst);
        std::copy(src + head_dim, src + 2 * head_dim, b + dst);
      }
    }
  });
}

void CpuKernelBackend::SigmoidMul(float* x, const float* gate, int64_t n) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(n, 1, [&](int64_t i0, int64_t i1) {
    SigmoidProducts(x + i0, gate + i0, nullptr, i1 - i0, x + i0);
  });
}

void CpuKernelBackend::GdnGates(const float* in, int64_t ld, int64_t tokens, int heads,
                                int64_t b_offset, int64_t a_offset, const float* dt_bias,
                                const float* neg_a, float* g, float* beta) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(tokens, 2 * heads, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* row = in + t * ld;
      for (int j = 0; j < heads; ++j) {
        beta[t * heads + j] = Sigmoid(row[b_offset + j]);
        g[t * heads + j] = neg_a[j] * Softplus(row[a_offset + j] + dt_bias[j]);
      }
    }
  });
}

void CpuKernelBackend::MoeRoute(const float* logits, int64_t tokens, int experts, int top_k,
                                bool renormalise, int32_t* ids, float* weights) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  std::vector<float> p(experts);
  std::vector<int> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* l = logits + t * experts;
    const float mx = *std::max_element(l, l + experts);
    float sum = 0.0f;
    for (int j = 0; j < experts; ++j) sum += p[j] = std::exp(l[j] - mx);
    for (int j = 0; j < experts; ++j) p[j] /= sum;
    for (int j = 0; j < experts; ++j) order[j] = j;
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float top_sum = 0.0f;
    for (int j = 0; j < top_k; ++j) top_sum += p[order[j]];
    for (int j = 0; j < top_k; ++j) {
      ids[t * top_k + j] = order[j];
      weights[t * top_k + j] = renormalise ? p[order[j]] / top_sum : p[order[j]];
    }
  }
}

namespace {

// RmsNorm's and GatedRmsNorm's arithmetic for one row (`zr` null: ungated).
void RmsNormRow(const float* xr, int64_t dim, const float* w, float eps, bool zero_centred,
                const float* zr, float* yr) {
  const float ss = SumOfSquares(xr, dim);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
  ScaleRow(xr, inv, w, zero_centred, 0.0f, dim, yr);
  if (zr != nullptr) SigmoidProducts(zr, zr, yr, dim, yr);  // y * silu(z)
}

}  // namespace

void CpuKernelBackend::RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                               bool zero_centred, float* y) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(rows, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RmsNormRow(x + r * dim, dim, w, eps, zero_centred, nullptr, y + r * dim);
    }
  });
}

void CpuKernelBackend::RmsNormHeads(float* x, int64_t tokens, int heads, int64_t dim, int64_t ld,
                                    const float* w, float eps, bool zero_centred) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  // Row r is head r % heads of token r / heads.
  ParallelRows(tokens * heads, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x + r / heads * ld + r % heads * dim;
      RmsNormRow(xr, dim, w, eps, zero_centred, nullptr, xr);
    }
  });
}

void CpuKernelBackend::GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim,
                                    const float* w, float eps, float* y) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(rows, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RmsNormRow(x + r * dim, dim, w, eps, /*zero_centred=*/false, z + r * dim, y + r * dim);
    }
  });
}

void CpuKernelBackend::GatedRmsNormHeads(const float* x, const float* z, int64_t tokens, int heads,
                                         int64_t dim, int64_t z_ld, const float* w, float eps,
                                         float* y) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(tokens * heads, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RmsNormRow(x + r * dim, dim, w, eps, /*zero_centred=*/false,
                 z + r / heads * z_ld + r % heads * dim, y + r * dim);
    }
  });
}

namespace {

// L2Normalize's arithmetic for one row, in place.
void L2NormalizeRow(float* xr, int64_t dim, float eps, float scale) {
  const float ss = SumOfSquares(xr, dim);
  const float inv = 1.0f / std::sqrt(ss + eps);
  ScaleRow(xr, inv, nullptr, /*zero_centred=*/false, scale, dim, xr);
}

}  // namespace

void CpuKernelBackend::L2Normalize(float* x, int64_t rows, int64_t dim, float eps, float scale) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(rows, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) L2NormalizeRow(x + r * dim, dim, eps, scale);
  });
}

void CpuKernelBackend::L2NormalizeTwo(float* a, float a_scale, float* b, float b_scale,
                                      int64_t tokens, int heads, int64_t dim, int64_t ld,
                                      float eps) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  const int64_t rows = tokens * heads;
  // Rows [0, rows) are a's, [rows, 2 rows) b's; row r of an array is head r % heads of token
  // r / heads.
  ParallelRows(2 * rows, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const bool second = r >= rows;
      const int64_t i = second ? r - rows : r;
      float* x = (second ? b : a) + i / heads * ld + i % heads * dim;
      L2NormalizeRow(x, dim, eps, second ? b_scale : a_scale);
    }
  });
}

void CpuKernelBackend::Rope(float* x, int64_t tokens, int64_t ld, int heads, int head_dim,
                            int rotary_dim, const float* inv_freq, int64_t first_position) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  const int half = rotary_dim / 2;
  ParallelRows(tokens, static_cast<int64_t>(heads) * rotary_dim, [&](int64_t t0, int64_t t1) {
    std::vector<float> cos_v(half), sin_v(half);
    for (int64_t t = t0; t < t1; ++t) {
      const float pos = static_cast<float>(first_position + t);
      for (int i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[i];
        cos_v[i] = std::cos(angle);
        sin_v[i] = std::sin(angle);
      }
      for (int h = 0; h < heads; ++h) {
        float* p = x + t * ld + static_cast<int64_t>(h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const float x1 = p[i];
          const float x2 = p[i + half];
          p[i] = x1 * cos_v[i] - x2 * sin_v[i];
          p[i + half] = x2 * cos_v[i] + x1 * sin_v[i];
        }
      }
    }
  });
}

void CpuKernelBackend::SiluMul(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up,
                               int64_t rows, int64_t dim, float* out) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(rows, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* g = gate + r * ld_gate;
      SigmoidProducts(g, g, up + r * ld_up, dim, out + r * dim);
    }
  });
}

void CpuKernelBackend::CausalConvSilu(const float* in, int64_t ld_in, int64_t tokens,
                                      int64_t channels, const float* w, int kernel, float* state,
                                      float* out) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  const int hist = kernel - 1;
  // Input row `t` of the window [state rows ; input rows], t in [-hist, tokens).
  auto row = [&](int64_t t) { return t < 0 ? state + (t + hist) * channels : in + t * ld_in; };
  // The taps tap-major (taps[m][ch]), so that sixteen channels take one vector per tap.
  std::vector<float> taps(static_cast<size_t>(kernel) * channels);
  for (int64_t ch = 0; ch < channels; ++ch) {
    for (int m = 0; m < kernel; ++m) taps[m * channels + ch] = w[ch * kernel + m];
  }
  // Split by tokens: an output row reads only input and state rows, which stay as they are
  // until the loop is done.
  ParallelRows(tokens, channels * kernel, [&](int64_t t0, int64_t t1) {
    std::vector<const float*> window(static_cast<size_t>(kernel));
    for (int64_t t = t0; t < t1; ++t) {
      for (int m = 0; m < kernel; ++m) window[m] = row(t - hist + m);
      ConvSiluRow(taps.data(), window.data(), kernel, channels, out + t * channels);
    }
  });
  // New state: the last `hist` rows of the window.
  std::vector<float> next(static_cast<size_t>(hist) * channels);
  for (int i = 0; i < hist; ++i) {
    const float* src = row(tokens - hist + i);
    std::copy(src, src + channels, next.begin() + static_cast<int64_t>(i) * channels);
  }
  std::copy(next.begin(), next.end(), state);
}

void CpuKernelBackend::Attention(const AttentionArgs& a) {
  const ScopedTimer timer(this, &CpuKernelProfile::attention_s);
  if (a.row_invariant) {
    ParallelFor(cpu::RowInvariantAttentionItems(a),
                [&](int64_t item) { cpu::RowInvariantAttentionItem(a, item); });
    return;
  }
  if (profiling_) attention_calls_.push_back({a.tokens, a.past, a.q_heads, a.head_dim});
  if (cpu::UseShortAttention(a)) {
    ParallelForWorkers(cpu::ShortAttentionItems(a), [&](int64_t item, int worker) {
      cpu::ShortAttentionItem(a, isa_, item, &scores_[static_cast<size_t>(worker)]);
    });
    return;
  }
  const float* kt = nullptr;
  if (cpu::UseScoreKernel(a)) {
    transposed_keys_.resize(static_cast<size_t>(cpu::TransposedKeysFloats(a)));
    ParallelFor(a.kv_heads, [&](int64_t h) {
      cpu::TransposeKeys(a, static_cast<int>(h), transposed_keys_.data());
    });
    kt = transposed_keys_.data();
  }
  BlasFor(cpu::BlockedAttentionItems(a), [&](int64_t item, int worker) {
    cpu::BlockedAttentionItem(a, item, kt, &scores_[static_cast<size_t>(worker)]);
  });
}

void CpuKernelBackend::AttentionBatch(absl::Span<const AttentionArgs> batch) {
  bool together = batch.size() > 1;
  for (const AttentionArgs& a : batch) {
    together = together && (a.row_invariant || cpu::UseShortAttention(a));
  }
  if (!together) {
    for (const AttentionArgs& a : batch) Attention(a);
    return;
  }
  const ScopedTimer timer(this, &CpuKernelProfile::attention_s);
  // Item i is item i - first[s] of sequence s, for first[s] <= i < first[s + 1].
  std::vector<int64_t> first(batch.size() + 1, 0);
  for (size_t s = 0; s < batch.size(); ++s) {
    const AttentionArgs& a = batch[s];
    if (profiling_ && !a.row_invariant) {
      attention_calls_.push_back({a.tokens, a.past, a.q_heads, a.head_dim});
    }
    first[s + 1] = first[s] + (a.row_invariant ? cpu::RowInvariantAttentionItems(a)
                                               : cpu::ShortAttentionItems(a));
  }
  ParallelForWorkers(first.back(), [&](int64_t i, int worker) {
    const size_t s =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), i) - first.begin() - 1);
    const AttentionArgs& a = batch[s];
    if (a.row_invariant) {
      cpu::RowInvariantAttentionItem(a, i - first[s]);
    } else {
      cpu::ShortAttentionItem(a, isa_, i - first[s], &scores_[static_cast<size_t>(worker)]);
    }
  });
}

void CpuKernelBackend::GatedDeltaRule(const GatedDeltaArgs& a) {
  const ScopedTimer timer(this, &CpuKernelProfile::delta_rule_s);
  if (profiling_) delta_rule_calls_.push_back({a.tokens, a.v_heads, a.dk, a.dv, a.chunk});
  const int64_t per_head = static_cast<int64_t>(a.dk) * a.dv;
  ParallelFor(a.v_heads, [&](int64_t h) {
    cpu::GatedDeltaHead(a, static_cast<int>(h), a.state + h * per_head);
  });
}

void CpuKernelBackend::GatedDeltaRuleBatch(absl::Span<const GatedDeltaArgs> batch) {
  if (batch.size() == 1) {
    GatedDeltaRule(batch[0]);
    return;
  }
  const ScopedTimer timer(this, &CpuKernelProfile::delta_rule_s);
  // Item i is head i - first[s] of sequence s, for first[s] <= i < first[s + 1].
  std::vector<int64_t> first(batch.size() + 1, 0);
  for (size_t s = 0; s < batch.size(); ++s) {
    const GatedDeltaArgs& a = batch[s];
    if (profiling_) delta_rule_calls_.push_back({a.tokens, a.v_heads, a.dk, a.dv, a.chunk});
    first[s + 1] = first[s] + a.v_heads;
  }
  ParallelFor(first.back(), [&](int64_t i) {
    const size_t s =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), i) - first.begin() - 1);
    const GatedDeltaArgs& a = batch[s];
    const int h = static_cast<int>(i - first[s]);
    cpu::GatedDeltaHead(a, h, a.state + static_cast<int64_t>(h) * a.dk * a.dv);
  });
}

}  // namespace cairn::infer
