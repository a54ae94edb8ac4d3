#include "services/infer/kernels/device_memory.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/shm/bulk_copy.h"
#include "common/status/status_macros.h"

namespace cairn::infer {
namespace {

constexpr size_t kHostAlignment = 64;  // A cache line; what the CPU kernels' vectors need.

absl::Status CheckBytes(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("copy of ", bytes, " bytes"));
  return absl::OkStatus();
}

// Host memory: aligned_alloc, and BulkCopy for uploads and downloads (a restore's rows and
// private state coming out of the arena, a capture's going in: large copies whose destination
// is not read again at once).
class HostMemory final : public DeviceMemory {
 public:
  const char* name() const override { return "host"; }
  bool host_visible() const override { return true; }

  absl::StatusOr<void*> Allocate(int64_t bytes) override {
    absl::StatusOr<void*> p = AllocateUninitialized(bytes);
    if (p.ok() && *p != nullptr) std::memset(*p, 0, Rounded(bytes));
    return p;
  }
  // The scratch arena's blocks (every user writes before reading) skip the fill.
  absl::StatusOr<void*> AllocateUninitialized(int64_t bytes) override {
    if (bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat("allocation of ", bytes, " bytes"));
    }
    if (bytes == 0) return nullptr;
    void* p = std::aligned_alloc(kHostAlignment, Rounded(bytes));
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("host allocation of ", bytes, " bytes"));
    }
    return p;
  }
  static size_t Rounded(int64_t bytes) {
    return (static_cast<size_t>(bytes) + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  }
  void Free(void* device) override { std::free(device); }

  absl::Status Upload(void* dst, const void* src, int64_t bytes) override {
    return Transfer(dst, src, bytes);
  }
  absl::Status Download(void* dst, const void* src, int64_t bytes) override {
    return Transfer(dst, src, bytes);
  }
  absl::Status Copy(void* dst, const void* src, int64_t bytes) override {
    if (absl::Status s = CheckBytes(bytes); !s.ok()) return s;
    if (bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  // Between host memory and device memory, which never overlap.
  static absl::Status Transfer(void* dst, const void* src, int64_t bytes) {
    if (absl::Status s = CheckBytes(bytes); !s.ok()) return s;
    if (bytes > 0) BulkCopy(dst, src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status Zero(void* dst, int64_t bytes) override {
    if (absl::Status s = CheckBytes(bytes); !s.ok()) return s;
    if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status DeviceMemory::DownloadRowsQueued(void* host_dst, int64_t dst_pitch,
                                              const void* device_src, int64_t src_pitch,
                                              int64_t row_bytes, int64_t rows) {
  if (rows < 0 || row_bytes < 0 || dst_pitch < row_bytes || src_pitch < row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("download rows: bad shape rows=", rows,
                                                   " row_bytes=", row_bytes, " pitches ", src_pitch,
                                                   " -> ", dst_pitch));
  }
  for (int64_t r = 0; r < rows; ++r) {
    RETURN_IF_ERROR(Download(static_cast<char*>(host_dst) + r * dst_pitch,
                             static_cast<const char*>(device_src) + r * src_pitch, row_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> DeviceMemory::DownloadBackground(void* host_dst, const void* device_src,
                                                          int64_t bytes) {
  RETURN_IF_ERROR(Download(host_dst, device_src, bytes));
  return uint64_t{0};
}

DeviceMemory* HostDeviceMemory() {
  static HostMemory* const memory = new HostMemory();
  return memory;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(DeviceMemory* memory, int64_t bytes) {
  return Adopt(memory->Allocate(bytes), memory, bytes);
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::AllocateUninitialized(DeviceMemory* memory,
                                                                 int64_t bytes) {
  return Adopt(memory->AllocateUninitialized(bytes), memory, bytes);
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Adopt(absl::StatusOr<void*> data, DeviceMemory* memory,
                                                 int64_t bytes) {
  if (!data.ok()) return data.status();
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;
  buffer.memory_ = memory;
  buffer.data_ = *data;
  buffer.size_ = bytes;
  return buffer;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    memory_ = other.memory_;
    data_ = other.data_;
    size_ = other.size_;
    other.memory_ = nullptr;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (memory_ != nullptr) memory_->Free(data_);
  memory_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace cairn::infer
