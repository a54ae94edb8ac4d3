#ifndef CAIRN_SERVICES_INFER_ENGINE_SLOT_STATE_H_
#define CAIRN_SERVICES_INFER_ENGINE_SLOT_STATE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/infer/engine/state_layout.h"
#include "services/infer/kernels/device_memory.h"

namespace cairn::infer {

// The per-conversation state of one execution slot, split in two: host metadata (the
// position each component is valid at, the high water mark, runnable) kept here, and a buffer
// per StateComponent (rows components hold `max_rows` rows) in the memory of the kernel
// backend that runs the model (host memory for the CPU backend, device memory for the GPU
// one). data(c) is a pointer into that memory: the model hands it to backend operations;
// host code moves bytes in and out only through memory()'s Upload / Download (as KvMemory
// does), so the same code serves every backend.
//
// Invariants:
//   - rows component c holds valid rows [0, position(c)); rows at or past it are scratch.
//   - a slot is runnable only when every component is at the same position (Validate()).
//   - high_water() >= every rows position: rows below it may hold bytes someone borrowed, so
//     BeforeRowsOverwritten() runs before any of them is rewritten.
//
// Thread-compatible.
class SlotState {
 public:
  // Called with the first row index about to be overwritten; rows from there to the old high
  // water mark are about to change.
  using OverwriteHook = std::function<void(int64_t first_row)>;

  // InvalidArgument if `max_rows` < 1 or the layout has a component of no floats;
  // ResourceExhausted when `memory` has no room for the buffers.
  static absl::StatusOr<std::unique_ptr<SlotState>> Create(
      const StateLayout& layout, int64_t max_rows, DeviceMemory* memory = HostDeviceMemory());

  const StateLayout& layout() const { return layout_; }
  int64_t max_rows() const { return max_rows_; }
  int num_components() const { return static_cast<int>(buffers_.size()); }
  // The memory the component buffers live in.
  DeviceMemory* memory() const { return memory_; }

  // The common position of all components; meaningful when runnable().
  int64_t position() const { return position_; }
  int64_t component_position(int c) const { return component_positions_[c]; }
  bool runnable() const { return runnable_; }
  int64_t high_water() const { return high_water_; }

  // fp32 storage of component `c` in memory(). Rows components: [max_rows, floats] row-major.
  float* data(int c) { return buffers_[c].floats(); }
  const float* data(int c) const { return buffers_[c].floats(); }

  // Empties the slot (position 0, zero private state, runnable). Runs the hook from row 0.
  // An error of the memory (a device fault zeroing the private state) leaves the slot not
  // runnable.
  absl::Status Reset();
  // Marks the slot not runnable (a restore is in progress), keeps rows [0, keep_rows) of the
  // rows components (the caller has checked they are valid) and invalidates the rest and the
  // private components; runs the hook from row `keep_rows`.
  void BeginRestore(int64_t keep_rows = 0);
  // Sets component `c`'s position (restore path).
  void SetComponentPosition(int c, int64_t position) { component_positions_[c] = position; }
  // Makes the slot runnable if every component is at `position`; FailedPrecondition naming
  // the first component that is not, InvalidArgument if `position` > max_rows().
  absl::Status Validate(int64_t position);

  // Reserves rows [position(), position() + tokens) for a forward pass: ResourceExhausted if
  // they do not fit, FailedPrecondition if the slot is not runnable. Runs the hook if any of
  // those rows is below the high water mark.
  absl::Status PrepareAppend(int64_t tokens);
  // Moves every component to position() + tokens after a forward pass wrote them.
  void CommitAppend(int64_t tokens);

  // Runs the hook when `first_row` < high_water(), then lowers the high water mark to it.
  void BeforeRowsOverwritten(int64_t first_row);
  void set_overwrite_hook(OverwriteHook hook) { hook_ = std::move(hook); }

 private:
  SlotState(StateLayout layout, int64_t max_rows, DeviceMemory* memory,
            std::vector<DeviceBuffer> buffers);

  const StateLayout layout_;
  const int64_t max_rows_;
  DeviceMemory* const memory_;
  std::vector<DeviceBuffer> buffers_;
  std::vector<int64_t> component_positions_;
  int64_t position_ = 0;
  int64_t high_water_ = 0;
  bool runnable_ = true;
  OverwriteHook hook_;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_SLOT_STATE_H_
