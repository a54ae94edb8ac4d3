#include "services/cache/arena/region_allocator.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace cairn::cache {
namespace {

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

absl::StatusOr<std::unique_ptr<RegionAllocator>> RegionAllocator::Create(
    uint64_t incarnation, const RegionAllocatorOptions& options) {
  if (!IsPowerOfTwo(options.alignment)) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena alignment ", options.alignment, " is not a power of two"));
  }
  if (options.pin_step_bytes == 0 || options.pin_step_bytes % options.alignment != 0 ||
      options.first_pin_bytes % options.alignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pin step ", options.pin_step_bytes, " and first pin ", options.first_pin_bytes,
        " must be non-zero multiples of the alignment ", options.alignment));
  }
  const uint64_t usable = options.arena_bytes - options.arena_bytes % options.alignment;
  if (usable == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena of ", options.arena_bytes, " bytes holds no aligned region"));
  }
  return std::unique_ptr<RegionAllocator>(new RegionAllocator(incarnation, options, usable));
}

RegionAllocator::RegionAllocator(uint64_t incarnation, const RegionAllocatorOptions& options,
                                 uint64_t usable)
    : incarnation_(incarnation), options_(options), usable_(usable) {
  MutexLock lock(&mu_);
  free_.emplace(0, usable_);
}

uint64_t RegionAllocator::NextPinBoundary(uint64_t offset) const {
  if (offset < options_.first_pin_bytes) return options_.first_pin_bytes;
  const uint64_t k = (offset - options_.first_pin_bytes) / options_.pin_step_bytes + 1;
  if (k > (std::numeric_limits<uint64_t>::max() - options_.first_pin_bytes) /
              options_.pin_step_bytes) {
    return std::numeric_limits<uint64_t>::max();
  }
  return options_.first_pin_bytes + k * options_.pin_step_bytes;
}

absl::StatusOr<Region> RegionAllocator::Allocate(uint64_t length, RegionKind kind) {
  if (length == 0) return absl::InvalidArgumentError("region length is zero");
  const uint64_t largest_segment = std::max(options_.first_pin_bytes, options_.pin_step_bytes);
  if (length > largest_segment || length > usable_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region of ", length, " bytes exceeds the largest pin segment or the arena"));
  }
  const uint64_t rounded = (length + options_.alignment - 1) / options_.alignment *
                           options_.alignment;
  MutexLock lock(&mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first;
    const uint64_t end = it->first + it->second;
    uint64_t candidate = start;
    const uint64_t boundary = NextPinBoundary(candidate);
    if (rounded > boundary - candidate) candidate = boundary;  // Would straddle: skip ahead.
    if (candidate >= end || rounded > end - candidate) continue;
    if (rounded > NextPinBoundary(candidate) - candidate) continue;  // Segment too small.
    // Split the free extent into [start, candidate) and [candidate + rounded, end).
    free_.erase(it);
    if (candidate > start) free_.emplace(start, candidate - start);
    if (candidate + rounded < end) free_.emplace(candidate + rounded, end - candidate - rounded);
    Region region{ArenaHandle{incarnation_, candidate, rounded}, kind};
    regions_.emplace(candidate, region);
    used_ += rounded;
    return region;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("no free arena extent of ", rounded, " bytes (", used_, " of ", usable_,
                   " bytes in use)"));
}

void RegionAllocator::InsertFreeLocked(uint64_t offset, uint64_t length) {
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += length;
      return;
    }
  }
  free_.emplace(offset, length);
}

absl::Status RegionAllocator::Free(const ArenaHandle& handle) {
  if (handle.incarnation != incarnation_) {
    return absl::FailedPreconditionError(
        absl::StrCat("free of a handle from arena incarnation ", absl::Hex(handle.incarnation)));
  }
  MutexLock lock(&mu_);
  auto it = regions_.find(handle.offset);
  if (it == regions_.end() || it->second.handle.length != handle.length) {
    return absl::NotFoundError(absl::StrCat("no live region at offset ", handle.offset,
                                            " with length ", handle.length));
  }
  regions_.erase(it);
  used_ -= handle.length;
  InsertFreeLocked(handle.offset, handle.length);
  return absl::OkStatus();
}

absl::Status RegionAllocator::ValidateLive(const ArenaHandle& handle) const {
  ArenaHandleValidator validator(incarnation_, usable_);
  absl::Status s = validator.Validate(handle);
  if (!s.ok()) return s;
  MutexLock lock(&mu_);
  auto it = regions_.upper_bound(handle.offset);
  if (it == regions_.begin()) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", handle.offset, " is not inside a live region"));
  }
  --it;
  const ArenaHandle& live = it->second.handle;
  if (handle.offset - live.offset > live.length ||
      handle.length > live.length - (handle.offset - live.offset)) {
    return absl::InvalidArgumentError(absl::StrCat("range offset ", handle.offset, " length ",
                                                   handle.length,
                                                   " is not inside one live region"));
  }
  return absl::OkStatus();
}

uint64_t RegionAllocator::HighWater() const {
  MutexLock lock(&mu_);
  if (regions_.empty()) return 0;
  const Region& last = regions_.rbegin()->second;
  return last.handle.offset + last.handle.length;
}

uint64_t RegionAllocator::used_bytes() const {
  MutexLock lock(&mu_);
  return used_;
}

}  // namespace cairn::cache
