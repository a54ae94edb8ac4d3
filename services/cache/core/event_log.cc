#include "services/cache/core/event_log.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cairn::cache {

absl::string_view EventTypeName(EventType type) {
  switch (type) {
    case EventType::kAdmit:
      return "admit";
    case EventType::kReject:
      return "reject";
    case EventType::kEvict:
      return "evict";
    case EventType::kSpill:
      return "spill";
    case EventType::kPersist:
      return "persist";
    case EventType::kDiskEvict:
      return "disk-evict";
    case EventType::kRecover:
      return "recover";
    case EventType::kRestore:
      return "restore";
    case EventType::kQuarantine:
      return "quarantine";
  }
  return "admit";
}

std::string FormatEvent(const Event& e) {
  std::string out = absl::StrCat("#", e.seq, " ", EventTypeName(e.type));
  if (e.checkpoint != 0) absl::StrAppend(&out, " ckpt ", e.checkpoint);
  if (!e.conversation.empty()) absl::StrAppend(&out, " conv ", e.conversation);
  absl::StrAppend(&out, " depth ", e.depth);
  if (e.type == EventType::kAdmit || e.type == EventType::kReject) {
    absl::StrAppend(&out, " kind ", CaptureKindName(e.kind));
  }
  if (e.tier != Tier::kNone) absl::StrAppend(&out, " tier ", TierName(e.tier));
  absl::StrAppend(&out, " bytes ", e.bytes);
  if (!e.chunks.empty()) absl::StrAppend(&out, " chunks ", e.chunks.size());
  if (!e.reason.empty()) absl::StrAppend(&out, " reason ", e.reason);
  absl::StrAppend(&out, " ram_used ", e.ram_used);
  return out;
}

void EventLog::Log(Event event) {
  event.seq = next_seq_++;
  for (EventSink* sink : sinks_) sink->Append(event);
  if (capacity_ == 0) return;
  if (ring_.size() == capacity_) ring_.pop_front();
  ring_.push_back(std::move(event));
}

namespace {

using Summary = CacheStateSummary;

absl::Status Corrupt(const Event& e, absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("event ", e.seq, " (", EventTypeName(e.type), "): ", what));
}

// Chunks referenced in RAM whose bytes are not charged yet (Event::uncharged_chunks).
using Uncharged = absl::flat_hash_set<ChunkId>;

// Drops one tier's references of `ckpt`'s chunks and its own bytes from that tier's total.
absl::Status DropTier(const Event& e, Summary& s, Summary::CheckpointState& ckpt, bool ram,
                      Uncharged& uncharged) {
  int64_t& used = ram ? s.ram_used : s.disk_used;
  used -= ckpt.own_bytes;
  for (ChunkId id : ckpt.chunks) {
    auto it = s.chunks.find(id);
    if (it == s.chunks.end()) return Corrupt(e, absl::StrCat("unknown chunk ", id));
    int64_t& refs = ram ? it->second.ram_refs : it->second.disk_refs;
    if (refs <= 0) return Corrupt(e, absl::StrCat("chunk ", id, " reference count below zero"));
    if (--refs == 0 && !(ram && uncharged.erase(id) > 0)) used -= it->second.bytes;
    if (it->second.ram_refs == 0 && it->second.disk_refs == 0) s.chunks.erase(it);
  }
  (ram ? ckpt.in_ram : ckpt.on_disk) = false;
  return absl::OkStatus();
}

absl::Status AddTier(const Event& e, Summary& s, Summary::CheckpointState& ckpt, bool ram,
                     Uncharged& uncharged) {
  int64_t& used = ram ? s.ram_used : s.disk_used;
  used += ckpt.own_bytes;
  for (ChunkId id : ckpt.chunks) {
    auto it = s.chunks.find(id);
    if (it == s.chunks.end()) return Corrupt(e, absl::StrCat("unknown chunk ", id));
    int64_t& refs = ram ? it->second.ram_refs : it->second.disk_refs;
    if (refs++ > 0) continue;
    if (ram && std::find(e.uncharged_chunks.begin(), e.uncharged_chunks.end(), id) !=
                   e.uncharged_chunks.end()) {
      uncharged.insert(id);
    } else {
      used += it->second.bytes;
    }
  }
  (ram ? ckpt.in_ram : ckpt.on_disk) = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CacheStateSummary> ReplayEvents(absl::Span<const Event> events) {
  Summary s;
  Uncharged uncharged;
  uint64_t expected_seq = events.empty() ? 0 : events.front().seq;
  if (expected_seq > 1) {
    return absl::DataLossError(absl::StrCat("replay starts at event ", expected_seq, ", not 1"));
  }
  for (const Event& e : events) {
    if (e.seq != expected_seq++) return Corrupt(e, "gap in sequence numbers");
    auto it = s.checkpoints.find(e.checkpoint);
    switch (e.type) {
      case EventType::kAdmit: {
        if (it != s.checkpoints.end() && it->second.in_ram) {
          return Corrupt(e, "checkpoint admitted twice");
        }
        for (const NewChunk& c : e.new_chunks) {
          if (!s.chunks.emplace(c.id, Summary::ChunkState{c.provenance, c.bytes, 0, 0}).second) {
            return Corrupt(e, absl::StrCat("chunk ", c.id, " created twice"));
          }
        }
        Summary::CheckpointState& ckpt = s.checkpoints[e.checkpoint];
        ckpt.depth = e.depth;
        ckpt.tokens_digest = e.tokens_digest;
        ckpt.own_bytes = e.own_bytes;
        ckpt.chunks = e.chunks;
        if (absl::Status st = AddTier(e, s, ckpt, /*ram=*/true, uncharged); !st.ok()) return st;
        break;
      }
      case EventType::kRecover: {
        if (it != s.checkpoints.end()) return Corrupt(e, "recovered checkpoint already known");
        for (const NewChunk& c : e.new_chunks) {
          if (!s.chunks.emplace(c.id, Summary::ChunkState{c.provenance, c.bytes, 0, 0}).second) {
            return Corrupt(e, absl::StrCat("chunk ", c.id, " created twice"));
          }
        }
        Summary::CheckpointState& ckpt = s.checkpoints[e.checkpoint];
        ckpt.depth = e.depth;
        ckpt.tokens_digest = e.tokens_digest;
        ckpt.own_bytes = e.own_bytes;
        ckpt.chunks = e.chunks;
        if (absl::Status st = AddTier(e, s, ckpt, /*ram=*/false, uncharged); !st.ok()) return st;
        break;
      }
      case EventType::kPersist: {
        if (it == s.checkpoints.end() || it->second.on_disk) {
          return Corrupt(e, "persisting an unknown or persisted checkpoint");
        }
        if (absl::Status st = AddTier(e, s, it->second, /*ram=*/false, uncharged); !st.ok())
          return st;
        break;
      }
      case EventType::kEvict:
      case EventType::kDiskEvict:
      case EventType::kQuarantine: {
        if (it == s.checkpoints.end()) return Corrupt(e, "unknown checkpoint");
        // A quarantine of tier kDisk took only the disk copy (a RAM copy stays).
        const bool disk_only = e.type == EventType::kDiskEvict ||
                               (e.type == EventType::kQuarantine && e.tier == Tier::kDisk);
        bool drop_ram = !disk_only && it->second.in_ram;
        bool drop_disk = e.type != EventType::kEvict && it->second.on_disk;
        if (!drop_ram && !drop_disk) return Corrupt(e, "checkpoint not in that tier");
        if (drop_ram) {
          if (absl::Status st = DropTier(e, s, it->second, true, uncharged); !st.ok()) return st;
        }
        if (drop_disk) {
          if (absl::Status st = DropTier(e, s, it->second, false, uncharged); !st.ok()) return st;
        }
        if (!it->second.in_ram && !it->second.on_disk) s.checkpoints.erase(it);
        break;
      }
      case EventType::kSpill:
        // A spill charges the copied chunks whose charge waited for it.
        for (ChunkId id : e.chunks) {
          auto chunk = s.chunks.find(id);
          if (chunk == s.chunks.end() || chunk->second.ram_refs == 0) continue;
          if (std::find(e.uncharged_chunks.begin(), e.uncharged_chunks.end(), id) ==
                  e.uncharged_chunks.end() &&
              uncharged.erase(id) > 0) {
            s.ram_used += chunk->second.bytes;
          }
        }
        break;
      case EventType::kReject:
      case EventType::kRestore:
        break;
    }
  }
  return s;
}

}  // namespace cairn::cache
