#ifndef CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_ERRORS_H_
#define CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_ERRORS_H_

// The HIP backend's errors as Status (hip_kernel_backend.cc, hip_backend_memory.cc).

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "services/infer/kernels/hip/hip_compat.h"

namespace cairn::infer::hip {

// A failed runtime call: ResourceExhausted for an allocation failure, Internal otherwise.
inline absl::Status HipError(hipError_t e, absl::string_view what) {
  const std::string msg =
      absl::StrCat("hip: ", what, " failed: ", hipGetErrorName(e), " (", hipGetErrorString(e), ")");
  if (e == hipErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

// An operation's arguments the backend does not take.
inline absl::Status Invalid(absl::string_view op, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("hip backend: ", op, ": ", why));
}

}  // namespace cairn::infer::hip

#endif  // CAIRN_SERVICES_INFER_KERNELS_HIP_HIP_ERRORS_H_
