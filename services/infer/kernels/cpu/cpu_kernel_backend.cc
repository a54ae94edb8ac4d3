#include "services/infer/kernels/cpu/cpu_kernel_backend.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/check.h"

// OpenBLAS is not built with ThreadSanitizer: its accesses and its internal locking are
// invisible to it, so TSan builds call BLAS from the calling thread only.
#if defined(__SANITIZE_THREAD__)
#define CAIRN_BLAS_CALLER_ONLY 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CAIRN_BLAS_CALLER_ONLY 1
#endif
#endif

namespace cairn::infer {
namespace {

// Query rows per block of the attention score matrix.
constexpr int64_t kAttentionQueryBlock = 256;

// Four floats as one value (GCC/Clang vector extension): one SSE register on baseline x86-64,
// with lane-wise arithmetic.
typedef float F32x4 __attribute__((vector_size(16)));

inline F32x4 Load4(const float* p) {
  F32x4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// A dot product whose summation order depends only on `n`: sixteen interleaved partial sums
// (lane j sums the products at i = j mod 16), folded pairwise 16 -> 8 -> 4 -> 2 -> 1, then the
// remainder in order. Bit-identical wherever it runs.
float RowDot(const float* a, const float* b, int64_t n) {
  F32x4 s0 = {}, s1 = {}, s2 = {}, s3 = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 += Load4(a + i) * Load4(b + i);
    s1 += Load4(a + i + 4) * Load4(b + i + 4);
    s2 += Load4(a + i + 8) * Load4(b + i + 8);
    s3 += Load4(a + i + 12) * Load4(b + i + 12);
  }
  const F32x4 lo = s0 + s2;                     // Lanes 0..3 of the 16 -> 8 fold.
  const F32x4 hi = s1 + s3;                     // Lanes 4..7.
  const F32x4 f4 = lo + hi;                     // 8 -> 4.
  float s = (f4[0] + f4[2]) + (f4[1] + f4[3]);  // 4 -> 2 -> 1.
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Output columns per work item of MatMulRows: enough to amortise scheduling, small enough that
// a block of weight rows stays in cache while every input row passes over it.
constexpr int64_t kRowMatMulBlock = 64;

// MatMulTransposedTyped runs products of at most this many rows through the row kernel: it
// reads narrow weights in place, where the GEMM would first widen all of them.
constexpr int64_t kGemmMinRows = 16;

// Weights widened per sgemm call of MatMulTransposedTyped (rows * cols): large enough for the
// GEMM to run near its peak on the tile, small enough to stay in the last-level cache.
constexpr int64_t kWidenTileElements = int64_t{1} << 20;

// Tiles of a GEMM's weight rows per backend thread: more than one, so that a thread the machine
// delays takes fewer of them; few, because each tile's sgemm packs the whole input again.
constexpr int64_t kGemmTilesPerThread = 2;
// The fewest weight rows of a tile (a multiple of 16, sgemm's widest register block).
constexpr int64_t kGemmMinTileRows = 64;

// Elements of an elementwise operation (a norm, an activation, RoPE) per work item: enough to
// amortise handing the item to another thread, so that a decode step's few rows stay on the
// calling thread.
constexpr int64_t kElementwiseItemElements = int64_t{1} << 15;

// y[m, n] = x[m, k] . w[n, k]^T (+ y) through OpenBLAS.
void Sgemm(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n, float* y,
           int64_t ldy, bool accumulate) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(ldx),
              w, static_cast<blasint>(k), accumulate ? 1.0f : 0.0f, y, static_cast<blasint>(ldy));
}

// Returns row `j` of `w`.
const void* WeightRow(const WeightMatrix& w, int64_t j) {
  for (int p = 0; p < w.num_parts; ++p) {
    if (j < w.parts[p].rows) {
      return static_cast<const char*>(w.parts[p].data) + j * w.cols * WeightTypeSize(w.type);
    }
    j -= w.parts[p].rows;
  }
  CAIRN_CHECK(false);  // j < w.rows(): the caller's loop bound.
  return nullptr;
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// torch softplus switches to the identity above this input.
constexpr float kSoftplusThreshold = 20.0f;
float Softplus(float x) { return x > kSoftplusThreshold ? x : std::log1p(std::exp(x)); }

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

// acc[r][v] += a[r][x] * b[x][16 v, 16 v + 16) for RB rows r: one step of MatAccBlock and
// DotBlock.
template <int V, int RB>
inline __attribute__((always_inline)) void DotStep(const float* a, int64_t lda, const float* b,
                                                   int64_t ldb, int x, F32x16 (&acc)[RB][V]) {
  F32x16 bv[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) std::memcpy(&bv[v], b + x * ldb + 16 * v, sizeof(F32x16));
#pragma GCC unroll 4
  for (int r = 0; r < RB; ++r) {
    const float av = a[r * lda + x];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[r][v] += av * bv[v];
  }
}

// o[r][:] = (0 or o[r][:]) + sum over x in order of a[r][x] * b[x][:] for RB rows r and V * 16
// columns, the RB * V vectors of o held in registers while b's rows pass: the arithmetic of RB
// Axpy sequences (from zero, or from o), each b row loaded once for RB rows.
template <int V, int RB>
inline __attribute__((always_inline)) void MatAccBlock(const float* a, int64_t lda, const float* b,
                                                       int64_t ldb, int inner, float* o,
                                                       int64_t ldo, bool zero) {
  // Fully unrolled, so that the accumulators stay in registers (at -O2 GCC keeps a loop over
  // them, with every accumulator in memory).
  F32x16 acc[RB][V];
#pragma GCC unroll 4
  for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      if (zero) {
        acc[r][v] = F32x16{};
      } else {
        std::memcpy(&acc[r][v], o + r * ldo + 16 * v, sizeof(F32x16));
      }
    }
  }
  for (int x = 0; x < inner; ++x) DotStep<V, RB>(a, lda, b, ldb, x, acc);
#pragma GCC unroll 4
  for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) std::memcpy(o + r * ldo + 16 * v, &acc[r][v], sizeof(F32x16));
  }
}

// o[r][:cols] (+)= sum over x < inner, in order, of a[r][x] * b[x][:cols] for r < rows: with
// `zero` the sums start from zero, else from o (Axpy after Axpy). Blocked where cols is
// 64 or 128, the same arithmetic otherwise.
inline __attribute__((always_inline)) void MatAcc(const float* a, int64_t lda, int rows,
                                                  const float* b, int64_t ldb, int inner, int cols,
                                                  float* o, int64_t ldo, bool zero) {
  int r = 0;
  if (cols == 64) {
    for (; r + 4 <= rows; r += 4) {
      MatAccBlock<4, 4>(a + r * lda, lda, b, ldb, inner, o + r * ldo, ldo, zero);
    }
  } else if (cols == 128) {
    for (; r + 2 <= rows; r += 2) {
      MatAccBlock<8, 2>(a + r * lda, lda, b, ldb, inner, o + r * ldo, ldo, zero);
    }
  }
  for (; r < rows; ++r) {
    float* orow = o + r * ldo;
    if (zero) std::fill(orow, orow + cols, 0.0f);
    for (int x = 0; x < inner; ++x) Axpy(a[r * lda + x], b + x * ldb, orow, cols);
  }
}

// o[r][j] = sum over x < inner of a[r][x] * b[x][j] for RB rows r and V * 16 columns j, each sum
// in the order of the scalar loop in DotProducts: four partial sums by x mod 4 (the remainder
// into the first), then (s0 + s1) + (s2 + s3).
template <int V, int RB>
inline __attribute__((always_inline)) void DotBlock(const float* a, int64_t lda, const float* b,
                                                    int64_t ldb, int inner, float* o, int64_t ldo) {
  F32x16 acc[4][RB][V];
#pragma GCC unroll 4
  for (int s = 0; s < 4; ++s) {
#pragma GCC unroll 4
    for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[s][r][v] = F32x16{};
    }
  }
  int x = 0;
  for (; x + 4 <= inner; x += 4) {
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) DotStep<V, RB>(a, lda, b, ldb, x + s, acc[s]);
  }
  for (; x < inner; ++x) DotStep<V, RB>(a, lda, b, ldb, x, acc[0]);
#pragma GCC unroll 4
  for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const F32x16 sum = (acc[0][r][v] + acc[1][r][v]) + (acc[2][r][v] + acc[3][r][v]);
      std::memcpy(o + r * ldo + 16 * v, &sum, sizeof(sum));
    }
  }
}

// o[r][j] = (row r of a) . (column j of b) for r < rows, j < cols (b is [inner, cols], row
// stride ldb), with four partial sums by x mod 4 (the remainder into the first) added as
// (s0 + s1) + (s2 + s3): the order of the chunked delta rule's scalar dot products before they
// were blocked. Blocked (DotBlock) where cols is a multiple of 32.
inline __attribute__((always_inline)) void DotProducts(const float* a, int64_t lda, int rows,
                                                       const float* b, int64_t ldb, int inner,
                                                       int cols, float* o, int64_t ldo) {
  if (cols % 32 == 0) {
    int r = 0;
    for (; r + 2 <= rows; r += 2) {
      for (int j = 0; j < cols; j += 32) {
        DotBlock<2, 2>(a + r * lda, lda, b + j, ldb, inner, o + r * ldo + j, ldo);
      }
    }
    if (r < rows) {
      for (int j = 0; j < cols; j += 32) {
        DotBlock<2, 1>(a + r * lda, lda, b + j, ldb, inner, o + r * ldo + j, ldo);
      }
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) {
      float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      int x = 0;
      for (; x + 4 <= inner; x += 4) {
        for (int q = 0; q < 4; ++q) s[q] += a[r * lda + x + q] * b[(x + q) * ldb + j];
      }
      for (; x < inner; ++x) s[0] += a[r * lda + x] * b[x * ldb + j];
      o[r * ldo + j] = (s[0] + s[1]) + (s[2] + s[3]);
    }
  }
}

// Rows of the chunked delta rule's forward substitution that take their earlier rows together.
constexpr int kSubstitutionBlock = 4;

// The delta rule's loops and the softmax are built for AVX-512, AVX2 and baseline x86-64; the
// loader picks the widest this processor runs. Not under ThreadSanitizer: the loader runs the
// clones' resolver while relocating, before TSan's runtime starts, and GCC instruments the
// resolver, so every binary linking this file crashed before main.
#if defined(__SANITIZE_THREAD__)
#define CAIRN_SIMD_CLONES
#else
#define CAIRN_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

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

// p[0, 16) = sigmoid(p[0, 16)): 1 / (1 + e) for x >= 0 and e / (1 + e) below, e = exp(-|x|),
// so that the exponential never overflows.
inline __attribute__((always_inline)) void Sigmoid16(float* p) {
  F32x16 x;
  std::memcpy(&x, p, sizeof(x));
  const F32x16 neg_abs = x < 0.0f ? x : -x;
  alignas(64) float e[16];
  std::memcpy(e, &neg_abs, sizeof(e));
  ExpNonPositive16(e);
  F32x16 ev;
  std::memcpy(&ev, e, sizeof(ev));
  const F32x16 inv = 1.0f / (1.0f + ev);
  const F32x16 y = x >= 0.0f ? inv : ev * inv;
  std::memcpy(p, &y, sizeof(y));
}

// out[0, 16) = a * sigmoid(g) (* b where b is given), lane-wise.
inline __attribute__((always_inline)) void SigmoidProducts16(const float* a, const float* g,
                                                             const float* b, float* out) {
  alignas(64) float sig[16];
  std::memcpy(sig, g, sizeof(sig));
  Sigmoid16(sig);
  F32x16 av, sv;
  std::memcpy(&av, a, sizeof(av));
  std::memcpy(&sv, sig, sizeof(sv));
  F32x16 y = av * sv;
  if (b != nullptr) {
    F32x16 bv;
    std::memcpy(&bv, b, sizeof(bv));
    y = y * bv;
  }
  std::memcpy(out, &y, sizeof(y));
}

// out[i] = a[i] * sigmoid(g[i]) (* b[i] where b is given) for i < n, sixteen lanes at a time;
// the last partial vector is padded, so that an element's bits do not depend on its position.
// With a = g it is SiLU.
CAIRN_SIMD_CLONES void SigmoidProducts(const float* a, const float* g, const float* b, int64_t n,
                                       float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    SigmoidProducts16(a + i, g + i, b == nullptr ? nullptr : b + i, out + i);
  }
  if (i == n) return;
  // The last partial vector, padded with zeros.
  alignas(64) float ta[16] = {}, tg[16] = {}, tb[16] = {}, to[16];
  const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
  std::memcpy(ta, a + i, bytes);
  std::memcpy(tg, g + i, bytes);
  if (b != nullptr) std::memcpy(tb, b + i, bytes);
  SigmoidProducts16(ta, tg, b == nullptr ? nullptr : tb, to);
  std::memcpy(out + i, to, bytes);
}

// o[ch] = silu(sum over m < kernel, in order from zero, of taps[m][ch] * window[m][ch]) for
// ch < channels, sixteen channels at a time (lane-wise, so the same bits as one at a time).
CAIRN_SIMD_CLONES void ConvSiluRow(const float* taps, const float* const* window, int kernel,
                                   int64_t channels, float* o) {
  int64_t ch = 0;
  for (; ch + 16 <= channels; ch += 16) {
    F32x16 acc = {};
    for (int m = 0; m < kernel; ++m) {
      F32x16 wv, xv;
      std::memcpy(&wv, taps + m * channels + ch, sizeof(wv));
      std::memcpy(&xv, window[m] + ch, sizeof(xv));
      acc += wv * xv;
    }
    std::memcpy(o + ch, &acc, sizeof(acc));
  }
  for (; ch < channels; ++ch) {
    float acc = 0.0f;
    for (int m = 0; m < kernel; ++m) acc += taps[m * channels + ch] * window[m][ch];
    o[ch] = acc;
  }
  SigmoidProducts(o, o, nullptr, channels, o);  // silu
}

// Softmax of p[0, n) in place, zeroing p[n, keys): the attention rows of the blocked path.
// Deterministic for given inputs (the sums run in a fixed lane order).
CAIRN_SIMD_CLONES void SoftmaxRow(float* p, int64_t n, int64_t keys) {
  F32x16 mv = F32x16{} - INFINITY;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    F32x16 v;
    std::memcpy(&v, p + j, sizeof(v));
    mv = v > mv ? v : mv;
  }
  float mx = -INFINITY;
  for (int i = 0; i < 16; ++i) mx = std::max(mx, mv[i]);
  for (; j < n; ++j) mx = std::max(mx, p[j]);
  F32x16 sv = {};
  for (j = 0; j + 16 <= n; j += 16) {
    F32x16 v;
    std::memcpy(&v, p + j, sizeof(v));
    v -= mx;
    std::memcpy(p + j, &v, sizeof(v));
    ExpNonPositive16(p + j);
    std::memcpy(&v, p + j, sizeof(v));
    sv += v;
  }
  float sum = 0.0f;
  if (j < n) {
    // The tail as one vector padded with the lowest input; only its real lanes count.
    float tail[16];
    for (int i = 0; i < 16; ++i) tail[i] = j + i < n ? p[j + i] - mx : -87.0f;
    ExpNonPositive16(tail);
    for (int i = 0; j + i < n; ++i) {
      p[j + i] = tail[i];
      sum += tail[i];
    }
  }
  for (int i = 0; i < 16; ++i) sum += sv[i];
  const float inv = 1.0f / sum;
  for (j = 0; j + 16 <= n; j += 16) {
    F32x16 v;
    std::memcpy(&v, p + j, sizeof(v));
    v *= inv;
    std::memcpy(p + j, &v, sizeof(v));
  }
  for (; j < n; ++j) p[j] *= inv;
  std::fill(p + n, p + keys, 0.0f);
}

// One token of the recurrent delta rule for one head with dv = 16 V: the arithmetic of
// RecurrentHead's loops, with kv and the output held in registers.
template <int V>
inline __attribute__((always_inline)) void RecurrentTokenBlocked(const float* q, const float* k,
                                                                 const float* v, float decay,
                                                                 float beta, int dk, float* s,
                                                                 float* out) {
  F32x16 kv[V], o[V];
#pragma GCC unroll 8
  for (int u = 0; u < V; ++u) kv[u] = o[u] = F32x16{};
  for (int i = 0; i < dk; ++i) {
    float* row = s + static_cast<int64_t>(i) * 16 * V;
#pragma GCC unroll 8
    for (int u = 0; u < V; ++u) {
      F32x16 r;
      std::memcpy(&r, row + 16 * u, sizeof(r));
      r *= decay;
      std::memcpy(row + 16 * u, &r, sizeof(r));
      kv[u] += k[i] * r;
    }
  }
#pragma GCC unroll 8
  for (int u = 0; u < V; ++u) {
    F32x16 vv;
    std::memcpy(&vv, v + 16 * u, sizeof(vv));
    kv[u] = (vv - kv[u]) * beta;
  }
  for (int i = 0; i < dk; ++i) {
    float* row = s + static_cast<int64_t>(i) * 16 * V;
#pragma GCC unroll 8
    for (int u = 0; u < V; ++u) {
      F32x16 r;
      std::memcpy(&r, row + 16 * u, sizeof(r));
      r += k[i] * kv[u];
      std::memcpy(row + 16 * u, &r, sizeof(r));
      o[u] += q[i] * r;
    }
  }
#pragma GCC unroll 8
  for (int u = 0; u < V; ++u) std::memcpy(out + 16 * u, &o[u], sizeof(F32x16));
}

// One v-head of the recurrent gated delta rule over all tokens of the call.
CAIRN_SIMD_CLONES void RecurrentHead(const GatedDeltaArgs& a, int h, float* s,
                                     std::vector<float>& kv) {
  const int r = a.v_heads / a.k_heads;
  const int kh = h / r;
  const int64_t qk_ld = static_cast<int64_t>(a.k_heads) * a.dk;
  const int64_t v_ld = static_cast<int64_t>(a.v_heads) * a.dv;
  for (int64_t t = 0; t < a.tokens; ++t) {
    const float* q = a.q + t * qk_ld + static_cast<int64_t>(kh) * a.dk;
    const float* k = a.k + t * qk_ld + static_cast<int64_t>(kh) * a.dk;
    const float* v = a.v + t * v_ld + static_cast<int64_t>(h) * a.dv;
    const float decay = std::exp(a.g[t * a.v_heads + h]);
    const float beta = a.beta[t * a.v_heads + h];
    float* out = a.out + t * v_ld + static_cast<int64_t>(h) * a.dv;
    if (a.dv == 64) {
      RecurrentTokenBlocked<4>(q, k, v, decay, beta, a.dk, s, out);
      continue;
    }
    if (a.dv == 128) {
      RecurrentTokenBlocked<8>(q, k, v, decay, beta, a.dk, s, out);
      continue;
    }
    // Two passes over the state (it is read once per token for each slot of a decode step):
    // S = decay S and kv = k S, then S += k (x) kv' and out = q S; each element's arithmetic
    // and every sum's order as in four separate passes.
    std::fill(kv.begin(), kv.end(), 0.0f);
    for (int i = 0; i < a.dk; ++i) {
      float* row = s + static_cast<int64_t>(i) * a.dv;
      Scale(decay, row, a.dv);
      Axpy(k[i], row, kv.data(), a.dv);
    }
    for (int j = 0; j < a.dv; ++j) kv[j] = (v[j] - kv[j]) * beta;
    std::fill(out, out + a.dv, 0.0f);
    for (int i = 0; i < a.dk; ++i) {
      float* row = s + static_cast<int64_t>(i) * a.dv;
      Axpy(k[i], kv.data(), row, a.dv);
      Axpy(q[i], row, out, a.dv);
    }
  }
}

// One v-head of the chunked gated delta rule (docs/model.md §3.6.5, "chunked form"). The
// (I + B)^-1 products are forward substitutions, row by row, which is what the reference's
// in-place inversion loop computes.
CAIRN_SIMD_CLONES void ChunkedHead(const GatedDeltaArgs& a, int h, float* s) {
  const int r = a.v_heads / a.k_heads;
  const int kh = h / r;
  const int dk = a.dk;
  const int dv = a.dv;
  const int64_t qk_ld = static_cast<int64_t>(a.k_heads) * dk;
  const int64_t v_ld = static_cast<int64_t>(a.v_heads) * dv;
  const int c = a.chunk;
  std::vector<float> cum(c), decay(static_cast<size_t>(c) * c), kk(static_cast<size_t>(c) * c),
      u(static_cast<size_t>(c) * dv), w(static_cast<size_t>(c) * dk),
      vnew(static_cast<size_t>(c) * dv), tmp(static_cast<size_t>(c) * dv),
      p(static_cast<size_t>(c) * c), kt(static_cast<size_t>(dk) * c),
      keys(static_cast<size_t>(dk) * c), f(c);
  for (int64_t c0 = 0; c0 < a.tokens; c0 += c) {
    const int len = static_cast<int>(std::min<int64_t>(c, a.tokens - c0));
    auto q_row = [&](int i) { return a.q + (c0 + i) * qk_ld + static_cast<int64_t>(kh) * dk; };
    auto k_row = [&](int i) { return a.k + (c0 + i) * qk_ld + static_cast<int64_t>(kh) * dk; };
    auto v_row = [&](int i) { return a.v + (c0 + i) * v_ld + static_cast<int64_t>(h) * dv; };
    auto beta = [&](int i) { return a.beta[(c0 + i) * a.v_heads + h]; };
    float acc = 0.0f;
    for (int i = 0; i < len; ++i) {
      acc += a.g[(c0 + i) * a.v_heads + h];
      cum[i] = acc;
    }
    // keys = K^T ([dk, c]), written row by row; columns from len on keep earlier values and
    // are never read back.
    for (int x = 0; x < dk; ++x) {
      float* row = keys.data() + static_cast<size_t>(x) * c;
      for (int j = 0; j < len; ++j) row[j] = k_row(j)[x];
    }
    // decay[i][j] = exp(G_i - G_j) and kk[i][j] = beta_i (k_i . k_j) decay[i][j] for j <= i,
    // with K K^T as a blocked product. The forward substitution below amplifies rounding: a
    // plain running sum over x in the products, or the softmax's polynomial exponential (two
    // ulp) for the decay, took a prefill split into passes to within a sixth of the tests'
    // state tolerance.
    for (int i = 0; i < len; ++i) {
      for (int j = 0; j <= i; ++j) decay[i * c + j] = std::exp(cum[i] - cum[j]);
    }
    DotProducts(k_row(0), qk_ld, len, keys.data(), c, dk, c, kk.data(), c);
    for (int i = 0; i < len; ++i) {
      float* row = kk.data() + static_cast<size_t>(i) * c;
      ScaleTo(beta(i), row, row, i + 1);
      Lanewise<false>(row, decay.data() + static_cast<size_t>(i) * c, row, i + 1);
    }
    // u = (I + B)^-1 (beta v);  w = (I + B)^-1 (beta exp(G) k): forward substitution, row i
    // minus kk[i][j] times row j for j < i in order. In blocks of kSubstitutionBlock rows: first
    // the rows before the block (MatAcc), then the block's own earlier rows.
    for (int i = 0; i < len; ++i) {
      for (int j = 0; j < i; ++j) kk[i * c + j] = -kk[i * c + j];
    }
    for (int i0 = 0; i0 < len; i0 += kSubstitutionBlock) {
      const int rows = std::min(kSubstitutionBlock, len - i0);
      for (int i = i0; i < i0 + rows; ++i) {
        float* ui = u.data() + static_cast<size_t>(i) * dv;
        float* wi = w.data() + static_cast<size_t>(i) * dk;
        const float* vi = v_row(i);
        const float* ki = k_row(i);
        const float bi = beta(i);
        ScaleTo(bi, vi, ui, dv);
        ScaleTo(bi * std::exp(cum[i]), ki, wi, dk);
      }
      const float* neg = kk.data() + static_cast<size_t>(i0) * c;
      MatAcc(neg, c, rows, u.data(), dv, i0, dv, u.data() + static_cast<size_t>(i0) * dv, dv,
             /*zero=*/false);
      MatAcc(neg, c, rows, w.data(), dk, i0, dk, w.data() + static_cast<size_t>(i0) * dk, dk,
             /*zero=*/false);
      for (int i = i0 + 1; i < i0 + rows; ++i) {
        for (int j = i0; j < i; ++j) {
          Axpy(kk[i * c + j], u.data() + static_cast<size_t>(j) * dv,
               u.data() + static_cast<size_t>(i) * dv, dv);
          Axpy(kk[i * c + j], w.data() + static_cast<size_t>(j) * dk,
               w.data() + static_cast<size_t>(i) * dk, dk);
        }
      }
    }
    // v_new = u - w S.
    MatAcc(w.data(), dk, len, s, dv, dk, dv, tmp.data(), dv, /*zero=*/true);
    for (int i = 0; i < len; ++i) {
      float* vi = vnew.data() + static_cast<size_t>(i) * dv;
      const float* ti = tmp.data() + static_cast<size_t>(i) * dv;
      const float* ui = u.data() + static_cast<size_t>(i) * dv;
      Lanewise<true>(ui, ti, vi, dv);
    }
    // o_i = exp(G_i) q_i S + sum_{j <= i} (q_i . k_j) exp(G_i - G_j) v_new_j, the second sum in
    // blocks of rows over the j every row of the block has, then each row's own last j.
    float* o0 = a.out + c0 * v_ld + static_cast<int64_t>(h) * dv;
    MatAcc(q_row(0), qk_ld, len, s, dv, dk, dv, o0, v_ld, /*zero=*/true);
    for (int i = 0; i < len; ++i) {
      float* oi = o0 + i * v_ld;
      const float e = std::exp(cum[i]);
      Scale(e, oi, dv);
    }
    // p[i][j] = (q_i . k_j) decay[i][j], j <= i, with Q K^T as a blocked product.
    DotProducts(q_row(0), qk_ld, len, keys.data(), c, dk, c, p.data(), c);
    for (int i = 0; i < len; ++i) {
      float* row = p.data() + static_cast<size_t>(i) * c;
      Lanewise<false>(row, decay.data() + static_cast<size_t>(i) * c, row, i + 1);
    }
    const int block = dv == 64 ? 4 : dv == 128 ? 2 : 1;
    for (int i0 = 0; i0 < len; i0 += block) {
      const int rows = std::min(block, len - i0);
      MatAcc(p.data() + static_cast<size_t>(i0) * c, c, rows, vnew.data(), dv, i0 + 1, dv,
             o0 + i0 * v_ld, v_ld, /*zero=*/false);
      for (int i = i0 + 1; i < i0 + rows; ++i) {
        for (int j = i0 + 1; j <= i; ++j) {
          Axpy(p[i * c + j], vnew.data() + static_cast<size_t>(j) * dv, o0 + i * v_ld, dv);
        }
      }
    }
    // S = exp(G_last) S + sum_i exp(G_last - G_i) k_i (x) v_new_i, as S += K'^T V_new with
    // K'[i][x] = exp(G_last - G_i) k_i[x].
    const float last = cum[len - 1];
    const float chunk_decay = std::exp(last);
    Scale(chunk_decay, s, static_cast<int64_t>(dk) * dv);
    for (int i = 0; i < len; ++i) f[i] = std::exp(last - cum[i]);
    for (int x = 0; x < dk; ++x) {
      const size_t row = static_cast<size_t>(x) * c;
      Lanewise<false>(keys.data() + row, f.data(), kt.data() + row, len);
    }
    MatAcc(kt.data(), c, dk, vnew.data(), dv, len, dv, s, dv, /*zero=*/false);
  }
}

// The processor time of this process (every thread), in seconds.
double ProcessCpuSeconds() {
  timespec ts;
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

class CpuKernelBackend::ScopedTimer {
 public:
  ScopedTimer(CpuKernelBackend* backend, double CpuKernelProfile::*field)
      : backend_(backend->profiling_ ? backend : nullptr), field_(field) {
    if (backend_ == nullptr) return;
    start_ = std::chrono::steady_clock::now();
    if (backend_->profile_cpu_) start_cpu_ = ProcessCpuSeconds();
  }
  ~ScopedTimer() {
    if (backend_ == nullptr) return;
    backend_->profile_.*field_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (backend_->profile_cpu_) backend_->cpu_profile_.*field_ += ProcessCpuSeconds() - start_cpu_;
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  CpuKernelBackend* backend_;  // Null when not profiling.
  double CpuKernelProfile::*field_;
  std::chrono::steady_clock::time_point start_;
  double start_cpu_ = 0;
};

absl::StatusOr<std::unique_ptr<CpuKernelBackend>> CpuKernelBackend::Create(
    const CpuKernelBackendOptions& options) {
  if (options.threads < 0) {
    return absl::InvalidArgumentError("cpu backend threads must be >= 0");
  }
  cpu::Isa isa = cpu::BestIsa();
  if (options.isa != "auto") {
    bool known = false;
    for (cpu::Isa i : {cpu::Isa::kAvx512, cpu::Isa::kAvx2, cpu::Isa::kPortable}) {
      if (options.isa == cpu::IsaName(i)) {
        known = true;
        isa = i;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("unknown cpu backend isa '", options.isa,
                                                     "' (auto, avx512, avx2, portable)"));
    }
    if (!cpu::IsaSupported(isa)) {
      return absl::FailedPreconditionError(
          absl::StrCat("this processor lacks the cpu backend isa ", options.isa));
    }
  }
  int threads = options.threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  // The backend spreads its GEMMs over its own threads; OpenBLAS's workers would spin between
  // calls (and are invisible to ThreadSanitizer).
  openblas_set_num_threads(1);
  return std::unique_ptr<CpuKernelBackend>(
      new CpuKernelBackend(threads, isa, options.typed_weights, options.profile));
}

CpuKernelBackend::CpuKernelBackend(int threads, cpu::Isa isa, bool typed_weights, bool profile)
    : threads_(threads),
      isa_(isa),
      typed_weights_(typed_weights),
      profiling_(profile),
      widened_(static_cast<size_t>(threads)),
      scores_(static_cast<size_t>(threads)) {
  if (threads_ > 1) pool_ = std::make_unique<ThreadPool>(threads_ - 1);
}

CpuKernelBackend::~CpuKernelBackend() {
  if (pool_ != nullptr) pool_->Shutdown();
}

void CpuKernelBackend::ParallelFor(int64_t n, absl::FunctionRef<void(int64_t)> fn) {
  ParallelForWorkers(n, [&](int64_t i, int) { fn(i); });
}

void CpuKernelBackend::BlasFor(int64_t n, absl::FunctionRef<void(int64_t, int)> fn) {
#ifdef CAIRN_BLAS_CALLER_ONLY
  for (int64_t i = 0; i < n; ++i) fn(i, 0);
#else
  ParallelForWorkers(n, fn);
#endif
}

void CpuKernelBackend::ParallelForWorkers(int64_t n, absl::FunctionRef<void(int64_t, int)> fn) {
  if (n <= 0) return;
  if (pool_ == nullptr || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  // The calling thread takes items too and waits only for helpers that joined before every
  // item was taken: on a loaded machine a helper may start long after the work is done (it
  // then finds nothing to do), and a small loop must not wait for it to be scheduled. The
  // state is shared with the helpers, which may outlive this call.
  struct Shared {
    std::atomic<int64_t> next{0};
    Mutex mu;
    CondVar cv;
    int joined ABSL_GUARDED_BY(mu) = 0;  // Helpers between joining and leaving.
  };
  auto shared = std::make_shared<Shared>();
  const absl::FunctionRef<void(int64_t, int)>* body = &fn;
  const int helpers = static_cast<int>(std::min<int64_t>(threads_ - 1, n - 1));
  for (int h = 0; h < helpers; ++h) {
    const bool scheduled = pool_->Schedule([shared, body, n, worker = h + 1] {
      {
        MutexLock lock(&shared->mu);
        ++shared->joined;
      }
      // Joined before taking an item: an item below n means the caller is still waiting for
      // this helper, so `body` is alive.
      for (int64_t i = shared->next.fetch_add(1); i < n; i = shared->next.fetch_add(1)) {
        (*body)(i, worker);
      }
      MutexLock lock(&shared->mu);
      if (--shared->joined == 0) shared->cv.SignalAll();
    });
    CAIRN_CHECK(scheduled);  // The pool shuts down only in our destructor.
  }
  for (int64_t i = shared->next.fetch_add(1); i < n; i = shared->next.fetch_add(1)) fn(i, 0);
  // Every item is taken; a helper that joins from now on takes none.
  MutexLock lock(&shared->mu);
  while (shared->joined > 0) shared->cv.Wait(&shared->mu);
}

void CpuKernelBackend::ParallelRows(int64_t rows, int64_t row_elements,
                                    absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (rows <= 0) return;
  const int64_t per_item =
      std::max<int64_t>(1, kElementwiseItemElements / std::max<int64_t>(1, row_elements));
  const int64_t items = (rows + per_item - 1) / per_item;
  ParallelFor(items, [&](int64_t item) {
    const int64_t r0 = item * per_item;
    fn(r0, std::min(rows, r0 + per_item));
  });
}

void CpuKernelBackend::MatMulTransposed(const float* x, int64_t m, int64_t k, int64_t ldx,
                                        const float* w, int64_t n, float* y, int64_t ldy,
                                        bool accumulate) {
  const ScopedTimer timer(this, &CpuKernelProfile::matmul_s);
  TiledGemm(x, m, ldx, WeightMatrix::Of(w, WeightType::kF32, n, k), y, ldy, accumulate);
}

void CpuKernelBackend::MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                                  int64_t n, float* y, int64_t ldy, bool accumulate) {
  MatMulRowsTyped(x, m, ldx, WeightMatrix::Of(w, WeightType::kF32, n, k), y, ldy, accumulate);
}

void CpuKernelBackend::MatMulRowsTyped(const float* x, int64_t m, int64_t ldx,
                                       const WeightMatrix& w, float* y, int64_t ldy,
                                       bool accumulate) {
  const ScopedTimer timer(this, &CpuKernelProfile::matmul_rows_s);
  const int64_t n = w.rows();
  if (m == 0 || n == 0) return;
  const int64_t blocks = (n + kRowMatMulBlock - 1) / kRowMatMulBlock;
  ParallelFor(blocks, [&](int64_t b) {
    const int64_t n0 = b * kRowMatMulBlock;
    const int64_t count = std::min(n, n0 + kRowMatMulBlock) - n0;
    const void* rows[kRowMatMulBlock];
    for (int64_t j = 0; j < count; ++j) rows[j] = WeightRow(w, n0 + j);
    cpu::RowProducts(isa_, w.type, x, m, ldx, rows, count, w.cols, y + n0, ldy, accumulate);
  });
}

void CpuKernelBackend::MatMulTransposedTyped(const float* x, int64_t m, int64_t ldx,
                                             const WeightMatrix& w, float* y, int64_t ldy,
                                             bool accumulate) {
  if (m <= kGemmMinRows && w.type != WeightType::kF32) {
    MatMulRowsTyped(x, m, ldx, w, y, ldy, accumulate);
    return;
  }
  const ScopedTimer timer(this, &CpuKernelProfile::matmul_s);
  TiledGemm(x, m, ldx, w, y, ldy, accumulate);
}

void CpuKernelBackend::TiledGemm(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                                 float* y, int64_t ldy, bool accumulate) {
  const int64_t k = w.cols;
  const int64_t n = w.rows();
  if (m == 0 || n == 0) return;
  // Tiles of whole 16-row blocks, about kGemmTilesPerThread per thread; a tile of narrow
  // weights is widened into a buffer that stays in the cache.
  int64_t tile = (n + threads_ * kGemmTilesPerThread - 1) / (threads_ * kGemmTilesPerThread);
  tile = std::max(kGemmMinTileRows, (tile + 15) / 16 * 16);
  if (w.type != WeightType::kF32) {
    tile = std::min(tile, std::max<int64_t>(16, kWidenTileElements / k / 16 * 16));
  }
  struct Tile {
    const char* rows;  // The tile's first weight row.
    int64_t count;     // Weight rows in the tile.
    int64_t column;    // Its first output column.
  };
  std::vector<Tile> tiles;
  const int64_t row_bytes = k * WeightTypeSize(w.type);
  int64_t column = 0;
  for (int p = 0; p < w.num_parts; ++p) {
    const WeightMatrix::Part& part = w.parts[p];
    for (int64_t r0 = 0; r0 < part.rows; r0 += tile) {
      tiles.push_back({static_cast<const char*>(part.data) + r0 * row_bytes,
                       std::min(tile, part.rows - r0), column + r0});
    }
    column += part.rows;
  }
  BlasFor(static_cast<int64_t>(tiles.size()), [&](int64_t i, int worker) {
    const Tile& t = tiles[static_cast<size_t>(i)];
    const float* weights = reinterpret_cast<const float*>(t.rows);
    if (w.type != WeightType::kF32) {
      std::vector<float>& wide = widened_[static_cast<size_t>(worker)];
      wide.resize(static_cast<size_t>(t.count * k));
      cpu::Widen(isa_, w.type, t.rows, t.count * k, wide.data());
      weights = wide.data();
    }
    Sgemm(x, m, k, ldx, weights, t.count, y + t.column, ldy, accumulate);
  });
}

void CpuKernelBackend::EmbeddingGatherTyped(const WeightMatrix& table, const int32_t* ids,
                                            int64_t n, float* out) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(n, table.cols, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      cpu::Widen(isa_, table.type, WeightRow(table, ids[i]), table.cols, out + i * table.cols);
    }
  });
}

void CpuKernelBackend::EmbeddingGather(const float* table, int64_t dim, const int32_t* ids,
                                       int64_t n, float* out) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  for (int64_t i = 0; i < n; ++i) {
    const float* src = table + static_cast<int64_t>(ids[i]) * dim;
    std::copy(src, src + dim, out + i * dim);
  }
}

void CpuKernelBackend::SplitHeadPairs(const float* in, int64_t rows, int heads, int head_dim,
                                      float* a, float* b) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  const int64_t width = static_cast<int64_t>(heads) * head_dim;
  ParallelRows(rows, 2 * width, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int h = 0; h < heads; ++h) {
        const float* src = in + r * 2 * width + static_cast<int64_t>(h) * 2 * head_dim;
        const int64_t dst = r * width + static_cast<int64_t>(h) * head_dim;
        std::copy(src, src + head_dim, a + dst);
        std::copy(src + head_dim, src + 2 * head_dim, b + dst);
      }
    }
  });
}

void CpuKernelBackend::SigmoidMul(float* x, const float* gate, int64_t n) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(n, 1, [&](int64_t i0, int64_t i1) {
    SigmoidProducts(x + i0, gate + i0, nullptr, i1 - i0, x + i0);
  });
}

void CpuKernelBackend::GdnGates(const float* in, int64_t ld, int64_t tokens, int heads,
                                int64_t b_offset, int64_t a_offset, const float* dt_bias,
                                const float* neg_a, float* g, float* beta) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(tokens, 2 * heads, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* row = in + t * ld;
      for (int j = 0; j < heads; ++j) {
        beta[t * heads + j] = Sigmoid(row[b_offset + j]);
        g[t * heads + j] = neg_a[j] * Softplus(row[a_offset + j] + dt_bias[j]);
      }
    }
  });
}

void CpuKernelBackend::MoeRoute(const float* logits, int64_t tokens, int experts, int top_k,
                                bool renormalise, int32_t* ids, float* weights) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  std::vector<float> p(experts);
  std::vector<int> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* l = logits + t * experts;
    const float mx = *std::max_element(l, l + experts);
    float sum = 0.0f;
    for (int j = 0; j < experts; ++j) sum += p[j] = std::exp(l[j] - mx);
    for (int j = 0; j < experts; ++j) p[j] /= sum;
    for (int j = 0; j < experts; ++j) order[j] = j;
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float top_sum = 0.0f;
    for (int j = 0; j < top_k; ++j) top_sum += p[order[j]];
    for (int j = 0; j < top_k; ++j) {
      ids[t * top_k + j] = order[j];
      weights[t * top_k + j] = renormalise ? p[order[j]] / top_sum : p[order[j]];
    }
  }
}

void CpuKernelBackend::RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                               bool zero_centred, float* y) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(rows, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      float ss = 0.0f;
      for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
      for (int64_t i = 0; i < dim; ++i) {
        yr[i] = xr[i] * inv * (zero_centred ? 1.0f + w[i] : w[i]);
      }
    }
  });
}

void CpuKernelBackend::GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim,
                                    const float* w, float eps, float* y) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(rows, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      const float* zr = z + r * dim;
      float* yr = y + r * dim;
      float ss = 0.0f;
      for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * w[i];
      SigmoidProducts(zr, zr, yr, dim, yr);  // y * silu(z)
    }
  });
}

void CpuKernelBackend::L2Normalize(float* x, int64_t rows, int64_t dim, float eps, float scale) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(rows, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x + r * dim;
      float ss = 0.0f;
      for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(ss + eps);
      for (int64_t i = 0; i < dim; ++i) xr[i] = xr[i] * inv * scale;
    }
  });
}

void CpuKernelBackend::Rope(float* x, int64_t tokens, int64_t ld, int heads, int head_dim,
                            int rotary_dim, const float* inv_freq, int64_t first_position) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  const int half = rotary_dim / 2;
  ParallelRows(tokens, static_cast<int64_t>(heads) * rotary_dim, [&](int64_t t0, int64_t t1) {
    std::vector<float> cos_v(half), sin_v(half);
    for (int64_t t = t0; t < t1; ++t) {
      const float pos = static_cast<float>(first_position + t);
      for (int i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[i];
        cos_v[i] = std::cos(angle);
        sin_v[i] = std::sin(angle);
      }
      for (int h = 0; h < heads; ++h) {
        float* p = x + t * ld + static_cast<int64_t>(h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const float x1 = p[i];
          const float x2 = p[i + half];
          p[i] = x1 * cos_v[i] - x2 * sin_v[i];
          p[i + half] = x2 * cos_v[i] + x1 * sin_v[i];
        }
      }
    }
  });
}

void CpuKernelBackend::SiluMul(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up,
                               int64_t rows, int64_t dim, float* out) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  ParallelRows(rows, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* g = gate + r * ld_gate;
      SigmoidProducts(g, g, up + r * ld_up, dim, out + r * dim);
    }
  });
}

void CpuKernelBackend::CausalConvSilu(const float* in, int64_t ld_in, int64_t tokens,
                                      int64_t channels, const float* w, int kernel, float* state,
                                      float* out) {
  const ScopedTimer timer(this, &CpuKernelProfile::other_s);
  const int hist = kernel - 1;
  // Input row `t` of the window [state rows ; input rows], t in [-hist, tokens).
  auto row = [&](int64_t t) { return t < 0 ? state + (t + hist) * channels : in + t * ld_in; };
  // The taps tap-major (taps[m][ch]), so that sixteen channels take one vector per tap.
  std::vector<float> taps(static_cast<size_t>(kernel) * channels);
  for (int64_t ch = 0; ch < channels; ++ch) {
    for (int m = 0; m < kernel; ++m) taps[m * channels + ch] = w[ch * kernel + m];
  }
  // Split by tokens: an output row reads only input and state rows, which stay as they are
  // until the loop is done.
  ParallelRows(tokens, channels * kernel, [&](int64_t t0, int64_t t1) {
    std::vector<const float*> window(static_cast<size_t>(kernel));
    for (int64_t t = t0; t < t1; ++t) {
      for (int m = 0; m < kernel; ++m) window[m] = row(t - hist + m);
      ConvSiluRow(taps.data(), window.data(), kernel, channels, out + t * channels);
    }
  });
  // New state: the last `hist` rows of the window.
  std::vector<float> next(static_cast<size_t>(hist) * channels);
  for (int i = 0; i < hist; ++i) {
    const float* src = row(tokens - hist + i);
    std::copy(src, src + channels, next.begin() + static_cast<int64_t>(i) * channels);
  }
  std::copy(next.begin(), next.end(), state);
}

// Causal attention computed query row by query row: scores over keys 0..p in key order, a
// softmax with sums in key order, the output accumulated in key order. Nothing depends on the
// pass the row belongs to.
void CpuKernelBackend::RowInvariantAttention(const AttentionArgs& a) {
  const int group = a.q_heads / a.kv_heads;
  const int64_t q_ld = static_cast<int64_t>(a.q_heads) * a.head_dim;
  const int64_t kv_ld = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  ParallelFor(a.q_heads * a.tokens, [&](int64_t item) {
    const int64_t h = item / a.tokens;
    const int64_t r = item % a.tokens;
    const int64_t kvh = h / group;
    const int64_t keys = a.past + r + 1;
    const float* q = a.q + r * q_ld + h * a.head_dim;
    std::vector<float> p(static_cast<size_t>(keys));
    float mx = -INFINITY;
    for (int64_t j = 0; j < keys; ++j) {
      p[j] = RowDot(q, a.k + j * kv_ld + kvh * a.head_dim, a.head_dim) * a.scale;
      mx = std::max(mx, p[j]);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < keys; ++j) {
      p[j] = std::exp(p[j] - mx);
      sum += p[j];
    }
    const float inv = 1.0f / sum;
    float* out = a.out + r * q_ld + h * a.head_dim;
    std::fill(out, out + a.head_dim, 0.0f);
    for (int64_t j = 0; j < keys; ++j) {
      Axpy(p[j] * inv, a.v + j * kv_ld + kvh * a.head_dim, out, a.head_dim);
    }
  });
}

void CpuKernelBackend::Attention(const AttentionArgs& a) {
  const ScopedTimer timer(this, &CpuKernelProfile::attention_s);
  if (a.row_invariant) {
    RowInvariantAttention(a);
    return;
  }
  // Per query head and block of query rows: scores S = Q K^T through sgemm, a causal softmax
  // per row, then O = P V through sgemm. Blocks bound the score buffer for long contexts. The
  // (head, block) items are spread over the threads, the last blocks (the most keys) first.
  const int group = a.q_heads / a.kv_heads;
  const int64_t q_ld = static_cast<int64_t>(a.q_heads) * a.head_dim;
  const int64_t kv_ld = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  const int64_t blocks = (a.tokens + kAttentionQueryBlock - 1) / kAttentionQueryBlock;
  BlasFor(blocks * a.q_heads, [&](int64_t item, int worker) {
    const int64_t h = item % a.q_heads;
    const int64_t t0 = (blocks - 1 - item / a.q_heads) * kAttentionQueryBlock;
    const int64_t kvh = h / group;
    const int64_t rows = std::min(kAttentionQueryBlock, a.tokens - t0);
    const int64_t keys = a.past + t0 + rows;  // Keys visible to the block's last row.
    std::vector<float>& scores = scores_[static_cast<size_t>(worker)];
    scores.resize(static_cast<size_t>(rows * keys));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows),
                static_cast<blasint>(keys), a.head_dim, a.scale, a.q + t0 * q_ld + h * a.head_dim,
                static_cast<blasint>(q_ld), a.k + kvh * a.head_dim, static_cast<blasint>(kv_ld),
                0.0f, scores.data(), static_cast<blasint>(keys));
    for (int64_t r = 0; r < rows; ++r) {
      SoftmaxRow(scores.data() + r * keys, a.past + t0 + r + 1, keys);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows), a.head_dim,
                static_cast<blasint>(keys), 1.0f, scores.data(), static_cast<blasint>(keys),
                a.v + kvh * a.head_dim, static_cast<blasint>(kv_ld), 0.0f,
                a.out + t0 * q_ld + h * a.head_dim, static_cast<blasint>(q_ld));
  });
}

void CpuKernelBackend::GatedDeltaRule(const GatedDeltaArgs& a) {
  const ScopedTimer timer(this, &CpuKernelProfile::delta_rule_s);
  const int64_t per_head = static_cast<int64_t>(a.dk) * a.dv;
  ParallelFor(a.v_heads, [&](int64_t h) {
    float* s = a.state + h * per_head;
    if (a.chunk > 0) {
      ChunkedHead(a, static_cast<int>(h), s);
    } else {
      std::vector<float> kv(a.dv);
      RecurrentHead(a, static_cast<int>(h), s, kv);
    }
  });
}

}  // namespace cairn::infer
