#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_ROW_KERNELS_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_ROW_KERNELS_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "services/infer/kernels/kernel_backend.h"

// The inner loops of CpuKernelBackend's row-invariant product and weight widening, in one
// portable form and x86 forms chosen at run time. Every form of RowProducts gives the same bits,
// whatever the weights' type (a bf16 or f16 weight gives the bits of its fp32 widening) and
// whichever input rows share the call. A dot product over k is summed in "pair order": in each
// whole block of 32 elements, lane j of sixteen partial sums adds the product at 32 b + 2 j and
// then the one at 32 b + 2 j + 1; the lanes are folded pairwise 16 -> 8 -> 4 -> 2 -> 1, then the
// elements after the last whole block are added in order. Each product is rounded before it is
// added (no fused multiply-add, which would round once). The order suits bf16: a block read as
// sixteen 32-bit words holds element 2 j in the low half of word j and 2 j + 1 in the high half,
// so a shift and a mask widen it without moving values across lanes; the input rows are put in
// the matching order once per call.
namespace cairn::infer::cpu {

enum class Isa { kPortable, kAvx2, kAvx512 };

// The widest form this processor runs: kAvx512 with AVX-512F, kAvx2 with AVX2 and F16C.
Isa BestIsa();
bool IsaSupported(Isa isa);
absl::string_view IsaName(Isa isa);

// y[r * ldy + j] = (y[r * ldy + j] +) x[r] . w_rows[j] for r < m, j < count: rows of `x` have
// stride `ldx`; each of the `count` weight rows has `k` elements of `type`.
void RowProducts(Isa isa, WeightType type, const float* x, int64_t m, int64_t ldx,
                 const void* const* w_rows, int64_t count, int64_t k, float* y, int64_t ldy,
                 bool accumulate);

// dst[i] = src[i] widened to fp32, for `n` elements of `type`.
void Widen(Isa isa, WeightType type, const void* src, int64_t n, float* dst);

}  // namespace cairn::infer::cpu

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_ROW_KERNELS_H_
