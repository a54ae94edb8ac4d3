// Causal GQA attention, flash style: a block takes kBr query rows of one kv head (rows are
// (token, q head in group) pairs, token-major) and walks the keys in tiles of kBc with an
// online softmax; O stays in registers, Q, K, V and the score tile in shared memory.
//
// Batch invariance: tiles start at key 0 (or at the start of a split, a multiple of kBc), so a
// row sees the same tiles with the same keys whatever rows share its block; a tile with no key
// visible to a row is skipped for that row (not folded in as zeros), so extra tiles that other
// rows need leave its bits untouched. A row's result therefore depends on its query, its
// position and the keys up to it, not on `tokens`, `past` or the other rows.
//
// The split path (decode): keys are cut into ranges of split_keys; each range writes its
// unnormalised O with its running max and sum, and a second kernel merges the ranges in a
// fixed tree (eight interleaved chains, then their sums in order). Ranges with no visible key
// are skipped exactly.

#include <cmath>
#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {
namespace {

// Query rows per block: kWideRows for prefill, kNarrowRows when a kv head has few query rows
// (decode). Rows never share arithmetic, so the choice does not change any row's bits.
constexpr int kWideRows = 32;
constexpr int kNarrowRows = 8;
constexpr int kBc = 32;        // Keys per tile.
constexpr int kThreads = 128;  // Threads per block.
constexpr int kMaxHeadDim = 256;
// The merge: kMergeDims output dimensions per block, each summed by kMergeLanes threads.
constexpr int kMergeDims = 32;
constexpr int kMergeLanes = 8;
constexpr int kMergeThreads = kMergeDims * kMergeLanes;
// Key ranges one call may have: their merge weights and sums live in shared memory (192 KiB).
constexpr int64_t kMaxSplits = 24576;

struct Params {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t past;
  int64_t rows;  // tokens * group per kv head.
  int group;
  int kv_heads;
  int d;
  float scale;
  int64_t q_ld;
  int64_t kv_ld;
  int64_t split_keys;  // Keys per range; >= past + tokens without splits.
  float* part_o;       // Split path: [splits, kv_heads, rows, d]; null otherwise.
  float* part_m;       // [splits, kv_heads, rows]
  float* part_l;       // [splits, kv_heads, rows]
};

// Marks a row whose tile held no visible key: the tile is skipped for it.
constexpr float kSkipTile = -1.0f;

size_t SharedFloats(int d, int rows) {
  const size_t qs = static_cast<size_t>(d) + 1;
  return rows * qs + kBc * qs + static_cast<size_t>(kBc) * d + rows * (kBc + 1) + 3 * rows;
}

// Loads keys [kt, kt + kBc) of kv head `kvh` into the K and V tiles (zeros past k_end).
// kVec: 16-byte global loads (head_dim and the row stride multiples of 4, aligned pointers).
// kLoadBatch pieces are loaded before any is stored, so that many loads are in flight.
template <bool kVec>
__device__ void LoadKvTile(const Params& p, int kvh, int64_t kt, int64_t k_end, float* k_tile,
                           float* v_tile) {
  constexpr int kWidth = kVec ? 4 : 1;
  constexpr int kLoadBatch = 4;
  const int d = p.d;
  const int qs = d + 1;
  const int per_row = d / kWidth;
  const int n = kBc * per_row;
  for (int base = threadIdx.x; base < n; base += kThreads * kLoadBatch) {
    float kv[kLoadBatch][kWidth];
    float vv[kLoadBatch][kWidth];
#pragma unroll
    for (int b = 0; b < kLoadBatch; ++b) {
      const int idx = base + b * kThreads;
      const int64_t key = kt + idx / per_row;
      if (idx < n && key < k_end) {
        const int64_t off =
            key * p.kv_ld + static_cast<int64_t>(kvh) * d + (idx % per_row) * kWidth;
        if constexpr (kVec) {
          const float4 k4 = *reinterpret_cast<const float4*>(p.k + off);
          const float4 v4 = *reinterpret_cast<const float4*>(p.v + off);
          kv[b][0] = k4.x, kv[b][1] = k4.y, kv[b][2] = k4.z, kv[b][3] = k4.w;
          vv[b][0] = v4.x, vv[b][1] = v4.y, vv[b][2] = v4.z, vv[b][3] = v4.w;
        } else {
          kv[b][0] = p.k[off];
          vv[b][0] = p.v[off];
        }
      } else {
#pragma unroll
        for (int e = 0; e < kWidth; ++e) kv[b][e] = vv[b][e] = 0.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < kLoadBatch; ++b) {
      const int idx = base + b * kThreads;
      if (idx >= n) continue;
      const int c = idx / per_row;
      const int x = (idx % per_row) * kWidth;
#pragma unroll
      for (int e = 0; e < kWidth; ++e) {
        k_tile[c * qs + x + e] = kv[b][e];
        v_tile[c * d + x + e] = vv[b][e];
      }
    }
  }
}

// The block of rows [bx * kBr, ...) of kv head `kvh` over key range `split`.
template <int kMaxD, int kBr, bool kVec>
__device__ void AttentionBlock(const Params& p, int64_t bx, int kvh, int64_t split) {
  // Score tile per thread: kScoreRows x kScoreCols; output tile: kOutRows x kDims.
  constexpr int kScoreRows = kBr >= 32 ? 2 : 1;
  constexpr int kScoreColGroups = kThreads / (kBr / kScoreRows);
  constexpr int kScoreCols = kBc / kScoreColGroups;
  constexpr int kOutRows = 4;
  constexpr int kDimGroups = kThreads / (kBr / kOutRows);
  constexpr int kDims = (kMaxD + kDimGroups - 1) / kDimGroups;
  static_assert(kScoreCols >= 1 && kBr % kOutRows == 0, "tile shapes");
  extern __shared__ float smem[];
  const int d = p.d;
  const int qs = d + 1;  // Padded row stride of Q and K: rows start in different banks.
  float* q_tile = smem;
  float* k_tile = q_tile + kBr * qs;
  float* v_tile = k_tile + kBc * qs;
  float* s_tile = v_tile + kBc * d;
  float* row_max = s_tile + kBr * (kBc + 1);
  float* row_sum = row_max + kBr;
  float* row_alpha = row_sum + kBr;

  const int tid = threadIdx.x;
  const int64_t rho0 = bx * kBr;

  BatchedCopy<kThreads, 8>(
      kBr * d,
      [&](int idx) {
        const int64_t rho = rho0 + idx / d;
        if (rho >= p.rows) return 0.0f;
        const int64_t t = rho / p.group;
        const int64_t h = static_cast<int64_t>(kvh) * p.group + rho % p.group;
        return p.q[t * p.q_ld + h * d + idx % d];
      },
      [&](int idx, float v) { q_tile[(idx / d) * qs + idx % d] = v; });
  if (tid < kBr) {
    row_max[tid] = -INFINITY;
    row_sum[tid] = 0.0f;
  }

  const int64_t last_rho = (rho0 + kBr < p.rows ? rho0 + kBr : p.rows) - 1;
  const int64_t last_pos = p.past + last_rho / p.group;
  const int64_t k_begin = split * p.split_keys;
  const int64_t split_end = k_begin + p.split_keys;
  const int64_t k_end = split_end < last_pos + 1 ? split_end : last_pos + 1;

  // Register tiles (every element still reduces in the same order, whatever the tiling).
  // Scores: rows sg * kScoreRows + r, columns cg + kScoreColGroups * j.
  const int sg = tid / kScoreColGroups;
  const int cg = tid % kScoreColGroups;
  // Output: rows og * kOutRows + r, dims dg + kDimGroups * i.
  const int og = tid / kDimGroups;
  const int dg = tid % kDimGroups;
  int64_t score_pos[kScoreRows];
#pragma unroll
  for (int r = 0; r < kScoreRows; ++r) {
    const int64_t rho = rho0 + sg * kScoreRows + r;
    score_pos[r] = rho < p.rows ? p.past + rho / p.group : -1;
  }
  float acc[kOutRows][kDims];
#pragma unroll
  for (int r = 0; r < kOutRows; ++r) {
#pragma unroll
    for (int i = 0; i < kDims; ++i) acc[r][i] = 0.0f;
  }
  __syncthreads();

  for (int64_t kt = k_begin; kt < k_end; kt += kBc) {
    LoadKvTile<kVec>(p, kvh, kt, k_end, k_tile, v_tile);
    __syncthreads();

    {
      float s[kScoreRows][kScoreCols];
#pragma unroll
      for (int r = 0; r < kScoreRows; ++r) {
#pragma unroll
        for (int j = 0; j < kScoreCols; ++j) s[r][j] = 0.0f;
      }
      const float* qr = q_tile + sg * kScoreRows * qs;
      const float* kr = k_tile + cg * qs;
#pragma unroll 2
      for (int x = 0; x < d; ++x) {
        float qv[kScoreRows];
        float kv[kScoreCols];
#pragma unroll
        for (int r = 0; r < kScoreRows; ++r) qv[r] = qr[r * qs + x];
#pragma unroll
        for (int j = 0; j < kScoreCols; ++j) kv[j] = kr[j * kScoreColGroups * qs + x];
#pragma unroll
        for (int r = 0; r < kScoreRows; ++r) {
#pragma unroll
          for (int j = 0; j < kScoreCols; ++j) s[r][j] = fmaf(qv[r], kv[j], s[r][j]);
        }
      }
#pragma unroll
      for (int r = 0; r < kScoreRows; ++r) {
#pragma unroll
        for (int j = 0; j < kScoreCols; ++j) {
          const int c = cg + kScoreColGroups * j;
          const int64_t key = kt + c;
          s_tile[(sg * kScoreRows + r) * (kBc + 1) + c] =
              key <= score_pos[r] && key < split_end ? s[r][j] * p.scale : -INFINITY;
        }
      }
    }
    __syncthreads();

    if (tid < kBr) {
      float* sr_row = s_tile + tid * (kBc + 1);
      float mx = -INFINITY;
      for (int c = 0; c < kBc; ++c) mx = fmaxf(mx, sr_row[c]);
      if (mx == -INFINITY) {
        row_alpha[tid] = kSkipTile;
      } else {
        const float m_old = row_max[tid];
        const float m_new = fmaxf(m_old, mx);
        const float alpha = expf(m_old - m_new);  // 0 when m_old is -inf.
        float sum = 0.0f;
        for (int c = 0; c < kBc; ++c) {
          const float pv = expf(sr_row[c] - m_new);
          sr_row[c] = pv;
          sum += pv;
        }
        row_sum[tid] = row_sum[tid] * alpha + sum;
        row_max[tid] = m_new;
        row_alpha[tid] = alpha;
      }
    }
    __syncthreads();

    {
      bool take[kOutRows];
#pragma unroll
      for (int r = 0; r < kOutRows; ++r) {
        const float alpha = row_alpha[og * kOutRows + r];
        take[r] = alpha != kSkipTile;
#pragma unroll
        for (int i = 0; i < kDims; ++i) acc[r][i] *= take[r] ? alpha : 1.0f;
      }
      for (int c = 0; c < kBc; ++c) {
        float pv[kOutRows];
#pragma unroll
        for (int r = 0; r < kOutRows; ++r) pv[r] = s_tile[(og * kOutRows + r) * (kBc + 1) + c];
        const float* vr = v_tile + c * d;
#pragma unroll
        for (int i = 0; i < kDims; ++i) {
          const int dim = dg + kDimGroups * i;
          const float vv = dim < d ? vr[dim] : 0.0f;
#pragma unroll
          for (int r = 0; r < kOutRows; ++r) {
            if (take[r]) acc[r][i] = fmaf(pv[r], vv, acc[r][i]);
          }
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < kOutRows; ++r) {
    const int row = og * kOutRows + r;
    const int64_t rho = rho0 + row;
    if (rho >= p.rows) continue;
    if (p.part_o != nullptr) {
      const int64_t base = (split * p.kv_heads + kvh) * p.rows + rho;
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        const int dim = dg + kDimGroups * i;
        if (dim < d) p.part_o[base * d + dim] = acc[r][i];
      }
      if (dg == 0) {
        p.part_m[base] = row_max[row];
        p.part_l[base] = row_sum[row];
      }
      continue;
    }
    const int64_t t = rho / p.group;
    const int64_t h = static_cast<int64_t>(kvh) * p.group + rho % p.group;
    const float inv = 1.0f / row_sum[row];
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int dim = dg + kDimGroups * i;
      if (dim < d) p.out[t * p.q_ld + h * d + dim] = acc[r][i] * inv;
    }
  }
}

template <int kMaxD, int kBr, bool kVec>
__global__ void __launch_bounds__(kThreads) AttentionKernel(Params p) {
  KernelEntry();
  AttentionBlock<kMaxD, kBr, kVec>(p, blockIdx.x, blockIdx.y, blockIdx.z);
}

// Calls per launch of the batched split path: their parameters stay well under the 4 KiB a
// kernel's parameters may take.
constexpr int kMaxBatch = 16;
// Calls times key ranges of one batched launch (its grid's z).
constexpr int64_t kMaxGridZ = 65535;
struct ParamsBatch {
  Params seq[kMaxBatch];
  int64_t splits[kMaxBatch];
};

// Call blockIdx.z / max_splits of the batch, key range blockIdx.z % max_splits: the blocks of
// its own launch, the others exit.
template <int kMaxD, int kBr, bool kVec>
__global__ void __launch_bounds__(kThreads)
    AttentionBatchKernel(ParamsBatch b, int64_t max_splits) {
  KernelEntry();
  const int64_t seq = blockIdx.z / max_splits;
  const int64_t split = blockIdx.z % max_splits;
  const Params& p = b.seq[seq];
  if (split >= b.splits[seq] || static_cast<int64_t>(blockIdx.x) * kBr >= p.rows) return;
  AttentionBlock<kMaxD, kBr, kVec>(p, blockIdx.x, blockIdx.y, split);
}

// The decode blocks (attention_decode_variant 1 to 3; NVIDIA): the split path's blocks of at
// most kNarrowRows rows (variants 2 and 3: kDecodeFewRows where a call has no more, or with
// variant 3 where the device would otherwise have idle multiprocessors) with
// AttentionBlock's arithmetic, restructured for latency. A tile's keys and values come in by
// asynchronous copies (`cp.async`, one batch each, zeros past k_end) into one key and one value
// buffer, the next tile's keys while this tile's values are multiplied and its next values
// while the next scores are computed; warp w scores rows w and w + 4 (w alone in blocks of
// kDecodeFewRows rows; warps with no row in use skip the scores) with lane c taking key c, so a
// score is one thread's chain over d as before, and the loops carry no branch (rows not in use
// or skipped run on zeros or keep their value), so that several steps' shared-memory loads go
// out together; the tile's maximum is a shuffle tree (a maximum has no rounding) and the
// weights' exps run on every lane at once; the tile's sum is still one chain in key order (each
// lane adds the 32 weights by shuffles, in order). Per element the same operations on the same
// values as AttentionBlock: the same bits (tested).
constexpr int kDecodeThreads = 128;
// Row stride of the Q and K buffers: 16-byte aligned for the copies, and rows 4 banks apart, so
// a warp's 16-byte reads of 8 consecutive keys' rows hit distinct banks.
constexpr int kDecodePad = 4;
static_assert(kBc == 32, "a lane a key");

// Shared floats of a decode block of kRows rows (kNarrowRows or kDecodeFewRows).
template <int kRows>
size_t DecodeSharedFloats(int d) {
  const size_t ks = static_cast<size_t>(d) + kDecodePad;
  return kRows * ks + kBc * ks + static_cast<size_t>(kBc) * d + kRows * kBc + kRows;
}
// The smaller decode block (attention_decode_variant 3, or 2 for calls of at most this many rows
// a kv head: one token at a GQA group of up to 4): a row a warp, so no arithmetic on unused rows.
constexpr int kDecodeFewRows = 4;

// (The constants above also serve the host code below that picks the blocks on every platform.)
#if !defined(__HIP_PLATFORM_AMD__)
constexpr int kDecodeWarps = kDecodeThreads / 32;
// 16 bytes from global `src` into shared `dst` without passing through registers; zeros where
// `valid` is false (then nothing is read).
__device__ inline void DecodeCopy16(float* dst, const float* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned int to = static_cast<unsigned int>(__cvta_generic_to_shared(dst));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(n));
#else
  for (int i = 0; i < 4; ++i) dst[i] = valid ? src[i] : 0.0f;
#endif
}
__device__ inline void DecodeCommit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most kPending of this thread's copy groups are in flight.
template <int kPending>
__device__ inline void DecodeWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

// This thread's share of a tile copy, worked out once a block: where the threads divide a row's
// 16-byte pieces evenly (d / 4 divides kDecodeThreads: d 16, 32, 64, 128, 256, ...) each thread
// copies the same piece `x` of keys first, first + step, ..., with no division a copy;
// otherwise (`even` false) the copies walk the tile's pieces in turn.
struct DecodeCopyShare {
  bool even;
  int first;
  int step;
  int x;
};
__device__ inline DecodeCopyShare DecodeShareOf(int d) {
  const int per_row = d / 4;
  DecodeCopyShare s;
  s.even = kDecodeThreads % per_row == 0;
  s.first = s.even ? static_cast<int>(threadIdx.x) / per_row : 0;
  s.step = s.even ? kDecodeThreads / per_row : 0;
  s.x = s.even ? (static_cast<int>(threadIdx.x) % per_row) * 4 : 0;
  return s;
}

// Copies keys [kt, kt + kBc) of kv head `kvh` (rows `ld` floats apart in `src`) into `dst`
// (row stride `ds`), zeros from k_end on; one copy group.
__device__ inline void DecodeCopyTile(const float* src, int64_t ld, int kvh, int d, int64_t kt,
                                      int64_t k_end, float* dst, int ds,
                                      const DecodeCopyShare& share) {
  const float* head = src + static_cast<int64_t>(kvh) * d;
  if (share.even) {
    for (int c = share.first; c < kBc; c += share.step) {
      const bool valid = kt + c < k_end;
      const float* from = valid ? head + (kt + c) * ld + share.x : src;
      DecodeCopy16(dst + c * ds + share.x, from, valid);
    }
  } else {
    const int per_row = d / 4;
    const int n = kBc * per_row;
    for (int idx = threadIdx.x; idx < n; idx += kDecodeThreads) {
      const int c = idx / per_row;
      const int x = (idx % per_row) * 4;
      const bool valid = kt + c < k_end;
      const float* from = valid ? head + (kt + c) * ld + x : src;
      DecodeCopy16(dst + c * ds + x, from, valid);
    }
  }
  DecodeCommit();
}

// The block of rows [bx * kRows, ...) of kv head `kvh` over key ranges split0, split0 + 1, ...
// (`ranges` of them, those below `splits`; split path only: writes each range's part_o, part_m
// and part_l). A range's tiles and arithmetic are those of a block of that range alone, its
// running maximum, sum and output starting afresh; the copies run on across a range's end, the
// next range's first tile coming in while this range's last is computed. Needs VecLoads(p).
// Warp w takes rows w, w + kDecodeWarps, ...
template <int kMaxD, int kRows>
__device__ void AttentionDecodeBlock(const Params& p, int64_t bx, int kvh, int64_t split0,
                                     int ranges, int64_t splits) {
  constexpr int kDims = (kMaxD + kDecodeThreads - 1) / kDecodeThreads;
  constexpr int kRowsPerWarp = kRows / kDecodeWarps;
  static_assert(kRows % 4 == 0 && kRowsPerWarp >= 1 && kRowsPerWarp <= 2,
                "one or two rows a warp, a key's weights in float4s");
  extern __shared__ float4 decode_smem4[];
  float* const smem = reinterpret_cast<float*>(decode_smem4);
  const int d = p.d;
  const int ks = d + kDecodePad;
  float* q_tile = smem;                  // [kRows][ks]
  float* k_tile = q_tile + kRows * ks;   // [kBc][ks]
  float* v_tile = k_tile + kBc * ks;     // [kBc][d]
  float* w_tile = v_tile + kBc * d;      // [kBc][kRows]: the tile's weights
  float* alphas = w_tile + kBc * kRows;  // [kRows]: scale, or kSkipTile
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int64_t rho0 = bx * kRows;
  const int live = static_cast<int>(p.rows - rho0 < kRows ? p.rows - rho0 : kRows);
  const int64_t last_pos = p.past + (rho0 + live - 1) / p.group;
  if (split0 + ranges > splits) ranges = static_cast<int>(splits - split0);
  // The block's keys: its ranges' keys up to the last visible one. Tiles never straddle two
  // ranges (split_keys is a multiple of kBc), and keys past span_end are zeros as past k_end.
  const int64_t span_begin = split0 * p.split_keys;
  const int64_t ranges_end = span_begin + ranges * p.split_keys;
  const int64_t span_end = ranges_end < last_pos + 1 ? ranges_end : last_pos + 1;
  const DecodeCopyShare share = DecodeShareOf(d);

  if (span_begin < span_end) {
    DecodeCopyTile(p.k, p.kv_ld, kvh, d, span_begin, span_end, k_tile, ks, share);
    DecodeCopyTile(p.v, p.kv_ld, kvh, d, span_begin, span_end, v_tile, d, share);
  }
  // The rows' queries: a row's token and head worked out once (no division a value).
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float* qr = nullptr;
    if (r < live) {
      const int64_t rho = rho0 + r;
      const int64_t t = rho / p.group;
      const int64_t h = static_cast<int64_t>(kvh) * p.group + rho % p.group;
      qr = p.q + t * p.q_ld + h * d;
    }
    for (int x = tid; x < d; x += kDecodeThreads) q_tile[r * ks + x] = r < live ? qr[x] : 0.0f;
  }

  // Warp w's rows w + kDecodeWarps * j: running maximum and sum (the same in every lane).
  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp];
  int64_t pos[kRowsPerWarp];
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int r = warp + kDecodeWarps * j;
    pos[j] = r < live ? p.past + (rho0 + r) / p.group : -1;
  }
  // Output: row r, dims tid + kDecodeThreads * i.
  float acc[kRows][kDims];

  for (int64_t split = split0; split < split0 + ranges; ++split) {
    const int64_t k_begin = split * p.split_keys;
    const int64_t split_end = k_begin + p.split_keys;
    const int64_t k_end = split_end < span_end ? split_end : span_end;
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      row_max[j] = -INFINITY;
      row_sum[j] = 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[r][i] = 0.0f;
    }

    for (int64_t kt = k_begin; kt < k_end; kt += kBc) {
      // The block's next tile, in this range or the next one.
      const bool more = kt + kBc < span_end;
      DecodeWait<1>();  // This tile's keys (its values may still be in flight).
      __syncthreads();
      {
        const int c = lane;
        const int64_t key = kt + c;
        const float* kr = k_tile + c * ks;
        float s[kRowsPerWarp];
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) s[j] = 0.0f;
        // The warp's rows without a branch in the loop (a row not in use holds zeros and its
        // score is dropped), so that the loads of several steps go out together.
        if (warp < live) {
          const float* qr[kRowsPerWarp];
#pragma unroll
          for (int j = 0; j < kRowsPerWarp; ++j) qr[j] = q_tile + (warp + kDecodeWarps * j) * ks;
#pragma unroll 8
          for (int x = 0; x < d; x += 4) {
            const float4 kv = *reinterpret_cast<const float4*>(kr + x);
            float4 a[kRowsPerWarp];
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j) {
              a[j] = *reinterpret_cast<const float4*>(qr[j] + x);
            }
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j) s[j] = fmaf(a[j].x, kv.x, s[j]);
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j) s[j] = fmaf(a[j].y, kv.y, s[j]);
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j) s[j] = fmaf(a[j].z, kv.z, s[j]);
#pragma unroll
            for (int j = 0; j < kRowsPerWarp; ++j) s[j] = fmaf(a[j].w, kv.w, s[j]);
          }
        }
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) {
          const int r = warp + kDecodeWarps * j;
          if (r >= live) continue;
          // The rounded product and difference AttentionBlock computes (through shared memory
          // there): spelled out so that neither is fused into a multiply-add here.
          const float sv =
              key <= pos[j] && key < split_end ? __fmul_rn(s[j], p.scale) : -INFINITY;
          float mx = sv;
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
          if (mx == -INFINITY) {
            if (lane == 0) alphas[r] = kSkipTile;
            continue;
          }
          const float m_new = fmaxf(row_max[j], mx);
          const float alpha = expf(row_max[j] - m_new);  // 0 when the old maximum is -inf.
          const float pv = expf(__fsub_rn(sv, m_new));
          float sum = 0.0f;
#pragma unroll
          for (int e = 0; e < kBc; ++e) sum += __shfl_sync(0xffffffffu, pv, e);
          row_sum[j] = fmaf(row_sum[j], alpha, sum);  // AttentionBlock's contracted update.
          row_max[j] = m_new;
          w_tile[c * kRows + r] = pv;
          if (lane == 0) alphas[r] = alpha;
        }
      }
      __syncthreads();  // The keys are read: the next tile's may come in.
      if (more) DecodeCopyTile(p.k, p.kv_ld, kvh, d, kt + kBc, span_end, k_tile, ks, share);
      if (more) {
        DecodeWait<1>();  // This tile's values (the next keys may still be in flight).
      } else {
        DecodeWait<0>();
      }
      __syncthreads();
      {
        bool take[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float alpha = r < live ? alphas[r] : kSkipTile;
          take[r] = alpha != kSkipTile;
#pragma unroll
          for (int i = 0; i < kDims; ++i) acc[r][i] *= take[r] ? alpha : 1.0f;
        }
#pragma unroll 8
        for (int c = 0; c < kBc; ++c) {
          float pv[kRows];
#pragma unroll
          for (int g = 0; g < kRows / 4; ++g) {
            const float4 w = *reinterpret_cast<const float4*>(w_tile + c * kRows + 4 * g);
            pv[4 * g] = w.x;
            pv[4 * g + 1] = w.y;
            pv[4 * g + 2] = w.z;
            pv[4 * g + 3] = w.w;
          }
          const float* vr = v_tile + c * d;
          float vv[kDims];
#pragma unroll
          for (int i = 0; i < kDims; ++i) {
            const int dim = tid + kDecodeThreads * i;
            vv[i] = dim < d ? vr[dim] : 0.0f;
          }
          // Every row without a branch (a skipped row keeps its value), as for the scores.
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
#pragma unroll
            for (int i = 0; i < kDims; ++i) {
              const float a = fmaf(pv[r], vv[i], acc[r][i]);
              acc[r][i] = take[r] ? a : acc[r][i];
            }
          }
        }
      }
      __syncthreads();  // The values and weights are read.
      if (more) DecodeCopyTile(p.v, p.kv_ld, kvh, d, kt + kBc, span_end, v_tile, d, share);
    }

#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= live) continue;
      const int64_t base = (split * p.kv_heads + kvh) * p.rows + rho0 + r;
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        const int dim = tid + kDecodeThreads * i;
        if (dim < d) p.part_o[base * d + dim] = acc[r][i];
      }
    }
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const int r = warp + kDecodeWarps * j;
      if (r < live && lane == 0) {
        const int64_t base = (split * p.kv_heads + kvh) * p.rows + rho0 + r;
        p.part_m[base] = row_max[j];
        p.part_l[base] = row_sum[j];
      }
    }
  }
}

// Block z takes ranges z * ranges, ... of `splits`.
template <int kMaxD, int kRows>
__global__ void __launch_bounds__(kDecodeThreads)
    AttentionDecodeKernel(Params p, int ranges, int64_t splits) {
  KernelEntry();
  AttentionDecodeBlock<kMaxD, kRows>(p, blockIdx.x, blockIdx.y,
                                     static_cast<int64_t>(blockIdx.z) * ranges, ranges, splits);
}

// Block z takes sequence z / groups, its ranges (z % groups) * ranges, ...
template <int kMaxD, int kRows>
__global__ void __launch_bounds__(kDecodeThreads)
    AttentionDecodeBatchKernel(ParamsBatch b, int64_t groups, int ranges) {
  KernelEntry();
  const int64_t seq = blockIdx.z / groups;
  const int64_t split0 = (blockIdx.z % groups) * ranges;
  const Params& p = b.seq[seq];
  if (split0 >= b.splits[seq] || static_cast<int64_t>(blockIdx.x) * kRows >= p.rows) return;
  AttentionDecodeBlock<kMaxD, kRows>(p, blockIdx.x, blockIdx.y, split0, ranges, b.splits[seq]);
}
inline constexpr bool kDecodeBlocks = true;
#else
inline constexpr bool kDecodeBlocks = false;
#endif  // !__HIP_PLATFORM_AMD__

// Marks a range without a visible key in the merge weights.
constexpr float kEmptyRange = -1.0f;

// One block per (row, kv head, slice of kMergeDims dims): merges the ranges, skipping those
// without a key (so the ranges past a row's position, which other rows of the call may need,
// change nothing). The sums have a fixed shape: lane l (of kMergeLanes) adds the ranges l,
// l + kMergeLanes, ... in order, then the lanes' sums are added in lane order, a lane without a
// range skipped; range s always lands in lane s % kMergeLanes, so a row's bits depend on its
// visible ranges alone, not on how many ranges the call has. Shared: per range its weight
// e^{m_s - max} and its sum l_s.
__device__ void MergeBlock(const Params& p, int64_t splits, int64_t rho, int kvh, int zslice) {
  extern __shared__ float merge_smem[];
  float* weights = merge_smem;
  float* sums = merge_smem + splits;
  __shared__ float scratch[kMergeThreads];
  __shared__ float lane_o[kMergeLanes][kMergeDims];
  __shared__ float lane_total[kMergeLanes];
  __shared__ int lane_has[kMergeLanes];
  const int d = p.d;
  const int tid = threadIdx.x;
  const int lane = tid / kMergeDims;
  const int di = tid % kMergeDims;
  auto base = [&](int64_t s) { return (s * p.kv_heads + kvh) * p.rows + rho; };
  float mx = -INFINITY;
  for (int64_t s = tid; s < splits; s += kMergeThreads) mx = fmaxf(mx, p.part_m[base(s)]);
  scratch[tid] = mx;
  __syncthreads();
  for (int w = kMergeThreads / 2; w > 0; w >>= 1) {
    if (tid < w) scratch[tid] = fmaxf(scratch[tid], scratch[tid + w]);
    __syncthreads();
  }
  mx = scratch[0];
  for (int64_t s = tid; s < splits; s += kMergeThreads) {
    const float m = p.part_m[base(s)];
    weights[s] = m == -INFINITY ? kEmptyRange : expf(m - mx);
    sums[s] = p.part_l[base(s)];
  }
  __syncthreads();
  if (tid < kMergeLanes) {
    float sum = 0.0f;
    int has = 0;
    for (int64_t s = tid; s < splits; s += kMergeLanes) {
      if (weights[s] != kEmptyRange) {
        sum = fmaf(sums[s], weights[s], sum);
        has = 1;
      }
    }
    lane_total[tid] = sum;
    lane_has[tid] = has;
  }
  const int dim = zslice * kMergeDims + di;
  float o = 0.0f;
  if (dim < d) {
#pragma unroll 8
    for (int64_t s = lane; s < splits; s += kMergeLanes) {
      const float w = weights[s];
      const float po = p.part_o[base(s) * d + dim];
      if (w != kEmptyRange) o = fmaf(po, w, o);
    }
  }
  lane_o[lane][di] = o;
  __syncthreads();
  if (lane != 0 || dim >= d) return;
  float total = 0.0f;
  float out = 0.0f;
  bool any = false;
  for (int l = 0; l < kMergeLanes; ++l) {
    if (!lane_has[l]) continue;
    total = any ? total + lane_total[l] : lane_total[l];
    out = any ? out + lane_o[l][di] : lane_o[l][di];
    any = true;
  }
  const int64_t t = rho / p.group;
  const int64_t h = static_cast<int64_t>(kvh) * p.group + rho % p.group;
  p.out[t * p.q_ld + h * d + dim] = out * (1.0f / total);
}

__global__ void __launch_bounds__(kMergeThreads) MergeSplitsKernel(Params p, int64_t splits) {
  KernelEntry();
  MergeBlock(p, splits, blockIdx.x, blockIdx.y, blockIdx.z);
}

// Call blockIdx.z / dim_slices of the batch: the blocks of its own merge, the others exit.
__global__ void __launch_bounds__(kMergeThreads)
    MergeSplitsBatchKernel(ParamsBatch b, int dim_slices) {
  KernelEntry();
  const int seq = blockIdx.z / dim_slices;
  const Params& p = b.seq[seq];
  if (static_cast<int64_t>(blockIdx.x) >= p.rows) return;
  MergeBlock(p, b.splits[seq], blockIdx.x, blockIdx.y, blockIdx.z % dim_slices);
}

int64_t Splits(const AttentionLaunch& a) {
  return a.split_keys > 0 ? CeilDiv(a.past + a.tokens, a.split_keys) : 1;
}

bool VecLoads(const Params& p) {
  return p.d % 4 == 0 && p.kv_ld % 4 == 0 && reinterpret_cast<uintptr_t>(p.k) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.v) % 16 == 0;
}

template <int kMaxD, int kBr, bool kVec>
hipError_t LaunchTiles(const Params& p, int64_t splits, hipStream_t stream) {
  const size_t shared = SharedFloats(p.d, kBr) * sizeof(float);
  hipError_t e = AllowSharedBytes(AttentionKernel<kMaxD, kBr, kVec>, shared);
  if (e != hipSuccess) return e;
  const dim3 grid(static_cast<unsigned int>(CeilDiv(p.rows, kBr)),
                  static_cast<unsigned int>(p.kv_heads), static_cast<unsigned int>(splits));
  LaunchKernel(AttentionKernel<kMaxD, kBr, kVec>, grid, kThreads, shared, stream, p);
  return hipGetLastError();
}

// Whether the decode blocks (AttentionDecodeBlock) take a split-path launch whose calls have at
// most `max_rows` rows a kv head and 16-byte loads.
bool DecodeBlocks(int decode_variant, bool vec, int64_t max_rows) {
  return decode_variant >= 1 && kDecodeBlocks && vec && max_rows <= kNarrowRows;
}
// Whether those blocks take kDecodeFewRows rows rather than kNarrowRows: variant 2 where a call
// has no more; variant 3 also where blocks of kNarrowRows rows (`narrow_blocks` of them at one
// range a block) would leave some of the device's `multiprocessors` without one and every
// sequence of the call is one token (`one_token`), a kv head's rows then in two blocks. The
// rows of one token share their position, so both blocks copy the same keys and values (a
// block's span ends at its last row's last visible key) and a row's arithmetic is the one
// block's; rows of several tokens in two blocks would see different zeros past a span's end.
bool DecodeFewRows(int decode_variant, int64_t max_rows, int64_t narrow_blocks,
                   int multiprocessors, bool one_token) {
  if (decode_variant < 2) return false;
  return max_rows <= kDecodeFewRows ||
         (decode_variant == 3 && one_token &&
          narrow_blocks < static_cast<int64_t>(multiprocessors));
}

// Key ranges a block of `kernel` (kDecodeThreads threads, `shared` bytes of dynamic shared
// memory) takes (AttentionDecodeSpread): `blocks_of(r)` is the launch's blocks at r ranges a
// block. The blocks a multiprocessor holds come from the runtime's occupancy calculator
// (registers, shared memory and threads); where it has no answer, one range a block.
template <typename Kernel, typename BlocksOf>
int DecodeRangesPerBlock(const AttentionDecodeSpread& spread, Kernel kernel, size_t shared,
                         const BlocksOf& blocks_of) {
  if (spread.ranges_per_block > 0) return spread.ranges_per_block;
  int per = 0;
  if (spread.multiprocessors <= 0 ||
      hipOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, kDecodeThreads, shared) !=
          hipSuccess ||
      per <= 0) {
    static_cast<void>(hipGetLastError());  // Not the launch's error.
    return 1;
  }
  const int64_t wave = static_cast<int64_t>(per) * spread.multiprocessors;
  int ranges = 1;
  while (ranges < kAttentionDecodeMaxRangesPerBlock &&
         blocks_of(2 * ranges) >= spread.min_waves * wave) {
    ranges *= 2;
  }
  return ranges;
}

template <int kMaxD, int kRows>
hipError_t LaunchDecodeRows(const Params& p, int64_t splits, const AttentionDecodeSpread& spread,
                            hipStream_t stream) {
#if !defined(__HIP_PLATFORM_AMD__)
  const size_t shared = DecodeSharedFloats<kRows>(p.d) * sizeof(float);
  hipError_t e = AllowSharedBytes(AttentionDecodeKernel<kMaxD, kRows>, shared);
  if (e != hipSuccess) return e;
  const int64_t row_blocks = CeilDiv(p.rows, kRows) * p.kv_heads;
  const int ranges =
      DecodeRangesPerBlock(spread, AttentionDecodeKernel<kMaxD, kRows>, shared,
                           [&](int r) { return row_blocks * CeilDiv(splits, r); });
  const dim3 grid(static_cast<unsigned int>(CeilDiv(p.rows, kRows)),
                  static_cast<unsigned int>(p.kv_heads),
                  static_cast<unsigned int>(CeilDiv(splits, ranges)));
  LaunchKernel(AttentionDecodeKernel<kMaxD, kRows>, grid, kDecodeThreads, shared, stream, p,
               ranges, splits);
  return hipGetLastError();
#else
  return hipErrorNotSupported;
#endif
}

template <int kMaxD>
hipError_t LaunchDecode(const Params& p, int64_t splits, int decode_variant,
                        const AttentionDecodeSpread& spread, hipStream_t stream) {
  const int64_t narrow_blocks = CeilDiv(p.rows, kNarrowRows) * p.kv_heads * splits;
  return DecodeFewRows(decode_variant, p.rows, narrow_blocks, spread.multiprocessors,
                       p.rows == p.group)
             ? LaunchDecodeRows<kMaxD, kDecodeFewRows>(p, splits, spread, stream)
             : LaunchDecodeRows<kMaxD, kNarrowRows>(p, splits, spread, stream);
}

template <int kMaxD>
hipError_t Launch(const Params& p, int64_t splits, int decode_variant,
                  const AttentionDecodeSpread& spread, hipStream_t stream) {
  const bool vec = VecLoads(p);
  hipError_t e;
  if (p.part_o != nullptr && DecodeBlocks(decode_variant, vec, p.rows)) {
    e = LaunchDecode<kMaxD>(p, splits, decode_variant, spread, stream);
  } else if (p.rows <= kNarrowRows) {
    e = vec ? LaunchTiles<kMaxD, kNarrowRows, true>(p, splits, stream)
            : LaunchTiles<kMaxD, kNarrowRows, false>(p, splits, stream);
  } else {
    e = vec ? LaunchTiles<kMaxD, kWideRows, true>(p, splits, stream)
            : LaunchTiles<kMaxD, kWideRows, false>(p, splits, stream);
  }
  if (e != hipSuccess || p.part_o == nullptr) return e;
  const dim3 merge_grid(static_cast<unsigned int>(p.rows), static_cast<unsigned int>(p.kv_heads),
                        static_cast<unsigned int>(CeilDiv(p.d, kMergeDims)));
  const size_t merge_shared = 2 * static_cast<size_t>(splits) * sizeof(float);
  e = AllowSharedBytes(MergeSplitsKernel, merge_shared);
  if (e != hipSuccess) return e;
  LaunchKernel(MergeSplitsKernel, merge_grid, kMergeThreads, merge_shared, stream, p, splits);
  return hipGetLastError();
}

}  // namespace

int AttentionMaxHeadDim() { return kMaxHeadDim; }
int AttentionKeyTile() { return kBc; }
int64_t AttentionMaxSplits() { return kMaxSplits; }
size_t AttentionSharedBytes(int head_dim) {
  return SharedFloats(head_dim, kWideRows) * sizeof(float);
}

int64_t AttentionWorkspaceFloats(const AttentionLaunch& a) {
  if (a.split_keys <= 0) return 0;
  const int64_t rows = a.tokens * (a.q_heads / a.kv_heads);
  return Splits(a) * a.kv_heads * rows * (a.head_dim + 2);
}

namespace {

// The kernels' parameters of one call; split-path partial results at `workspace`.
Params ParamsOf(const AttentionLaunch& a, float* workspace) {
  Params p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.out = a.out;
  p.past = a.past;
  p.group = a.q_heads / a.kv_heads;
  p.rows = a.tokens * p.group;
  p.kv_heads = a.kv_heads;
  p.d = a.head_dim;
  p.scale = a.scale;
  p.q_ld = static_cast<int64_t>(a.q_heads) * a.head_dim;
  p.kv_ld = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  const int64_t splits = Splits(a);
  if (a.split_keys > 0) {
    p.split_keys = a.split_keys;
    const int64_t n = splits * a.kv_heads * p.rows;
    p.part_o = workspace;
    p.part_m = workspace + n * a.head_dim;
    p.part_l = p.part_m + n;
  } else {
    p.split_keys = a.past + a.tokens;
    p.part_o = nullptr;
    p.part_m = nullptr;
    p.part_l = nullptr;
  }
  return p;
}

template <int kMaxD, int kBr, bool kVec>
hipError_t LaunchBatchTiles(const ParamsBatch& b, int count, int64_t max_rows, int64_t max_splits,
                            hipStream_t stream) {
  const size_t shared = SharedFloats(b.seq[0].d, kBr) * sizeof(float);
  hipError_t e = AllowSharedBytes(AttentionBatchKernel<kMaxD, kBr, kVec>, shared);
  if (e != hipSuccess) return e;
  const dim3 grid(static_cast<unsigned int>(CeilDiv(max_rows, kBr)),
                  static_cast<unsigned int>(b.seq[0].kv_heads),
                  static_cast<unsigned int>(count * max_splits));
  LaunchKernel(AttentionBatchKernel<kMaxD, kBr, kVec>, grid, kThreads, shared, stream, b,
               max_splits);
  return hipGetLastError();
}

template <int kMaxD, int kRows>
hipError_t LaunchDecodeBatchRows(const ParamsBatch& b, int count, int64_t max_rows,
                                 int64_t max_splits, const AttentionDecodeSpread& spread,
                                 hipStream_t stream) {
#if !defined(__HIP_PLATFORM_AMD__)
  const size_t shared = DecodeSharedFloats<kRows>(b.seq[0].d) * sizeof(float);
  hipError_t e = AllowSharedBytes(AttentionDecodeBatchKernel<kMaxD, kRows>, shared);
  if (e != hipSuccess) return e;
  // The blocks that run (those past a sequence's ranges return at once).
  const auto blocks_of = [&](int r) {
    int64_t blocks = 0;
    for (int i = 0; i < count; ++i) {
      blocks += CeilDiv(b.seq[i].rows, kRows) * b.seq[i].kv_heads * CeilDiv(b.splits[i], r);
    }
    return blocks;
  };
  const int ranges =
      DecodeRangesPerBlock(spread, AttentionDecodeBatchKernel<kMaxD, kRows>, shared, blocks_of);
  const int64_t groups = CeilDiv(max_splits, ranges);
  const dim3 grid(static_cast<unsigned int>(CeilDiv(max_rows, kRows)),
                  static_cast<unsigned int>(b.seq[0].kv_heads),
                  static_cast<unsigned int>(count * groups));
  LaunchKernel(AttentionDecodeBatchKernel<kMaxD, kRows>, grid, kDecodeThreads, shared, stream, b,
               groups, ranges);
  return hipGetLastError();
#else
  return hipErrorNotSupported;
#endif
}

template <int kMaxD>
hipError_t LaunchDecodeBatch(const ParamsBatch& b, int count, int64_t max_rows,
                             int64_t max_splits, int decode_variant,
                             const AttentionDecodeSpread& spread, hipStream_t stream) {
  int64_t narrow_blocks = 0;
  bool one_token = true;
  for (int i = 0; i < count; ++i) {
    narrow_blocks += CeilDiv(b.seq[i].rows, kNarrowRows) * b.seq[i].kv_heads * b.splits[i];
    one_token = one_token && b.seq[i].rows == b.seq[i].group;
  }
  return DecodeFewRows(decode_variant, max_rows, narrow_blocks, spread.multiprocessors,
                       one_token)
             ? LaunchDecodeBatchRows<kMaxD, kDecodeFewRows>(b, count, max_rows, max_splits,
                                                             spread, stream)
             : LaunchDecodeBatchRows<kMaxD, kNarrowRows>(b, count, max_rows, max_splits, spread,
                                                         stream);
}

template <int kMaxD>
hipError_t LaunchBatch(const ParamsBatch& b, int count, bool vec, int64_t max_rows,
                       int64_t max_splits, int decode_variant,
                       const AttentionDecodeSpread& spread, hipStream_t stream) {
  hipError_t e;
  if (DecodeBlocks(decode_variant, vec, max_rows)) {
    e = LaunchDecodeBatch<kMaxD>(b, count, max_rows, max_splits, decode_variant, spread, stream);
  } else if (max_rows <= kNarrowRows) {
    e = vec ? LaunchBatchTiles<kMaxD, kNarrowRows, true>(b, count, max_rows, max_splits, stream)
            : LaunchBatchTiles<kMaxD, kNarrowRows, false>(b, count, max_rows, max_splits, stream);
  } else {
    e = vec ? LaunchBatchTiles<kMaxD, kWideRows, true>(b, count, max_rows, max_splits, stream)
            : LaunchBatchTiles<kMaxD, kWideRows, false>(b, count, max_rows, max_splits, stream);
  }
  if (e != hipSuccess) return e;
  const int dim_slices = static_cast<int>(CeilDiv(b.seq[0].d, kMergeDims));
  const dim3 merge_grid(static_cast<unsigned int>(max_rows),
                        static_cast<unsigned int>(b.seq[0].kv_heads),
                        static_cast<unsigned int>(count * dim_slices));
  const size_t merge_shared = 2 * static_cast<size_t>(max_splits) * sizeof(float);
  e = AllowSharedBytes(MergeSplitsBatchKernel, merge_shared);
  if (e != hipSuccess) return e;
  LaunchKernel(MergeSplitsBatchKernel, merge_grid, kMergeThreads, merge_shared, stream, b,
               dim_slices);
  return hipGetLastError();
}

}  // namespace

namespace {
bool ValidSpread(const AttentionDecodeSpread& s) {
  return s.ranges_per_block >= 0 && s.ranges_per_block <= kAttentionDecodeMaxRangesPerBlock &&
         (s.ranges_per_block & (s.ranges_per_block - 1)) == 0 && s.min_waves >= 0;
}
}  // namespace

hipError_t Attention(const AttentionLaunch& a, int decode_variant,
                     const AttentionDecodeSpread& spread, float* workspace, hipStream_t stream) {
  if (a.tokens == 0) return hipSuccess;
  if (decode_variant < 0 || decode_variant >= kAttentionDecodeVariants || !ValidSpread(spread)) {
    return hipErrorInvalidValue;
  }
  const Params p = ParamsOf(a, workspace);
  const int64_t splits = Splits(a);
  if (a.head_dim <= 64) return Launch<64>(p, splits, decode_variant, spread, stream);
  if (a.head_dim <= 128) return Launch<128>(p, splits, decode_variant, spread, stream);
  return Launch<256>(p, splits, decode_variant, spread, stream);
}

int AttentionMaxBatch() { return kMaxBatch; }
int64_t AttentionMaxBatchRanges() { return kMaxGridZ; }

hipError_t AttentionSplitBatch(const AttentionLaunch* a, int count, int decode_variant,
                               const AttentionDecodeSpread& spread, float* workspace,
                               hipStream_t stream) {
  if (count <= 0) return hipSuccess;
  if (count > kMaxBatch || decode_variant < 0 || decode_variant >= kAttentionDecodeVariants ||
      !ValidSpread(spread)) {
    return hipErrorInvalidValue;
  }
  ParamsBatch b{};
  int64_t max_rows = 0;
  int64_t max_splits = 0;
  bool vec = true;
  float* ws = workspace;
  for (int i = 0; i < count; ++i) {
    if (a[i].split_keys <= 0 || Splits(a[i]) * count > kMaxGridZ || a[i].tokens <= 0 ||
        a[i].q_heads != a[0].q_heads || a[i].kv_heads != a[0].kv_heads ||
        a[i].head_dim != a[0].head_dim) {
      return hipErrorInvalidValue;
    }
    b.seq[i] = ParamsOf(a[i], ws);
    b.splits[i] = Splits(a[i]);
    ws += AttentionWorkspaceFloats(a[i]);
    max_rows = b.seq[i].rows > max_rows ? b.seq[i].rows : max_rows;
    max_splits = b.splits[i] > max_splits ? b.splits[i] : max_splits;
    vec = vec && VecLoads(b.seq[i]);
  }
  if (a[0].head_dim <= 64) {
    return LaunchBatch<64>(b, count, vec, max_rows, max_splits, decode_variant, spread, stream);
  }
  if (a[0].head_dim <= 128) {
    return LaunchBatch<128>(b, count, vec, max_rows, max_splits, decode_variant, spread, stream);
  }
  return LaunchBatch<256>(b, count, vec, max_rows, max_splits, decode_variant, spread, stream);
}

}  // namespace cairn::infer::hip
