#include "services/cache/core/checkpoint_cache.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status/check.h"
#include "common/status/status_macros.h"
#include "services/cache/core/checkpoint_cache_internal.h"

namespace cairn::cache {

using checkpoint_cache_internal::Contains;
using checkpoint_cache_internal::DigestTokens;

absl::string_view ResidencyName(Residency residency) {
  switch (residency) {
    case Residency::kNone:
      return "none";
    case Residency::kBorrowed:
      return "borrowed";
    case Residency::kSpilling:
      return "spilling";
    case Residency::kResident:
      return "resident";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<CheckpointCache>> CheckpointCache::Create(CacheOptions options,
                                                                         const Clock* clock) {
  if (options.ram_bytes < 0 || options.disk_bytes < 0) {
    return absl::InvalidArgumentError("cache budgets must be non-negative");
  }
  if (options.retention.max_checkpoints < 0) {
    return absl::InvalidArgumentError("max_checkpoints must be at least 0 (0: automatic)");
  }
  if (options.planner.grid_step < 1 || options.planner.max_pass_tokens < 1) {
    return absl::InvalidArgumentError("grid step and pass size must be positive");
  }
  if (clock == nullptr) return absl::InvalidArgumentError("no clock");
  return std::unique_ptr<CheckpointCache>(new CheckpointCache(std::move(options), clock));
}

CheckpointCache::CheckpointCache(CacheOptions options, const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      planner_(options_.planner),
      retention_(options_.retention),
      ram_(options_.ram_bytes),
      disk_(options_.disk_bytes),
      events_(options_.event_ring_capacity) {}

CheckpointCache::~CheckpointCache() = default;

absl::Status CheckpointCache::RegisterLayout(const std::string& compatibility,
                                             const ModelLayout& layout) {
  RETURN_IF_ERROR(layout.Validate());
  auto it = layouts_.find(compatibility);
  if (it != layouts_.end()) {
    const ModelLayout& old = it->second;
    if (old.chunk_rows != layout.chunk_rows || old.RowBytes() != layout.RowBytes() ||
        old.PrivateBytes() != layout.PrivateBytes()) {
      return absl::AlreadyExistsError(absl::StrCat("compatibility identity ", compatibility,
                                                   " already has a different layout"));
    }
    return absl::OkStatus();
  }
  layouts_.emplace(compatibility, layout);
  return absl::OkStatus();
}

const ModelLayout* CheckpointCache::LayoutFor(const std::string& compatibility) const {
  auto it = layouts_.find(compatibility);
  return it == layouts_.end() ? nullptr : &it->second;
}

RadixPrefixIndex& CheckpointCache::IndexFor(const std::string& compatibility) {
  std::unique_ptr<RadixPrefixIndex>& index = indexes_[compatibility];
  if (index == nullptr) index = std::make_unique<RadixPrefixIndex>();
  return *index;
}

RadixPrefixIndex::Export CheckpointCache::CheckpointTree(const std::string& compatibility,
                                                         size_t max_nodes) const {
  auto it = indexes_.find(compatibility);
  if (it == indexes_.end()) return {};
  return it->second->ExportTree(
      [this](const IndexEntry& e) {
        if (e.kind != IndexEntry::Kind::kCheckpoint) return false;
        auto c = checkpoints_.find(e.id);
        return c != checkpoints_.end() && !c->second->pending;
      },
      max_nodes);
}

bool CheckpointCache::InRam(CheckpointId id) const {
  auto it = checkpoints_.find(id);
  return it != checkpoints_.end() && it->second->in_ram;
}

bool CheckpointCache::Persisting(CheckpointId id) const {
  auto it = checkpoints_.find(id);
  return it != checkpoints_.end() && it->second->persisting;
}

void CheckpointCache::Touch(const std::string& conversation) {
  if (conversation.empty()) return;
  Conversation& c = conversations_[conversation];
  c.last_use = clock_->Now();
  c.last_use_mark = admitted_bytes_;
}

void CheckpointCache::StartRequest(const std::string& conversation) {
  if (conversation.empty()) return;
  Conversation& c = conversations_[conversation];
  const absl::Time now = clock_->Now();
  if (c.last_request != absl::Time()) {
    const absl::Duration gap = std::max(absl::ZeroDuration(), now - c.last_request);
    c.gap_sum += gap;
    ++c.gaps;
    gap_sum_ += gap;
    ++gaps_;
  }
  c.last_request = now;
  Touch(conversation);
}

bool CheckpointCache::Overdue(const std::string& conversation) const {
  const double factor = options_.retention.overdue_gaps;
  if (factor <= 0) return false;
  auto it = conversations_.find(conversation);
  if (it == conversations_.end()) return false;
  const Conversation& c = it->second;
  const absl::Duration sum = c.gaps > 0 ? c.gap_sum : gap_sum_;
  const int64_t count = c.gaps > 0 ? c.gaps : gaps_;
  // No gap yet, or only gaps of zero (requests that all arrived at once): no rhythm to be
  // late for.
  if (count == 0 || sum <= absl::ZeroDuration()) return false;
  return clock_->Now() - c.last_use > factor * (sum / count);
}

bool CheckpointCache::Idle(const std::string& conversation) const {
  auto it = conversations_.find(conversation);
  if (it == conversations_.end()) return true;
  return admitted_bytes_ - it->second.last_use_mark >= ram_.budget();
}

void CheckpointCache::Emit(Event event) {
  event.time = clock_->Now();
  event.ram_used = ram_.used() + ram_.reserved();
  event.disk_used = disk_.used() + disk_.reserved();
  events_.Log(std::move(event));
}

Event CheckpointCache::MakeEvent(EventType type, const Checkpoint& ckpt, std::string reason) const {
  Event e;
  e.type = type;
  e.checkpoint = ckpt.id;
  e.reason = std::move(reason);
  e.conversation = ckpt.conversation;
  e.depth = ckpt.depth;
  e.kind = ckpt.kind;
  e.tokens_digest = ckpt.tokens_digest;
  e.own_bytes = ckpt.own_bytes();
  return e;
}

// ---------------------------------------------------------------------------------------------
// Lookup.

absl::StatusOr<LookupResult> CheckpointCache::Lookup(const LookupRequest& request) const {
  const ModelLayout* layout = LayoutFor(request.identities.compatibility);
  if (layout == nullptr) {
    return absl::NotFoundError(absl::StrCat("no layout registered for compatibility identity ",
                                            request.identities.compatibility));
  }
  LookupResult result;
  std::vector<Candidate> all;
  std::vector<int64_t> existing;
  auto index_it = indexes_.find(request.identities.compatibility);
  if (index_it != indexes_.end()) {
    RadixPrefixIndex::Walk walk = index_it->second->Lookup(request.tokens);
    result.shared_prefix = walk.shared_prefix;
    for (const RadixPrefixIndex::Hit& hit : walk.hits) {
      Candidate c;
      c.depth = hit.depth;
      if (hit.entry.kind == IndexEntry::Kind::kLive) {
        auto slot_it = frontier_slots_.find(hit.entry.id);
        if (slot_it == frontier_slots_.end()) continue;
        const Slot& slot = *slots_.at(slot_it->second);
        if (slot.identities.input != request.identities.input ||
            slot.key.daemon_session != request.daemon_session) {
          continue;
        }
        c.tier = Tier::kLive;
        c.slot = slot.key;
      } else {
        const Checkpoint& ckpt = *checkpoints_.at(hit.entry.id);
        if (ckpt.identities.input != request.identities.input) continue;
        c.tier = ckpt.in_ram ? Tier::kRam : Tier::kDisk;
        c.checkpoint = ckpt.id;
        existing.push_back(ckpt.depth);
      }
      all.push_back(c);
    }
  }
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return a.depth != b.depth ? a.depth > b.depth : a.tier < b.tier;
  });
  if (!all.empty()) {
    result.best = all.front();
    result.others.assign(all.begin() + 1, all.end());
  }
  PlanInput in;
  in.prompt_tokens = static_cast<int64_t>(request.tokens.size());
  in.restore_depth = result.best.depth;
  in.restored_live = result.best.tier == Tier::kLive;
  in.stable_boundary = request.stable_boundary;
  in.shared_boundary = request.shared_boundary;
  in.max_pass_tokens = request.max_pass_tokens;
  in.shared_prefix = result.shared_prefix;
  in.ram_budget_bytes = ram_.budget();
  in.private_bytes = layout->PrivateBytes();
  in.existing = std::move(existing);
  ASSIGN_OR_RETURN(result.plan, planner_.Plan(in));
  return result;
}

// ---------------------------------------------------------------------------------------------
// Chunks and slots.

ChunkId CheckpointCache::MintChunk(ComputationId provenance, int64_t index, int64_t bytes,
                                   SlotKey holder) {
  auto chunk = std::make_unique<Chunk>();
  chunk->id = next_chunk_++;
  chunk->provenance = provenance;
  chunk->index = index;
  chunk->bytes = bytes;
  chunk->holders.push_back(holder);
  ChunkId id = chunk->id;
  chunks_.emplace(id, std::move(chunk));
  return id;
}

bool CheckpointCache::ChargedWhenReferenced(const Chunk& chunk) const {
  if (chunk.ram_refs > 0) return chunk.charged;
  // A chunk no RAM checkpoint references is kNone, or kSpilling from before its last
  // reference went; it becomes borrowed when a slot holds it.
  return !(options_.retention.charge_on_spill && chunk.residency == Residency::kNone &&
           !chunk.holders.empty());
}

void CheckpointCache::Charge(Chunk& chunk) {
  if (chunk.charged) return;
  absl::StatusOr<ByteLedger::ReservationId> r = ram_.Reserve(chunk.bytes);
  if (!r.ok()) return;  // Only for a spill of rows a pinned restore reads (MakeRoomForSpill).
  CAIRN_CHECK(ram_.Commit(*r).ok());
  chunk.charged = true;
}

void CheckpointCache::AddRamRef(Chunk& chunk) {
  if (chunk.ram_refs == 0) {
    // Space for the chunk is charged when first referenced, so preservation never allocates,
    // unless charge_on_spill defers a borrowed chunk's charge to its spill. The caller made
    // sure it fits.
    if (ChargedWhenReferenced(chunk)) Charge(chunk);
    // Bytes are in the arena only if no slot holds them (restored from disk into the arena
    // is the daemon's business; here a chunk without holders was never borrowed). A chunk
    // still being spilled keeps its spill.
    if (chunk.residency == Residency::kNone) {
      chunk.residency = chunk.holders.empty() ? Residency::kResident : Residency::kBorrowed;
    }
  }
  ++chunk.ram_refs;
}

void CheckpointCache::MaybeLeaveRam(Chunk& chunk) {
  if (chunk.ram_refs > 0 || chunk.residency == Residency::kSpilling ||
      chunk.residency == Residency::kNone) {
    return;
  }
  chunk.residency = Residency::kNone;
  if (listener_ != nullptr) listener_->ChunkLeftRam(chunk.id);
}

void CheckpointCache::DropRamRef(ChunkId id) {
  Chunk& chunk = *chunks_.at(id);
  CAIRN_CHECK(chunk.ram_refs > 0);
  if (--chunk.ram_refs == 0) {
    if (chunk.charged) CAIRN_CHECK(ram_.Release(chunk.bytes).ok());
    chunk.charged = false;
    MaybeLeaveRam(chunk);
  }
  MaybeFreeChunk(id);
}

void CheckpointCache::DropDiskRef(ChunkId id) {
  Chunk& chunk = *chunks_.at(id);
  CAIRN_CHECK(chunk.disk_refs > 0);
  if (--chunk.disk_refs == 0) {
    CAIRN_CHECK(disk_.Release(chunk.bytes).ok());
    chunk.rewrite = false;  // The next write writes it anew anyway.
    chunk.rewriting = false;
  }
  MaybeFreeChunk(id);
}

void CheckpointCache::MaybeFreeChunk(ChunkId id) {
  auto it = chunks_.find(id);
  if (it == chunks_.end()) return;
  const Chunk& chunk = *it->second;
  if (chunk.ram_refs == 0 && chunk.disk_refs == 0 && chunk.holders.empty() &&
      chunk.residency != Residency::kSpilling) {
    chunks_.erase(it);
  }
}

void CheckpointCache::RemoveHolder(ChunkId id, SlotKey slot) {
  Chunk& chunk = *chunks_.at(id);
  auto it = std::find(chunk.holders.begin(), chunk.holders.end(), slot);
  if (it != chunk.holders.end()) chunk.holders.erase(it);
  MaybeFreeChunk(id);
}

CheckpointCache::Slot* CheckpointCache::FindSlot(SlotKey key) {
  auto it = slots_.find(key);
  return it == slots_.end() ? nullptr : it->second.get();
}

CheckpointCache::Slot& CheckpointCache::GetOrCreateSlot(SlotKey key) {
  std::unique_ptr<Slot>& slot = slots_[key];
  if (slot == nullptr) {
    slot = std::make_unique<Slot>();
    slot->key = key;
    slot->frontier_id = next_frontier_++;
    frontier_slots_[slot->frontier_id] = key;
  }
  return *slot;
}

void CheckpointCache::Unindex(Slot& slot) {
  if (slot.node == nullptr) return;
  IndexFor(slot.identities.compatibility)
      .Remove(slot.node, {IndexEntry::Kind::kLive, slot.frontier_id});
  slot.node = nullptr;
}

void CheckpointCache::Reindex(Slot& slot) {
  Unindex(slot);
  if (slot.tokens.empty()) return;
  slot.node = IndexFor(slot.identities.compatibility)
                  .Insert(slot.tokens, {IndexEntry::Kind::kLive, slot.frontier_id});
}

void CheckpointCache::MakeRoomForSpill(const std::vector<ChunkId>& ids, bool for_restore,
                                       const std::string& why) {
  auto needed = [&] {
    std::vector<ChunkId> out;
    for (ChunkId id : ids) {
      auto it = chunks_.find(id);
      if (it != chunks_.end() && it->second->ram_refs > 0 && !it->second->charged) {
        out.push_back(id);
      }
    }
    return out;
  };
  // As for a capture (admission_by_rank): the spill may evict only checkpoints ranked at or
  // below the highest rank of the checkpoints that need its rows.
  EvictionRank limit = EvictionRank::kReused;
  if (options_.retention.admission_by_rank && !for_restore) {
    limit = EvictionRank::kRetryCopy;
    const std::vector<ChunkId> need = needed();
    for (const RetentionItem& item : RetentionItems(/*ram_tier=*/true)) {
      const std::vector<ChunkId>& chunks = checkpoints_.at(item.id)->chunks;
      if (std::any_of(chunks.begin(), chunks.end(),
                      [&](ChunkId c) { return Contains<ChunkId>(need, c); })) {
        limit = std::max(limit, item.rank);
      }
    }
  }
  while (true) {
    const std::vector<ChunkId> need = needed();
    int64_t bytes = 0;
    for (ChunkId id : need) bytes += chunks_.at(id)->bytes;
    if (ram_.free() >= bytes) return;
    if (EvictOne(/*ram_tier=*/true, limit, "room for a spill")) continue;
    // The deepest rows go, with every checkpoint that needs them; never rows a pinned
    // checkpoint reads (a restore under way). Those are spilled uncharged if the arena still
    // has room for them, and otherwise their spill fails.
    const ChunkId deepest = need.back();
    const bool read = std::any_of(checkpoints_.begin(), checkpoints_.end(), [&](const auto& c) {
      return c.second->pins > 0 && Contains<ChunkId>(c.second->chunks, deepest);
    });
    if (for_restore || read) return;
    FailChunk(deepest, why);
  }
}

std::vector<uint64_t> CheckpointCache::PrepareOverwrite(Slot& slot, int64_t keep_chunks) {
  std::vector<ChunkCopy> copies;
  std::vector<uint64_t> spills;
  const ModelLayout* layout = LayoutFor(slot.identities.compatibility);
  if (options_.retention.charge_on_spill) {
    // Rows only this slot holds are charged now: room is made by evicting by rank (which may
    // take the checkpoints that need them, and with them the need). Rows that still cannot
    // fit are lost with their checkpoints.
    std::vector<ChunkId> own;
    for (size_t j = static_cast<size_t>(keep_chunks); j < slot.chunks.size(); ++j) {
      const Chunk& chunk = *chunks_.at(slot.chunks[j]);
      if (chunk.residency == Residency::kBorrowed && chunk.holders.size() == 1) {
        own.push_back(chunk.id);
      }
    }
    MakeRoomForSpill(own, /*for_restore=*/false, "no room to preserve borrowed rows");
  }
  for (size_t j = static_cast<size_t>(keep_chunks); j < slot.chunks.size(); ++j) {
    ChunkId id = slot.chunks[j];
    Chunk& chunk = *chunks_.at(id);
    if (chunk.residency == Residency::kSpilling) {
      // A spill from this slot already under way must finish before the overwrite.
      SpillInfo& under_way = spills_.at(chunk.spill);
      if (under_way.slot == slot.key) {
        under_way.urgent = true;
        if (!Contains<uint64_t>(spills, under_way.id)) spills.push_back(under_way.id);
      }
    } else if (chunk.residency == Residency::kBorrowed && chunk.holders.size() == 1) {
      int64_t rows = layout->chunk_rows;
      copies.push_back({id, slot.key, chunk.index * rows, (chunk.index + 1) * rows});
    }
    RemoveHolder(id, slot.key);
  }
  slot.chunks.resize(std::min(slot.chunks.size(), static_cast<size_t>(keep_chunks)));
  const uint64_t spill = BeginSpill(slot.key, std::move(copies), /*urgent=*/true, "slot overwrite");
  if (spill != 0) spills.push_back(spill);
  return spills;
}

uint64_t CheckpointCache::BeginSpill(SlotKey slot, std::vector<ChunkCopy> copies, bool urgent,
                                     const std::string& why) {
  if (copies.empty()) return 0;
  SpillInfo spill;
  spill.id = next_spill_++;
  spill.slot = slot;
  spill.urgent = urgent;
  Event e;
  e.type = EventType::kSpill;
  e.reason = why;
  auto slot_it = slots_.find(slot);
  if (slot_it != slots_.end()) e.conversation = slot_it->second->conversation;
  for (const ChunkCopy& c : copies) {
    Chunk& chunk = *chunks_.at(c.id);
    CAIRN_CHECK(chunk.residency == Residency::kBorrowed);
    Charge(chunk);  // charge_on_spill: the caller made room.
    if (!chunk.charged) e.uncharged_chunks.push_back(c.id);
    chunk.residency = Residency::kSpilling;
    chunk.spill = spill.id;
    e.chunks.push_back(c.id);
    e.bytes += chunk.bytes;
  }
  spill.chunks = std::move(copies);
  const uint64_t id = spill.id;
  spills_.emplace(id, std::move(spill));
  new_spills_.push_back(id);
  Emit(std::move(e));
  return id;
}

void CheckpointCache::ResetSlot(Slot& slot, const Identities& identities) {
  Unindex(slot);
  slot.identities = identities;
  slot.tokens.clear();
  slot.computation = next_computation_++;
}

absl::StatusOr<std::vector<uint64_t>> CheckpointCache::StartCold(SlotKey key,
                                                                 const Identities& identities,
                                                                 const std::string& conversation) {
  if (LayoutFor(identities.compatibility) == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no layout registered for compatibility identity ", identities.compatibility));
  }
  Slot& slot = GetOrCreateSlot(key);
  std::vector<uint64_t> spills = PrepareOverwrite(slot, 0);
  ResetSlot(slot, identities);
  slot.conversation = conversation;
  StartRequest(conversation);
  return spills;
}

absl::Status CheckpointCache::ContinueSlot(SlotKey key, const Identities& identities,
                                           const std::string& conversation) {
  Slot* slot = FindSlot(key);
  if (slot == nullptr) return absl::NotFoundError(absl::StrCat("no slot ", key.slot));
  if (!(slot->identities == identities)) {
    return absl::FailedPreconditionError(
        absl::StrCat("slot ", key.slot, " holds state of other identities"));
  }
  // New rows come from a new prefill run.
  slot->computation = next_computation_++;
  Touch(slot->conversation);
  slot->conversation = conversation;
  StartRequest(conversation);
  Event e;
  e.type = EventType::kRestore;
  e.tier = Tier::kLive;
  e.depth = static_cast<int64_t>(slot->tokens.size());
  e.conversation = conversation;
  e.reason = "live frontier continues in place";
  Emit(std::move(e));
  return absl::OkStatus();
}

absl::StatusOr<RestorePlan> CheckpointCache::Restore(CheckpointId id, SlotKey key,
                                                     const Identities& identities,
                                                     const std::string& conversation) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end() || it->second->pending ||
      (!it->second->in_ram && !it->second->on_disk)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", id, " in no tier"));
  }
  Checkpoint& ckpt = *it->second;
  if (!(ckpt.identities == identities)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", id, " has other identities than the request"));
  }
  const ModelLayout& layout = *LayoutFor(identities.compatibility);
  Slot& slot = GetOrCreateSlot(key);
  size_t keep = 0;
  if (slot.identities == identities) {
    while (keep < slot.chunks.size() && keep < ckpt.chunks.size() &&
           slot.chunks[keep] == ckpt.chunks[keep]) {
      ++keep;
    }
  }
  RestorePlan plan;
  // Making room for spills (charge_on_spill) must not evict what is being restored.
  ++ckpt.pins;
  plan.preserve_spills = PrepareOverwrite(slot, static_cast<int64_t>(keep));
  if (ckpt.in_ram) {
    // The restore reads every chunk past the kept ones from the arena.
    plan.awaiting_spills = AwaitResident(std::vector<ChunkId>(
        ckpt.chunks.begin() + static_cast<std::ptrdiff_t>(keep), ckpt.chunks.end()));
  }
  --ckpt.pins;
  ResetSlot(slot, identities);
  slot.tokens = IndexFor(identities.compatibility).TokensAt(ckpt.node);
  for (size_t j = keep; j < ckpt.chunks.size(); ++j) {
    chunks_.at(ckpt.chunks[j])->holders.push_back(key);
    slot.chunks.push_back(ckpt.chunks[j]);
  }
  Reindex(slot);
  slot.conversation = conversation;
  StartRequest(conversation);
  Touch(ckpt.conversation);
  ckpt.last_use = clock_->Now();

  plan.tier = ckpt.in_ram ? Tier::kRam : Tier::kDisk;
  plan.checkpoint = id;
  plan.depth = ckpt.depth;
  plan.chunks = ckpt.chunks;
  plan.kept_rows = static_cast<int64_t>(keep) * layout.chunk_rows;
  plan.bytes_to_copy = (ckpt.depth - plan.kept_rows) * layout.RowBytes() + ckpt.private_bytes;
  Event e = MakeEvent(EventType::kRestore, ckpt, absl::StrCat("into slot ", key.slot));
  e.tier = plan.tier;
  e.bytes = plan.bytes_to_copy;
  e.conversation = conversation;
  Emit(std::move(e));
  return plan;
}

absl::Status CheckpointCache::ExtendSlot(SlotKey key, absl::Span<const TokenId> tokens) {
  Slot* slot = FindSlot(key);
  if (slot == nullptr) return absl::NotFoundError(absl::StrCat("no slot ", key.slot));
  slot->tokens.insert(slot->tokens.end(), tokens.begin(), tokens.end());
  Reindex(*slot);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TokenId>> CheckpointCache::SlotTokens(SlotKey key) const {
  auto it = slots_.find(key);
  if (it == slots_.end()) return absl::NotFoundError(absl::StrCat("no slot ", key.slot));
  return it->second->tokens;
}

absl::StatusOr<int64_t> CheckpointCache::SlotSpillBytes(SlotKey key) const {
  auto it = slots_.find(key);
  if (it == slots_.end()) return absl::NotFoundError(absl::StrCat("no slot ", key.slot));
  const Slot& slot = *it->second;
  const ModelLayout* layout = LayoutFor(slot.identities.compatibility);
  if (layout == nullptr) return 0;
  int64_t bytes = 0;
  for (ChunkId id : slot.chunks) {
    const Chunk& chunk = *chunks_.at(id);
    if (chunk.residency == Residency::kBorrowed && chunk.holders.size() == 1) bytes += chunk.bytes;
  }
  // Rows no capture has made a chunk of yet.
  const int64_t minted = static_cast<int64_t>(slot.chunks.size());
  const int64_t full = layout->FullChunks(static_cast<int64_t>(slot.tokens.size()));
  return bytes + std::max<int64_t>(0, full - minted) * layout->ChunkBytes();
}

uint64_t CheckpointCache::SpillIdle(SlotKey key, int max_chunks) {
  std::vector<ChunkCopy> copies;
  Slot* slot = FindSlot(key);
  if (slot == nullptr) return 0;
  const ModelLayout* layout = LayoutFor(slot->identities.compatibility);
  int64_t to_charge = 0;  // charge_on_spill: an idle spill takes only free room.
  for (ChunkId id : slot->chunks) {
    if (static_cast<int>(copies.size()) >= max_chunks) break;
    const Chunk& chunk = *chunks_.at(id);
    if (chunk.residency != Residency::kBorrowed) continue;
    if (!chunk.charged) {
      if (to_charge + chunk.bytes > ram_.free()) break;
      to_charge += chunk.bytes;
    }
    copies.push_back(
        {id, key, chunk.index * layout->chunk_rows, (chunk.index + 1) * layout->chunk_rows});
  }
  return BeginSpill(key, std::move(copies), /*urgent=*/false, "idle slot");
}

std::vector<uint64_t> CheckpointCache::AwaitResident(const std::vector<ChunkId>& chunks) {
  std::vector<uint64_t> spills;
  // Borrowed chunks, grouped by the slot they are copied from (one spill per slot).
  std::vector<std::pair<SlotKey, std::vector<ChunkCopy>>> by_slot;
  for (ChunkId id : chunks) {
    auto it = chunks_.find(id);
    if (it == chunks_.end()) continue;
    Chunk& chunk = *it->second;
    if (chunk.residency == Residency::kSpilling) {
      spills_.at(chunk.spill).urgent = true;
      if (!Contains<uint64_t>(spills, chunk.spill)) spills.push_back(chunk.spill);
    } else if (chunk.residency == Residency::kBorrowed && !chunk.holders.empty()) {
      const SlotKey from = chunk.holders.front();
      const ModelLayout& layout = *LayoutFor(slots_.at(from)->identities.compatibility);
      auto group = std::find_if(by_slot.begin(), by_slot.end(),
                                [&](const auto& g) { return g.first == from; });
      if (group == by_slot.end()) group = by_slot.insert(by_slot.end(), {from, {}});
      group->second.push_back(
          {id, from, chunk.index * layout.chunk_rows, (chunk.index + 1) * layout.chunk_rows});
    }
  }
  if (options_.retention.charge_on_spill) {
    std::vector<ChunkId> ids;
    for (const auto& group : by_slot) {
      for (const ChunkCopy& c : group.second) ids.push_back(c.id);
    }
    // The caller pins what it restores, so nothing it reads is dropped here.
    MakeRoomForSpill(ids, /*for_restore=*/true, "");
    for (auto& group : by_slot) {
      std::erase_if(group.second, [&](const ChunkCopy& c) {
        auto it = chunks_.find(c.id);
        return it == chunks_.end() || it->second->ram_refs == 0 ||
               it->second->residency != Residency::kBorrowed;
      });
    }
  }
  for (auto& [from, copies] : by_slot) {
    const uint64_t spill = BeginSpill(from, std::move(copies), /*urgent=*/true, "restore waits");
    if (spill != 0) spills.push_back(spill);
  }
  return spills;
}

void CheckpointCache::AbandonRestore(SlotKey key, int64_t kept_rows) {
  Slot* slot = FindSlot(key);
  if (slot == nullptr) return;
  const ModelLayout& layout = *LayoutFor(slot->identities.compatibility);
  const size_t keep = static_cast<size_t>(std::max<int64_t>(0, kept_rows) / layout.chunk_rows);
  for (size_t j = keep; j < slot->chunks.size(); ++j) RemoveHolder(slot->chunks[j], key);
  slot->chunks.resize(std::min(slot->chunks.size(), keep));
  slot->tokens.resize(std::min(slot->tokens.size(), keep * static_cast<size_t>(layout.chunk_rows)));
  Reindex(*slot);
}

void CheckpointCache::DropSlot(SlotKey key) {
  Slot* slot = FindSlot(key);
  if (slot == nullptr) return;
  std::vector<uint64_t> owed;
  for (const auto& [id, spill] : spills_) {
    if (spill.slot == key) owed.push_back(id);
  }
  std::sort(owed.begin(), owed.end());
  for (uint64_t id : owed) {
    const SpillInfo& spill = spills_.at(id);
    std::vector<ChunkId> all;
    for (const ChunkCopy& c : spill.chunks) all.push_back(c.id);
    CAIRN_CHECK(FinishSpill(id, {}, all, "borrowed rows lost with their slot").ok());
  }
  std::vector<ChunkId> lost;
  for (ChunkId id : slot->chunks) {
    const Chunk& chunk = *chunks_.at(id);
    if (chunk.residency == Residency::kBorrowed && chunk.holders.size() == 1) lost.push_back(id);
  }
  for (ChunkId id : lost) FailChunk(id, "borrowed rows lost with their slot");
  Unindex(*slot);
  for (ChunkId id : slot->chunks) RemoveHolder(id, key);
  frontier_slots_.erase(slot->frontier_id);
  slots_.erase(key);
}

}  // namespace cairn::cache
