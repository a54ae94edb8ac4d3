#ifndef CAIRN_COMMON_SHM_BULK_COPY_H_
#define CAIRN_COMMON_SHM_BULK_COPY_H_

#include <cstddef>

namespace cairn {

// Copies at or above this size stream past the CPU caches (BulkCopy).
inline constexpr size_t kBulkCopyStreamingMinBytes = size_t{256} << 10;

// Copies `n` bytes from `src` to `dst`, which must not overlap: a restore's copy of a region
// (a chunk of rows, a private state) out of or into the arena. Copies of at least
// kBulkCopyStreamingMinBytes use non-temporal stores on x86-64: the destination is not read
// again soon, and ordinary stores would first read every destination line into the caches and
// then evict what they held. glibc's memcpy does the same only above about three quarters of
// the last-level cache, so a restore made of 4 MiB chunk copies never gets it. Elsewhere, and
// below the threshold, it is memcpy. Thread-safe.
void BulkCopy(void* dst, const void* src, size_t n);

}  // namespace cairn

#endif  // CAIRN_COMMON_SHM_BULK_COPY_H_
