#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_SIMD_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_SIMD_H_

#include <xmmintrin.h>

#include <cstdint>
#include <cstring>

// Lane-wise vector helpers shared by the CPU backend's loops (the delta rule, attention's
// softmax, the elementwise kernels). Each is inlined into its caller and built for the caller's
// target, so a loop built for several instruction sets (CAIRN_SIMD_CLONES) rounds alike in all.
// Files using them are compiled with -ffp-contract=off.
namespace cairn::infer::cpu {

// Sixteen floats as one value (GCC/Clang vector extension). Each clone of the delta rule below
// lowers it to its own registers (four SSE, two AVX2 or one AVX-512); only lane-wise arithmetic
// is done on it, each product rounded before its sum, so every clone gives the same bits.
typedef float F32x16 __attribute__((vector_size(64)));

// y[j] += a * x[j]
inline __attribute__((always_inline)) void Axpy(float a, const float* x, float* y, int n) {
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    F32x16 xv, yv;
    std::memcpy(&xv, x + j, sizeof(xv));
    std::memcpy(&yv, y + j, sizeof(yv));
    yv += a * xv;
    std::memcpy(y + j, &yv, sizeof(yv));
  }
  for (; j < n; ++j) y[j] += a * x[j];
}

// x[j] *= a
inline __attribute__((always_inline)) void Scale(float a, float* x, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    F32x16 v;
    std::memcpy(&v, x + j, sizeof(v));
    v *= a;
    std::memcpy(x + j, &v, sizeof(v));
  }
  for (; j < n; ++j) x[j] *= a;
}

// y[j] = a * x[j]
inline __attribute__((always_inline)) void ScaleTo(float a, const float* x, float* y, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    F32x16 v;
    std::memcpy(&v, x + j, sizeof(v));
    v = a * v;
    std::memcpy(y + j, &v, sizeof(v));
  }
  for (; j < n; ++j) y[j] = a * x[j];
}

// y[j] = x[j] * z[j] (sub: x[j] - z[j])
template <bool kSub>
inline __attribute__((always_inline)) void Lanewise(const float* x, const float* z, float* y,
                                                    int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    F32x16 xv, zv;
    std::memcpy(&xv, x + j, sizeof(xv));
    std::memcpy(&zv, z + j, sizeof(zv));
    xv = kSub ? xv - zv : xv * zv;
    std::memcpy(y + j, &xv, sizeof(xv));
  }
  for (; j < n; ++j) y[j] = kSub ? x[j] - z[j] : x[j] * z[j];
}

// The delta rule's loops and the softmax are built for AVX-512, AVX2 and baseline x86-64; the
// loader picks the widest this processor runs. Not under ThreadSanitizer: the loader runs the
// clones' resolver while relocating, before TSan's runtime starts, and GCC instruments the
// resolver, so every binary linking this file crashed before main.
#if defined(__SANITIZE_THREAD__)
#define CAIRN_SIMD_CLONES
#else
#define CAIRN_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// While alive, the calling thread's SSE / AVX arithmetic flushes subnormal results to zero and
// reads subnormal inputs as zero (MXCSR's FTZ and DAZ bits); the previous mode comes back at
// the end. The gated delta rule's decays are exponentials of sums of negative log-decays, and a
// head that forgets quickly drives its products and its state below 2^-126, where Intel cores
// take a microcode assist for every such operand (measured: a chunked prefill 4-6 times slower
// with per-token log-decays of -3 to -10 than with -0.1). Flushing changes only values below
// 1.2e-38, and does it the same way on every processor and in every clone.
class FlushSubnormalsScope {
 public:
  FlushSubnormalsScope() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushBits); }
  ~FlushSubnormalsScope() { _mm_setcsr(saved_); }
  FlushSubnormalsScope(const FlushSubnormalsScope&) = delete;
  FlushSubnormalsScope& operator=(const FlushSubnormalsScope&) = delete;

 private:
  static constexpr unsigned int kFlushBits = 0x8040;  // FTZ (bit 15) | DAZ (bit 6).
  unsigned int saved_;
};

typedef int32_t I32x16 __attribute__((vector_size(64)));

// p[0, 16) = exp(p[0, 16)) for inputs <= 0, within about two ulp (a degree-6 polynomial on
// [-ln2/2, ln2/2] after range reduction, the classic single-precision expf scheme); inputs below
// -87 give exp(-87) (about 1.6e-38) instead of an underflow. Lane-wise and without fused
// multiply-adds, so every clone gives the same bits.
inline __attribute__((always_inline)) void ExpNonPositive16(float* p) {
  F32x16 x;
  std::memcpy(&x, p, sizeof(x));
  const F32x16 lowest = F32x16{} - 87.0f;
  x = x < lowest ? lowest : x;
  // Round x / ln2 to the nearest integer n: adding 1.5 * 2^23 leaves no fraction bits.
  const F32x16 n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  F32x16 r = x - n * 0.693359375f;  // ln2 in two parts, so that r is exact.
  r = r - n * -2.12194440e-4f;
  F32x16 y = 1.9875691500e-4f * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const I32x16 bits = (__builtin_convertvector(n, I32x16) + 127) << 23;  // 2^n.
  F32x16 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  y *= scale;
  std::memcpy(p, &y, sizeof(y));
}

}  // namespace cairn::infer::cpu

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_SIMD_H_
