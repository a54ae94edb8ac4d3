#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_RANDOM_FLOATS_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_RANDOM_FLOATS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cairn::infer {

// Returns `n` floats spread over [lo, hi) from a fixed-seed generator: the same inputs on every
// run and machine, never all zeros.
inline std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  uint64_t x = seed * 2654435761u + 7;
  for (float& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = lo + (hi - lo) * static_cast<float>(x >> 40) / 16777216.0f;
  }
  return v;
}

}  // namespace cairn::infer

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_RANDOM_FLOATS_H_
