#ifndef CAIRN_SERVICES_CACHE_ARENA_RESIDENCY_H_
#define CAIRN_SERVICES_CACHE_ARENA_RESIDENCY_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/cache/arena/arena.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

// An arena region holding bytes the core accounts for, with the checksum of its content.
struct HeldRegion {
  ArenaHandle region;  // As allocated (length rounded up to the alignment); bytes 0 = none.
  uint64_t bytes = 0;  // Logical length handed to clients.
  uint64_t checksum = 0;
  ArenaHandle handle() const { return ArenaHandle{region.incarnation, region.offset, bytes}; }
};

// A checkpoint's own bytes: its private state followed by its tail, in one region, so the disk
// tier writes them as one state file.
struct StateBytes {
  HeldRegion region;  // region.bytes = private_bytes + tail_bytes.
  uint64_t private_bytes = 0;
  uint64_t tail_bytes = 0;
  uint64_t private_checksum = 0;
  uint64_t tail_checksum = 0;
  ArenaHandle private_handle() const {
    return ArenaHandle{region.region.incarnation, region.region.offset, private_bytes};
  }
  ArenaHandle tail_handle() const {
    return ArenaHandle{region.region.incarnation, region.region.offset + private_bytes, tail_bytes};
  }
};

// Where the bytes of the checkpoints and chunks the core keeps in RAM live in the arena: one
// region per resident (or reserved) chunk and one per checkpoint's private state and tail.
// Allocation and freeing go through the arena's allocator; nothing else here touches bytes
// except Resolve and checksums the caller asks for.
//
// A restore lease that hands out regions recorded here holds them (Hold): a region dropped while
// held (its checkpoint quarantined under the lease) stays allocated, no longer recorded, until
// its last hold goes, so the arena never gives it to anyone else while a client may read it.
//
// Thread-compatible: the daemon calls it under its mutex (the allocator below has its own lock).
// Invariants: (1) every region recorded here is live in the allocator and recorded once;
// (2) a chunk or checkpoint entry is removed only together with freeing its region, or with
// setting it aside when held; (3) a region set aside is held, and is freed with its last hold.
class ArenaResidency {
 public:
  // `arena` must outlive this object.
  explicit ArenaResidency(Arena* arena) : arena_(arena) {}
  ArenaResidency(const ArenaResidency&) = delete;
  ArenaResidency& operator=(const ArenaResidency&) = delete;

  // A fresh region of `bytes` (none for 0). ResourceExhausted when the arena is full.
  absl::StatusOr<HeldRegion> Allocate(uint64_t bytes, RegionKind kind);
  // Frees `held` (no-op for an empty one) and clears it; a held region is set aside until its
  // last hold goes instead. A failure is our own bookkeeping bug: logged, and the region leaks
  // rather than being reused.
  void Free(HeldRegion* held);
  // The bytes of `held` in this process's mapping.
  absl::StatusOr<absl::Span<uint8_t>> Resolve(const HeldRegion& held) const;

  // --- Chunks.
  // Gives chunk `id` a region of `bytes` unless it has one. ResourceExhausted when full.
  absl::StatusOr<HeldRegion*> ReserveChunk(ChunkId id, uint64_t bytes);
  // The region of chunk `id`, or nullptr.
  HeldRegion* FindChunk(ChunkId id);
  const HeldRegion* FindChunk(ChunkId id) const;
  // Frees chunk `id`'s region (no-op when it has none).
  void DropChunk(ChunkId id);
  const absl::flat_hash_map<ChunkId, HeldRegion>& chunks() const { return chunks_; }

  // --- Checkpoints' own bytes.
  // Records `state` as checkpoint `id`'s (taking over its region; one already recorded for
  // `id` is freed first).
  void AdoptCheckpoint(CheckpointId id, StateBytes state);
  const StateBytes* FindCheckpoint(CheckpointId id) const;
  void DropCheckpoint(CheckpointId id);

  // --- Holds of restore leases on regions they hand out.
  // One more hold on `held` (no-op for an empty one).
  void Hold(const HeldRegion& held);
  // Drops one hold on `held`; frees the region if it was set aside and this was its last hold.
  void Unhold(const HeldRegion& held);
  // Regions dropped while held, not yet freed.
  size_t set_aside_count() const { return set_aside_.size(); }

  size_t chunk_count() const { return chunks_.size(); }
  size_t checkpoint_count() const { return checkpoints_.size(); }

 private:
  void FreeRegion(const ArenaHandle& region);

  Arena* const arena_;
  absl::flat_hash_map<ChunkId, HeldRegion> chunks_;
  absl::flat_hash_map<CheckpointId, StateBytes> checkpoints_;
  absl::flat_hash_map<uint64_t, int> holds_;              // By region offset: live holds.
  absl::flat_hash_map<uint64_t, ArenaHandle> set_aside_;  // By region offset: freed with hold.
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_ARENA_RESIDENCY_H_
