#ifndef CAIRN_SERVICES_INFER_KERNELS_DEVICE_MEMORY_H_
#define CAIRN_SERVICES_INFER_KERNELS_DEVICE_MEMORY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cairn::infer {

// The memory of a kernel backend's device: where slot state (and, as backends grow, weights
// and workspaces) live. The engine holds pointers into it that it passes to the backend's
// operations and never dereferences itself unless host_visible(); bytes cross between the host
// and the device only through Upload and Download.
//
// Host memory (HostDeviceMemory(), the CPU backend's) is the reference implementation; the HIP
// backend implements the same interface over device allocations and its copy engine.
//
// Thread-safety: implementations are thread-safe for Allocate/Free; copies to or from one
// allocation must not race with kernels or other copies touching the same bytes (the scheduler
// thread owns the slots, so in practice one thread issues them all).
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // A short name, e.g. "host" or "hip".
  virtual const char* name() const = 0;
  // True when device pointers are ordinary host pointers the caller may read and write.
  virtual bool host_visible() const = 0;

  // `bytes` of zero-filled memory aligned to at least 64 bytes (nullptr for 0 bytes).
  // ResourceExhausted when the device has no room, InvalidArgument for bytes < 0.
  virtual absl::StatusOr<void*> Allocate(int64_t bytes) = 0;
  // As Allocate, but the contents are unspecified: for memory every user writes before
  // reading (scratch). The default allocates zero-filled memory.
  virtual absl::StatusOr<void*> AllocateUninitialized(int64_t bytes) { return Allocate(bytes); }
  // Frees memory from Allocate or AllocateUninitialized (nullptr is ignored).
  virtual void Free(void* device) = 0;

  // Host -> device, device -> host and device -> device copies of `bytes`. They are complete
  // (the source may be reused, the destination read) when the call returns.
  virtual absl::Status Upload(void* device_dst, const void* host_src, int64_t bytes) = 0;
  virtual absl::Status Download(void* host_dst, const void* device_src, int64_t bytes) = 0;
  virtual absl::Status Copy(void* device_dst, const void* device_src, int64_t bytes) = 0;
  // Host -> device without waiting for the device: the copy is queued in order with the
  // backend's kernels, so every kernel launched after the call reads the new bytes; the source
  // may be reused when the call returns. An error of the copy itself may be reported by a later
  // call. The default is Upload.
  virtual absl::Status UploadQueued(void* device_dst, const void* host_src, int64_t bytes) {
    return Upload(device_dst, host_src, bytes);
  }
  // Device -> host of `rows` rows of `row_bytes` bytes (rows `src_pitch` bytes apart in the
  // device memory, `dst_pitch` apart in the host memory), queued after every operation issued
  // so far and not waited for: on a device, the copy may run while operations issued after
  // the call compute. The destination may be read only after WaitQueuedDownloads(), and must
  // stay valid until then (page-locked memory from the device's host allocator or
  // RegisterHost, for the copy to run asynchronously). Errors may be reported by
  // WaitQueuedDownloads() instead. The default copies at once, a row at a time (Download).
  virtual absl::Status DownloadRowsQueued(void* host_dst, int64_t dst_pitch, const void* device_src,
                                          int64_t src_pitch, int64_t row_bytes, int64_t rows);
  // Waits until every DownloadRowsQueued has completed (and so every operation issued before
  // the last of them), and reports the first error of that work. The default has nothing to
  // wait for.
  virtual absl::Status WaitQueuedDownloads() { return absl::OkStatus(); }
  // Device -> host of `bytes` in the background: on a queue of the device's own beside the
  // compute (on a GPU, the transfer stream), after every operation issued so far, not waited
  // for. Returns a ticket for BackgroundDone / WaitBackground; background copies complete in the
  // order they were issued. Until its ticket is done the destination must stay valid and
  // unread (page-locked by RegisterHost for the copy to be asynchronous), and the source must
  // not be rewritten. The default copies at once (Download) and returns 0, always done.
  virtual absl::StatusOr<uint64_t> DownloadBackground(void* host_dst, const void* device_src,
                                                      int64_t bytes);
  // Whether background copy `ticket` (and so every one before it) has completed, or the first
  // error of that work. The default: every ticket is done.
  virtual absl::StatusOr<bool> BackgroundDone(uint64_t ticket) {
    static_cast<void>(ticket);
    return true;
  }
  // Waits until background copy `ticket` and every one before it have completed; the first
  // error of that work. The default has nothing to wait for.
  virtual absl::Status WaitBackground(uint64_t ticket) {
    static_cast<void>(ticket);
    return absl::OkStatus();
  }
  // Sets `bytes` of device memory to zero.
  virtual absl::Status Zero(void* device_dst, int64_t bytes) = 0;

  // Page-locks host memory [host, host + bytes) for fast copies to and from the device, as one
  // registration, and releases a registration. A single copy must not straddle two
  // registrations (the cache's arena is registered in steps and no arena region crosses one).
  // Memory whose device is the host needs none: the defaults do nothing.
  virtual absl::Status RegisterHost(void* host, int64_t bytes) {
    static_cast<void>(host);
    static_cast<void>(bytes);
    return absl::OkStatus();
  }
  virtual absl::Status UnregisterHost(void* host) {
    static_cast<void>(host);
    return absl::OkStatus();
  }
  // The address at which the device's kernels write (and read) the host memory at `host`,
  // the start of a RegisterHost registration, or nullptr where they cannot (the default). An
  // operation given that address as its output writes straight into the host memory; the host
  // may read it once Synchronize() has returned.
  virtual void* HostAlias(void* host) {
    static_cast<void>(host);
    return nullptr;
  }
  // Waits until every operation issued so far (kernels and queued copies in the compute order)
  // has completed, and reports the first error of that work. The default has nothing to wait
  // for.
  virtual absl::Status Synchronize() { return absl::OkStatus(); }
};

// The process's host memory as a DeviceMemory (a static object, never destroyed).
DeviceMemory* HostDeviceMemory();

// One allocation of a DeviceMemory, freed when the buffer is destroyed or Reset. It must not
// outlive its memory. Thread-compatible; movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // An empty buffer (null data) for 0 bytes.
  static absl::StatusOr<DeviceBuffer> Allocate(DeviceMemory* memory, int64_t bytes);
  // The same over DeviceMemory::AllocateUninitialized.
  static absl::StatusOr<DeviceBuffer> AllocateUninitialized(DeviceMemory* memory, int64_t bytes);

  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = static_cast<DeviceBuffer&&>(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }
  int64_t size() const { return size_; }
  DeviceMemory* memory() const { return memory_; }

  // Frees the allocation now (the device must be done with it); the buffer becomes empty.
  void Reset();

 private:
  // A buffer owning `data` (an allocation of `bytes` from `memory`), or the allocation's error.
  static absl::StatusOr<DeviceBuffer> Adopt(absl::StatusOr<void*> data, DeviceMemory* memory,
                                            int64_t bytes);
  DeviceMemory* memory_ = nullptr;
  void* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_KERNELS_DEVICE_MEMORY_H_
