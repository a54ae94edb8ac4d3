// The MoE prefill path's grouped GEMMs with a producer warpgroup (MoeGemmTma, `moe_gemm_tma`,
// off by default; NVIDIA sm_90a builds): the products of moe_gemm_wgmma.hip, but the block's
// first warpgroup only feeds the stages and the others only multiply. Variant 1: tiles of 128
// picks by 256 weight columns, two multiplying warpgroups; variant 2: 192 picks by 128 columns,
// three. The weights come by the tensor memory accelerator, one box copy a stage (two for
// gate/up: the gate rows, then the up rows), from a tensor map of each expert part
// (MoeExpertMaps, made with the experts' table); the picks' input rows by the producer's 128
// threads, a row each (two for some in variant 2), with asynchronous copies counted on the same
// barrier. A stage's full barrier completes when both have landed; its empty barrier when every
// multiplying warp's instructions that read it have completed. No barrier of the whole block in
// the k loop.
//
// Why: MoeGemmWgmma's warpgroups copy their own operands and meet at a block barrier every k
// step, so none multiplies while another copies or stores (issue 12: about 380 TFLOP/s at the
// 80B-like layer's 320 picks an expert). The twenty-eighth round's producer copied both operands
// with per-thread copies and starved three consumers; here the weights are one instruction.
// Measured (forty-sixth round, H100): both variants slower than MoeGemmWgmma's three warpgroups
// at passes of 8192 tokens and more (HIP README), so off.
//
// Bits: each output element is one accumulation chain of m64nNk16 instructions over its own
// input row and weight column, k = 0, 16, 32, ... from zero, with zeros past k and past the
// tile's rows: MoeGemmWgmma's and MoeGemmBf16's. Gate/up's output for act column c pairs
// accumulator column c (gate) with N / 2 + c (up), which the same thread holds, and writes
// bf16(silu(gate) * up) as MoeGemmWgmma does.

#include <atomic>
#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/hip/moe_stream_device.h"
#include "services/infer/kernels/hip/tma_device.h"
#include "services/infer/kernels/hip/wgmma_device.h"

namespace cairn::infer::hip {

namespace {
std::atomic<int64_t> tma_launches{0};  // MoeGemmTmaLaunches().
}  // namespace

namespace {
// The blocks' shapes (HipKernelBackendOptions::moe_gemm_tma): weight columns a block and
// multiplying warpgroups (64 picks each) for variants 1 and 2.
constexpr int kVariantCols[3] = {0, 256, 128};
constexpr int kVariantConsumers[3] = {0, 2, 3};
bool KnownVariant(int variant) { return variant == 1 || variant == 2; }
}  // namespace

int MoeGemmTmaTileRows(int variant) {
  return KnownVariant(variant) ? 64 * kVariantConsumers[variant] : 0;
}
int MoeGemmTmaBoxRows(int variant, bool silu) {
  if (!KnownVariant(variant)) return 0;
  return silu ? kVariantCols[variant] / 2 : kVariantCols[variant];
}
int64_t MoeGemmTmaLaunches() { return tma_launches.load(std::memory_order_relaxed); }

#if defined(__HIP_PLATFORM_AMD__) || !defined(CAIRN_HIP_WGMMA)

bool MoeGemmTmaSupported() { return false; }
hipError_t MoeGemmTma(const uint16_t*, int64_t, const MoeTile*, const int32_t*, int64_t,
                      const MoeExpertParts*, const MoeExpertMaps*, int64_t, int64_t, float*,
                      int64_t, int, hipStream_t) {
  return hipErrorNotSupported;
}
hipError_t MoeGemmTmaSiluMul(const uint16_t*, int64_t, const int32_t*, int, const MoeTile*,
                             const int32_t*, int64_t, const MoeExpertParts*, const MoeExpertMaps*,
                             int64_t, int64_t, uint16_t*, int, hipStream_t) {
  return hipErrorNotSupported;
}

#else

namespace {

using moe_stream::BarrierArrive;
using moe_stream::BarrierArriveExpect;
using moe_stream::BarrierInit;
using moe_stream::BarrierInitFence;
using moe_stream::BarrierWait;
using moe_stream::SharedAddress;
using wgmma::CopyChunk;
using wgmma::Descriptor;
using wgmma::FenceAccumulators;
using wgmma::kAlign;
using wgmma::Swizzled;

constexpr int kK = 64;  // k values a stage: one 128-byte row of bf16.
static_assert(kK == kSwizzledBoxCols, "a stage's k values are one swizzled box row");
constexpr int kStages = 4;       // Stages in shared memory.
constexpr int kChunks = kK / 8;  // 16-byte chunks a row of a stage.
// A stage's full barrier: the producer's 128 threads' copies, and thread 0's expected bytes.
constexpr uint32_t kFullArrivals = 128 + 1;

// A block of variant kVariant: kCols weight columns (instruction n), kConsumers multiplying
// warpgroups of 64 picks after the producer's.
template <int kVariant>
struct Shape {
  static constexpr int kCols = kVariantCols[kVariant];
  static constexpr int kConsumers = kVariantConsumers[kVariant];
  static constexpr int kTileRows = 64 * kConsumers;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kABytes = kTileRows * kK * 2;  // 16 / 24 KiB.
  static constexpr int kBBytes = kCols * kK * 2;      // 32 / 16 KiB.
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSharedBytes = kStages * kStageBytes + kAlign;
  static constexpr int kAcc = kCols / 2;  // Accumulators a thread (64 x kCols / 128).
  // Rows of a tile each producer thread copies.
  static constexpr int kRowsPerThread = (kTileRows + 127) / 128;
  static_assert(kABytes % kAlign == 0 && kBBytes % (2 * kAlign) == 0, "stages on swizzle periods");
};

// The map, and the row within its part, of weight row `row` of an expert whose parts `w` and
// maps `m` give (a row past the last part: that part's map, which reads zeros there).
__device__ inline const TensorMap* MapOfRow(const MoeExpertParts& w, const MoeExpertMaps& m,
                                            int64_t row, int32_t* local) {
  int64_t start = 0;
  int last = 0;
#pragma unroll
  for (int p = 0; p < kMoeMaxParts; ++p) {
    if (p >= w.count) break;
    if (row < w.end[p]) {
      *local = static_cast<int32_t>(row - start);
      return &m.part[p];
    }
    last = p;
    if (p + 1 < w.count) start = w.end[p];
  }
  *local = static_cast<int32_t>(row - start);
  return &m.part[last];
}

// Grid: one block per (tile, group of columns), a tile's groups consecutive. kSilu: the
// group's kCols / 2 act columns c0 + j take weight rows c0 + j (gate) and n + c0 + j (up), as
// stage rows j and kCols / 2 + j; else the group's columns are weight rows col0 .. col0 + kCols -
// 1. A row r of a tile: a row tile.start + r, or with `sorted_picks` a row
// sorted_picks[tile.start + r] / top_k.
template <bool kSilu, int kVariant>
__global__ void __launch_bounds__(Shape<kVariant>::kThreads, 1)
    MoeGemmTmaKernel(const uint16_t* a, int64_t lda, const int32_t* sorted_picks, int top_k,
                     const MoeTile* tiles, const int32_t* num_tiles, int groups,
                     const MoeExpertParts* weights, const MoeExpertMaps* maps, int64_t n, int64_t k,
                     float* y, int64_t ldy, uint16_t* act) {
  using S = Shape<kVariant>;
  constexpr int kCols = S::kCols;
  constexpr int kAcc = S::kAcc;
  __shared__ uint64_t full[kStages];
  __shared__ uint64_t empty[kStages];
  KernelEntry();
  const int32_t tile_index = static_cast<int32_t>(blockIdx.x / groups);
  if (tile_index >= *num_tiles) return;  // Uniform per block.
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const uint32_t raw = SharedAddress(shared_raw);
  const uint32_t base = (raw + kAlign - 1) / kAlign * kAlign;
  const MoeTile tile = tiles[tile_index];
  const int64_t group = blockIdx.x % groups;
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  // Multiplying warpgroups with rows in this tile (uniform per block): 1 to kConsumers.
  const int busy = (tile.rows + 63) / 64;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(&full[s], kFullArrivals);
      BarrierInit(&empty[s], static_cast<uint32_t>(4 * busy));
    }
    BarrierInitFence();
  }
  __syncthreads();
  const int64_t steps = (k + kK - 1) / kK;

  if (wg == 0) {
    // The producer. Thread t copies rows t, t + 128, ... of the tile's inputs (zeros past the
    // tile or past k); thread 0 also asks for the stage's weight boxes.
    const uint16_t* rows[S::kRowsPerThread];
#pragma unroll
    for (int i = 0; i < S::kRowsPerThread; ++i) {
      const int r = tid + 128 * i;
      const int64_t slot = static_cast<int64_t>(tile.start) + r;
      rows[i] = r >= tile.rows ? nullptr
                : sorted_picks != nullptr
                    ? a + static_cast<int64_t>(sorted_picks[slot] / top_k) * lda
                    : a + slot * lda;
    }
    const TensorMap* map0 = nullptr;
    const TensorMap* map1 = nullptr;
    int32_t local0 = 0, local1 = 0;
    if (tid == 0) {
      const MoeExpertParts& w = weights[tile.expert];
      const MoeExpertMaps& m = maps[tile.expert];
      if constexpr (kSilu) {
        map0 = MapOfRow(w, m, group * (kCols / 2), &local0);
        map1 = MapOfRow(w, m, n + group * (kCols / 2), &local1);
        tma::PrefetchTensorMap(map1);
      } else {
        map0 = MapOfRow(w, m, group * kCols, &local0);
      }
      tma::PrefetchTensorMap(map0);
    }
    for (int64_t step = 0; step < steps; ++step) {
      const int stage = static_cast<int>(step % kStages);
      const uint32_t round = static_cast<uint32_t>(step / kStages);
      // The stage's previous contents have been read by every multiplying warp.
      if (round > 0) BarrierWait(&empty[stage], (round - 1) & 1);
      const uint32_t sa = base + static_cast<uint32_t>(stage * S::kStageBytes);
      const uint32_t sb = sa + S::kABytes;
      const int64_t k0 = step * kK;
      if (tid == 0) {
        BarrierArriveExpect(&full[stage], S::kBBytes);
        if constexpr (kSilu) {
          tma::LoadBox(sb, map0, static_cast<int32_t>(k0), local0, SharedAddress(&full[stage]));
          tma::LoadBox(sb + S::kBBytes / 2, map1, static_cast<int32_t>(k0), local1,
                       SharedAddress(&full[stage]));
        } else {
          tma::LoadBox(sb, map0, static_cast<int32_t>(k0), local0, SharedAddress(&full[stage]));
        }
      }
#pragma unroll
      for (int i = 0; i < S::kRowsPerThread; ++i) {
        const int r = tid + 128 * i;
        if (r >= S::kTileRows) break;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const bool v = rows[i] != nullptr && k0 + c * 8 < k;
          CopyChunk(sa + Swizzled(r, c), v ? rows[i] + k0 + c * 8 : a, v);
        }
      }
      // Counts on the stage's barrier once this thread's copies have landed.
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(
                       SharedAddress(&full[stage]))
                   : "memory");
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // No copy outlives its thread.
    return;
  }

  const int mine = wg - 1;   // Rows 64 mine .. 64 mine + 63 of the tile.
  if (mine >= busy) return;  // No rows (uniform per warpgroup); not counted on empty.
  float d[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) d[i] = 0.0f;
  const int lane = tid % 32;
  for (int64_t step = 0; step < steps; ++step) {
    const int stage = static_cast<int>(step % kStages);
    BarrierWait(&full[stage], static_cast<uint32_t>(step / kStages) & 1);
    __syncwarp();  // The warp converged again before the .sync.aligned instructions.
    // The producer's copies were generic-proxy writes: visible to the instructions' reads
    // after this fence (the weights' box copies already are).
    wgmma::FenceProxy();
    const uint32_t sa = base + static_cast<uint32_t>(stage * S::kStageBytes);
    FenceAccumulators(d);
    wgmma::Fence();
    const uint64_t da = Descriptor(sa + static_cast<uint32_t>(mine * 64 * 128));
    const uint64_t db = Descriptor(sa + S::kABytes);
#pragma unroll
    for (int kk = 0; kk < kK / 16; ++kk) {
      if constexpr (kCols == 256) {
        wgmma::MmaSS256(d, da + 2 * kk, db + 2 * kk);
      } else {
        wgmma::MmaSS128(d, da + 2 * kk, db + 2 * kk);
      }
    }
    wgmma::Commit();
    // The step before's instructions are done: its stage can be refilled.
    wgmma::Wait<1>();
    FenceAccumulators(d);
    if (step > 0 && lane == 0) BarrierArrive(&empty[(step - 1) % kStages]);
    __syncwarp();
  }
  wgmma::Wait<0>();
  FenceAccumulators(d);

  // d[j]: row 16 (warp % 4) + lane / 4 (+8 for odd j / 2) of the warpgroup's 64, column
  // 8 (j / 4) + 2 (lane % 4) + j % 2 of the block's 256.
  const int rbase = 64 * mine + 16 * ((tid / 32) % 4) + lane / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = rbase + 8 * h;
    if (r >= tile.rows) continue;
    const int64_t slot = static_cast<int64_t>(tile.start) + r;
    if constexpr (kSilu) {
      // Columns 8 q + .. (gate of act column c0 + 8 q + ..) and 128 + 8 q + .. (its up).
#pragma unroll
      for (int q = 0; q < kCols / 16; ++q) {
        const int jg = 4 * q + 2 * h;  // d index of the gate pair; up: jg + 64.
        const int64_t c = group * (kCols / 2) + 8 * q + 2 * (lane % 4);
        if (c < n) {
          const uint32_t lo = FloatToBf16(DeviceSilu(d[jg]) * d[jg + kAcc / 2]);
          const uint32_t hi = FloatToBf16(DeviceSilu(d[jg + 1]) * d[jg + kAcc / 2 + 1]);
          *reinterpret_cast<uint32_t*>(act + slot * n + c) = lo | (hi << 16);
        }
      }
    } else {
#pragma unroll
      for (int q = 0; q < kCols / 8; ++q) {
        const int j = 4 * q + 2 * h;
        const int64_t c = group * kCols + 8 * q + 2 * (lane % 4);
        if (c < n) {
          *reinterpret_cast<float2*>(y + slot * ldy + c) = make_float2(d[j], d[j + 1]);
        }
      }
    }
  }
}

template <bool kSilu, int kVariant>
hipError_t LaunchTma(const uint16_t* a, int64_t lda, const int32_t* sorted_picks, int top_k,
                     const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                     const MoeExpertParts* weights, const MoeExpertMaps* maps, int64_t n, int64_t k,
                     float* y, int64_t ldy, uint16_t* act, hipStream_t stream) {
  using S = Shape<kVariant>;
  if (max_tiles == 0 || n == 0) return hipSuccess;
  if (maps == nullptr || (sorted_picks != nullptr && top_k < 1)) return hipErrorInvalidValue;
  const int64_t groups = CeilDiv(n, kSilu ? S::kCols / 2 : S::kCols);
  if (k % 8 != 0 || n % 8 != 0 || lda % 8 != 0 || (!kSilu && ldy % 2 != 0) ||
      reinterpret_cast<uintptr_t>(a) % 16 != 0 || reinterpret_cast<uintptr_t>(maps) % 64 != 0 ||
      reinterpret_cast<uintptr_t>(kSilu ? static_cast<const void*>(act)
                                        : static_cast<const void*>(y)) %
              8 !=
          0 ||
      max_tiles * groups > 0x7fffffff || k > 0x7fffffff) {
    return hipErrorInvalidValue;
  }
  const auto kernel = MoeGemmTmaKernel<kSilu, kVariant>;
  const hipError_t e = AllowSharedBytes(kernel, S::kSharedBytes);
  if (e != hipSuccess) return e;
  LaunchKernel(kernel, static_cast<unsigned int>(max_tiles * groups), S::kThreads, S::kSharedBytes,
               stream, a, lda, sorted_picks, top_k, tiles, num_tiles, static_cast<int>(groups),
               weights, maps, n, k, y, ldy, act);
  const hipError_t launched = hipGetLastError();
  if (launched == hipSuccess) tma_launches.fetch_add(1, std::memory_order_relaxed);
  return launched;
}

template <bool kSilu>
hipError_t LaunchVariant(int variant, const uint16_t* a, int64_t lda, const int32_t* sorted_picks,
                         int top_k, const MoeTile* tiles, const int32_t* num_tiles,
                         int64_t max_tiles, const MoeExpertParts* weights,
                         const MoeExpertMaps* maps, int64_t n, int64_t k, float* y, int64_t ldy,
                         uint16_t* act, hipStream_t stream) {
  switch (variant) {
    case 1:
      return LaunchTma<kSilu, 1>(a, lda, sorted_picks, top_k, tiles, num_tiles, max_tiles, weights,
                                 maps, n, k, y, ldy, act, stream);
    case 2:
      return LaunchTma<kSilu, 2>(a, lda, sorted_picks, top_k, tiles, num_tiles, max_tiles, weights,
                                 maps, n, k, y, ldy, act, stream);
    default:
      return hipErrorInvalidValue;
  }
}

}  // namespace

bool MoeGemmTmaSupported() { return TensorMapsSupported(); }

hipError_t MoeGemmTma(const uint16_t* a, int64_t lda, const MoeTile* tiles,
                      const int32_t* num_tiles, int64_t max_tiles, const MoeExpertParts* weights,
                      const MoeExpertMaps* maps, int64_t n, int64_t k, float* y, int64_t ldy,
                      int variant, hipStream_t stream) {
  return LaunchVariant<false>(variant, a, lda, nullptr, 0, tiles, num_tiles, max_tiles, weights,
                              maps, n, k, y, ldy, nullptr, stream);
}

hipError_t MoeGemmTmaSiluMul(const uint16_t* a, int64_t lda, const int32_t* sorted_picks, int top_k,
                             const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                             const MoeExpertParts* weights, const MoeExpertMaps* maps,
                             int64_t width, int64_t k, uint16_t* act, int variant,
                             hipStream_t stream) {
  return LaunchVariant<true>(variant, a, lda, sorted_picks, top_k, tiles, num_tiles, max_tiles,
                             weights, maps, width, k, nullptr, 0, act, stream);
}

#endif  // CAIRN_HIP_WGMMA

}  // namespace cairn::infer::hip
