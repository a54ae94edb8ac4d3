// HipKernelBackend's memory (allocation, uploads and downloads, copies split at the host
// arena's registration boundaries, host registration, stream synchronisation) and
// HipDeviceMemory, the DeviceMemory over it.

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "services/infer/kernels/hip/hip_errors.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"

namespace cairn::infer {

using hip::HipError;
using hip::Invalid;

absl::StatusOr<void*> HipKernelBackend::AllocateDevice(int64_t bytes) {
  if (bytes < 0) return Invalid("allocate", absl::StrCat("negative size ", bytes));
  if (bytes == 0) return nullptr;
  if (allocation_limit_for_test_ >= 0 && bytes > allocation_limit_for_test_) {
    return HipError(hipErrorMemoryAllocation,
                    absl::StrCat("allocating ", bytes, " bytes (the test's limit)"));
  }
  hipError_t e = hipSetDevice(options_.device);
  if (e != hipSuccess) return HipError(e, "selecting the device");
  rounded_ = {};  // New memory may take the place of the rows it was made from.
  void* p = nullptr;
  e = hipMalloc(&p, static_cast<size_t>(bytes));
  if (e != hipSuccess) {
    static_cast<void>(hipGetLastError());  // An allocation failure is not sticky.
    return HipError(e, absl::StrCat("allocating ", bytes, " bytes"));
  }
  // Zeroed on the compute stream and waited for: the buffer is ready for any stream after.
  e = hipMemsetAsync(p, 0, static_cast<size_t>(bytes), compute_);
  ++host_waits_;
  if (e == hipSuccess) e = hipStreamSynchronize(compute_);
  if (e != hipSuccess) {
    static_cast<void>(hipFree(p));
    return HipError(e, absl::StrCat("zeroing ", bytes, " bytes"));
  }
  return p;
}

absl::StatusOr<void*> HipDeviceMemory::Allocate(int64_t bytes) {
  return backend_->AllocateDevice(bytes);
}

void HipDeviceMemory::Free(void* device) {
  // A failing free leaves nothing to recover; the backend's next call reports the device error.
  if (device == nullptr) return;
  ++backend_->host_waits_;
  static_cast<void>(hipFree(device));
}

absl::Status HipDeviceMemory::Upload(void* device_dst, const void* host_src, int64_t bytes) {
  return backend_->Upload(device_dst, host_src, bytes);
}

absl::Status HipDeviceMemory::UploadQueued(void* device_dst, const void* host_src, int64_t bytes) {
  return backend_->UploadQueued(device_dst, host_src, bytes);
}

absl::Status HipDeviceMemory::Download(void* host_dst, const void* device_src, int64_t bytes) {
  return backend_->Download(host_dst, device_src, bytes);
}

absl::Status HipDeviceMemory::DownloadRowsQueued(void* host_dst, int64_t dst_pitch,
                                                 const void* device_src, int64_t src_pitch,
                                                 int64_t row_bytes, int64_t rows) {
  return backend_->DownloadRowsQueued(host_dst, dst_pitch, device_src, src_pitch, row_bytes, rows);
}

absl::Status HipDeviceMemory::WaitQueuedDownloads() { return backend_->WaitQueuedDownloads(); }

absl::StatusOr<uint64_t> HipDeviceMemory::DownloadBackground(void* host_dst, const void* device_src,
                                                             int64_t bytes) {
  return backend_->DownloadBackground(host_dst, device_src, bytes);
}

absl::StatusOr<bool> HipDeviceMemory::BackgroundDone(uint64_t ticket) {
  return backend_->BackgroundDone(ticket);
}

absl::Status HipDeviceMemory::WaitBackground(uint64_t ticket) {
  return backend_->WaitBackground(ticket);
}

absl::Status HipDeviceMemory::Copy(void* device_dst, const void* device_src, int64_t bytes) {
  RETURN_IF_ERROR(backend_->CopySplit(device_dst, device_src, bytes, 0, {}, hipMemcpyDeviceToDevice,
                                      HipStream::kCompute));
  return backend_->Synchronize(HipStream::kCompute);
}

absl::Status HipDeviceMemory::RegisterHost(void* host, int64_t bytes) {
  return backend_->RegisterHost(host, bytes);
}

absl::Status HipDeviceMemory::UnregisterHost(void* host) { return backend_->UnregisterHost(host); }

void* HipDeviceMemory::HostAlias(void* host) {
  // hipHostRegisterDefault maps the registration into the device's address space where the
  // device has unified addressing (every NVIDIA device of sm_60 and later on 64-bit Linux);
  // elsewhere the lookup fails and the caller copies instead.
  void* alias = nullptr;
  if (host == nullptr || hipSetDevice(backend_->options_.device) != hipSuccess ||
      hipHostGetDevicePointer(&alias, host, 0) != hipSuccess) {
    static_cast<void>(hipGetLastError());  // A failed lookup is not sticky.
    return nullptr;
  }
  return alias;
}

absl::Status HipDeviceMemory::Synchronize() { return backend_->Synchronize(HipStream::kCompute); }

absl::Status HipDeviceMemory::Zero(void* device_dst, int64_t bytes) {
  RETURN_IF_ERROR(backend_->error_);
  if (bytes < 0) return Invalid("zero", absl::StrCat("negative size ", bytes));
  if (bytes == 0) return absl::OkStatus();
  if (!backend_->Enter()) return backend_->error_;
  backend_->Check(hipMemsetAsync(device_dst, 0, static_cast<size_t>(bytes), backend_->compute_),
                  "zeroing device memory");
  return backend_->Synchronize(HipStream::kCompute);
}

absl::Status HipKernelBackend::Upload(void* device_dst, const void* host_src, int64_t bytes) {
  RETURN_IF_ERROR(
      CopySplit(device_dst, host_src, bytes, 0, {}, hipMemcpyHostToDevice, HipStream::kCompute));
  return Synchronize(HipStream::kCompute);
}

absl::Status HipKernelBackend::UploadQueued(void* device_dst, const void* host_src, int64_t bytes) {
  RETURN_IF_ERROR(error_);
  if (bytes < 0) return Invalid("upload", absl::StrCat("negative size ", bytes));
  if (bytes == 0) return absl::OkStatus();
  if (!Enter()) return error_;
  if (upload_done_ == nullptr && !Check(hipEventCreate(&upload_done_), "creating an event")) {
    return error_;
  }
  // The staging may be rewritten once the device has read the last queued upload; a pass's
  // download has normally waited for that already, so this rarely waits.
  if (upload_recorded_) {
    hipError_t e = hipEventQuery(upload_done_);
    if (e == hipErrorNotReady) {
      ++host_waits_;
      e = hipEventSynchronize(upload_done_);
    }
    if (!Check(e, "waiting for a queued upload")) return error_;
  }
  // Ordinary host memory: the copy's source is the staging, not the caller's memory, so the
  // caller may reuse it at once whatever the runtime does with pageable sources.
  if (static_cast<int64_t>(upload_staging_.size()) < bytes) {
    upload_staging_.resize(static_cast<size_t>(bytes));
  }
  std::memcpy(upload_staging_.data(), host_src, static_cast<size_t>(bytes));
  RETURN_IF_ERROR(CopySplit(device_dst, upload_staging_.data(), bytes, 0, {}, hipMemcpyHostToDevice,
                            HipStream::kCompute));
  if (!Check(hipEventRecord(upload_done_, compute_), "recording an event")) return error_;
  upload_recorded_ = true;
  return absl::OkStatus();
}

absl::Status HipKernelBackend::Download(void* host_dst, const void* device_src, int64_t bytes) {
  RETURN_IF_ERROR(
      CopySplit(host_dst, device_src, bytes, 0, {}, hipMemcpyDeviceToHost, HipStream::kCompute));
  return Synchronize(HipStream::kCompute);
}

absl::Status HipKernelBackend::DownloadRowsQueued(void* host_dst, int64_t dst_pitch,
                                                  const void* device_src, int64_t src_pitch,
                                                  int64_t row_bytes, int64_t rows) {
  RETURN_IF_ERROR(error_);
  if (rows < 0 || row_bytes < 0 || dst_pitch < row_bytes || src_pitch < row_bytes) {
    return Invalid("download rows", absl::StrCat("bad shape rows=", rows, " row_bytes=", row_bytes,
                                                 " pitches ", src_pitch, " -> ", dst_pitch));
  }
  if (rows == 0 || row_bytes == 0) return absl::OkStatus();
  if (!Enter()) return error_;
  if (download_ == nullptr &&
      !Check(hipStreamCreateWithFlags(&download_, hipStreamNonBlocking), "creating a stream")) {
    return error_;
  }
  if (download_after_ == nullptr && !Check(hipEventCreate(&download_after_), "creating an event")) {
    return error_;
  }
  // The copy waits for everything issued on the compute stream so far (the event's latest
  // record), and runs beside whatever the compute stream takes up next.
  if (!Check(hipEventRecord(download_after_, compute_), "recording an event") ||
      !Check(hipStreamWaitEvent(download_, download_after_, 0), "ordering a download") ||
      !Check(hipMemcpy2DAsync(host_dst, static_cast<size_t>(dst_pitch), device_src,
                              static_cast<size_t>(src_pitch), static_cast<size_t>(row_bytes),
                              static_cast<size_t>(rows), hipMemcpyDeviceToHost, download_),
             "queueing a download")) {
    return error_;
  }
  downloads_queued_ = true;
  return absl::OkStatus();
}

absl::Status HipKernelBackend::WaitQueuedDownloads() {
  if (downloads_queued_) {
    // Waited for whatever else failed: no queued copy may still write its destination after.
    downloads_queued_ = false;
    ++host_waits_;
    static_cast<void>(hipSetDevice(options_.device));
    Check(hipStreamSynchronize(download_), "waiting for a queued download");
  }
  return error_;
}

absl::StatusOr<uint64_t> HipKernelBackend::DownloadBackground(void* host_dst,
                                                              const void* device_src,
                                                              int64_t bytes) {
  RETURN_IF_ERROR(error_);
  if (bytes < 0) return Invalid("background download", absl::StrCat("negative size ", bytes));
  if (!Enter()) return error_;
  if (background_after_ == nullptr &&
      !Check(hipEventCreateWithFlags(&background_after_, hipEventDisableTiming),
             "creating an event")) {
    return error_;
  }
  hipEvent_t done = nullptr;
  if (!spare_events_.empty()) {
    done = spare_events_.back();
    spare_events_.pop_back();
  } else if (!Check(hipEventCreateWithFlags(&done, hipEventDisableTiming), "creating an event")) {
    return error_;
  }
  // The copy waits for everything issued on the compute stream so far (the rows it reads were
  // written there) and runs on the transfer stream beside whatever the compute takes up next.
  const bool queued =
      Check(hipEventRecord(background_after_, compute_), "recording an event") &&
      Check(hipStreamWaitEvent(transfer_, background_after_, 0), "ordering a background copy") &&
      (bytes == 0 || Check(hipMemcpyAsync(host_dst, device_src, static_cast<size_t>(bytes),
                                          hipMemcpyDeviceToHost, transfer_),
                           "queueing a background copy")) &&
      Check(hipEventRecord(done, transfer_), "recording an event");
  if (!queued) {
    // A copy may have been queued before the failure: its destination must not be given up
    // while it runs.
    DrainBackground();
    static_cast<void>(hipEventDestroy(done));
    return error_;
  }
  background_events_.emplace_back(++background_issued_, done);
  return background_issued_;
}

void HipKernelBackend::DrainBackground() {
  static_cast<void>(hipSetDevice(options_.device));
  if (transfer_ != nullptr) static_cast<void>(hipStreamSynchronize(transfer_));
}

absl::Status HipKernelBackend::RetireBackground(uint64_t ticket, bool wait) {
  while (!background_events_.empty() && background_done_ < ticket) {
    const auto [t, event] = background_events_.front();
    const hipError_t e = wait ? hipEventSynchronize(event) : hipEventQuery(event);
    if (e == hipErrorNotReady) break;
    if (!Check(e, "waiting for a background copy")) return error_;
    background_done_ = t;
    spare_events_.push_back(event);
    background_events_.pop_front();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> HipKernelBackend::BackgroundState(uint64_t ticket, bool wait) {
  if (!error_.ok()) {
    // The caller gives the copies' destinations up on an error: none may still be running.
    DrainBackground();
    return error_;
  }
  if (ticket > background_issued_) {
    return Invalid("background copy", absl::StrCat("no ticket ", ticket));
  }
  if (ticket <= background_done_) return true;
  if (wait) ++host_waits_;
  static_cast<void>(hipSetDevice(options_.device));
  absl::Status retired = RetireBackground(ticket, wait);
  if (!retired.ok()) {
    DrainBackground();
    return retired;
  }
  return ticket <= background_done_;
}

absl::StatusOr<bool> HipKernelBackend::BackgroundDone(uint64_t ticket) {
  return BackgroundState(ticket, /*wait=*/false);
}

absl::Status HipKernelBackend::WaitBackground(uint64_t ticket) {
  return BackgroundState(ticket, /*wait=*/true).status();
}

absl::Status HipKernelBackend::CopyToDevice(void* device_dst, const void* host_src, int64_t bytes,
                                            absl::Span<const uintptr_t> pin_boundaries,
                                            HipStream stream) {
  return CopySplit(device_dst, host_src, bytes, reinterpret_cast<uintptr_t>(host_src),
                   pin_boundaries, hipMemcpyHostToDevice, stream);
}

absl::Status HipKernelBackend::CopyToHost(void* host_dst, const void* device_src, int64_t bytes,
                                          absl::Span<const uintptr_t> pin_boundaries,
                                          HipStream stream) {
  return CopySplit(host_dst, device_src, bytes, reinterpret_cast<uintptr_t>(host_dst),
                   pin_boundaries, hipMemcpyDeviceToHost, stream);
}

std::vector<std::pair<int64_t, int64_t>> HipKernelBackend::SplitAtBoundaries(
    uintptr_t host, int64_t bytes, absl::Span<const uintptr_t> boundaries) {
  std::vector<uintptr_t> cuts;
  for (uintptr_t b : boundaries) {
    if (b > host && b < host + static_cast<uintptr_t>(bytes)) cuts.push_back(b);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<std::pair<int64_t, int64_t>> pieces;
  int64_t start = 0;
  for (uintptr_t c : cuts) {
    const int64_t end = static_cast<int64_t>(c - host);
    pieces.emplace_back(start, end - start);
    start = end;
  }
  if (bytes > start) pieces.emplace_back(start, bytes - start);
  return pieces;
}

absl::Status HipKernelBackend::CopySplit(void* dst, const void* src, int64_t bytes, uintptr_t host,
                                         absl::Span<const uintptr_t> pin_boundaries,
                                         hipMemcpyKind kind, HipStream stream) {
  RETURN_IF_ERROR(error_);
  if (bytes < 0) return Invalid("copy", absl::StrCat("negative size ", bytes));
  if (bytes == 0) return absl::OkStatus();
  hipError_t e = hipSetDevice(options_.device);
  if (e != hipSuccess) return HipError(e, "selecting the device");
  if (kind != hipMemcpyDeviceToHost) ForgetRoundedRowsIn(dst, static_cast<char*>(dst) + bytes);
  for (const auto& [offset, length] : SplitAtBoundaries(host, bytes, pin_boundaries)) {
    e = hipMemcpyAsync(static_cast<char*>(dst) + offset, static_cast<const char*>(src) + offset,
                       static_cast<size_t>(length), kind, StreamOf(stream));
    if (e != hipSuccess) {
      const absl::Status s =
          HipError(e, absl::StrCat("copying ", length, " bytes at offset ", offset));
      Keep(s);
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status HipKernelBackend::RegisterHost(void* host, int64_t bytes) {
  if (bytes <= 0) return Invalid("register host", absl::StrCat("size ", bytes));
  hipError_t e = hipSetDevice(options_.device);
  if (e == hipSuccess)
    e = hipHostRegister(host, static_cast<size_t>(bytes), hipHostRegisterDefault);
  if (e != hipSuccess) {
    static_cast<void>(hipGetLastError());  // A refused registration is not sticky.
    return HipError(e, absl::StrCat("registering ", bytes, " bytes of host memory"));
  }
  return absl::OkStatus();
}

absl::Status HipKernelBackend::UnregisterHost(void* host) {
  const hipError_t e = hipHostUnregister(host);
  if (e != hipSuccess) {
    static_cast<void>(hipGetLastError());
    return HipError(e, "unregistering host memory");
  }
  return absl::OkStatus();
}

absl::Status HipKernelBackend::Synchronize(HipStream stream) {
  if (!error_.ok()) return error_;
  if (!Check(hipSetDevice(options_.device), "selecting the device")) return error_;
  ++host_waits_;
  Check(hipStreamSynchronize(StreamOf(stream)), "synchronizing");
  return error_;
}

}  // namespace cairn::infer
