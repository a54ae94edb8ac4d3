// Throughput of the HIP backend's kernels on the device, with the device's own ceilings measured
// in the same run (device-to-device copy bandwidth, pinned host-to-device bandwidth, the vendor
// BLAS's fp32 GEMM rate), and the cost of batch invariance: MatMulRows (fixed reduction order
// per row) against the vendor GEMM (fastest, kernel chosen by shape) at decode and prefill
// shapes. Random inputs (never zeros). Prints one line per measurement.
//
// Usage: cairn_hip_kernel_bench [--quick]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "services/infer/kernels/hip/gpu_blas.h"
#include "services/infer/kernels/hip/hip_compat.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "tests/unit/services/infer/kernels/hip/random_floats.h"

namespace cairn::infer {
namespace {

class Bench {
 public:
  explicit Bench(HipKernelBackend* b) : b_(b) {}

  // A device buffer of `n` random floats in [lo, hi].
  float* Buffer(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    absl::StatusOr<DeviceBuffer> d = b_->Allocate(n * sizeof(float));
    if (!d.ok()) Fail(d.status().ToString());
    const std::vector<float> host = RandomFloats(n, seed, lo, hi);
    const absl::Status s = b_->Upload(d->data(), host.data(), n * sizeof(float));
    if (!s.ok()) Fail(s.ToString());
    buffers_.push_back(*std::move(d));
    return buffers_.back().floats();
  }
  void Free() { buffers_.clear(); }

  // Median seconds of one call of `fn` over `reps` timed calls after two warm-ups.
  double Time(const std::function<void()>& fn, int reps) {
    for (int i = 0; i < 2; ++i) fn();
    Sync();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      const auto start = std::chrono::steady_clock::now();
      fn();
      Sync();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
  void Sync() {
    const absl::Status s = b_->Synchronize();
    if (!s.ok()) Fail(s.ToString());
  }
  [[noreturn]] static void Fail(const std::string& why) {
    std::fprintf(stderr, "bench failed: %s\n", why.c_str());
    std::exit(1);
  }

 private:
  HipKernelBackend* b_;
  std::vector<DeviceBuffer> buffers_;
};

// Prints `amount` per second in units of `scale` (1e9: giga).
void Row(const char* what, double seconds, const char* unit, double amount, double scale = 1e9) {
  std::printf("%-62s %10.3f ms  %10.2f %s\n", what, seconds * 1e3, amount / seconds / scale, unit);
}

int Main(bool quick) {
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> created = HipKernelBackend::Create({});
  if (!created.ok()) Bench::Fail(created.status().ToString());
  HipKernelBackend& b = **created;
  Bench bench(&b);
  const int reps = quick ? 3 : 10;
  char label[160];

  // Ceilings.
  {
    const size_t n = size_t{1} << 29;  // 2 GiB of floats.
    float* src = bench.Buffer(n, 1);
    float* dst = bench.Buffer(n, 2);
    hipStream_t s = nullptr;
    const double t = bench.Time(
        [&] {
          if (hipMemcpyAsync(dst, src, n * 4, hipMemcpyDeviceToDevice, s) != hipSuccess) {
            Bench::Fail("d2d copy");
          }
          if (hipStreamSynchronize(s) != hipSuccess) Bench::Fail("sync");
        },
        reps);
    Row("ceiling: device copy 2 GiB (read + write)", t, "GB/s", 2.0 * n * 4);
    std::vector<float> host = RandomFloats(n / 2, 3);
    if (!b.RegisterHost(host.data(), host.size() * 4).ok()) Bench::Fail("register");
    const double h = bench.Time(
        [&] {
          if (!b.CopyToDevice(dst, host.data(), host.size() * 4, {}, HipStream::kTransfer).ok() ||
              !b.Synchronize(HipStream::kTransfer).ok()) {
            Bench::Fail("h2d");
          }
        },
        reps);
    Row("ceiling: pinned host-to-device 1 GiB", h, "GB/s", host.size() * 4.0);
    if (!b.UnregisterHost(host.data()).ok()) Bench::Fail("unregister");
    bench.Free();
    const int64_t m = 8192;
    float* x = bench.Buffer(m * m, 4);
    float* w = bench.Buffer(m * m, 5);
    float* y = bench.Buffer(m * m, 6);
    const double g = bench.Time([&] { b.MatMulTransposed(x, m, m, m, w, m, y, m, false); }, reps);
    Row("ceiling: vendor sgemm 8192^3 fp32", g, "TFLOP/s", 2.0 * m * m * m, 1e12);
    // bf16 operands (upper halves of random floats), fp32 accumulation and output.
    absl::StatusOr<std::unique_ptr<GpuBlas>> blas = GpuBlas::Create(nullptr);
    if (!blas.ok()) Bench::Fail(blas.status().ToString());
    const std::vector<float> src_bf = RandomFloats(m * m, 24);
    std::vector<uint16_t> bits(m * m);
    for (size_t i = 0; i < bits.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &src_bf[i], sizeof u);
      bits[i] = static_cast<uint16_t>(u >> 16);
    }
    const auto* xb = reinterpret_cast<uint16_t*>(x);  // The fp32 buffers hold m*m bf16 easily.
    const auto* wb = reinterpret_cast<uint16_t*>(w);
    if (!b.Upload(x, bits.data(), bits.size() * 2).ok() ||
        !b.Upload(w, bits.data(), bits.size() * 2).ok()) {
      Bench::Fail("bf16 upload");
    }
    const double gb = bench.Time(
        [&] {
          const absl::Status st = (*blas)->GemmNTBf16(m, m, m, xb, m, wb, m, y, m, 0.0f);
          if (!st.ok() || hipStreamSynchronize(nullptr) != hipSuccess) Bench::Fail(st.ToString());
        },
        reps);
    Row("ceiling: vendor gemm 8192^3 bf16 in, fp32 accumulate", gb, "TFLOP/s", 2.0 * m * m * m,
        1e12);
    blas->reset();
    bench.Free();
  }

  // GEMMs: vendor (non-invariant) against the row kernel (batch-invariant).
  for (const int64_t n : {int64_t{4096}, int64_t{12288}, int64_t{151936}}) {
    const int64_t k = 4096;
    float* w = bench.Buffer(n * k, 7);
    float* x = bench.Buffer(4096 * k, 8);
    float* y = bench.Buffer(4096 * n, 9);
    for (const int64_t m : {int64_t{1}, int64_t{4}, int64_t{16}, int64_t{64}, int64_t{4096}}) {
      if (n == 151936 && m == 4096) continue;
      const double tv =
          bench.Time([&] { b.MatMulTransposed(x, m, k, k, w, n, y, n, false); }, reps);
      const double tr = bench.Time([&] { b.MatMulRows(x, m, k, k, w, n, y, n, false); }, reps);
      const double flops = 2.0 * m * n * k;
      const double bytes = 4.0 * (n * k + m * k + m * n);
      std::snprintf(label, sizeof label, "gemm m=%ld k=%ld n=%ld vendor", m, k, n);
      Row(label, tv, m >= 64 ? "GFLOP/s" : "GB/s", m >= 64 ? flops : bytes);
      std::snprintf(label, sizeof label, "gemm m=%ld k=%ld n=%ld rows (invariant, x%.2f)", m, k, n,
                    tr / tv);
      Row(label, tr, m >= 64 ? "GFLOP/s" : "GB/s", m >= 64 ? flops : bytes);
    }
    bench.Free();
  }

  // Attention, Qwen3-Next-like heads: 16 q heads, 2 kv heads, head_dim 256.
  {
    const int qh = 16, kvh = 2, d = 256;
    const int64_t max_keys = 100000;
    float* k = bench.Buffer(max_keys * kvh * d, 10, -2.0f, 2.0f);
    float* v = bench.Buffer(max_keys * kvh * d, 11);
    float* q = bench.Buffer(16384 * qh * d, 12, -2.0f, 2.0f);
    float* o = bench.Buffer(16384 * qh * d, 13);
    for (const int64_t tokens : {int64_t{4096}, int64_t{16384}}) {
      if (quick && tokens > 4096) continue;
      const double t = bench.Time(
          [&] {
            b.Attention({q, k, v, o, tokens, 0, qh, kvh, d, 0.0625f});
          },
          quick ? 2 : 5);
      std::snprintf(label, sizeof label, "attention prefill %ld tokens (16q/2kv, d256)", tokens);
      Row(label, t, "GFLOP/s", 4.0 * qh * d * tokens * tokens / 2.0);
    }
    for (const int64_t past : {int64_t{4096}, int64_t{32768}, int64_t{99999}}) {
      const double t = bench.Time(
          [&] {
            b.Attention({q, k, v, o, 1, past, qh, kvh, d, 0.0625f});
          },
          reps * 5);
      std::snprintf(label, sizeof label, "attention decode 1 token at %ld keys (K+V bytes)",
                    past + 1);
      Row(label, t, "GB/s", 2.0 * 4.0 * (past + 1) * kvh * d);
    }
    bench.Free();
  }

  // Gated delta rule, Qwen3-Next-like linear-attention heads: 16 k heads, 32 v heads, 128 x 128.
  {
    const int kh = 16, vh = 32, dk = 128, dv = 128;
    const int64_t max_tokens = quick ? 4096 : 32768;
    float* q = bench.Buffer(max_tokens * kh * dk, 14, -0.1f, 0.1f);
    float* k = bench.Buffer(max_tokens * kh * dk, 15, -0.1f, 0.1f);
    float* v = bench.Buffer(max_tokens * vh * dv, 16);
    float* g = bench.Buffer(max_tokens * vh, 17, -0.5f, -0.01f);
    float* beta = bench.Buffer(max_tokens * vh, 18, 0.1f, 0.9f);
    float* state = bench.Buffer(vh * dk * dv, 19, -0.1f, 0.1f);
    float* o = bench.Buffer(max_tokens * vh * dv, 20);
    for (const int64_t tokens : {int64_t{4096}, int64_t{32768}}) {
      if (tokens > max_tokens) continue;
      const double t = bench.Time(
          [&] {
            b.GatedDeltaRule({q, k, v, g, beta, state, o, tokens, kh, vh, dk, dv, 64});
          },
          quick ? 2 : 5);
      std::snprintf(label, sizeof label, "gated delta chunked %ld tokens (one layer)", tokens);
      Row(label, t, "ktok/s", static_cast<double>(tokens), 1e3);
    }
    const double t = bench.Time(
        [&] {
          b.GatedDeltaRule({q, k, v, g, beta, state, o, 1, kh, vh, dk, dv, 0});
        },
        reps * 5);
    Row("gated delta recurrent 1 token (state read + write)", t, "GB/s", 2.0 * 4.0 * vh * dk * dv);
    bench.Free();
  }

  // A row kernel: RMSNorm over 4096 x 4096.
  {
    const int64_t rows = 4096, dim = 4096;
    float* x = bench.Buffer(rows * dim, 21);
    float* w = bench.Buffer(dim, 22);
    float* y = bench.Buffer(rows * dim, 23);
    const double t = bench.Time([&] { b.RmsNorm(x, rows, dim, w, 1e-6f, true, y); }, reps * 5);
    Row("rmsnorm 4096 x 4096 (read + write)", t, "GB/s", 2.0 * 4.0 * rows * dim);
    bench.Free();
  }
  return 0;
}

}  // namespace
}  // namespace cairn::infer

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  return cairn::infer::Main(quick);
}
