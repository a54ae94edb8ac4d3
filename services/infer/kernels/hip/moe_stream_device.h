#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_STREAM_DEVICE_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_STREAM_DEVICE_H_

// What the streamed expert products share (moe_stream.hip: one product a launch;
// moe_stream_layer.hip: both of a MoE layer's products in one launch): shared-memory barriers
// that count bulk asynchronous copies (mbarrier), the copies themselves, named barriers of a
// consumer group, the producers' look-up of a tile, and the cross-block counters the one-launch
// layer hands its activations over with. Included only by kernel sources of NVIDIA sm_90a builds
// (CAIRN_HIP_WGMMA).

#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

#if !defined(__HIP_PLATFORM_AMD__) && defined(CAIRN_HIP_WGMMA)

namespace cairn::infer::hip::moe_stream {

__device__ inline uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ inline void BarrierInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SharedAddress(bar)), "r"(count)
               : "memory");
}
// Makes the barriers' initialisation visible to the copies' completions.
__device__ inline void BarrierInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// This thread's arrival, expecting `bytes` more of asynchronous copies in the phase.
__device__ inline void BarrierArriveExpect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SharedAddress(bar)),
               "r"(bytes)
               : "memory");
}
__device__ inline void BarrierArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SharedAddress(bar)) : "memory");
}
// Until the phase of parity `parity` has completed.
__device__ inline void BarrierWait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (done == 0) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(SharedAddress(bar)), "r"(parity)
        : "memory");
  }
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory,
// counted on `bar` when they land.
__device__ inline void BulkCopy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(SharedAddress(dst)),
      "l"(src), "r"(bytes), "r"(SharedAddress(bar))
      : "memory");
}
// BulkCopy whose lines L2 holds under `policy` (mma_rows::EvictFirstPolicy).
__device__ inline void BulkCopyWithPolicy(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
      "[%1], %2, [%3], %4;\n" ::"r"(SharedAddress(dst)),
      "l"(src), "r"(bytes), "r"(SharedAddress(bar)), "l"(policy)
      : "memory");
}
// The barrier of consumer group `group`'s `warps` warps (named barrier 1 + group; the producer
// warp and the other groups never take part).
__device__ inline void GroupSync(int group, int warps) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + group), "r"(warps * 32) : "memory");
}

// A counter in global memory read with acquire semantics at the device's scope: what the
// writers released before their increments is visible to this thread after it.
__device__ inline uint32_t LoadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A producer's look-up of tile `ti` of a grouped product (routed tiles first, then the shared
// rows' tiles of 8): its expert's table entry into `parts`, and into `meta` (a stage note with
// x[8], y, ldy, rows and tile) its rows, its first output row and, by lanes 0-7 and shuffles to
// every lane, its input rows (a routed tile's through the sort's order where sorted_picks is
// given). Called by a whole warp.
template <typename Meta>
__device__ inline void LookUpTile(int64_t ti, int64_t routed, const MoeTile* tiles,
                                  const MoeExpertParts* weights, const float* x, int64_t ldx,
                                  const int32_t* sorted_picks, int top_k, float* y, int64_t ldy,
                                  const MoeSharedRows& shared, int lane, MoeExpertParts& parts,
                                  Meta& meta) {
  const float* xs = x;
  int64_t ld_in = ldx;
  int32_t start;
  if (ti < routed) {
    const MoeTile t = tiles[ti];
    start = t.start;
    meta.rows = t.rows;
    parts = weights[t.expert];
    meta.y = y + static_cast<int64_t>(t.start) * ldy;
    meta.ldy = ldy;
  } else {
    start = static_cast<int32_t>((ti - routed) * 8);
    meta.rows = static_cast<int32_t>(shared.rows - start < 8 ? shared.rows - start : 8);
    parts = *shared.weights;
    xs = shared.x;
    ld_in = shared.ldx;
    meta.y = shared.y + static_cast<int64_t>(start) * shared.ldy;
    meta.ldy = shared.ldy;
  }
  meta.tile = static_cast<int32_t>(ti);
  const float* row_ptr = nullptr;
  if (lane < 8 && lane < meta.rows) {
    const int64_t slot = static_cast<int64_t>(start) + lane;
    const int64_t row = ti < routed && sorted_picks != nullptr ? sorted_picks[slot] / top_k : slot;
    row_ptr = xs + row * ld_in;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    meta.x[i] = reinterpret_cast<const float*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(row_ptr), i));
  }
}

}  // namespace cairn::infer::hip::moe_stream

#endif  // !__HIP_PLATFORM_AMD__ && CAIRN_HIP_WGMMA

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_STREAM_DEVICE_H_
