#ifndef CAIRN_SERVICES_INFER_KERNELS_BACKEND_FACTORY_H_
#define CAIRN_SERVICES_INFER_KERNELS_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/infer/kernels/kernel_backend.h"

namespace cairn::infer {

// Which kernel backend a program runs on, as its --backend flag and friends name it.
struct KernelBackendChoice {
  std::string name = "cpu";  // "cpu", or "hip" in a build with CAIRN_ENABLE_HIP.
  int threads = 0;           // CPU backend threads; 0: one per hardware thread.
  int device = 0;            // GPU ordinal of the HIP backend.
  // HIP: the matrix units take bf16 inputs (prefill GEMMs and prefill attention; weights stay
  // bf16 either way). False keeps every input fp32: the CPU backend's numerics up to reduction
  // order, slower prefill.
  bool gpu_bf16_inputs = true;
};

// The backend names this build has: "cpu", and "hip" when built with CAIRN_ENABLE_HIP.
std::vector<std::string> AvailableKernelBackends();

// Creates the backend `choice` names. InvalidArgument naming the build's backends for an
// unknown name or one this build lacks; the backend's own error (Unavailable: no GPU) else.
absl::StatusOr<std::unique_ptr<KernelBackend>> CreateKernelBackend(
    const KernelBackendChoice& choice);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_BACKEND_FACTORY_H_
