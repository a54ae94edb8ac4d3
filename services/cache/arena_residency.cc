#include "services/cache/arena_residency.h"

#include <utility>

#include "common/log/log.h"
#include "common/status/status_macros.h"

namespace cairn::cache {

absl::StatusOr<HeldRegion> ArenaResidency::Allocate(uint64_t bytes, RegionKind kind) {
  HeldRegion held;
  if (bytes == 0) return held;
  ASSIGN_OR_RETURN(Region region, arena_->allocator().Allocate(bytes, kind));
  held.region = region.handle;
  held.bytes = bytes;
  return held;
}

void ArenaResidency::Free(HeldRegion* held) {
  if (held->bytes == 0) return;
  if (holds_.contains(held->region.offset)) {
    set_aside_.emplace(held->region.offset, held->region);
  } else {
    FreeRegion(held->region);
  }
  *held = HeldRegion{};
}

void ArenaResidency::FreeRegion(const ArenaHandle& region) {
  absl::Status s = arena_->allocator().Free(region);
  if (!s.ok()) CAIRN_LOG(ERROR) << "freeing arena region at " << region.offset << ": " << s;
}

void ArenaResidency::Hold(const HeldRegion& held) {
  if (held.bytes == 0) return;
  ++holds_[held.region.offset];
}

void ArenaResidency::Unhold(const HeldRegion& held) {
  if (held.bytes == 0) return;
  auto it = holds_.find(held.region.offset);
  if (it == holds_.end()) return;
  if (--it->second > 0) return;
  holds_.erase(it);
  auto aside = set_aside_.find(held.region.offset);
  if (aside == set_aside_.end()) return;
  FreeRegion(aside->second);
  set_aside_.erase(aside);
}

absl::StatusOr<absl::Span<uint8_t>> ArenaResidency::Resolve(const HeldRegion& held) const {
  return arena_->Resolve(held.handle());
}

absl::StatusOr<HeldRegion*> ArenaResidency::ReserveChunk(ChunkId id, uint64_t bytes) {
  auto it = chunks_.find(id);
  if (it != chunks_.end() && it->second.bytes != 0) return &it->second;
  ASSIGN_OR_RETURN(HeldRegion held, Allocate(bytes, RegionKind::kChunk));
  HeldRegion& slot = chunks_[id];
  slot = held;
  return &slot;
}

HeldRegion* ArenaResidency::FindChunk(ChunkId id) {
  auto it = chunks_.find(id);
  return it == chunks_.end() ? nullptr : &it->second;
}

const HeldRegion* ArenaResidency::FindChunk(ChunkId id) const {
  auto it = chunks_.find(id);
  return it == chunks_.end() ? nullptr : &it->second;
}

void ArenaResidency::DropChunk(ChunkId id) {
  auto it = chunks_.find(id);
  if (it == chunks_.end()) return;
  Free(&it->second);
  chunks_.erase(it);
}

void ArenaResidency::AdoptCheckpoint(CheckpointId id, StateBytes state) {
  DropCheckpoint(id);
  checkpoints_.emplace(id, std::move(state));
}

const StateBytes* ArenaResidency::FindCheckpoint(CheckpointId id) const {
  auto it = checkpoints_.find(id);
  return it == checkpoints_.end() ? nullptr : &it->second;
}

void ArenaResidency::DropCheckpoint(CheckpointId id) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end()) return;
  Free(&it->second.region);
  checkpoints_.erase(it);
}

}  // namespace cairn::cache
