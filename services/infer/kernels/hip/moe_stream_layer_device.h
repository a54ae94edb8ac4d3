#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_STREAM_LAYER_DEVICE_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_STREAM_LAYER_DEVICE_H_

// The MoE one launch's (moe_stream_layer.hip) shared-memory layout, what it is told about its
// products and stages, and its routing and sum phases (RouteAndSort, SumInLaunch); the product
// phases, the kernel and its launch stay in moe_stream_layer.hip. Included only there.

#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/hip/mma_rows_device.h"
#include "services/infer/kernels/hip/moe_combine_device.h"
#include "services/infer/kernels/hip/moe_route_device.h"
#include "services/infer/kernels/hip/moe_stream_device.h"

#if !defined(__HIP_PLATFORM_AMD__) && defined(CAIRN_HIP_WGMMA)

namespace cairn::infer::hip::moe_layer {

using mma_rows::kStep;
using moe_stream::LoadAcquire;

constexpr int kConsumers = mma_rows::kMaxSegments;  // Consumer warps; warp kConsumers produces.
constexpr int kThreads = (kConsumers + 1) * 32;
constexpr int kRows = 16;         // Weight rows (columns of y) a unit.
constexpr int kSegmentSteps = 8;  // kStep steps a segment, at most.
constexpr int64_t kMaxSegment = kSegmentSteps * kStep;
constexpr int kMaxStages = 4;
// Shared memory a block asks for at most (of the 227 KiB an sm_90 block may have): three stages
// of the 80B-like layer's gate/up units, with room left on the multiprocessor for the small
// blocks of the launches around it, which the overlapped launches make resident early.
constexpr int kSharedBudget = 212 * 1024;
// Named barrier of every consumer warp (GroupSync takes 1 .. kConsumers).
constexpr int kConsumersBarrier = 15;
// Routing inside the launch (moe_stream_products 4 and 5): a consumer warp routes a token at a
// time with its experts in registers (at most kRouteExperts), and the consumer threads sort the
// picks one a thread (at most kRoutePicks: 8 tokens of 16 picks).
constexpr int kRouteExperts = 32 * moe_route::kLaneExperts;
constexpr int kRoutePicks = 128;
static_assert(kRoutePicks <= kConsumers * 32, "a pick a consumer thread");
// Polls of a tile's counter before a down unit gives up (each an L2 round trip and a short
// sleep: seconds of the block's own time, where a wait lasts microseconds): a fault, not a wait.
constexpr uint32_t kSpinLimit = 1u << 22;

// One product of the layer, as the kernel sees it (filled on the host).
struct LayerProduct {
  const MoeExpertParts* weights;  // The routed experts' table.
  const float* x;                 // Routed tiles' inputs: row sorted_picks[s] / top_k of slot s
  int64_t ldx;                    // (the gate/up product), or row s (down).
  float* y;                       // Routed tiles' outputs, row s for slot s.
  int64_t ldy;
  MoeSharedRows shared;
  int64_t n, k, width;  // width > 0: SiLU-mul over [gate; up] (n = 2 width).
  int segments;         // Warps a group.
  int64_t segment;      // k values a segment (at most kMaxSegment).
  int groups;           // kConsumers / segments: units a stage.
  int64_t col_tiles;    // SiLU: width / 8 (gate and up rows 8 each); else n / 16, rounded up.
  int64_t row_stride;   // A unit's rows in a stage: segments * segment + 8 elements apart.
  int64_t tile_loads;   // Stage loads a tile: col_tiles / groups, rounded up.
};

// What the producer tells the consumers about a stage (written before its barrier's arrival).
struct LayerMeta {
  const float* x[8];  // The tile's input rows (null past its rows).
  float* y;           // The tile's first output row.
  int64_t ldy;
  int32_t rows;                // The tile's rows.
  int32_t ct0;                 // Group q's column tile: ct0 + q.
  int32_t tile;                // The tile's index in the call (routed, then shared).
  uint32_t valid[kConsumers];  // Group q: bit r when weight row r of its unit exists.
};

struct LayerSmem {
  uint64_t full[kMaxStages];
  uint64_t empty[kMaxStages];
  LayerMeta meta[kMaxStages];
  float partial[2][kConsumers][4][32];  // The segments' sums.
  // Routing inside the launch: the tiles (MoeSortPicks'), the slots' picks, and each token's
  // picks in the sum's order (token t's at [t top_k, (t + 1) top_k)).
  MoeTile tiles[kRoutePicks];
  int32_t sorted_picks[kRoutePicks];
  int32_t sum_slot[kRoutePicks];
  float sum_weight[kRoutePicks];
  int32_t sum_count[kRoutePicks];  // By token.
  int32_t num_tiles;
};
// The routing's scratch, in the stages' memory (the routing ends before any stage of the
// products is filled, and starts after every consumer warp has waited on every router stage's
// full barrier, so no copy into the stages is in flight): a
// routing warp's exps, the picks, and each pick's expert's tiles where it is the expert's first
// pick (else 0).
struct RouteScratch {
  float route[kConsumers][kRouteExperts];
  int32_t ids[kRoutePicks];
  float weights[kRoutePicks];
  int32_t expert_tiles[kRoutePicks];
};
constexpr size_t kStagesOffset = (sizeof(LayerSmem) + 127) / 128 * 128;

struct Ring {
  uint16_t* stages;
  int64_t stage_elems;
  int count;
};

__device__ inline int64_t ShareOf(int64_t total, int64_t block, int64_t blocks) {
  return total * block / blocks;
}

// The device's time in ns (%globaltimer), for the phase stamps.
__device__ inline uint64_t GlobalTime() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// Phase `point`'s stamp of this block (MoeLayerStreamArgs::trace; null: nothing).
__device__ inline void Stamp(uint64_t* trace, int point, uint64_t t) {
  if (trace != nullptr) trace[blockIdx.x * kMoeLayerTracePoints + point] = t;
}

// Until `counter` reaches `target` (then what its increments released is visible here).
// More than `target` counts a tile never gets: an array the launch before did not zero, which
// would let the wait pass before the activations exist; that traps too.
__device__ inline void WaitCount(const uint32_t* counter, uint32_t target) {
  for (uint32_t polls = 0;; ++polls) {
    const uint32_t count = LoadAcquire(counter);
    if (count == target) return;
    if (count > target || polls == kSpinLimit) __trap();
    __nanosleep(64);
  }
}

// The consumer warps' barrier.
__device__ inline void ConsumersSync() {
  asm volatile("bar.sync %0, %1;\n" ::"r"(kConsumersBarrier), "r"(kConsumers * 32) : "memory");
}

// Routing and the sum inside the launch, as the kernel sees them (from MoeLayerStreamArgs;
// logits null: neither).
struct LayerRoute {
  const float* logits;
  int64_t ld;
  int tokens, experts, tile_rows;
  bool renormalise;
  int32_t* ids;  // Block 0 stores the picks for MoeCombine (sum outside the launch).
  float* weights;
  int32_t* slot_of_pick;
  float* out;  // The sum inside the launch (null: MoeCombine after it).
  const float* gate;
  int64_t gate_ld;
  float* residual;
  bool twice;  // MoeLayerStreamArgs::trace_route_twice (with a trace).
};

// The consumer threads' routing and sort of the call's picks into shared memory, every block
// alike: warp w routes tokens w, w + kConsumers, ... (RouteTokenInWarp: MoeRoute's bits), then
// thread t takes pick t (picks <= kRoutePicks) and finds MoeSortPicks' slot (the valid picks of
// lower experts, then its rank among its expert's picks), its expert's tiles (the picks of its
// expert in tiles of tile_rows, laid after every lower expert's tiles) and, for the sum, its place
// in its token's order (ascending expert, then pick: MoeCombineWideKernel's). Integer counts, so
// the same slots, tiles and order as the separate launches. `x` is scratch in the stages' memory.
// kCompact: the routing's compact code (RouteTokenInWarp<true>, one copy in the kernel: the
// trace's extra routings are turns of the same loop); the same bits.
template <bool kCompact>
__device__ inline void RouteAndSort(const LayerRoute& r, int top_k, LayerSmem& sm, RouteScratch& x,
                                    int warp, uint64_t* trace) {
  if constexpr (kCompact) {
    // With `twice`, warp 0's first two turns route its first token (token 0) ahead of the
    // routing proper, each stamped (points 9 and 10): the same code as every turn's, so the
    // kernel holds one copy of the routing.
    int extra = r.twice && warp == 0 ? 2 : 0;
    for (int tok = warp; tok < r.tokens;) {
      moe_route::RouteTokenInWarp<true>(r.logits + tok * r.ld, r.experts, top_k, r.renormalise,
                                        x.route[warp], x.ids + tok * top_k,
                                        x.weights + tok * top_k);
      __syncwarp();  // Lane 0's sum has read the exps the next token's overwrite.
      if (extra > 0) {
        if (threadIdx.x == 0) Stamp(trace, 11 - extra, GlobalTime());
        --extra;
        continue;
      }
      tok += kConsumers;
    }
  } else {
    if (r.twice && warp == 0) {
      for (int i = 0; i < 2; ++i) {
        moe_route::RouteTokenInWarp(r.logits, r.experts, top_k, r.renormalise, x.route[0], x.ids,
                                    x.weights);
        __syncwarp();
        if (threadIdx.x == 0) Stamp(trace, 9 + i, GlobalTime());
      }
    }
    for (int tok = warp; tok < r.tokens; tok += kConsumers) {
      moe_route::RouteTokenInWarp(r.logits + tok * r.ld, r.experts, top_k, r.renormalise,
                                  x.route[warp], x.ids + tok * top_k, x.weights + tok * top_k);
      __syncwarp();  // Lane 0's sum has read the exps the next token's overwrite.
    }
  }
  if (threadIdx.x == 0) Stamp(trace, 11, GlobalTime());
  ConsumersSync();
  if (threadIdx.x == 0) Stamp(trace, 12, GlobalTime());
  const int picks = r.tokens * top_k;
  const int t = threadIdx.x;  // A consumer thread.
  const auto valid = [&](int32_t e) { return e >= 0 && e < r.experts; };
  const int32_t id = t < picks && valid(x.ids[t]) ? x.ids[t] : -1;
  int32_t before = 0, rank = 0, count = 0;
  if (id >= 0) {
#pragma unroll 2
    for (int j = 0; j < picks; ++j) {
      const int32_t e = x.ids[j];
      before += valid(e) && e < id ? 1 : 0;
      count += e == id ? 1 : 0;
      rank += e == id && j < t ? 1 : 0;
    }
  }
  const int32_t slot = id >= 0 ? before + rank : -1;
  const int32_t ntiles = id >= 0 && rank == 0 ? (count + r.tile_rows - 1) / r.tile_rows : 0;
  if (t < picks) x.expert_tiles[t] = ntiles;
  ConsumersSync();
  int32_t first_tile = 0, total = 0;
#pragma unroll 2
  for (int j = 0; j < picks; ++j) {
    const int32_t n = x.expert_tiles[j];
    total += n;
    first_tile += n > 0 && x.ids[j] < id ? n : 0;
  }
#pragma unroll 1
  for (int32_t i = 0; i < ntiles; ++i) {
    const int32_t start = before + i * r.tile_rows;
    const int32_t rows =
        count - i * r.tile_rows < r.tile_rows ? count - i * r.tile_rows : r.tile_rows;
    sm.tiles[first_tile + i] = MoeTile{id, start, rows};
  }
  if (t == 0) sm.num_tiles = total;
  if (t < picks) {
    if (slot >= 0) sm.sorted_picks[slot] = t;
    const int tok = t / top_k;
    if (slot >= 0) {
      int at = 0;
#pragma unroll 2
      for (int j = tok * top_k; j < (tok + 1) * top_k; ++j) {
        const int32_t e = x.ids[j];
        at += valid(e) && (e < id || (e == id && j < t)) ? 1 : 0;
      }
      sm.sum_slot[tok * top_k + at] = slot;
      sm.sum_weight[tok * top_k + at] = x.weights[t];
    }
    if (blockIdx.x == 0) {
      r.ids[t] = x.ids[t];
      r.weights[t] = x.weights[t];
      r.slot_of_pick[t] = slot;
    }
  }
  if (t < r.tokens) {
    int n = 0;
#pragma unroll 2
    for (int j = t * top_k; j < (t + 1) * top_k; ++j) n += valid(x.ids[j]) ? 1 : 0;
    sm.sum_count[t] = n;
  }
  // The scratch's stores before the bulk copies that will overwrite it (another proxy).
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The sum inside the launch, after every block's products: a grid barrier (each block counts
// itself on `done` once its consumers' stores are fenced, then waits for the grid's count), then
// block b's consumer threads take its share of the (token, four columns) items in order, each
// MoeCombineWideKernel's arithmetic (moe_combine::CombineFour) over rows read through L2.
__device__ inline void SumInLaunch(const LayerRoute& r, const float* ys, int64_t dim, int top_k,
                            LayerSmem& sm, uint32_t* done, uint64_t* trace) {
  ConsumersSync();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(done, 1u);
    WaitCount(done, gridDim.x);
    Stamp(trace, 6, GlobalTime());
  }
  ConsumersSync();
  const int64_t quads = dim / 4;
  const int64_t items = r.tokens * quads;
  const int64_t i1 = ShareOf(items, blockIdx.x + 1, gridDim.x);
  for (int64_t i = ShareOf(items, blockIdx.x, gridDim.x) + threadIdx.x; i < i1;
       i += kConsumers * 32) {
    const int64_t tok = i / quads;
    const int64_t c = i % quads * 4;
    const float scale = r.gate != nullptr ? DeviceSigmoid(r.gate[tok * r.gate_ld]) : 1.0f;
    moe_combine::CombineFour<true>(ys + c, dim, sm.sum_slot + tok * top_k,
                                   sm.sum_weight + tok * top_k, sm.sum_count[tok],
                                   r.gate != nullptr, scale, r.out + tok * dim + c,
                                   r.residual != nullptr ? r.residual + tok * dim + c : nullptr);
  }
  if (threadIdx.x == 0) Stamp(trace, 7, GlobalTime());
}

}  // namespace cairn::infer::hip::moe_layer

#endif  // !__HIP_PLATFORM_AMD__ && CAIRN_HIP_WGMMA

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_STREAM_LAYER_DEVICE_H_
