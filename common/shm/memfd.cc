#include "common/shm/memfd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U  // Linux >= 6.3; older kernels reject it with EINVAL.
#endif

namespace cairn {
namespace {
constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

absl::Status ErrnoError(absl::string_view what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(err)));
}
}  // namespace

uint64_t PageSize() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }

absl::StatusOr<UniqueFd> CreateSealedMemfd(const std::string& name, uint64_t size) {
  const uint64_t page = PageSize();
  if (size == 0 || size % page != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memfd size ", size, " is not a positive multiple of the page size ", page));
  }
  if (size > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("memfd size ", size, " is too large"));
  }
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
  if (fd < 0 && errno == EINVAL) {
    fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  }
  if (fd < 0) return ErrnoError("memfd_create", errno);
  UniqueFd owned(fd);
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) return ErrnoError("ftruncate memfd", errno);
  if (::fcntl(fd, F_ADD_SEALS, kRequiredSeals) != 0) return ErrnoError("seal memfd", errno);
  return owned;
}

absl::StatusOr<uint64_t> ValidateSealedMemfd(int fd, uint64_t expected_size) {
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptor is not a sealable memfd: ", std::strerror(errno)));
  }
  if ((seals & kRequiredSeals) != kRequiredSeals) {
    return absl::InvalidArgumentError(
        absl::StrCat("memfd seals 0x", absl::Hex(seals), " lack shrink, grow or seal"));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("fstat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError("memfd is not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0 || size % PageSize() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memfd size ", size, " is not a positive multiple of the page size"));
  }
  if (expected_size != 0 && size != expected_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("memfd size ", size, " differs from the announced ", expected_size));
  }
  return size;
}

}  // namespace cairn
