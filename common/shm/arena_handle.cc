#include "common/shm/arena_handle.h"

#include <sys/random.h>

#include <cerrno>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace cairn {

absl::Status ArenaHandleValidator::Validate(const ArenaHandle& h) const {
  if (h.incarnation != incarnation_) {
    return absl::FailedPreconditionError(absl::StrCat("handle from arena incarnation ",
                                                      absl::Hex(h.incarnation), ", current is ",
                                                      absl::Hex(incarnation_)));
  }
  if (h.length == 0) return absl::InvalidArgumentError("handle has zero length");
  if (h.offset % alignment_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("handle offset ", h.offset, " is not aligned to ", alignment_));
  }
  if (!RangeInside(h.offset, h.length, size_)) {
    return absl::InvalidArgumentError(absl::StrCat("handle range offset ", h.offset, " length ",
                                                   h.length, " is outside the arena of ", size_,
                                                   " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<uint8_t>> ArenaHandleValidator::Resolve(const ArenaHandle& h,
                                                                  uint8_t* base) const {
  absl::Status s = Validate(h);
  if (!s.ok()) return s;
  return absl::Span<uint8_t>(base + h.offset, h.length);
}

uint64_t NewIncarnation() {
  uint64_t v = 0;
  while (v == 0) {
    ssize_t n = ::getrandom(&v, sizeof(v), 0);
    if (n != static_cast<ssize_t>(sizeof(v))) {
      if (n < 0 && errno == EINTR) continue;
      // getrandom cannot fail for 8 bytes once the pool is initialised; fall back to time.
      v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) | 1;
    }
  }
  return v;
}

uint64_t RandomIdBase() { return kIdBaseFloor + NewIncarnation() % kIdBaseSpan; }

}  // namespace cairn
