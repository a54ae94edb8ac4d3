#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_COMBINE_DEVICE_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_COMBINE_DEVICE_H_

// A MoE layer's weighted sum for four columns of one token's row (MoeCombineWideKernel in
// moe_experts.hip, and the one-launch layer's sum in moe_stream_layer.hip, which share it).

#include <cstdint>

#include "services/infer/kernels/hip/hip_device_util.h"

namespace cairn::infer::hip::moe_combine {

constexpr int kBatch = 8;  // Picks whose rows are loaded before any of them is added.

// Four floats at p (16-byte aligned); kFresh: through L2 (ld.global.cg), for values another
// block of the same launch wrote, which this multiprocessor's L1 must not serve (NVIDIA; only
// NVIDIA builds launch such blocks).
template <bool kFresh>
__device__ inline float4 LoadFour(const float* p) {
#if !defined(__HIP_PLATFORM_AMD__)
  if constexpr (kFresh) return __ldcg(reinterpret_cast<const float4*>(p));
#endif
  return *reinterpret_cast<const float4*>(p);
}

// o[0 .. 3] (16-byte aligned) = o * scale where `gated` (one rounding: SigmoidScaleRows'
// product), then o = o + w[i] * y(slots[i]) for i = 0 .. n - 1 in that order (two roundings,
// never a fused multiply-add: AddScaledRows' and the CPU's arithmetic), where y(s) is the four
// floats at y_col + s * ldy; then residual[0 .. 3] += o where residual is not null.
template <bool kFresh>
__device__ inline void CombineFour(const float* y_col, int64_t ldy, const int32_t* slots,
                                   const float* w, int n, bool gated, float scale, float* o,
                                   float* residual) {
  float4 v = LoadFour<kFresh>(o);
  if (gated) {
    v.x = __fmul_rn(v.x, scale);
    v.y = __fmul_rn(v.y, scale);
    v.z = __fmul_rn(v.z, scale);
    v.w = __fmul_rn(v.w, scale);
  }
  for (int p0 = 0; p0 < n; p0 += kBatch) {
    float4 yv[kBatch];
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      if (p0 + q < n) yv[q] = LoadFour<kFresh>(y_col + static_cast<int64_t>(slots[p0 + q]) * ldy);
    }
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      if (p0 + q >= n) break;
      const float wq = w[p0 + q];
      v.x = __fadd_rn(v.x, __fmul_rn(wq, yv[q].x));
      v.y = __fadd_rn(v.y, __fmul_rn(wq, yv[q].y));
      v.z = __fadd_rn(v.z, __fmul_rn(wq, yv[q].z));
      v.w = __fadd_rn(v.w, __fmul_rn(wq, yv[q].w));
    }
  }
  *reinterpret_cast<float4*>(o) = v;
  if (residual != nullptr) {
    // AddScaledRows' unscaled addition.
    float4 rv = LoadFour<kFresh>(residual);
    rv.x = __fadd_rn(rv.x, v.x);
    rv.y = __fadd_rn(rv.y, v.y);
    rv.z = __fadd_rn(rv.z, v.z);
    rv.w = __fadd_rn(rv.w, v.w);
    *reinterpret_cast<float4*>(residual) = rv;
  }
}

}  // namespace cairn::infer::hip::moe_combine

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_MOE_COMBINE_DEVICE_H_
