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
//
// The split path's decode blocks (attention_decode_variant 1 to 4, NVIDIA) are in
// attention_decode.hip; what both files share, in attention_device.h.

#include <cmath>
#include <cstdint>

#include "services/infer/kernels/hip/attention_device.h"
#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {
namespace {

using attention::kBc;
using attention::kDecodeBlocks;
using attention::kMaxBatch;
using attention::kNarrowRows;
using attention::kSkipTile;
using attention::kWideRows;
using attention::LaunchDecode;
using attention::LaunchDecodeBatch;
using attention::Params;
using attention::ParamsBatch;

constexpr int kThreads = 128;  // Threads per block.
constexpr int kMaxHeadDim = 256;
// The merge: kMergeDims output dimensions per block, each summed by kMergeLanes threads.
constexpr int kMergeDims = 32;
constexpr int kMergeLanes = 8;
constexpr int kMergeThreads = kMergeDims * kMergeLanes;
// Key ranges one call may have: their merge weights and sums live in shared memory (192 KiB).
constexpr int64_t kMaxSplits = 24576;

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

// Calls times key ranges of one batched launch (its grid's z).
constexpr int64_t kMaxGridZ = 65535;

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
