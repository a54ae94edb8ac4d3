#ifndef CAIRN_SERVICES_INFER_KERNELS_HALF_FLOAT_H_
#define CAIRN_SERVICES_INFER_KERNELS_HALF_FLOAT_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace cairn::infer {

// Returns the bf16 value `h` (the high half of an fp32) as fp32; exact.
inline float WidenBf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Returns the IEEE half-precision value `h` as fp32; exact (NaNs become the default NaN).
inline float WidenF16(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  }
  return sign ? -v : v;
}

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_HALF_FLOAT_H_
