#include "services/infer/kernels/scratch_arena.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cairn::infer {

absl::StatusOr<void*> ScratchArena::TakeBytes(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("scratch of ", bytes, " bytes"));
  if (bytes == 0) return nullptr;
  const int64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (per_take_) {
    absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(memory_, rounded);
    if (!buffer.ok()) return buffer.status();
    blocks_.push_back({std::move(*buffer), rounded});
    current_ = blocks_.size() - 1;
    return blocks_.back().buffer.data();
  }
  while (current_ < blocks_.size()) {
    Block& b = blocks_[current_];
    if (b.used + rounded <= b.buffer.size()) {
      void* p = static_cast<char*>(b.buffer.data()) + b.used;
      b.used += rounded;
      return p;
    }
    if (current_ + 1 == blocks_.size()) break;
    blocks_[++current_].used = 0;
  }
  // A new block at least as large as all the others together, so a pass needs few of them.
  int64_t size = std::max({rounded, kMinBlockBytes, next_block_bytes_});
  for (const Block& b : blocks_) size = std::max(size, b.buffer.size() * 2);
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(memory_, size);
  if (!buffer.ok()) return buffer.status();
  blocks_.push_back({std::move(*buffer), rounded});
  current_ = blocks_.size() - 1;
  return blocks_.back().buffer.data();
}

ScratchArena::Mark ScratchArena::Top() const {
  Mark m;
  m.blocks = blocks_.size();
  m.current = current_;
  m.used = current_ < blocks_.size() ? blocks_[current_].used : 0;
  return m;
}

void ScratchArena::Release(const Mark& mark) {
  if (per_take_) {
    while (blocks_.size() > mark.blocks) blocks_.pop_back();
    current_ = blocks_.empty() ? 0 : blocks_.size() - 1;
    return;
  }
  current_ = mark.current;
  if (current_ < blocks_.size()) blocks_[current_].used = mark.used;
}

void ScratchArena::EndPass() {
  if (per_take_) {
    blocks_.clear();
    current_ = 0;
    return;
  }
  if (blocks_.size() > 1) {
    // Merged on the next Take. Freeing device memory waits for the device's queued work.
    next_block_bytes_ = 0;
    for (const Block& b : blocks_) next_block_bytes_ += b.buffer.size();
    blocks_.clear();
  }
  current_ = 0;
  if (!blocks_.empty()) blocks_[0].used = 0;
}

int64_t ScratchArena::held_bytes() const {
  if (per_take_) return 0;
  int64_t n = 0;
  for (const Block& b : blocks_) n += b.buffer.size();
  return n;
}

}  // namespace cairn::infer
