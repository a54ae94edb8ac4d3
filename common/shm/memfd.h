#ifndef CAIRN_COMMON_SHM_MEMFD_H_
#define CAIRN_COMMON_SHM_MEMFD_H_

// Sealed memfds for the shared-memory arena (docs/reliability.md SM1, SM3).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/shm/unique_fd.h"

namespace cairn {

// Returns the system page size.
uint64_t PageSize();

// Creates a memfd named `name` (a debugging label; memfds have no path) of `size` bytes, a
// positive multiple of the page size, close-on-exec, sealed against shrinking, growing and
// further sealing (and non-executable where the kernel supports MFD_NOEXEC_SEAL).
// InvalidArgument for a bad size; Internal with errno text if the kernel refuses.
absl::StatusOr<UniqueFd> CreateSealedMemfd(const std::string& name, uint64_t size);

// Checks a received descriptor before it is mapped (SM3): it must be a memfd carrying at
// least F_SEAL_SHRINK, F_SEAL_GROW and F_SEAL_SEAL, a regular file whose size is a positive
// multiple of the page size and, when `expected_size` is non-zero, equal to it. Returns the
// size from fstat, the only size later checks may use. InvalidArgument on any mismatch.
absl::StatusOr<uint64_t> ValidateSealedMemfd(int fd, uint64_t expected_size);

}  // namespace cairn

#endif  // CAIRN_COMMON_SHM_MEMFD_H_
