// The CPU backend's decode product (MatMulRowsTyped on bf16 row tiles) on the shapes of a decode
// step, bare: weight bytes read per second at 1, 4 and 8 input rows, next to a plain read loop
// on the same threads (BM_ReadLoop), so that a kernel change can be judged without a whole
// model's other work (docs/cpu-backend.md, section 5).
//
//   cairn_row_products_bench [--benchmark_filter=...] [--benchmark_repetitions=N]
//   env CAIRN_BENCH_THREADS (default: one per hardware thread)
//   env CAIRN_BENCH_SPIN_US (default: the serving programs' kServingCpuSpinMicros)
//
// Each iteration multiplies the next of enough copies of the matrix that together they are far
// larger than the caches (kWorkingSetBytes), as a decode step reads each weight once.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "services/infer/kernels/backend_factory.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#include "services/infer/kernels/device_memory.h"
#include "services/infer/kernels/row_tiles.h"

namespace cairn::infer {
namespace {

// The bytes of weights one benchmark cycles through: several times the last-level cache.
constexpr int64_t kWorkingSetBytes = int64_t{512} << 20;

int EnvInt(const char* name, int fallback) {
  const char* env = std::getenv(name);
  return env != nullptr ? std::atoi(env) : fallback;
}

// The backend every benchmark shares, or null (with the reason on stderr) where it cannot be made.
CpuKernelBackend* Backend() {
  static CpuKernelBackend* backend = [] {
    CpuKernelBackendOptions options;
    options.threads = EnvInt("CAIRN_BENCH_THREADS", 0);
    options.spin_us = EnvInt("CAIRN_BENCH_SPIN_US", kServingCpuSpinMicros);
    absl::StatusOr<std::unique_ptr<CpuKernelBackend>> b = CpuKernelBackend::Create(options);
    if (!b.ok()) {
      std::cerr << "cpu backend: " << b.status() << "\n";
      return static_cast<CpuKernelBackend*>(nullptr);
    }
    return b->release();
  }();
  return backend;
}

// Copies of a [rows, cols] bf16 matrix in the row-tile layout, `set_bytes` in all, in the
// backend's host memory (where a model packs its weights).
class TiledCopies {
 public:
  TiledCopies(int64_t rows, int64_t cols, int64_t set_bytes) : rows_(rows), cols_(cols) {
    std::mt19937 rng(static_cast<uint32_t>(rows * 131 + cols));
    std::normal_distribution<float> dist(0.0f, 0.02f);
    std::vector<uint16_t> row_major(static_cast<size_t>(rows * cols));
    for (uint16_t& v : row_major) {
      const float f = dist(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      v = static_cast<uint16_t>(bits >> 16);  // Truncated: any bf16 values do here.
    }
    const int64_t bytes = RowTileElements(rows, cols) * 2;
    const int64_t n = std::max<int64_t>(2, set_bytes / bytes);
    for (int64_t i = 0; i < n; ++i) {
      absl::StatusOr<DeviceBuffer> buffer =
          DeviceBuffer::AllocateUninitialized(HostDeviceMemory(), bytes);
      if (!buffer.ok()) std::abort();
      void* p = buffer->data();
      buffers_.push_back(*std::move(buffer));
      PackRowTiles(WeightType::kBF16, row_major.data(), rows, cols, p);
      copies_.push_back(p);
    }
  }
  size_t size() const { return copies_.size(); }
  WeightMatrix Matrix(size_t i) const {
    WeightMatrix w = WeightMatrix::Of(copies_[i], WeightType::kBF16, rows_, cols_);
    w.layout = WeightLayout::kRowTiles;
    return w;
  }

 private:
  int64_t rows_, cols_;
  std::vector<DeviceBuffer> buffers_;
  std::vector<const void*> copies_;
};

// range(0) weight rows of range(1) columns, range(2) input rows.
void BM_RowTileProducts(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), m = state.range(2);
  if (Backend() == nullptr) {
    state.SkipWithError("no cpu backend");
    return;
  }
  CpuKernelBackend& backend = *Backend();
  const TiledCopies w(rows, cols, kWorkingSetBytes);
  std::vector<float> x(static_cast<size_t>(m * cols));
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(m * rows));
  size_t next = 0;
  for (auto _ : state) {
    backend.MatMulRowsTyped(x.data(), m, cols, w.Matrix(next), y.data(), rows, false);
    next = (next + 1) % w.size();
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * 2);
  state.counters["threads"] = backend.threads();
}

// The shapes of bench-500m's decode step (D 1024): the delta-rule layer's q/k/v projection,
// attention's output, the MLP's gate and up, its down projection; bench-50m's (D 512) MLP.
void DecodeShapes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 4, 8}) {
    b->Args({6144, 1024, m});
    b->Args({1024, 2048, m});
    b->Args({1024, 3072, m});
    b->Args({3072, 512, m});
    b->Args({512, 1536, m});
  }
}
BENCHMARK(BM_RowTileProducts)->Apply(DecodeShapes)->UseRealTime();

// A read loop over kWorkingSetBytes of floats on as many threads as the backend has, each summing
// a contiguous slice with four independent 16-lane sums (bound by loads, not by adds): the bound
// the products above are measured against.
typedef float F32x16 __attribute__((vector_size(64)));

// Inlined into each caller, so that it is compiled for the caller's instruction set.
__attribute__((always_inline)) inline float SumSliceAs(const float* a, int64_t n) {
  F32x16 s0 = {}, s1 = {}, s2 = {}, s3 = {};
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    F32x16 v0, v1, v2, v3;
    std::memcpy(&v0, a + i, sizeof(v0));
    std::memcpy(&v1, a + i + 16, sizeof(v1));
    std::memcpy(&v2, a + i + 32, sizeof(v2));
    std::memcpy(&v3, a + i + 48, sizeof(v3));
    s0 += v0;
    s1 += v1;
    s2 += v2;
    s3 += v3;
  }
  const F32x16 t = (s0 + s1) + (s2 + s3);
  float total = 0;
  for (int j = 0; j < 16; ++j) total += t[j];
  return total;
}

// The same loop compiled for AVX-512 (one register a sum), taken where the processor has it.
__attribute__((target("avx512f"))) float SumSliceAvx512(const float* a, int64_t n) {
  return SumSliceAs(a, n);
}

float SumSlice(const float* a, int64_t n) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 ? SumSliceAvx512(a, n) : SumSliceAs(a, n);
}

void BM_ReadLoop(benchmark::State& state) {
  if (Backend() == nullptr) {
    state.SkipWithError("no cpu backend");
    return;
  }
  const int threads = Backend()->threads();
  const int64_t n = kWorkingSetBytes / 4;
  std::vector<float> a(static_cast<size_t>(n), 1.0f);
  std::vector<float> sums(static_cast<size_t>(threads));
  for (auto _ : state) {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        const int64_t from = n * t / threads, to = n * (t + 1) / threads;
        sums[static_cast<size_t>(t)] = SumSlice(a.data() + from, to - from);
      });
    }
    for (std::thread& w : workers) w.join();
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_ReadLoop)->UseRealTime();

}  // namespace
}  // namespace cairn::infer
