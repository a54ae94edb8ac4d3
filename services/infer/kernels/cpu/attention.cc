#include "services/infer/kernels/cpu/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "services/infer/kernels/cpu/simd.h"
#include "services/infer/kernels/cpu/x86_intrinsics.h"

namespace cairn::infer::cpu {
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

int64_t QueryBlocks(int64_t tokens) {
  return (tokens + kAttentionQueryBlock - 1) / kAttentionQueryBlock;
}

// Block `b` of the query rows of a pass: its first row, its rows, and the keys its last row sees.
struct QueryBlock {
  int64_t t0;
  int64_t rows;
  int64_t keys;
};
QueryBlock BlockAt(int64_t tokens, int64_t past, int64_t b) {
  const int64_t t0 = b * kAttentionQueryBlock;
  const int64_t rows = std::min(kAttentionQueryBlock, tokens - t0);
  return {t0, rows, past + t0 + rows};
}

// Keys per block of the transposed keys (TransposeKeys): one 16-lane vector.
constexpr int64_t kKeyBlock = 16;
// Keys per column tile of the score kernel (two vectors) and query rows per row tile.
constexpr int64_t kScoreTileKeys = 32;
constexpr int kScoreTileRows = 8;
// The fewest query rows of a call that uses the score kernel: transposing the keys costs about
// as much as one query row's scores, so a decode step's few rows keep sgemm.
constexpr int64_t kScoreKernelMinTokens = 32;

int64_t PaddedKeys(const AttentionArgs& a) {
  const int64_t keys = a.past + a.tokens;
  return (keys + kScoreTileKeys - 1) / kScoreTileKeys * kScoreTileKeys;
}

// s[r][j] = scale * q_r . k_j for RB query rows (stride q_ld) and the 32 keys of the key blocks
// kt0 and kt1 (each [hd][16]); columns past `cols` are not stored. Each sum runs over the head
// dimension in order, with fused multiply-adds.
template <int RB>
__attribute__((target("avx512f"))) inline void ScoreTile(const float* q, int64_t q_ld,
                                                         const float* kt0, const float* kt1, int hd,
                                                         float scale, float* s, int64_t ld_s,
                                                         __mmask16 m0, __mmask16 m1) {
  __m512 acc0[RB], acc1[RB];
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  for (int x = 0; x < hd; ++x) {
    const __m512 k0 = _mm512_loadu_ps(kt0 + x * kKeyBlock);
    const __m512 k1 = _mm512_loadu_ps(kt1 + x * kKeyBlock);
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r * q_ld + x]);
      acc0[r] = _mm512_fmadd_ps(qv, k0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(qv, k1, acc1[r]);
    }
  }
  const __m512 sv = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r) {
    _mm512_mask_storeu_ps(s + r * ld_s, m0, _mm512_mul_ps(acc0[r], sv));
    _mm512_mask_storeu_ps(s + r * ld_s + kKeyBlock, m1, _mm512_mul_ps(acc1[r], sv));
  }
}

// s[r][j] = scale * q_r . k_j for r < rows, j < keys (s has row stride `keys`), k given
// transposed (TransposeKeys). Key tiles outside, so that a tile's keys stay in the L1 cache
// while every query row passes.
__attribute__((target("avx512f"))) void ScoresAvx512(const float* q, int64_t q_ld, int64_t rows,
                                                     const float* kt, int hd, int64_t keys,
                                                     float scale, float* s) {
  for (int64_t j0 = 0; j0 < keys; j0 += kScoreTileKeys) {
    const float* kt0 = kt + j0 * hd;
    const float* kt1 = kt0 + kKeyBlock * hd;
    const int64_t cols = std::min(kScoreTileKeys, keys - j0);
    const auto mask = [](int64_t n) {
      return static_cast<__mmask16>(n >= kKeyBlock ? 0xffff : n <= 0 ? 0 : (1u << n) - 1);
    };
    const __mmask16 m0 = mask(cols);
    const __mmask16 m1 = mask(cols - kKeyBlock);
    int64_t r = 0;
    for (; r + kScoreTileRows <= rows; r += kScoreTileRows) {
      ScoreTile<kScoreTileRows>(q + r * q_ld, q_ld, kt0, kt1, hd, scale, s + r * keys + j0, keys,
                                m0, m1);
    }
    for (; r < rows; ++r) {
      ScoreTile<1>(q + r * q_ld, q_ld, kt0, kt1, hd, scale, s + r * keys + j0, keys, m0, m1);
    }
  }
}

}  // namespace

std::vector<AttentionProduct> BlockedAttentionProducts(int64_t tokens, int64_t past,
                                                       int64_t head_dim) {
  std::vector<AttentionProduct> products;
  for (int64_t b = 0; b < QueryBlocks(tokens); ++b) {
    const QueryBlock q = BlockAt(tokens, past, b);
    products.push_back({q.rows, q.keys, head_dim, /*transposed_b=*/true});
    products.push_back({q.rows, head_dim, q.keys, /*transposed_b=*/false});
  }
  return products;
}

bool UseScoreKernel(const AttentionArgs& a) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 && a.head_dim > 0 && a.tokens >= kScoreKernelMinTokens;
}

int64_t TransposedKeysFloats(const AttentionArgs& a) {
  return PaddedKeys(a) * a.head_dim * a.kv_heads;
}

void TransposeKeys(const AttentionArgs& a, int kv_head, float* kt) {
  const int64_t kv_ld = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  const int64_t keys = a.past + a.tokens;
  const int64_t padded = PaddedKeys(a);
  float* out = kt + static_cast<int64_t>(kv_head) * padded * a.head_dim;
  for (int64_t b = 0; b < padded; b += kKeyBlock) {
    float* block = out + b * a.head_dim;
    for (int64_t j = 0; j < kKeyBlock; ++j) {
      if (b + j >= keys) {
        for (int x = 0; x < a.head_dim; ++x) block[x * kKeyBlock + j] = 0.0f;
        continue;
      }
      const float* key = a.k + (b + j) * kv_ld + static_cast<int64_t>(kv_head) * a.head_dim;
      for (int x = 0; x < a.head_dim; ++x) block[x * kKeyBlock + j] = key[x];
    }
  }
}

int64_t BlockedAttentionItems(const AttentionArgs& a) { return QueryBlocks(a.tokens) * a.q_heads; }

void BlockedAttentionItem(const AttentionArgs& a, int64_t item, const float* kt,
                          std::vector<float>* scores) {
  const int group = a.q_heads / a.kv_heads;
  const int64_t q_ld = static_cast<int64_t>(a.q_heads) * a.head_dim;
  const int64_t kv_ld = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  const int64_t h = item % a.q_heads;
  // The last blocks (the most keys) first.
  const auto [t0, rows, keys] =
      BlockAt(a.tokens, a.past, QueryBlocks(a.tokens) - 1 - item / a.q_heads);
  const int64_t kvh = h / group;
  scores->resize(static_cast<size_t>(rows * keys));
  if (kt != nullptr) {
    ScoresAvx512(a.q + t0 * q_ld + h * a.head_dim, q_ld, rows,
                 kt + kvh * PaddedKeys(a) * a.head_dim, a.head_dim, keys, a.scale, scores->data());
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows),
                static_cast<blasint>(keys), a.head_dim, a.scale, a.q + t0 * q_ld + h * a.head_dim,
                static_cast<blasint>(q_ld), a.k + kvh * a.head_dim, static_cast<blasint>(kv_ld),
                0.0f, scores->data(), static_cast<blasint>(keys));
  }
  for (int64_t r = 0; r < rows; ++r) {
    SoftmaxRow(scores->data() + r * keys, a.past + t0 + r + 1, keys);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows), a.head_dim,
              static_cast<blasint>(keys), 1.0f, scores->data(), static_cast<blasint>(keys),
              a.v + kvh * a.head_dim, static_cast<blasint>(kv_ld), 0.0f,
              a.out + t0 * q_ld + h * a.head_dim, static_cast<blasint>(q_ld));
}

int64_t RowInvariantAttentionItems(const AttentionArgs& a) {
  return static_cast<int64_t>(a.q_heads) * a.tokens;
}

void RowInvariantAttentionItem(const AttentionArgs& a, int64_t item) {
  const int group = a.q_heads / a.kv_heads;
  const int64_t q_ld = static_cast<int64_t>(a.q_heads) * a.head_dim;
  const int64_t kv_ld = static_cast<int64_t>(a.kv_heads) * a.head_dim;
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
}

}  // namespace cairn::infer::cpu
