#ifndef CAIRN_SERVICES_INFER_ENGINE_SLOT_KV_MEMORY_H_
#define CAIRN_SERVICES_INFER_ENGINE_SLOT_KV_MEMORY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "services/infer/engine/kv_memory.h"

namespace cairn::infer {

struct SlotKvMemoryOptions {
  int slots = 1;            // --sessions
  int64_t max_rows = 4096;  // Rows per slot (the context limit).
  // Where the slots' buffers live: the kernel backend's memory (KernelBackend::memory()).
  DeviceMemory* memory = HostDeviceMemory();
};

// KvMemory over SlotStates whose buffers live in a kernel backend's memory (host memory for the
// CPU backend, device memory for the GPU one). Bytes cross to and from the host (the cache's
// arena) through the memory's Upload / Download only.
// Thread-compatible.
class SlotKvMemory final : public KvMemory {
 public:
  // InvalidArgument for fewer than one slot or row, or an empty component.
  static absl::StatusOr<std::unique_ptr<SlotKvMemory>> Create(const StateLayout& layout,
                                                              const SlotKvMemoryOptions& options);

  const StateLayout& layout() const override { return layout_; }
  int num_slots() const override { return static_cast<int>(slots_.size()); }
  SlotState* slot(int slot) override { return slots_[slot].get(); }

  absl::StatusOr<int64_t> CapturePrivateState(int slot, absl::Span<uint8_t> out) override;
  absl::Status LoadPrivateState(int slot, int64_t position, absl::Span<const uint8_t> in) override;
  absl::Status CopyRowsOut(int slot, int component, int64_t first_row, int64_t count,
                           absl::Span<uint8_t> out) override;
  absl::StatusOr<uint64_t> CopyRowsOutBackground(int slot, int component, int64_t first_row,
                                                 int64_t count, absl::Span<uint8_t> out) override;
  absl::StatusOr<bool> BackgroundCopyDone(uint64_t ticket) override;
  absl::Status WaitBackgroundCopy(uint64_t ticket) override;
  absl::Status CopyRowsIn(int slot, int component, int64_t first_row,
                          absl::Span<const uint8_t> in) override;
  absl::Status BeginRestore(int slot, int64_t keep_rows = 0) override;
  absl::Status Validate(int slot, int64_t position) override;
  absl::Status Reset(int slot) override;
  void SetOverwriteHook(OverwriteHook hook) override;

 private:
  SlotKvMemory(StateLayout layout, std::vector<std::unique_ptr<SlotState>> slots);
  absl::StatusOr<SlotState*> CheckedSlot(int slot);
  absl::Status CheckRowsComponent(int component) const;
  // The checks of CopyRowsOut; the rows' device address.
  absl::StatusOr<const uint8_t*> RowsOut(int slot, int component, int64_t first_row, int64_t count,
                                         absl::Span<uint8_t> out);
  // Waits for the background copies from `slot`'s rows (the overwrite hook's first step).
  void WaitSlotCopies(int slot);

  const StateLayout layout_;
  std::vector<std::unique_ptr<SlotState>> slots_;
  OverwriteHook hook_;
  // By slot, the last background copy from its rows not yet waited for (0: none). The slots
  // share one DeviceMemory, whose tickets complete in order.
  std::vector<uint64_t> pending_copy_;
  // The first error of waiting for a background copy in the hook (which cannot return it),
  // reported by the next BackgroundCopyDone or WaitBackgroundCopy.
  absl::Status copy_error_;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_SLOT_KV_MEMORY_H_
