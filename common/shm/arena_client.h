#ifndef CAIRN_COMMON_SHM_ARENA_CLIENT_H_
#define CAIRN_COMMON_SHM_ARENA_CLIENT_H_

// The receiving side of the arena hand-over: a cache daemon shares its arena memfd with
// inference daemons over a Unix stream socket with SCM_RIGHTS (the server is
// services/cache/arena/arena_fd_server.h); this side checks the server's credentials, validates
// the descriptor and maps it.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/shm/arena_handle.h"
#include "common/shm/mapping.h"

namespace cairn {

// The one message the server sends per connection (fixed layout, little-endian host order;
// both ends run on one host).
struct ArenaGrant {
  uint32_t magic = 0;
  uint32_t version = 0;
  uint32_t granted = 0;  // 1: the memfd is attached; 0: refused, nothing attached.
  uint32_t reserved = 0;
  uint64_t incarnation = 0;
  uint64_t size_bytes = 0;
};
inline constexpr uint32_t kArenaGrantMagic = 0x43414644;  // "CAFD".
inline constexpr uint32_t kArenaGrantVersion = 1;

struct ArenaClientOptions {
  std::string socket_path;
  std::optional<uid_t> server_uid;    // The cache daemon's uid; unset = our own uid.
  std::optional<gid_t> server_gid;    // If set, the cache daemon's gid must equal it.
  uint64_t expected_incarnation = 0;  // From the Welcome handshake; 0 = any.
  absl::Duration timeout = absl::Seconds(5);
};

// The inference side's view of an arena: a validated mapping. Move-only. Thread-compatible
// (immutable after creation; the bytes are shared with other processes).
class MappedArena {
 public:
  // Connects, checks the server's credentials, receives the grant, validates the memfd (sealed,
  // announced size, ValidateSealedMemfd) and maps it. PermissionDenied for a refused grant or
  // a server with the wrong uid; InvalidArgument for a malformed grant or descriptor;
  // FailedPrecondition for an unexpected incarnation; Unavailable if the server is gone.
  static absl::StatusOr<MappedArena> Connect(const ArenaClientOptions& options);

  // Validates `handle` (incarnation, bounds without overflow) and returns its bytes.
  absl::StatusOr<absl::Span<uint8_t>> Resolve(const ArenaHandle& handle) const {
    return validator_.Resolve(handle, mapping_.data());
  }
  uint64_t incarnation() const { return validator_.incarnation(); }
  uint64_t size() const { return validator_.size(); }
  // The start of the mapping (for page-locking it; regions are reached through Resolve).
  uint8_t* data() const { return mapping_.data(); }

 private:
  MappedArena(SharedMapping mapping, ArenaHandleValidator validator)
      : mapping_(std::move(mapping)), validator_(validator) {}
  SharedMapping mapping_;
  ArenaHandleValidator validator_;
};

}  // namespace cairn

#endif  // CAIRN_COMMON_SHM_ARENA_CLIENT_H_
