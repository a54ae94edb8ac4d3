#ifndef CAIRN_SERVICES_CACHE_LOOKUP_TYPES_H_
#define CAIRN_SERVICES_CACHE_LOOKUP_TYPES_H_

// What RegisterModel, Lookup, Explain and Evict take and answer, in the daemon's own types.
// proto_convert.h converts them from and to cache.proto after the wire checks (lengths,
// token ranges, input identities, layouts); the daemon checks what needs its state.

#include <cstdint>
#include <string>
#include <vector>

#include "services/cache/core/checkpoint_cache.h"
#include "services/cache/core/event_log.h"
#include "services/cache/core/model_layout.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

// A model registers its compatibility identity and layout for a session.
struct ModelRegistration {
  uint64_t session_id = 0;
  std::string compatibility;  // The identity's digest: what checkpoints are filed under.
  ModelLayout layout;         // Validated (ModelLayout::Validate).
};

struct RegisteredModel {
  uint64_t model_id = 0;
  uint64_t ram_checkpoints = 0;   // Already held for the identity in RAM ...
  uint64_t disk_checkpoints = 0;  // ... and on disk.
};

// A prompt to look up for one of the session's models.
struct PromptLookup {
  uint64_t session_id = 0;
  uint64_t model_id = 0;
  std::vector<TokenId> tokens;   // The whole rendered prompt; not empty.
  std::string input;             // The input identity as InputDigest makes it.
  int64_t stable_boundary = -1;  // Tokens the client will resend unchanged; -1 unknown.
  int64_t shared_boundary = -1;  // End of a preamble others share; -1 unknown.
  int64_t max_pass_tokens = 0;   // The client's longest prefill pass; 0: the planner's own.
};

// What overwriting one of the session's slots would first copy into the arena.
struct SlotSpill {
  int32_t slot = 0;
  int64_t bytes = 0;  // > 0.
};

struct LookupAnswer {
  LookupResult result;                 // The core's: best, others, shared prefix, plan.
  std::vector<SlotSpill> slot_spills;  // Slots of the session that would spill, by slot.
};

// Why a prompt would miss, or what it would restore (no session needed).
struct ExplainQuery {
  uint64_t model_id = 0;  // 0: the first registered model.
  std::vector<TokenId> tokens;
};

struct Explanation {
  LookupResult result;         // Without live candidates (no session asks).
  std::vector<Event> related;  // The core's recent events about checkpoints on the path.
  std::string summary;         // One line for a person.
};

// Evicts one checkpoint, or everything evictable; from disk too with include_disk.
struct EvictOrder {
  CheckpointId checkpoint_id = 0;
  bool all = false;
  bool include_disk = false;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_LOOKUP_TYPES_H_
