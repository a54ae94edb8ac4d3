#ifndef CAIRN_SERVICES_INFER_ENGINE_KV_MEMORY_H_
#define CAIRN_SERVICES_INFER_ENGINE_KV_MEMORY_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/infer/engine/slot_state.h"
#include "services/infer/engine/state_layout.h"

namespace cairn::infer {

// The state-component contract of docs/architecture.md §2: how the engine (and, through it, the
// cache) reads and writes the per-conversation state of the execution slots, component by
// component.
//
// A restore is: BeginRestore(slot); CopyRowsIn(...) for every rows component from row 0;
// LoadPrivateState(slot, d, ...); Validate(slot, d). The slot cannot run in between.
// Byte layouts: a row of component c is layout().components[c].bytes() bytes of fp32; private
// state is the private components' bytes concatenated in layout order.
//
// Thread-compatible: the scheduler thread owns it.
class KvMemory {
 public:
  // Called with (slot, first_row) before rows [first_row, old high water) of `slot` are
  // overwritten or invalidated, so that borrowed rows can be preserved first.
  using OverwriteHook = std::function<void(int slot, int64_t first_row)>;

  virtual ~KvMemory() = default;

  virtual const StateLayout& layout() const = 0;
  virtual int num_slots() const = 0;
  // The slot's state, as the model's forward pass reads and writes it. `slot` must be valid.
  virtual SlotState* slot(int slot) = 0;

  // Copies the private state of `slot` into `out` (exactly layout().private_bytes() bytes) and
  // returns the position it is valid at. FailedPrecondition if the slot is not runnable.
  virtual absl::StatusOr<int64_t> CapturePrivateState(int slot, absl::Span<uint8_t> out) = 0;
  // Loads private state captured at `position` into `slot` (during a restore).
  virtual absl::Status LoadPrivateState(int slot, int64_t position,
                                        absl::Span<const uint8_t> in) = 0;
  // Copies rows [first_row, first_row + count) of rows component `component` into `out`
  // (count * row bytes). OutOfRange if they are not all valid.
  virtual absl::Status CopyRowsOut(int slot, int component, int64_t first_row, int64_t count,
                                   absl::Span<uint8_t> out) = 0;
  // As CopyRowsOut, in the background (DeviceMemory::DownloadBackground): returns a ticket, and
  // `out` may be read once BackgroundCopyDone(ticket) says so. The rows stay as they are until
  // then: before any of them is overwritten or invalidated (the hook's cases) the memory waits
  // for the copy. The default copies at once (CopyRowsOut) and returns 0, always done.
  virtual absl::StatusOr<uint64_t> CopyRowsOutBackground(int slot, int component, int64_t first_row,
                                                         int64_t count, absl::Span<uint8_t> out) {
    absl::Status copied = CopyRowsOut(slot, component, first_row, count, out);
    if (!copied.ok()) return copied;
    return uint64_t{0};
  }
  // Whether background copy `ticket` (and every one started before it) has completed; the
  // first error of that work. WaitBackgroundCopy waits for it.
  virtual absl::StatusOr<bool> BackgroundCopyDone(uint64_t ticket) {
    static_cast<void>(ticket);
    return true;
  }
  virtual absl::Status WaitBackgroundCopy(uint64_t ticket) {
    static_cast<void>(ticket);
    return absl::OkStatus();
  }
  // Writes whole rows from `in` at `first_row` (<= the component's position); the component's
  // position becomes the end of the written rows. Runs the hook first.
  virtual absl::Status CopyRowsIn(int slot, int component, int64_t first_row,
                                  absl::Span<const uint8_t> in) = 0;
  // Starts a restore into `slot`: not runnable until Validate() succeeds. Rows [0, keep_rows)
  // of every rows component stay (they already hold the restored bytes); OutOfRange if they
  // are not all valid now. Runs the hook from `keep_rows`.
  virtual absl::Status BeginRestore(int slot, int64_t keep_rows = 0) = 0;
  // Ends a restore: every component must be at `position`.
  virtual absl::Status Validate(int slot, int64_t position) = 0;
  // Empties `slot`. Runs the hook.
  virtual absl::Status Reset(int slot) = 0;

  virtual void SetOverwriteHook(OverwriteHook hook) = 0;
};

}  // namespace cairn::infer

#endif  // CAIRN_SERVICES_INFER_ENGINE_KV_MEMORY_H_
