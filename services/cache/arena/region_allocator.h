#ifndef CAIRN_SERVICES_CACHE_ARENA_REGION_ALLOCATOR_H_
#define CAIRN_SERVICES_CACHE_ARENA_REGION_ALLOCATOR_H_

// Allocator of arena regions (chunks, private state, tails) that never straddle a GPU pinning
// step boundary (docs/architecture.md §3 "Pinning").

#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/concurrency/mutex.h"
#include "common/shm/arena_handle.h"

namespace cairn::cache {

enum class RegionKind : uint8_t { kChunk = 1, kPrivateState = 2, kTail = 3 };

struct RegionAllocatorOptions {
  uint64_t arena_bytes = 0;                       // Size of the arena being carved.
  uint64_t alignment = 4096;                      // Every region offset and length.
  uint64_t first_pin_bytes = uint64_t{2} << 30;   // Pinned before serving (2 GiB).
  uint64_t pin_step_bytes = uint64_t{128} << 20;  // Later pinning steps (128 MiB).
};

struct Region {
  ArenaHandle handle;  // Offset and length; the allocator's incarnation.
  RegionKind kind = RegionKind::kChunk;
};

// Carves regions out of [0, arena_bytes). Pin boundaries lie at first_pin_bytes +
// k * pin_step_bytes (k >= 0); no region crosses one, so a copy of one region never straddles
// two page-lock registrations. Allocation is first fit by address, so used memory stays low
// and the pinned prefix can grow step by step.
//
// All metadata (free list, region table) lives in this object's private memory, never in the
// shared mapping (docs/reliability.md SM4).
//
// Thread-safe.
// Invariants: free extents and live regions are disjoint, aligned, and together tile
// [0, usable size); adjacent free extents are always coalesced.
class RegionAllocator {
 public:
  // InvalidArgument if the alignment is not a power of two, the pin step is zero or not a
  // multiple of the alignment, or the arena is smaller than one alignment unit.
  static absl::StatusOr<std::unique_ptr<RegionAllocator>> Create(uint64_t incarnation,
                                                                 const RegionAllocatorOptions&);

  // Allocates `length` bytes (rounded up to the alignment) of `kind`. InvalidArgument for
  // zero or for a length that no pin segment can hold; ResourceExhausted when no free extent
  // fits.
  absl::StatusOr<Region> Allocate(uint64_t length, RegionKind kind) ABSL_LOCKS_EXCLUDED(mu_);

  // Frees the region that `handle` names exactly. FailedPrecondition for another incarnation,
  // NotFound if no live region starts at the offset with that length.
  absl::Status Free(const ArenaHandle& handle) ABSL_LOCKS_EXCLUDED(mu_);

  // Returns OK if `handle` lies inside one live region of this incarnation (the range may be
  // a sub-range). FailedPrecondition for a stale incarnation, InvalidArgument otherwise.
  absl::Status ValidateLive(const ArenaHandle& handle) const ABSL_LOCKS_EXCLUDED(mu_);

  // Returns the first pin boundary strictly above `offset`, or UINT64_MAX if none.
  uint64_t NextPinBoundary(uint64_t offset) const;
  // Returns the end of the highest live region (how far the arena must be pinned).
  uint64_t HighWater() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t used_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t capacity_bytes() const { return usable_; }
  uint64_t incarnation() const { return incarnation_; }

 private:
  RegionAllocator(uint64_t incarnation, const RegionAllocatorOptions& options, uint64_t usable);

  void InsertFreeLocked(uint64_t offset, uint64_t length) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t incarnation_;
  const RegionAllocatorOptions options_;
  const uint64_t usable_;  // arena_bytes rounded down to the alignment.
  mutable Mutex mu_;
  std::map<uint64_t, uint64_t> free_ ABSL_GUARDED_BY(mu_);   // offset -> length.
  std::map<uint64_t, Region> regions_ ABSL_GUARDED_BY(mu_);  // offset -> live region.
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_ARENA_REGION_ALLOCATOR_H_
