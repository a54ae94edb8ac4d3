// Element-wise kernels: RoPE (also with the new key and value rows appended to the slots),
// SwiGLU, embedding gathers, row copies and scaled row sums, the head-pair split, gates and MoE
// routing, in grid-stride loops or a block per token; and the overlapped-launch setting. The
// norms: norms.hip; the causal conv: causal_conv.hip.

#include <atomic>
#include <cmath>
#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {
namespace {

// SetOverlappedLaunches' setting; read at every launch, from any thread.
std::atomic<bool> overlapped_launches{false};

// Whether the kernels the device runs wait at entry (KernelEntry's wait is compiled only for
// sm_90 and later; a build whose kernels reach the device as older code, say PTX for sm_80
// compiled there, must not overlap). Defined below, by one kernel's attributes.
bool KernelsWaitAtEntry();

}  // namespace

void SetOverlappedLaunches(bool on) {
  overlapped_launches.store(on && KernelsWaitAtEntry(), std::memory_order_relaxed);
}
bool OverlappedLaunches() { return overlapped_launches.load(std::memory_order_relaxed); }

namespace {
std::atomic<unsigned> early_release{0};  // SetEarlyRelease's mask.
}  // namespace

void SetEarlyRelease(unsigned mask) {
  early_release.store(mask & kReleaseAllKinds, std::memory_order_relaxed);
}
bool EarlyRelease(EarlyReleaseKind kind) {
  return OverlappedLaunches() && (early_release.load(std::memory_order_relaxed) & kind) != 0;
}

namespace {

// One block per token; threads over (head, i < rotary_dim / 2).
__global__ void RopeKernel(float* x, int64_t ld, int heads, int head_dim, int half,
                           const float* inv_freq, int64_t first_position) {
  KernelEntry();
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(first_position + t);
  for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int h = idx / half;
    const int i = idx % half;
    const float angle = pos * inv_freq[i];
    const float c = cosf(angle);
    const float s = sinf(angle);
    float* p = x + t * ld + static_cast<int64_t>(h) * head_dim;
    const float x1 = p[i];
    const float x2 = p[i + half];
    p[i] = x1 * c - x2 * s;
    p[i + half] = x2 * c + x1 * s;
  }
}

// Sequences per RopeAppendBatch launch; the parameters stay well under 4 KiB.
constexpr int kMaxRopeAppendBatch = 16;
struct RopeAppendBatchParams {
  RopeAppendSequence seq[kMaxRopeAppendBatch];
};

// One block per (token, sequence of the batch): RopeKernel's arithmetic on the token's q row
// and on its key row on the way from `k` to `k_dst` (the values Rope would read from the
// copy), the rest of the key row and the value row copied.
__global__ void RopeAppendBatchKernel(RopeAppendBatchParams b, int64_t q_ld, int q_heads,
                                      int64_t kv_ld, int kv_heads, int head_dim, int half,
                                      const float* inv_freq) {
  KernelEntry();
  const RopeAppendSequence& sq = b.seq[blockIdx.y];
  const int64_t t = blockIdx.x;
  if (t >= sq.tokens) return;
  const float pos = static_cast<float>(sq.position + t);
  for (int idx = threadIdx.x; idx < q_heads * half; idx += blockDim.x) {
    const int h = idx / half;
    const int i = idx % half;
    const float angle = pos * inv_freq[i];
    const float c = cosf(angle);
    const float s = sinf(angle);
    float* p = sq.q + t * q_ld + static_cast<int64_t>(h) * head_dim;
    const float x1 = p[i];
    const float x2 = p[i + half];
    p[i] = x1 * c - x2 * s;
    p[i + half] = x2 * c + x1 * s;
  }
  const int64_t width = static_cast<int64_t>(kv_heads) * head_dim;
  const float* k_src = sq.k + t * kv_ld;
  float* k_out = sq.k_dst + t * width;
  for (int idx = threadIdx.x; idx < kv_heads * half; idx += blockDim.x) {
    const int h = idx / half;
    const int i = idx % half;
    const float angle = pos * inv_freq[i];
    const float c = cosf(angle);
    const float s = sinf(angle);
    const float* src = k_src + static_cast<int64_t>(h) * head_dim;
    float* p = k_out + static_cast<int64_t>(h) * head_dim;
    const float x1 = src[i];
    const float x2 = src[i + half];
    p[i] = x1 * c - x2 * s;
    p[i + half] = x2 * c + x1 * s;
  }
  const float* v_src = sq.v + t * kv_ld;
  float* v_out = sq.v_dst + t * width;
  for (int64_t e = threadIdx.x; e < width; e += blockDim.x) {
    if (e % head_dim >= 2 * half) k_out[e] = k_src[e];
    v_out[e] = v_src[e];
  }
}

#if !defined(__HIP_PLATFORM_AMD__)
struct NormRopeAppendParams {
  NormRopeSequence seq[kMaxRopeAppendBatch];
};

// One block per (token, sequence of the batch), a warp per head row (the queries' heads, then
// the keys'): RmsNormWarpKernel's arithmetic on the row (from the query's head pair where the
// queries come with the output gate, whose half is copied to `gate`), written back in place
// (queries, keys) and to the slot (keys), then RopeAppendBatchKernel's rotation of the written
// row by the same warp; then the value row copied to the slot. The bits of SplitHeadPairs,
// RmsNormHeads twice and RopeAppendBatch.
__global__ void __launch_bounds__(kRowThreads)
    NormRopeAppendKernel(NormRopeAppendParams b, int64_t q_ld, int64_t qg_ld, int q_heads,
                         int64_t kv_ld, int kv_heads, int head_dim, int half, const float* inv_freq,
                         const float* q_norm, const float* k_norm, float eps, bool zero_centred) {
  KernelEntry();
  const NormRopeSequence& sq = b.seq[blockIdx.y];
  const int64_t t = blockIdx.x;
  if (t >= sq.tokens) return;
  const float pos = static_cast<float>(sq.position + t);
  const int lane = threadIdx.x % 32;
  const int64_t width = static_cast<int64_t>(kv_heads) * head_dim;
  for (int r = threadIdx.x / 32; r < q_heads + kv_heads; r += kRowThreads / 32) {
    const bool is_q = r < q_heads;
    const int h = is_q ? r : r - q_heads;
    const float* src;
    float* row;            // The normalised row, in place.
    float* dst = nullptr;  // Also there, then rotated there (the keys' slot row).
    if (is_q) {
      row = sq.q + t * q_ld + static_cast<int64_t>(h) * head_dim;
      src = row;
      if (sq.qg != nullptr) {
        src = sq.qg + t * qg_ld + 2 * static_cast<int64_t>(h) * head_dim;
        float* g = sq.gate + t * q_heads * static_cast<int64_t>(head_dim) +
                   static_cast<int64_t>(h) * head_dim;
        for (int i = lane; i < head_dim; i += 32) g[i] = src[head_dim + i];
      }
    } else {
      row = sq.k + t * kv_ld + static_cast<int64_t>(h) * head_dim;
      src = row;
      dst = sq.k_dst + t * width + static_cast<int64_t>(h) * head_dim;
    }
    const float* w = is_q ? q_norm : k_norm;
    float v[kWarpParts], part[kWarpParts], wv[kWarpParts];
    WarpRowValues(src, head_dim, v, part);
#pragma unroll
    for (int j = 0; j < kWarpParts; ++j) {
      const int i = lane + 32 * j;
      wv[j] = i < head_dim ? (zero_centred ? 1.0f + w[i] : w[i]) : 0.0f;
    }
    const float ss = WarpRowSum(part);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(head_dim) + eps);
#pragma unroll
    for (int j = 0; j < kWarpParts; ++j) {
      const int i = lane + 32 * j;
      if (i < head_dim) {
        const float y = v[j] * inv * wv[j];
        row[i] = y;
        if (dst != nullptr) dst[i] = y;
      }
    }
    __syncwarp();
    float* p = dst != nullptr ? dst : row;
    for (int i = lane; i < half; i += 32) {
      const float angle = pos * inv_freq[i];
      const float c = cosf(angle);
      const float s = sinf(angle);
      const float x1 = p[i];
      const float x2 = p[i + half];
      p[i] = x1 * c - x2 * s;
      p[i + half] = x2 * c + x1 * s;
    }
  }
  const float* v_src = sq.v + t * kv_ld;
  float* v_out = sq.v_dst + t * width;
  for (int64_t e = threadIdx.x; e < width; e += blockDim.x) v_out[e] = v_src[e];
}
#endif  // !__HIP_PLATFORM_AMD__

__global__ void SiluMulKernel(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up,
                              int64_t rows, int64_t dim, float* out, uint16_t* rounded) {
  KernelEntry();
  const int64_t n = rows * dim;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / dim;
    const int64_t i = e % dim;
    StoreOut(out, rounded, 0, e, DeviceSilu(gate[r * ld_gate + i]) * up[r * ld_up + i]);
  }
}

// SiluMulKernel over rows of dim % 4 == 0 values with 16-byte loads and stores (strides and
// pointers aligned to 4 floats): blocks of grid.x over the row's groups of 4, grid.y over rows.
// The same arithmetic per element.
__global__ void SiluMulRowsKernel(const float* gate, int64_t ld_gate, const float* up,
                                  int64_t ld_up, int64_t rows, int64_t groups, float* out,
                                  uint16_t* rounded) {
  KernelEntry();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= groups) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float4 g = reinterpret_cast<const float4*>(gate + r * ld_gate)[c];
    const float4 u = reinterpret_cast<const float4*>(up + r * ld_up)[c];
    float4 o;
    o.x = DeviceSilu(g.x) * u.x;
    o.y = DeviceSilu(g.y) * u.y;
    o.z = DeviceSilu(g.z) * u.z;
    o.w = DeviceSilu(g.w) * u.w;
    reinterpret_cast<float4*>(out + r * groups * 4)[c] = o;
    if (rounded != nullptr) {
      // Four bf16 values as one 8-byte store (rows of a multiple of 8 values).
      const uint32_t lo = RoundBf16(o.x) | static_cast<uint32_t>(RoundBf16(o.y)) << 16;
      const uint32_t hi = RoundBf16(o.z) | static_cast<uint32_t>(RoundBf16(o.w)) << 16;
      reinterpret_cast<uint2*>(rounded + r * groups * 4)[c] = make_uint2(lo, hi);
    }
  }
}

__global__ void EmbeddingGatherKernel(const float* table, int64_t dim, const int32_t* ids,
                                      float* out) {
  KernelEntry();
  const int64_t i = blockIdx.x;
  const float* src = table + static_cast<int64_t>(ids[i]) * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) out[i * dim + j] = src[j];
}

__global__ void EmbeddingGatherBf16Kernel(const uint16_t* table, int64_t dim, const int32_t* ids,
                                          float* out) {
  KernelEntry();
  const int64_t i = blockIdx.x;
  const uint16_t* src = table + static_cast<int64_t>(ids[i]) * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) out[i * dim + j] = Bf16ToFloat(src[j]);
}

// dst row dst_rows[r] += scales[r] * src row r (null dst_rows: row r; null scales: 1). The dst
// rows are distinct, so no two threads touch one element. The product and the sum are rounded
// apart, never fused (as the CPU computes them, and as MoeCombine repeats them).
__global__ void AddScaledRowsKernel(const float* src, int64_t rows, int64_t dim,
                                    const int32_t* dst_rows, const float* scales, float* dst) {
  KernelEntry();
  const int64_t n = rows * dim;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / dim;
    const int64_t row = dst_rows == nullptr ? r : static_cast<int64_t>(dst_rows[r]);
    float* o = dst + row * dim + e % dim;
    *o = scales == nullptr ? *o + src[e] : __fadd_rn(*o, __fmul_rn(scales[r], src[e]));
  }
}

// CopyRows a float at a time: thread e of the grid-stride loop copies element e % cols of row
// e / cols.
__global__ void CopyRowsKernel(const float* src, int64_t ld_src, int64_t rows, int64_t cols,
                               float* dst, int64_t ld_dst) {
  KernelEntry();
  const int64_t n = rows * cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols;
    const int64_t c = e % cols;
    dst[r * ld_dst + c] = src[r * ld_src + c];
  }
}

// CopyRows in groups of 4 floats (cols, ld_src and ld_dst multiples of 4, pointers aligned to
// 16 bytes): grid.x over a row's groups, grid.y over rows.
__global__ void CopyRowsVec4Kernel(const float* src, int64_t ld_src, int64_t rows,
                                   int64_t groups, float* dst, int64_t ld_dst) {
  KernelEntry();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= groups) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    reinterpret_cast<float4*>(dst + r * ld_dst)[c] =
        reinterpret_cast<const float4*>(src + r * ld_src)[c];
  }
}

__global__ void SigmoidScaleRowsKernel(float* x, int64_t rows, int64_t dim, const float* gate) {
  KernelEntry();
  const int64_t n = rows * dim;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[e] *= DeviceSigmoid(gate[e / dim]);
  }
}

__global__ void SplitHeadPairsKernel(const float* in, int64_t ld, int64_t rows, int heads,
                                     int head_dim, float* a, float* b) {
  KernelEntry();
  const int64_t width = static_cast<int64_t>(heads) * head_dim;
  const int64_t n = rows * width;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / width;
    const int64_t h = (e % width) / head_dim;
    const int64_t i = e % head_dim;
    const float* src = in + r * ld + h * 2 * head_dim;
    a[e] = src[i];
    b[e] = src[head_dim + i];
  }
}

// SplitHeadPairsKernel for head_dim % 4 == 0 and ld % 4 == 0 (pointers aligned to 4 floats)
// with 16-byte copies: grid.x over a row's groups of 4 of a and b, grid.y over rows.
__global__ void SplitHeadPairsRowsKernel(const float* in, int64_t ld, int64_t rows, int heads,
                                         int head_dim, float* a, float* b) {
  KernelEntry();
  const int64_t groups = static_cast<int64_t>(heads) * head_dim / 4;
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= groups) return;
  const int64_t h = c / (head_dim / 4);
  const int64_t i = c % (head_dim / 4);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float4* src = reinterpret_cast<const float4*>(in + r * ld + h * 2 * head_dim);
    reinterpret_cast<float4*>(a + r * 4 * groups)[c] = src[i];
    reinterpret_cast<float4*>(b + r * 4 * groups)[c] = src[head_dim / 4 + i];
  }
}

__global__ void SigmoidMulKernel(float* x, const float* gate, int64_t n, uint16_t* rounded) {
  KernelEntry();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    StoreOut(x, rounded, 0, e, x[e] * DeviceSigmoid(gate[e]));
  }
}

__global__ void GdnGatesKernel(const float* in, int64_t ld, int64_t tokens, int heads,
                               int64_t b_offset, int64_t a_offset, const float* dt_bias,
                               const float* neg_a, float* g, float* beta) {
  KernelEntry();
  const int64_t n = tokens * heads;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / heads;
    const int j = static_cast<int>(e % heads);
    const float* row = in + t * ld;
    GdnGate(row[b_offset + j], row[a_offset + j], dt_bias[j], neg_a[j], &g[e], &beta[e]);
  }
}

// One thread per token. Probabilities are recomputed where needed (the same expression gives
// the same bits). The i-th pick is the best expert strictly after the previous pick in the
// order (probability descending, id ascending), so no per-expert marks are needed.
__global__ void MoeRouteKernel(const float* logits, int64_t tokens, int experts, int top_k,
                               bool renormalise, int32_t* ids, float* weights) {
  KernelEntry();
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* l = logits + t * experts;
    float mx = l[0];
    for (int j = 1; j < experts; ++j) mx = fmaxf(mx, l[j]);
    float sum = 0.0f;
    for (int j = 0; j < experts; ++j) sum += expf(l[j] - mx);
    float prev_p = INFINITY;
    int prev_id = -1;
    float top_sum = 0.0f;
    for (int i = 0; i < top_k; ++i) {
      float best_p = -1.0f;
      int best_id = -1;
      for (int j = 0; j < experts; ++j) {
        const float p = expf(l[j] - mx) / sum;
        const bool after_prev = p < prev_p || (p == prev_p && j > prev_id);
        if (after_prev && p > best_p) {
          best_p = p;
          best_id = j;
        }
      }
      ids[t * top_k + i] = best_id;
      weights[t * top_k + i] = best_p;
      top_sum += best_p;
      prev_p = best_p;
      prev_id = best_id;
    }
    if (renormalise) {
      for (int i = 0; i < top_k; ++i) weights[t * top_k + i] /= top_sum;
    }
  }
}

constexpr int kElementThreads = 256;

}  // namespace

hipError_t Rope(float* x, int64_t tokens, int64_t ld, int heads, int head_dim, int rotary_dim,
                const float* inv_freq, int64_t first_position, hipStream_t stream) {
  const int half = rotary_dim / 2;
  if (tokens == 0 || half == 0 || heads == 0) return hipSuccess;
  const int threads = heads * half < kElementThreads ? heads * half : kElementThreads;
  LaunchKernel(RopeKernel, static_cast<unsigned int>(tokens), threads, 0, stream, x, ld, heads,
               head_dim, half, inv_freq, first_position);
  return hipGetLastError();
}

int RopeAppendMaxBatch() { return kMaxRopeAppendBatch; }

hipError_t RopeAppendBatch(const RopeAppendSequence* seqs, int count, int64_t q_ld, int q_heads,
                           int64_t kv_ld, int kv_heads, int head_dim, int rotary_dim,
                           const float* inv_freq, hipStream_t stream) {
  if (count <= 0) return hipSuccess;
  if (count > kMaxRopeAppendBatch) return hipErrorInvalidValue;
  RopeAppendBatchParams b{};
  int64_t most = 0;
  for (int i = 0; i < count; ++i) {
    b.seq[i] = seqs[i];
    most = seqs[i].tokens > most ? seqs[i].tokens : most;
  }
  if (most == 0) return hipSuccess;
  const dim3 grid(static_cast<unsigned int>(most), static_cast<unsigned int>(count));
  LaunchKernel(RopeAppendBatchKernel, grid, kElementThreads, 0, stream, b, q_ld, q_heads, kv_ld,
               kv_heads, head_dim, rotary_dim / 2, inv_freq);
  return hipGetLastError();
}

bool NormRopeAppendSupported(int head_dim) {
#if defined(__HIP_PLATFORM_AMD__)
  static_cast<void>(head_dim);
  return false;
#else
  return head_dim > 0 && head_dim <= kRowThreads;
#endif
}

#if defined(__HIP_PLATFORM_AMD__)
hipError_t NormRopeAppendBatch(const NormRopeSequence*, int, int64_t, int64_t, int, int64_t, int,
                               int, int, const float*, const float*, const float*, float, bool,
                               hipStream_t) {
  return hipErrorNotSupported;  // NormRopeAppendSupported is false: the kernel needs warp rows.
}
#else
hipError_t NormRopeAppendBatch(const NormRopeSequence* seqs, int count, int64_t q_ld, int64_t qg_ld,
                               int q_heads, int64_t kv_ld, int kv_heads, int head_dim,
                               int rotary_dim, const float* inv_freq, const float* q_norm,
                               const float* k_norm, float eps, bool zero_centred,
                               hipStream_t stream) {
  if (count <= 0) return hipSuccess;
  if (count > kMaxRopeAppendBatch || !NormRopeAppendSupported(head_dim) || rotary_dim < 0 ||
      rotary_dim > head_dim) {
    return hipErrorInvalidValue;
  }
  NormRopeAppendParams b{};
  int64_t most = 0;
  for (int i = 0; i < count; ++i) {
    b.seq[i] = seqs[i];
    most = seqs[i].tokens > most ? seqs[i].tokens : most;
  }
  if (most == 0) return hipSuccess;
  const dim3 grid(static_cast<unsigned int>(most), static_cast<unsigned int>(count));
  LaunchKernel(NormRopeAppendKernel, grid, kRowThreads, 0, stream, b, q_ld, qg_ld, q_heads, kv_ld,
               kv_heads, head_dim, rotary_dim / 2, inv_freq, q_norm, k_norm, eps, zero_centred);
  return hipGetLastError();
}
#endif  // __HIP_PLATFORM_AMD__

hipError_t SiluMul(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t rows,
                   int64_t dim, float* out, uint16_t* rounded, hipStream_t stream) {
  if (rows * dim == 0) return hipSuccess;
  if (rounded != nullptr && (dim % 8 != 0 || reinterpret_cast<uintptr_t>(rounded) % 16 != 0)) {
    return hipErrorInvalidValue;
  }
  const auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (dim % 4 == 0 && ld_gate % 4 == 0 && ld_up % 4 == 0 && aligned(gate) && aligned(up) &&
      aligned(out)) {
    const int64_t groups = dim / 4;
    const dim3 grid(static_cast<unsigned int>(CeilDiv(groups, kElementThreads)),
                    static_cast<unsigned int>(rows < 65535 ? rows : 65535));
    LaunchKernel(SiluMulRowsKernel, grid, kElementThreads, 0, stream, gate, ld_gate, up, ld_up,
                 rows, groups, out, rounded);
    return hipGetLastError();
  }
  LaunchKernel(SiluMulKernel, GridFor(rows * dim, kElementThreads), kElementThreads, 0, stream,
               gate, ld_gate, up, ld_up, rows, dim, out, rounded);
  return hipGetLastError();
}

hipError_t EmbeddingGather(const float* table, int64_t dim, const int32_t* ids, int64_t n,
                           float* out, hipStream_t stream) {
  if (n == 0 || dim == 0) return hipSuccess;
  LaunchKernel(EmbeddingGatherKernel, static_cast<unsigned int>(n), kElementThreads, 0, stream,
               table, dim, ids, out);
  return hipGetLastError();
}

hipError_t EmbeddingGatherBf16(const uint16_t* table, int64_t dim, const int32_t* ids, int64_t n,
                               float* out, hipStream_t stream) {
  if (n == 0 || dim == 0) return hipSuccess;
  LaunchKernel(EmbeddingGatherBf16Kernel, static_cast<unsigned int>(n), kElementThreads, 0, stream,
               table, dim, ids, out);
  return hipGetLastError();
}

hipError_t SplitHeadPairs(const float* in, int64_t ld, int64_t rows, int heads, int head_dim,
                          float* a, float* b, hipStream_t stream) {
  const int64_t n = rows * heads * head_dim;
  if (n == 0) return hipSuccess;
  if (ld < 2 * static_cast<int64_t>(heads) * head_dim) return hipErrorInvalidValue;
  const auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (head_dim % 4 == 0 && ld % 4 == 0 && aligned(in) && aligned(a) && aligned(b)) {
    const int64_t groups = static_cast<int64_t>(heads) * head_dim / 4;
    const dim3 grid(static_cast<unsigned int>(CeilDiv(groups, kElementThreads)),
                    static_cast<unsigned int>(rows < 65535 ? rows : 65535));
    LaunchKernel(SplitHeadPairsRowsKernel, grid, kElementThreads, 0, stream, in, ld, rows, heads,
                 head_dim, a, b);
    return hipGetLastError();
  }
  LaunchKernel(SplitHeadPairsKernel, GridFor(n, kElementThreads), kElementThreads, 0, stream, in,
               ld, rows, heads, head_dim, a, b);
  return hipGetLastError();
}

namespace {

// PrefetchL2Range's: each thread asks for its 64 KiB pieces, then the wait (never before: a
// prefetch reads nothing a kernel before this one writes that L2 could then hold stale, since
// L2 is where device memory is coherent).
constexpr int64_t kPrefetchPiece = int64_t{64} << 10;
__global__ void PrefetchL2Kernel(const char* p, int64_t bytes, bool evict_last) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__HIP_PLATFORM_AMD__)
  uint64_t policy = 0;
  if (evict_last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * kPrefetchPiece;
  for (int64_t at = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPrefetchPiece;
       at < bytes; at += step) {
    const unsigned int n =
        static_cast<unsigned int>(bytes - at < kPrefetchPiece ? bytes - at : kPrefetchPiece);
    if (evict_last) {
      asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p + at),
                   "r"(n), "l"(policy)
                   : "memory");
    } else {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + at), "r"(n) : "memory");
    }
  }
#else
  static_cast<void>(p);
  static_cast<void>(bytes);
  static_cast<void>(evict_last);
#endif
  KernelEntry();
}

bool KernelsWaitAtEntry() {
#if defined(__HIP_PLATFORM_AMD__)
  return false;
#else
  static const bool waits = [] {
    cudaFuncAttributes a{};
    if (cudaFuncGetAttributes(&a, CopyRowsKernel) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());  // No device: nothing launches anyway.
      return false;
    }
    return a.ptxVersion >= 90 && a.binaryVersion >= 90;
  }();
  return waits;
#endif
}

}  // namespace

hipError_t CopyRows(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                    int64_t ld_dst, hipStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return hipSuccess;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (cols % 4 == 0 && ld_src % 4 == 0 && ld_dst % 4 == 0 && aligned(src) && aligned(dst)) {
    const int64_t groups = cols / 4;
    const dim3 grid(static_cast<unsigned int>(CeilDiv(groups, kElementThreads)),
                    static_cast<unsigned int>(rows < 65535 ? rows : 65535));
    LaunchKernel(CopyRowsVec4Kernel, grid, kElementThreads, 0, stream, src, ld_src, rows, groups,
                 dst, ld_dst);
    return hipGetLastError();
  }
  LaunchKernel(CopyRowsKernel, GridFor(n, kElementThreads), kElementThreads, 0, stream, src,
               ld_src, rows, cols, dst, ld_dst);
  return hipGetLastError();
}

hipError_t AddScaledRows(const float* src, int64_t rows, int64_t dim, const int32_t* dst_rows,
                         const float* scales, float* dst, hipStream_t stream) {
  const int64_t n = rows * dim;
  if (n == 0) return hipSuccess;
  LaunchKernel(AddScaledRowsKernel, GridFor(n, kElementThreads), kElementThreads, 0, stream, src,
               rows, dim, dst_rows, scales, dst);
  return hipGetLastError();
}

hipError_t SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* gate,
                            hipStream_t stream) {
  const int64_t n = rows * dim;
  if (n == 0) return hipSuccess;
  LaunchKernel(SigmoidScaleRowsKernel, GridFor(n, kElementThreads), kElementThreads, 0, stream, x,
               rows, dim, gate);
  return hipGetLastError();
}

hipError_t PrefetchL2Range(const void* p, int64_t bytes, bool evict_last, hipStream_t stream) {
  // Whole 16-byte units inside the range (the instruction's alignment and size unit).
  const uintptr_t start = (reinterpret_cast<uintptr_t>(p) + 15) / 16 * 16;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes)) / 16 * 16;
  if (bytes <= 0 || end <= start) return hipSuccess;
  const int64_t n = static_cast<int64_t>(end - start);
  constexpr int kThreads = 128;
  const int64_t blocks = CeilDiv(CeilDiv(n, kPrefetchPiece), kThreads);
  LaunchKernel(PrefetchL2Kernel, static_cast<unsigned int>(blocks < 64 ? blocks : 64), kThreads, 0,
               stream, reinterpret_cast<const char*>(start), n, evict_last);
  return hipGetLastError();
}

hipError_t SigmoidMul(float* x, const float* gate, int64_t n, uint16_t* rounded,
                      hipStream_t stream) {
  if (n == 0) return hipSuccess;
  LaunchKernel(SigmoidMulKernel, GridFor(n, kElementThreads), kElementThreads, 0, stream, x, gate,
               n, rounded);
  return hipGetLastError();
}

hipError_t GdnGates(const float* in, int64_t ld, int64_t tokens, int heads, int64_t b_offset,
                    int64_t a_offset, const float* dt_bias, const float* neg_a, float* g,
                    float* beta, hipStream_t stream) {
  const int64_t n = tokens * heads;
  if (n == 0) return hipSuccess;
  LaunchKernel(GdnGatesKernel, GridFor(n, kElementThreads), kElementThreads, 0, stream, in, ld,
               tokens, heads, b_offset, a_offset, dt_bias, neg_a, g, beta);
  return hipGetLastError();
}

hipError_t MoeRoute(const float* logits, int64_t tokens, int experts, int top_k, bool renormalise,
                    int32_t* ids, float* weights, hipStream_t stream) {
  if (tokens == 0 || top_k == 0) return hipSuccess;
  constexpr int kThreads = 64;
  LaunchKernel(MoeRouteKernel, GridFor(tokens, kThreads), kThreads, 0, stream, logits, tokens,
               experts, top_k, renormalise, ids, weights);
  return hipGetLastError();
}

}  // namespace cairn::infer::hip
