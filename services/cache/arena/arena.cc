#include "services/cache/arena/arena.h"

#include <sys/sysinfo.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/shm/memfd.h"
#include "common/status/status_macros.h"

namespace cairn::cache {

absl::StatusOr<uint64_t> DefaultArenaBytes(double fraction, uint64_t cap,
                                           const std::string& meminfo_path) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("free RAM fraction ", fraction, " is not in (0, 1]"));
  }
  std::optional<uint64_t> available;
  std::ifstream meminfo(meminfo_path);
  std::string line;
  while (std::getline(meminfo, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (parts.size() < 2 || parts[0] != "MemAvailable:") continue;
    uint64_t kib = 0;
    if (absl::SimpleAtoi(parts[1], &kib)) available = kib * 1024;
    break;
  }
  if (!available.has_value()) {
    // systemd's ProcSubset=pid (the shipped unit) hides /proc/meminfo. sysinfo(2) still answers:
    // free RAM plus buffers, below MemAvailable (no reclaimable page cache), so the default
    // budget errs small.
    struct sysinfo info {};
    if (::sysinfo(&info) != 0) {
      return absl::InternalError(absl::StrCat("cannot read MemAvailable from ", meminfo_path,
                                              " nor call sysinfo: ", std::strerror(errno),
                                              " (set --cache-ram-bytes)"));
    }
    available = (static_cast<uint64_t>(info.freeram) + info.bufferram) * info.mem_unit;
  }
  const uint64_t bytes =
      std::min<uint64_t>(static_cast<uint64_t>(static_cast<double>(*available) * fraction), cap);
  return bytes - bytes % PageSize();
}

absl::StatusOr<std::unique_ptr<Arena>> Arena::Create(const ArenaOptions& options) {
  uint64_t size = options.size_bytes;
  if (size == 0) {
    ASSIGN_OR_RETURN(
        size, DefaultArenaBytes(options.default_free_ram_fraction, options.max_default_bytes));
  }
  size -= size % PageSize();
  if (size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena size ", options.size_bytes, " is below one page"));
  }
  const uint64_t alignment = options.alignment == 0 ? PageSize() : options.alignment;
  const uint64_t incarnation = NewIncarnation();
  RegionAllocatorOptions allocator_options;
  allocator_options.arena_bytes = size;
  allocator_options.alignment = alignment;
  allocator_options.first_pin_bytes = options.first_pin_bytes;
  allocator_options.pin_step_bytes = options.pin_step_bytes;
  ASSIGN_OR_RETURN(std::unique_ptr<RegionAllocator> allocator,
                   RegionAllocator::Create(incarnation, allocator_options));
  ASSIGN_OR_RETURN(UniqueFd fd, CreateSealedMemfd("cairn-arena", size));
  ASSIGN_OR_RETURN(SharedMapping mapping, SharedMapping::Map(fd.get(), size, /*writable=*/true));
  return std::unique_ptr<Arena>(
      new Arena(incarnation, alignment, std::move(fd), std::move(mapping), std::move(allocator)));
}

Arena::Arena(uint64_t incarnation, uint64_t alignment, UniqueFd fd, SharedMapping mapping,
             std::unique_ptr<RegionAllocator> allocator)
    : incarnation_(incarnation),
      alignment_(alignment),
      fd_(std::move(fd)),
      mapping_(std::move(mapping)),
      allocator_(std::move(allocator)) {}

absl::StatusOr<absl::Span<uint8_t>> Arena::Resolve(const ArenaHandle& handle) const {
  RETURN_IF_ERROR(allocator_->ValidateLive(handle));
  return absl::Span<uint8_t>(mapping_.data() + handle.offset, handle.length);
}

}  // namespace cairn::cache
