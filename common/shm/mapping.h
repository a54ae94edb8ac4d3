#ifndef CAIRN_COMMON_SHM_MAPPING_H_
#define CAIRN_COMMON_SHM_MAPPING_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace cairn {

// A shared mapping of a whole descriptor, unmapped on destruction. Move-only.
// Thread-compatible; the bytes themselves are shared with other processes.
class SharedMapping {
 public:
  SharedMapping() = default;
  ~SharedMapping();
  SharedMapping(SharedMapping&& other) noexcept;
  SharedMapping& operator=(SharedMapping&& other) noexcept;
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  // Maps `size` bytes of `fd` from offset 0 with MAP_SHARED, read-write or read-only.
  // The descriptor may be closed afterwards. Internal with errno text on failure.
  static absl::StatusOr<SharedMapping> Map(int fd, uint64_t size, bool writable);

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  SharedMapping(uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  void Unmap();

  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace cairn

#endif  // CAIRN_COMMON_SHM_MAPPING_H_
