// CheckpointCache: retention (ranking for eviction, eviction from either tier, quarantine)
// and the accounting helpers it shares with admission.

#include <algorithm>
#include <limits>
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
// Retention.

std::vector<RetentionItem> CheckpointCache::RetentionItems(bool ram_tier) const {
  auto in_tier = [ram_tier](const Checkpoint& c) {
    return !c.pending && (ram_tier ? c.in_ram : (c.on_disk && !c.persisting));
  };
  auto rank_input = [this](const Checkpoint& c) {
    RankInput in;
    in.kind = c.kind;
    in.depth = c.depth;
    in.stable_boundary = c.stable_boundary;
    in.private_bytes = c.private_bytes;
    in.row_bytes_per_token = LayoutFor(c.identities.compatibility)->RowBytes();
    in.conversation_idle = Idle(c.conversation);
    return in;
  };
  // Superseded: its conversation captured a later checkpoint that supersedes (below it on its
  // path, or on a newer branch after an edit or a compaction), and no checkpoint of another
  // conversation lies below it (RetentionOptions::superseded_first).
  absl::flat_hash_map<CheckpointId, bool> superseded;
  if (options_.retention.superseded_first) {
    absl::flat_hash_map<std::string, CheckpointId> latest;  // Per conversation.
    absl::flat_hash_set<CheckpointId> other_below;
    for (const auto& [id, ckpt] : checkpoints_) {
      if (!in_tier(*ckpt)) continue;
      if (retention_.Supersedes(rank_input(*ckpt))) {
        CheckpointId& newest = latest[ckpt->conversation];
        newest = std::max(newest, id);
      }
      for (const RadixPrefixIndex::Hit& hit :
           RadixPrefixIndex::NearAncestors(ckpt->node, std::numeric_limits<int64_t>::max())) {
        if (hit.entry.kind != IndexEntry::Kind::kCheckpoint) continue;
        const Checkpoint& above = *checkpoints_.at(hit.entry.id);
        if (in_tier(above) && above.conversation != ckpt->conversation) {
          other_below.insert(above.id);
        }
      }
    }
    for (const auto& [id, ckpt] : checkpoints_) {
      if (!in_tier(*ckpt)) continue;
      auto newest = latest.find(ckpt->conversation);
      superseded[id] = newest != latest.end() && newest->second > id && !other_below.contains(id);
    }
  }
  // Edit reach: per conversation, newest first, the distinct stable boundaries seen so far.
  absl::flat_hash_map<CheckpointId, int> turns_back;
  if (options_.retention.edit_reach_turns > 0) {
    absl::flat_hash_map<std::string, std::vector<const Checkpoint*>> by_conversation;
    for (const auto& [id, ckpt] : checkpoints_) {
      if (in_tier(*ckpt)) by_conversation[ckpt->conversation].push_back(ckpt.get());
    }
    for (auto& [conversation, list] : by_conversation) {
      std::sort(list.begin(), list.end(),
                [](const Checkpoint* a, const Checkpoint* b) { return a->id > b->id; });
      absl::flat_hash_set<int64_t> newer;
      for (const Checkpoint* c : list) {
        turns_back[c->id] =
            static_cast<int>(newer.size()) - (newer.contains(c->stable_boundary) ? 1 : 0);
        newer.insert(c->stable_boundary);
      }
    }
  }
  std::vector<RetentionItem> items;
  absl::flat_hash_map<size_t, RankInput> reach_inputs;  // Index in items -> its rank input.
  for (const auto& [id, ckpt] : checkpoints_) {
    if (!in_tier(*ckpt)) continue;
    RankInput in = rank_input(*ckpt);
    auto sup = superseded.find(id);
    in.superseded = sup != superseded.end() && sup->second;
    auto back = turns_back.find(id);
    if (back != turns_back.end()) in.turns_back = back->second;
    RetentionItem item;
    item.id = id;
    item.rank = retention_.Classify(in);
    item.edit_reach = item.rank == EvictionRank::kSuperseded && retention_.InEditReach(in);
    item.turns_back = in.turns_back;
    item.frontier =
        in.kind == CaptureKind::kReused && in.stable_boundary >= 0 && in.depth > in.stable_boundary;
    item.branch_point = RadixPrefixIndex::IsBranchPoint(ckpt->node);
    for (const RadixPrefixIndex::Hit& hit :
         RadixPrefixIndex::NearAncestors(ckpt->node, options_.retention.near_duplicate_tokens)) {
      if (hit.entry.kind != IndexEntry::Kind::kCheckpoint) continue;
      const Checkpoint& other = *checkpoints_.at(hit.entry.id);
      if (ram_tier ? other.in_ram : other.on_disk) item.covered = true;
    }
    auto conv = conversations_.find(ckpt->conversation);
    item.last_use = conv == conversations_.end() ? ckpt->last_use
                                                 : std::max(conv->second.last_use, ckpt->last_use);
    item.pinned = ckpt->pins > 0;
    item.depth = ckpt->depth;
    item.overdue = Overdue(ckpt->conversation);
    if (options_.retention.shallow_by_saved) {
      int64_t shared = 0;
      for (const RadixPrefixIndex::Hit& hit :
           RadixPrefixIndex::NearAncestors(ckpt->node, std::numeric_limits<int64_t>::max())) {
        if (hit.entry.kind != IndexEntry::Kind::kCheckpoint) continue;
        const Checkpoint& above = *checkpoints_.at(hit.entry.id);
        if (in_tier(above) && above.conversation != ckpt->conversation) {
          shared = std::max(shared, hit.depth);
        }
      }
      item.own_tokens = ckpt->depth - shared;
    }
    if (options_.retention.value_per_byte || item.edit_reach) {
      int64_t fallback = 0;
      for (const RadixPrefixIndex::Hit& hit :
           RadixPrefixIndex::NearAncestors(ckpt->node, std::numeric_limits<int64_t>::max())) {
        if (hit.entry.kind == IndexEntry::Kind::kCheckpoint &&
            in_tier(*checkpoints_.at(hit.entry.id))) {
          fallback = std::max(fallback, hit.depth);
        }
      }
      item.saved_tokens = ckpt->depth - fallback;
      item.freed_bytes = ckpt->own_bytes();
      for (ChunkId c : ckpt->chunks) {
        const Chunk& chunk = *chunks_.at(c);
        const bool sole = (ram_tier ? chunk.ram_refs : chunk.disk_refs) == 1;
        if (sole && (!ram_tier || chunk.charged)) item.freed_bytes += chunk.bytes;
      }
    }
    if (item.edit_reach) reach_inputs.emplace(items.size(), in);
    items.push_back(item);
  }
  ProtectEditReach(ram_tier, reach_inputs, items);
  return items;
}

void CheckpointCache::ProtectEditReach(bool ram_tier,
                                       const absl::flat_hash_map<size_t, RankInput>& reach_inputs,
                                       std::vector<RetentionItem>& items) const {
  const double share = options_.retention.edit_reach_share;
  if (share <= 0 || reach_inputs.empty()) return;
  std::vector<size_t> order;
  for (const auto& [index, in] : reach_inputs) order.push_back(index);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair(items[a].saved_tokens, items[a].id) >
           std::make_pair(items[b].saved_tokens, items[b].id);
  });
  double room = share * static_cast<double>(ram_tier ? ram_.budget() : disk_.budget());
  for (size_t index : order) {
    const RankInput& in = reach_inputs.at(index);
    room -= static_cast<double>(in.private_bytes);
    if (room < 0) break;
    RankInput kept = in;
    kept.superseded = false;
    items[index].rank = retention_.Classify(kept);
    items[index].edit_reach = false;
  }
}

bool CheckpointCache::EvictOne(bool ram_tier, EvictionRank max_rank, const std::string& why) {
  std::vector<RetentionItem> items = RetentionItems(ram_tier);
  std::vector<CheckpointId> order = retention_.EvictionOrder(items);
  if (order.empty()) return false;
  auto victim = std::find_if(items.begin(), items.end(),
                             [&](const RetentionItem& i) { return i.id == order.front(); });
  if (victim->rank > max_rank) return false;
  std::string reason(EvictionRankName(victim->rank));
  // The overdue rule decided inside the rank (RetentionOptions::overdue_gaps): say so before
  // the rank, which stays last (the daemon counts evictions by the last part).
  const RetentionOptions& r = options_.retention;
  if (victim->overdue && r.overdue_gaps > 0 && !r.value_per_byte &&
      victim->rank >= EvictionRank::kIdle) {
    reason = absl::StrCat("overdue conversation, ", reason);
  }
  if (!why.empty()) reason = absl::StrCat(why, ", ", reason);
  Checkpoint& ckpt = *checkpoints_.at(order.front());
  if (ram_tier) {
    EvictFromRam(ckpt, reason);
  } else {
    EvictFromDisk(ckpt, reason);
  }
  return true;
}

void CheckpointCache::EvictFromRam(Checkpoint& ckpt, const std::string& reason) {
  CAIRN_CHECK(ckpt.in_ram && !ckpt.pending);
  int64_t freed = ckpt.own_bytes();
  CAIRN_CHECK(ram_.Release(ckpt.own_bytes()).ok());
  for (ChunkId id : ckpt.chunks) {
    if (chunks_.at(id)->ram_refs == 1) freed += chunks_.at(id)->bytes;
    DropRamRef(id);
  }
  ckpt.in_ram = false;
  --ram_checkpoints_;
  Event e = MakeEvent(EventType::kEvict, ckpt, reason);
  e.tier = Tier::kRam;
  e.bytes = freed;
  Emit(std::move(e));
  if (listener_ != nullptr) listener_->CheckpointLeftRam(ckpt.id);
  EraseIfGone(ckpt.id);
}

void CheckpointCache::EvictFromDisk(Checkpoint& ckpt, const std::string& reason) {
  CAIRN_CHECK(ckpt.on_disk);
  int64_t freed = ckpt.own_bytes();
  CAIRN_CHECK(disk_.Release(ckpt.own_bytes()).ok());
  for (ChunkId id : ckpt.chunks) {
    if (chunks_.at(id)->disk_refs == 1) freed += chunks_.at(id)->bytes;
    DropDiskRef(id);
  }
  ckpt.on_disk = false;
  Event e = MakeEvent(EventType::kDiskEvict, ckpt, reason);
  e.tier = Tier::kDisk;
  e.bytes = freed;
  Emit(std::move(e));
  if (listener_ != nullptr) listener_->CheckpointLeftDisk(ckpt.id);
  EraseIfGone(ckpt.id);
}

void CheckpointCache::Quarantine(Checkpoint& ckpt, const std::string& reason) {
  Event e = MakeEvent(EventType::kQuarantine, ckpt, reason);
  e.tier = ckpt.in_ram ? Tier::kRam : Tier::kDisk;
  CheckpointId id = ckpt.id;
  const bool left_ram = ckpt.in_ram;
  if (ckpt.in_ram) {
    CAIRN_CHECK(ram_.Release(ckpt.own_bytes()).ok());
    for (ChunkId c : ckpt.chunks) DropRamRef(c);
    ckpt.in_ram = false;
    --ram_checkpoints_;
  }
  const bool left_disk = ReleaseDiskTier(ckpt);
  Emit(std::move(e));
  if (listener_ != nullptr && left_ram) listener_->CheckpointLeftRam(id);
  if (listener_ != nullptr && left_disk) listener_->CheckpointLeftDisk(id);
  EraseIfGone(id);
}

bool CheckpointCache::ReleaseDiskTier(Checkpoint& ckpt) {
  const bool had = ckpt.on_disk || ckpt.persisting;
  if (ckpt.on_disk) {
    CAIRN_CHECK(disk_.Release(ckpt.own_bytes()).ok());
    for (ChunkId c : ckpt.chunks) DropDiskRef(c);
    ckpt.on_disk = false;
  }
  if (ckpt.persisting) {
    // A write in flight is abandoned; CommitPersist for it will answer NotFound.
    CAIRN_CHECK(disk_.Rollback(ckpt.disk_reservation).ok());
    for (ChunkId c : ckpt.chunks) DropDiskRef(c);
    ckpt.persisting = false;
  }
  return had;
}

void CheckpointCache::EraseIfGone(CheckpointId id) {
  auto it = checkpoints_.find(id);
  if (it == checkpoints_.end()) return;
  Checkpoint& ckpt = *it->second;
  if (ckpt.in_ram || ckpt.on_disk || ckpt.pending || ckpt.persisting) return;
  IndexFor(ckpt.identities.compatibility).Remove(ckpt.node, {IndexEntry::Kind::kCheckpoint, id});
  checkpoints_.erase(it);
}

int64_t CheckpointCache::ChunkBytesMissing(const std::vector<ChunkId>& ids, bool ram) const {
  int64_t bytes = 0;
  for (ChunkId id : ids) {
    const Chunk& chunk = *chunks_.at(id);
    if (ram ? chunk.ram_refs == 0 && ChargedWhenReferenced(chunk) : chunk.disk_refs == 0) {
      bytes += chunk.bytes;
    }
  }
  return bytes;
}

}  // namespace cairn::cache
