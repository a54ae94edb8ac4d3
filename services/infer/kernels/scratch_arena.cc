#include "services/infer/kernels/scratch_arena.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cairn::infer {

absl::StatusOr<void*> ScratchArena::TakeBytes(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("scratch of ", bytes, " bytes"));
  if (bytes == 0) return nullptr;
  const int64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = nullptr;
  while (p == nullptr && current_ < blocks_.size()) {
    Block& b = blocks_[current_];
    if (b.used + rounded <= b.buffer.size()) {
      p = static_cast<char*>(b.buffer.data()) + b.used;
      b.used += rounded;
    } else if (current_ + 1 == blocks_.size()) {
      break;
    } else {
      blocks_[++current_].used = 0;
    }
  }
  if (p == nullptr) {
    // A new block at least as large as all the others together, so a pass needs few of them.
    int64_t size = std::max({rounded, kMinBlockBytes, next_block_bytes_});
    for (const Block& b : blocks_) size = std::max(size, b.buffer.size() * 2);
    absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::AllocateUninitialized(memory_, size);
    if (!buffer.ok()) return buffer.status();
    blocks_.push_back({std::move(*buffer), rounded});
    current_ = blocks_.size() - 1;
    p = blocks_.back().buffer.data();
  }
  pass_peak_ = std::max(pass_peak_, InUse());
#ifndef NDEBUG
  if (host_visible_) std::memset(p, 0xff, static_cast<size_t>(rounded));
#endif
  return p;
}

int64_t ScratchArena::InUse() const {
  int64_t n = 0;
  for (size_t i = 0; i < blocks_.size() && i <= current_; ++i) {
    n += i < current_ ? blocks_[i].buffer.size() : blocks_[i].used;
  }
  return n;
}

ScratchArena::Mark ScratchArena::Top() const {
  Mark m;
  m.blocks = blocks_.size();
  m.current = current_;
  m.used = current_ < blocks_.size() ? blocks_[current_].used : 0;
  return m;
}

void ScratchArena::Release(const Mark& mark) {
  current_ = mark.current;
  if (current_ < blocks_.size()) blocks_[current_].used = mark.used;
}

void ScratchArena::EndPass() {
  const int64_t peak = pass_peak_;
  pass_peak_ = 0;
  current_ = 0;
  if (blocks_.size() > 1) {
    // Merged on the next Take. Freeing device memory waits for the device's queued work.
    next_block_bytes_ = 0;
    for (const Block& b : blocks_) next_block_bytes_ += b.buffer.size();
    blocks_.clear();
    small_passes_ = 0;
    return;
  }
  if (blocks_.empty()) return;
  blocks_[0].used = 0;
  if (!host_visible_ || blocks_[0].buffer.size() <= kMinBlockBytes) return;
  if (peak * 4 >= blocks_[0].buffer.size()) {
    small_passes_ = 0;
  } else if (++small_passes_ >= kTrimAfterPasses) {
    next_block_bytes_ = peak;
    blocks_.clear();
    small_passes_ = 0;
  }
}

int64_t ScratchArena::held_bytes() const {
  int64_t n = 0;
  for (const Block& b : blocks_) n += b.buffer.size();
  return n;
}

}  // namespace cairn::infer
