// The causal depthwise conv with SiLU of the delta-rule layers: one sequence, or a pass's
// sequences in one launch (decode steps with the state in the same launch; prefill chunks of
// tokens a thread, 16-byte accesses for the models' 4 taps), then the state's new rows.

#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {
namespace {

constexpr int kConvThreads = 256;

// Largest causal conv kernel: the new window of a channel is staged in registers.
constexpr int kMaxConvKernel = 16;

// Window row `t` in [-hist, tokens) of channel `ch`: state rows first, then input rows.
__device__ float WindowAt(const float* in, int64_t ld_in, const float* state, int64_t channels,
                          int hist, int64_t t, int64_t ch) {
  return t < 0 ? state[(t + hist) * channels + ch] : in[t * ld_in + ch];
}

// The bodies below loop over blockIdx.x / gridDim.x only, so a batched launch can give each
// sequence its own grid row (blockIdx.y) and run the same arithmetic.
__device__ void CausalConvOut(const float* in, int64_t ld_in, int64_t tokens, int64_t channels,
                              const float* w, int kernel, const float* state, float* out) {
  const int hist = kernel - 1;
  const int64_t n = tokens * channels;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / channels;
    const int64_t ch = e % channels;
    float acc = 0.0f;
    for (int m = 0; m < kernel; ++m) {
      acc += w[ch * kernel + m] * WindowAt(in, ld_in, state, channels, hist, t - hist + m, ch);
    }
    out[e] = DeviceSilu(acc);
  }
}

// CausalConvOut with a thread per channel and kConvTokens consecutive tokens: the window's
// values are loaded once into registers and the weights once per thread, and the index
// arithmetic is per chunk, not per element. The same sum per output (acc += w * x over the
// kernel's taps in order, from zero), so the same bits.
// kWriteState (only for tokens <= kConvTokens: one chunk, so each channel's window is one
// thread's) also writes the last `hist` window rows as the new state, as CausalConvState would
// after it: the thread read its channel's state rows into the window first, and no other
// thread reads them.
constexpr int kConvTokens = 8;
template <bool kWriteState>
__device__ void CausalConvOutChunks(const float* in, int64_t ld_in, int64_t tokens,
                                    int64_t channels, const float* w, int kernel, float* state,
                                    float* out) {
  const int hist = kernel - 1;
  const int64_t n = (tokens + kConvTokens - 1) / kConvTokens * channels;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = e % channels;
    const int64_t t0 = e / channels * kConvTokens;
    float wk[kMaxConvKernel];
#pragma unroll
    for (int m = 0; m < kMaxConvKernel; ++m) wk[m] = m < kernel ? w[ch * kernel + m] : 0.0f;
    // win[i] is window row t0 - hist + i.
    float win[kConvTokens + kMaxConvKernel - 1];
#pragma unroll
    for (int i = 0; i < kConvTokens + kMaxConvKernel - 1; ++i) {
      const int64_t t = t0 - hist + i;
      win[i] = i < kConvTokens + hist && t < tokens
                   ? WindowAt(in, ld_in, state, channels, hist, t, ch)
                   : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kConvTokens; ++j) {
      if (t0 + j >= tokens) break;
      float acc = 0.0f;
#pragma unroll
      for (int m = 0; m < kMaxConvKernel; ++m) {
        if (m < kernel) acc += wk[m] * win[j + m];
      }
      out[(t0 + j) * channels + ch] = DeviceSilu(acc);
    }
    if constexpr (kWriteState) {
      // win[x] is window row x - hist (t0 is 0), state row x - tokens; indexed by constants
      // so that the window stays in registers.
#pragma unroll
      for (int x = 0; x < kConvTokens + kMaxConvKernel - 1; ++x) {
        const int64_t i = x - tokens;
        if (i >= 0 && i < hist) state[i * channels + ch] = win[x];
      }
    }
  }
}

// CausalConvOutChunks (without the state) for a kernel of kKernel taps over 4 channels a thread
// (16-byte loads and stores: channels, ld_in and the pointers multiples of 4 floats) and
// kConvTokensVec tokens, so that a thread reads (kConvTokensVec + kKernel - 1) / kConvTokensVec
// rows a token instead of 11 / 8. Each channel's sum is CausalConvOutChunks' (acc += w * x
// over the taps in order, from zero), so the same bits.
constexpr int kConvTokensVec = 16;
template <int kKernel>
__device__ void CausalConvOutChunksVec(const float* in, int64_t ld_in, int64_t tokens,
                                       int64_t channels, const float* w, const float* state,
                                       float* out) {
  constexpr int kHist = kKernel - 1;
  const int64_t quads = channels / 4;
  const int64_t n = (tokens + kConvTokensVec - 1) / kConvTokensVec * quads;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = e % quads * 4;
    const int64_t t0 = e / quads * kConvTokensVec;
    float wk[4][kKernel];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
#pragma unroll
      for (int m = 0; m < kKernel; ++m) wk[c][m] = w[(ch + c) * kKernel + m];
    }
    // win[i] is window row t0 - kHist + i.
    float4 win[kConvTokensVec + kHist];
#pragma unroll
    for (int i = 0; i < kConvTokensVec + kHist; ++i) {
      const int64_t t = t0 - kHist + i;
      win[i] = t >= tokens ? make_float4(0.0f, 0.0f, 0.0f, 0.0f)
               : t < 0     ? *reinterpret_cast<const float4*>(state + (t + kHist) * channels + ch)
                           : *reinterpret_cast<const float4*>(in + t * ld_in + ch);
    }
#pragma unroll
    for (int j = 0; j < kConvTokensVec; ++j) {
      if (t0 + j >= tokens) break;
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int m = 0; m < kKernel; ++m) {
        acc[0] += wk[0][m] * win[j + m].x;
        acc[1] += wk[1][m] * win[j + m].y;
        acc[2] += wk[2][m] * win[j + m].z;
        acc[3] += wk[3][m] * win[j + m].w;
      }
      *reinterpret_cast<float4*>(out + (t0 + j) * channels + ch) =
          make_float4(DeviceSilu(acc[0]), DeviceSilu(acc[1]), DeviceSilu(acc[2]),
                      DeviceSilu(acc[3]));
    }
  }
}

// The last `hist` window rows become the state; each thread owns one channel's column, read
// whole before it is written.
__device__ void CausalConvState(const float* in, int64_t ld_in, int64_t tokens, int64_t channels,
                                int kernel, float* state) {
  const int hist = kernel - 1;
  for (int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; ch < channels;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float next[kMaxConvKernel];
#pragma unroll
    for (int i = 0; i < kMaxConvKernel; ++i) {
      if (i < hist) next[i] = WindowAt(in, ld_in, state, channels, hist, tokens - hist + i, ch);
    }
#pragma unroll
    for (int i = 0; i < kMaxConvKernel; ++i) {
      if (i < hist) state[static_cast<int64_t>(i) * channels + ch] = next[i];
    }
  }
}

__global__ void CausalConvOutKernel(const float* in, int64_t ld_in, int64_t tokens,
                                    int64_t channels, const float* w, int kernel,
                                    const float* state, float* out) {
  KernelEntry();
  CausalConvOut(in, ld_in, tokens, channels, w, kernel, state, out);
}

__global__ void CausalConvStateKernel(const float* in, int64_t ld_in, int64_t tokens,
                                      int64_t channels, int kernel, float* state) {
  KernelEntry();
  CausalConvState(in, ld_in, tokens, channels, kernel, state);
}

// Sequences per batched conv launch; the parameters stay well under 4 KiB.
constexpr int kMaxConvBatch = 16;
struct ConvBatch {
  ConvSequence seq[kMaxConvBatch];
};

template <bool kWriteState>
__global__ void CausalConvOutBatchKernel(ConvBatch b, int64_t channels, const float* w,
                                         int kernel) {
  KernelEntry();
  const ConvSequence& s = b.seq[blockIdx.y];
  CausalConvOutChunks<kWriteState>(s.in, s.ld_in, s.tokens, channels, w, kernel, s.state, s.out);
}

// kKernel taps, 16-byte accesses (CausalConvSiluBatch checks the alignment), the prefill
// chunks without the state.
template <int kKernel>
__global__ void CausalConvOutBatchVecKernel(ConvBatch b, int64_t channels, const float* w) {
  KernelEntry();
  const ConvSequence& s = b.seq[blockIdx.y];
  CausalConvOutChunksVec<kKernel>(s.in, s.ld_in, s.tokens, channels, w, s.state, s.out);
}

__global__ void CausalConvStateBatchKernel(ConvBatch b, int64_t channels, int kernel) {
  KernelEntry();
  const ConvSequence& s = b.seq[blockIdx.y];
  CausalConvState(s.in, s.ld_in, s.tokens, channels, kernel, s.state);
}

}  // namespace

int CausalConvMaxKernel() { return kMaxConvKernel; }
int CausalConvMaxBatch() { return kMaxConvBatch; }

hipError_t CausalConvSiluBatch(const ConvSequence* seqs, int count, int64_t channels,
                               const float* w, int kernel, hipStream_t stream) {
  if (count <= 0 || channels == 0) return hipSuccess;
  if (count > kMaxConvBatch) return hipErrorInvalidValue;
  ConvBatch b{};
  int64_t most = 0;
  for (int i = 0; i < count; ++i) {
    b.seq[i] = seqs[i];
    most = seqs[i].tokens > most ? seqs[i].tokens : most;
  }
  if (most == 0) return hipSuccess;
  // A sequence's grid row has the blocks its longest sequence needs (the extra blocks of a
  // shorter one find no element), and the per-element arithmetic of CausalConvSilu's kernel.
  const dim3 out_grid(GridFor(CeilDiv(most, kConvTokens) * channels, kConvThreads),
                      static_cast<unsigned int>(count));
  if (most <= kConvTokens) {
    // Every sequence in one chunk (decode steps): the state in the same launch.
    LaunchKernel(CausalConvOutBatchKernel<true>, out_grid, kConvThreads, 0, stream, b, channels,
                 w, kernel);
    return hipGetLastError();
  }
  // The convolution of the real models (4 taps) over channels and rows in whole 16-byte
  // pieces: 4 channels and 16 tokens a thread.
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  bool vec = kernel == 4 && channels % 4 == 0;
  for (int i = 0; i < count; ++i) {
    vec = vec && b.seq[i].ld_in % 4 == 0 && aligned(b.seq[i].in) && aligned(b.seq[i].state) &&
          aligned(b.seq[i].out);
  }
  if (vec) {
    const dim3 vec_grid(GridFor(CeilDiv(most, kConvTokensVec) * (channels / 4), kConvThreads),
                        static_cast<unsigned int>(count));
    LaunchKernel(CausalConvOutBatchVecKernel<4>, vec_grid, kConvThreads, 0, stream, b,
                 channels, w);
  } else {
    LaunchKernel(CausalConvOutBatchKernel<false>, out_grid, kConvThreads, 0, stream, b,
                 channels, w, kernel);
  }
  hipError_t e = hipGetLastError();
  if (e != hipSuccess || kernel <= 1) return e;
  const dim3 state_grid(GridFor(channels, kConvThreads), static_cast<unsigned int>(count));
  LaunchKernel(CausalConvStateBatchKernel, state_grid, kConvThreads, 0, stream, b, channels,
               kernel);
  return hipGetLastError();
}

hipError_t CausalConvSilu(const float* in, int64_t ld_in, int64_t tokens, int64_t channels,
                          const float* w, int kernel, float* state, float* out,
                          hipStream_t stream) {
  if (tokens == 0 || channels == 0) return hipSuccess;
  LaunchKernel(CausalConvOutKernel, GridFor(tokens * channels, kConvThreads), kConvThreads, 0,
               stream, in, ld_in, tokens, channels, w, kernel, state, out);
  hipError_t e = hipGetLastError();
  if (e != hipSuccess || kernel <= 1) return e;
  LaunchKernel(CausalConvStateKernel, GridFor(channels, kConvThreads), kConvThreads, 0,
               stream, in, ld_in, tokens, channels, kernel, state);
  return hipGetLastError();
}

}  // namespace cairn::infer::hip
