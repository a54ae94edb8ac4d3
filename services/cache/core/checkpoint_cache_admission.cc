// CheckpointCache: spills (the residency state machine's transitions), captures, removal
// and pins.

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
// Spills.

std::vector<uint64_t> CheckpointCache::TakeNewSpills() {
  std::vector<uint64_t> out;
  out.swap(new_spills_);
  // A spill that already ended (its slot dropped in the same call) is not sent.
  std::erase_if(out, [this](uint64_t id) { return !spills_.contains(id); });
  return out;
}

absl::StatusOr<SpillInfo> CheckpointCache::GetSpill(uint64_t spill) const {
  auto it = spills_.find(spill);
  if (it == spills_.end()) {
    return absl::NotFoundError(absl::StrCat("spill ", spill, " is not outstanding"));
  }
  return it->second;
}

absl::Status CheckpointCache::FinishSpill(uint64_t spill, absl::Span<const ChunkId> copied,
                                          absl::Span<const ChunkId> failed,
                                          const std::string& reason) {
  auto it = spills_.find(spill);
  if (it == spills_.end()) {
    return absl::NotFoundError(absl::StrCat("spill ", spill, " is not outstanding"));
  }
  auto in_spill = [&](ChunkId id) {
    return std::any_of(it->second.chunks.begin(), it->second.chunks.end(),
                       [id](const ChunkCopy& c) { return c.id == id; });
  };
  for (absl::Span<const ChunkId> list : {copied, failed}) {
    for (ChunkId id : list) {
      if (!in_spill(id)) {
        return absl::InvalidArgumentError(absl::StrCat("chunk ", id, " is not in spill ", spill));
      }
    }
  }
  const SpillInfo info = std::move(it->second);
  spills_.erase(it);
  // First every chunk leaves kSpilling, then the lost ones take their checkpoints with them
  // (which may drop references to the others).
  std::vector<ChunkId> lost;
  for (const ChunkCopy& c : info.chunks) {
    Chunk& chunk = *chunks_.at(c.id);
    CAIRN_CHECK(chunk.residency == Residency::kSpilling && chunk.spill == spill);
    chunk.spill = 0;
    const bool ok = Contains(copied, c.id) && !Contains(failed, c.id);
    const bool held =
        std::find(chunk.holders.begin(), chunk.holders.end(), info.slot) != chunk.holders.end();
    if (ok) {
      chunk.residency = Residency::kResident;
    } else if (!Contains(failed, c.id) && !info.urgent && held) {
      chunk.residency = Residency::kBorrowed;  // Declined: the slot still holds the rows.
    } else {
      // Not in the arena; FailChunk drops the references, which frees the region once.
      chunk.residency = Residency::kBorrowed;
      lost.push_back(c.id);
      continue;
    }
    MaybeLeaveRam(chunk);
    MaybeFreeChunk(c.id);
  }
  for (ChunkId id : lost) FailChunk(id, reason);
  if (listener_ != nullptr) {
    listener_->SpillFinished(
        spill, lost.empty(),
        lost.empty() ? "" : absl::StrCat(lost.size(), " chunks of spill ", spill, ": ", reason));
  }
  return absl::OkStatus();
}

void CheckpointCache::FailSpillsOf(uint64_t daemon_session, const std::string& reason) {
  std::vector<uint64_t> owed;
  for (const auto& [id, spill] : spills_) {
    if (spill.slot.daemon_session == daemon_session) owed.push_back(id);
  }
  std::sort(owed.begin(), owed.end());
  for (uint64_t id : owed) {
    std::vector<ChunkId> all;
    for (const ChunkCopy& c : spills_.at(id).chunks) all.push_back(c.id);
    CAIRN_CHECK(FinishSpill(id, {}, all, reason).ok());
  }
}

void CheckpointCache::FailChunk(ChunkId id, const std::string& reason) {
  if (!chunks_.contains(id)) return;
  std::vector<CheckpointId> hit;
  for (const auto& [cid, ckpt] : checkpoints_) {
    if (std::find(ckpt->chunks.begin(), ckpt->chunks.end(), id) != ckpt->chunks.end()) {
      hit.push_back(cid);
    }
  }
  std::sort(hit.begin(), hit.end());
  for (CheckpointId cid : hit) {
    auto it = checkpoints_.find(cid);
    if (it == checkpoints_.end()) continue;
    if (it->second->pending) {
      AbortCapture(cid, reason).IgnoreError();  // Pending: always found.
    } else {
      Quarantine(*it->second, reason);
    }
  }
  auto it = chunks_.find(id);
  if (it == chunks_.end()) return;
  MaybeLeaveRam(*it->second);
  MaybeFreeChunk(id);
}

// ---------------------------------------------------------------------------------------------
// Captures.

int64_t CheckpointCache::ChunksToMint(SlotKey key) const {
  auto it = slots_.find(key);
  if (it == slots_.end()) return 0;
  const Slot& slot = *it->second;
  const ModelLayout* layout = LayoutFor(slot.identities.compatibility);
  if (layout == nullptr) return 0;
  const int64_t full = layout->FullChunks(static_cast<int64_t>(slot.tokens.size()));
  return std::max<int64_t>(0, full - static_cast<int64_t>(slot.chunks.size()));
}

absl::StatusOr<CaptureTicket> CheckpointCache::BeginCapture(SlotKey key, CaptureKind kind,
                                                            const std::string& conversation,
                                                            int64_t stable_boundary) {
  Slot* slot = FindSlot(key);
  if (slot == nullptr) return absl::NotFoundError(absl::StrCat("no slot ", key.slot));
  if (slot->tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("slot ", key.slot, " holds no tokens"));
  }
  const ModelLayout& layout = *LayoutFor(slot->identities.compatibility);
  const int64_t depth = static_cast<int64_t>(slot->tokens.size());
  RadixPrefixIndex& index = IndexFor(slot->identities.compatibility);
  for (const RadixPrefixIndex::Hit& hit : index.Lookup(slot->tokens).hits) {
    if (hit.depth != depth || hit.entry.kind != IndexEntry::Kind::kCheckpoint) continue;
    if (checkpoints_.at(hit.entry.id)->identities.input == slot->identities.input) {
      return absl::AlreadyExistsError(
          absl::StrCat("checkpoint ", hit.entry.id, " already holds these ", depth, " tokens"));
    }
  }

  if (next_checkpoint_ > checkpoint_id_limit_) {
    return absl::UnavailableError(absl::StrCat("checkpoint ids up to ", checkpoint_id_limit_,
                                               " are used up; none above is reserved yet"));
  }
  if (const int64_t to_mint = ChunksToMint(key);
      to_mint > 0 && next_chunk_ - 1 + static_cast<ChunkId>(to_mint) > chunk_id_limit_) {
    return absl::UnavailableError(absl::StrCat("chunk ids up to ", chunk_id_limit_,
                                               " are used up; ", to_mint, " more are needed"));
  }
  auto ckpt = std::make_unique<Checkpoint>();
  ckpt->id = next_checkpoint_++;
  ckpt->identities = slot->identities;
  ckpt->depth = depth;
  ckpt->kind = kind;
  ckpt->conversation = conversation;
  ckpt->stable_boundary = stable_boundary;
  ckpt->private_bytes = layout.PrivateBytes();
  ckpt->tail_bytes = layout.TailBytes(depth);
  ckpt->tokens_digest = DigestTokens(slot->tokens);
  ckpt->last_use = clock_->Now();
  // Rows the slot computed itself become new chunks of its computation.
  const int64_t full = layout.FullChunks(depth);
  for (int64_t j = static_cast<int64_t>(slot->chunks.size()); j < full; ++j) {
    slot->chunks.push_back(MintChunk(slot->computation, j, layout.ChunkBytes(), key));
  }
  ckpt->chunks.assign(slot->chunks.begin(), slot->chunks.begin() + full);

  auto needed = [&] { return ckpt->own_bytes() + ChunkBytesMissing(ckpt->chunks, true); };
  auto reject = [&](std::string reason) {
    Event e = MakeEvent(EventType::kReject, *ckpt, reason);
    e.bytes = needed();
    Emit(std::move(e));
    return absl::ResourceExhaustedError(absl::StrCat("capture at ", depth, " rejected: ", reason));
  };
  int64_t spilled_bytes = ckpt->own_bytes();  // Once every row it needs is in the arena.
  for (ChunkId id : ckpt->chunks) spilled_bytes += chunks_.at(id)->bytes;
  if (needed() > ram_.budget() ||
      (options_.retention.charge_on_spill && spilled_bytes > ram_.budget())) {
    for (ChunkId id : ckpt->chunks) MaybeFreeChunk(id);
    return reject("larger than the ram budget");
  }
  const int64_t cap = retention_.CheckpointCap(ram_.budget(), layout.PrivateBytes());
  RankInput own;
  own.kind = kind;
  own.depth = depth;
  own.stable_boundary = stable_boundary;
  own.private_bytes = ckpt->private_bytes;
  own.row_bytes_per_token = layout.RowBytes();
  const EvictionRank admit = retention_.AdmissionRank(own);
  while (ram_.free() < needed() || ram_checkpoints_ >= cap) {
    if (!EvictOne(/*ram_tier=*/true, admit)) {
      return reject(admit == EvictionRank::kReused
                        ? std::string("nothing left to evict")
                        : absl::StrCat("nothing ranked ", EvictionRankName(admit),
                                       " or below left to evict"));
    }
  }

  CaptureTicket ticket;
  ticket.id = ckpt->id;
  ticket.depth = depth;
  ticket.own_bytes = ckpt->own_bytes();
  ticket.chunks = ckpt->chunks;
  ASSIGN_OR_RETURN(ckpt->ram_reservation, ram_.Reserve(ckpt->own_bytes()));
  for (ChunkId id : ckpt->chunks) {
    Chunk& chunk = *chunks_.at(id);
    if (chunk.ram_refs == 0 && chunk.disk_refs == 0) {
      ckpt->new_chunks.push_back({id, chunk.provenance, chunk.index, chunk.bytes});
    }
    AddRamRef(chunk);
    // Borrowed rows charged now get their space now; charge_on_spill defers the others'.
    if (chunk.residency != Residency::kResident && chunk.charged) {
      ticket.borrowed.push_back(
          {id, key, chunk.index * layout.chunk_rows, (chunk.index + 1) * layout.chunk_rows});
    }
  }
  ckpt->pending = true;
  ckpt->pending_tokens = slot->tokens;
  ++ram_checkpoints_;
  checkpoints_.emplace(ckpt->id, std::move(ckpt));
  return ticket;
}

absl::StatusOr<CheckpointId> CheckpointCache::CommitCapture(CheckpointId id) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || !it->second->pending) {
    return absl::NotFoundError(absl::StrCat("no pending capture ", id));
  }
  Checkpoint& ckpt = *it->second;
  RETURN_IF_ERROR(ram_.Commit(ckpt.ram_reservation));
  ckpt.pending = false;
  ckpt.in_ram = true;
  ckpt.node = IndexFor(ckpt.identities.compatibility)
                  .Insert(ckpt.pending_tokens, {IndexEntry::Kind::kCheckpoint, id});
  ckpt.pending_tokens = {};
  int64_t charged = ckpt.own_bytes();
  for (const NewChunk& c : ckpt.new_chunks) charged += c.bytes;
  admitted_bytes_ += charged;
  Touch(ckpt.conversation);
  Event e = MakeEvent(EventType::kAdmit, ckpt, "");
  e.tier = Tier::kRam;
  e.bytes = charged;
  e.chunks = ckpt.chunks;
  for (ChunkId c : ckpt.chunks) {
    if (!chunks_.at(c)->charged) e.uncharged_chunks.push_back(c);
  }
  e.new_chunks = std::move(ckpt.new_chunks);
  ckpt.new_chunks = {};
  Emit(std::move(e));
  return id;
}

absl::Status CheckpointCache::AbortCapture(CheckpointId id, const std::string& reason) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || !it->second->pending) {
    return absl::NotFoundError(absl::StrCat("no pending capture ", id));
  }
  Checkpoint& ckpt = *it->second;
  RETURN_IF_ERROR(ram_.Rollback(ckpt.ram_reservation));
  for (ChunkId c : ckpt.chunks) DropRamRef(c);
  --ram_checkpoints_;
  Event e = MakeEvent(EventType::kReject, ckpt, absl::StrCat("aborted: ", reason));
  Emit(std::move(e));
  checkpoints_.erase(it);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Removal and pins.

absl::Status CheckpointCache::Evict(CheckpointId id, const std::string& reason) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || !it->second->in_ram) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", id, " not in the ram tier"));
  }
  if (it->second->pins > 0) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", id, " is pinned"));
  }
  EvictFromRam(*it->second, reason);
  return absl::OkStatus();
}

int64_t CheckpointCache::EvictDiskBytes(int64_t bytes, const std::string& why) {
  const int64_t start = disk_.used();
  while (start - disk_.used() < bytes) {
    if (!EvictOne(/*ram_tier=*/false, EvictionRank::kReused, why)) break;
  }
  return start - disk_.used();
}

absl::Status CheckpointCache::EvictDisk(CheckpointId id, const std::string& reason) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || !it->second->on_disk) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", id, " not in the disk tier"));
  }
  if (it->second->pins > 0) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", id, " is pinned"));
  }
  EvictFromDisk(*it->second, reason);
  return absl::OkStatus();
}

absl::Status CheckpointCache::QuarantineChunk(ChunkId chunk, const std::string& reason) {
  if (!chunks_.contains(chunk)) return absl::NotFoundError(absl::StrCat("no chunk ", chunk));
  std::vector<CheckpointId> hit;
  for (const auto& [id, ckpt] : checkpoints_) {
    if (ckpt->pending) continue;
    if (std::find(ckpt->chunks.begin(), ckpt->chunks.end(), chunk) != ckpt->chunks.end()) {
      hit.push_back(id);
    }
  }
  std::sort(hit.begin(), hit.end());
  for (CheckpointId id : hit) Quarantine(*checkpoints_.at(id), reason);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CheckpointId>> CheckpointCache::ForgetDiskChunk(
    ChunkId chunk, const std::string& reason) {
  if (!chunks_.contains(chunk)) return absl::NotFoundError(absl::StrCat("no chunk ", chunk));
  // Only disk copies list the lost file. A write in flight is not one yet: the disk tier
  // refuses it if it shares the lost file, and the caller writes it again.
  std::vector<CheckpointId> hit;
  for (const auto& [id, ckpt] : checkpoints_) {
    if (ckpt->on_disk && Contains<ChunkId>(ckpt->chunks, chunk)) hit.push_back(id);
  }
  std::sort(hit.begin(), hit.end());
  std::vector<CheckpointId> offer = DropDiskCopies(hit, reason);
  // Writes in flight that still reference it share the lost file, unless one writes it anew
  // already (this loss was reported before, with no disk copy left to list it). Each would
  // count it as on disk when written again: the first to begin writes it anew instead.
  auto it = chunks_.find(chunk);
  if (it != chunks_.end() && it->second->disk_refs > 0 &&
      (!hit.empty() || !it->second->rewriting)) {
    it->second->rewrite = true;
    it->second->rewriting = false;
  }
  return offer;
}

absl::StatusOr<std::vector<CheckpointId>> CheckpointCache::ForgetDiskCopy(
    CheckpointId id, const std::string& reason) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || it->second->pending) {
    return absl::NotFoundError(absl::StrCat("no checkpoint ", id));
  }
  if (!it->second->on_disk) return std::vector<CheckpointId>{};
  return DropDiskCopies({id}, reason);
}

std::vector<CheckpointId> CheckpointCache::DropDiskCopies(const std::vector<CheckpointId>& ids,
                                                          const std::string& reason) {
  if (ids.empty()) return {};
  // Asked before the copies go, while ShouldPersist still sees them on disk.
  std::vector<CheckpointId> offer =
      WritesSkippedFor(absl::flat_hash_set<CheckpointId>(ids.begin(), ids.end()));
  for (CheckpointId id : ids) {
    Checkpoint& ckpt = *checkpoints_.at(id);
    CAIRN_CHECK(ckpt.on_disk);
    if (!ckpt.in_ram) {
      Quarantine(ckpt, reason);  // Its bytes are nowhere else.
      continue;
    }
    // Its RAM bytes are its own and were verified when they entered the arena: it stays, as a
    // RAM-only checkpoint. The event's tier says only the disk copy went.
    offer.push_back(id);
    Event e = MakeEvent(EventType::kQuarantine, ckpt, reason);
    e.tier = Tier::kDisk;
    ReleaseDiskTier(ckpt);
    Emit(std::move(e));
    if (listener_ != nullptr) listener_->CheckpointLeftDisk(id);
  }
  std::sort(offer.begin(), offer.end());
  offer.erase(std::unique(offer.begin(), offer.end()), offer.end());
  return offer;
}

absl::Status CheckpointCache::Pin(CheckpointId id) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end()) return absl::NotFoundError(absl::StrCat("no checkpoint ", id));
  ++it->second->pins;
  return absl::OkStatus();
}

absl::Status CheckpointCache::Unpin(CheckpointId id) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || it->second->pins == 0) {
    return absl::NotFoundError(absl::StrCat("no pinned checkpoint ", id));
  }
  --it->second->pins;
  return absl::OkStatus();
}

}  // namespace cairn::cache
