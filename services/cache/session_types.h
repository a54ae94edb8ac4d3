#ifndef CAIRN_SERVICES_CACHE_SESSION_TYPES_H_
#define CAIRN_SERVICES_CACHE_SESSION_TYPES_H_

// The session stream's client-side messages and the daemon's welcome as the daemon takes and
// gives them (proto_convert.h converts from and to the wire, after the wire checks).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

// An inference daemon introducing itself.
struct SessionHello {
  std::string instance_name;  // A label for logs.
  uint32_t pid = 0;
  uint32_t slots = 0;  // Execution slots it runs; 0: undeclared.
};

// What a new session is told: its id, the cache's incarnation, where the arena is and how its
// regions are laid out, and the heartbeat it owes.
struct SessionWelcome {
  uint64_t session_id = 0;
  uint64_t cache_incarnation = 0;
  uint64_t arena_incarnation = 0;
  uint64_t arena_bytes = 0;
  std::string fd_socket_path;
  uint64_t pin_step_bytes = 0;
  uint64_t first_pin_bytes = 0;
  uint64_t alignment = 0;
  absl::Duration heartbeat_interval;
  absl::Duration session_timeout;
};

// A session's report that spill `spill_id` finished: the chunks now in the arena, the XXH3-64
// of each (in chunk order; empty: not given), and the chunks whose rows were already gone.
struct SpillReport {
  uint64_t spill_id = 0;
  std::vector<ChunkId> chunk_ids;
  std::vector<uint64_t> checksums;
  std::vector<ChunkId> failed_chunk_ids;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_SESSION_TYPES_H_
