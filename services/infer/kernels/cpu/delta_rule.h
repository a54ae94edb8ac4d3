#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_DELTA_RULE_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_DELTA_RULE_H_

#include "services/infer/kernels/kernel_backend.h"

// The gated delta rule of CpuKernelBackend, one v-head at a time: the chunked form (a.chunk > 0,
// prefill) and the recurrent form (decode and the pass-invariant numerics). Built for AVX-512,
// AVX2 and baseline x86-64, chosen by the loader; every form gives the same bits.
namespace cairn::infer::cpu {

// Runs v-head `h` of `a` over all of the call's tokens, updating its state `state`
// (dk x dv floats) in place and writing its outputs to a.out.
void GatedDeltaHead(const GatedDeltaArgs& a, int h, float* state);

}  // namespace cairn::infer::cpu

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_DELTA_RULE_H_
