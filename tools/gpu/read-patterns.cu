// read-patterns: what a bare kernel that only loads reaches on the GPU, for comparison with the
// HIP backend's decode products (services/infer/kernels/hip/README.md, twenty-first round).
// A standalone CUDA program, not part of the build; on a machine with nvcc and the GPU:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o read-patterns tools/gpu/read-patterns.cu && ./read-patterns
// It reads bf16 "weights" (2 GiB, contents unused) with
//   - the decode products' loads (MatMulRowsMma / MoeRowsMma: a warp instruction reads 16 bytes
//     of 8 rows, lanes 4 apart along k; rows g and g + 8 of a 16-row tile), or 512 contiguous
//     bytes a warp instruction, over all 2 GiB and over 40 / 11 experts of 1024 rows (a MoE
//     layer's gate/up at four slots / one slot);
//   - grids laid out as the grouped products' (40 tiles x 32 column groups, 4 parts of k),
//     blocks in the kernel's order or an expert's groups consecutive, plainly or with overlapped
//     (programmatic dependent) launches;
//   - a one-block "routing" launch that asks part of each next expert into L2 with bulk
//     prefetches (cp.async.bulk.prefetch.L2) before the grouped read.
// Each figure is the mean of several launches back to back, against the device copy's rate.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

bool Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::printf("%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

constexpr int K = 2048;
// Each warp: 16 rows x [k0, k1): lane g = lane/4 reads row g and g+8, 16 bytes at 8t.
template <int U>
__global__ void __launch_bounds__(256, 2)
    Rows(const uint16_t* w, int64_t rows, int segs, unsigned* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t gw = (int64_t)blockIdx.x * 8 + warp;
  const int64_t tile = gw / segs;
  const int seg = gw % segs;
  if (tile * 16 >= rows) return;
  const int seglen = K / segs;
  const uint16_t* a = w + (tile * 16 + g) * K;
  const uint16_t* b = w + (tile * 16 + g + 8) * K;
  unsigned acc = 0;
  for (int kb = seg * seglen; kb < (seg + 1) * seglen; kb += 32 * U) {
    uint4 va[U], vb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      va[u] = __ldg(reinterpret_cast<const uint4*>(a + kb + u * 32 + 8 * t));
      vb[u] = __ldg(reinterpret_cast<const uint4*>(b + kb + u * 32 + 8 * t));
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      acc += va[u].x ^ va[u].y ^ va[u].z ^ va[u].w ^ vb[u].x ^ vb[u].y ^ vb[u].z ^ vb[u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}
// Each warp: the same 64 KB / segs bytes, read as contiguous 512-byte runs per instruction.
template <int U>
__global__ void __launch_bounds__(256, 2)
    Linear(const uint16_t* w, int64_t rows, int segs, unsigned* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t gw = (int64_t)blockIdx.x * 8 + warp;
  const int64_t bytes = 16LL * K * 2 / segs;
  if (gw * bytes >= rows * K * 2) return;
  const uint4* p = reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(w) + gw * bytes);
  const int n = bytes / 16;
  unsigned acc = 0;
  for (int i = 0; i < n; i += 32 * 2 * U) {
    uint4 v[2 * U];
#pragma unroll
    for (int u = 0; u < 2 * U; ++u) v[u] = __ldg(p + i + u * 32 + lane);
#pragma unroll
    for (int u = 0; u < 2 * U; ++u) acc += v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// Grouped-product-like grids: 40 tiles (experts e = (t * 7 + rot) % 512 of 1024 rows each), 32
// column groups of 2 tiles of 16 rows, 4 parts of 512 k a tile. kOrder 0: block b -> tile b % 40
// (as MoeRowsMmaKernel's grid), 1: tile b / 32 (an expert's groups consecutive). kSilu: rows g of
// the tile's 8 gate rows and the matching up rows 512 further (else rows g and g + 8).
template <int kOrder, bool kSilu, bool kPdl>
__global__ void __launch_bounds__(256, 2)
    Grouped(const uint16_t* w, int rot, unsigned* out, int tiles = 40) {
#if __CUDA_ARCH__ >= 900
  if (kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int b = blockIdx.x;
  const int tile = kOrder == 0 ? b % tiles : b / 32;
  const int group = kOrder == 0 ? b / tiles : b % 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int ctile = group * 2 + warp / 4, part = warp % 4;
  const uint16_t* e = w + (int64_t)((tile * 7 + rot) % 512) * 1024 * K;
  const uint16_t* a = kSilu ? e + (int64_t)(ctile * 8 + g) * K : e + (int64_t)(ctile * 16 + g) * K;
  const uint16_t* bb =
      kSilu ? e + (int64_t)(512 + ctile * 8 + g) * K : e + (int64_t)(ctile * 16 + g + 8) * K;
  unsigned acc = 0;
  for (int kb = part * 512; kb < (part + 1) * 512; kb += 32 * 4) {
    uint4 va[4], vb[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      va[u] = __ldg(reinterpret_cast<const uint4*>(a + kb + u * 32 + 8 * t));
      vb[u] = __ldg(reinterpret_cast<const uint4*>(bb + kb + u * 32 + 8 * t));
    }
#pragma unroll
    for (int u = 0; u < 4; ++u)
      acc += va[u].x ^ va[u].y ^ va[u].z ^ va[u].w ^ vb[u].x ^ vb[u].y ^ vb[u].z ^ vb[u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// A routing-like launch: one block that asks `bytes` of each of the next launch's `tiles` experts
// into L2 (one bulk prefetch each) and then works for about `spin` cycles.
__global__ void RouteLike(const uint16_t* w, int rot, int tiles, unsigned bytes, long long spin,
                          unsigned* out) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x < tiles && bytes > 0) {
    const uint16_t* e = w + (int64_t)((threadIdx.x * 7 + rot) % 512) * 1024 * K;
    unsigned left = bytes;
    const char* p = reinterpret_cast<const char*>(e);
    while (left > 0) {
      const unsigned n = left < (1u << 20) ? left : (1u << 20);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
      p += n;
      left -= n;
    }
  }
#endif
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  if (threadIdx.x == 0 && spin < 0) out[0] = 1;
}
template <typename... P, typename... A>
void Pdl2(void (*k)(P...), int blocks, int threads, A... args) {
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t c = {};
  c.gridDim = blocks;
  c.blockDim = threads;
  c.attrs = at;
  c.numAttrs = 1;
  cudaLaunchKernelEx(&c, k, args...);
}
template <typename... P, typename... A>
void Pdl(void (*k)(P...), int blocks, A... args) {
  Pdl2(k, blocks, 256, args...);
}
template <typename F>
float Time(F f, int reps) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  f();
  cudaDeviceSynchronize();
  cudaEventRecord(a);
  for (int r = 0; r < reps; ++r) f();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms;
  cudaEventElapsedTime(&ms, a, b);
  return ms / reps;
}
}  // namespace

int main() {
  const int64_t rows = 512 * 1024;  // 2 GiB of bf16 weights.
  const size_t bytes = rows * K * 2;
  uint16_t* w;
  unsigned* out;
  void* dst;
  if (!Check(cudaMalloc(&w, bytes), "malloc") || !Check(cudaMalloc(&dst, bytes), "malloc") ||
      !Check(cudaMalloc(&out, 4), "malloc") || !Check(cudaMemset(w, 1, bytes), "memset")) {
    return 1;
  }
  float ms = Time([&] { cudaMemcpyAsync(dst, w, bytes, cudaMemcpyDeviceToDevice); }, 5);
  printf("copy 2 GiB: %.3f ms, %.0f GB/s (read + write)\n", ms, 2.0 * bytes / ms / 1e6);
  for (int segs : {1, 4, 8}) {
    const int64_t warps = rows / 16 * segs;
    const int blocks = (int)((warps + 7) / 8);
    ms = Time([&] { Rows<4><<<blocks, 256>>>(w, rows, segs, out); }, 5);
    printf("rows pattern, %d segments, 4 steps in flight: %.0f GB/s\n", segs, bytes / ms / 1e6);
    ms = Time([&] { Rows<8><<<blocks, 256>>>(w, rows, segs, out); }, 5);
    printf("rows pattern, %d segments, 8 steps in flight: %.0f GB/s\n", segs, bytes / ms / 1e6);
    ms = Time([&] { Linear<4><<<blocks, 256>>>(w, rows, segs, out); }, 5);
    printf("linear, same bytes a warp, 4 x 2 loads in flight: %.0f GB/s\n", bytes / ms / 1e6);
  }
  // Short launches: 40 experts of 1024 rows (168 MB), as a 4-slot gate/up; 11 (46 MB) as one slot.
  for (int experts : {40, 11}) {
    const int64_t r = experts * 1024LL;
    for (int segs : {1, 2, 4, 8}) {
      const int blocks = (int)((r / 16 * segs + 7) / 8);
      int rep = 0;
      ms = Time([&] { Rows<4><<<blocks, 256>>>(w + (rep++ % 10) * r * K, r, segs, out); }, 20);
      printf("%d experts, rows pattern, %d segments: %.1f us, %.0f GB/s\n", experts, segs, ms * 1e3,
             r * K * 2 / ms / 1e6);
      ms = Time([&] { Linear<4><<<blocks, 256>>>(w + (rep++ % 10) * r * K, r, segs, out); }, 20);
      printf("%d experts, linear, %d segments: %.1f us, %.0f GB/s\n", experts, segs, ms * 1e3,
             r * K * 2 / ms / 1e6);
    }
  }
  {
    int rot = 0;
    const double gb = 40.0 * 1024 * K * 2;
    ms = Time([&] { Grouped<0, false, false><<<1280, 256>>>(w, rot += 41, out); }, 20);
    printf("grouped, tile-minor order (as the kernel), rows g / g+8: %.1f us %.0f GB/s\n", ms * 1e3,
           gb / ms / 1e6);
    ms = Time([&] { Grouped<1, false, false><<<1280, 256>>>(w, rot += 41, out); }, 20);
    printf("grouped, expert-major order, rows g / g+8: %.1f us %.0f GB/s\n", ms * 1e3,
           gb / ms / 1e6);
    ms = Time([&] { Grouped<0, true, false><<<1280, 256>>>(w, rot += 41, out); }, 20);
    printf("grouped, tile-minor order, gate / up rows: %.1f us %.0f GB/s\n", ms * 1e3,
           gb / ms / 1e6);
    ms = Time([&] { Grouped<1, true, false><<<1280, 256>>>(w, rot += 41, out); }, 20);
    printf("grouped, expert-major order, gate / up rows: %.1f us %.0f GB/s\n", ms * 1e3,
           gb / ms / 1e6);
    ms = Time([&] { Pdl(Grouped<0, true, true>, 1280, (const uint16_t*)w, rot += 41, out, 40); },
              20);
    printf("grouped, tile-minor order, gate / up rows, overlapped launches: %.1f us %.0f GB/s\n",
           ms * 1e3, gb / ms / 1e6);
    ms = Time([&] { Pdl(Grouped<1, true, true>, 1280, (const uint16_t*)w, rot += 41, out, 40); },
              20);
    printf("grouped, expert-major order, gate / up rows, overlapped launches: %.1f us %.0f GB/s\n",
           ms * 1e3, gb / ms / 1e6);
  }
  for (int tiles : {11, 40}) {
    for (unsigned mb : {0u, 1u, 2u, 4u}) {
      int rot = 0;
      ms = Time(
          [&] {
            rot += 41;
            Pdl2(RouteLike, 1, 512, (const uint16_t*)w, rot, tiles, mb << 20, 12000LL, out);
            Pdl(Grouped<1, true, true>, tiles * 32, (const uint16_t*)w, rot, out, tiles);
          },
          20);
      printf(
          "%d experts after a 12000-cycle routing that prefetched %u MB of each: %.1f us the "
          "pair\n",
          tiles, mb, ms * 1e3);
    }
  }
  return Check(cudaGetLastError(), "launches") ? 0 : 1;
}
