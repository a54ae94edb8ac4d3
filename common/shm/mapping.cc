#include "common/shm/mapping.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cairn {

SharedMapping::~SharedMapping() { Unmap(); }

SharedMapping::SharedMapping(SharedMapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

SharedMapping& SharedMapping::operator=(SharedMapping&& other) noexcept {
  if (this != &other) {
    Unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void SharedMapping::Unmap() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<SharedMapping> SharedMapping::Map(int fd, uint64_t size, bool writable) {
  if (size == 0) return absl::InvalidArgumentError("cannot map 0 bytes");
  int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("mmap of ", size, " bytes: ", std::strerror(errno)));
  }
  return SharedMapping(static_cast<uint8_t*>(p), size);
}

}  // namespace cairn
