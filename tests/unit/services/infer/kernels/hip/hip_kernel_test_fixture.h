// What the HIP backend's kernel tests share: tolerances, error measures and a fixture that holds
// a HIP and a CPU backend (skipped without a device). Included by the test sources of one
// binary, cairn_infer_hip_kernel_backend_test.

#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_KERNEL_TEST_FIXTURE_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_KERNEL_TEST_FIXTURE_H_

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer::testing {

// Element-wise and row operations: a handful of fp32 roundings apart.
inline constexpr float kTightTolerance = 2e-6f;
// Reductions over k (GEMM), keys (attention) or dk (delta rule): order-dependent rounding.
inline constexpr float kReductionTolerance = 2e-5f;
// The bf16 GEMM rounds its fp32 inputs to bf16 (relative error up to 2^-9 each, random in sign):
// a product is off by about 2^-9 / sqrt(3) of its typical magnitude.
inline constexpr float kBf16InputTolerance = 4e-3f;
// Prefill attention on the matrix units rounds q, k, v and the softmax weights to bf16: scores
// and weights are off by a few 2^-9, the outputs by about 1e-2 of the largest value.
inline constexpr float kBf16AttentionTolerance = 2e-2f;
// The delta rule carries its state over many tokens; the chunked form also differs from the
// recurrent one by its forward substitutions.
inline constexpr float kRecurrenceTolerance = 2e-4f;

// max |a - b| / max(max |b|, 1e-30).
inline float RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  float diff = 0.0f;
  float ref = 1e-30f;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    ref = std::max(ref, std::fabs(b[i]));
  }
  return diff / ref;
}

// Prints `err` (for the record of measured errors) and returns it.
inline float Measured(const std::string& what, float err) {
  std::printf("[ measured ] %s: max rel err %.3g\n", what.c_str(), err);
  return err;
}

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class HipKernelBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (HipDeviceCount() == 0) GTEST_SKIP() << "no HIP device";
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> gpu = HipKernelBackend::Create({});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
    absl::StatusOr<std::unique_ptr<CpuKernelBackend>> cpu = CpuKernelBackend::Create({});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = *std::move(cpu);
  }

  // Copies `host` (floats, or bf16 bit patterns) into a new device buffer.
  template <typename T>
  DeviceBuffer Up(const std::vector<T>& host) {
    absl::StatusOr<DeviceBuffer> b = gpu_->Allocate(host.size() * sizeof(T));
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return DeviceBuffer();
    EXPECT_TRUE(gpu_->Upload(b->data(), host.data(), host.size() * sizeof(T)).ok());
    return *std::move(b);
  }
  // A device buffer of `n` floats filled with NaN, so unwritten outputs show.
  DeviceBuffer Poisoned(size_t n) { return Up(std::vector<float>(n, NAN)); }
  std::vector<float> Down(const DeviceBuffer& b, size_t n) {
    std::vector<float> host(n);
    const absl::Status s = gpu_->Download(host.data(), b.data(), n * sizeof(float));
    EXPECT_TRUE(s.ok()) << s;
    return host;
  }

  // An attention call's random inputs on the device for `tokens` queries after `past` keys:
  // q and k in [-2, 2), v in [-1, 1) (seeds `seed`, `seed` + 1, `seed` + 2).
  struct AttentionInputs {
    DeviceBuffer q, k, v;
  };
  AttentionInputs RandomAttentionInputs(int64_t tokens, int64_t past, int q_heads, int kv_heads,
                                        int head_dim, uint64_t seed) {
    const int64_t rows = past + tokens;
    const int64_t kv_ld = static_cast<int64_t>(kv_heads) * head_dim;
    return {Up(RandomFloats(tokens * q_heads * head_dim, seed, -2.0f, 2.0f)),
            Up(RandomFloats(rows * kv_ld, seed + 1, -2.0f, 2.0f)),
            Up(RandomFloats(rows * kv_ld, seed + 2))};
  }

  // Each backend's output of the Attention call `args` (its `out` replaced by a poisoned buffer
  // of the call's rows for each backend), downloaded.
  std::vector<std::vector<float>> AttentionOnEach(
      const std::vector<std::unique_ptr<HipKernelBackend>>& backends, AttentionArgs args) {
    const size_t n = static_cast<size_t>(args.tokens * args.q_heads * args.head_dim);
    std::vector<std::vector<float>> outs;
    for (const std::unique_ptr<HipKernelBackend>& b : backends) {
      DeviceBuffer o = Poisoned(n);
      args.out = o.floats();
      b->Attention(args);
      EXPECT_TRUE(b->Synchronize().ok()) << b->status();
      outs.push_back(Down(o, n));
    }
    return outs;
  }

  // The CPU backend's MatMulRowsTyped of `rows` rows of x over the bf16 matrix w (n x k).
  std::vector<float> CpuRows(const std::vector<float>& x, int64_t rows, const RandomBf16& w,
                             int64_t n, int64_t k) {
    std::vector<float> ref(rows * n);
    cpu_->MatMulRowsTyped(x.data(), rows, k,
                          WeightMatrix::Of(w.bits.data(), WeightType::kBF16, n, k), ref.data(), n,
                          false);
    return ref;
  }

  std::unique_ptr<HipKernelBackend> gpu_;
  std::unique_ptr<CpuKernelBackend> cpu_;
};

}  // namespace cairn::infer::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_KERNEL_TEST_FIXTURE_H_
