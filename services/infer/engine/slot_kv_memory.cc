#include "services/infer/engine/slot_kv_memory.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace cairn::infer {

absl::StatusOr<std::unique_ptr<SlotKvMemory>> SlotKvMemory::Create(
    const StateLayout& layout, const SlotKvMemoryOptions& options) {
  if (options.slots < 1) return absl::InvalidArgumentError("kv memory needs at least one slot");
  std::vector<std::unique_ptr<SlotState>> slots;
  for (int i = 0; i < options.slots; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<SlotState> s,
                     SlotState::Create(layout, options.max_rows, options.memory));
    slots.push_back(std::move(s));
  }
  auto memory = std::unique_ptr<SlotKvMemory>(new SlotKvMemory(layout, std::move(slots)));
  memory->SetOverwriteHook(nullptr);
  return memory;
}

SlotKvMemory::SlotKvMemory(StateLayout layout, std::vector<std::unique_ptr<SlotState>> slots)
    : layout_(std::move(layout)), slots_(std::move(slots)), pending_copy_(slots_.size(), 0) {}

void SlotKvMemory::SetOverwriteHook(OverwriteHook hook) {
  hook_ = std::move(hook);
  for (int i = 0; i < num_slots(); ++i) {
    slots_[i]->set_overwrite_hook([this, i](int64_t first_row) {
      WaitSlotCopies(i);
      if (hook_) hook_(i, first_row);
    });
  }
}

void SlotKvMemory::WaitSlotCopies(int slot) {
  const uint64_t ticket = pending_copy_[slot];
  if (ticket == 0) return;
  pending_copy_[slot] = 0;
  absl::Status waited = slots_[slot]->memory()->WaitBackground(ticket);
  if (!waited.ok() && copy_error_.ok()) copy_error_ = waited;
}

absl::StatusOr<SlotState*> SlotKvMemory::CheckedSlot(int slot) {
  if (slot < 0 || slot >= num_slots()) {
    return absl::InvalidArgumentError(absl::StrCat("no slot ", slot));
  }
  return slots_[slot].get();
}

absl::Status SlotKvMemory::CheckRowsComponent(int component) const {
  if (component < 0 || component >= static_cast<int>(layout_.components.size()) ||
      layout_.components[component].kind != ComponentKind::kRows) {
    return absl::InvalidArgumentError(absl::StrCat("component ", component, " is not rows"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SlotKvMemory::CapturePrivateState(int slot, absl::Span<uint8_t> out) {
  ASSIGN_OR_RETURN(SlotState * s, CheckedSlot(slot));
  if (!s->runnable()) return absl::FailedPreconditionError("capture from a slot being restored");
  if (static_cast<int64_t>(out.size()) != layout_.private_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("private state is ", layout_.private_bytes(),
                                                   " bytes, buffer has ", out.size()));
  }
  size_t offset = 0;
  for (int c = 0; c < s->num_components(); ++c) {
    const StateComponent& comp = layout_.components[c];
    if (comp.kind != ComponentKind::kPrivate) continue;
    RETURN_IF_ERROR(s->memory()->Download(out.data() + offset, s->data(c), comp.bytes()));
    offset += comp.bytes();
  }
  return s->position();
}

absl::Status SlotKvMemory::LoadPrivateState(int slot, int64_t position,
                                            absl::Span<const uint8_t> in) {
  ASSIGN_OR_RETURN(SlotState * s, CheckedSlot(slot));
  if (s->runnable()) return absl::FailedPreconditionError("load private state outside a restore");
  if (static_cast<int64_t>(in.size()) != layout_.private_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("private state is ", layout_.private_bytes(), " bytes, got ", in.size()));
  }
  size_t offset = 0;
  for (int c = 0; c < s->num_components(); ++c) {
    const StateComponent& comp = layout_.components[c];
    if (comp.kind != ComponentKind::kPrivate) continue;
    RETURN_IF_ERROR(s->memory()->Upload(s->data(c), in.data() + offset, comp.bytes()));
    offset += comp.bytes();
    s->SetComponentPosition(c, position);
  }
  return absl::OkStatus();
}

absl::Status SlotKvMemory::CopyRowsOut(int slot, int component, int64_t first_row, int64_t count,
                                       absl::Span<uint8_t> out) {
  ASSIGN_OR_RETURN(const uint8_t* rows, RowsOut(slot, component, first_row, count, out));
  return slots_[slot]->memory()->Download(out.data(), rows, static_cast<int64_t>(out.size()));
}

absl::StatusOr<uint64_t> SlotKvMemory::CopyRowsOutBackground(int slot, int component,
                                                             int64_t first_row, int64_t count,
                                                             absl::Span<uint8_t> out) {
  ASSIGN_OR_RETURN(const uint8_t* rows, RowsOut(slot, component, first_row, count, out));
  ASSIGN_OR_RETURN(const uint64_t ticket, slots_[slot]->memory()->DownloadBackground(
                                              out.data(), rows, static_cast<int64_t>(out.size())));
  if (ticket != 0) pending_copy_[slot] = std::max(pending_copy_[slot], ticket);
  return ticket;
}

absl::StatusOr<bool> SlotKvMemory::BackgroundCopyDone(uint64_t ticket) {
  RETURN_IF_ERROR(copy_error_);
  if (ticket == 0) return true;
  // Every slot's buffers live in the same memory.
  return slots_[0]->memory()->BackgroundDone(ticket);
}

absl::Status SlotKvMemory::WaitBackgroundCopy(uint64_t ticket) {
  RETURN_IF_ERROR(copy_error_);
  if (ticket == 0) return absl::OkStatus();
  return slots_[0]->memory()->WaitBackground(ticket);
}

absl::StatusOr<const uint8_t*> SlotKvMemory::RowsOut(int slot, int component, int64_t first_row,
                                                     int64_t count, absl::Span<uint8_t> out) {
  ASSIGN_OR_RETURN(SlotState * s, CheckedSlot(slot));
  RETURN_IF_ERROR(CheckRowsComponent(component));
  const int64_t row_bytes = layout_.components[component].bytes();
  if (first_row < 0 || count < 0 || first_row + count > s->component_position(component)) {
    return absl::OutOfRangeError(absl::StrCat("rows [", first_row, ", ", first_row + count,
                                              ") not valid; component at ",
                                              s->component_position(component)));
  }
  if (static_cast<int64_t>(out.size()) != count * row_bytes) {
    return absl::InvalidArgumentError("row buffer size does not match the row count");
  }
  return reinterpret_cast<const uint8_t*>(s->data(component)) + first_row * row_bytes;
}

absl::Status SlotKvMemory::CopyRowsIn(int slot, int component, int64_t first_row,
                                      absl::Span<const uint8_t> in) {
  ASSIGN_OR_RETURN(SlotState * s, CheckedSlot(slot));
  RETURN_IF_ERROR(CheckRowsComponent(component));
  const int64_t row_bytes = layout_.components[component].bytes();
  if (static_cast<int64_t>(in.size()) % row_bytes != 0) {
    return absl::InvalidArgumentError("row bytes are not a whole number of rows");
  }
  const int64_t count = static_cast<int64_t>(in.size()) / row_bytes;
  if (first_row < 0 || first_row > s->component_position(component) ||
      first_row + count > s->max_rows()) {
    return absl::OutOfRangeError(absl::StrCat("rows [", first_row, ", ", first_row + count,
                                              ") cannot be written; component at ",
                                              s->component_position(component)));
  }
  if (s->runnable()) return absl::FailedPreconditionError("copy rows in outside a restore");
  s->BeforeRowsOverwritten(first_row);
  RETURN_IF_ERROR(
      s->memory()->Upload(reinterpret_cast<uint8_t*>(s->data(component)) + first_row * row_bytes,
                          in.data(), static_cast<int64_t>(in.size())));
  s->SetComponentPosition(component, first_row + count);
  return absl::OkStatus();
}

absl::Status SlotKvMemory::BeginRestore(int slot, int64_t keep_rows) {
  ASSIGN_OR_RETURN(SlotState * s, CheckedSlot(slot));
  if (keep_rows < 0 || keep_rows > 0) {
    for (int c = 0; c < s->num_components(); ++c) {
      if (layout_.components[c].kind != ComponentKind::kRows) continue;
      if (keep_rows < 0 || keep_rows > s->component_position(c)) {
        return absl::OutOfRangeError(absl::StrCat("cannot keep ", keep_rows, " rows of slot ", slot,
                                                  ": component ", c, " holds ",
                                                  s->component_position(c)));
      }
    }
  }
  s->BeginRestore(keep_rows);
  return absl::OkStatus();
}

absl::Status SlotKvMemory::Validate(int slot, int64_t position) {
  ASSIGN_OR_RETURN(SlotState * s, CheckedSlot(slot));
  return s->Validate(position);
}

absl::Status SlotKvMemory::Reset(int slot) {
  ASSIGN_OR_RETURN(SlotState * s, CheckedSlot(slot));
  return s->Reset();
}

}  // namespace cairn::infer
