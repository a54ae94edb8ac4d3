#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_ATTENTION_DECODE_DEVICE_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_ATTENTION_DECODE_DEVICE_H_

// What the split path's decode blocks share (attention_decode.hip: variants 1 to 3 and the
// launches LaunchDecode / LaunchDecodeBatch; attention_decode_stream.hip: variant 4's streamed
// blocks; attention_decode_mma.hip: variant 5's matrix-unit blocks): the block size, the
// asynchronous 16-byte copies, the choice of key ranges a block, and the launches of a decode
// kernel over one call or a batch. Included only by those two kernel sources.

#include <cstdint>

#include "services/infer/kernels/hip/attention_device.h"
#include "services/infer/kernels/hip/hip_device_util.h"
#include "services/infer/kernels/hip/hip_kernels.h"

namespace cairn::infer::hip::attention {

inline constexpr int kDecodeThreads = 128;
inline constexpr int kDecodeWarps = kDecodeThreads / 32;
static_assert(kBc == 32, "a lane a key");

#if !defined(__HIP_PLATFORM_AMD__)
// 16 bytes from global `src` into shared `dst` without passing through registers; zeros where
// `valid` is false (then nothing is read).
__device__ inline void DecodeCopy16(float* dst, const float* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned int to = static_cast<unsigned int>(__cvta_generic_to_shared(dst));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(n));
#else
  for (int i = 0; i < 4; ++i) dst[i] = valid ? src[i] : 0.0f;
#endif
}
__device__ inline void DecodeCommit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most kPending of this thread's copy groups are in flight.
template <int kPending>
__device__ inline void DecodeWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}
#endif  // !__HIP_PLATFORM_AMD__

// Key ranges a block of `kernel` (kDecodeThreads threads, `shared` bytes of dynamic shared
// memory) takes (AttentionDecodeSpread): `blocks_of(r)` is the launch's blocks at r ranges a
// block. The blocks a multiprocessor holds come from the runtime's occupancy calculator
// (registers, shared memory and threads); where it has no answer, one range a block.
template <typename Kernel, typename BlocksOf>
int DecodeRangesPerBlock(const AttentionDecodeSpread& spread, Kernel kernel, size_t shared,
                         const BlocksOf& blocks_of) {
  if (spread.ranges_per_block > 0) return spread.ranges_per_block;
  int per = 0;
  if (spread.multiprocessors <= 0 ||
      hipOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, kDecodeThreads, shared) !=
          hipSuccess ||
      per <= 0) {
    static_cast<void>(hipGetLastError());  // Not the launch's error.
    return 1;
  }
  const int64_t wave = static_cast<int64_t>(per) * spread.multiprocessors;
  int ranges = 1;
  while (ranges < kAttentionDecodeMaxRangesPerBlock &&
         blocks_of(2 * ranges) >= spread.min_waves * wave) {
    ranges *= 2;
  }
  return ranges;
}

// Launches decode `kernel` (blocks of kRows rows, `shared` bytes) over one call: rows / kRows x
// kv heads x groups of ranges, block z taking ranges z * ranges, ...
template <int kRows>
hipError_t LaunchDecodeKernel(void (*kernel)(Params, int, int64_t), size_t shared, const Params& p,
                              int64_t splits, const AttentionDecodeSpread& spread,
                              hipStream_t stream) {
  hipError_t e = AllowSharedBytes(kernel, shared);
  if (e != hipSuccess) return e;
  const int64_t row_blocks = CeilDiv(p.rows, kRows) * p.kv_heads;
  const int ranges = DecodeRangesPerBlock(spread, kernel, shared,
                                          [&](int r) { return row_blocks * CeilDiv(splits, r); });
  const dim3 grid(static_cast<unsigned int>(CeilDiv(p.rows, kRows)),
                  static_cast<unsigned int>(p.kv_heads),
                  static_cast<unsigned int>(CeilDiv(splits, ranges)));
  LaunchKernel(kernel, grid, kDecodeThreads, shared, stream, p, ranges, splits);
  return hipGetLastError();
}

// Launches decode `kernel` over a batch of `count` calls (DecodeBatchBlock's blocks).
template <int kRows>
hipError_t LaunchDecodeBatchKernel(void (*kernel)(ParamsBatch, int64_t, int), size_t shared,
                                   const ParamsBatch& b, int count, int64_t max_rows,
                                   int64_t max_splits, const AttentionDecodeSpread& spread,
                                   hipStream_t stream) {
  hipError_t e = AllowSharedBytes(kernel, shared);
  if (e != hipSuccess) return e;
  // The blocks that run (those past a sequence's ranges return at once).
  const auto blocks_of = [&](int r) {
    int64_t blocks = 0;
    for (int i = 0; i < count; ++i) {
      blocks += CeilDiv(b.seq[i].rows, kRows) * b.seq[i].kv_heads * CeilDiv(b.splits[i], r);
    }
    return blocks;
  };
  const int ranges = DecodeRangesPerBlock(spread, kernel, shared, blocks_of);
  const int64_t groups = CeilDiv(max_splits, ranges);
  const dim3 grid(static_cast<unsigned int>(CeilDiv(max_rows, kRows)),
                  static_cast<unsigned int>(b.seq[0].kv_heads),
                  static_cast<unsigned int>(count * groups));
  LaunchKernel(kernel, grid, kDecodeThreads, shared, stream, b, groups, ranges);
  return hipGetLastError();
}

// Variant 4's streamed blocks of kRows rows (attention_decode_stream.hip; kMaxD 64, 128 or 256,
// kRows 4 or 8), for one call and for a batch; hipErrorNotSupported on AMD.
template <int kMaxD, int kRows>
hipError_t LaunchDecodeStream(const Params& p, int64_t splits, const AttentionDecodeSpread& spread,
                              hipStream_t stream);
template <int kMaxD, int kRows>
hipError_t LaunchDecodeStreamBatch(const ParamsBatch& b, int count, int64_t max_rows,
                                   int64_t max_splits, const AttentionDecodeSpread& spread,
                                   hipStream_t stream);

// Variant 5's blocks on the matrix units (attention_decode_mma.hip; kMaxD 64, 128 or 256; bf16
// operands, other bits), for one call and for a batch: hipErrorNotSupported, with nothing
// launched, for calls they do not take (head dimension not a multiple of 16, more than
// kNarrowRows rows, ranges longer than four tiles, rows not 8-byte aligned) and on AMD.
template <int kMaxD>
hipError_t LaunchDecodeMma(const Params& p, int64_t splits, hipStream_t stream);
template <int kMaxD>
hipError_t LaunchDecodeMmaBatch(const ParamsBatch& b, int count, int64_t max_splits,
                                hipStream_t stream);

}  // namespace cairn::infer::hip::attention

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_ATTENTION_DECODE_DEVICE_H_
