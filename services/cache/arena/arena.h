#ifndef CAIRN_SERVICES_CACHE_ARENA_ARENA_H_
#define CAIRN_SERVICES_CACHE_ARENA_ARENA_H_

// The cache daemon's RAM arena: one sealed memfd of the RAM budget, mapped once, carved by a
// RegionAllocator (docs/reliability.md SM1, SM4; docs/architecture.md §3, §5).

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/shm/arena_handle.h"
#include "common/shm/mapping.h"
#include "common/shm/unique_fd.h"
#include "services/cache/arena/region_allocator.h"

namespace cairn::cache {

struct ArenaOptions {
  // Bytes of the arena; 0 = DefaultArenaBytes(). Rounded down to the page size.
  uint64_t size_bytes = 0;
  uint64_t max_default_bytes = uint64_t{32} << 30;  // Default rule cap: 32 GiB.
  double default_free_ram_fraction = 0.5;           // Default rule: half the free RAM.
  uint64_t first_pin_bytes = uint64_t{2} << 30;   // docs/architecture.md §3: 2 GiB before serving.
  uint64_t pin_step_bytes = uint64_t{128} << 20;  // docs/architecture.md §3: then 128 MiB steps.
  uint64_t alignment = 0;                         // 0 = the page size.
};

// Returns the default arena size: `fraction` of the available RAM (MemAvailable from
// `meminfo_path`; where that cannot be read, as under systemd's ProcSubset=pid, free RAM plus
// buffers from sysinfo(2)), at most `cap`, rounded down to the page size. InvalidArgument for a
// `fraction` outside (0, 1]; Internal if neither source answers.
absl::StatusOr<uint64_t> DefaultArenaBytes(double fraction, uint64_t cap,
                                           const std::string& meminfo_path = "/proc/meminfo");

// Owns the memfd, its mapping and the allocator. Thread-safe (the allocator is; the mapping
// is fixed for the object's lifetime).
class Arena {
 public:
  // Creates and seals the memfd, maps it and draws a fresh incarnation. InvalidArgument for a
  // bad size or allocator option; Internal if the kernel refuses.
  static absl::StatusOr<std::unique_ptr<Arena>> Create(const ArenaOptions& options);

  // Returns the bytes of a live region (or a sub-range of one) named by `handle`, validated
  // on every call: FailedPrecondition for a stale incarnation, InvalidArgument otherwise.
  absl::StatusOr<absl::Span<uint8_t>> Resolve(const ArenaHandle& handle) const;

  RegionAllocator& allocator() { return *allocator_; }
  const RegionAllocator& allocator() const { return *allocator_; }
  uint64_t incarnation() const { return incarnation_; }
  uint64_t size() const { return mapping_.size(); }
  uint64_t alignment() const { return alignment_; }
  // The memfd, for handing to peers; stays owned by this object.
  int fd() const { return fd_.get(); }

 private:
  Arena(uint64_t incarnation, uint64_t alignment, UniqueFd fd, SharedMapping mapping,
        std::unique_ptr<RegionAllocator> allocator);

  const uint64_t incarnation_;
  const uint64_t alignment_;
  UniqueFd fd_;
  SharedMapping mapping_;
  std::unique_ptr<RegionAllocator> allocator_;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_ARENA_ARENA_H_
