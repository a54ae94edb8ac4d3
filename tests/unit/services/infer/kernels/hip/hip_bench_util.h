#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_BENCH_UTIL_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_BENCH_UTIL_H_

// Shared by the HIP benchmarks (cairn_hip_kernel_bench, cairn_hip_model_bench): random device
// buffers, a median timer, one printed line per measurement, and the device's ceilings measured
// in the same run.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "services/infer/kernels/hip/gpu_blas.h"
#include "services/infer/kernels/hip/hip_compat.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer {

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
      t.push_back(Seconds(start));
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
  static double Seconds(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  }
  void Sync() {
    const absl::Status s = b_->Synchronize();
    if (!s.ok()) Fail(s.ToString());
  }
  // A backend with `options`, or the run ends with the reason it could not be made.
  static std::unique_ptr<HipKernelBackend> Backend(const HipKernelBackendOptions& options = {}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> created = HipKernelBackend::Create(options);
    if (!created.ok()) Fail(created.status().ToString());
    return *std::move(created);
  }
  [[noreturn]] static void Fail(const std::string& why) {
    std::fprintf(stderr, "bench failed: %s\n", why.c_str());
    std::exit(1);
  }
  static void Check(const absl::Status& s, const char* what) {
    if (!s.ok()) Fail(std::string(what) + ": " + s.ToString());
  }
  // A runtime call's or launch's error ends the run with its description.
  static void Check(hipError_t e, const char* what) {
    if (e != hipSuccess) Fail(std::string(what) + ": " + hipGetErrorString(e));
  }

 private:
  HipKernelBackend* b_;
  std::vector<DeviceBuffer> buffers_;
};

// `n` random values in [-1, 1] truncated to bf16 (raw bits), for weights.
inline std::vector<uint16_t> RandomBf16Bits(int64_t n, uint64_t seed) {
  const std::vector<float> values = RandomFloats(n, seed);
  std::vector<uint16_t> bits(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &values[i], sizeof u);
    bits[i] = static_cast<uint16_t>(u >> 16);
  }
  return bits;
}

// Prints `amount` per second in units of `scale` (1e9: giga).
inline void Row(const char* what, double seconds, const char* unit, double amount,
                double scale = 1e9) {
  std::printf("%-62s %10.3f ms  %10.2f %s\n", what, seconds * 1e3, amount / seconds / scale, unit);
  std::fflush(stdout);
}

// The device's limits, measured: HBM bandwidth (bytes read + written per second by a device
// copy), pinned host-to-device bandwidth, and the bf16 matrix rate (FLOP/s) of the vendor GEMM,
// both its fastest choice and the pinned batch-invariant algorithm.
struct Ceilings {
  double hbm_bytes_per_s = 0;
  double h2d_bytes_per_s = 0;
  double bf16_flops = 0;         // Vendor's own choice of kernel.
  double bf16_pinned_flops = 0;  // GpuBlas::GemmNTBf16 (pinned algorithm).
  double fp32_flops = 0;
};

inline Ceilings MeasureCeilings(HipKernelBackend& b, Bench& bench, int reps) {
  Ceilings c;
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
  c.hbm_bytes_per_s = 2.0 * n * 4 / t;
  std::vector<float> host = RandomFloats(n / 2, 3);
  Bench::Check(b.RegisterHost(host.data(), host.size() * 4), "register");
  const double h = bench.Time(
      [&] {
        Bench::Check(b.CopyToDevice(dst, host.data(), host.size() * 4, {}, HipStream::kTransfer),
                     "h2d");
        Bench::Check(b.Synchronize(HipStream::kTransfer), "h2d sync");
      },
      reps);
  Row("ceiling: pinned host-to-device 1 GiB", h, "GB/s", host.size() * 4.0);
  c.h2d_bytes_per_s = host.size() * 4.0 / h;
  Bench::Check(b.UnregisterHost(host.data()), "unregister");
  bench.Free();
  const int64_t m = 8192;
  float* x = bench.Buffer(m * m, 4);
  float* w = bench.Buffer(m * m, 5);
  float* y = bench.Buffer(m * m, 6);
  const double g = bench.Time([&] { b.MatMulTransposed(x, m, m, m, w, m, y, m, false); }, reps);
  Row("ceiling: vendor sgemm 8192^3 fp32", g, "TFLOP/s", 2.0 * m * m * m, 1e12);
  c.fp32_flops = 2.0 * m * m * m / g;
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
  Bench::Check(b.Upload(x, bits.data(), bits.size() * 2), "bf16 upload");
  Bench::Check(b.Upload(w, bits.data(), bits.size() * 2), "bf16 upload");
  for (const bool pinned : {false, true}) {
    const double gb = bench.Time(
        [&] {
          const absl::Status st =
              pinned ? (*blas)->GemmNTBf16(m, m, m, xb, m, wb, m, y, m, 0.0f)
                     : (*blas)->GemmNTBf16Unpinned(m, m, m, xb, m, wb, m, y, m, 0.0f);
          if (!st.ok() || hipStreamSynchronize(nullptr) != hipSuccess) Bench::Fail(st.ToString());
        },
        reps);
    Row(pinned ? "ceiling: bf16 gemm 8192^3, pinned invariant algorithm"
               : "ceiling: bf16 gemm 8192^3, vendor's choice (fp32 accumulate)",
        gb, "TFLOP/s", 2.0 * m * m * m, 1e12);
    (pinned ? c.bf16_pinned_flops : c.bf16_flops) = 2.0 * m * m * m / gb;
  }
  blas->reset();
  bench.Free();
  return c;
}

}  // namespace cairn::infer

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_BENCH_UTIL_H_
