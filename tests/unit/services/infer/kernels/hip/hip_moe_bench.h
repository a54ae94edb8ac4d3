#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MOE_BENCH_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MOE_BENCH_H_
// cairn_hip_kernel_bench's MoE modes (hip_moe_bench.cc; the usage is in hip_kernel_bench.cc).

namespace cairn::infer {

// --moe-prefill: one MoE layer's routed experts at prefill sizes. Returns the exit status.
int MoePrefill();
// --moe-decode: one MoE layer's routed experts at decode sizes, and each launch alone.
int MoeDecode();

}  // namespace cairn::infer

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MOE_BENCH_H_
