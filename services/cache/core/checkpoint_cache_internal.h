#ifndef CAIRN_SERVICES_CACHE_CORE_CHECKPOINT_CACHE_INTERNAL_H_
#define CAIRN_SERVICES_CACHE_CORE_CHECKPOINT_CACHE_INTERNAL_H_

// CheckpointCache's private records, shared by the files that implement it
// (checkpoint_cache.cc, checkpoint_cache_admission.cc, checkpoint_cache_disk.cc). Include
// only from those.

#include <algorithm>
#include <string>
#include <vector>

#include "common/checksum/checksum.h"
#include "services/cache/core/checkpoint_cache.h"

namespace cairn::cache {

struct CheckpointCache::Chunk {
  ChunkId id = 0;
  ComputationId provenance = 0;
  int64_t index = 0;
  int64_t bytes = 0;
  int64_t ram_refs = 0;   // RAM checkpoints (committed or pending) referencing it.
  int64_t disk_refs = 0;  // Disk checkpoints (committed or pending) referencing it.
  Residency residency = Residency::kNone;  // Of its RAM-tier bytes.
  uint64_t spill = 0;                      // While kSpilling: the spill writing it.
  bool charged = false;  // Its bytes are in the RAM ledger (RetentionOptions::charge_on_spill).
  // Its disk file was lost while writes sharing it were in flight (ForgetDiskChunk): they fail,
  // and the next write to begin writes it anew. Cleared then (`rewriting` is set until no
  // write references it, or it is lost again from disk), or when no write references it.
  bool rewrite = false;
  bool rewriting = false;
  std::vector<SlotKey> holders;
};

struct CheckpointCache::Checkpoint {
  CheckpointId id = 0;
  Identities identities;
  RadixPrefixIndex::Handle node = nullptr;  // Null while pending.
  int64_t depth = 0;
  CaptureKind kind = CaptureKind::kEnd;
  std::string conversation;
  int64_t stable_boundary = -1;
  int64_t private_bytes = 0;
  int64_t tail_bytes = 0;
  uint64_t tokens_digest = 0;
  std::vector<ChunkId> chunks;
  std::vector<NewChunk> new_chunks;     // Pending only: chunks this admission creates.
  std::vector<TokenId> pending_tokens;  // Pending only.
  ByteLedger::ReservationId ram_reservation = 0;
  ByteLedger::ReservationId disk_reservation = 0;
  bool pending = false;
  bool in_ram = false;
  bool on_disk = false;
  bool persisting = false;
  int pins = 0;
  absl::Time last_use;
  int64_t own_bytes() const { return private_bytes + tail_bytes; }
};

struct CheckpointCache::Slot {
  SlotKey key;
  Identities identities;
  std::vector<TokenId> tokens;
  std::vector<ChunkId> chunks;  // Ids of full chunks known so far (prefix of the rows).
  ComputationId computation = 0;
  uint64_t frontier_id = 0;
  RadixPrefixIndex::Handle node = nullptr;  // Live entry, when indexed.
  std::string conversation;
};

namespace checkpoint_cache_internal {

inline uint64_t DigestTokens(absl::Span<const TokenId> tokens) {
  return Xxh3(tokens.data(), tokens.size() * sizeof(TokenId));
}

template <typename T>
inline bool Contains(absl::Span<const T> list, const T& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace checkpoint_cache_internal

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CORE_CHECKPOINT_CACHE_INTERNAL_H_
