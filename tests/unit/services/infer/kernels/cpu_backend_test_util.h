#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_CPU_BACKEND_TEST_UTIL_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_CPU_BACKEND_TEST_UTIL_H_

// What the CPU backend's tests share: inputs, comparisons and a two-thread backend fixture.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer::testing {

// `n` pseudo-random values in [lo, hi), a fixed sequence for a given seed.
inline std::vector<float> Random(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  return RandomFloats(n, seed, lo, hi);
}

inline float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// bf16 bits of `v` (truncated: any bf16 value will do); `v` becomes their exact fp32 values.
inline std::vector<uint16_t> ToBf16(std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float& f : v) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    out.push_back(static_cast<uint16_t>(bits >> 16));
    bits &= 0xffff0000u;
    std::memcpy(&f, &bits, 4);
  }
  return out;
}

// A CPU backend on two threads (so that its parallel loops split work).
class CpuKernelBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<CpuKernelBackend>> b = CpuKernelBackend::Create({.threads = 2});
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = *std::move(b);
  }
  std::unique_ptr<CpuKernelBackend> backend_;
};

}  // namespace cairn::infer::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_CPU_BACKEND_TEST_UTIL_H_
