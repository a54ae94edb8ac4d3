// The decode path's grouped expert products streamed through shared memory
// (HipKernelBackendOptions::moe_stream_products; NVIDIA sm_90a builds, CAIRN_HIP_WGMMA): one
// long-lived block a multiprocessor: a producer warp, and eight consumer warps in groups of a
// warp per k segment, each group on its own unit.
//
// Why: at one to sixteen tokens the grouped launches of moe_experts.hip read each picked
// expert's weights once, but every short-lived block starts with a chain of lookups (its tile,
// the expert's table entry, the input row) and ends with a reduction across its warps, and the
// blocks of a wave run those phases together, so the device's memory idles between them (issue
// 12, twenty-first round: 10-12 us a four-token gate/up launch above a kernel that only loads).
// Here each block takes a contiguous run of the call's (tile, column tile) units; its producer
// warp looks up the next unit and asks for its 16 weight rows with bulk asynchronous copies
// (`cp.async.bulk`, completion counted on an mbarrier) into a ring of stages in shared memory
// while the consumers still work on earlier ones, so the lookups and the reductions hide behind
// the weights' stream.
//
// Bits: MoeRowsMmaKernel's, element for element. A group's warp s computes k segment s of the
// unit's 16 columns over its tile's rows (up to 8): the same steps of kStep values from the
// segment's start, each step's weights (zeros past k or for a missing column) and inputs (zeros
// for a missing row) split and multiplied by StepProducts into the segment's sum in step order;
// then the group's warp 0 adds the segments' sums in order (segment 0's, plus 1's, plus 2's, ...),
// and the SiLU-mul or plain store follows. Which block or stage holds a unit never enters the
// arithmetic.

#include <atomic>
#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/hip/mma_rows_device.h"
#include "services/infer/kernels/hip/moe_stream_device.h"

namespace cairn::infer::hip {

namespace {
std::atomic<int64_t> stream_launches{0};  // MoeStreamLaunches().
}  // namespace

int64_t MoeStreamLaunches() { return stream_launches.load(std::memory_order_relaxed); }

#if defined(__HIP_PLATFORM_AMD__) || !defined(CAIRN_HIP_WGMMA)

bool MoeRowsStreamSupported() { return false; }
hipError_t MoeRowsStream(bool, const float*, int64_t, const int32_t*, int, const MoeTile*,
                         const int32_t*, int64_t, const MoeExpertParts*, int64_t, int64_t, float*,
                         int64_t, bool, int64_t, int, int64_t, int, hipStream_t,
                         const MoeSharedRows&) {
  return hipErrorNotSupported;
}

#else

namespace {

using mma_rows::ColumnOf;
using mma_rows::kStep;
using mma_rows::LoadInputs8;
using mma_rows::SplitPieces;
using mma_rows::StepProducts;
using moe_stream::BarrierArrive;
using moe_stream::BarrierArriveExpect;
using moe_stream::BarrierInit;
using moe_stream::BarrierInitFence;
using moe_stream::BarrierWait;
using moe_stream::BulkCopy;
using moe_stream::GroupSync;
using moe_stream::LookUpTile;

constexpr int kMaxSegments = mma_rows::kMaxSegments;  // Consumer warps, at most.
constexpr int kRows = 16;                             // Weight rows (columns of y) a unit.
constexpr int kChunk = 256;                           // k values of one row's piece in a stage.
constexpr int kChunkSteps = kChunk / kStep;
constexpr int kPieceStride = kChunk + 8;  // A piece's elements with 16 bytes of padding, so
                                          // that a warp's reads of 8 rows hit distinct banks.
constexpr int kMaxStages = 8;
// Shared memory a block asks for at most (of the 227 KiB an sm_90 block may have).
constexpr int kSharedBudget = 212 * 1024;
static_assert(kChunk % kStep == 0 && kChunkSteps % 2 == 0);

// What the producer tells the consumers about a stage (written before its barrier's arrival).
struct StageMeta {
  const float* x[8];  // The tile's input rows (null past its rows).
  float* y;           // The tile's first output row.
  int64_t ldy;
  int32_t rows;    // The tile's rows.
  int32_t ct;      // The unit's column tile.
  uint32_t valid;  // Bit r: weight row r of the unit exists.
  int32_t tile;    // The tile's index in the call (routed, then shared).
};

struct StreamShape {
  int64_t n, k, width;  // width > 0: SiLU-mul over [gate; up] of `width` rows each.
  int segments;         // Consumer warps.
  int64_t segment;      // k values a segment.
  int chunks;           // Stages a unit (segment / kChunk, rounded up).
  int stages;           // Stages in the ring: groups x group_stages.
  int groups;           // Consumer groups (kMaxSegments / segments).
  int group_stages;     // Stages a group owns (its units' stages in turn).
  int64_t col_tiles;
  // Where piece (segment s, row r) of a stage starts: s * seg_stride + r * row_stride elements.
  // Units of one stage (chunks 1) hold whole rows, each one copy of its k values (row_stride
  // segments * segment + 8, seg_stride segment); else pieces of kChunk values a (segment, row)
  // (row_stride kPieceStride, seg_stride kRows * kPieceStride). Either way rows are 16 bytes
  // more than a multiple of 128 apart, so a warp's reads of 8 rows hit distinct banks.
  int64_t row_stride, seg_stride;
  int64_t stage_elems;
};

// The block's shared memory: barriers, stage notes, the segments' sums, then the stages.
struct StreamSmem {
  uint64_t full[kMaxStages];
  uint64_t empty[kMaxStages];
  StageMeta meta[kMaxStages];
  float partial[2][kMaxSegments][4][32];
};
constexpr size_t kStagesOffset = (sizeof(StreamSmem) + 127) / 128 * 128;

// Where chunk c of the block's j-th unit goes: consumer group j % groups owns stages
// [group * group_stages, (group + 1) * group_stages) and takes its units' chunks through them in
// turn, so a stage's rounds all belong to one group, which consumes them in order: a wait for a
// stage's round r (phase parity r & 1) always comes after its round r - 1 completed, never
// mistaking round r - 2 for it (parity names only the current phase and the one before).
struct Slot {
  int stage;
  uint32_t round;
};
__device__ inline Slot SlotOf(const StreamShape& sh, int64_t j, int c) {
  const int group = static_cast<int>(j % sh.groups);
  const int64_t local = j / sh.groups * sh.chunks + c;
  return {group * sh.group_stages + static_cast<int>(local % sh.group_stages),
          static_cast<uint32_t>(local / sh.group_stages)};
}

// Grid: enough blocks for the device's multiprocessors (one each), blocks of kMaxSegments + 1
// warps. Block b takes units [b U / G, (b + 1) U / G) of the call's U = (routed tiles + shared
// tiles) x col_tiles units (a tile's column tiles consecutive), each unit in `chunks` stages,
// in that order through the ring; consumer group q (of kMaxSegments / segments) takes the
// block's units q, q + groups, ...
template <int kPieces, bool kSilu>
__global__ void __launch_bounds__((kMaxSegments + 1) * 32, 1)
    MoeRowsStreamKernel(const float* x, int64_t ldx, const int32_t* sorted_picks, int top_k,
                        const MoeTile* tiles, const int32_t* num_tiles,
                        const MoeExpertParts* weights, float* y, int64_t ldy, StreamShape sh,
                        MoeSharedRows shared) {
  KernelEntry();
  extern __shared__ __align__(128) unsigned char stream_smem[];
  StreamSmem& sm = *reinterpret_cast<StreamSmem*>(stream_smem);
  uint16_t* const stages = reinterpret_cast<uint16_t*>(stream_smem + kStagesOffset);
  const int64_t routed = *num_tiles;
  const int64_t shared_tiles =
      shared.weights != nullptr && shared.rows > 0 ? (shared.rows + 7) / 8 : 0;
  const int64_t units = (routed + shared_tiles) * sh.col_tiles;
  const int64_t u0 = units * blockIdx.x / gridDim.x;
  const int64_t u1 = units * (blockIdx.x + 1) / gridDim.x;
  if (u0 >= u1) return;  // Uniform per block.
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int consumers = sh.segments;  // Warps a group; a group a unit at a time.
  const int groups = sh.groups;
  if (threadIdx.x == 0) {
    for (int s = 0; s < sh.stages; ++s) {
      BarrierInit(&sm.full[s], 1);
      BarrierInit(&sm.empty[s], static_cast<uint32_t>(consumers));
    }
    BarrierInitFence();
  }
  __syncthreads();
  const size_t stage_elems = static_cast<size_t>(sh.stage_elems);
  const bool whole_rows = sh.chunks == 1;

  if (warp == kMaxSegments) {
    // ---- The producer: lane r % 16 asks for weight row r, lanes 16-31 the odd segments.
    const int r = lane % kRows;
    const int half = lane / kRows;
    int64_t looked_up = -1;
    StageMeta meta = {};
    // The unit's expert's table entry, held in registers (the barriers' memory clobbers would
    // otherwise reload it from global memory for every unit).
    MoeExpertParts parts = {};
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t ti = u / sh.col_tiles;
      const int32_t ct = static_cast<int32_t>(u % sh.col_tiles);
      if (ti != looked_up) {
        looked_up = ti;
        LookUpTile(ti, routed, tiles, weights, x, ldx, sorted_picks, top_k, y, ldy, shared, lane,
                   parts, meta);
      }
      meta.ct = ct;
      // This lane's weight row of the unit.
      const uint16_t* wrow = nullptr;
      if constexpr (kSilu) {
        const int64_t j = static_cast<int64_t>(ct) * 8 + r % 8;
        if (j < sh.width) wrow = ColumnOf(parts, r < 8 ? j : sh.width + j, sh.k);
      } else {
        const int64_t col = static_cast<int64_t>(ct) * kRows + r;
        if (col < sh.n) wrow = ColumnOf(parts, col, sh.k);
      }
      meta.valid = __ballot_sync(0xffffffffu, wrow != nullptr && half == 0);
      // Where segment seg's piece of a chunk starting at `begin` ends (at the segment's end or k).
      const auto piece_end = [&](int seg, int64_t begin) {
        int64_t end = begin + kChunk;
        if (end > (seg + 1) * sh.segment) end = (seg + 1) * sh.segment;
        return end < sh.k ? end : sh.k;
      };
      for (int c = 0; c < sh.chunks; ++c) {
        const Slot slot = SlotOf(sh, u - u0, c);
        const int stage = slot.stage;
        BarrierWait(&sm.empty[stage], (slot.round & 1) ^ 1);
        // This lane's pieces: the whole row (lanes 0-15), or segments s = half, half + 2, ...
        // of row r, chunk c.
        uint32_t bytes = 0;
        if (whole_rows && wrow != nullptr && half == 0) bytes = static_cast<uint32_t>(sh.k) * 2;
        for (int s = half; !whole_rows && s < sh.segments; s += 2) {
          const int64_t begin = s * sh.segment + static_cast<int64_t>(c) * kChunk;
          const int64_t end = piece_end(s, begin);
          if (wrow != nullptr && end > begin) bytes += static_cast<uint32_t>(end - begin) * 2;
        }
        const uint32_t total = __reduce_add_sync(0xffffffffu, bytes);
        if (lane == 0) {
          sm.meta[stage] = meta;
          BarrierArriveExpect(&sm.full[stage], total);
        }
        __syncwarp();
        uint16_t* const base = stages + stage * stage_elems;
        if (whole_rows && wrow != nullptr && half == 0) {
          BulkCopy(base + r * sh.row_stride, wrow, static_cast<uint32_t>(sh.k) * 2,
                   &sm.full[stage]);
        }
        for (int s = half; !whole_rows && s < sh.segments; s += 2) {
          const int64_t begin = s * sh.segment + static_cast<int64_t>(c) * kChunk;
          const int64_t end = piece_end(s, begin);
          if (wrow != nullptr && end > begin) {
            BulkCopy(base + s * sh.seg_stride + r * sh.row_stride, wrow + begin,
                     static_cast<uint32_t>(end - begin) * 2, &sm.full[stage]);
          }
        }
      }
    }
    return;
  }

  // ---- Consumer warp `warp`: k segment s of every groups-th unit from u0 + group.
  const int group = warp / consumers;
  const int s = warp % consumers;
  const int g = lane / 4;
  const int t = lane % 4;
  const int64_t seg_begin = s * sh.segment;
  const int64_t seg_end = seg_begin + sh.segment < sh.k ? seg_begin + sh.segment : sh.k;
  // The split inputs of the chunk last loaded (a tile's units share them).
  uint32_t pieces[kChunkSteps][kPieces][4];
  int64_t held = -1;  // tile * chunks + chunk of `pieces`, or -1.
  float sum[4] = {};
  int parity = 0;
  for (int64_t u = u0 + group; u < u1; u += groups) {
    for (int c = 0; c < sh.chunks; ++c) {
      const Slot slot = SlotOf(sh, u - u0, c);
      const int stage = slot.stage;
      BarrierWait(&sm.full[stage], slot.round & 1);
      const StageMeta& m = sm.meta[stage];
      const int rows = m.rows;
      const uint32_t valid = m.valid;
      const int64_t kb0 = seg_begin + static_cast<int64_t>(c) * kChunk;
      const int64_t key = static_cast<int64_t>(m.tile) * sh.chunks + c;
      if (key != held) {
        held = key;
        const float* xa = g < rows ? m.x[g] : nullptr;
        float v[kChunkSteps][8];
#pragma unroll
        for (int q = 0; q < kChunkSteps; ++q) {
          const int64_t kb = kb0 + q * kStep;
          LoadInputs8<true>(kb < seg_end ? xa : nullptr, kb + 8 * t, sh.k, v[q]);
        }
#pragma unroll
        for (int q = 0; q < kChunkSteps; ++q) SplitPieces<kPieces>(v[q], pieces[q]);
      }
      StageMeta out = {};
      const bool last = c == sh.chunks - 1;
      if (last && s == 0) out = m;
      if (c == 0) {
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[e] = 0.0f;
      }
      const uint16_t* base = stages + stage * stage_elems + s * sh.seg_stride;
      const uint16_t* pa = base + g * sh.row_stride + 8 * t;
      const uint16_t* pb = base + (g + 8) * sh.row_stride + 8 * t;
      const bool a_ok = (valid >> g) & 1u;
      const bool b_ok = (valid >> (g + 8)) & 1u;
#pragma unroll
      for (int q = 0; q < kChunkSteps; ++q) {
        const int64_t kb = kb0 + q * kStep;
        if (kb >= seg_end) break;
        const bool in_k = kb + 8 * t < sh.k;
        const uint4 wa =
            a_ok && in_k ? *reinterpret_cast<const uint4*>(pa + q * kStep) : make_uint4(0, 0, 0, 0);
        const uint4 wb =
            b_ok && in_k ? *reinterpret_cast<const uint4*>(pb + q * kStep) : make_uint4(0, 0, 0, 0);
        StepProducts<kPieces>(wa, wb, pieces[q], sum);
      }
      __syncwarp();
      if (lane == 0) BarrierArrive(&sm.empty[stage]);
      if (!last) continue;
      // The unit's sums: the group's segment 0 warp adds the segments' in order and stores.
      float acc[4] = {sum[0], sum[1], sum[2], sum[3]};
      if (consumers > 1) {
        if (s != 0) {
#pragma unroll
          for (int e = 0; e < 4; ++e) sm.partial[parity][warp][e][lane] = sum[e];
        }
        GroupSync(group, consumers);
        if (s == 0) {
          for (int p = 1; p < consumers; ++p) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[e] += sm.partial[parity][warp + p][e][lane];
          }
        }
        parity ^= 1;
      }
      if (s != 0) continue;
      if constexpr (kSilu) {
        const int64_t j = static_cast<int64_t>(out.ct) * 8 + g;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int r = 2 * t + e;
          if (r < out.rows && j < sh.width) {
            out.y[r * out.ldy + j] = DeviceSilu(acc[e]) * acc[e + 2];
          }
        }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 2 * t + (e & 1);
          const int64_t col = static_cast<int64_t>(out.ct) * kRows + g + (e >= 2 ? 8 : 0);
          if (r < out.rows && col < sh.n) out.y[r * out.ldy + col] = acc[e];
        }
      }
    }
  }
}

template <bool kSilu>
auto StreamKernelFor(bool bf16_inputs) {
  return bf16_inputs ? MoeRowsStreamKernel<1, kSilu> : MoeRowsStreamKernel<3, kSilu>;
}

}  // namespace

bool MoeRowsStreamSupported() { return true; }

namespace {
// Rows of fp32 16-byte aligned `ld` apart (the consumers' input loads).
bool RowsAligned(const float* p, int64_t ld) {
  return ld % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
}  // namespace

hipError_t MoeRowsStream(bool silu, const float* x, int64_t ldx, const int32_t* sorted_picks,
                         int top_k, const MoeTile* tiles, const int32_t* num_tiles,
                         int64_t max_tiles, const MoeExpertParts* weights, int64_t n, int64_t k,
                         float* y, int64_t ldy, bool bf16_inputs, int64_t width, int segments,
                         int64_t segment, int multiprocessors, hipStream_t stream,
                         const MoeSharedRows& shared) {
  if (segments < 1 || kMaxSegments % segments != 0 || segment <= 0 || segment % kStep != 0 ||
      multiprocessors <= 0 || k <= 0 || k % 8 != 0 || n <= 0 || !RowsAligned(x, ldx) ||
      (shared.weights != nullptr && shared.rows > 0 && !RowsAligned(shared.x, shared.ldx))) {
    return hipErrorNotSupported;
  }
  StreamShape sh;
  sh.n = n;
  sh.k = k;
  sh.width = silu ? width : 0;
  sh.segments = segments;
  sh.segment = segment;
  sh.chunks = static_cast<int>(CeilDiv(segment, kChunk));
  sh.col_tiles = CeilDiv(n, kRows);
  if (sh.chunks == 1) {
    sh.seg_stride = segment;
    sh.row_stride = segments * segment + 8;
  } else {
    sh.seg_stride = kRows * kPieceStride;
    sh.row_stride = kPieceStride;
  }
  sh.stage_elems = sh.chunks == 1 ? kRows * sh.row_stride : segments * sh.seg_stride;
  const size_t stage_bytes = static_cast<size_t>(sh.stage_elems) * sizeof(uint16_t);
  const int64_t fit =
      (kSharedBudget - static_cast<int64_t>(kStagesOffset)) / static_cast<int64_t>(stage_bytes);
  sh.groups = kMaxSegments / segments;
  sh.group_stages = static_cast<int>((fit < kMaxStages ? fit : kMaxStages) / sh.groups);
  sh.stages = sh.groups * sh.group_stages;
  if (sh.group_stages < 1 || sh.stages < 2) return hipErrorNotSupported;
  const int64_t shared_tiles =
      shared.weights != nullptr && shared.rows > 0 ? CeilDiv(shared.rows, 8) : 0;
  const int64_t most_units = (max_tiles + shared_tiles) * sh.col_tiles;
  if (most_units <= 0) return hipSuccess;
  const int64_t blocks = most_units < multiprocessors ? most_units : multiprocessors;
  const size_t bytes = kStagesOffset + static_cast<size_t>(sh.stages) * stage_bytes;
  const auto kernel =
      silu ? StreamKernelFor<true>(bf16_inputs) : StreamKernelFor<false>(bf16_inputs);
  if (AllowSharedBytes(kernel, bytes) != hipSuccess) {
    static_cast<void>(hipGetLastError());  // Not this kernel: the caller's launches instead.
    return hipErrorNotSupported;
  }
  LaunchKernel(kernel, dim3(static_cast<unsigned int>(blocks)), dim3((kMaxSegments + 1) * 32),
               bytes, stream, x, ldx, sorted_picks, top_k, tiles, num_tiles, weights, y, ldy, sh,
               shared);
  const hipError_t e = hipGetLastError();
  if (e == hipSuccess) stream_launches.fetch_add(1, std::memory_order_relaxed);
  return e;
}

#endif

}  // namespace cairn::infer::hip
