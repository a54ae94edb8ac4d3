#include "services/infer/cache_client/arena_pins.h"

#include <algorithm>

#include "common/log/log.h"

namespace cairn::infer {
namespace {

enum : uint8_t { kUntried = 0, kRegistered = 1, kRefused = 2 };

}  // namespace

ArenaPins::ArenaPins(DeviceMemory* memory, uint8_t* base, uint64_t size, uint64_t first_step,
                     uint64_t step)
    : memory_(memory != nullptr && !memory->host_visible() ? memory : nullptr),
      base_(base),
      size_(size),
      first_step_(first_step == 0 || first_step > size ? size : first_step),
      step_(step == 0 ? size : step) {
  if (memory_ == nullptr || size_ == 0) return;
  const int steps =
      size_ <= first_step_ ? 1 : 1 + static_cast<int>((size_ - first_step_ + step_ - 1) / step_);
  MutexLock lock(&mu_);
  state_.assign(static_cast<size_t>(steps), kUntried);
  Register(0);  // The first step before serving.
}

ArenaPins::~ArenaPins() {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i] != kRegistered) continue;
    uint64_t begin = 0;
    uint64_t end = 0;
    StepRange(static_cast<int>(i), &begin, &end);
    absl::Status st = memory_->UnregisterHost(base_ + begin);
    if (!st.ok()) CAIRN_LOG(WARNING) << "unpinning arena bytes at " << begin << ": " << st;
  }
}

int ArenaPins::StepOf(uint64_t offset) const {
  if (offset < first_step_) return 0;
  return 1 + static_cast<int>((offset - first_step_) / step_);
}

void ArenaPins::StepRange(int step, uint64_t* begin, uint64_t* end) const {
  *begin = step == 0 ? 0 : first_step_ + static_cast<uint64_t>(step - 1) * step_;
  *end = std::min(size_, step == 0 ? first_step_ : *begin + step_);
}

void ArenaPins::Register(int step) {
  uint64_t begin = 0;
  uint64_t end = 0;
  StepRange(step, &begin, &end);
  absl::Status st = memory_->RegisterHost(base_ + begin, static_cast<int64_t>(end - begin));
  state_[static_cast<size_t>(step)] = st.ok() ? kRegistered : kRefused;
  if (!st.ok()) {
    CAIRN_LOG(WARNING) << "pinning arena bytes [" << begin << ", " << end
                       << ") failed, copies there stay pageable: " << st;
  }
}

void ArenaPins::EnsurePinned(uint64_t offset, uint64_t length) {
  if (memory_ == nullptr || length == 0 || offset >= size_) return;
  const int first = StepOf(offset);
  const int last = StepOf(std::min(size_, offset + length) - 1);
  MutexLock lock(&mu_);
  for (int s = first; s <= last && s < static_cast<int>(state_.size()); ++s) {
    if (state_[static_cast<size_t>(s)] == kUntried) Register(s);
  }
}

int ArenaPins::registered_steps() const {
  MutexLock lock(&mu_);
  return static_cast<int>(std::count(state_.begin(), state_.end(), kRegistered));
}

}  // namespace cairn::infer
