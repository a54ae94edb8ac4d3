#ifndef CAIRN_SERVICES_CACHE_INSPECTION_TYPES_H_
#define CAIRN_SERVICES_CACHE_INSPECTION_TYPES_H_

// What the daemon's inspection calls answer, in the daemon's own types (cache_rpc.h converts
// them to the wire).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "services/cache/core/types.h"
#include "services/cache/daemon_counters.h"

namespace cairn::cache {

// One tier's budget and what fills it.
struct BudgetView {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t row_bytes = 0;      // Chunk bytes stored once.
  uint64_t private_bytes = 0;  // Private states and tails.
  uint64_t full_copy_bytes = 0;
  uint64_t checkpoints = 0;
  uint64_t max_checkpoints = 0;  // RAM only: the effective cap (0 while no model registered).
};

struct DaemonStatus {
  uint64_t cache_incarnation = 0;
  absl::Duration uptime;
  BudgetView ram;
  bool disk_enabled = false;
  bool disk_healthy = false;
  uint64_t quarantined = 0;
  BudgetView disk;
  uint64_t disk_free_bytes = 0;   // What the file system can still give the tier.
  uint64_t disk_queue_bytes = 0;  // Accepted for the disk tier, not yet written.
  uint32_t sessions = 0;
  DaemonCounters::Snapshot counts;
};

// One checkpoint as ListCheckpoints shows it.
struct CheckpointRow {
  CheckpointId id = 0;
  int64_t depth = 0;
  Tier tier = Tier::kNone;  // kRam when in RAM, else kDisk.
  CaptureKind kind = CaptureKind::kEnd;
  bool on_disk = false;
  bool borrowed = false;  // Some of its rows still sit in a slot.
  uint64_t private_bytes = 0;
  uint64_t row_bytes = 0;  // 0 when its model is not registered.
  std::string conversation;
  std::string compat_digest;
};

// The checkpoint tree of one model, exported from the core's radix index: ids and depths, no
// tokens. Nodes are in parent-before-child order.
struct TreeView {
  struct Node {
    int64_t parent = -1;  // Index into nodes; -1 below the root.
    int64_t depth = 0;
    std::vector<std::pair<CheckpointId, Tier>> checkpoints;  // Ending here, with their tier.
  };
  std::vector<Node> nodes;
  bool truncated = false;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_INSPECTION_TYPES_H_
