// Prefill and decode tokens/s of the CPU engine on the ~50M-parameter hybrid preset
// (bench-50m: qwen3_5_text, 12 layers of which 3 full attention, D 512), next to the FLOP rate
// of the backend's GEMM (OpenBLAS sgemm on tiles) on this machine.
//
//   cairn_infer_bench [--benchmark_filter=...]
//   env CAIRN_BENCH_THREADS (default: one per hardware thread)
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "services/infer/engine/generation.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#include "services/infer/models/model_loader.h"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"

namespace cairn::infer {
namespace {

constexpr char kPreset[] = "bench-50m";

int Threads() {
  const char* env = std::getenv("CAIRN_BENCH_THREADS");
  return env != nullptr ? std::atoi(env) : 0;
}

// The backend and the model, built once per process.
struct Fixture {
  std::unique_ptr<CpuKernelBackend> backend;
  std::unique_ptr<Model> model;
  std::string error;
};

Fixture& Shared() {
  static Fixture* f = [] {
    auto* fx = new Fixture();
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("cairn-bench-" + std::to_string(getpid())))
            .string();
    absl::StatusOr<RandomCheckpointOptions> options = RandomCheckpointPreset(kPreset);
    absl::Status written = options.ok() ? WriteRandomCheckpoint(dir, *options) : options.status();
    absl::StatusOr<std::unique_ptr<CpuKernelBackend>> backend =
        CpuKernelBackend::Create({.threads = Threads()});
    if (!written.ok() || !backend.ok()) {
      fx->error = written.ok() ? backend.status().ToString() : written.ToString();
      return fx;
    }
    fx->backend = *std::move(backend);
    absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir, fx->backend.get(), {});
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (!model.ok()) {
      fx->error = model.status().ToString();
      return fx;
    }
    fx->model = *std::move(model);
    return fx;
  }();
  return *f;
}

std::vector<int32_t> Tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 7919 + 17) % vocab));
  return t;
}

// One prefill pass of range(0) tokens into an empty slot.
void BM_Prefill(benchmark::State& state) {
  Fixture& f = Shared();
  if (f.model == nullptr) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  const int64_t n = state.range(0);
  const std::vector<int32_t> tokens = Tokens(n, f.model->info().vocab_size);
  absl::StatusOr<std::unique_ptr<SlotState>> slot = SlotState::Create(f.model->state_layout(), n);
  for (auto _ : state) {
    if (absl::Status s = (*slot)->Reset(); !s.ok()) state.SkipWithError(s.ToString().c_str());
    absl::StatusOr<std::vector<float>> logits = f.model->Forward(slot->get(), tokens, {});
    if (!logits.ok()) state.SkipWithError(logits.status().ToString().c_str());
    benchmark::DoNotOptimize(logits);
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["params_M"] = static_cast<double>(f.model->info().num_parameters) / 1e6;
  state.counters["threads"] = f.backend->threads();
}
BENCHMARK(BM_Prefill)->Arg(512)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

// Single-token decode steps after a prefill of range(0) tokens.
void BM_Decode(benchmark::State& state) {
  Fixture& f = Shared();
  if (f.model == nullptr) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  const int64_t context = state.range(0);
  constexpr int64_t kMaxSteps = 1 << 16;
  const std::vector<int32_t> tokens = Tokens(context, f.model->info().vocab_size);
  absl::StatusOr<std::unique_ptr<SlotState>> slot =
      SlotState::Create(f.model->state_layout(), context + kMaxSteps);
  absl::StatusOr<std::vector<float>> logits = f.model->Forward(slot->get(), tokens, {});
  int32_t next = 1;
  for (auto _ : state) {
    if ((*slot)->position() >= context + kMaxSteps) {
      state.SkipWithError("decode ran past the slot");
      break;
    }
    logits = f.model->Forward(slot->get(), absl::MakeConstSpan(&next, 1), {});
    if (!logits.ok()) state.SkipWithError(logits.status().ToString().c_str());
    next = Argmax(logits->data(), static_cast<int64_t>(logits->size()));
  }
  state.SetItemsProcessed(state.iterations());
  // Every decode step reads every weight once (the tied embedding as the LM head), so this is
  // the memory bandwidth decode runs at.
  state.counters["weights_GB/s"] =
      benchmark::Counter(static_cast<double>(f.model->info().weight_bytes) *
                             static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Decode)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

// The backend's GEMM y[m, n] = x[m, k] w[n, k]^T (single-threaded sgemm calls on tiles of w,
// spread over the backend's threads), the shape of a prefill projection.
void BM_Sgemm(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  std::vector<float> x(m * k, 0.5f), w(n * k, 0.25f), y(m * n);
  for (auto _ : state) {
    f.backend->MatMulTransposed(x.data(), m, k, k, w.data(), n, y.data(), n, false);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Sgemm)
    ->Args({512, 512, 1280})
    ->Args({512, 512, 2560})
    ->Args({1024, 1024, 1024})
    ->Args({1, 512, 2560})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace cairn::infer
