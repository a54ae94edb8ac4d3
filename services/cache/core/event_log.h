#ifndef CAIRN_SERVICES_CACHE_CORE_EVENT_LOG_H_
#define CAIRN_SERVICES_CACHE_CORE_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

enum class EventType {
  kAdmit,       // A checkpoint entered the RAM tier.
  kReject,      // A capture was refused (reason: does not fit, aborted, ...).
  kEvict,       // A checkpoint left the RAM tier (reason: its eviction rank, explicit, ...).
  kSpill,       // Borrowed chunks were copied from a slot into the arena.
  kPersist,     // A checkpoint was written to the disk tier.
  kDiskEvict,   // A checkpoint left the disk tier.
  kRestore,     // A checkpoint or live frontier was restored into a slot.
  kQuarantine,  // A checkpoint was dropped because bytes it depends on are corrupt or lost
                //   (tier kDisk: from the disk tier only; a copy in RAM stays).
  kRecover,     // A checkpoint found in the disk tier at start-up entered the disk tier.
};

// "admit", "reject", "evict", "spill", "persist", "disk-evict", "restore", "quarantine",
// "recover".
absl::string_view EventTypeName(EventType type);

// A chunk created by an admission: enough to rebuild the chunk table from events alone.
struct NewChunk {
  ChunkId id = 0;
  ComputationId provenance = 0;
  int64_t index = 0;  // Covers rows [index * chunk_rows, (index + 1) * chunk_rows).
  int64_t bytes = 0;
};

// One decision with its reason and the numbers behind it. Fields that do not apply to a type
// keep their defaults.
struct Event {
  uint64_t seq = 0;
  absl::Time time;
  EventType type = EventType::kAdmit;
  CheckpointId checkpoint = 0;
  std::string reason;
  std::string conversation;
  int64_t depth = 0;
  CaptureKind kind = CaptureKind::kEnd;
  Tier tier = Tier::kNone;
  uint64_t tokens_digest = 0;        // XXH3 of the token sequence.
  int64_t own_bytes = 0;             // Private state + tail of the checkpoint.
  int64_t bytes = 0;                 // Bytes reserved (admit/persist), freed (evict), copied.
  std::vector<ChunkId> chunks;       // Admit/persist: every referenced chunk; spill: chunks copied.
  std::vector<NewChunk> new_chunks;  // Admit, recover: chunks first referenced by this one.
  // Admit: referenced chunks not charged to the RAM ledger (borrowed, their charge waits for
  // their spill: RetentionOptions::charge_on_spill); spill: copied chunks still not charged.
  std::vector<ChunkId> uncharged_chunks;
  int64_t ram_used = 0;   // RAM ledger after the event.
  int64_t disk_used = 0;  // Disk ledger after the event.
};

// A one-line human rendering: "#12 admit ckpt 7 conv A depth 8192 kind grid ...".
std::string FormatEvent(const Event& event);

// Receives every event as it is logged (the daemon appends them to a file and streams them).
// Append is called with the cache's lock held: implementations must be quick and must not
// call back into the cache. Thread safety: as the implementation states.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void Append(const Event& event) = 0;
};

// Numbers events with consecutive sequence numbers, keeps the latest `capacity` in a ring and
// hands each to every sink. Thread-compatible (lives under the cache's lock).
class EventLog {
 public:
  explicit EventLog(size_t capacity) : capacity_(capacity) {}
  // Adds a sink; `sink` must outlive this object.
  void AddSink(EventSink* sink) { sinks_.push_back(sink); }
  // Assigns `event.seq`, stores it and forwards it.
  void Log(Event event);
  const std::deque<Event>& recent() const { return ring_; }
  uint64_t logged() const { return next_seq_ - 1; }

 private:
  size_t capacity_;
  uint64_t next_seq_ = 1;
  std::deque<Event> ring_;
  std::vector<EventSink*> sinks_;
};

// A sink that keeps every event (tests, the simulator, replay). Thread-compatible.
class VectorEventSink : public EventSink {
 public:
  void Append(const Event& event) override { events_.push_back(event); }
  const std::vector<Event>& events() const { return events_; }

 private:
  std::vector<Event> events_;
};

// The cache's durable state reduced to what events carry: checkpoints with their tiers and
// chunks, chunk reference counts, and ledger totals. Two caches with equal summaries hold the
// same checkpoints over the same bytes.
struct CacheStateSummary {
  struct CheckpointState {
    int64_t depth = 0;
    bool in_ram = false;
    bool on_disk = false;
    uint64_t tokens_digest = 0;
    int64_t own_bytes = 0;
    std::vector<ChunkId> chunks;
    friend bool operator==(const CheckpointState&, const CheckpointState&) = default;
  };
  struct ChunkState {
    ComputationId provenance = 0;
    int64_t bytes = 0;
    int64_t ram_refs = 0;
    int64_t disk_refs = 0;
    friend bool operator==(const ChunkState&, const ChunkState&) = default;
  };
  std::map<CheckpointId, CheckpointState> checkpoints;
  std::map<ChunkId, ChunkState> chunks;  // Chunks referenced by at least one checkpoint.
  int64_t ram_used = 0;
  int64_t disk_used = 0;
  friend bool operator==(const CacheStateSummary&, const CacheStateSummary&) = default;
};

// Rebuilds the summary from a complete event sequence (from the first event on). Returns
// DataLoss naming the sequence number when an event contradicts the state built so far
// (an unknown checkpoint evicted, a reference count below zero, a gap in sequence numbers).
absl::StatusOr<CacheStateSummary> ReplayEvents(absl::Span<const Event> events);

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CORE_EVENT_LOG_H_
