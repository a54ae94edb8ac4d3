#include "services/infer/kernels/cpu/row_kernels.h"

#include <cpuid.h>

#include <cstring>
#include <vector>

#include "services/infer/kernels/cpu/x86_intrinsics.h"
#include "services/infer/kernels/half_float.h"

// This file is compiled with -ffp-contract=off (see CMakeLists.txt): a compiler that fused
// `acc + x * w` into one multiply-add would round differently in one form than in another.
namespace cairn::infer::cpu {
namespace {

// Weight element `i` of a row of `type`, widened.
template <WeightType T>
float WeightAt(const void* row, int64_t i) {
  if constexpr (T == WeightType::kF32) {
    return static_cast<const float*>(row)[i];
  } else {
    uint16_t h;
    std::memcpy(&h, static_cast<const uint16_t*>(row) + i, 2);
    return T == WeightType::kBF16 ? WidenBf16(h) : WidenF16(h);
  }
}

// The fold of the sixteen partial sums, given as v[j] = s[j] + s[j + 8] (the 16 -> 8 step),
// then 8 -> 4 -> 2 -> 1.
inline float Fold8(const float* v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

// Elements per block of the pair order (row_kernels.h): sixteen lanes of two elements each.
constexpr int64_t kBlock = 32;

// dst = src in pair order (from element i on): in each whole block of 32 elements, the even
// elements (2j) first, then the odd ones (2j + 1); the elements after the last whole block as they
// are. A weight block read as sixteen 32-bit words holds element 2j in the low half of word j and
// 2j + 1 in the high half, so the kernels widen a block's even and odd weights without moving them
// across lanes, and multiply them by these activations.
void ToPairOrderPortable(const float* src, int64_t k, float* dst, int64_t i = 0) {
  for (; i + kBlock <= k; i += kBlock) {
    for (int64_t j = 0; j < kBlock / 2; ++j) {
      dst[i + j] = src[i + 2 * j];
      dst[i + kBlock / 2 + j] = src[i + 2 * j + 1];
    }
  }
  for (; i < k; ++i) dst[i] = src[i];
}

// The remainder of a dot product after its whole blocks, in order, added to `sum`.
template <WeightType T>
float Remainder(float sum, const float* a, const void* w, int64_t i, int64_t n) {
  for (int64_t j = i; j < n; ++j) sum += a[j] * WeightAt<T>(w, j);
  return sum;
}

// ---- Portable: four lanes per value (one SSE register on baseline x86-64). ----

typedef float F32x4 __attribute__((vector_size(16)));

inline F32x4 Load4(const float* p) {
  F32x4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// `a` in pair order (ToPairOrder).
template <WeightType T, int R>
void DotPortable(const float* const* a, const void* w, int64_t n, float* out) {
  F32x4 s[R][4] = {};
  alignas(16) float we[16], wo[16];
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int j = 0; j < 16; ++j) {
      we[j] = WeightAt<T>(w, i + 2 * j);
      wo[j] = WeightAt<T>(w, i + 2 * j + 1);
    }
    for (int r = 0; r < R; ++r) {
      for (int q = 0; q < 4; ++q) {
        s[r][q] += Load4(a[r] + i + 4 * q) * Load4(we + 4 * q);
        s[r][q] += Load4(a[r] + i + 16 + 4 * q) * Load4(wo + 4 * q);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const F32x4 lo = s[r][0] + s[r][2];  // Lanes j + j+8, j < 4.
    const F32x4 hi = s[r][1] + s[r][3];  // Lanes j + j+8, 4 <= j < 8.
    const float v[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
    out[r] = Remainder<T>(Fold8(v), a[r], w, i, n);
  }
}

// ---- AVX2 (+F16C): two 8-lane registers per row. ----

template <WeightType T>
__attribute__((target("avx2,f16c"))) inline __m256 Load8Avx2(const void* w, int64_t i) {
  if constexpr (T == WeightType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    if constexpr (T == WeightType::kBF16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

// The even (2j) and odd (2j + 1) elements of eight fp32 pairs given as lo (elements 0..7) and hi
// (8..15), in order.
__attribute__((target("avx2,f16c"))) inline void DeinterleaveAvx2(__m256 lo, __m256 hi,
                                                                  __m256* even, __m256* odd) {
  // Within each 128-bit lane: lo's two pairs' evens, then hi's; the 64-bit blocks then reordered.
  const __m256 e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
  const __m256 o = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
  *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
  *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
}

// The even and odd elements of the sixteen elements at w + i (eight pairs), widened.
template <WeightType T>
__attribute__((target("avx2,f16c"))) inline void LoadPairsAvx2(const void* w, int64_t i,
                                                               __m256* even, __m256* odd) {
  if constexpr (T == WeightType::kBF16) {
    const __m256i d =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(d, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(d, _mm256_set1_epi32(~0xFFFF)));
  } else {
    DeinterleaveAvx2(Load8Avx2<T>(w, i), Load8Avx2<T>(w, i + 8), even, odd);
  }
}

template <WeightType T, int R>
__attribute__((target("avx2,f16c"))) void DotAvx2(const float* const* a, const void* w, int64_t n,
                                                  float* out) {
  __m256 lo[R], hi[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    // Lanes 0..7 take elements [0, 16) of the block, lanes 8..15 elements [16, 32).
    __m256 e0, o0, e1, o1;
    LoadPairsAvx2<T>(w, i, &e0, &o0);
    LoadPairsAvx2<T>(w, i + 16, &e1, &o1);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      lo[r] = _mm256_add_ps(lo[r], _mm256_mul_ps(_mm256_loadu_ps(a[r] + i), e0));
      lo[r] = _mm256_add_ps(lo[r], _mm256_mul_ps(_mm256_loadu_ps(a[r] + i + 16), o0));
      hi[r] = _mm256_add_ps(hi[r], _mm256_mul_ps(_mm256_loadu_ps(a[r] + i + 8), e1));
      hi[r] = _mm256_add_ps(hi[r], _mm256_mul_ps(_mm256_loadu_ps(a[r] + i + 24), o1));
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(lo[r], hi[r]));
    out[r] = Remainder<T>(Fold8(v), a[r], w, i, n);
  }
}

// ---- AVX-512F: one 16-lane register per row. ----

template <WeightType T>
__attribute__((target("avx512f"))) inline __m512 Load16Avx512(const void* w, int64_t i) {
  if constexpr (T == WeightType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  } else {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
    if constexpr (T == WeightType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

// The even (2j) and odd (2j + 1) elements of the block of 32 at w + i, widened: for bf16 the
// low and high halves of its sixteen 32-bit words, in place (no lane crossing).
template <WeightType T>
__attribute__((target("avx512f"))) inline void LoadPairsAvx512(const void* w, int64_t i,
                                                               __m512* even, __m512* odd) {
  if constexpr (T == WeightType::kBF16) {
    const __m512i d = _mm512_loadu_si512(static_cast<const uint16_t*>(w) + i);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(d, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(d, _mm512_set1_epi32(~0xFFFF)));
  } else {
    const __m512 lo = Load16Avx512<T>(w, i);
    const __m512 hi = Load16Avx512<T>(w, i + 16);
    const __m512i even_index =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    *even = _mm512_permutex2var_ps(lo, even_index, hi);
    *odd = _mm512_permutex2var_ps(lo, _mm512_add_epi32(even_index, _mm512_set1_epi32(1)), hi);
  }
}

// ToPairOrderPortable with vectors: the same values moved.
__attribute__((target("avx512f"))) void ToPairOrderAvx512(const float* src, int64_t k, float* dst) {
  const __m512i even_index =
      _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd_index = _mm512_add_epi32(even_index, _mm512_set1_epi32(1));
  int64_t i = 0;
  for (; i + kBlock <= k; i += kBlock) {
    const __m512 lo = _mm512_loadu_ps(src + i);
    const __m512 hi = _mm512_loadu_ps(src + i + 16);
    _mm512_storeu_ps(dst + i, _mm512_permutex2var_ps(lo, even_index, hi));
    _mm512_storeu_ps(dst + i + 16, _mm512_permutex2var_ps(lo, odd_index, hi));
  }
  ToPairOrderPortable(src, k, dst, i);
}

__attribute__((target("avx2,f16c"))) void ToPairOrderAvx2(const float* src, int64_t k, float* dst) {
  int64_t i = 0;
  for (; i + kBlock <= k; i += kBlock) {
    for (int64_t half = 0; half < 2; ++half) {
      __m256 even, odd;
      DeinterleaveAvx2(_mm256_loadu_ps(src + i + 16 * half),
                       _mm256_loadu_ps(src + i + 16 * half + 8), &even, &odd);
      _mm256_storeu_ps(dst + i + 8 * half, even);
      _mm256_storeu_ps(dst + i + 16 + 8 * half, odd);
    }
  }
  ToPairOrderPortable(src, k, dst, i);
}

template <WeightType T, int R>
__attribute__((target("avx512f"))) void DotAvx512(const float* const* a, const void* w, int64_t n,
                                                  float* out) {
  __m512 s[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) s[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    __m512 we, wo;
    LoadPairsAvx512<T>(w, i, &we, &wo);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      s[r] = _mm512_add_ps(s[r], _mm512_mul_ps(_mm512_loadu_ps(a[r] + i), we));
      s[r] = _mm512_add_ps(s[r], _mm512_mul_ps(_mm512_loadu_ps(a[r] + i + 16), wo));
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m256 low = _mm512_castps512_ps256(s[r]);
    const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s[r]), 1));
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(low, high));
    out[r] = Remainder<T>(Fold8(v), a[r], w, i, n);
  }
}

// ---- AVX-512F, C weight rows side by side, their folds done together. ----

// Lanes [0, 8) of the result are a[j] + a[j + 8], lanes [8, 16) b[j] + b[j + 8]: the 16 -> 8 step
// of two accumulators.
__attribute__((target("avx512f"))) inline __m512 Fold16To8(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}

// The 8 -> 4 step of four accumulators, given as Fold16To8 of (a, b) and of (c, d): 128-bit
// block g of the result holds v[j] + v[j + 4], j < 4, of the g-th of a, b, c, d.
__attribute__((target("avx512f"))) inline __m512 Fold8To4(__m512 ab, __m512 cd) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The 4 -> 2 (u0 + u2, u1 + u3) and 2 -> 1 steps for four Fold8To4 results: lane 4 b + g of
// the result is the sum of the accumulator in block b of u[g].
__attribute__((target("avx512f"))) inline __m512 Fold4To1(const __m512* u) {
  const __m512 w01 = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 w23 = _mm512_add_ps(_mm512_shuffle_ps(u[2], u[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(u[2], u[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_ps(w01, w23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(w01, w23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// out[q] = the sixteen partial sums of acc[q] folded as Fold8 does (16 -> 8 -> 4 -> 2 -> 1),
// for N accumulators (4, 8 or 16) in vectors: every step adds the same pairs as Fold8.
template <int N>
__attribute__((target("avx512f"))) inline void FoldAvx512(const __m512* acc, float* out) {
  static_assert(N == 4 || N == 8 || N == 16);
  __m512 u[4];
  for (int g = 0; g < 4; ++g) {
    u[g] = 4 * g < N ? Fold8To4(Fold16To8(acc[4 * g], acc[4 * g + 1]),
                                Fold16To8(acc[4 * g + 2], acc[4 * g + 3]))
                     : _mm512_setzero_ps();
  }
  alignas(64) float f[16];
  _mm512_store_ps(f, Fold4To1(u));
  for (int q = 0; q < N; ++q) out[q] = f[4 * (q % 4) + q / 4];  // Block q % 4 of u[q / 4].
}

// How far ahead of the rows it multiplies RowsAvx512 asks for weights (into L2): C rows read
// side by side are C short streams, which this processor's prefetcher does not follow (reading
// 4 rows of 1 KiB side by side runs at less than half the rate of one stream); asking for them
// about 16 KiB ahead restores nearly the rate of one stream.
constexpr int64_t kWeightPrefetchBytes = 16 * 1024;

// out[c * R + r] = a[r] . w[c] for C weight rows and R input rows of n elements (a in pair
// order): every weight block is loaded and widened once for all R rows, every input vector once
// for all C rows, and the C * R folds are done together at the end.
template <WeightType T, int R, int C>
__attribute__((target("avx512f"))) void RowsAvx512(const float* const* a, const void* const* w,
                                                   int64_t n, float* out) {
  constexpr int64_t kBlockBytes = kBlock * (T == WeightType::kF32 ? 4 : 2);
  __m512 s[C * R];
#pragma GCC unroll 16
  for (int q = 0; q < C * R; ++q) s[q] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    __m512 we[C], wo[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const char* block = static_cast<const char*>(w[c]) + i * (kBlockBytes / kBlock);
      // Prefetching never faults, so an address past the matrix is harmless.
#pragma GCC unroll 2
      for (int64_t line = 0; line < kBlockBytes; line += 64) {
        _mm_prefetch(block + line + kWeightPrefetchBytes, _MM_HINT_T1);
      }
      LoadPairsAvx512<T>(w[c], i, &we[c], &wo[c]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xe = _mm512_loadu_ps(a[r] + i);
      const __m512 xo = _mm512_loadu_ps(a[r] + i + 16);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        s[c * R + r] = _mm512_add_ps(s[c * R + r], _mm512_mul_ps(xe, we[c]));
        s[c * R + r] = _mm512_add_ps(s[c * R + r], _mm512_mul_ps(xo, wo[c]));
      }
    }
  }
  FoldAvx512<C * R>(s, out);
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) out[c * R + r] = Remainder<T>(out[c * R + r], a[r], w[c], i, n);
  }
}

template <WeightType T, int R>
void Dot(Isa isa, const float* const* a, const void* w, int64_t n, float* out) {
  switch (isa) {
    case Isa::kAvx512:
      DotAvx512<T, R>(a, w, n, out);
      return;
    case Isa::kAvx2:
      DotAvx2<T, R>(a, w, n, out);
      return;
    case Isa::kPortable:
      DotPortable<T, R>(a, w, n, out);
      return;
  }
}

// Rows of x in groups of R, every weight row against each group.
template <WeightType T, int R>
void Group(Isa isa, const float* x, int64_t ldx, const void* const* w_rows, int64_t count,
           int64_t k, float* y, int64_t ldy, bool accumulate) {
  const float* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = x + r * ldx;
  int64_t j = 0;
  if (isa == Isa::kAvx512) {
    // C weight rows per call: C * R accumulators, sixteen at most.
    constexpr int C = R >= 8 ? 2 : 4;
    float d[C * R];
    for (; j + C <= count; j += C) {
      RowsAvx512<T, R, C>(rows, w_rows + j, k, d);
      for (int c = 0; c < C; ++c) {
        for (int r = 0; r < R; ++r) {
          float& out = y[r * ldy + j + c];
          out = accumulate ? out + d[c * R + r] : d[c * R + r];
        }
      }
    }
  }
  float d[R];
  for (; j < count; ++j) {
    Dot<T, R>(isa, rows, w_rows[j], k, d);
    for (int r = 0; r < R; ++r) {
      float& out = y[r * ldy + j];
      out = accumulate ? out + d[r] : d[r];
    }
  }
}

template <WeightType T>
void Products(Isa isa, const float* x, int64_t m, int64_t ldx, const void* const* w_rows,
              int64_t count, int64_t k, float* y, int64_t ldy, bool accumulate) {
  // The input rows in pair order, once per call (a small share of the call's work: every row
  // meets `count` weight rows).
  thread_local std::vector<float> ordered;
  ordered.resize(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r) {
    float* dst = ordered.data() + r * k;
    switch (isa) {
      case Isa::kAvx512:
        ToPairOrderAvx512(x + r * ldx, k, dst);
        break;
      case Isa::kAvx2:
        ToPairOrderAvx2(x + r * ldx, k, dst);
        break;
      case Isa::kPortable:
        ToPairOrderPortable(x + r * ldx, k, dst);
        break;
    }
  }
  x = ordered.data();
  ldx = k;
  int64_t r = 0;
  for (; r + 8 <= m; r += 8) {
    Group<T, 8>(isa, x + r * ldx, ldx, w_rows, count, k, y + r * ldy, ldy, accumulate);
  }
  if (r + 4 <= m) {
    Group<T, 4>(isa, x + r * ldx, ldx, w_rows, count, k, y + r * ldy, ldy, accumulate);
    r += 4;
  }
  if (r + 2 <= m) {
    Group<T, 2>(isa, x + r * ldx, ldx, w_rows, count, k, y + r * ldy, ldy, accumulate);
    r += 2;
  }
  if (r < m) Group<T, 1>(isa, x + r * ldx, ldx, w_rows, count, k, y + r * ldy, ldy, accumulate);
}

template <WeightType T>
__attribute__((target("avx512f"))) void WidenAvx512(const void* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, Load16Avx512<T>(src, i));
  for (; i < n; ++i) dst[i] = WeightAt<T>(src, i);
}

template <WeightType T>
__attribute__((target("avx2,f16c"))) void WidenAvx2(const void* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, Load8Avx2<T>(src, i));
  for (; i < n; ++i) dst[i] = WeightAt<T>(src, i);
}

template <WeightType T>
void WidenAs(Isa isa, const void* src, int64_t n, float* dst) {
  if constexpr (T == WeightType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if (isa == Isa::kAvx512) {
    WidenAvx512<T>(src, n, dst);
  } else if (isa == Isa::kAvx2) {
    WidenAvx2<T>(src, n, dst);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = WeightAt<T>(src, i);
  }
}

// CPUID leaf 1, ECX bit 29 (not every compiler's __builtin_cpu_supports knows "f16c").
bool HaveF16c() {
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}

}  // namespace

bool IsaSupported(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f");
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && HaveF16c();
    case Isa::kPortable:
      return true;
  }
  return false;
}

Isa BestIsa() {
  static const Isa best = IsaSupported(Isa::kAvx512) ? Isa::kAvx512
                          : IsaSupported(Isa::kAvx2) ? Isa::kAvx2
                                                     : Isa::kPortable;
  return best;
}

absl::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kPortable:
      return "portable";
  }
  return "?";
}

void RowProducts(Isa isa, WeightType type, const float* x, int64_t m, int64_t ldx,
                 const void* const* w_rows, int64_t count, int64_t k, float* y, int64_t ldy,
                 bool accumulate) {
  switch (type) {
    case WeightType::kF32:
      Products<WeightType::kF32>(isa, x, m, ldx, w_rows, count, k, y, ldy, accumulate);
      return;
    case WeightType::kBF16:
      Products<WeightType::kBF16>(isa, x, m, ldx, w_rows, count, k, y, ldy, accumulate);
      return;
    case WeightType::kF16:
      Products<WeightType::kF16>(isa, x, m, ldx, w_rows, count, k, y, ldy, accumulate);
      return;
  }
}

void Widen(Isa isa, WeightType type, const void* src, int64_t n, float* dst) {
  switch (type) {
    case WeightType::kF32:
      WidenAs<WeightType::kF32>(isa, src, n, dst);
      return;
    case WeightType::kBF16:
      WidenAs<WeightType::kBF16>(isa, src, n, dst);
      return;
    case WeightType::kF16:
      WidenAs<WeightType::kF16>(isa, src, n, dst);
      return;
  }
}

}  // namespace cairn::infer::cpu
