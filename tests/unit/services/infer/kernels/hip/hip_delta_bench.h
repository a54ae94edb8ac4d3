#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_DELTA_BENCH_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_DELTA_BENCH_H_
// cairn_hip_kernel_bench's delta-rule rows and --delta mode (hip_delta_bench.cc; the usage is in
// hip_kernel_bench.cc).

#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "tests/unit/services/infer/kernels/hip/hip_bench_util.h"

namespace cairn::infer {

// The gated delta rule at Qwen3-Next-like linear-attention heads: one layer's chunked call at
// 4096 (and unless `quick`, 32768) tokens, the fp32 kernels, the matrix-unit path's two kernels
// apart, the rule with its gates and q / k norms as launches of their own and inside the
// prepare kernels, the recurrent step (`reps` repetitions a row's time is taken over, times 5).
void DeltaRuleRows(HipKernelBackend& b, Bench& bench, bool quick, int reps);
// --delta: DeltaRuleRows, then XXH3-64 hashes of the chunked rule's outputs and final state
// after one call from fixed inputs at four shapes. Returns the exit status.
int DeltaRule();

}  // namespace cairn::infer

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_DELTA_BENCH_H_
