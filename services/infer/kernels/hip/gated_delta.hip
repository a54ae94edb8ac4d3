// The gated delta rule (docs/model.md §3.6.5) on the GPU.
//
// State columns are independent: column j of S[h] (dk values) evolves using only column j of
// v, u and v_new. So a block takes kCols columns of one v-head, each column split over kGroups
// threads that each hold dk / kGroups state values in registers; sums over dk meet as kGroups
// partial sums added in a fixed order.
//
// Recurrent form: token after token, as the CPU backend. Chunked form: a parallel kernel
// computes each chunk's state-free products (cumulative decays, the masked Q K^T decay matrix
// A, and the forward substitutions u = (I + B)^-1 beta v and w = (I + B)^-1 beta e^G k) into
// the workspace; then one kernel per column slice walks the chunks in order:
//   v_new = u - w S;  o = e^G (Q S) + A v_new;  S = e^G_last S + (f K)^T v_new.

#include <cmath>
#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {
namespace {

constexpr int kCols = 32;                  // State columns per block.
constexpr int kGroups = 8;                 // Threads sharing one column (over dk).
constexpr int kThreads = kCols * kGroups;  // 256.
constexpr int kMaxDk = 256;
constexpr int kMaxChunk = 128;
constexpr int kPrepThreads = 256;
constexpr int kStageBatch = 8;  // Loads in flight per thread when staging into shared memory.

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
  // GatedDeltaRecurrentPrepared: the token's projection row, whose b and a values give the
  // gates (g and beta are then not read); q and k are then the rows before their L2
  // normalisation. Null: g, beta and q, k as given.
  const float* gate_row;
  // With a norm (GatedDeltaRecurrentPrepared's `norm`): the token's row in the norm's rows.
  int64_t norm_row;
};

// GatedDeltaRecurrentPrepared's gate and normalisation arguments, the same for every sequence.
struct Prep {
  int64_t b_offset;
  int64_t a_offset;
  const float* dt_bias;
  const float* neg_a;
  float q_scale;
  float eps;
};

// GatedDeltaRecurrentPrepared's gated norm over each head's outputs (GatedDeltaNorm; the same
// for every sequence).
struct Norm {
  const float* z;
  int64_t z_ld;
  const float* w;
  float eps;
  float* y;
  uint16_t* rounded;
};

// Workspace of one segment, per (head, chunk) of the segment.
struct ChunkWork {
  float* a;      // [chunk, chunk]: (q_i . k_j) e^{G_i - G_j}, j <= i.
  float* u;      // [chunk, dv]
  float* w;      // [chunk, dk]
  float* gexp;   // [chunk]: e^{G_i}
  float* f;      // [chunk]: e^{G_last - G_i}
  float* decay;  // [1]: e^{G_last}
};

__device__ ChunkWork WorkAt(float* ws, int64_t index, int chunk, int dk, int dv) {
  const int64_t per = static_cast<int64_t>(chunk) * (chunk + dv + dk + 2) + 1;
  float* base = ws + index * per;
  ChunkWork c;
  c.a = base;
  c.u = c.a + static_cast<int64_t>(chunk) * chunk;
  c.w = c.u + static_cast<int64_t>(chunk) * dv;
  c.gexp = c.w + static_cast<int64_t>(chunk) * dk;
  c.f = c.gexp + chunk;
  c.decay = c.f + chunk;
  return c;
}

template <int kMaxD>
__device__ void LoadColumn(const Params& p, int h, int col, int grp, float (&s)[kMaxD / kGroups]) {
  const float* S = p.state + static_cast<int64_t>(h) * p.dk * p.dv;
#pragma unroll
  for (int e = 0; e < kMaxD / kGroups; ++e) {
    const int x = grp + kGroups * e;
    s[e] = x < p.dk && col < p.dv ? S[static_cast<int64_t>(x) * p.dv + col] : 0.0f;
  }
}

template <int kMaxD>
__device__ void StoreColumn(const Params& p, int h, int col, int grp,
                            const float (&s)[kMaxD / kGroups]) {
  if (col >= p.dv) return;
  float* S = p.state + static_cast<int64_t>(h) * p.dk * p.dv;
#pragma unroll
  for (int e = 0; e < kMaxD / kGroups; ++e) {
    const int x = grp + kGroups * e;
    if (x < p.dk) S[static_cast<int64_t>(x) * p.dv + col] = s[e];
  }
}

// Sum over this thread's rows of vec[x] * s[x] (vec in shared or global memory).
template <int kMaxD>
__device__ float PartialDot(const float* vec, int dk, int grp, const float (&s)[kMaxD / kGroups]) {
  float acc = 0.0f;
#pragma unroll
  for (int e = 0; e < kMaxD / kGroups; ++e) {
    const int x = grp + kGroups * e;
    if (x < dk) acc = fmaf(vec[x], s[e], acc);
  }
  return acc;
}

__device__ float GroupSum(const float* part, int stride, int index) {
  float acc = part[index];
#pragma unroll
  for (int g = 1; g < kGroups; ++g) acc += part[g * stride + index];
  return acc;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__HIP_PLATFORM_AMD__)
// Every thread of the block's cluster arrives and waits: the shared-memory writes before it are
// visible to the cluster's blocks after it.
__device__ inline void ClusterSync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

// `local`'s float in the shared memory of the cluster's block `rank`.
__device__ inline float LoadClusterShared(const float* local, unsigned int rank) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(address), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

// The gated norm of head h's outputs (GatedRmsNormHeads' row norm_row * heads + h) by the
// head's blocks, one cluster: this block's warp 0 holds `o` of its kCols columns. Block y's
// columns are the warp kernel's part y (lane l: column l + 32 y), so each lane adds the blocks'
// squares in WarpRowSum's tree and every block gets GatedRmsNormWarpKernel's sum: the same
// bits. `sq`: kCols floats of shared memory. Reached by every thread of the cluster.
__device__ void NormHead(const Params& p, const Norm& norm, int h, int col, int grp, float o,
                         float zv, float wv, float* sq) {
  const int cj = threadIdx.x % kCols;
  if (grp == 0) sq[cj] = col < p.dv ? fmaf(o, o, 0.0f) : 0.0f;
  ClusterSync();
  if (grp == 0) {
    float part[kWarpParts];
#pragma unroll
    for (int j = 0; j < kWarpParts; ++j) {
      part[j] = j < static_cast<int>(gridDim.y) ? LoadClusterShared(sq + cj, j) : 0.0f;
    }
    const float ss = WarpRowSum(part);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(p.dv) + norm.eps);
    if (col < p.dv) {
      const int64_t at = (p.norm_row * p.v_heads + h) * p.dv;
      StoreOut(norm.y + at, norm.rounded, at, col, o * inv * wv * DeviceSilu(zv));
    }
  }
  ClusterSync();  // No block leaves while another reads its squares.
}
#endif

// The recurrent form for one block: v-head blockIdx.x, columns blockIdx.y * kCols, ... of one
// sequence. kq: 2 * kMaxD floats, part: kGroups * kCols floats of shared memory. With kNorm
// (one token, gate_row set; a cluster of the head's gridDim.y blocks): the head's gated norm
// after the step, the raw outputs written only where y is not out.
template <int kMaxD, bool kNorm = false>
__device__ void RecurrentBlock(const Params& p, const Prep& prep, float* kq, float* part,
                               const Norm& norm = Norm{}) {
  const int h = blockIdx.x;
  const int kh = h / p.ratio;
  const int cj = threadIdx.x % kCols;
  const int grp = threadIdx.x / kCols;
  const int col = blockIdx.y * kCols + cj;
  float s[kMaxD / kGroups];
  LoadColumn<kMaxD>(p, h, col, grp, s);
  for (int64_t t = 0; t < p.tokens; ++t) {
    // The norm's gate and weight of this column, loaded with the step's inputs.
    float zv = 0.0f, wv = 0.0f;
    if constexpr (kNorm) {
      if (grp == 0 && col < p.dv) {
        zv = norm.z[p.norm_row * norm.z_ld + static_cast<int64_t>(h) * p.dv + col];
        wv = norm.w[col];
      }
    }
    float decay, beta;
    if (p.gate_row != nullptr) {
      // One token (GatedDeltaRecurrentPrepared): warp 0 normalises k, warp 1 q, as the L2 norm
      // kernels do, and every thread works out the head's gates as GdnGates does.
#if !defined(__HIP_PLATFORM_AMD__)
      const int w = threadIdx.x / 32;
      if (w < 2) {
        const float* row = (w == 0 ? p.k : p.q) + static_cast<int64_t>(kh) * p.dk;
        WarpL2Normalize(row, p.dk, prep.eps, w == 0 ? 1.0f : prep.q_scale, kq + w * kMaxD);
      }
#endif
      float g;
      GdnGate(p.gate_row[prep.b_offset + h], p.gate_row[prep.a_offset + h], prep.dt_bias[h],
              prep.neg_a[h], &g, &beta);
      decay = expf(g);
    } else {
      for (int x = threadIdx.x; x < p.dk; x += kThreads) {
        kq[x] = p.k[t * p.qk_ld + static_cast<int64_t>(kh) * p.dk + x];
        kq[kMaxD + x] = p.q[t * p.qk_ld + static_cast<int64_t>(kh) * p.dk + x];
      }
      decay = expf(p.g[t * p.v_heads + h]);
      beta = p.beta[t * p.v_heads + h];
    }
    // Loaded with k and q, before the barriers: its latency is not added to the token's.
    const float vj = col < p.dv ? p.v[t * p.v_ld + static_cast<int64_t>(h) * p.dv + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kMaxD / kGroups; ++e) s[e] *= decay;
    part[grp * kCols + cj] = PartialDot<kMaxD>(kq, p.dk, grp, s);
    __syncthreads();
    const float kv = GroupSum(part, kCols, cj);
    const float delta = (vj - kv) * beta;
#pragma unroll
    for (int e = 0; e < kMaxD / kGroups; ++e) {
      const int x = grp + kGroups * e;
      if (x < p.dk) s[e] = fmaf(kq[x], delta, s[e]);
    }
    const float po = PartialDot<kMaxD>(kq + kMaxD, p.dk, grp, s);
    __syncthreads();  // Everyone has read `part`.
    part[grp * kCols + cj] = po;
    __syncthreads();
    float* const out = p.out + t * p.out_ld + static_cast<int64_t>(h) * p.dv;
    if constexpr (kNorm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__HIP_PLATFORM_AMD__)
      const float o = grp == 0 ? GroupSum(part, kCols, cj) : 0.0f;
      if (grp == 0 && col < p.dv && norm.y + (p.norm_row * p.v_heads + h) * p.dv != out) {
        out[col] = o;
      }
      // The squares go through kq, which this token has finished reading.
      NormHead(p, norm, h, col, grp, o, zv, wv, kq);
#elif defined(__CUDA_ARCH__)
      __trap();  // No clusters below sm_90: the NVIDIA build targets sm_90a only.
#endif
    } else if (grp == 0 && col < p.dv) {
      out[col] = GroupSum(part, kCols, cj);
    }
    __syncthreads();  // `kq` and `part` are rewritten by the next token.
  }
  StoreColumn<kMaxD>(p, h, col, grp, s);
}

template <int kMaxD>
__global__ void __launch_bounds__(kThreads) RecurrentKernel(Params p) {
  KernelEntry();
  __shared__ float kq[2 * kMaxD];
  __shared__ float part[kGroups * kCols];
  RecurrentBlock<kMaxD>(p, Prep{}, kq, part);
}

// Sequences per launch of RecurrentBatchKernel: its parameters (kMaxBatch Params) stay well
// under the 4 KiB a kernel's parameters may take.
constexpr int kMaxBatch = 16;
struct ParamsBatch {
  Params seq[kMaxBatch];
  Prep prep;
  Norm norm;     // With kNorm.
  bool release;  // KernelEntry's (hip::EarlyRelease).
};

// Sequence blockIdx.z of the batch, as RecurrentKernel over that sequence alone. kMinBlocks:
// resident blocks a multiprocessor the registers must allow (GatedDeltaRecurrentPrepared's
// min_blocks).
template <int kMaxD, bool kNorm = false, int kMinBlocks = 1>
__global__ void __launch_bounds__(kThreads, kMinBlocks == 1 ? 0 : kMinBlocks)
    RecurrentBatchKernel(ParamsBatch b) {
  KernelEntry(b.release);
  __shared__ float kq[2 * kMaxD];
  __shared__ float part[kGroups * kCols];
  RecurrentBlock<kMaxD, kNorm>(b.seq[blockIdx.z], b.prep, kq, part, b.norm);
}

// One block per (head, chunk of the segment). Shared: k rows [chunk, dk + 1], the B matrix
// [chunk, chunk + 1] and the cumulative log decays [chunk].
__global__ void __launch_bounds__(kPrepThreads)
    PrepKernel(Params p, int64_t first, int chunk, int64_t chunks, float* ws) {
  KernelEntry();
  extern __shared__ float smem[];
  const int dk = p.dk;
  const int dv = p.dv;
  const int ks = dk + 1;
  float* k_rows = smem;
  float* b = k_rows + static_cast<int64_t>(chunk) * ks;
  float* cum = b + static_cast<int64_t>(chunk) * (chunk + 1);
  float* sub = cum + chunk;  // [chunk, dv + dk]: u | w rows.
  const int h = blockIdx.x;
  const int kh = h / p.ratio;
  const int64_t ci = blockIdx.y;
  const int64_t t0 = first + ci * chunk;
  const int len = static_cast<int>(p.tokens - t0 < chunk ? p.tokens - t0 : chunk);
  const ChunkWork work = WorkAt(ws, static_cast<int64_t>(h) * chunks + ci, chunk, dk, dv);
  const int tid = threadIdx.x;
  auto beta = [&](int i) { return p.beta[(t0 + i) * p.v_heads + h]; };
  auto k_at = [&](int i) { return p.k + (t0 + i) * p.qk_ld + static_cast<int64_t>(kh) * dk; };

  if (tid == 0) {
    float acc = 0.0f;
    for (int i = 0; i < len; ++i) {
      acc += p.g[(t0 + i) * p.v_heads + h];
      cum[i] = acc;
    }
  }
  BatchedCopy<kPrepThreads, kStageBatch>(
      len * dk, [&](int i) { return k_at(i / dk)[i % dk]; },
      [&](int i, float v) { k_rows[(i / dk) * ks + i % dk] = v; });
  __syncthreads();

  for (int idx = tid; idx < len * len; idx += kPrepThreads) {
    const int i = idx / len;
    const int j = idx % len;
    if (j > i) continue;
    const float decay = expf(cum[i] - cum[j]);
    const float* qi = p.q + (t0 + i) * p.qk_ld + static_cast<int64_t>(kh) * dk;
    float kk = 0.0f;
    float qk = 0.0f;
#pragma unroll 4
    for (int x = 0; x < dk; ++x) {
      kk = fmaf(k_rows[i * ks + x], k_rows[j * ks + x], kk);
      qk = fmaf(qi[x], k_rows[j * ks + x], qk);
    }
    b[i * (chunk + 1) + j] = beta(i) * kk * decay;
    work.a[static_cast<int64_t>(i) * chunk + j] = qk * decay;
  }
  __syncthreads();

  // Forward substitution in shared memory, one thread per column of [u | w] (dv + dk columns);
  // a thread reads back only what it wrote itself. Then u and w go out row by row.
  const int sub_ld = dv + dk;
  for (int col = tid; col < sub_ld; col += kPrepThreads) {
    const bool is_u = col < dv;
    const int c = is_u ? col : col - dv;
    for (int i = 0; i < len; ++i) {
      float val = is_u ? beta(i) * p.v[(t0 + i) * p.v_ld + static_cast<int64_t>(h) * dv + c]
                       : beta(i) * expf(cum[i]) * k_rows[i * ks + c];
#pragma unroll 8
      for (int j = 0; j < i; ++j) val = fmaf(-b[i * (chunk + 1) + j], sub[j * sub_ld + col], val);
      sub[i * sub_ld + col] = val;
    }
  }
  __syncthreads();
  for (int idx = tid; idx < len * dv; idx += kPrepThreads) {
    work.u[idx] = sub[(idx / dv) * sub_ld + idx % dv];
  }
  for (int idx = tid; idx < len * dk; idx += kPrepThreads) {
    work.w[idx] = sub[(idx / dk) * sub_ld + dv + idx % dk];
  }
  for (int i = tid; i < len; i += kPrepThreads) {
    work.gexp[i] = expf(cum[i]);
    work.f[i] = expf(cum[len - 1] - cum[i]);
  }
  if (tid == 0) work.decay[0] = expf(cum[len - 1]);
}

// Copies `len` rows of `dk` floats (row stride `ld`) into shared memory, coalesced.
__device__ void StageRows(const float* src, int64_t ld, int len, int dk, float* dst) {
  BatchedCopy<kThreads, kStageBatch>(
      len * dk, [&](int i) { return src[(i / dk) * ld + i % dk]; },
      [&](int i, float v) { dst[i] = v; });
}

// One block per (head, column slice); walks the segment's chunks in order. Shared: one staged
// [chunk, dk] matrix (w, then q, then k of the chunk), partial sums [kGroups, chunk, kCols],
// v_new [chunk, kCols], and the chunk's A, u slice, e^G and f. Staged rows are read by a whole
// warp at one address (a broadcast).
template <int kMaxD>
__global__ void __launch_bounds__(kThreads)
    ChunkScanKernel(Params p, int64_t first, int chunk, int64_t chunks, const float* ws) {
  KernelEntry();
  extern __shared__ float smem[];
  const int dk = p.dk;
  float* rows = smem;
  float* part = rows + static_cast<int64_t>(chunk) * dk;
  float* vnew = part + static_cast<int64_t>(kGroups) * chunk * kCols;
  float* a_s = vnew + chunk * kCols;  // [chunk, chunk]
  float* u_s = a_s + chunk * chunk;   // [chunk, kCols]
  float* gexp_s = u_s + chunk * kCols;
  float* f_s = gexp_s + chunk;
  const int h = blockIdx.x;
  const int kh = h / p.ratio;
  const int cj = threadIdx.x % kCols;
  const int grp = threadIdx.x / kCols;
  const int col = blockIdx.y * kCols + cj;
  const int part_stride = chunk * kCols;
  float s[kMaxD / kGroups];
  LoadColumn<kMaxD>(p, h, col, grp, s);
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t t0 = first + ci * chunk;
    const int len = static_cast<int>(p.tokens - t0 < chunk ? p.tokens - t0 : chunk);
    const ChunkWork work =
        WorkAt(const_cast<float*>(ws), static_cast<int64_t>(h) * chunks + ci, chunk, dk, p.dv);
    const int64_t qk_off = t0 * p.qk_ld + static_cast<int64_t>(kh) * dk;

    // v_new = u - w S. The chunk's other products are staged with w.
    StageRows(work.w, dk, len, dk, rows);
    BatchedCopy<kThreads, kStageBatch>(
        len * chunk, [&](int i) { return work.a[i]; }, [&](int i, float v) { a_s[i] = v; });
    BatchedCopy<kThreads, kStageBatch>(
        len * kCols,
        [&](int i) {
          const int c = blockIdx.y * kCols + i % kCols;
          return c < p.dv ? work.u[static_cast<int64_t>(i / kCols) * p.dv + c] : 0.0f;
        },
        [&](int i, float v) { u_s[i] = v; });
    for (int i = threadIdx.x; i < len; i += kThreads) {
      gexp_s[i] = work.gexp[i];
      f_s[i] = work.f[i];
    }
    __syncthreads();
#pragma unroll 4
    for (int i = 0; i < len; ++i) {
      part[grp * part_stride + i * kCols + cj] = PartialDot<kMaxD>(rows + i * dk, dk, grp, s);
    }
    __syncthreads();
    for (int i = grp; i < len; i += kGroups) {
      vnew[i * kCols + cj] = u_s[i * kCols + cj] - GroupSum(part, part_stride, i * kCols + cj);
    }
    StageRows(p.q + qk_off, p.qk_ld, len, dk, rows);
    __syncthreads();
    // o = e^G (q S) + A v_new.
#pragma unroll 4
    for (int i = 0; i < len; ++i) {
      part[grp * part_stride + i * kCols + cj] = PartialDot<kMaxD>(rows + i * dk, dk, grp, s);
    }
    __syncthreads();
    for (int i = grp; i < len; i += kGroups) {
      float o = gexp_s[i] * GroupSum(part, part_stride, i * kCols + cj);
      for (int j = 0; j <= i; ++j) o = fmaf(a_s[i * chunk + j], vnew[j * kCols + cj], o);
      if (col < p.dv) p.out[(t0 + i) * p.out_ld + static_cast<int64_t>(h) * p.dv + col] = o;
    }
    StageRows(p.k + qk_off, p.qk_ld, len, dk, rows);
    __syncthreads();
    // S = e^G_last S + (f k)^T v_new.
    const float decay = work.decay[0];
#pragma unroll
    for (int e = 0; e < kMaxD / kGroups; ++e) s[e] *= decay;
    for (int i = 0; i < len; ++i) {
      const float fi = f_s[i];
      const float vi = vnew[i * kCols + cj];
      const float* ki = rows + i * dk;
#pragma unroll
      for (int e = 0; e < kMaxD / kGroups; ++e) {
        const int x = grp + kGroups * e;
        if (x < dk) s[e] = fmaf(fi * ki[x], vi, s[e]);
      }
    }
    __syncthreads();  // `rows`, `part` and `vnew` are rewritten by the next chunk.
  }
  StoreColumn<kMaxD>(p, h, col, grp, s);
}

int64_t WorkFloatsPerChunk(int chunk, int dk, int dv) {
  return static_cast<int64_t>(chunk) * (chunk + dv + dk + 2) + 1;
}

template <int kMaxD>
hipError_t Run(const Params& p, int chunk, int64_t segment, float* ws, hipStream_t stream) {
  const dim3 grid(static_cast<unsigned int>(p.v_heads),
                  static_cast<unsigned int>(CeilDiv(p.dv, kCols)));
  if (chunk == 0) {
    LaunchKernel(RecurrentKernel<kMaxD>, grid, kThreads, 0, stream, p);
    return hipGetLastError();
  }
  const size_t prep_shared = GatedDeltaPrepSharedBytes(chunk, p.dk, p.dv);
  const size_t scan_shared = GatedDeltaScanSharedBytes(chunk, p.dk);
  hipError_t e = AllowSharedBytes(PrepKernel, prep_shared);
  if (e == hipSuccess) e = AllowSharedBytes(ChunkScanKernel<kMaxD>, scan_shared);
  if (e != hipSuccess) return e;
  for (int64_t first = 0; first < p.tokens; first += segment) {
    const int64_t seg_tokens = p.tokens - first < segment ? p.tokens - first : segment;
    const int64_t chunks = CeilDiv(seg_tokens, chunk);
    const dim3 prep_grid(static_cast<unsigned int>(p.v_heads), static_cast<unsigned int>(chunks));
    LaunchKernel(PrepKernel, prep_grid, kPrepThreads, prep_shared, stream, p, first, chunk, chunks,
                 ws);
    e = hipGetLastError();
    if (e != hipSuccess) return e;
    LaunchKernel(ChunkScanKernel<kMaxD>, grid, kThreads, scan_shared, stream, p, first, chunk,
                 chunks, ws);
    e = hipGetLastError();
    if (e != hipSuccess) return e;
  }
  return hipSuccess;
}

}  // namespace

int GatedDeltaMaxHeadDim() { return kMaxDk; }
int GatedDeltaMaxChunk() { return kMaxChunk; }

size_t GatedDeltaScanSharedBytes(int chunk, int dk) {
  const size_t c = static_cast<size_t>(chunk);
  return (c * dk + (kGroups + 2) * c * kCols + c * c + 2 * c) * sizeof(float);
}

size_t GatedDeltaPrepSharedBytes(int chunk, int dk, int dv) {
  const size_t c = static_cast<size_t>(chunk);
  return (c * (dk + 1) + c * (chunk + 1) + c + c * (dv + dk)) * sizeof(float);
}

int64_t GatedDeltaWorkspaceFloats(const GatedDeltaLaunch& a, int64_t segment_tokens) {
  if (a.chunk == 0) return 0;
  const int64_t seg = a.tokens < segment_tokens ? a.tokens : segment_tokens;
  return a.v_heads * CeilDiv(seg, a.chunk) * WorkFloatsPerChunk(a.chunk, a.dk, a.dv);
}

namespace {

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
  p.gate_row = nullptr;
  return p;
}

template <int kMaxD>
hipError_t RunBatch(ParamsBatch b, int count, hipStream_t stream) {
  const Params& p = b.seq[0];
  const dim3 grid(static_cast<unsigned int>(p.v_heads),
                  static_cast<unsigned int>(CeilDiv(p.dv, kCols)),
                  static_cast<unsigned int>(count));
  b.release = EarlyRelease(kReleaseDeltaStep);
  LaunchKernel(RecurrentBatchKernel<kMaxD>, grid, kThreads, 0, stream, b);
  return hipGetLastError();
}

#if !defined(__HIP_PLATFORM_AMD__)
// The prepared step's launch: with a norm in clusters of a head's blocks (the norm ends the
// kernel, so it releases early as the norms do), at least `min_blocks` (1 or 4) resident a
// multiprocessor where the head size allows 4 (kMaxD up to 128).
template <int kMaxD, bool kNorm, int kMinBlocks>
hipError_t RunPrepared(ParamsBatch b, int count, hipStream_t stream) {
  const Params& p = b.seq[0];
  const auto col_blocks = static_cast<unsigned int>(CeilDiv(p.dv, kCols));
  const dim3 grid(static_cast<unsigned int>(p.v_heads), col_blocks,
                  static_cast<unsigned int>(count));
  if constexpr (kNorm) {
    b.release = EarlyRelease(kReleaseNorms);
    return LaunchKernelClusters(RecurrentBatchKernel<kMaxD, true, kMinBlocks>, grid, kThreads, 0,
                                stream, col_blocks, b);
  } else {
    b.release = EarlyRelease(kReleaseDeltaStep);
    LaunchKernel(RecurrentBatchKernel<kMaxD, false, kMinBlocks>, grid, kThreads, 0, stream, b);
    return hipGetLastError();
  }
}

template <int kMaxD, bool kNorm>
hipError_t RunPrepared(const ParamsBatch& b, int count, int min_blocks, hipStream_t stream) {
  if constexpr (kMaxD <= 128) {
    if (min_blocks >= 4) return RunPrepared<kMaxD, kNorm, 4>(b, count, stream);
  }
  return RunPrepared<kMaxD, kNorm, 1>(b, count, stream);
}

template <bool kNorm>
hipError_t RunPrepared(const ParamsBatch& b, int count, int dk, int min_blocks,
                       hipStream_t stream) {
  if (dk <= 64) return RunPrepared<64, kNorm>(b, count, min_blocks, stream);
  if (dk <= 128) return RunPrepared<128, kNorm>(b, count, min_blocks, stream);
  return RunPrepared<256, kNorm>(b, count, min_blocks, stream);
}
#endif

}  // namespace

int GatedDeltaMaxBatch() { return kMaxBatch; }

hipError_t GatedDeltaRecurrentBatch(const GatedDeltaLaunch* a, int count, hipStream_t stream) {
  if (count <= 0) return hipSuccess;
  if (count > kMaxBatch) return hipErrorInvalidValue;
  ParamsBatch b{};
  for (int i = 0; i < count; ++i) b.seq[i] = ParamsOf(a[i]);
  if (a[0].dk <= 64) return RunBatch<64>(b, count, stream);
  if (a[0].dk <= 128) return RunBatch<128>(b, count, stream);
  return RunBatch<256>(b, count, stream);
}

bool GatedDeltaPreparedSupported() {
#if defined(__HIP_PLATFORM_AMD__)
  return false;
#else
  return true;
#endif
}

int GatedDeltaPreparedMaxHeadDim() { return kRowThreads < kMaxDk ? kRowThreads : kMaxDk; }

bool GatedDeltaNormSupported(int dv) {
#if defined(__HIP_PLATFORM_AMD__)
  static_cast<void>(dv);
  return false;
#else
  // A head's blocks in one cluster (at most 8, the portable cluster size), each a part of the
  // warp norm's row.
  return dv > 0 && dv % kCols == 0 && dv <= kRowThreads && dv / kCols <= kWarpParts;
#endif
}

hipError_t GatedDeltaRecurrentPrepared(const GatedDeltaLaunch* a, const float* const* gate_rows,
                                       int count, const GatedDeltaPrepArgs& prep,
                                       const GatedDeltaNorm* norm, int min_blocks,
                                       hipStream_t stream) {
#if defined(__HIP_PLATFORM_AMD__)
  static_cast<void>(a);
  static_cast<void>(gate_rows);
  static_cast<void>(prep);
  static_cast<void>(norm);
  static_cast<void>(min_blocks);
  static_cast<void>(stream);
  return hipErrorNotSupported;
#else
  if (count <= 0) return hipSuccess;
  if (count > kMaxBatch || a[0].dk > kRowThreads || a[0].dk > kMaxDk) return hipErrorInvalidValue;
  if (norm != nullptr && (!GatedDeltaNormSupported(a[0].dv) || norm->rows == nullptr)) {
    return hipErrorInvalidValue;
  }
  ParamsBatch b{};
  for (int i = 0; i < count; ++i) {
    if (a[i].tokens != 1 || gate_rows[i] == nullptr) return hipErrorInvalidValue;
    if (a[i].dk != a[0].dk || a[i].dv != a[0].dv || a[i].v_heads != a[0].v_heads) {
      return hipErrorInvalidValue;
    }
    b.seq[i] = ParamsOf(a[i]);
    b.seq[i].gate_row = gate_rows[i];
    b.seq[i].norm_row = norm != nullptr ? norm->rows[i] : 0;
  }
  b.prep = {prep.b_offset, prep.a_offset, prep.dt_bias, prep.neg_a, prep.q_scale, prep.eps};
  if (norm == nullptr) return RunPrepared<false>(b, count, a[0].dk, min_blocks, stream);
  b.norm = {norm->z, norm->z_ld, norm->w, norm->eps, norm->y, norm->rounded};
  return RunPrepared<true>(b, count, a[0].dk, min_blocks, stream);
#endif
}

hipError_t GatedDelta(const GatedDeltaLaunch& a, int64_t segment_tokens, float* workspace,
                      hipStream_t stream) {
  if (a.tokens == 0) return hipSuccess;
  const Params p = ParamsOf(a);
  if (a.dk <= 64) return Run<64>(p, a.chunk, segment_tokens, workspace, stream);
  if (a.dk <= 128) return Run<128>(p, a.chunk, segment_tokens, workspace, stream);
  return Run<256>(p, a.chunk, segment_tokens, workspace, stream);
}

}  // namespace cairn::infer::hip
