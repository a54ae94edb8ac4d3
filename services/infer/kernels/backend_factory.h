#ifndef CAIRN_SERVICES_INFER_KERNELS_BACKEND_FACTORY_H_
#define CAIRN_SERVICES_INFER_KERNELS_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/infer/kernels/kernel_backend.h"

namespace cairn::infer {

// How long the serving programs' CPU backend helpers watch for the next parallel loop before
// sleeping (CpuKernelBackendOptions::spin_us), in microseconds. A decode step runs about a hundred
// short loops back to back. Measured on a two-core AMD EPYC (Zen 5) with no steal, three
// alternating pairs of bench-50m runs (cairn-cpu-bench --spin-us 0 / 50): four-slot decode
// 1053-1084 -> 1227-1276 tokens/s, one slot 345-352 -> 347-411, prefill at 2048 tokens 177-182
// -> 189-195 GFLOP/s (docs/cpu-backend.md, eleventh round).
inline constexpr int kServingCpuSpinMicros = 50;

// Which kernel backend a program runs on, as its --backend flag and friends name it.
struct KernelBackendChoice {
  std::string name = "cpu";  // "cpu", or "hip" in a build with CAIRN_ENABLE_HIP.
  int threads = 0;           // CPU backend threads; 0: one per hardware thread.
  int device = 0;            // GPU ordinal of the HIP backend.
  // CPU backend: how long a helper thread watches for the next parallel loop before sleeping
  // (CpuKernelBackendOptions::spin_us). A serving program's backend has the cores to itself, so
  // the default watches.
  int cpu_spin_us = kServingCpuSpinMicros;
  // HIP: the matrix units take bf16 inputs (prefill GEMMs, decode's row products and prefill
  // attention; weights stay bf16 either way). False keeps every input fp32: the CPU backend's
  // numerics up to reduction order, slower prefill and batched decode.
  bool gpu_bf16_inputs = true;
  // The model runs pass-invariant numerics (every product through the row product): HIP keeps
  // that product's inputs exact (fp32), whatever gpu_bf16_inputs says.
  bool pass_invariant = false;
  // HIP: a MoE decode layer's routing, expert products and sum for a call of up to 8 tokens in
  // one launch of long-lived blocks that wait on each other (HipKernelBackendOptions::
  // moe_stream_products 5; the same bits). The launch needs its grid resident whole: false (the
  // separate launches) where another process shares the device's multiprocessors concurrently
  // (MPS).
  bool gpu_moe_one_launch = true;
};

// The backend names this build has: "cpu", and "hip" when built with CAIRN_ENABLE_HIP.
std::vector<std::string> AvailableKernelBackends();

// Creates the backend `choice` names. InvalidArgument naming the build's backends for an
// unknown name or one this build lacks; the backend's own error (Unavailable: no GPU) else.
absl::StatusOr<std::unique_ptr<KernelBackend>> CreateKernelBackend(
    const KernelBackendChoice& choice);

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_BACKEND_FACTORY_H_
