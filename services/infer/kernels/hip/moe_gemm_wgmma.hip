// The MoE prefill path's grouped GEMMs on Hopper's warpgroup matrix instructions (`wgmma`,
// NVIDIA sm_90a builds, CAIRN_HIP_WGMMA): the same tiles of one expert's picks as MoeGemmBf16
// (moe_experts.hip), 64 picks a tile for each warpgroup of a block (two or three) per (tile, 256
// weight columns), operands staged in shared memory by asynchronous copies in the 128-byte
// swizzled layout the instructions read, four stages of 64 k values in flight. Three
// warpgroups take an expert's picks of an 8192-token pass (about 160 at top 10 of 512) in one
// tile, so its weights cross from L2 once a pass instead of twice.
//
// Bits: every output element is one accumulation chain of k16 matrix instructions over its own
// input row and weight column, k = 0, 16, 32, ... in order from zero, as in MoeGemmBf16; which
// tile, slot or warpgroup holds a row, and the tile's other rows, never enter its arithmetic.
// The gate/up launch takes each 8 act columns' gate and up weight rows side by side in its
// 256 columns and writes bf16(silu(gate) * up) (MoeSiluMulBf16's expression and rounding)
// instead of the fp32 gate/up rows.

#include <cstdint>
#include <type_traits>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/hip/mma_rows_device.h"
#include "services/infer/kernels/hip/wgmma_device.h"

namespace cairn::infer::hip {

int MoeGemmWgmmaTileRows(int warpgroups) { return 64 * warpgroups; }

#if defined(__HIP_PLATFORM_AMD__) || !defined(CAIRN_HIP_WGMMA)

bool MoeGemmWgmmaSupported() { return false; }
hipError_t MoeGemmWgmma(const uint16_t*, int64_t, const MoeTile*, const int32_t*, int64_t,
                        const MoeExpertParts*, bool, int64_t, int64_t, float*, int64_t, int,
                        hipStream_t) {
  return hipErrorInvalidValue;
}
hipError_t MoeGemmWgmmaSiluMul(const uint16_t*, int64_t, const int32_t*, int, const MoeTile*,
                               const int32_t*, int64_t, const MoeExpertParts*, bool, int64_t,
                               int64_t, uint16_t*, int, hipStream_t) {
  return hipErrorInvalidValue;
}

#else

namespace {

using wgmma::CopyChunk;
using wgmma::Descriptor;
using wgmma::FenceAccumulators;
using wgmma::kAlign;
using wgmma::Swizzled;

constexpr int kCols = 256;  // Weight columns (instruction n) a block.
constexpr int kK = 64;      // k values a stage: one 128-byte row of bf16.
constexpr int kStages = 4;  // Stages in shared memory; kStages - 2 loads ahead.
constexpr int kChunks = kK / 8;          // 16-byte chunks a row of a stage.
constexpr int kBBytes = kCols * kK * 2;  // 32 KiB.
constexpr int kAcc = kCols / 2;          // Accumulators a thread (64 x 256 / 128).
constexpr int kMaxSharedBytes = 232448;  // The most shared memory an sm_90 block may opt into.

// The block's shape for kWg warpgroups: tiles of 64 kWg picks by kCols weight columns.
template <int kWg>
struct Shape {
  static constexpr int kThreads = 128 * kWg;
  static constexpr int kTileRows = 64 * kWg;
  static constexpr int kABytes = kTileRows * kK * 2;  // 8 KiB a warpgroup.
  static constexpr int kStageBytes = kABytes + kBBytes;
  // The stages, then the block's kCols weight rows' addresses.
  static constexpr int kSharedBytes = kStages * kStageBytes + kAlign + kCols * 8;
  static constexpr int kRowStep = kThreads / kChunks;  // Rows between a thread's chunks.
  static constexpr int kAPer = kTileRows / kRowStep;   // Chunks a thread copies a stage: 4.
  // Weight chunks a thread copies a stage (the last only where its row is below kCols).
  static constexpr int kBPer = (kCols + kRowStep - 1) / kRowStep;
  static_assert(kAPer * kRowStep == kTileRows && kRowStep % 16 == 0);
  static_assert(kStageBytes % kAlign == 0 && kABytes % kAlign == 0);
  static_assert(kSharedBytes <= kMaxSharedBytes);
};

// Grid: one block per (tile, group of columns), a tile's groups consecutive (blocks running
// together share the tile's rows and its expert's weights in L2); blocks past *num_tiles exit.
// Warpgroup w computes the tile's rows 64 w .. 64 w + 63 where the tile has any of them (the
// others only copy). kSilu: the group's 128 act columns c0 + j take weight rows j (gate) and
// width + j (up), 8 of each in turn (B row 16 i + e: gate c0 + 8 i + e, row 16 i + 8 + e: up),
// and act row `slot` gets bf16(silu(gate) * up); else the group's columns are weight rows
// col0 .. col0 + 255 and y row `slot` gets the fp32 products.
// A row r of a tile: a row tile.start + r, or with `sorted_picks` (gate/up) a row
// sorted_picks[tile.start + r] / top_k (the pick's token).
template <bool kSilu, int kWg>
__global__ void __launch_bounds__(Shape<kWg>::kThreads, 1)
    MoeGemmWgmmaKernel(const uint16_t* a, int64_t lda, const int32_t* sorted_picks, int top_k,
                       const MoeTile* tiles, const int32_t* num_tiles, int groups,
                       const MoeExpertParts* weights, int64_t n, int64_t k, float* y,
                       int64_t ldy, uint16_t* act) {
  using S = Shape<kWg>;
  KernelEntry();
  const int32_t tile_index = static_cast<int32_t>(blockIdx.x / groups);
  if (tile_index >= *num_tiles) return;  // Uniform per block.
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(shared_raw));
  const uint32_t base = (raw + kAlign - 1) / kAlign * kAlign;
  const MoeTile tile = tiles[tile_index];
  const MoeExpertParts& w = weights[tile.expert];
  const int64_t group = blockIdx.x % groups;
  const int tid = threadIdx.x;
  const int chunk = tid % kChunks;

  // This thread's copies: rows row0 + kRowStep i of the a tile and of the weight columns, its
  // chunk of each. The a rows by index (-1: past the tile), to keep registers for the
  // accumulators.
  const int row0 = tid / kChunks;
  int32_t a_row[S::kAPer];
#pragma unroll
  for (int i = 0; i < S::kAPer; ++i) {
    const int r = row0 + S::kRowStep * i;
    const int64_t slot = static_cast<int64_t>(tile.start) + r;
    a_row[i] = r >= tile.rows                ? -1
               : sorted_picks != nullptr ? sorted_picks[slot] / top_k
                                         : static_cast<int32_t>(slot);
  }
  // The weight rows of this thread's chunks (null past n), kept in shared memory: with three
  // warpgroups the registers are the accumulators' (addresses in registers spill), and a shared
  // load a copy beat one address stepped by a constant stride (H200, an 80B-like layer at 8192
  // tokens: 1.67 against 1.79 ms; two warpgroups were faster with registers, 1.94 against 2.09).
  // Its columns step by a constant (kSilu: row0's gate or up half throughout, kRowStep / 2 act
  // columns a step). A thread reads only entries of its own rows, which it wrote itself (the
  // row's other threads write the same value), so no barrier is needed.
  const int64_t first = kSilu ? (row0 / 8) % 2 * n + group * (kCols / 2) + (row0 / 16) * 8 +
                                    row0 % 8
                              : group * kCols + row0;  // kSilu: n is the width.
  const int64_t limit = kSilu ? (row0 / 8) % 2 * n + n : n;
  auto* const b_rows = reinterpret_cast<const uint16_t**>(shared_raw + (base - raw) +
                                                          kStages * S::kStageBytes);
#pragma unroll
  for (int i = 0; i < S::kBPer; ++i) {
    const int r = row0 + S::kRowStep * i;
    const int64_t col = first + (kSilu ? S::kRowStep / 2 : S::kRowStep) * i;
    if (r < kCols) b_rows[r] = col < limit ? mma_rows::ColumnOf(w, col, k) : nullptr;
  }
  const auto load = [&](int stage, int64_t k0) {
    const uint32_t sa = base + static_cast<uint32_t>(stage * S::kStageBytes);
    const uint32_t sb = sa + S::kABytes;
    const bool in_k = k0 + chunk * 8 < k;
    const int64_t at = k0 + chunk * 8;
#pragma unroll
    for (int i = 0; i < S::kAPer; ++i) {
      const bool v = in_k && a_row[i] >= 0;
      CopyChunk(sa + Swizzled(row0 + S::kRowStep * i, chunk), v ? a + a_row[i] * lda + at : a,
                v);
    }
#pragma unroll
    for (int i = 0; i < S::kBPer; ++i) {
      const int r = row0 + S::kRowStep * i;
      if (i == S::kBPer - 1 && r >= kCols) break;
      const uint16_t* const p = b_rows[r];
      const bool v = in_k && p != nullptr;
      CopyChunk(sb + Swizzled(r, chunk), v ? p + at : a, v);
    }
  };

  const int wg = tid / 128;
  // Tiles of at most 64 picks: warpgroups 0 and 1 take rows 0 .. 63, warpgroup w the block's
  // columns 128 w .. 128 w + 127 (half the instructions' n), so no warpgroup multiplies rows
  // past the tile only; others only copy. Uniform per block.
  const bool half = tile.rows <= 64;
  const int64_t steps = (k + kK - 1) / kK;
  constexpr int kAhead = kStages - 2;
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < steps) load(s, static_cast<int64_t>(s) * kK);
    wgmma::CopyCommit();
  }
  // Stage `step`'s copies are in and visible to every thread's matrix instructions; stage
  // step + kAhead's copies are issued. Each thread's copies of stage `step` are made visible to
  // the instructions' reads, then every thread's (the barrier). Each warp waited for its
  // instructions of step - 2, so the stage refilled (step - 2's) is free once all have arrived.
  const auto advance = [&](int64_t step) {
    wgmma::CopyWait<kAhead - 1>();
    wgmma::FenceProxy();
    __syncthreads();
    const int64_t ahead = step + kAhead;
    if (ahead < steps) load(static_cast<int>(ahead % kStages), ahead * kK);
    wgmma::CopyCommit();
  };
  // The k loop and the stores for one kind of tile (each with accumulators of its own, so that
  // nothing but the matrix instructions writes them between the instructions).
  const auto run = [&](auto half_tile) {
    constexpr bool kHalf = decltype(half_tile)::value;
    // A warpgroup with no rows to multiply only copies (uniform per warpgroup; a loop of its
    // own, as a branch around the matrix instructions in their loop would serialize them).
    if (kHalf ? wg >= 2 : 64 * wg >= tile.rows) {
      for (int64_t step = 0; step < steps; ++step) advance(step);
      return;
    }
    float d[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) d[i] = 0.0f;
    for (int64_t step = 0; step < steps; ++step) {
      advance(step);
      const uint32_t sa = base + static_cast<uint32_t>((step % kStages) * S::kStageBytes);
      FenceAccumulators(d);
      wgmma::Fence();
      // k16 step kk: 32 bytes further along the swizzled rows (descriptor units of 16).
      if constexpr (kHalf) {
        const uint64_t da = Descriptor(sa);
        const uint64_t db = Descriptor(sa + S::kABytes + static_cast<uint32_t>(wg * 128 * 128));
#pragma unroll
        for (int kk = 0; kk < kK / 16; ++kk) wgmma::MmaSS128(d, da + 2 * kk, db + 2 * kk);
      } else {
        const uint64_t da = Descriptor(sa + static_cast<uint32_t>(wg * 64 * 128));
        const uint64_t db = Descriptor(sa + S::kABytes);
#pragma unroll
        for (int kk = 0; kk < kK / 16; ++kk) wgmma::MmaSS256(d, da + 2 * kk, db + 2 * kk);
      }
      wgmma::Commit();
      wgmma::Wait<1>();
      FenceAccumulators(d);
    }
    wgmma::Wait<0>();
    FenceAccumulators(d);

    // d[j]: row 16 (warp % 4) + lane / 4 (+8 for odd j / 2) of the warpgroup's 64, column
    // 8 (j / 4) + 2 (lane % 4) + j % 2 of its 256 (half: 128) columns.
    const int lane = tid % 32;
    const int rbase = (kHalf ? 0 : 64 * wg) + 16 * ((tid / 32) % 4) + lane / 4;
    const int64_t cbase = group * kCols + (kHalf ? 128 * wg : 0);  // Of the B rows.
    const int groups_of_8 = kHalf ? kCols / 16 : kCols / 8;  // Column groups of 8 in d.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = rbase + 8 * h;
      if (r >= tile.rows) continue;
      const int64_t slot = static_cast<int64_t>(tile.start) + r;
      if constexpr (kSilu) {
        // B rows 16 q .. 16 q + 7: gate of act columns cbase / 2 + 8 q + ..., 16 q + 8 ..: up.
#pragma unroll
        for (int q = 0; q < kCols / 16; ++q) {
          if (q >= groups_of_8 / 2) break;
          const int jg = 8 * q + 2 * h;  // d index of the gate pair; up: jg + 4.
          const int64_t c = cbase / 2 + 8 * q + 2 * (lane % 4);
          if (c < n) {
            const uint32_t lo = FloatToBf16(DeviceSilu(d[jg]) * d[jg + 4]);
            const uint32_t hi = FloatToBf16(DeviceSilu(d[jg + 1]) * d[jg + 5]);
            *reinterpret_cast<uint32_t*>(act + slot * n + c) = lo | (hi << 16);
          }
        }
      } else {
#pragma unroll
        for (int q = 0; q < kCols / 8; ++q) {
          if (q >= groups_of_8) break;
          const int j = 4 * q + 2 * h;
          const int64_t c = cbase + 8 * q + 2 * (lane % 4);
          if (c < n) {
            *reinterpret_cast<float2*>(y + slot * ldy + c) = make_float2(d[j], d[j + 1]);
          }
        }
      }
    }
  };
  if (half) {
    run(std::true_type{});
  } else {
    run(std::false_type{});
  }
}

template <bool kSilu, int kWg>
hipError_t LaunchShape(const uint16_t* a, int64_t lda, const int32_t* sorted_picks, int top_k,
                       const MoeTile* tiles, const int32_t* num_tiles, int64_t blocks, int groups,
                       const MoeExpertParts* weights, int64_t n, int64_t k, float* y,
                       int64_t ldy, uint16_t* act, hipStream_t stream) {
  const auto kernel = MoeGemmWgmmaKernel<kSilu, kWg>;
  const hipError_t e = AllowSharedBytes(kernel, Shape<kWg>::kSharedBytes);
  if (e != hipSuccess) return e;
  LaunchKernel(kernel, static_cast<unsigned int>(blocks), Shape<kWg>::kThreads,
               Shape<kWg>::kSharedBytes, stream, a, lda, sorted_picks, top_k, tiles, num_tiles,
               groups, weights, n, k, y, ldy, act);
  return hipGetLastError();
}

template <bool kSilu>
hipError_t LaunchWgmma(const uint16_t* a, int64_t lda, const int32_t* sorted_picks, int top_k,
                       const MoeTile* tiles, const int32_t* num_tiles, int64_t max_tiles,
                       const MoeExpertParts* weights, bool weights_aligned, int64_t n, int64_t k,
                       float* y, int64_t ldy, uint16_t* act, int warpgroups,
                       hipStream_t stream) {
  if (warpgroups != 2 && warpgroups != 3) return hipErrorInvalidValue;
  if (max_tiles == 0 || n == 0) return hipSuccess;
  if (sorted_picks != nullptr && top_k < 1) return hipErrorInvalidValue;
  const int64_t groups = CeilDiv(n, kSilu ? kCols / 2 : kCols);
  if (!weights_aligned || k % 8 != 0 || n % 8 != 0 || lda % 8 != 0 || (!kSilu && ldy % 2 != 0) ||
      reinterpret_cast<uintptr_t>(a) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(kSilu ? static_cast<const void*>(act)
                                        : static_cast<const void*>(y)) % 8 != 0 ||
      max_tiles * groups > 0x7fffffff) {
    return hipErrorInvalidValue;
  }
  const auto launch = warpgroups == 3 ? LaunchShape<kSilu, 3> : LaunchShape<kSilu, 2>;
  return launch(a, lda, sorted_picks, top_k, tiles, num_tiles, max_tiles * groups,
                static_cast<int>(groups), weights, n, k, y, ldy, act, stream);
}

}  // namespace

bool MoeGemmWgmmaSupported() { return true; }

hipError_t MoeGemmWgmma(const uint16_t* a, int64_t lda, const MoeTile* tiles,
                        const int32_t* num_tiles, int64_t max_tiles, const MoeExpertParts* weights,
                        bool weights_aligned, int64_t n, int64_t k, float* y, int64_t ldy,
                        int warpgroups, hipStream_t stream) {
  return LaunchWgmma<false>(a, lda, nullptr, 0, tiles, num_tiles, max_tiles, weights,
                            weights_aligned, n, k, y, ldy, nullptr, warpgroups, stream);
}

hipError_t MoeGemmWgmmaSiluMul(const uint16_t* a, int64_t lda, const int32_t* sorted_picks,
                               int top_k, const MoeTile* tiles, const int32_t* num_tiles,
                               int64_t max_tiles, const MoeExpertParts* weights,
                               bool weights_aligned, int64_t width, int64_t k, uint16_t* act,
                               int warpgroups, hipStream_t stream) {
  return LaunchWgmma<true>(a, lda, sorted_picks, top_k, tiles, num_tiles, max_tiles, weights,
                           weights_aligned, width, k, nullptr, 0, act, warpgroups, stream);
}

#endif  // CAIRN_HIP_WGMMA

}  // namespace cairn::infer::hip
