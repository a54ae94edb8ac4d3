#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_RANDOM_FLOATS_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_RANDOM_FLOATS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
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

// `n` random values rounded to bf16: the raw bits (as a checkpoint stores them) and their exact
// fp32 widening.
struct RandomBf16 {
  std::vector<uint16_t> bits;
  std::vector<float> wide;
};
inline RandomBf16 RandomBf16Values(size_t n, uint64_t seed) {
  RandomBf16 r;
  r.wide = RandomFloats(n, seed);
  r.bits.resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &r.wide[i], 4);
    u += 0x7fffu + ((u >> 16) & 1u);  // Round to nearest even (the values are finite).
    r.bits[i] = static_cast<uint16_t>(u >> 16);
    u = static_cast<uint32_t>(r.bits[i]) << 16;
    std::memcpy(&r.wide[i], &u, 4);
  }
  return r;
}

}  // namespace cairn::infer

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_RANDOM_FLOATS_H_
