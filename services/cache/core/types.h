#ifndef CAIRN_SERVICES_CACHE_CORE_TYPES_H_
#define CAIRN_SERVICES_CACHE_CORE_TYPES_H_

// Vocabulary of the cache core: token, object ids, tiers and capture kinds. Plain values,
// no behaviour beyond naming.

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace cairn::cache {

using TokenId = int32_t;
// Ids are never reused within one cache instance; 0 means "none".
using ChunkId = uint64_t;
using CheckpointId = uint64_t;
// The computation (one prefill run in one slot) whose arithmetic produced some rows.
using ComputationId = uint64_t;

// A live execution slot: the inference daemon's session with the cache daemon (several
// inference daemons may share one cache) and the slot index inside it.
struct SlotKey {
  uint64_t daemon_session = 0;
  int32_t slot = 0;
  friend bool operator==(const SlotKey& a, const SlotKey& b) {
    return a.daemon_session == b.daemon_session && a.slot == b.slot;
  }
  template <typename H>
  friend H AbslHashValue(H h, const SlotKey& k) {
    return H::combine(std::move(h), k.daemon_session, k.slot);
  }
};

// Where a lookup candidate's state sits. The order is the tie-break order (live first).
enum class Tier { kNone = 0, kLive = 1, kRam = 2, kDisk = 3 };

// Why a capture was planned (seed §5). The order is the precedence when two reasons land on
// the same token: the lower value names the capture.
enum class CaptureKind { kEnd = 0, kReused = 1, kStable = 2, kLearned = 3, kGrid = 4 };

// Lower-case names used in events, JSON and tables: "none", "live", "ram", "disk".
absl::string_view TierName(Tier tier);
// "end", "reused", "stable", "learned", "grid".
absl::string_view CaptureKindName(CaptureKind kind);

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CORE_TYPES_H_
