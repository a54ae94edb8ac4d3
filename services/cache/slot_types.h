#ifndef CAIRN_SERVICES_CACHE_SLOT_TYPES_H_
#define CAIRN_SERVICES_CACHE_SLOT_TYPES_H_

// What the slot calls (StartSlot, UpdateFrontier) take, in the daemon's own types.
// proto_convert.h converts them from cache.proto after the wire checks; retries by
// client_request_id are the wire side's (cache_rpc.h).

#include <cstdint>
#include <string>
#include <vector>

#include "services/cache/core/types.h"

namespace cairn::cache {

// A slot starts a request: cold (from nothing), or continuing its own live frontier.
struct SlotStart {
  uint64_t session_id = 0;
  uint64_t model_id = 0;
  uint32_t slot = 0;
  bool cold = true;
  std::string input;  // The input identity as InputDigest makes it.
  std::string conversation;
};

// A slot appended `tokens` to its frontier, which was `expected_depth` tokens deep.
struct FrontierUpdate {
  uint64_t session_id = 0;
  uint64_t model_id = 0;
  uint32_t slot = 0;
  std::vector<TokenId> tokens;
  uint64_t expected_depth = 0;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_SLOT_TYPES_H_
