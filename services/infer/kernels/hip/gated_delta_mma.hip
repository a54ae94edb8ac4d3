// The chunked gated delta rule (docs/model.md §3.6.5) on the matrix units (NVIDIA mma.sync
// m16n8k16, bf16 x bf16 -> fp32, sm_80 and later): the same chunk algorithm as gated_delta.hip,
// with every product of two matrices on the matrix units.
//
// Numerics: both operands of a product are fp32 and each is split into two bf16 pieces,
// hi = bf16(x) and lo = bf16(x - hi) (nearest even; x - hi is exact in fp32), so x = hi + lo to
// about 2^-17 of x; a product is hi.hi + hi.lo + lo.hi (lo.lo, about 2^-18 of it, is left out),
// three instructions per tile and k step, the small ones first. A product is thus within a few
// 2^-17 of its fp32 value; the state, the decays, the triangular solve's substitution and every
// sum outside the matrix units stay fp32. The order of every sum is fixed by the shape (fixed
// tiles and k steps, no atomics), so equal inputs give equal bits, and chunks count from the
// call's first token as in gated_delta.hip, so cutting a call at chunk boundaries (segments,
// passes) leaves the bits unchanged.
//
// Per segment of the call, two kernels:
//  - prepare, one block per (v-head, chunk): with GatedDeltaMmaInputs, first the chunk's q
//    and k rows L2-normalised and its gates worked out from the projection rows (the arithmetic
//    of L2NormalizeTwo and GdnGates); cumulative log decays G (fp32, in token order);
//    K K^T (three pieces each, six products: the solve amplifies its rounding) and Q K^T on the
//    matrix units; B = beta_i (k_i . k_j) e^{G_i - G_j} (j < i) and
//    A = (q_i . k_j) e^{G_i - G_j} (j <= i); T = (I + B)^-1 in fp32, in blocks of 16 rows (the
//    diagonal blocks by forward substitution, then block row by block row); then u = T (beta v)
//    and w = T (beta e^G k) on the matrix units. It writes the scan's matrix operands split
//    into their bf16 pieces (w, q, A and f k, each product rounded to fp32 first), so that the
//    scan's serial chunk loop loads them instead of splitting them;
//  - scan, one block of 16 warps per (v-head, slice of kSlice state columns), walking the
//    chunks in order with the state slice in shared memory: [w; q] S on the matrix units,
//    v_new = u - w S, o = e^G (q S) + A v_new, S = e^{G_last} S + (f k)^T v_new
//    (f_i = e^{G_last - G_i}); the next chunk's inputs are copied asynchronously while the
//    current one is computed.

#include <cmath>
#include <cstdint>

#include "services/infer/kernels/hip/gated_delta_mma_device.h"
#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {

#if defined(__HIP_PLATFORM_AMD__)

bool GatedDeltaMmaSupported(const GatedDeltaLaunch&, int) { return false; }
int64_t GatedDeltaMmaWorkspaceFloats(const GatedDeltaLaunch&, int64_t) { return 0; }
hipError_t GatedDeltaMma(const GatedDeltaLaunch&, int64_t, float*, hipStream_t) {
  return hipErrorNotSupported;
}
hipError_t GatedDeltaMmaParts(const GatedDeltaLaunch&, int64_t, float*, bool, bool,
                              const GatedDeltaMmaInputs*, hipStream_t) {
  return hipErrorNotSupported;
}

#else

namespace {

constexpr int kC = 64;       // Tokens per chunk (the only chunk this path takes).
constexpr int kMaxDk = 128;  // Largest dk (shared memory of the scan).
constexpr int kWarps = 8;  // The prepare kernel's.
constexpr int kThreads = kWarps * 32;
constexpr int kSlice = 32;  // State columns per scan block: four 8-column tiles.
constexpr int kSliceTiles = kSlice / 8;
// The scan's warps: two for each of the prepare's eight roles, each with half of a slice's
// n-tiles, so that each warp's chain of dependent instructions a chunk is about half as long
// (the scan is bound by those chains, not by its instruction count).
constexpr int kScanWarps = 16;
constexpr int kScanThreads = kScanWarps * 32;
constexpr int kHalfTiles = kSliceTiles / 2;
// Shared row strides (floats). Rows read as the A operand in pairs along the row: stride = 8
// mod 32 (the pairs of one half-warp fall on distinct banks); rows read one element per lane
// down a column (B operand, or A along columns): stride = 4 mod 32.
constexpr int kPadPairs = 8;
constexpr int kPadCols = 4;

struct Params {
  const float* q;
  const float* k;
  const float* v;
  const float* g;
  const float* beta;
  float* state;
  float* out;
  int64_t tokens;
  int ratio;  // v_heads / k_heads.
  int v_heads;
  int dk;
  int dv;
  int64_t qk_ld;
  int64_t v_ld;
  int64_t out_ld;
  // GatedDeltaMmaInputs: token t's projection row is gate_rows + t gate_ld (its b and a
  // values give the gates; g and beta are then not read) and q, k are the rows before their L2
  // normalisation. Null: g, beta and q, k as given.
  const float* gate_rows;
  int64_t gate_ld;
  GatedDeltaPrepArgs prep;
};

// Workspace of one (v-head, chunk): every section a multiple of 4 floats (16-byte copies).
// a, w and q are stored split (StorePair: each pair of columns (2c, 2c + 1) of a row holds its
// hi pieces' word, then its lo pieces', in the place of the two fp32 values), fk split in row
// pairs (StoreRowPairs).
struct Work {
  float* a;      // [kC, kC]: (q_i . k_j) e^{G_i - G_j}, j <= i; 0 elsewhere. Split.
  float* u;      // [kC, dv]: T beta v (zero rows past the chunk's tokens).
  float* w;      // [kC, dk]: T beta e^G k. Split.
  float* q;      // [kC, dk]: the chunk's q rows (zero rows past its tokens). Split.
  float* fk;     // [kC, dk]: row i of k times f_i = e^{G_last - G_i}. Split in row pairs.
  float* gexp;   // [kC]: e^{G_i}
  float* decay;  // [4]: e^{G_last}, then padding.
};

__host__ __device__ inline int64_t WorkFloats(int dk, int dv) {
  return static_cast<int64_t>(kC) * (kC + dv + 3 * dk + 1) + 4;
}

__device__ inline Work WorkAt(float* ws, int64_t index, int dk, int dv) {
  Work c;
  c.a = ws + index * WorkFloats(dk, dv);
  c.u = c.a + kC * kC;
  c.w = c.u + static_cast<int64_t>(kC) * dv;
  c.q = c.w + static_cast<int64_t>(kC) * dk;
  c.fk = c.q + static_cast<int64_t>(kC) * dk;
  c.gexp = c.fk + static_cast<int64_t>(kC) * dk;
  c.decay = c.gexp + kC;
  return c;
}

using delta_mma::CopyAsync;
using delta_mma::CopyCommit;
using delta_mma::CopyTile;
using delta_mma::CopyWait;
using delta_mma::FragA;
using delta_mma::FragA3;
using delta_mma::FragB;
using delta_mma::FragB3;
using delta_mma::LoadAColPairs;
using delta_mma::LoadAPairs;
using delta_mma::LoadARows;
using delta_mma::LoadARows3;
using delta_mma::LoadBCols;
using delta_mma::LoadBRows;
using delta_mma::LoadBRows3;
using delta_mma::LoadBSplit;
using delta_mma::Mma3;
using delta_mma::Mma6;
using delta_mma::Split2;
using delta_mma::Split3;
using delta_mma::StorePair;
using delta_mma::StoreRowPairs;
using delta_mma::StoreSplit;

// --- prepare --------------------------------------------------------------------------------

// The triangular inverse works in blocks of kSolveBlock rows.
constexpr int kSolveBlock = 16;
constexpr int kSolveBlocks = kC / kSolveBlock;

size_t PrepSharedFloats(int dk, int dv) {
  const int wide = dk > dv ? dk : dv;
  // k rows, q rows (then v rows), B, T, the solve's block products, and G, beta, beta e^G, f.
  return static_cast<size_t>(kC) * (dk + kPadPairs) + static_cast<size_t>(kC) * (wide + kPadPairs) +
         static_cast<size_t>(kC) * (kC + 4) + static_cast<size_t>(kC) * (kC + kPadPairs) +
         (kSolveBlocks - 1) * kSolveBlock * kSolveBlock + 4 * kC;
}

// T = (I + B)^-1 (B strictly lower triangular, zeros elsewhere; T zeros on entry) in blocks of
// kSolveBlock: the diagonal blocks by forward substitution (thread c of block b solves column
// c), then block row i from the blocks before it, T_ij = -T_ii (sum_{j <= k < i} B_ik T_kj),
// every element a sum in a fixed order. `scratch` holds (kSolveBlocks - 1) blocks.
__device__ void InvertUnitLower(const float* bm, int bld, float* tm, int tld, float* scratch) {
  const int tid = threadIdx.x;
  constexpr int kB = kSolveBlock;
  if (tid < kC) {
    const int b = tid / kB;
    const int c = tid;
    tm[c * tld + c] = 1.0f;
    for (int i = c + 1; i < (b + 1) * kB; ++i) {
      float s = 0.0f;
      for (int j = c; j < i; ++j) s = fmaf(bm[i * bld + j], tm[j * tld + c], s);
      tm[i * tld + c] = -s;
    }
  }
  __syncthreads();
  for (int bi = 1; bi < kSolveBlocks; ++bi) {
    // M_j = sum_{k = j .. bi - 1} B_{bi,k} T_{k,j} for the blocks j < bi.
    for (int e = tid; e < bi * kB * kB; e += kThreads) {
      const int j = e / (kB * kB);
      const int r = (e / kB) % kB;
      const int c = e % kB;
      const float* brow = bm + (bi * kB + r) * bld;
      float s = 0.0f;
      for (int q = j * kB; q < bi * kB; ++q) s = fmaf(brow[q], tm[q * tld + j * kB + c], s);
      scratch[e] = s;
    }
    __syncthreads();
    // T_{bi,j} = -T_{bi,bi} M_j (T_{bi,bi} lower triangular).
    for (int e = tid; e < bi * kB * kB; e += kThreads) {
      const int j = e / (kB * kB);
      const int r = (e / kB) % kB;
      const int c = e % kB;
      const float* trow = tm + (bi * kB + r) * tld + bi * kB;
      const float* m = scratch + j * kB * kB;
      float s = 0.0f;
      for (int q = 0; q <= r; ++q) s = fmaf(trow[q], m[q * kB + c], s);
      tm[(bi * kB + r) * tld + j * kB + c] = -s;
    }
    __syncthreads();
  }
}

// kDk: dk (the k steps unrolled). kVec: q, k and v rows copied 16 bytes at a time (aligned),
// else 4.
template <int kDk, bool kVec>
__global__ void __launch_bounds__(kThreads, 2)
    PrepMmaKernel(Params p, int64_t first, int64_t chunks, float* ws) {
  KernelEntry();
  extern __shared__ float smem[];
  constexpr int dk = kDk;
  const int dv = p.dv;
  const int kld = dk + kPadPairs;
  const int wide = dk > dv ? dk : dv;
  const int qld = wide + kPadPairs;
  constexpr int bld = kC + 4;
  constexpr int tld = kC + kPadPairs;
  float* ks = smem;
  float* qs = ks + kC * kld;  // q rows, then v rows.
  float* bm = qs + kC * qld;
  float* tm = bm + kC * bld;
  float* scratch = tm + kC * tld;
  float* cum = scratch + (kSolveBlocks - 1) * kSolveBlock * kSolveBlock;
  float* beta = cum + kC;
  float* rk = beta + kC;
  float* fs = rk + kC;
  const int h = blockIdx.x;
  const int kh = h / p.ratio;
  const int64_t ci = blockIdx.y;
  const int64_t t0 = first + ci * kC;
  const int len = static_cast<int>(p.tokens - t0 < kC ? p.tokens - t0 : kC);
  const Work work = WorkAt(ws, static_cast<int64_t>(h) * chunks + ci, dk, dv);
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;

  // Stage k and q rows (zeros past the chunk) asynchronously, the gates, and clear B and T.
  const int64_t qk_off = t0 * p.qk_ld + static_cast<int64_t>(kh) * dk;
  CopyTile<kVec, kThreads>(ks, kld, p.k + qk_off, p.qk_ld, kC, dk, len, dk);
  CopyTile<kVec, kThreads>(qs, qld, p.q + qk_off, p.qk_ld, kC, dk, len, dk);
  CopyCommit();
  for (int i = tid; i < kC; i += kThreads) {
    if (i >= len) {
      cum[i] = beta[i] = 0.0f;
    } else if (p.gate_rows != nullptr) {
      // As GdnGates works them out.
      const float* row = p.gate_rows + (t0 + i) * p.gate_ld;
      GdnGate(row[p.prep.b_offset + h], row[p.prep.a_offset + h], p.prep.dt_bias[h],
              p.prep.neg_a[h], &cum[i], &beta[i]);
    } else {
      cum[i] = p.g[(t0 + i) * p.v_heads + h];
      beta[i] = p.beta[(t0 + i) * p.v_heads + h];
    }
  }
  for (int i = tid; i < kC * bld; i += kThreads) bm[i] = 0.0f;
  for (int i = tid; i < kC * tld; i += kThreads) tm[i] = 0.0f;
  CopyWait<0>();
  __syncthreads();
  if (p.gate_rows != nullptr) {
    // The chunk's k rows, then its q rows, L2-normalised in place as the L2 norm kernels
    // normalise them (rows past the chunk stay zeros).
    for (int r = warp; r < 2 * len; r += kWarps) {
      float* row = r < len ? ks + r * kld : qs + (r - len) * qld;
      WarpL2Normalize(row, dk, p.prep.eps, r < len ? 1.0f : p.prep.q_scale, row);
    }
    __syncthreads();
  }
  if (tid == 0) {
    float acc = 0.0f;
    for (int i = 0; i < kC; ++i) {
      acc += cum[i];
      cum[i] = acc;
    }
  }
  // The scan's q rows, split (zeros past the chunk's tokens, as staged).
  for (int i = tid; i < kC * dk / 4; i += kThreads) {
    const int r = i / (dk / 4);
    const int c = (i % (dk / 4)) * 4;
    const float4 x = *reinterpret_cast<const float4*>(qs + r * qld + c);
    uint4 y;
    Split2(x.x, x.y, y.x, y.y);
    Split2(x.z, x.w, y.z, y.w);
    *reinterpret_cast<uint4*>(work.q + r * dk + c) = y;
  }
  __syncthreads();
  for (int i = tid; i < kC; i += kThreads) {
    const float e = expf(cum[i]);
    rk[i] = beta[i] * e;
    work.gexp[i] = e;
    fs[i] = expf(cum[kC - 1] - cum[i]);
  }
  if (tid == 0) {
    work.decay[0] = expf(cum[kC - 1]);
    work.decay[1] = work.decay[2] = work.decay[3] = 0.0f;
  }

  // K K^T and Q K^T, the tiles on or below the diagonal: m-tile mi (16 rows), n-tile ni (8
  // columns) with ni <= 2 mi + 1; 20 tiles each, 40 over the 8 warps.
  for (int tile = warp; tile < 40; tile += kWarps) {
    const bool is_q = tile >= 20;
    int rest = is_q ? tile - 20 : tile;
    int mi = 0;
    while (rest >= 2 * mi + 2) {
      rest -= 2 * mi + 2;
      ++mi;
    }
    const int ni = rest;
    const float* lhs = is_q ? qs : ks;
    const int lld = is_q ? qld : kld;
    float c[4] = {};
#pragma unroll
    for (int k0 = 0; k0 < dk; k0 += 16) {
      if (is_q) {
        Mma3(c, LoadARows(lhs, lld, 16 * mi, k0, lane), LoadBRows(ks, kld, k0, 8 * ni, lane));
      } else {
        Mma6(c, LoadARows3(lhs, lld, 16 * mi, k0, lane), LoadBRows3(ks, kld, k0, 8 * ni, lane));
      }
    }
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const int i = 16 * mi + g + (e >= 2 ? 8 : 0);
      const int j = 8 * ni + 2 * t;
      float x[2];
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const float decay = expf(cum[i] - cum[j + h2]);
        // Rounded to fp32 before the split (no fused multiply-add into it).
        x[h2] = j + h2 <= i ? __fmul_rn(c[e + h2], decay) : 0.0f;
        if (!is_q && j + h2 < i) bm[i * bld + j + h2] = beta[i] * c[e + h2] * decay;
      }
      if (is_q) StorePair(work.a + i * kC + j, x[0], x[1]);
    }
  }
  // A's tiles above the diagonal are zeros.
  for (int i = tid; i < kC * kC; i += kThreads) {
    if ((i % kC) / 8 > 2 * ((i / kC) / 16) + 1) work.a[i] = 0.0f;
  }
  __syncthreads();

  // v rows into the q rows' place, copied while f k is written and T = (I + B)^-1 solved.
  CopyTile<kVec, kThreads>(qs, qld, p.v + t0 * p.v_ld + static_cast<int64_t>(h) * dv, p.v_ld, kC,
                           dv, len, dv);
  CopyCommit();
  // The scan's f k, split in row pairs; each product rounded to fp32 before the split.
  for (int i = tid; i < kC / 2 * (dk / 4); i += kThreads) {
    const int r = 2 * (i / (dk / 4));
    const int c = (i % (dk / 4)) * 4;
    const float4 x0 = *reinterpret_cast<const float4*>(ks + r * kld + c);
    const float4 x1 = *reinterpret_cast<const float4*>(ks + (r + 1) * kld + c);
    const float f0 = fs[r];
    const float f1 = fs[r + 1];
    const float a[4] = {__fmul_rn(x0.x, f0), __fmul_rn(x0.y, f0), __fmul_rn(x0.z, f0),
                        __fmul_rn(x0.w, f0)};
    const float b[4] = {__fmul_rn(x1.x, f1), __fmul_rn(x1.y, f1), __fmul_rn(x1.z, f1),
                        __fmul_rn(x1.w, f1)};
    StoreRowPairs(work.fk + r * dk + c, work.fk + (r + 1) * dk + c, a, b);
  }
  InvertUnitLower(bm, bld, tm, tld, scratch);
  CopyWait<0>();
  __syncthreads();

  // [u | w] = T [beta v | beta e^G k]: n-tiles of 8 columns over dv + dk, warp w takes n-tiles
  // w, w + 8, ...; T is lower triangular, so m-tile mi needs k steps 0..mi only.
  const int n_tiles = (dv + dk) / 8;
  for (int mi = 0; mi < kC / 16; ++mi) {
    for (int nt = warp; nt < n_tiles; nt += kWarps) {
      const bool is_u = 8 * nt < dv;
      const int n0 = is_u ? 8 * nt : 8 * nt - dv;
      float c[4] = {};
      for (int ks0 = 0; ks0 <= mi; ++ks0) {
        const FragA a = LoadARows(tm, tld, 16 * mi, 16 * ks0, lane);
        const FragB b = is_u ? LoadBCols(qs, qld, beta, 16 * ks0, n0, lane)
                             : LoadBCols(ks, kld, rk, 16 * ks0, n0, lane);
        Mma3(c, a, b);
      }
      float* dst = is_u ? work.u : work.w;
      const int ld = is_u ? dv : dk;
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int i = 16 * mi + g + (e >= 2 ? 8 : 0);
        const int j = n0 + 2 * t;
        if (is_u) {
          dst[i * ld + j] = c[e];
          dst[i * ld + j + 1] = c[e + 1];
        } else {
          StorePair(dst + i * ld + j, c[e], c[e + 1]);
        }
      }
    }
  }
}

// --- scan -----------------------------------------------------------------------------------

struct ScanLayout {
  int wld, kld, ald, sld;  // Row strides of w, q, k, A (split pairs) and u, S (fp32), in floats.
  int vld, tld;            // Row strides of the split v_new^T and S^T (bf16 elements).
  // Offsets in floats; vt and st hold the hi pieces, then the lo pieces.
  size_t w, q, k, a, u, vt, s, st, gexp, decay, total;
};

__host__ __device__ inline ScanLayout ScanLayoutOf(int dk) {
  ScanLayout l;
  l.wld = dk + kPadPairs;
  l.kld = dk + kPadCols;
  l.ald = kC + kPadPairs;
  l.sld = kSlice + kPadCols;
  // Strides of 4 mod 32 words: the B fragment's pairs of one warp fall on distinct banks.
  l.vld = kC + kPadPairs;
  l.tld = dk + kPadPairs;
  l.w = 0;
  l.q = l.w + static_cast<size_t>(kC) * l.wld;
  l.k = l.q + static_cast<size_t>(kC) * l.wld;
  l.a = l.k + static_cast<size_t>(kC) * l.kld;
  l.u = l.a + static_cast<size_t>(kC) * l.ald;
  l.vt = l.u + static_cast<size_t>(kC) * l.sld;
  l.s = l.vt + static_cast<size_t>(kSlice) * l.vld;  // Two bf16 arrays of kSlice x vld.
  l.st = l.s + static_cast<size_t>(dk) * l.sld;
  l.gexp = l.st + static_cast<size_t>(kSlice) * l.tld;
  l.decay = l.gexp + kC;
  l.total = l.decay + 4;
  return l;
}

// One block per (v-head, slice of kSlice state columns); walks the segment's chunks in order.
// A warp's role is warp % 8 and its n-tiles of the slice the half warp / 8: roles 0-3 take w's
// m-tiles and roles 4-7 q's in [w; q] S; then roles 4-7 finish o while every warp updates its
// m-tiles of the state. Each output is the same chain of instructions whichever warp runs it.
// Every matrix operand comes split from the prepare kernel's workspace.
template <int kDk>
__global__ void __launch_bounds__(kScanThreads)
    ScanMmaKernel(Params p, int64_t first, int64_t chunks, const float* ws) {
  KernelEntry();
  extern __shared__ float smem[];
  constexpr int dk = kDk;
  const int dv = p.dv;
  const ScanLayout l = ScanLayoutOf(dk);
  float* w_s = smem + l.w;
  float* q_s = smem + l.q;
  float* k_s = smem + l.k;
  float* a_s = smem + l.a;
  float* u_s = smem + l.u;
  uint16_t* vt_hi = reinterpret_cast<uint16_t*>(smem + l.vt);
  uint16_t* vt_lo = vt_hi + kSlice * l.vld;
  float* s_s = smem + l.s;
  uint16_t* st_hi = reinterpret_cast<uint16_t*>(smem + l.st);
  uint16_t* st_lo = st_hi + kSlice * l.tld;
  float* gexp_s = smem + l.gexp;
  float* decay_s = smem + l.decay;
  const int h = blockIdx.x;
  const int c0 = blockIdx.y * kSlice;
  const int cols = dv - c0 < kSlice ? dv - c0 : kSlice;
  const int warp = threadIdx.x / 32;
  const int role = warp % 8;
  const int nt0 = (warp / 8) * kHalfTiles;  // The warp's first n-tile.
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  float* state = p.state + static_cast<int64_t>(h) * dk * dv;

  // The chunk's w, q, u and e^G (group 1) and f k, A and e^{G_last} (group 2).
  auto issue1 = [&](int64_t ci) {
    const Work work = WorkAt(const_cast<float*>(ws), static_cast<int64_t>(h) * chunks + ci, dk, dv);
    CopyTile<true, kScanThreads>(w_s, l.wld, work.w, dk, kC, dk, kC, dk);
    CopyTile<true, kScanThreads>(q_s, l.wld, work.q, dk, kC, dk, kC, dk);
    CopyTile<true, kScanThreads>(u_s, l.sld, work.u + c0, dv, kC, kSlice, kC, cols);
    CopyTile<true, kScanThreads>(gexp_s, kC, work.gexp, kC, 1, kC, 1, kC);
    CopyCommit();
  };
  auto issue2 = [&](int64_t ci) {
    const Work work = WorkAt(const_cast<float*>(ws), static_cast<int64_t>(h) * chunks + ci, dk, dv);
    CopyTile<true, kScanThreads>(k_s, l.kld, work.fk, dk, kC, dk, kC, dk);
    CopyTile<true, kScanThreads>(a_s, l.ald, work.a, kC, kC, kC, kC, kC);
    CopyTile<true, kScanThreads>(decay_s, 4, work.decay, 4, 1, 4, 1, 4);
    CopyCommit();
  };

  for (int i = threadIdx.x; i < dk * kSlice; i += kScanThreads) {
    const int x = i / kSlice;
    const int c = i % kSlice;
    const float v = c < cols ? state[static_cast<int64_t>(x) * dv + c0 + c] : 0.0f;
    s_s[x * l.sld + c] = v;
    StoreSplit(st_hi, st_lo, c * l.tld + x, v);
  }
  issue1(0);
  issue2(0);
  CopyWait<0>();
  __syncthreads();

  const int m_tiles = dk / 16;
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t t0 = first + ci * kC;
    const int len = static_cast<int>(p.tokens - t0 < kC ? p.tokens - t0 : kC);
    // [w; q] S: role r < 4 takes rows 16r.. of w, role r >= 4 rows 16(r - 4).. of q.
    const int mi = role % 4;
    const float* lhs = role < 4 ? w_s : q_s;
    float acc[kHalfTiles][4] = {};
#pragma unroll
    for (int k0 = 0; k0 < dk; k0 += 16) {
      const FragA a = LoadAPairs(lhs, l.wld, 16 * mi, k0, lane);
#pragma unroll
      for (int j = 0; j < kHalfTiles; ++j) {
        Mma3(acc[j], a, LoadBSplit(st_hi, st_lo, l.tld, k0, 8 * (nt0 + j), lane));
      }
    }
#pragma unroll
    for (int j = 0; j < kHalfTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 16 * mi + g + (e >= 2 ? 8 : 0);
        const int c = 8 * (nt0 + j) + 2 * t + (e & 1);
        if (role < 4) {
          StoreSplit(vt_hi, vt_lo, c * l.vld + i, u_s[i * l.sld + c] - acc[j][e]);
        } else {
          acc[j][e] *= gexp_s[i];
        }
      }
    }
    CopyWait<0>();  // f k, A and e^{G_last} of this chunk.
    __syncthreads();
    if (ci + 1 < chunks) issue1(ci + 1);

    if (role >= 4) {
      // o = e^G (q S) + A v_new; A is lower triangular: k steps 0..mi.
      for (int k0 = 0; k0 <= 16 * mi; k0 += 16) {
        const FragA a = LoadAPairs(a_s, l.ald, 16 * mi, k0, lane);
#pragma unroll
        for (int j = 0; j < kHalfTiles; ++j) {
          Mma3(acc[j], a, LoadBSplit(vt_hi, vt_lo, l.vld, k0, 8 * (nt0 + j), lane));
        }
      }
#pragma unroll
      for (int j = 0; j < kHalfTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 16 * mi + g + (e >= 2 ? 8 : 0);
          const int c = 8 * (nt0 + j) + 2 * t + (e & 1);
          if (i < len && c < cols) {
            p.out[(t0 + i) * p.out_ld + static_cast<int64_t>(h) * dv + c0 + c] = acc[j][e];
          }
        }
      }
    }
    // S = e^{G_last} S + (f k)^T v_new: m-tile x of S (16 rows of dk) by role x % 8.
    const float decay = decay_s[0];
    for (int mx = role; mx < m_tiles; mx += 8) {
      float upd[kHalfTiles][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < kC; k0 += 16) {
        const FragA a = LoadAColPairs(k_s, l.kld, 16 * mx, k0, lane);
#pragma unroll
        for (int j = 0; j < kHalfTiles; ++j) {
          Mma3(upd[j], a, LoadBSplit(vt_hi, vt_lo, l.vld, k0, 8 * (nt0 + j), lane));
        }
      }
#pragma unroll
      for (int j = 0; j < kHalfTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int x = 16 * mx + g + (e >= 2 ? 8 : 0);
          const int c = 8 * (nt0 + j) + 2 * t + (e & 1);
          float& s = s_s[x * l.sld + c];
          s = fmaf(decay, s, upd[j][e]);
          StoreSplit(st_hi, st_lo, c * l.tld + x, s);
        }
      }
    }
    __syncthreads();  // f k, A, v_new and the old state are no longer read.
    if (ci + 1 < chunks) {
      issue2(ci + 1);
      CopyWait<1>();  // w, q, u and e^G of the next chunk.
    }
    __syncthreads();
  }

  for (int i = threadIdx.x; i < dk * kSlice; i += kScanThreads) {
    const int x = i / kSlice;
    const int c = i % kSlice;
    if (c < cols) state[static_cast<int64_t>(x) * dv + c0 + c] = s_s[x * l.sld + c];
  }
}

Params ParamsOf(const GatedDeltaLaunch& a) {
  Params p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.g = a.g;
  p.beta = a.beta;
  p.state = a.state;
  p.out = a.out;
  p.tokens = a.tokens;
  p.ratio = a.v_heads / a.k_heads;
  p.v_heads = a.v_heads;
  p.dk = a.dk;
  p.dv = a.dv;
  p.qk_ld = a.qk_ld;
  p.v_ld = a.v_ld;
  p.out_ld = static_cast<int64_t>(a.v_heads) * a.dv;
  p.gate_rows = nullptr;
  p.gate_ld = 0;
  p.prep = {};
  return p;
}

template <int kDk, bool kVec>
hipError_t RunMma(const Params& p, int64_t segment, float* ws, bool prepare, bool scan,
                  hipStream_t stream) {
  const size_t prep_shared = PrepSharedFloats(p.dk, p.dv) * sizeof(float);
  const size_t scan_shared = ScanLayoutOf(p.dk).total * sizeof(float);
  hipError_t e = AllowSharedBytes(PrepMmaKernel<kDk, kVec>, prep_shared);
  // The largest shared-memory carveout, so that two prepare blocks share a multiprocessor.
  if (e == hipSuccess) {
    e = hipFuncSetAttribute(reinterpret_cast<const void*>(PrepMmaKernel<kDk, kVec>),
                            hipFuncAttributePreferredSharedMemoryCarveout, 100);
  }
  if (e == hipSuccess) e = AllowSharedBytes(ScanMmaKernel<kDk>, scan_shared);
  if (e != hipSuccess) return e;
  const dim3 scan_grid(static_cast<unsigned int>(p.v_heads),
                       static_cast<unsigned int>(CeilDiv(p.dv, kSlice)));
  for (int64_t first = 0; first < p.tokens; first += segment) {
    const int64_t seg_tokens = p.tokens - first < segment ? p.tokens - first : segment;
    const int64_t chunks = CeilDiv(seg_tokens, kC);
    const dim3 prep_grid(static_cast<unsigned int>(p.v_heads), static_cast<unsigned int>(chunks));
    if (prepare) {
      LaunchKernel(PrepMmaKernel<kDk, kVec>, prep_grid, kThreads, prep_shared, stream, p, first,
                   chunks, ws);
      e = hipGetLastError();
      if (e != hipSuccess) return e;
    }
    if (scan) {
      LaunchKernel(ScanMmaKernel<kDk>, scan_grid, kScanThreads, scan_shared, stream, p,
                   first, chunks, ws);
      e = hipGetLastError();
      if (e != hipSuccess) return e;
    }
  }
  return hipSuccess;
}

}  // namespace

bool GatedDeltaMmaSupported(const GatedDeltaLaunch& a, int max_shared_bytes) {
  if (a.chunk != kC || (a.dk != 64 && a.dk != kMaxDk) || a.dv % 8 != 0 || a.dv <= 0) {
    return false;
  }
  const size_t prep = PrepSharedFloats(a.dk, a.dv) * sizeof(float);
  const size_t scan = ScanLayoutOf(a.dk).total * sizeof(float);
  return prep <= static_cast<size_t>(max_shared_bytes) &&
         scan <= static_cast<size_t>(max_shared_bytes);
}

int64_t GatedDeltaMmaWorkspaceFloats(const GatedDeltaLaunch& a, int64_t segment_tokens) {
  const int64_t seg = a.tokens < segment_tokens ? a.tokens : segment_tokens;
  return a.v_heads * CeilDiv(seg, kC) * WorkFloats(a.dk, a.dv);
}

hipError_t GatedDeltaMma(const GatedDeltaLaunch& a, int64_t segment_tokens, float* workspace,
                         hipStream_t stream) {
  return GatedDeltaMmaParts(a, segment_tokens, workspace, true, true, nullptr, stream);
}

hipError_t GatedDeltaMmaParts(const GatedDeltaLaunch& a, int64_t segment_tokens, float* workspace,
                              bool prepare, bool scan, const GatedDeltaMmaInputs* inputs,
                              hipStream_t stream) {
  if (a.tokens == 0) return hipSuccess;
  Params p = ParamsOf(a);
  if (inputs != nullptr) {
    if (inputs->gate_rows == nullptr || inputs->gate_ld < 0) return hipErrorInvalidValue;
    p.gate_rows = inputs->gate_rows;
    p.gate_ld = inputs->gate_ld;
    p.prep = inputs->prep;
  }
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0) return hipErrorInvalidValue;
  // q, k and v rows are copied 16 bytes at a time where aligned (dk is 64 or 128, dv a multiple of
  // 8; rows a multiple of 4 floats apart), else 4.
  const bool vec = reinterpret_cast<uintptr_t>(a.q) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.k) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.v) % 16 == 0 && a.qk_ld % 4 == 0 &&
                   a.v_ld % 4 == 0;
  if (a.dk == 64) {
    return vec ? RunMma<64, true>(p, segment_tokens, workspace, prepare, scan, stream)
               : RunMma<64, false>(p, segment_tokens, workspace, prepare, scan, stream);
  }
  if (a.dk != kMaxDk) return hipErrorInvalidValue;
  return vec ? RunMma<kMaxDk, true>(p, segment_tokens, workspace, prepare, scan, stream)
             : RunMma<kMaxDk, false>(p, segment_tokens, workspace, prepare, scan, stream);
}

#endif  // __HIP_PLATFORM_AMD__

}  // namespace cairn::infer::hip
