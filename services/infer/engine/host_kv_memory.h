#ifndef CAIRN_SERVICES_INFER_ENGINE_HOST_KV_MEMORY_H_
#define CAIRN_SERVICES_INFER_ENGINE_HOST_KV_MEMORY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "services/infer/engine/kv_memory.h"

namespace cairn::infer {

struct HostKvMemoryOptions {
  int slots = 1;            // --sessions
  int64_t max_rows = 4096;  // Rows per slot (the context limit).
};

// KvMemory over slot buffers in host memory (the CPU backend's).
// Thread-compatible.
class HostKvMemory final : public KvMemory {
 public:
  // InvalidArgument for fewer than one slot or row, or an empty component.
  static absl::StatusOr<std::unique_ptr<HostKvMemory>> Create(const StateLayout& layout,
                                                              const HostKvMemoryOptions& options);

  const StateLayout& layout() const override { return layout_; }
  int num_slots() const override { return static_cast<int>(slots_.size()); }
  SlotState* slot(int slot) override { return slots_[slot].get(); }

  absl::StatusOr<int64_t> CapturePrivateState(int slot, absl::Span<uint8_t> out) override;
  absl::Status LoadPrivateState(int slot, int64_t position, absl::Span<const uint8_t> in) override;
  absl::Status CopyRowsOut(int slot, int component, int64_t first_row, int64_t count,
                           absl::Span<uint8_t> out) override;
  absl::Status CopyRowsIn(int slot, int component, int64_t first_row,
                          absl::Span<const uint8_t> in) override;
  absl::Status BeginRestore(int slot, int64_t keep_rows = 0) override;
  absl::Status Validate(int slot, int64_t position) override;
  absl::Status Reset(int slot) override;
  void SetOverwriteHook(OverwriteHook hook) override;

 private:
  HostKvMemory(StateLayout layout, std::vector<std::unique_ptr<SlotState>> slots);
  absl::StatusOr<SlotState*> CheckedSlot(int slot);
  absl::Status CheckRowsComponent(int component) const;

  const StateLayout layout_;
  std::vector<std::unique_ptr<SlotState>> slots_;
  OverwriteHook hook_;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_HOST_KV_MEMORY_H_
