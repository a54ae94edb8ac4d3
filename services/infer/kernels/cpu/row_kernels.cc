#include "services/infer/kernels/cpu/row_kernels.h"

#include <cpuid.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "services/infer/kernels/cpu/x86_intrinsics.h"
#include "services/infer/kernels/half_float.h"
#include "services/infer/kernels/row_tiles.h"

// Every product is added to its partial sum with one fused multiply-add (one rounding), in every
// form: the vector forms with their FMA instructions, the portable form and the tails with
// std::fma. The file is compiled with -ffp-contract=off (see CMakeLists.txt), so the compiler
// fuses nothing else (the folds stay plain additions) and every form rounds alike.
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

// Where element i (a multiple of 16) of a weight row lies whose blocks of sixteen elements are
// `stride` elements apart: 16 for a row-major row, kRowTileRows * 16 for a row of a row tile.
template <WeightType T>
inline const void* BlockAt(const void* w, int64_t i, int64_t stride) {
  constexpr int64_t kSize = T == WeightType::kF32 ? 4 : 2;
  return static_cast<const char*>(w) + (i / 16) * stride * kSize;
}

// The fold of the sixteen partial sums, given as v[j] = s[j] + s[j + 8] (the 16 -> 8 step),
// then 8 -> 4 -> 2 -> 1.
inline float Fold8(const float* v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

// ---- Portable: four lanes per value (one SSE register on baseline x86-64). ----

typedef float F32x4 __attribute__((vector_size(16)));

inline F32x4 Load4(const float* p) {
  F32x4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// a * b + c lane by lane, each rounded once.
inline F32x4 Fma4(F32x4 a, F32x4 b, F32x4 c) {
  return F32x4{std::fma(a[0], b[0], c[0]), std::fma(a[1], b[1], c[1]), std::fma(a[2], b[2], c[2]),
               std::fma(a[3], b[3], c[3])};
}

template <WeightType T, int R>
void DotPortable(const float* const* a, const void* w, const void* tail, int64_t stride, int64_t n,
                 float* out) {
  F32x4 s[R][4] = {};
  alignas(16) float wf[16];
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const void* block = BlockAt<T>(w, i, stride);
    if constexpr (T == WeightType::kF32) {
      std::memcpy(wf, block, sizeof(wf));
    } else {
      for (int j = 0; j < 16; ++j) wf[j] = WeightAt<T>(block, j);
    }
    for (int r = 0; r < R; ++r) {
      for (int q = 0; q < 4; ++q)
        s[r][q] = Fma4(Load4(a[r] + i + 4 * q), Load4(wf + 4 * q), s[r][q]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const F32x4 lo = s[r][0] + s[r][2];  // Lanes j + j+8, j < 4.
    const F32x4 hi = s[r][1] + s[r][3];  // Lanes j + j+8, 4 <= j < 8.
    const float v[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
    float sum = Fold8(v);
    for (int64_t j = i; j < n; ++j) sum = std::fma(a[r][j], WeightAt<T>(tail, j - i), sum);
    out[r] = sum;
  }
}

// ---- AVX2 (+F16C): two 8-lane registers per row. ----

template <WeightType T>
__attribute__((target("avx2,f16c,fma"))) inline __m256 Load8Avx2(const void* w, int64_t i) {
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

template <WeightType T, int R>
__attribute__((target("avx2,f16c,fma"))) void DotAvx2(const float* const* a, const void* w,
                                                      const void* tail, int64_t stride, int64_t n,
                                                      float* out) {
  __m256 lo[R], hi[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const void* block = BlockAt<T>(w, i, stride);
    const __m256 w0 = Load8Avx2<T>(block, 0);
    const __m256 w1 = Load8Avx2<T>(block, 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      lo[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a[r] + i), w0, lo[r]);
      hi[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a[r] + i + 8), w1, hi[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(lo[r], hi[r]));
    float sum = Fold8(v);
    for (int64_t j = i; j < n; ++j) sum = std::fma(a[r][j], WeightAt<T>(tail, j - i), sum);
    out[r] = sum;
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

template <WeightType T, int R>
__attribute__((target("avx512f"))) void DotAvx512(const float* const* a, const void* w,
                                                  const void* tail, int64_t stride, int64_t n,
                                                  float* out) {
  __m512 s[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) s[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 wv = Load16Avx512<T>(BlockAt<T>(w, i, stride), 0);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      s[r] = _mm512_fmadd_ps(_mm512_loadu_ps(a[r] + i), wv, s[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m256 low = _mm512_castps512_ps256(s[r]);
    const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s[r]), 1));
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(low, high));
    float sum = Fold8(v);
    for (int64_t j = i; j < n; ++j) sum = std::fma(a[r][j], WeightAt<T>(tail, j - i), sum);
    out[r] = sum;
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

// How far ahead of the rows it multiplies RowsAvx512 asks for row-major weights (into L2): C
// rows read side by side are C short streams, which this processor's prefetcher does not follow
// (reading 4 rows of 1 KiB side by side runs at less than half the rate of one stream); asking
// for them about 16 KiB ahead restores nearly the rate of one stream.
constexpr int64_t kWeightPrefetchBytes = 16 * 1024;
// How far ahead it asks for a row tile's weights into L1, and further ahead into L2, from the
// size of the input rows that TileGroup's caller gives on (DefaultTilePrefetchMinInputBytes).
// The L2 requests (eleventh round) keep more of the stream in flight than the L1's fill buffers
// allow: measured on a two-core AMD EPYC (Zen 5), 100 MB of bf16 weights in 2 MB matrices of
// 512 columns, one thread, one / four input rows, 26.5-26.7 / 25.2-28.3 GB/s without asking
// ahead, 29.4-31.1 / 27.6-28.7 with the L1 requests alone, 36.4-36.8 / 33.6-35.6 with both;
// two threads 47-51 / 43-46, 65-67 / 51, 60-62 / 60-61 GB/s.
constexpr int64_t kTilePrefetchBytes = 4 * 1024;
constexpr int64_t kTilePrefetchL2Bytes = 16 * 1024;

// How RowsAvx512 reads its C weight rows: row-major rows (C streams), or C rows of one row tile
// with or without asking for the weights ahead.
enum class Reading { kRowMajor, kTile, kTilePrefetch };

// out[c * R + r] = a[r] . w[c] for C weight rows and R input rows of n elements: every weight
// vector is loaded and widened once for all R rows, every input vector once for all C rows,
// and the C * R folds are done together at the end. Row c's blocks of sixteen are `stride`
// elements apart from w[c] on (BlockAt), its last n % 16 elements at tails[c].
template <WeightType T, int R, int C, Reading kReading>
__attribute__((target("avx512f"))) void RowsAvx512(const float* const* a, const void* const* w,
                                                   const void* const* tails, int64_t stride,
                                                   int64_t n, float* out) {
  constexpr int64_t kSize = T == WeightType::kF32 ? 4 : 2;
  __m512 s[C * R];
#pragma GCC unroll 16
  for (int q = 0; q < C * R; ++q) s[q] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const void* block = BlockAt<T>(w[c], i, stride);
      // Prefetching never faults, so an address past the matrix is harmless.
      if constexpr (kReading == Reading::kRowMajor) {
        _mm_prefetch(static_cast<const char*>(block) + kWeightPrefetchBytes, _MM_HINT_T1);
      } else if (kReading == Reading::kTilePrefetch && (c * 16 * kSize) % 64 == 0) {
        // One request per cache line of the tile's block, at each distance.
        _mm_prefetch(static_cast<const char*>(block) + kTilePrefetchBytes, _MM_HINT_T0);
        _mm_prefetch(static_cast<const char*>(block) + kTilePrefetchL2Bytes, _MM_HINT_T1);
      }
      wv[c] = Load16Avx512<T>(block, 0);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_loadu_ps(a[r] + i);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        s[c * R + r] = _mm512_fmadd_ps(x, wv[c], s[c * R + r]);
      }
    }
  }
  FoldAvx512<C * R>(s, out);
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) {
      float& o = out[c * R + r];
      for (int64_t j = i; j < n; ++j) o = std::fma(a[r][j], WeightAt<T>(tails[c], j - i), o);
    }
  }
}

template <WeightType T, int R>
void Dot(Isa isa, const float* const* a, const void* w, const void* tail, int64_t stride, int64_t n,
         float* out) {
  switch (isa) {
    case Isa::kAvx512:
      DotAvx512<T, R>(a, w, tail, stride, n, out);
      return;
    case Isa::kAvx2:
      DotAvx2<T, R>(a, w, tail, stride, n, out);
      return;
    case Isa::kPortable:
      DotPortable<T, R>(a, w, tail, stride, n, out);
      return;
  }
}

// y[r * ldy + j] = (y +) d[c * R + r] for the C results of one call, columns j = j0 + c.
template <int R>
inline void Store(const float* d, int C, int64_t j0, float* y, int64_t ldy, bool accumulate) {
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) {
      float& out = y[r * ldy + j0 + c];
      out = accumulate ? out + d[c * R + r] : d[c * R + r];
    }
  }
}

// Rows of x in groups of R, every row-major weight row against each group.
template <WeightType T, int R>
void Group(Isa isa, const float* x, int64_t ldx, const void* const* w_rows, int64_t count,
           int64_t k, float* y, int64_t ldy, bool accumulate) {
  constexpr int64_t kSize = T == WeightType::kF32 ? 4 : 2;
  const int64_t tail_bytes = k / 16 * 16 * kSize;
  const float* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = x + r * ldx;
  int64_t j = 0;
  if (isa == Isa::kAvx512) {
    // C weight rows per call: C * R accumulators, sixteen at most.
    constexpr int C = R >= 8 ? 2 : 4;
    float d[C * R] = {};
    const void* tails[C];
    for (; j + C <= count; j += C) {
      for (int c = 0; c < C; ++c) tails[c] = static_cast<const char*>(w_rows[j + c]) + tail_bytes;
      RowsAvx512<T, R, C, Reading::kRowMajor>(rows, w_rows + j, tails, 16, k, d);
      Store<R>(d, C, j, y, ldy, accumulate);
    }
  }
  float d[R] = {};
  for (; j < count; ++j) {
    Dot<T, R>(isa, rows, w_rows[j], static_cast<const char*>(w_rows[j]) + tail_bytes, 16, k, d);
    Store<R>(d, 1, j, y, ldy, accumulate);
  }
}

// Rows of x in groups of R, against the `count` rows of consecutive row tiles from `tiles` on.
template <WeightType T, int R>
void TileGroup(Isa isa, const float* x, int64_t ldx, const void* tiles, int64_t count, int64_t k,
               float* y, int64_t ldy, bool accumulate, int64_t prefetch_min_input_bytes) {
  constexpr int64_t kSize = T == WeightType::kF32 ? 4 : 2;
  constexpr int64_t kStride = kRowTileRows * kRowTileBlock;
  const float* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = x + r * ldx;
  const int64_t tail = k % kRowTileBlock;
  const bool prefetch = prefetch_min_input_bytes >= 0 &&
                        R * k * static_cast<int64_t>(sizeof(float)) >= prefetch_min_input_bytes;
  for (int64_t j = 0; j < count; j += kRowTileRows) {
    const char* tile = static_cast<const char*>(tiles) + j * k * kSize;
    const int valid = static_cast<int>(std::min<int64_t>(kRowTileRows, count - j));
    const void* w[kRowTileRows];
    const void* tails[kRowTileRows];
    for (int c = 0; c < kRowTileRows; ++c) {
      w[c] = tile + c * kRowTileBlock * kSize;
      tails[c] = tile + (k / kRowTileBlock * kStride + c * tail) * kSize;
    }
    if (isa == Isa::kAvx512) {
      // All four of the tile's rows against up to four input rows at a time: sixteen
      // accumulators. Eight input rows take two such passes over the tile, the second from L1
      // (one pass of two weight rows at a time read every other cache line of the tile and
      // measured a third of four rows' rate). A result's bits do not depend on the pass. Rows
      // past the part's last are zeros; their results are not stored.
      constexpr int kRows = R > 4 ? 4 : R;
      constexpr int C = kRowTileRows;
      float d[C * kRows] = {};
      for (int r0 = 0; r0 < R; r0 += kRows) {
        if (prefetch && r0 == 0) {
          RowsAvx512<T, kRows, C, Reading::kTilePrefetch>(rows + r0, w, tails, kStride, k, d);
        } else {
          RowsAvx512<T, kRows, C, Reading::kTile>(rows + r0, w, tails, kStride, k, d);
        }
        Store<kRows>(d, valid, j, y + r0 * ldy, ldy, accumulate);
      }
    } else {
      float d[R] = {};
      for (int c = 0; c < valid; ++c) {
        Dot<T, R>(isa, rows, w[c], tails[c], kStride, k, d);
        Store<R>(d, 1, j + c, y, ldy, accumulate);
      }
    }
  }
}

// Rows of x in groups of 8, 4, 2 and 1, each group through Run<R>.
template <template <WeightType, int> class Run, WeightType T, typename... Args>
void InGroups(Isa isa, const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy,
              Args... args) {
  int64_t r = 0;
  for (; r + 8 <= m; r += 8) Run<T, 8>::Call(isa, x + r * ldx, ldx, y + r * ldy, ldy, args...);
  if (r + 4 <= m) {
    Run<T, 4>::Call(isa, x + r * ldx, ldx, y + r * ldy, ldy, args...);
    r += 4;
  }
  if (r + 2 <= m) {
    Run<T, 2>::Call(isa, x + r * ldx, ldx, y + r * ldy, ldy, args...);
    r += 2;
  }
  if (r < m) Run<T, 1>::Call(isa, x + r * ldx, ldx, y + r * ldy, ldy, args...);
}

template <WeightType T, int R>
struct GroupRun {
  static void Call(Isa isa, const float* x, int64_t ldx, float* y, int64_t ldy,
                   const void* const* w_rows, int64_t count, int64_t k, bool accumulate) {
    Group<T, R>(isa, x, ldx, w_rows, count, k, y, ldy, accumulate);
  }
};

template <WeightType T, int R>
struct TileGroupRun {
  static void Call(Isa isa, const float* x, int64_t ldx, float* y, int64_t ldy, const void* tiles,
                   int64_t count, int64_t k, bool accumulate, int64_t prefetch_min_input_bytes) {
    TileGroup<T, R>(isa, x, ldx, tiles, count, k, y, ldy, accumulate, prefetch_min_input_bytes);
  }
};

template <WeightType T>
__attribute__((target("avx512f"))) void WidenAvx512(const void* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, Load16Avx512<T>(src, i));
  for (; i < n; ++i) dst[i] = WeightAt<T>(src, i);
}

template <WeightType T>
__attribute__((target("avx2,f16c,fma"))) void WidenAvx2(const void* src, int64_t n, float* dst) {
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

// Rows [first, first + count) of a row-tile part with k columns, widened into row-major rows
// of dst. Each form widens a block of sixteen with the instructions Widen uses.
template <WeightType T>
__attribute__((target("avx512f"))) void WidenTileRowsAvx512(const void* part, int64_t first,
                                                            int64_t count, int64_t k, float* dst) {
  constexpr int64_t kSize = T == WeightType::kF32 ? 4 : 2;
  const char* base = static_cast<const char*>(part);
  for (int64_t r = 0; r < count; ++r) {
    float* out = dst + r * k;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      _mm512_storeu_ps(out + i,
                       Load16Avx512<T>(base + RowTileBlockOffset(first + r, i / 16, k) * kSize, 0));
    }
    const char* tail = base + RowTileTailOffset(first + r, k) * kSize;
    for (int64_t j = i; j < k; ++j) out[j] = WeightAt<T>(tail, j - i);
  }
}

template <WeightType T>
__attribute__((target("avx2,f16c,fma"))) void WidenTileRowsAvx2(const void* part, int64_t first,
                                                                int64_t count, int64_t k,
                                                                float* dst) {
  constexpr int64_t kSize = T == WeightType::kF32 ? 4 : 2;
  const char* base = static_cast<const char*>(part);
  for (int64_t r = 0; r < count; ++r) {
    float* out = dst + r * k;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      const char* block = base + RowTileBlockOffset(first + r, i / 16, k) * kSize;
      _mm256_storeu_ps(out + i, Load8Avx2<T>(block, 0));
      _mm256_storeu_ps(out + i + 8, Load8Avx2<T>(block, 8));
    }
    const char* tail = base + RowTileTailOffset(first + r, k) * kSize;
    for (int64_t j = i; j < k; ++j) out[j] = WeightAt<T>(tail, j - i);
  }
}

template <WeightType T>
void WidenTileRowsPortable(const void* part, int64_t first, int64_t count, int64_t k, float* dst) {
  constexpr int64_t kSize = T == WeightType::kF32 ? 4 : 2;
  const char* base = static_cast<const char*>(part);
  for (int64_t r = 0; r < count; ++r) {
    float* out = dst + r * k;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      const char* block = base + RowTileBlockOffset(first + r, i / 16, k) * kSize;
      for (int j = 0; j < 16; ++j) out[i + j] = WeightAt<T>(block, j);
    }
    const char* tail = base + RowTileTailOffset(first + r, k) * kSize;
    for (int64_t j = i; j < k; ++j) out[j] = WeightAt<T>(tail, j - i);
  }
}

template <WeightType T>
void WidenTileRowsAs(Isa isa, const void* part, int64_t first, int64_t count, int64_t k,
                     float* dst) {
  switch (isa) {
    case Isa::kAvx512:
      WidenTileRowsAvx512<T>(part, first, count, k, dst);
      return;
    case Isa::kAvx2:
      WidenTileRowsAvx2<T>(part, first, count, k, dst);
      return;
    case Isa::kPortable:
      WidenTileRowsPortable<T>(part, first, count, k, dst);
      return;
  }
}

// Calls F<T>::Call(args...) for the weight type `type`.
template <template <WeightType> class F, typename... Args>
void ForType(WeightType type, Args... args) {
  switch (type) {
    case WeightType::kF32:
      F<WeightType::kF32>::Call(args...);
      return;
    case WeightType::kBF16:
      F<WeightType::kBF16>::Call(args...);
      return;
    case WeightType::kF16:
      F<WeightType::kF16>::Call(args...);
      return;
  }
}

template <WeightType T>
struct RowProductsOf {
  static void Call(Isa isa, const float* x, int64_t m, int64_t ldx, const void* const* w_rows,
                   int64_t count, int64_t k, float* y, int64_t ldy, bool accumulate) {
    InGroups<GroupRun, T>(isa, x, m, ldx, y, ldy, w_rows, count, k, accumulate);
  }
};

template <WeightType T>
struct RowTileProductsOf {
  static void Call(Isa isa, const float* x, int64_t m, int64_t ldx, const void* tiles,
                   int64_t count, int64_t k, float* y, int64_t ldy, bool accumulate,
                   int64_t prefetch_min_input_bytes) {
    InGroups<TileGroupRun, T>(isa, x, m, ldx, y, ldy, tiles, count, k, accumulate,
                              prefetch_min_input_bytes);
  }
};

template <WeightType T>
struct WidenTileRowsOf {
  static void Call(Isa isa, const void* part, int64_t first, int64_t count, int64_t k, float* dst) {
    WidenTileRowsAs<T>(isa, part, first, count, k, dst);
  }
};

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
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HaveF16c();
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
  ForType<RowProductsOf>(type, isa, x, m, ldx, w_rows, count, k, y, ldy, accumulate);
}

void RowTileProducts(Isa isa, WeightType type, const float* x, int64_t m, int64_t ldx,
                     const void* tiles, int64_t count, int64_t k, float* y, int64_t ldy,
                     bool accumulate, int64_t prefetch_min_input_bytes) {
  ForType<RowTileProductsOf>(type, isa, x, m, ldx, tiles, count, k, y, ldy, accumulate,
                             prefetch_min_input_bytes);
}

int64_t DefaultTilePrefetchMinInputBytes() {
  // Always. Intel: measured on a two-core Xeon (AMX generation, virtual machine), bench-50m
  // decode tokens/s, prefetching every tile (into L1 then) against from 24 KiB of input rows on,
  // alternating runs: one slot 76-132 against 61-73, four slots 255-446 against 186-239. AMD:
  // an earlier Zen 5 machine measured the L1 requests alone costing below 24 KiB of input rows
  // (one core, four rows of 512 columns 27 -> 23 GB/s), so until the eleventh round AMD asked
  // ahead only from there; with the L2 requests beside them a two-core Zen 5 EPYC measured 25-28
  // -> 34-36 GB/s on one core at those shapes and bench-50m's four-slot decode 1226-1305 ->
  // 1442-1509 tokens/s (three alternating triples; kTilePrefetchL2Bytes has the rest).
  return kTilePrefetchAlways;
}

void WidenTileRows(Isa isa, WeightType type, const void* part, int64_t first, int64_t count,
                   int64_t k, float* dst) {
  ForType<WidenTileRowsOf>(type, isa, part, first, count, k, dst);
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
