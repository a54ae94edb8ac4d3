#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_DEVICE_UTIL_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_DEVICE_UTIL_H_

// Device helpers shared by the .hip files. Included only by kernel sources.

#include <cstdint>
#include <tuple>

#include "services/infer/kernels/hip/hip_compat.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip {

// Threads per block of the row kernels (norms and friends). A power of two.
inline constexpr int kRowThreads = 256;

// bf16 (raw bits) to fp32, exactly.
__device__ inline float Bf16ToFloat(uint16_t h) {
  return __uint_as_float(static_cast<unsigned int>(h) << 16);
}
// fp32 to bf16 (raw bits), rounding to nearest even; NaN stays a (quiet) NaN.
__device__ inline uint16_t FloatToBf16(float f) {
  const unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// fp32 to bf16 (raw bits) as the matrix-unit products round their inputs (mma_rows::PackBf16's
// conversion, nearest even); the same as FloatToBf16 but for a NaN's payload.
__device__ inline uint16_t RoundBf16(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP_PLATFORM_AMD__)
  uint16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(f));
  return r;
#else
  return FloatToBf16(f);
#endif
}

// yr[i] = v and, where `rounded` is not null, rounded[at + i] = v in bf16 as the products round
// their inputs (the norms' and SiLU-mul's rounded copies: rows of a multiple of 8 values, laid
// out as y's). Used by norms.hip and elementwise.hip.
__device__ inline void StoreOut(float* yr, uint16_t* rounded, int64_t at, int64_t i, float v) {
  yr[i] = v;
  if (rounded != nullptr) rounded[at + i] = RoundBf16(v);
}

#if !defined(__HIP_PLATFORM_AMD__)
// c += a . b for one bf16 x bf16 -> fp32 16x8x16 tile on the matrix units (NVIDIA mma.sync,
// sm_80 and later; fragments in the PTX ISA's m16n8k16 layout).
__device__ inline void Mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  static_cast<void>(c);
  static_cast<void>(a);
  static_cast<void>(b0);
  static_cast<void>(b1);
#endif
}

// Four 8x8 bf16 matrices from shared memory (ldmatrix): lanes 8i to 8i + 7 give the addresses
// of matrix i's rows (16 bytes each), and r[i] holds this lane's pair of matrix i (row lane / 4,
// elements 2 (lane % 4) and the next): the mma.sync fragment layout.
__device__ inline void LoadMatrixX4(uint32_t r[4], uint32_t shared_address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address));
#else
  static_cast<void>(shared_address);
  r[0] = r[1] = r[2] = r[3] = 0;
#endif
}
#endif

__device__ inline float DeviceSilu(float x) { return x / (1.0f + expf(-x)); }
__device__ inline float DeviceSigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// torch's softplus switches to the identity above this input (as the CPU backend).
inline constexpr float kSoftplusThreshold = 20.0f;

// One delta-rule head's gates from its projection's b and a values (KernelBackend::GdnGates):
// beta = sigmoid(b), g = neg_a * softplus(a + dt_bias).
__device__ inline void GdnGate(float b, float a, float dt_bias, float neg_a, float* g,
                               float* beta) {
  *beta = DeviceSigmoid(b);
  const float x = a + dt_bias;
  *g = neg_a * (x > kSoftplusThreshold ? x : log1pf(expf(x)));
}

#if !defined(__HIP_PLATFORM_AMD__)
// Rows of at most kRowThreads values by one warp of 32 each (the norms' block kernels leave most
// of a block idle on the delta rule's and attention's heads of 128 and 256 values, and pay a
// barrier per tree level). Lane l holds the values of threads l, l + 32, ... of the block kernel,
// and WarpRowSum adds their partial sums in BlockSum<kRowThreads>'s tree: the levels the block
// kernel sums in shared memory (t + 128, t + 64, t + 32) in registers, then its five shuffle
// levels. So every output has the block kernel's bits.
inline constexpr int kWarpParts = kRowThreads / 32;
static_assert(kRowThreads == 256, "WarpRowSum spells out BlockSum<256>'s tree");

__device__ inline float WarpRowSum(float part[kWarpParts]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) part[j] += part[j + 4];
#pragma unroll
  for (int j = 0; j < 2; ++j) part[j] += part[j + 2];
  float r = part[0] + part[1];
#pragma unroll
  for (int w = 16; w > 0; w >>= 1) r += __shfl_down_sync(0xffffffffu, r, w);
  return __shfl_sync(0xffffffffu, r, 0);
}

// The lane's values of row `xr`: v[j] = xr[lane + 32 j] (zero past dim), part[j] the block
// kernel's thread lane + 32 j's sum of squares.
__device__ inline void WarpRowValues(const float* xr, int64_t dim, float v[kWarpParts],
                                     float part[kWarpParts]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kWarpParts; ++j) {
    const int i = lane + 32 * j;
    v[j] = i < dim ? xr[i] : 0.0f;
    part[j] = i < dim ? fmaf(v[j], v[j], 0.0f) : 0.0f;
  }
}

// One row of at most kRowThreads values L2-normalised by this warp as the L2 norm kernels
// normalise it (x * (1 / sqrt(sum x^2 + eps)) * scale, the sum in WarpRowSum's tree), written
// to `out` (which may be `xr`).
__device__ inline void WarpL2Normalize(const float* xr, int64_t dim, float eps, float scale,
                                       float* out) {
  float v[kWarpParts], part[kWarpParts];
  WarpRowValues(xr, dim, v, part);
  const float ss = WarpRowSum(part);
  const float inv = 1.0f / sqrtf(ss + eps);
#pragma unroll
  for (int j = 0; j < kWarpParts; ++j) {
    const int i = threadIdx.x % 32 + 32 * j;
    if (i < dim) out[i] = v[j] * inv * scale;
  }
}
#endif

// Sum of `v` over the block's kThreads threads, as a fixed binary tree over thread indices, so
// the order never depends on scheduling. `scratch` holds kThreads floats. Every thread gets the
// sum. Must be reached by every thread of the block.
template <int kThreads>
__device__ inline float BlockSum(float v, float* scratch) {
  const int t = threadIdx.x;
  scratch[t] = v;
  __syncthreads();
  int s = kThreads / 2;
#if !defined(__HIP_PLATFORM_AMD__)
  // NVIDIA (warps of 32): the same tree, its last five levels (s = 16 .. 1) inside the first
  // warp by shuffles instead of shared memory and a barrier each: lane t < s adds lane t + s's
  // value, the operands and order of scratch[t] += scratch[t + s].
  if constexpr (kThreads >= 32) {
    for (; s >= 32; s >>= 1) {
      if (t < s) scratch[t] += scratch[t + s];
      __syncthreads();
    }
    if (t < 32) {
      float r = scratch[t];
#pragma unroll
      for (int w = 16; w > 0; w >>= 1) r += __shfl_down_sync(0xffffffffu, r, w);
      if (t == 0) scratch[0] = r;
    }
    __syncthreads();
    s = 0;
  }
#endif
  for (; s > 0; s >>= 1) {
    if (t < s) scratch[t] += scratch[t + s];
    __syncthreads();
  }
  const float r = scratch[0];
  __syncthreads();
  return r;
}

// Runs store(i, load(i)) for every i in [0, n) over the block's kThreads threads, with kBatch
// independent loads in flight per thread before their stores (staging global memory into shared
// memory is latency-bound otherwise). Must be reached by every thread of the block.
template <int kThreads, int kBatch, typename Load, typename Store>
__device__ inline void BatchedCopy(int n, Load load, Store store) {
  for (int base = threadIdx.x; base < n; base += kThreads * kBatch) {
    float v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kThreads;
      v[b] = i < n ? load(i) : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kThreads;
      if (i < n) store(i, v[b]);
    }
  }
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over `n` elements: enough to fill the device, bounded so the
// grid size stays in range.
inline unsigned int GridFor(int64_t n, int threads) {
  const int64_t blocks = CeilDiv(n, threads);
  return static_cast<unsigned int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

// Overlapped launches (programmatic dependent launch, NVIDIA sm_90 and later): every kernel of
// this backend is launched by LaunchKernel below and begins with KernelEntry(), which waits
// until the stream's previous kernel has completed and its memory writes are visible. Nothing
// is read or written before that wait, so every kernel sees exactly what it would after a plain
// launch (no value changes); what overlaps is this launch's scheduling with the previous
// kernel's last blocks (its blocks exiting let this one's in, or, where that kernel releases
// early, its blocks passing their own wait: KernelEntry(true) below). A kernel launched without the
// attribute (or after a copy, an event, a library's kernel) returns from the wait at once.
__device__ inline void KernelEntry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// KernelEntry, then, where `release` (hip::EarlyRelease), counts this block as released: the
// stream's next kernel is scheduled once every block of this grid has released or exited,
// rather than once all have exited. Only after the wait: a release before it would let a chain
// of waiting kernels take the device's places ahead of the kernel that runs.
__device__ inline void KernelEntry(bool release) {
  KernelEntry();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (release) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#else
  static_cast<void>(release);
#endif
}

// Asks for the 128-byte line holding `p` in L2 (NVIDIA; a hint, nothing on AMD). L2 is where
// device memory is coherent, so a line fetched early is never stale: a kernel may prefetch
// before KernelEntry()'s wait.
__device__ inline void PrefetchL2(const void* p) {
#if defined(__CUDA_ARCH__) && !defined(__HIP_PLATFORM_AMD__)
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
#else
  static_cast<void>(p);
#endif
}

// `value` as a T by implicit conversion only (what passing it to a T parameter allows): a
// launch's arguments reach the kernel's parameter types this way, never by an explicit cast.
template <typename T>
inline T AsParameter(T value) {
  return value;
}

#if !defined(__HIP_PLATFORM_AMD__)
// The attributes of a launch: cooperative (every block resident at once), overlapped
// (programmatic dependent launch) and clusters of `cluster_y` blocks along y (sm_90; 0: none),
// as asked; a config for cudaLaunchKernelEx over them.
struct LaunchAttributes {
  cudaLaunchAttribute list[3];
  unsigned int count = 0;
  LaunchAttributes(bool cooperative, bool overlapped, unsigned int cluster_y = 0) {
    if (cooperative) {
      list[count].id = cudaLaunchAttributeCooperative;
      list[count++].val.cooperative = 1;
    }
    if (overlapped) {
      list[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      list[count++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster_y > 0) {
      list[count].id = cudaLaunchAttributeClusterDimension;
      list[count].val.clusterDim.x = 1;
      list[count].val.clusterDim.y = cluster_y;
      list[count++].val.clusterDim.z = 1;
    }
  }
  cudaLaunchConfig_t Config(dim3 grid, dim3 block, size_t shared, hipStream_t stream) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.stream = stream;
    config.attrs = list;
    config.numAttrs = count;
    return config;
  }
};
#endif

// kernel<<<grid, block, shared, stream>>>(args...), with overlapped launches where
// OverlappedLaunches() holds (NVIDIA). As with <<<...>>>, the launch's error is then
// hipGetLastError()'s.
template <typename... Params, typename... Args>
inline void LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                         hipStream_t stream, Args&&... args) {
#if defined(__HIP_PLATFORM_AMD__)
  hipLaunchKernelGGL(kernel, grid, block, shared, stream, AsParameter<Params>(args)...);
#else
  if (!OverlappedLaunches()) {
    // clang-format off
    kernel<<<grid, block, shared, stream>>>(AsParameter<Params>(args)...);
    // clang-format on
    return;
  }
  LaunchAttributes attributes(/*cooperative=*/false, /*overlapped=*/true);
  const cudaLaunchConfig_t config = attributes.Config(grid, block, shared, stream);
  static_cast<void>(cudaLaunchKernelEx(&config, kernel, AsParameter<Params>(args)...));
#endif
}

// LaunchKernel for a grid whose blocks wait for one another (a grid barrier, or counters that
// other blocks of the grid raise): a cooperative launch, which the device starts only once every
// block can be resident at the same time, so no wait can depend on a block that has no
// multiprocessor to run on (the grid must fit the device at once: blocks x resident blocks a
// multiprocessor allows). A plain launch gets every block resident as well while this backend's
// one compute stream drains the kernel before it, but not where another process's kernels hold
// multiprocessors beside it (MPS): there such a grid could wait for good. Overlapped where
// OverlappedLaunches() holds, as LaunchKernel. Returns the launch's error and leaves none behind
// for hipGetLastError(): hipErrorCooperativeLaunchTooLarge where the device cannot hold the grid
// at once (say MPS gives this process fewer multiprocessors), which the caller can meet with
// other launches.
template <typename... Params, typename... Args>
inline hipError_t LaunchKernelWhole(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                                    hipStream_t stream, Args&&... args) {
#if defined(__HIP_PLATFORM_AMD__)
  std::tuple<Params...> values{AsParameter<Params>(args)...};
  const hipError_t e = std::apply(
      [&](auto&... v) {
        void* pointers[] = {static_cast<void*>(&v)...};
        return hipLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), grid, block,
                                          pointers, static_cast<unsigned int>(shared), stream);
      },
      values);
#else
  LaunchAttributes attributes(/*cooperative=*/true, OverlappedLaunches());
  const cudaLaunchConfig_t config = attributes.Config(grid, block, shared, stream);
  const hipError_t e = cudaLaunchKernelEx(&config, kernel, AsParameter<Params>(args)...);
#endif
  if (e != hipSuccess) static_cast<void>(hipGetLastError());
  return e;
}

#if !defined(__HIP_PLATFORM_AMD__)
// LaunchKernel in clusters of `cluster_y` blocks along y (gridDim.y a multiple of it; NVIDIA
// sm_90, at most 8 blocks a cluster), whose blocks may read one another's shared memory and
// wait at the cluster's barrier: the device starts a cluster only with all its blocks resident.
// Returns the launch's error and leaves none behind for hipGetLastError().
template <typename... Params, typename... Args>
inline hipError_t LaunchKernelClusters(void (*kernel)(Params...), dim3 grid, dim3 block,
                                       size_t shared, hipStream_t stream, unsigned int cluster_y,
                                       Args&&... args) {
  LaunchAttributes attributes(/*cooperative=*/false, OverlappedLaunches(), cluster_y);
  const cudaLaunchConfig_t config = attributes.Config(grid, block, shared, stream);
  const hipError_t e = cudaLaunchKernelEx(&config, kernel, AsParameter<Params>(args)...);
  if (e != hipSuccess) static_cast<void>(hipGetLastError());
  return e;
}
#endif

// Lets `kernel` take `bytes` of dynamic shared memory (beyond the default 48 KiB a block gets
// without asking). Cheap; called before each launch that needs it.
template <typename Kernel>
inline hipError_t AllowSharedBytes(Kernel kernel, size_t bytes) {
  return hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                             hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace cairn::infer::hip

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_DEVICE_UTIL_H_
