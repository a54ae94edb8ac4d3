// CheckpointCache: the disk tier's policy (recovery, persists, supersession, eviction for
// space) and introspection.

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status/check.h"
#include "common/status/status_macros.h"
#include "services/cache/core/checkpoint_cache.h"
#include "services/cache/core/checkpoint_cache_internal.h"

namespace cairn::cache {

using checkpoint_cache_internal::Contains;
using checkpoint_cache_internal::DigestTokens;

// ---------------------------------------------------------------------------------------------
// Disk tier.

void CheckpointCache::ReserveIdsAbove(ChunkId max_chunk, CheckpointId max_checkpoint) {
  next_chunk_ = std::max(next_chunk_, max_chunk + 1);
  next_checkpoint_ = std::max(next_checkpoint_, max_checkpoint + 1);
}

absl::Status CheckpointCache::AdmitRecovered(CheckpointId id, const Identities& identities,
                                             absl::Span<const TokenId> tokens,
                                             const std::vector<ChunkId>& chunks, CaptureKind kind,
                                             ComputationId provenance) {
  const ModelLayout* layout = LayoutFor(identities.compatibility);
  if (layout == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no layout registered for compatibility identity ", identities.compatibility));
  }
  if (id == 0 || checkpoints_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("checkpoint ", id, " is already known"));
  }
  const int64_t depth = static_cast<int64_t>(tokens.size());
  if (depth == 0 || static_cast<int64_t>(chunks.size()) != layout->FullChunks(depth)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", id, " at depth ", depth, " lists ", chunks.size(), " chunks"));
  }
  for (size_t j = 0; j < chunks.size(); ++j) {
    auto it = chunks_.find(chunks[j]);
    if (chunks[j] == 0 || (it != chunks_.end() && it->second->index != static_cast<int64_t>(j))) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", id, ": chunk ", chunks[j], " at the wrong index"));
    }
  }
  const int64_t own = layout->PrivateBytes() + layout->TailBytes(depth);
  int64_t needed = own;
  for (ChunkId c : chunks) {
    auto it = chunks_.find(c);
    if (it == chunks_.end() || it->second->disk_refs == 0) needed += layout->ChunkBytes();
  }
  if (needed > disk_.free()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("recovered checkpoint ", id, " does not fit the disk budget"));
  }
  Event e;
  e.type = EventType::kRecover;
  e.checkpoint = id;
  e.tier = Tier::kDisk;
  e.depth = depth;
  e.kind = kind;
  e.tokens_digest = DigestTokens(tokens);
  e.own_bytes = own;
  e.chunks = chunks;
  for (size_t j = 0; j < chunks.size(); ++j) {
    auto it = chunks_.find(chunks[j]);
    if (it == chunks_.end()) {
      auto chunk = std::make_unique<Chunk>();
      chunk->id = chunks[j];
      chunk->provenance = provenance;
      chunk->index = static_cast<int64_t>(j);
      chunk->bytes = layout->ChunkBytes();
      e.new_chunks.push_back({chunk->id, provenance, chunk->index, chunk->bytes});
      it = chunks_.emplace(chunk->id, std::move(chunk)).first;
    }
    Chunk& chunk = *it->second;
    if (chunk.disk_refs++ == 0) {
      ASSIGN_OR_RETURN(ByteLedger::ReservationId r, disk_.Reserve(chunk.bytes));
      RETURN_IF_ERROR(disk_.Commit(r));
    }
  }
  auto ckpt = std::make_unique<Checkpoint>();
  ckpt->id = id;
  ckpt->identities = identities;
  ckpt->depth = depth;
  ckpt->kind = kind;
  ckpt->private_bytes = layout->PrivateBytes();
  ckpt->tail_bytes = layout->TailBytes(depth);
  ckpt->tokens_digest = e.tokens_digest;
  ckpt->chunks = chunks;
  ckpt->on_disk = true;
  ckpt->last_use = clock_->Now();
  ASSIGN_OR_RETURN(ckpt->disk_reservation, disk_.Reserve(own));
  RETURN_IF_ERROR(disk_.Commit(ckpt->disk_reservation));
  ckpt->node =
      IndexFor(identities.compatibility).Insert(tokens, {IndexEntry::Kind::kCheckpoint, id});
  checkpoints_.emplace(id, std::move(ckpt));
  next_checkpoint_ = std::max(next_checkpoint_, id + 1);
  for (ChunkId c : chunks) next_chunk_ = std::max(next_chunk_, c + 1);
  Emit(std::move(e));
  return absl::OkStatus();
}

bool CheckpointCache::ShouldPersist(CheckpointId id) const {
  if (options_.disk_bytes <= 0) return false;
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end()) return false;
  const Checkpoint& ckpt = *it->second;
  if (!ckpt.in_ram || ckpt.on_disk || ckpt.persisting || ckpt.kind == CaptureKind::kGrid) {
    return false;
  }
  if (ckpt.kind == CaptureKind::kLearned) return true;
  return DiskNeighboursBefore(ckpt).empty();
}

std::vector<CheckpointId> CheckpointCache::DiskNeighboursBefore(const Checkpoint& ckpt) const {
  std::vector<CheckpointId> near;
  for (const RadixPrefixIndex::Hit& hit :
       RadixPrefixIndex::NearAncestors(ckpt.node, options_.retention.disk_spacing_tokens - 1)) {
    if (hit.entry.kind != IndexEntry::Kind::kCheckpoint) continue;
    const Checkpoint& other = *checkpoints_.at(hit.entry.id);
    if (other.on_disk || other.persisting) near.push_back(other.id);
  }
  return near;
}

std::vector<CheckpointId> CheckpointCache::WritesSkippedFor(
    const absl::flat_hash_set<CheckpointId>& on_disk) const {
  std::vector<CheckpointId> skipped;
  for (const auto& [id, ckpt] : checkpoints_) {
    // The prompt kinds ShouldPersist weighs against their neighbours, in RAM only.
    if (ckpt->pending || !ckpt->in_ram || ckpt->on_disk || ckpt->persisting ||
        ckpt->kind == CaptureKind::kGrid || ckpt->kind == CaptureKind::kLearned) {
      continue;
    }
    for (CheckpointId near : DiskNeighboursBefore(*ckpt)) {
      if (on_disk.contains(near)) {
        skipped.push_back(id);
        break;
      }
    }
  }
  return skipped;
}

absl::StatusOr<PersistTicket> CheckpointCache::BeginPersist(CheckpointId id) {
  if (options_.disk_bytes <= 0) return absl::FailedPreconditionError("no disk tier");
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || !it->second->in_ram || it->second->on_disk ||
      it->second->persisting) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", id, " is not a ram-only checkpoint"));
  }
  Checkpoint& ckpt = *it->second;
  auto needed = [&] { return ckpt.own_bytes() + ChunkBytesMissing(ckpt.chunks, false); };
  if (needed() > disk_.budget()) {
    Event e = MakeEvent(EventType::kReject, ckpt, "larger than the disk budget");
    e.tier = Tier::kDisk;
    Emit(std::move(e));
    return absl::ResourceExhaustedError(
        absl::StrCat("checkpoint ", id, " exceeds the disk budget"));
  }
  while (disk_.free() < needed()) {
    if (!EvictOne(/*ram_tier=*/false)) {
      return absl::ResourceExhaustedError("disk tier full of pinned checkpoints");
    }
  }
  PersistTicket ticket;
  ticket.id = id;
  ticket.own_bytes = ckpt.own_bytes();
  ASSIGN_OR_RETURN(ckpt.disk_reservation, disk_.Reserve(ckpt.own_bytes()));
  for (ChunkId c : ckpt.chunks) {
    Chunk& chunk = *chunks_.at(c);
    if (chunk.disk_refs++ == 0) {
      ASSIGN_OR_RETURN(ByteLedger::ReservationId r, disk_.Reserve(chunk.bytes));
      RETURN_IF_ERROR(disk_.Commit(r));
      ticket.new_chunks.push_back(c);
    } else if (chunk.rewrite) {
      // Its file was lost under the writes in flight that share it: they fail, so this one
      // writes it anew (its bytes are in the ledger already), and later ones share its copy.
      chunk.rewrite = false;
      chunk.rewriting = true;
      ticket.new_chunks.push_back(c);
    }
  }
  ckpt.persisting = true;
  return ticket;
}

absl::Status CheckpointCache::CommitPersist(CheckpointId id) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || !it->second->persisting) {
    return absl::NotFoundError(absl::StrCat("no pending persist of checkpoint ", id));
  }
  Checkpoint& ckpt = *it->second;
  RETURN_IF_ERROR(disk_.Commit(ckpt.disk_reservation));
  ckpt.persisting = false;
  ckpt.on_disk = true;
  // The disk tier's references were taken at BeginPersist; the event replays them.
  Event e = MakeEvent(EventType::kPersist, ckpt, "");
  e.tier = Tier::kDisk;
  e.bytes = ckpt.own_bytes();
  e.chunks = ckpt.chunks;
  Emit(std::move(e));
  EraseIfGone(id);
  return absl::OkStatus();
}

std::vector<CheckpointId> CheckpointCache::PersistsCoveredBy(CheckpointId id) const {
  std::vector<CheckpointId> covered;
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || it->second->node == nullptr) return covered;
  const Checkpoint& ckpt = *it->second;
  for (const RadixPrefixIndex::Hit& hit : RadixPrefixIndex::NearAncestors(ckpt.node, ckpt.depth)) {
    if (hit.entry.kind != IndexEntry::Kind::kCheckpoint || hit.entry.id == id) continue;
    const Checkpoint& other = *checkpoints_.at(hit.entry.id);
    if (other.persisting && other.kind != CaptureKind::kLearned && other.depth < ckpt.depth &&
        other.identities == ckpt.identities) {
      covered.push_back(other.id);
    }
  }
  std::sort(covered.begin(), covered.end());
  return covered;
}

absl::Status CheckpointCache::AbortPersist(CheckpointId id) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || !it->second->persisting) {
    return absl::NotFoundError(absl::StrCat("no pending persist of checkpoint ", id));
  }
  Checkpoint& ckpt = *it->second;
  RETURN_IF_ERROR(disk_.Rollback(ckpt.disk_reservation));
  ckpt.persisting = false;
  for (ChunkId c : ckpt.chunks) DropDiskRef(c);
  EraseIfGone(id);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Introspection.

absl::StatusOr<CheckpointInfo> CheckpointCache::GetCheckpoint(CheckpointId id) const {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || it->second->pending) {
    return absl::NotFoundError(absl::StrCat("no checkpoint ", id));
  }
  const Checkpoint& c = *it->second;
  CheckpointInfo info;
  info.id = c.id;
  info.compatibility = c.identities.compatibility;
  info.input = c.identities.input;
  info.conversation = c.conversation;
  info.depth = c.depth;
  info.kind = c.kind;
  info.in_ram = c.in_ram;
  info.on_disk = c.on_disk;
  info.private_bytes = c.private_bytes;
  info.tail_bytes = c.tail_bytes;
  info.chunks = c.chunks;
  info.pins = c.pins;
  return info;
}

absl::StatusOr<std::vector<TokenId>> CheckpointCache::CheckpointTokens(CheckpointId id) const {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || it->second->pending) {
    return absl::NotFoundError(absl::StrCat("no checkpoint ", id));
  }
  return indexes_.at(it->second->identities.compatibility)->TokensAt(it->second->node);
}

absl::StatusOr<ChunkInfo> CheckpointCache::GetChunk(ChunkId id) const {
  auto it = chunks_.find(id);
  if (it == chunks_.end()) return absl::NotFoundError(absl::StrCat("no chunk ", id));
  const Chunk& c = *it->second;
  ChunkInfo info;
  info.id = c.id;
  info.provenance = c.provenance;
  info.index = c.index;
  info.ram_refs = c.ram_refs;
  info.disk_refs = c.disk_refs;
  info.residency = c.residency;
  info.spill = c.spill;
  info.in_arena = c.residency == Residency::kResident;
  info.borrowed = c.ram_refs > 0 && c.residency != Residency::kResident;
  info.holders = c.holders;
  return info;
}

std::vector<CheckpointInfo> CheckpointCache::Checkpoints() const {
  std::vector<CheckpointInfo> out;
  for (const auto& [id, ckpt] : checkpoints_) {
    if (!ckpt->pending) out.push_back(*GetCheckpoint(id));
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.id < b.id; });
  return out;
}

Accounting CheckpointCache::RamAccounting() const { return TierAccounting(/*ram_tier=*/true); }

Accounting CheckpointCache::DiskAccounting() const { return TierAccounting(/*ram_tier=*/false); }

Accounting CheckpointCache::TierAccounting(bool ram_tier) const {
  Accounting a;
  for (const auto& [id, ckpt] : checkpoints_) {
    if (!(ram_tier ? ckpt->in_ram : ckpt->on_disk)) continue;
    ++a.checkpoints;
    a.private_bytes += ckpt->private_bytes;
    a.tail_bytes += ckpt->tail_bytes;
    a.full_copy_bytes += LayoutFor(ckpt->identities.compatibility)->FullCopyBytes(ckpt->depth);
  }
  for (const auto& [id, chunk] : chunks_) {
    if (ram_tier ? chunk->ram_refs > 0 && chunk->charged : chunk->disk_refs > 0) {
      a.chunk_bytes += chunk->bytes;
    }
  }
  const ByteLedger& ledger = ram_tier ? ram_ : disk_;
  a.used = ledger.used() + ledger.reserved();
  a.budget = ledger.budget();
  return a;
}

CacheStateSummary CheckpointCache::Summary() const {
  CacheStateSummary s;
  for (const auto& [id, ckpt] : checkpoints_) {
    if (ckpt->pending || (!ckpt->in_ram && !ckpt->on_disk)) continue;
    CacheStateSummary::CheckpointState& c = s.checkpoints[id];
    c.depth = ckpt->depth;
    c.in_ram = ckpt->in_ram;
    c.on_disk = ckpt->on_disk;
    c.tokens_digest = ckpt->tokens_digest;
    c.own_bytes = ckpt->own_bytes();
    c.chunks = ckpt->chunks;
  }
  for (const auto& [id, chunk] : chunks_) {
    if (chunk->ram_refs == 0 && chunk->disk_refs == 0) continue;
    s.chunks[id] = {chunk->provenance, chunk->bytes, chunk->ram_refs, chunk->disk_refs};
  }
  s.ram_used = ram_.used();
  s.disk_used = disk_.used();
  return s;
}

}  // namespace cairn::cache
