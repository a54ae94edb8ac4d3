#include "services/infer/engine/slot_state.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace cairn::infer {

absl::StatusOr<std::unique_ptr<SlotState>> SlotState::Create(const StateLayout& layout,
                                                             int64_t max_rows,
                                                             DeviceMemory* memory) {
  if (max_rows < 1) return absl::InvalidArgumentError("slot max_rows must be >= 1");
  if (memory == nullptr) return absl::InvalidArgumentError("slot state needs a memory");
  std::vector<DeviceBuffer> buffers;
  for (const StateComponent& c : layout.components) {
    if (c.floats < 1) {
      return absl::InvalidArgumentError(absl::StrCat("state component ", c.name, " is empty"));
    }
    const int64_t floats = c.kind == ComponentKind::kRows ? c.floats * max_rows : c.floats;
    // Allocations are zero-filled: a new slot's private state is the initial (zero) state.
    absl::StatusOr<DeviceBuffer> b =
        DeviceBuffer::Allocate(memory, floats * static_cast<int64_t>(sizeof(float)));
    if (!b.ok()) {
      return absl::Status(b.status().code(),
                          absl::StrCat("slot state component ", c.name, " (", memory->name(),
                                       " memory): ", b.status().message()));
    }
    buffers.push_back(*std::move(b));
  }
  return std::unique_ptr<SlotState>(new SlotState(layout, max_rows, memory, std::move(buffers)));
}

SlotState::SlotState(StateLayout layout, int64_t max_rows, DeviceMemory* memory,
                     std::vector<DeviceBuffer> buffers)
    : layout_(std::move(layout)),
      max_rows_(max_rows),
      memory_(memory),
      buffers_(std::move(buffers)) {
  component_positions_.assign(buffers_.size(), 0);
}

void SlotState::BeforeRowsOverwritten(int64_t first_row) {
  if (first_row < high_water_) {
    if (hook_) hook_(first_row);
    high_water_ = first_row;
  }
}

absl::Status SlotState::Reset() {
  BeforeRowsOverwritten(0);
  component_positions_.assign(buffers_.size(), 0);
  position_ = 0;
  runnable_ = false;
  for (size_t c = 0; c < buffers_.size(); ++c) {
    if (layout_.components[c].kind == ComponentKind::kPrivate) {
      RETURN_IF_ERROR(memory_->Zero(buffers_[c].data(), buffers_[c].size()));
    }
  }
  runnable_ = true;
  return absl::OkStatus();
}

void SlotState::BeginRestore(int64_t keep_rows) {
  BeforeRowsOverwritten(keep_rows);
  runnable_ = false;
  // Rows must be copied in again from `keep_rows` and private state loaded: until then no
  // component is at any position a restore could validate.
  for (size_t c = 0; c < buffers_.size(); ++c) {
    component_positions_[c] = layout_.components[c].kind == ComponentKind::kRows ? keep_rows : -1;
  }
}

absl::Status SlotState::Validate(int64_t position) {
  if (position < 0 || position > max_rows_) {
    return absl::InvalidArgumentError(
        absl::StrCat("position ", position, " outside slot of ", max_rows_, " rows"));
  }
  for (size_t c = 0; c < buffers_.size(); ++c) {
    if (component_positions_[c] != position) {
      return absl::FailedPreconditionError(
          absl::StrCat("state component ", layout_.components[c].name, " is at position ",
                       component_positions_[c], ", expected ", position));
    }
  }
  position_ = position;
  high_water_ = std::max(high_water_, position);
  runnable_ = true;
  return absl::OkStatus();
}

absl::Status SlotState::PrepareAppend(int64_t tokens) {
  if (!runnable_) return absl::FailedPreconditionError("slot is not runnable (restore pending)");
  if (tokens < 0 || position_ + tokens > max_rows_) {
    return absl::ResourceExhaustedError(absl::StrCat("slot holds ", max_rows_, " rows; ", position_,
                                                     " used, ", tokens, " more asked"));
  }
  BeforeRowsOverwritten(position_);
  return absl::OkStatus();
}

void SlotState::CommitAppend(int64_t tokens) {
  position_ += tokens;
  component_positions_.assign(buffers_.size(), position_);
  high_water_ = std::max(high_water_, position_);
}

}  // namespace cairn::infer
