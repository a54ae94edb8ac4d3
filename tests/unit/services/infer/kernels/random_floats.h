#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_RANDOM_FLOATS_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_RANDOM_FLOATS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace cairn::infer {

// Returns `n` floats spread over [lo, hi) from a fixed-seed generator: the same inputs on every
// run and machine, never all zeros.
inline uint64_t RandomFloatsState(uint64_t seed) { return seed * 2654435761u + 7; }
// The next value of RandomFloats' sequence from generator state `x`.
inline float NextRandomFloat(uint64_t& x, float lo, float hi) {
  x = x * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * static_cast<float>(x >> 40) / 16777216.0f;
}
inline std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  uint64_t x = RandomFloatsState(seed);
  for (float& f : v) f = NextRandomFloat(x, lo, hi);
  return v;
}

// The delta rule's q, k and v rows of `tokens` tokens (q and k `qk` floats a token, v `vw`)
// laid out as the model's conv output, [q | k | v] in one row of `ld` floats a token; the rest
// of each row is -7.
inline std::vector<float> WideDeltaRows(const float* q, const float* k, const float* v,
                                        int64_t tokens, int64_t qk, int64_t vw, int64_t ld) {
  std::vector<float> wide(static_cast<size_t>(tokens * ld), -7.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    std::memcpy(wide.data() + t * ld, q + t * qk, sizeof(float) * qk);
    std::memcpy(wide.data() + t * ld + qk, k + t * qk, sizeof(float) * qk);
    std::memcpy(wide.data() + t * ld + 2 * qk, v + t * vw, sizeof(float) * vw);
  }
  return wide;
}

// The bf16 bits of finite `f` rounded to nearest even.
inline uint16_t Bf16BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The fp32 value of bf16 bits `b` (exact).
inline float WideOfBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// `n` random values rounded to bf16: the raw bits (as a checkpoint stores them) and their exact
// fp32 widening.
struct RandomBf16 {
  std::vector<uint16_t> bits;
  std::vector<float> wide;
};
// RandomBf16Values(n, seed).bits alone, made without the fp32 values: a third of the memory
// for the largest weight sets (the 80B-like MoE layer's 1.6G values).
inline std::vector<uint16_t> RandomBf16ValueBits(size_t n, uint64_t seed) {
  std::vector<uint16_t> bits(n);
  uint64_t x = RandomFloatsState(seed);
  for (uint16_t& b : bits) b = Bf16BitsOf(NextRandomFloat(x, -1.0f, 1.0f));
  return bits;
}
inline RandomBf16 RandomBf16Values(size_t n, uint64_t seed) {
  RandomBf16 r;
  r.wide = RandomFloats(n, seed);
  r.bits.resize(n);
  for (size_t i = 0; i < n; ++i) {
    r.bits[i] = Bf16BitsOf(r.wide[i]);
    r.wide[i] = WideOfBf16(r.bits[i]);
  }
  return r;
}

}  // namespace cairn::infer

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_RANDOM_FLOATS_H_
