#ifndef CAIRN_COMMON_SHM_ARENA_HANDLE_H_
#define CAIRN_COMMON_SHM_ARENA_HANDLE_H_

// Handles naming bytes of a shared arena, and their validation (docs/reliability.md SM5-SM7,
// SM10). Validation is ordinary code that runs in release builds.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace cairn {

// A range of one arena incarnation. Plain data; carries no authority by itself.
struct ArenaHandle {
  uint64_t incarnation = 0;  // Random per arena creation; 0 is never a live incarnation.
  uint64_t offset = 0;
  uint64_t length = 0;
  friend bool operator==(const ArenaHandle&, const ArenaHandle&) = default;
};

// Validates handles against one arena incarnation of `size` bytes. Thread-compatible
// (immutable after construction, so safe to share for reads).
class ArenaHandleValidator {
 public:
  // `alignment` (a power of two, >= 1) is required of every offset.
  ArenaHandleValidator(uint64_t incarnation, uint64_t size, uint64_t alignment = 1)
      : incarnation_(incarnation), size_(size), alignment_(alignment == 0 ? 1 : alignment) {}

  // Returns OK if `h` names a non-empty range inside the arena of this incarnation:
  // FailedPrecondition for another incarnation (a stale handle), InvalidArgument for a zero
  // length, a misaligned offset, or any range not inside [0, size), checked without overflow.
  absl::Status Validate(const ArenaHandle& h) const;

  // Validates `h` and returns its bytes within the mapping at `base` (which must be `size`
  // bytes long).
  absl::StatusOr<absl::Span<uint8_t>> Resolve(const ArenaHandle& h, uint8_t* base) const;

  uint64_t incarnation() const { return incarnation_; }
  uint64_t size() const { return size_; }

 private:
  uint64_t incarnation_;
  uint64_t size_;
  uint64_t alignment_;
};

// Returns true if [offset, offset + length) lies inside [0, size), without overflow.
inline bool RangeInside(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

// Returns a random non-zero 64-bit incarnation id from getrandom(2).
uint64_t NewIncarnation();

// The first of a sequence of ids (sessions, leases, spills) handed out by one incarnation of a
// daemon: a random value in [kIdBaseFloor, kIdBaseFloor + kIdBaseSpan), so an id kept from an
// earlier incarnation almost surely names nothing in this one, and ids stay below 2^53 so
// JSON clients read them exactly.
inline constexpr uint64_t kIdBaseFloor = uint64_t{1} << 32;
inline constexpr uint64_t kIdBaseSpan = uint64_t{1} << 48;
uint64_t RandomIdBase();

}  // namespace cairn

#endif  // CAIRN_COMMON_SHM_ARENA_HANDLE_H_
