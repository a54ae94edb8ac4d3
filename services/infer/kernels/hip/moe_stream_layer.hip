// Both grouped expert products of a MoE decode layer in one launch, streamed through shared
// memory (HipKernelBackendOptions::moe_stream_products 3; NVIDIA sm_90a builds,
// CAIRN_HIP_WGMMA): the gate/up product with SiLU-mul, then the down product, by one
// long-lived block a multiprocessor; with moe_stream_products 4 the routing and sort of the
// call's few tokens too, and with 5 the weighted sum after them.
//
// The shared-memory layout and the routing and sum phases are in moe_stream_layer_device.h; the
// product phases, the kernel and its launch here.
//
// Why: at one and four tokens the layer's two grouped launches each pay a start (the first
// loads' round trip) and a drain (the last wave's blocks finishing unevenly) around 20-60 us of
// weights, and the down launch cannot start its loads before the gate/up launch has left the
// device (issue 12, thirty-fourth round: a single streamed launch is faster alone, but a step
// loses the gain at the launches' edges). Here one producer warp a block streams the block's
// gate/up weights and then its down weights into a ring of stages without a break; the down
// weights land while the gate/up work still runs, and the down units wait only for the
// activations of their own tile.
//
// Work: a stage holds one unit (16 weight rows over the product's whole k) for each consumer
// group (kConsumers / segments groups of a warp per k segment), the units of one tile's
// consecutive column tiles. Block b takes stage loads [b L / G, (b + 1) L / G) of each product
// (L = tiles x stage loads a tile; the same tile-major order in both, so a block's down units
// are mostly of the tiles its own gate/up units made). Every consumer warp takes every stage.
//
// Router inside (MoeLayerStreamArgs::router): the router product's units go through the ring
// first, the logits stored, then a grid barrier (SumInLaunch's), after which the routing reads
// the logits other blocks wrote: plain loads, ordered after the barrier by thread 0's acquire
// and the block barrier after it (under PTX's model the acquire makes the releasers' stores
// visible to the whole block; no line of them was in this multiprocessor's L1 before).
// Routing inside (4, 5): every block routes and sorts the call itself before any unit (the
// routing warps' RouteTokenInWarp, then a pick a consumer thread counting the picks before it:
// the slots, tiles and sum order of MoeRouteAndSort and MoeCombine) into shared memory; block 0
// also stores the picks for MoeCombine.
// Sum inside (5): once a block's down units are stored it counts itself done; when the grid's
// count is full, each block sums its share of the (token, four columns) items in MoeCombine's
// order and arithmetic (moe_combine_device.h), reading the rows other blocks wrote through L2.
// That wait is a grid barrier, so it rests on the grid being resident whole, as below.
//
// Hand-over: the warp that stores a gate/up unit's activations counts it on its tile's counter
// (global memory) once it moves on to another tile or leaves the product: one fence a tile, not a
// unit (a fence a unit cost about 10 % of the gate/up phase). A down unit's warps wait (an acquire
// load) until the tile has all its gate/up units, then read the activations from L2. A down unit
// only waits for gate/up units, which wait for nothing but their own block's ring (and every block
// counts its gate/up units before any of its warps takes a down unit), so every wait ends once
// every block of the grid has run: the grid is at most a block a multiprocessor, each block taking
// one multiprocessor's shared memory, and the backend launches on its one compute stream, so the
// grid becomes resident whole as the kernel before it drains. A kernel that held multiprocessors
// for good beside it, such as a second such grid of another process sharing the device through MPS,
// could stall a plain launch; a cooperative launch (MoeLayerStreamArgs::cooperative, off by
// default) is started by the device only with every block resident. The counters come in two
// arrays: a launch counts on one and zeroes the other for the next launch (which the stream runs
// after this one has completed). A wait that does not end, or a counter past its tile's count (an
// array not zeroed), traps after at most kSpinLimit polls rather than hanging the device or reading
// activations not yet written.
//
// Bits: MoeRowsMmaKernel's (and MoeRowsStream's), element for element: a group's warp s
// computes k segment s of its unit's 16 columns over the tile's rows (up to 8) in steps of
// kStep from the segment's start, each step's weights (zeros past k or for a missing column)
// and inputs (zeros for a missing row) split and multiplied by StepProducts into the segment's
// sum in step order; then the group's warp 0 adds the segments' sums in order and stores
// (SiLU-mul or plain). Which block, stage or group holds a unit never enters the arithmetic.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "services/infer/kernels/hip/mma_rows_device.h"
#include "services/infer/kernels/hip/moe_combine_device.h"
#include "services/infer/kernels/hip/moe_route_device.h"
#include "services/infer/kernels/hip/moe_stream_device.h"
#include "services/infer/kernels/hip/moe_stream_layer_device.h"

namespace cairn::infer::hip {

namespace {
std::atomic<int64_t> layer_launches{0};  // MoeLayerStreamLaunches().
}  // namespace

int64_t MoeLayerStreamLaunches() { return layer_launches.load(std::memory_order_relaxed); }

#if defined(__HIP_PLATFORM_AMD__) || !defined(CAIRN_HIP_WGMMA)

bool MoeLayerStreamSupported() { return false; }
bool MoeLayerStreamRoutes(int64_t, int, int) { return false; }
bool MoeLayerStreamSums(int64_t, const float*, const float*, const float*) { return false; }
hipError_t MoeLayerStream(const MoeLayerStreamArgs&, hipStream_t) { return hipErrorNotSupported; }

#else

namespace {

using mma_rows::ColumnOf;
using mma_rows::EvictFirstPolicy;
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
using moe_stream::BulkCopyWithPolicy;
using moe_stream::GroupSync;
using moe_stream::LookUpTile;

using moe_layer::ConsumersSync;
using moe_layer::GlobalTime;
using moe_layer::kConsumers;
using moe_layer::kMaxSegment;
using moe_layer::kMaxStages;
using moe_layer::kRouteExperts;
using moe_layer::kRoutePicks;
using moe_layer::kRows;
using moe_layer::kSegmentSteps;
using moe_layer::kSharedBudget;
using moe_layer::kStagesOffset;
using moe_layer::kThreads;
using moe_layer::LayerMeta;
using moe_layer::LayerProduct;
using moe_layer::LayerRoute;
using moe_layer::LayerSmem;
using moe_layer::Ring;
using moe_layer::RouteAndSort;
using moe_layer::RouteScratch;
using moe_layer::ShareOf;
using moe_layer::Stamp;
using moe_layer::SumInLaunch;
using moe_layer::WaitCount;

// A product's stage loads past the blocks' fixed shares, taken one at a time from a counter
// (MoeLayerStreamArgs::static_sixteenths < 16): load `from` + the counter's old value, until
// `total`. Null `next`: none; each block runs its fixed share only.
struct Stolen {
  uint32_t* next = nullptr;
  int64_t from = 0;
  int64_t total = 0;
};

// The producer's part of one product: stage loads [j0, j1) of the tiles, `tiles`' first `routed`
// (their inputs through `sorted_picks` where given), then the shared rows' tiles of 8; then,
// where `stolen.next` is given, loads taken from its counter (each claimed before the wait for
// the stage of the load before it, so the counter's round trip overlaps that wait), and a last
// stage without weights that tells the consumers the product is done. Loads go in ascending
// order either way, so a block's tiles never go back. The stage count `n` runs on.
template <bool kSilu, bool kSteals>
__device__ void Produce(const LayerProduct& p, const MoeTile* tiles, const int32_t* sorted_picks,
                        int64_t routed, int top_k, int64_t j0, int64_t j1, const Stolen& stolen,
                        LayerSmem& sm, const Ring& ring, uint32_t& n, int lane) {
  int64_t looked_up = -1;
  const uint64_t policy = mma_rows::kStreamWeights ? EvictFirstPolicy() : 0;
  LayerMeta meta = {};
  // The unit's expert's table entry, held in registers.
  MoeExpertParts parts = {};
  const bool steals = kSteals && stolen.next != nullptr;
  const int64_t end = steals ? stolen.total : j1;
  // Lane 0's claim of the next load (the counter's old value), broadcast when needed.
  const auto claim = [&] {
    uint32_t old = 0;
    if (lane == 0) old = atomicAdd(stolen.next, 1u);
    return old;
  };
  int64_t j = j0;
  if (j >= j1 && steals) j = stolen.from + __shfl_sync(0xffffffffu, claim(), 0);
  while (j < end) {
    // The next load: the fixed share's next, or claimed now (its value read after the copies).
    const bool claims = steals && j + 1 >= j1;
    const uint32_t claimed = claims ? claim() : 0u;
    const int64_t ti = j / p.tile_loads;
    const int32_t ct0 = static_cast<int32_t>(j % p.tile_loads * p.groups);
    if (ti != looked_up) {
      looked_up = ti;
      LookUpTile(ti, routed, tiles, p.weights, p.x, p.ldx, sorted_picks, top_k, p.y, p.ldy,
                 p.shared, lane, parts, meta);
    }
    meta.ct0 = ct0;
    // Lane l asks for row (l + 32 i) % 16 of group (l + 32 i) / 16's unit, i = 0 .. 3.
    const uint16_t* src[kConsumers * kRows / 32];
    uint32_t bytes = 0;
#pragma unroll
    for (int i = 0; i < kConsumers * kRows / 32; ++i) {
      const int q = (lane + 32 * i) / kRows;
      const int r = lane % kRows;
      const int64_t ct = static_cast<int64_t>(ct0) + q;
      const uint16_t* wrow = nullptr;
      if (q < p.groups && ct < p.col_tiles) {
        if constexpr (kSilu) {
          const int64_t c = ct * 8 + r % 8;
          if (c < p.width) wrow = ColumnOf(parts, r < 8 ? c : p.width + c, p.k);
        } else {
          const int64_t col = ct * kRows + r;
          if (col < p.n) wrow = ColumnOf(parts, col, p.k);
        }
      }
      const uint32_t ballot = __ballot_sync(0xffffffffu, wrow != nullptr);
      if (2 * i < kConsumers) meta.valid[2 * i] = ballot & 0xffffu;
      if (2 * i + 1 < kConsumers) meta.valid[2 * i + 1] = ballot >> 16;
      if (wrow != nullptr) bytes += static_cast<uint32_t>(p.k) * 2;
      src[i] = wrow;
    }
    const uint32_t total = __reduce_add_sync(0xffffffffu, bytes);
    const int stage = static_cast<int>(n % static_cast<uint32_t>(ring.count));
    const uint32_t round = n / static_cast<uint32_t>(ring.count);
    ++n;
    BarrierWait(&sm.empty[stage], (round & 1) ^ 1);
    if (lane == 0) {
      sm.meta[stage] = meta;
      BarrierArriveExpect(&sm.full[stage], total);
    }
    __syncwarp();
    uint16_t* const base = ring.stages + stage * ring.stage_elems;
#pragma unroll
    for (int i = 0; i < kConsumers * kRows / 32; ++i) {
      if (src[i] == nullptr) continue;
      const int q = (lane + 32 * i) / kRows;
      const int r = lane % kRows;
      uint16_t* const dst = base + (static_cast<int64_t>(q) * kRows + r) * p.row_stride;
      if constexpr (mma_rows::kStreamWeights) {
        BulkCopyWithPolicy(dst, src[i], static_cast<uint32_t>(p.k) * 2, &sm.full[stage], policy);
      } else {
        BulkCopy(dst, src[i], static_cast<uint32_t>(p.k) * 2, &sm.full[stage]);
      }
    }
    j = claims ? stolen.from + __shfl_sync(0xffffffffu, claimed, 0) : j + 1;
  }
  if (steals) {
    // The end: a stage with no weights, its tile -1.
    const int stage = static_cast<int>(n % static_cast<uint32_t>(ring.count));
    const uint32_t round = n / static_cast<uint32_t>(ring.count);
    ++n;
    BarrierWait(&sm.empty[stage], (round & 1) ^ 1);
    if (lane == 0) {
      sm.meta[stage].tile = -1;
      BarrierArrive(&sm.full[stage]);
    }
    __syncwarp();
  }
}

// Counts `units` gate/up units of tile `tile` (none: nothing) on its counter, after every
// lane's stores before it are visible device-wide.
__device__ inline void Release(uint32_t* counters, int tile, uint32_t units, int lane) {
  if (units == 0) return;
  // The warp's stores ordered before lane 0's fence by the warp barrier, then the count: the
  // release pattern of a grid-wide barrier, at warp scale.
  __syncwarp();
  if (lane == 0) {
    __threadfence();
    atomicAdd(&counters[tile], units);
  }
}

// 8 inputs at p[i .. i+7] (zeros past k or for a null row) through L2 (ld.global.cg): rows
// another block of this launch wrote, which this multiprocessor's L1 must not serve.
__device__ inline void LoadInputs8Fresh(const float* p, int64_t i, int64_t k, float out[8]) {
  if (p == nullptr || i >= k) {
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = 0.0f;
    return;
  }
  const float4 a = __ldcg(reinterpret_cast<const float4*>(p + i));
  const float4 b = __ldcg(reinterpret_cast<const float4*>(p + i + 4));
  out[0] = a.x;
  out[1] = a.y;
  out[2] = a.z;
  out[3] = a.w;
  out[4] = b.x;
  out[5] = b.y;
  out[6] = b.z;
  out[7] = b.w;
}

// A consumer warp's part of one product: every stage of loads [j0, j1), and where `steals`
// every stage after them until the producer's last (tile -1). kSilu: the gate/up product, each
// unit's activations counted on `counters[tile]` once stored; else the down product, whose
// units first wait until `counters[tile]` reaches `ready`.
template <int kPieces, bool kSilu, bool kSteals>
__device__ void Consume(const LayerProduct& p, int64_t j0, int64_t j1, bool steals, LayerSmem& sm,
                        const Ring& ring, uint32_t& n, int& parity, uint32_t* counters,
                        uint32_t ready, int warp, int lane) {
  const int group = warp / p.segments;
  const int s = warp % p.segments;
  const int g = lane / 4;
  const int t = lane % 4;
  const int64_t seg_begin = s * p.segment;
  const int64_t seg_end = seg_begin + p.segment < p.k ? seg_begin + p.segment : p.k;
  // The split inputs of the tile last loaded.
  uint32_t pieces[kSegmentSteps][kPieces][4];
  int64_t held = -1;
  int pending_tile = -1;  // kSilu: the tile of the units stored and not yet counted.
  uint32_t pending = 0;
  steals = kSteals && steals;
  for (int64_t j = j0; steals || j < j1; ++j) {
    const int stage = static_cast<int>(n % static_cast<uint32_t>(ring.count));
    const uint32_t round = n / static_cast<uint32_t>(ring.count);
    ++n;
    BarrierWait(&sm.full[stage], round & 1);
    const LayerMeta& m = sm.meta[stage];
    if (steals && m.tile < 0) {  // The producer's last stage: the product is done.
      __syncwarp();
      if (lane == 0) BarrierArrive(&sm.empty[stage]);
      break;
    }
    const int64_t ct = static_cast<int64_t>(m.ct0) + group;
    const bool active = ct < p.col_tiles;
    const int rows = m.rows;
    const int tile = m.tile;
    float* const y = m.y;
    const int64_t ldy = m.ldy;
    float sum[4] = {};
    if (active) {
      if (tile != held) {
        held = tile;
        const float* xa = g < rows ? m.x[g] : nullptr;
        float v[kSegmentSteps][8];
        if constexpr (kSilu) {
#pragma unroll
          for (int q = 0; q < kSegmentSteps; ++q) {
            const int64_t kb = seg_begin + q * kStep;
            LoadInputs8<true>(kb < seg_end ? xa : nullptr, kb + 8 * t, p.k, v[q]);
          }
        } else {
          if (counters != nullptr) {  // Null: inputs written before the launch (the router).
            if (lane == 0) WaitCount(&counters[tile], ready);
            __syncwarp();
          }
#pragma unroll
          for (int q = 0; q < kSegmentSteps; ++q) {
            const int64_t kb = seg_begin + q * kStep;
            LoadInputs8Fresh(kb < seg_end ? xa : nullptr, kb + 8 * t, p.k, v[q]);
          }
        }
#pragma unroll
        for (int q = 0; q < kSegmentSteps; ++q) SplitPieces<kPieces>(v[q], pieces[q]);
      }
      const uint32_t valid = m.valid[group];
      const uint16_t* base = ring.stages + stage * ring.stage_elems +
                             static_cast<int64_t>(group) * kRows * p.row_stride + seg_begin;
      const uint16_t* pa = base + g * p.row_stride + 8 * t;
      const uint16_t* pb = base + (g + 8) * p.row_stride + 8 * t;
      const bool a_ok = (valid >> g) & 1u;
      const bool b_ok = (valid >> (g + 8)) & 1u;
#pragma unroll
      for (int q = 0; q < kSegmentSteps; ++q) {
        const int64_t kb = seg_begin + q * kStep;
        if (kb >= seg_end) break;
        const bool in_k = kb + 8 * t < p.k;
        const uint4 wa =
            a_ok && in_k ? *reinterpret_cast<const uint4*>(pa + q * kStep) : make_uint4(0, 0, 0, 0);
        const uint4 wb =
            b_ok && in_k ? *reinterpret_cast<const uint4*>(pb + q * kStep) : make_uint4(0, 0, 0, 0);
        StepProducts<kPieces>(wa, wb, pieces[q], sum);
      }
    }
    __syncwarp();
    if (lane == 0) BarrierArrive(&sm.empty[stage]);
    if (!active) continue;  // Uniform over the group.
    // The unit's sums: the group's segment 0 warp adds the segments' in order and stores.
    float acc[4] = {sum[0], sum[1], sum[2], sum[3]};
    if (p.segments > 1) {
      if (s != 0) {
#pragma unroll
        for (int e = 0; e < 4; ++e) sm.partial[parity][warp][e][lane] = sum[e];
      }
      GroupSync(group, p.segments);
      if (s == 0) {
        for (int q = 1; q < p.segments; ++q) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[e] += sm.partial[parity][warp + q][e][lane];
        }
      }
      parity ^= 1;
    }
    if (s != 0) continue;
    if constexpr (kSilu) {
      const int64_t c = ct * 8 + g;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = 2 * t + e;
        if (r < rows && c < p.width) y[r * ldy + c] = DeviceSilu(acc[e]) * acc[e + 2];
      }
      // Counted when the warp moves to another tile (or leaves the product): one release
      // (every lane's stores fenced, then the count) for all of a tile's units here.
      if (tile != pending_tile) {
        Release(counters, pending_tile, pending, lane);
        pending_tile = tile;
        pending = 0;
      }
      ++pending;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 2 * t + (e & 1);
        const int64_t col = ct * kRows + g + (e >= 2 ? 8 : 0);
        if (r < rows && col < p.n) y[r * ldy + col] = acc[e];
      }
    }
  }
  if constexpr (kSilu) Release(counters, pending_tile, pending, lane);
}

// Grid: at most a block a multiprocessor, blocks of kThreads. The gate/up product `a`, then the
// down product `b`, over the call's routed tiles (at most max_tiles) and `shared_tiles` tiles of
// the shared rows: the routed tiles from `tiles`, or, where route.logits is given, routed and
// sorted by each block itself first. `counters` count each tile's gate/up units (zero at entry;
// counter max_tiles + shared_tiles counts the blocks done where the sum is inside), `next`
// (`next_count` of them) are zeroed for the next launch.
// The router product inside (`r`, r.n > 0; needs the routing inside): its units (r.shared's
// tiles of 8 token rows, no routed tiles) go through the ring first, as the down product's
// (the bits of MatMulRowsMma's product, as the down units'), writing route.logits; then a grid
// barrier on counter max_tiles + shared_tiles + 1 before any block routes.
// kCompact: MoeLayerStreamArgs::compact_route (the routing's compact code; the same bits).
template <int kPieces, bool kSteals, bool kCompact>
__global__ void __launch_bounds__(kThreads, 1)
    MoeLayerStreamKernel(const MoeTile* tiles, const int32_t* num_tiles,
                         const int32_t* sorted_picks, int64_t max_tiles, int64_t shared_tiles,
                         int top_k, LayerRoute route, LayerProduct a, LayerProduct b,
                         LayerProduct r, int64_t stage_elems, int stage_count, uint32_t* counters,
                         uint32_t* next, int64_t next_count, uint64_t* trace, bool release,
                         int static_sixteenths) {
  // The entry's stamp is stored only after the wait (nothing is written before it).
  const uint64_t entry = trace != nullptr ? GlobalTime() : 0;
  KernelEntry(release);
  const uint64_t past_wait = trace != nullptr ? GlobalTime() : 0;
  if (blockIdx.x == 0) {
    for (int64_t i = threadIdx.x; i < next_count; i += blockDim.x) next[i] = 0;
  }
  extern __shared__ __align__(128) unsigned char layer_smem[];
  LayerSmem& sm = *reinterpret_cast<LayerSmem*>(layer_smem);
  const Ring ring{reinterpret_cast<uint16_t*>(layer_smem + kStagesOffset), stage_elems,
                  stage_count};
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stage_count; ++s) {
      BarrierInit(&sm.full[s], 1);
      BarrierInit(&sm.empty[s], kConsumers);
    }
    BarrierInitFence();
  }
  uint32_t n = 0;  // Stage loads so far (the ring's position), alike in every warp.
  if (r.n > 0) {
    __syncthreads();  // The ring's barriers initialised.
    const int64_t lr = (r.shared.rows + 7) / 8 * r.tile_loads;
    const int64_t r0 = ShareOf(lr, blockIdx.x, gridDim.x);
    const int64_t r1 = ShareOf(lr, blockIdx.x + 1, gridDim.x);
    if (warp == kConsumers) {
      Produce<false, false>(r, nullptr, nullptr, 0, top_k, r0, r1, {}, sm, ring, n, lane);
    } else {
      int router_parity = 0;
      Consume<kPieces, false, false>(r, r0, r1, false, sm, ring, n, router_parity, nullptr, 0, warp,
                                     lane);
    }
    // Every block's logits stored before any block routes (SumInLaunch's grid barrier).
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t* const routed_done = counters + max_tiles + shared_tiles + 1;
      __threadfence();
      atomicAdd(routed_done, 1u);
      WaitCount(routed_done, gridDim.x);
    }
    __syncthreads();
  }
  if (route.logits != nullptr) {
    // Streaming the shared rows' weights meanwhile would not shorten the launch: the blocks
    // without any wait for the sort all the same, and splitting the two kinds of tiles apart
    // leaves some blocks a unit more than an even split (measured: one token 52 against 43 us).
    if (warp < kConsumers) {
      RouteAndSort<kCompact>(route, top_k, sm, *reinterpret_cast<RouteScratch*>(ring.stages), warp,
                             trace);
    }
    tiles = sm.tiles;
    num_tiles = &sm.num_tiles;
    sorted_picks = sm.sorted_picks;
  }
  __syncthreads();
  if (threadIdx.x == 0 && trace != nullptr) {
    Stamp(trace, 0, entry);
    Stamp(trace, 1, past_wait);
    Stamp(trace, 2, GlobalTime());
  }
  // The routing's tiles, at most max_tiles (what the counters were sized for).
  const int64_t routed = *num_tiles < max_tiles ? *num_tiles : max_tiles;
  const int64_t all_tiles = routed + shared_tiles;
  const int64_t la = all_tiles * a.tile_loads;
  const int64_t lb = all_tiles * b.tile_loads;
  // The blocks' fixed shares: the first static_sixteenths / 16 of each product's loads, the
  // rest taken from a counter each (after the sum's and the router's).
  const bool steals = kSteals && static_sixteenths < 16;
  const int64_t fa = steals ? la * static_sixteenths / 16 : la;
  const int64_t fb = steals ? lb * static_sixteenths / 16 : lb;
  uint32_t* const taken = counters + max_tiles + shared_tiles + 2;
  const Stolen stolen_a = steals ? Stolen{taken, fa, la} : Stolen{};
  const Stolen stolen_b = steals ? Stolen{taken + 1, fb, lb} : Stolen{};
  const int64_t a0 = ShareOf(fa, blockIdx.x, gridDim.x);
  const int64_t a1 = ShareOf(fa, blockIdx.x + 1, gridDim.x);
  const int64_t b0 = ShareOf(fb, blockIdx.x, gridDim.x);
  const int64_t b1 = ShareOf(fb, blockIdx.x + 1, gridDim.x);
  // A block without units leaves, unless the sum inside waits for it or it may take loads.
  if (a0 >= a1 && b0 >= b1 && route.out == nullptr && !steals) return;  // Uniform per block.
  if (warp == kConsumers) {
    Produce<true, kSteals>(a, tiles, sorted_picks, routed, top_k, a0, a1, stolen_a, sm, ring, n,
                           lane);
    Produce<false, kSteals>(b, tiles, nullptr, routed, top_k, b0, b1, stolen_b, sm, ring, n, lane);
    if (lane == 0) Stamp(trace, 8, GlobalTime());
    return;
  }
  int parity = 0;
  Consume<kPieces, true, kSteals>(a, a0, a1, steals, sm, ring, n, parity, counters, 0, warp, lane);
  if (threadIdx.x == 0) Stamp(trace, 3, GlobalTime());
  // The groups change: no warp writes the segments' sums of a down unit before every warp is
  // done with the gate/up units' sums.
  ConsumersSync();
  if (threadIdx.x == 0) Stamp(trace, 4, GlobalTime());
  // Both halves of `partial` are free now. A group of the down product may join warps of
  // several gate/up groups, whose parities differ where some skipped a unit past the last
  // column tile: every warp starts the down product on the same half.
  parity = 0;
  Consume<kPieces, false, kSteals>(b, b0, b1, steals, sm, ring, n, parity, counters,
                                   static_cast<uint32_t>(a.col_tiles), warp, lane);
  if (threadIdx.x == 0) Stamp(trace, 5, GlobalTime());
  if (route.out != nullptr) {
    SumInLaunch(route, b.y, b.n, top_k, sm, counters + max_tiles + shared_tiles, trace);
  }
}

// Rows of fp32 16-byte aligned `ld` apart (the consumers' input loads).
bool RowsAligned(const float* p, int64_t ld) {
  return ld % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The kernel's view of one product (false: not one the kernel takes).
bool Describe(LayerProduct& p, int64_t n, int64_t k, int64_t width) {
  if (k <= 0 || k % 8 != 0 || n <= 0) return false;
  const mma_rows::Segments cut = mma_rows::SegmentsFor(n, k);
  if (cut.count < 1 || kConsumers % cut.count != 0 || cut.length > kMaxSegment ||
      cut.length % kStep != 0) {
    return false;
  }
  p.n = n;
  p.k = k;
  p.width = width;
  p.segments = cut.count;
  p.segment = cut.length;
  p.groups = kConsumers / cut.count;
  p.col_tiles = width > 0 ? width / 8 : CeilDiv(n, kRows);
  p.row_stride = cut.count * cut.length + 8;
  p.tile_loads = CeilDiv(p.col_tiles, p.groups);
  return true;
}

}  // namespace

bool MoeLayerStreamSupported() { return true; }

bool MoeLayerStreamRoutes(int64_t tokens, int experts, int top_k) {
  return tokens >= 1 && experts >= 1 && experts <= kRouteExperts && top_k >= 1 &&
         top_k <= experts && top_k <= kMoeMaxTopK && tokens * top_k <= kRoutePicks;
}

bool MoeLayerStreamSums(int64_t hidden, const float* ys, const float* out, const float* residual) {
  const auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return hidden % 4 == 0 && aligned(ys) && aligned(out) && aligned(residual);
}

hipError_t MoeLayerStream(const MoeLayerStreamArgs& c, hipStream_t stream) {
  const bool with_shared = c.shared_up.weights != nullptr && c.shared_up.rows > 0;
  if (with_shared != (c.shared_down.weights != nullptr && c.shared_down.rows > 0) ||
      (with_shared && c.shared_up.rows != c.shared_down.rows)) {
    return hipErrorInvalidValue;
  }
  const int64_t shared_tiles = with_shared ? CeilDiv(c.shared_up.rows, 8) : 0;
  if (c.max_tiles < 0 || c.top_k < 1 || c.static_sixteenths < 0 || c.static_sixteenths > 16) {
    return hipErrorInvalidValue;
  }
  // Nothing to do: not launched (the caller's counter arrays stay as they are).
  if (c.max_tiles + shared_tiles == 0) return hipErrorNotSupported;
  LayerProduct a = {}, b = {};
  if (c.width <= 0 || c.width % 8 != 0 || c.multiprocessors <= 0 ||
      !Describe(a, 2 * c.width, c.hidden, c.width) || !Describe(b, c.hidden, c.width, 0) ||
      !RowsAligned(c.x, c.ldx) || !RowsAligned(c.act, c.width) ||
      (with_shared && (!RowsAligned(c.shared_up.x, c.shared_up.ldx) ||
                       !RowsAligned(c.shared_down.x, c.shared_down.ldx))) ||
      c.counters == nullptr || c.next_counters == nullptr ||
      c.counter_capacity < c.max_tiles + shared_tiles || a.col_tiles > 0xffffffffLL ||
      (c.static_sixteenths < 16 && c.counter_capacity < c.max_tiles + shared_tiles + 4)) {
    return hipErrorNotSupported;
  }
  // The routing's tiles from MoeRouteAndSort, or the routing and sort (and the sum) inside.
  LayerRoute route = {};
  const bool sums = c.out != nullptr;
  if (c.logits != nullptr) {
    if (!MoeLayerStreamRoutes(c.tokens, c.experts, c.top_k) || c.logits_ld < c.experts ||
        c.tile_rows < 1 || c.tile_rows > 8 || (with_shared && c.shared_up.rows != c.tokens)) {
      return hipErrorNotSupported;
    }
    if (c.ids == nullptr || c.weights == nullptr || c.slot_of_pick == nullptr) {
      return hipErrorInvalidValue;
    }
    route.logits = c.logits;
    route.ld = c.logits_ld;
    route.tokens = static_cast<int>(c.tokens);
    route.experts = c.experts;
    route.tile_rows = c.tile_rows;
    route.renormalise = c.renormalise;
    route.ids = c.ids;
    route.weights = c.weights;
    route.slot_of_pick = c.slot_of_pick;
    if (sums) {
      if (!MoeLayerStreamSums(c.hidden, c.ys, c.out, c.residual) ||
          c.counter_capacity < c.max_tiles + shared_tiles + 1) {
        return hipErrorNotSupported;
      }
      route.out = c.out;
      route.gate = c.out_gate;
      route.gate_ld = c.out_gate_ld;
      route.residual = c.residual;
    }
    route.twice = c.trace != nullptr && c.trace_route_twice;
  } else if (sums) {
    return hipErrorInvalidValue;  // The sum inside needs the routing inside.
  } else if (c.tiles == nullptr || c.num_tiles == nullptr) {
    return hipErrorInvalidValue;
  }
  // The router product inside: its rows are the logits' (and the shared gate's) columns.
  LayerProduct r = {};
  if (c.router != nullptr) {
    if (c.logits == nullptr || c.router_out != c.logits) return hipErrorInvalidValue;
    if (c.router_rows < c.experts || c.router_rows > c.logits_ld ||
        !Describe(r, c.router_rows, c.hidden, 0) ||
        c.counter_capacity < c.max_tiles + shared_tiles + 2) {
      return hipErrorNotSupported;
    }
    r.shared = {c.router, c.x, c.ldx, c.router_out, c.logits_ld, c.tokens};
  }
  a.weights = c.gate_up;
  a.x = c.x;
  a.ldx = c.ldx;
  a.y = c.act;
  a.ldy = c.width;
  a.shared = c.shared_up;
  b.weights = c.down;
  b.x = c.act;
  b.ldx = c.width;
  b.y = c.ys;
  b.ldy = c.hidden;
  b.shared = c.shared_down;
  const int64_t stage_elems =
      std::max({a.groups * kRows * a.row_stride, b.groups * kRows * b.row_stride,
                r.n > 0 ? r.groups * kRows * r.row_stride : int64_t{0}});
  const size_t stage_bytes = static_cast<size_t>(stage_elems) * sizeof(uint16_t);
  const int64_t fit =
      (kSharedBudget - static_cast<int64_t>(kStagesOffset)) / static_cast<int64_t>(stage_bytes);
  const int stages = static_cast<int>(fit < kMaxStages ? fit : kMaxStages);
  if (stages < 2) return hipErrorNotSupported;
  // The routing's scratch in the stages' memory, which small shapes' stages may not cover.
  const size_t ring_bytes = std::max(static_cast<size_t>(stages) * stage_bytes,
                                     c.logits != nullptr ? sizeof(RouteScratch) : size_t{0});
  const size_t bytes = kStagesOffset + ring_bytes;
  // Loads from counters and the compact routing in instantiations of their own: the default's
  // code is unchanged.
  const bool steals = c.static_sixteenths < 16;
  const auto pick = [&](auto pieces) {
    constexpr int kP = decltype(pieces)::value;
    return c.compact_route ? (steals ? MoeLayerStreamKernel<kP, true, true>
                                     : MoeLayerStreamKernel<kP, false, true>)
                           : (steals ? MoeLayerStreamKernel<kP, true, false>
                                     : MoeLayerStreamKernel<kP, false, false>);
  };
  const auto kernel = c.bf16_inputs ? pick(std::integral_constant<int, 1>{})
                                    : pick(std::integral_constant<int, 3>{});
  if (AllowSharedBytes(kernel, bytes) != hipSuccess) {
    static_cast<void>(hipGetLastError());  // Not this kernel: the caller's launches instead.
    return hipErrorNotSupported;
  }
  const dim3 grid(static_cast<unsigned int>(c.multiprocessors));
  hipError_t e = hipSuccess;
  if (c.cooperative) {
    e = LaunchKernelWhole(kernel, grid, dim3(kThreads), bytes, stream, c.tiles, c.num_tiles,
                          c.sorted_picks, c.max_tiles, shared_tiles, c.top_k, route, a, b, r,
                          stage_elems, stages, c.counters, c.next_counters, c.counter_capacity,
                          c.trace, EarlyRelease(kReleaseMoeLayer), c.static_sixteenths);
    // The device cannot hold the grid at once (fewer multiprocessors for this process than
    // the caller counted): nothing launched, the caller's launches instead.
    if (e == hipErrorCooperativeLaunchTooLarge) return hipErrorNotSupported;
  } else {
    LaunchKernel(kernel, grid, dim3(kThreads), bytes, stream, c.tiles, c.num_tiles, c.sorted_picks,
                 c.max_tiles, shared_tiles, c.top_k, route, a, b, r, stage_elems, stages,
                 c.counters, c.next_counters, c.counter_capacity, c.trace,
                 EarlyRelease(kReleaseMoeLayer), c.static_sixteenths);
    e = hipGetLastError();
  }
  if (e == hipSuccess) layer_launches.fetch_add(1, std::memory_order_relaxed);
  return e;
}

#endif

}  // namespace cairn::infer::hip
