#include "services/infer/kernels/cpu/delta_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "services/infer/kernels/cpu/simd.h"

namespace cairn::infer::cpu {
namespace {

// acc[r][v] += a[r][x] * b[x][16 v, 16 v + 16) for RB rows r: one step of MatAccBlock and
// DotBlock.
template <int V, int RB>
inline __attribute__((always_inline)) void DotStep(const float* a, int64_t lda, const float* b,
                                                   int64_t ldb, int x, F32x16 (&acc)[RB][V]) {
  F32x16 bv[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) std::memcpy(&bv[v], b + x * ldb + 16 * v, sizeof(F32x16));
#pragma GCC unroll 8
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
#pragma GCC unroll 8
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
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) std::memcpy(o + r * ldo + 16 * v, &acc[r][v], sizeof(F32x16));
  }
}

// Rows of a MatAcc block: with 64 columns (four vectors) each, 24 accumulators and the four
// vectors of b's row stay in registers, and each b row loaded serves six rows of a.
constexpr int kMatAccRows = 6;

// o[r][:cols] (+)= sum over x < inner, in order, of a[r][x] * b[x][:cols] for r < rows: with
// `zero` the sums start from zero, else from o (Axpy after Axpy). Where cols is a multiple of
// 64, blocked by 64 columns (b's slice of them, inner x 256 bytes, stays in L1 while the row
// blocks pass) and kMatAccRows rows; the same arithmetic otherwise.
inline __attribute__((always_inline)) void MatAcc(const float* a, int64_t lda, int rows,
                                                  const float* b, int64_t ldb, int inner, int cols,
                                                  float* o, int64_t ldo, bool zero) {
  if (cols % 64 == 0) {
    for (int j = 0; j < cols; j += 64) {
      int r = 0;
      for (; r + kMatAccRows <= rows; r += kMatAccRows) {
        MatAccBlock<4, kMatAccRows>(a + r * lda, lda, b + j, ldb, inner, o + r * ldo + j, ldo,
                                    zero);
      }
      for (; r < rows; ++r) {
        MatAccBlock<4, 1>(a + r * lda, lda, b + j, ldb, inner, o + r * ldo + j, ldo, zero);
      }
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    float* orow = o + r * ldo;
    if (zero) std::fill(orow, orow + cols, 0.0f);
    for (int x = 0; x < inner; ++x) Axpy(a[r * lda + x], b + x * ldb, orow, cols);
  }
}

// o[r][j] = sum over x < inner of a[r][x] * b[x][j] for RB rows r and V * 16 columns j, each sum
// in the order of the scalar loop in LowerDotProducts: four partial sums by x mod 4 (the remainder
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

// o[r][j] = (row r of a) . (column j of b) for r < rows and j <= r (b is [inner, >= rows], row
// stride ldb; the chunk's products are causal, so nothing reads o[r][j] for j > r, which is
// written in part or not at all), with four partial sums by x mod 4 (the remainder into the
// first) added as (s0 + s1) + (s2 + s3): the order of the chunked delta rule's scalar dot
// products before they were blocked. Blocked (DotBlock, 32 columns) where b's row stride is a
// multiple of 32.
inline __attribute__((always_inline)) void LowerDotProducts(const float* a, int64_t lda, int rows,
                                                            const float* b, int64_t ldb, int inner,
                                                            float* o, int64_t ldo) {
  if (ldb % 32 == 0) {
    int r = 0;
    for (; r + 2 <= rows; r += 2) {
      for (int j = 0; j <= r + 1; j += 32) {
        DotBlock<2, 2>(a + r * lda, lda, b + j, ldb, inner, o + r * ldo + j, ldo);
      }
    }
    if (r < rows) {
      for (int j = 0; j <= r; j += 32) {
        DotBlock<2, 1>(a + r * lda, lda, b + j, ldb, inner, o + r * ldo + j, ldo);
      }
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j <= r; ++j) {
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

// One token of the recurrent delta rule for one head with dv = 16 V: the arithmetic of
// RecurrentHead's loops, with kv and the output held in registers. The decayed state is not
// stored by the first pass: the second computes the same product again (the same bits) and
// stores it with the update, so the state is written once per token.
template <int V>
inline __attribute__((always_inline)) void RecurrentTokenBlocked(const float* q, const float* k,
                                                                 const float* v, float decay,
                                                                 float beta, int dk, float* s,
                                                                 float* out) {
  F32x16 kv[V], o[V];
#pragma GCC unroll 8
  for (int u = 0; u < V; ++u) kv[u] = o[u] = F32x16{};
  for (int i = 0; i < dk; ++i) {
    const float* row = s + static_cast<int64_t>(i) * 16 * V;
#pragma GCC unroll 8
    for (int u = 0; u < V; ++u) {
      F32x16 r;
      std::memcpy(&r, row + 16 * u, sizeof(r));
      r *= decay;
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
      r *= decay;
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
  const int64_t qk_ld = a.qk_stride();
  const int64_t v_ld = a.v_stride();
  const int64_t out_ld = static_cast<int64_t>(a.v_heads) * a.dv;
  for (int64_t t = 0; t < a.tokens; ++t) {
    const float* q = a.q + t * qk_ld + static_cast<int64_t>(kh) * a.dk;
    const float* k = a.k + t * qk_ld + static_cast<int64_t>(kh) * a.dk;
    const float* v = a.v + t * v_ld + static_cast<int64_t>(h) * a.dv;
    const float decay = std::exp(a.g[t * a.v_heads + h]);
    const float beta = a.beta[t * a.v_heads + h];
    float* out = a.out + t * out_ld + static_cast<int64_t>(h) * a.dv;
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

// Asks for the cache lines of n floats at p (into L2: a chunk's working set outgrows L1).
// Always inlined: out of line, GCC finds the function free of side effects and drops its calls.
inline __attribute__((always_inline)) void PrefetchRow(const float* p, int n) {
  constexpr int kLineFloats = 16;
  for (int i = 0; i < n; i += kLineFloats) __builtin_prefetch(p + i, 0, 2);
  __builtin_prefetch(p + n - 1, 0, 2);
}

// One v-head of the chunked gated delta rule (docs/model.md §3.6.5, "chunked form"). The
// (I + B)^-1 products are forward substitutions, row by row, which is what the reference's
// in-place inversion loop computes.
CAIRN_SIMD_CLONES void ChunkedHead(const GatedDeltaArgs& a, int h, float* s) {
  const int r = a.v_heads / a.k_heads;
  const int kh = h / r;
  const int dk = a.dk;
  const int dv = a.dv;
  const int64_t qk_ld = a.qk_stride();
  const int64_t v_ld = a.v_stride();
  const int64_t out_ld = static_cast<int64_t>(a.v_heads) * dv;
  const int c = a.chunk;
  std::vector<float> cum(c), decay(static_cast<size_t>(c) * c), kk(static_cast<size_t>(c) * c),
      u(static_cast<size_t>(c) * dv), w(static_cast<size_t>(c) * dk),
      vnew(static_cast<size_t>(c) * dv), tmp(static_cast<size_t>(c) * dv),
      p(static_cast<size_t>(c) * c), kt(static_cast<size_t>(dk) * c),
      keys(static_cast<size_t>(dk) * c), f(c), qc(static_cast<size_t>(c) * dk),
      kc(static_cast<size_t>(c) * dk), vc(static_cast<size_t>(c) * dv),
      oc(static_cast<size_t>(c) * dv);
  for (int64_t c0 = 0; c0 < a.tokens; c0 += c) {
    const int len = static_cast<int>(std::min<int64_t>(c, a.tokens - c0));
    // The chunk's q, k and v rows of this head, copied into contiguous rows first: in the
    // call's layout consecutive tokens of one head lie (heads x d) floats apart, often a
    // multiple of 4 KiB, so the loops below, which walk a column across the chunk's rows,
    // would keep evicting their own lines (64 rows in one cache set). Copies change no bits.
    for (int i = 0; i < len; ++i) {
      std::memcpy(qc.data() + static_cast<size_t>(i) * dk,
                  a.q + (c0 + i) * qk_ld + static_cast<int64_t>(kh) * dk, sizeof(float) * dk);
      std::memcpy(kc.data() + static_cast<size_t>(i) * dk,
                  a.k + (c0 + i) * qk_ld + static_cast<int64_t>(kh) * dk, sizeof(float) * dk);
      std::memcpy(vc.data() + static_cast<size_t>(i) * dv,
                  a.v + (c0 + i) * v_ld + static_cast<int64_t>(h) * dv, sizeof(float) * dv);
    }
    auto q_row = [&](int i) { return qc.data() + static_cast<size_t>(i) * dk; };
    auto k_row = [&](int i) { return kc.data() + static_cast<size_t>(i) * dk; };
    auto v_row = [&](int i) { return vc.data() + static_cast<size_t>(i) * dv; };
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
    LowerDotProducts(k_row(0), dk, len, keys.data(), c, dk, kk.data(), c);
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
        // The call's rows lie (heads x d) floats apart, so reading or writing them one chunk
        // at a time misses every line and the hardware prefetcher does not follow: ask for the
        // next chunk's q, k and v rows and this chunk's output rows now, while the arithmetic
        // below runs (no bits change).
        if (c0 + c + i < a.tokens) {
          PrefetchRow(a.q + (c0 + c + i) * qk_ld + static_cast<int64_t>(kh) * dk, dk);
          PrefetchRow(a.k + (c0 + c + i) * qk_ld + static_cast<int64_t>(kh) * dk, dk);
          PrefetchRow(a.v + (c0 + c + i) * v_ld + static_cast<int64_t>(h) * dv, dv);
        }
        PrefetchRow(a.out + (c0 + i) * out_ld + static_cast<int64_t>(h) * dv, dv);
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
    float* o0 = oc.data();
    const int64_t o_ld = dv;
    MatAcc(q_row(0), dk, len, s, dv, dk, dv, o0, o_ld, /*zero=*/true);
    for (int i = 0; i < len; ++i) {
      float* oi = o0 + i * o_ld;
      const float e = std::exp(cum[i]);
      Scale(e, oi, dv);
    }
    // p[i][j] = (q_i . k_j) decay[i][j], j <= i, with Q K^T as a blocked product.
    LowerDotProducts(q_row(0), dk, len, keys.data(), c, dk, p.data(), c);
    for (int i = 0; i < len; ++i) {
      float* row = p.data() + static_cast<size_t>(i) * c;
      Lanewise<false>(row, decay.data() + static_cast<size_t>(i) * c, row, i + 1);
    }
    const int block = dv == 64 ? 4 : dv == 128 ? 2 : 1;
    for (int i0 = 0; i0 < len; i0 += block) {
      const int rows = std::min(block, len - i0);
      MatAcc(p.data() + static_cast<size_t>(i0) * c, c, rows, vnew.data(), dv, i0 + 1, dv,
             o0 + i0 * o_ld, o_ld, /*zero=*/false);
      for (int i = i0 + 1; i < i0 + rows; ++i) {
        for (int j = i0 + 1; j <= i; ++j) {
          Axpy(p[i * c + j], vnew.data() + static_cast<size_t>(j) * dv, o0 + i * o_ld, dv);
        }
      }
    }
    for (int i = 0; i < len; ++i) {
      std::memcpy(a.out + (c0 + i) * out_ld + static_cast<int64_t>(h) * dv, o0 + i * o_ld,
                  sizeof(float) * dv);
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

}  // namespace

void GatedDeltaHead(const GatedDeltaArgs& a, int h, float* state) {
  const FlushSubnormalsScope flush;
  if (a.chunk > 0) {
    ChunkedHead(a, h, state);
  } else {
    std::vector<float> kv(a.dv);
    RecurrentHead(a, h, state, kv);
  }
}

}  // namespace cairn::infer::cpu
