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
// Keys per column tile of the score kernel (two vectors) and query rows per row tile. (Tiles of
// six rows by 64 keys measured no faster.)
constexpr int64_t kScoreTileKeys = 32;
constexpr int kScoreTileRows = 8;
// The fewest query rows of a call that uses the score kernel: transposing the keys costs about
// as much as one query row's scores, so a decode step's few rows keep sgemm.
constexpr int64_t kScoreKernelMinTokens = 32;

int64_t PaddedKeys(const AttentionArgs& a) {
  const int64_t keys = a.past + a.tokens;
  return (keys + kScoreTileKeys - 1) / kScoreTileKeys * kScoreTileKeys;
}

// s[r][j] = scale * q_r . k_j for RB query rows (stride q_ld) and the 16 NV keys of the NV key
// blocks from `kt` (each [hd][16], one after another); lanes outside mask[c] are not stored.
// Each sum runs over the head dimension in order, with fused multiply-adds.
template <int RB, int NV>
__attribute__((target("avx512f"))) inline void ScoreTile(const float* q, int64_t q_ld,
                                                         const float* kt, int hd, float scale,
                                                         float* s, int64_t ld_s,
                                                         const __mmask16* mask) {
  __m512 acc[RB][NV];
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int x = 0; x < hd; ++x) {
    __m512 k[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) k[c] = _mm512_loadu_ps(kt + c * kKeyBlock * hd + x * kKeyBlock);
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r * q_ld + x]);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_fmadd_ps(qv, k[c], acc[r][c]);
    }
  }
  const __m512 sv = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) {
      _mm512_mask_storeu_ps(s + r * ld_s + c * kKeyBlock, mask[c], _mm512_mul_ps(acc[r][c], sv));
    }
  }
}

// s[r][j] = scale * q_r . k_j for r < rows, j < keys (s has row stride `ld_s`), k given
// transposed (TransposeKeys). Key tiles outside, so that a tile's keys stay in the L1 cache
// while every query row passes.
__attribute__((target("avx512f"))) void ScoresAvx512(const float* q, int64_t q_ld, int64_t rows,
                                                     const float* kt, int hd, int64_t keys,
                                                     float scale, float* s, int64_t ld_s) {
  constexpr int kVectors = kScoreTileKeys / kKeyBlock;
  for (int64_t j0 = 0; j0 < keys; j0 += kScoreTileKeys) {
    const float* tile = kt + j0 * hd;
    __mmask16 mask[kVectors];
    for (int c = 0; c < kVectors; ++c) {
      const int64_t n = keys - j0 - c * kKeyBlock;
      mask[c] = static_cast<__mmask16>(n >= kKeyBlock ? 0xffff : n <= 0 ? 0 : (1u << n) - 1);
    }
    int64_t r = 0;
    for (; r + kScoreTileRows <= rows; r += kScoreTileRows) {
      ScoreTile<kScoreTileRows, kVectors>(q + r * q_ld, q_ld, tile, hd, scale, s + r * ld_s + j0,
                                          ld_s, mask);
    }
    for (; r + 2 <= rows; r += 2) {
      ScoreTile<2, kVectors>(q + r * q_ld, q_ld, tile, hd, scale, s + r * ld_s + j0, ld_s, mask);
    }
    if (r < rows) {
      ScoreTile<1, kVectors>(q + r * q_ld, q_ld, tile, hd, scale, s + r * ld_s + j0, ld_s, mask);
    }
  }
}

// ---- The fused attention: scores, softmax and weighted values one block of keys at a time. ----

// Query rows per group and keys per key block of the fused attention: a group's scores for one
// key block (32 KiB) and its outputs stay in the core's caches between the three steps.
constexpr int64_t kFusedRows = 64;
constexpr int64_t kFusedKeys = 128;
// The widest head the fused attention takes. Bare, one thread, a last 8K pass: with heads of 64
// it ran at 60-65 GFLOP/s against 51-53 unfused, with heads of 128 and 256 at 56-62 against
// 61-71 (sgemm runs the weighted values of wide heads well, and the fused blocks outgrow L1).
constexpr int kFusedMaxHeadDim = 64;
// Output columns per pass of the value kernel (four vectors, or two for the last 32 of a head
// size of 32 mod 64), and query rows per tile: 24 accumulators, each V vector loaded once for
// six rows, each weight broadcast once for four vectors.
constexpr int kValueTileCols = 64;
constexpr int kValueTileRows = 6;

// o[r][0, 16 NV) = alpha[r] * o[r][0, 16 NV) + sum over j < keys of p[r][j] * v[j][0, 16 NV), for
// RB rows; the sum runs over j in order, with fused multiply-adds.
template <int RB, int NV>
__attribute__((target("avx512f"))) inline void ValueTile(const float* p, int64_t ld_p, int64_t keys,
                                                         const float* v, int64_t ld_v,
                                                         const float* alpha, float* o,
                                                         int64_t ld_o) {
  __m512 acc[RB][NV];
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) {
      acc[r][c] = _mm512_mul_ps(_mm512_loadu_ps(o + r * ld_o + 16 * c), a);
    }
  }
  for (int64_t j = 0; j < keys; ++j) {
    __m512 vv[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) vv[c] = _mm512_loadu_ps(v + j * ld_v + 16 * c);
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      const __m512 pv = _mm512_set1_ps(p[r * ld_p + j]);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_fmadd_ps(pv, vv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(o + r * ld_o + 16 * c, acc[r][c]);
  }
}

// ValueTile over every column of a head of hd columns (a multiple of 32).
template <int RB>
__attribute__((target("avx512f"))) void ValueRows(const float* p, int64_t ld_p, int64_t keys,
                                                  const float* v, int64_t ld_v, const float* alpha,
                                                  float* o, int hd) {
  int c = 0;
  for (; c + kValueTileCols <= hd; c += kValueTileCols) {
    ValueTile<RB, 4>(p, ld_p, keys, v + c, ld_v, alpha, o + c, hd);
  }
  if (c < hd) ValueTile<RB, 2>(p, ld_p, keys, v + c, ld_v, alpha, o + c, hd);
}

// The running softmax of one row over one key block: p[0, n) = exp(p[j] - m') where
// m' = max(*m, max p[0, n)), p[n, keys) = 0, *m = m'; returns the sum of p[0, n) (sixteen lanes
// then their fixed reduction) and writes exp(m - m') to *alpha_arg (the factor the row's
// earlier terms take). With n = 0 the row is unchanged: *alpha_arg = 0, so that exp gives 1.
__attribute__((target("avx512f"))) float BlockSoftmaxRow(float* p, int64_t n, int64_t keys,
                                                         float* m, float* alpha_arg) {
  *alpha_arg = 0.0f;
  if (n <= 0) {
    std::fill(p, p + keys, 0.0f);
    return 0.0f;
  }
  const __m512 lowest = _mm512_set1_ps(-INFINITY);
  __m512 mv = lowest;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(p + j));
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
  if (j < n) mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(lowest, tail, p + j));
  const float m_new = std::max(*m, _mm512_reduce_max_ps(mv));
  *alpha_arg = *m - m_new;  // -inf for the first block: exp gives (almost) 0, times zeros.
  *m = m_new;
  const __m512 mx = _mm512_set1_ps(m_new);
  __m512 sv = _mm512_setzero_ps();
  alignas(64) float e[16];
  for (j = 0; j < n; j += 16) {
    const __mmask16 lanes = j + 16 <= n ? static_cast<__mmask16>(0xffff) : tail;
    // Whole-vector stores and loads around the exponential (a masked load of what was just
    // stored would wait for the store to complete).
    _mm512_store_ps(e, _mm512_sub_ps(_mm512_loadu_ps(p + j), mx));
    ExpNonPositive16(e);
    const __m512 ev = _mm512_maskz_mov_ps(lanes, _mm512_load_ps(e));
    sv = _mm512_add_ps(sv, ev);
    // Lanes past n are zeros (masked weights); lanes past `keys` are outside the row.
    const __mmask16 in_row = j + 16 <= keys ? static_cast<__mmask16>(0xffff)
                                            : static_cast<__mmask16>((1u << (keys - j)) - 1);
    _mm512_mask_storeu_ps(p + j, in_row, ev);
  }
  if (j < keys) std::fill(p + j, p + keys, 0.0f);
  return _mm512_reduce_add_ps(sv);
}

// Rows [t0, t0 + rows) of query head h against the keys each sees, fused: for each group of
// kFusedRows rows and each block of kFusedKeys keys up to the group's last row's, the scores
// (ScoresAvx512), a running softmax per row (its maximum so far; earlier terms rescaled when it
// grows) and the weighted values accumulated into the group's outputs, which are divided by the
// softmax's sum at the end. Key blocks after a group's last row's keys are not computed, nor
// the value terms of keys after each value tile's last row's. `work` holds
// FusedAttentionFloats(head_dim) floats.
__attribute__((target("avx512f"))) void FusedAttention(const AttentionArgs& a, int64_t h,
                                                       int64_t t0, int64_t rows, const float* kt,
                                                       float* work) {
  const int hd = a.head_dim;
  const int64_t q_ld = static_cast<int64_t>(a.q_heads) * hd;
  const int64_t kv_ld = static_cast<int64_t>(a.kv_heads) * hd;
  const int64_t kvh = h / (a.q_heads / a.kv_heads);
  const float* v_head = a.v + kvh * hd;
  float* s = work;                         // [kFusedRows][kFusedKeys]
  float* o = s + kFusedRows * kFusedKeys;  // [kFusedRows][hd]
  float* m = o + kFusedRows * hd;          // [kFusedRows]
  float* l = m + kFusedRows;               // [kFusedRows]
  float* alpha = l + kFusedRows;           // [kFusedRows]
  for (int64_t g0 = 0; g0 < rows; g0 += kFusedRows) {
    const int64_t gr = std::min(kFusedRows, rows - g0);
    // Row r of the group sees keys [0, first + r + 1).
    const int64_t first = a.past + t0 + g0;
    const int64_t last = first + gr;  // Keys the group's last row sees.
    std::fill(o, o + gr * hd, 0.0f);
    std::fill(m, m + kFusedRows, -INFINITY);
    std::fill(l, l + kFusedRows, 0.0f);
    for (int64_t j0 = 0; j0 < last; j0 += kFusedKeys) {
      const int64_t kb = std::min(kFusedKeys, last - j0);
      ScoresAvx512(a.q + (t0 + g0) * q_ld + h * hd, q_ld, gr, kt + j0 * hd, hd, kb, a.scale, s,
                   kFusedKeys);
      float sums[kFusedRows];
      for (int64_t r = 0; r < gr; ++r) {
        const int64_t n = std::clamp<int64_t>(first + r + 1 - j0, 0, kb);
        sums[r] = BlockSoftmaxRow(s + r * kFusedKeys, n, kb, m + r, alpha + r);
      }
      for (int64_t r = gr; r < kFusedRows; ++r) alpha[r] = 0.0f;
      for (int64_t r = 0; r < kFusedRows; r += 16) ExpNonPositive16(alpha + r);
      for (int64_t r = 0; r < gr; ++r) l[r] = l[r] * alpha[r] + sums[r];
      const float* v = v_head + j0 * kv_ld;
      // Tiles of six rows, then the rest; each tile's last row sees the most keys.
      const auto tile_keys = [&](int64_t r, int64_t rb) {
        return std::clamp<int64_t>(first + r + rb - j0, 0, kb);
      };
      int64_t r = 0;
      for (; r + kValueTileRows <= gr; r += kValueTileRows) {
        ValueRows<kValueTileRows>(s + r * kFusedKeys, kFusedKeys, tile_keys(r, kValueTileRows), v,
                                  kv_ld, alpha + r, o + r * hd, hd);
      }
      for (; r + 2 <= gr; r += 2) {
        ValueRows<2>(s + r * kFusedKeys, kFusedKeys, tile_keys(r, 2), v, kv_ld, alpha + r,
                     o + r * hd, hd);
      }
      if (r < gr) {
        ValueRows<1>(s + r * kFusedKeys, kFusedKeys, tile_keys(r, 1), v, kv_ld, alpha + r,
                     o + r * hd, hd);
      }
    }
    for (int64_t r = 0; r < gr; ++r) {
      const __m512 inv = _mm512_set1_ps(1.0f / l[r]);
      float* out = a.out + (t0 + g0 + r) * q_ld + h * hd;
      for (int c = 0; c < hd; c += 16) {
        _mm512_storeu_ps(out + c, _mm512_mul_ps(_mm512_loadu_ps(o + r * hd + c), inv));
      }
    }
  }
}

int64_t FusedAttentionFloats(int head_dim) {
  return kFusedRows * kFusedKeys + kFusedRows * head_dim + 3 * kFusedRows;
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
  if (kt != nullptr && a.head_dim % 32 == 0 && a.head_dim <= kFusedMaxHeadDim) {
    scores->resize(static_cast<size_t>(FusedAttentionFloats(a.head_dim)));
    FusedAttention(a, h, t0, rows, kt + kvh * PaddedKeys(a) * a.head_dim, scores->data());
    return;
  }
  scores->resize(static_cast<size_t>(rows * keys));
  if (kt != nullptr) {
    ScoresAvx512(a.q + t0 * q_ld + h * a.head_dim, q_ld, rows,
                 kt + kvh * PaddedKeys(a) * a.head_dim, a.head_dim, keys, a.scale, scores->data(),
                 keys);
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

namespace {

// Key rows per call of the row kernel in the short path's scores.
constexpr int64_t kShortKeyBlock = 64;
// Query heads per pass over the value rows in the short path: four heads by 64 columns are
// sixteen vector accumulators.
constexpr int kShortHeadBlock = 4;

// out[g][d0, d0 + 64) = sum over keys j in order of p[g][j] * v_j[d0, d0 + 64) for G heads g,
// from zero: the G * 4 accumulators stay in registers while the value rows pass.
template <int G>
inline __attribute__((always_inline)) void ShortValues(const float* p, int64_t ldp, const float* v,
                                                       int64_t ldv, int64_t keys, float* out,
                                                       int64_t ldo) {
  F32x16 acc[G][4];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) acc[g][q] = F32x16{};
  }
  for (int64_t j = 0; j < keys; ++j) {
    F32x16 vv[4];
    std::memcpy(vv, v + j * ldv, sizeof(vv));
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const float w = p[g * ldp + j];
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) acc[g][q] += w * vv[q];
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) std::memcpy(out + g * ldo, acc[g], sizeof(acc[g]));
}

CAIRN_SIMD_CLONES void ShortValuesBlock(int heads, const float* p, int64_t ldp, const float* v,
                                        int64_t ldv, int64_t keys, float* out, int64_t ldo) {
  switch (heads) {
    case 1:
      ShortValues<1>(p, ldp, v, ldv, keys, out, ldo);
      return;
    case 2:
      ShortValues<2>(p, ldp, v, ldv, keys, out, ldo);
      return;
    case 3:
      ShortValues<3>(p, ldp, v, ldv, keys, out, ldo);
      return;
    default:
      ShortValues<4>(p, ldp, v, ldv, keys, out, ldo);
      return;
  }
}

// p[0, n) *= scale, sixteen lanes at a time.
CAIRN_SIMD_CLONES void ScaleRow(float* p, int64_t n, float scale) { Scale(scale, p, n); }

}  // namespace

bool UseShortAttention(const AttentionArgs& a) {
  return !a.row_invariant && a.tokens < kScoreKernelMinTokens && a.head_dim % 64 == 0 &&
         a.kv_heads > 0 && a.q_heads % a.kv_heads == 0;
}

int64_t ShortAttentionItems(const AttentionArgs& a) {
  return static_cast<int64_t>(a.kv_heads) * a.tokens;
}

void ShortAttentionItem(const AttentionArgs& a, Isa isa, int64_t item, std::vector<float>* scores) {
  const int group = a.q_heads / a.kv_heads;
  const int64_t hd = a.head_dim;
  const int64_t q_ld = static_cast<int64_t>(a.q_heads) * hd;
  const int64_t kv_ld = static_cast<int64_t>(a.kv_heads) * hd;
  const int64_t kvh = item / a.tokens;
  const int64_t r = item % a.tokens;
  const int64_t keys = a.past + r + 1;
  // The group's query heads are consecutive: rows of hd floats.
  const float* q = a.q + r * q_ld + kvh * group * hd;
  float* out = a.out + r * q_ld + kvh * group * hd;
  scores->resize(static_cast<size_t>(group * keys));
  float* p = scores->data();
  const void* rows[kShortKeyBlock];
  for (int64_t j0 = 0; j0 < keys; j0 += kShortKeyBlock) {
    const int64_t count = std::min(kShortKeyBlock, keys - j0);
    for (int64_t j = 0; j < count; ++j) rows[j] = a.k + (j0 + j) * kv_ld + kvh * hd;
    RowProducts(isa, WeightType::kF32, q, group, hd, rows, count, hd, p + j0, keys,
                /*accumulate=*/false);
  }
  for (int g = 0; g < group; ++g) {
    ScaleRow(p + g * keys, keys, a.scale);
    SoftmaxRow(p + g * keys, keys, keys);
  }
  const float* v = a.v + kvh * hd;
  for (int g0 = 0; g0 < group; g0 += kShortHeadBlock) {
    const int heads = std::min(kShortHeadBlock, group - g0);
    for (int64_t d0 = 0; d0 < hd; d0 += 64) {
      ShortValuesBlock(heads, p + g0 * keys, keys, v + d0, kv_ld, keys, out + g0 * hd + d0, hd);
    }
  }
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
