#ifndef CAIRN_SERVICES_INFER_KERNELS_PINNED_HOST_BUFFER_H_
#define CAIRN_SERVICES_INFER_KERNELS_PINNED_HOST_BUFFER_H_

#include <cstdint>
#include <memory>

#include "services/infer/kernels/device_memory.h"

namespace cairn::infer {

// Host memory that downloads from a DeviceMemory land in, kept and reused between calls and
// page-locked (DeviceMemory::RegisterHost) where the memory takes the registration: one
// download into it is one fast copy instead of a pageable one, and no fresh pages fault in.
//
// Thread-compatible; must not outlive `memory`.
class PinnedHostBuffer {
 public:
  explicit PinnedHostBuffer(DeviceMemory* memory) : memory_(memory) {}
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer() { Release(); }

  // At least `floats` floats of host memory, valid until the next call with more floats or the
  // buffer's end. Where the registration fails the memory is ordinary: copies are slower, not
  // wrong.
  float* Get(int64_t floats) {
    if (floats > size_) {
      Release();
      data_ = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(floats));
      size_ = floats;
      pinned_ =
          memory_->RegisterHost(data_.get(), floats * static_cast<int64_t>(sizeof(float))).ok();
      alias_ = pinned_ ? static_cast<float*>(memory_->HostAlias(data_.get())) : nullptr;
    }
    return data_.get();
  }
  // Where the device's operations write the memory Get last returned (DeviceMemory::HostAlias),
  // or nullptr where they cannot: then only copies fill it.
  float* device_alias() const { return alias_; }
  // The memory Get last returned (nullptr before the first Get).
  float* data() const { return data_.get(); }
  // Whether the memory Get last returned is page-locked (copies into it can run while the
  // device computes).
  bool pinned() const { return pinned_; }

 private:
  void Release() {
    if (pinned_) static_cast<void>(memory_->UnregisterHost(data_.get()));
    pinned_ = false;
    alias_ = nullptr;
    data_.reset();
    size_ = 0;
  }

  DeviceMemory* const memory_;
  std::unique_ptr<float[]> data_;
  int64_t size_ = 0;
  bool pinned_ = false;
  float* alias_ = nullptr;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_PINNED_HOST_BUFFER_H_
