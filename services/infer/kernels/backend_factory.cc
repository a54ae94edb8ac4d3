#include "services/infer/kernels/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#if CAIRN_ENABLE_HIP
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#endif

namespace cairn::infer {

std::vector<std::string> AvailableKernelBackends() {
#if CAIRN_ENABLE_HIP
  return {"cpu", "hip"};
#else
  return {"cpu"};
#endif
}

absl::StatusOr<std::unique_ptr<KernelBackend>> CreateKernelBackend(
    const KernelBackendChoice& choice) {
  if (choice.name == "cpu") {
    CpuKernelBackendOptions cpu;
    cpu.threads = choice.threads;
    cpu.spin_us = choice.cpu_spin_us;
    absl::StatusOr<std::unique_ptr<CpuKernelBackend>> backend = CpuKernelBackend::Create(cpu);
    if (!backend.ok()) return backend.status();
    return std::unique_ptr<KernelBackend>(std::move(*backend));
  }
#if CAIRN_ENABLE_HIP
  if (choice.name == "hip") {
    HipKernelBackendOptions hip;
    hip.device = choice.device;
    hip.bf16_gemm_inputs = choice.gpu_bf16_inputs;
    hip.bf16_attention = choice.gpu_bf16_inputs;
    hip.mma_delta = choice.gpu_bf16_inputs;
    hip.mma_rows_bf16_inputs = choice.gpu_bf16_inputs && !choice.pass_invariant;
    if (!choice.gpu_moe_one_launch) hip.moe_stream_products = 0;
    return CreateHipKernelBackend(hip);
  }
#endif
  std::string hint;
  if (choice.name == "hip") hint = "; the HIP backend needs a build with -DCAIRN_ENABLE_HIP=ON";
  return absl::InvalidArgumentError(
      absl::StrCat("backend \"", choice.name, "\" is not available (this build has: ",
                   absl::StrJoin(AvailableKernelBackends(), ", "), ")", hint));
}

}  // namespace cairn::infer
