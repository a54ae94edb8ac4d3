#ifndef CAIRN_SERVICES_CACHE_ARENA_ARENA_FD_SERVER_H_
#define CAIRN_SERVICES_CACHE_ARENA_ARENA_FD_SERVER_H_

// Hands the arena memfd to inference daemons over a Unix stream socket with SCM_RIGHTS, after
// checking the peer's SO_PEERCRED (docs/reliability.md SM2, SM3), and the receiving side.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/shm/arena_handle.h"
#include "common/shm/mapping.h"
#include "common/shm/unique_fd.h"

namespace cairn::cache {

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

struct ArenaFdServerOptions {
  std::string socket_path;        // Created (an existing socket file is replaced).
  uint32_t socket_mode = 0660;    // chmod after bind: the units set UMask=0077 (SM2).
  std::vector<uid_t> arena_uids;  // Peers that may receive the arena; empty = our own uid.
  std::vector<gid_t> arena_gids;  // If non-empty, the peer's gid must be one of these.
  int listen_backlog = 16;
};

// Serves one arena memfd. Each accepted connection gets one ArenaGrant: with the descriptor
// attached when the peer's uid (and gid, if configured) is allowed, refused otherwise; then
// the connection is closed. Runs one accept thread.
//
// Thread-safe; the destructor stops the thread and removes the socket file.
class ArenaFdServer {
 public:
  // Binds `options.socket_path` and starts serving `memfd` (not owned; must outlive this
  // object) of `size_bytes` for arena `incarnation`. Internal with errno text on failure,
  // InvalidArgument for an empty or too long path.
  static absl::StatusOr<std::unique_ptr<ArenaFdServer>> Create(const ArenaFdServerOptions&,
                                                               int memfd, uint64_t incarnation,
                                                               uint64_t size_bytes);
  ~ArenaFdServer();
  ArenaFdServer(const ArenaFdServer&) = delete;
  ArenaFdServer& operator=(const ArenaFdServer&) = delete;

  // Connections granted (descriptor sent) and refused so far.
  uint64_t granted() const;
  uint64_t refused() const;

 private:
  ArenaFdServer(ArenaFdServerOptions options, UniqueFd listen_fd, UniqueFd stop_fd, int memfd,
                uint64_t incarnation, uint64_t size_bytes);
  void Serve();
  void HandleConnection(int conn);
  bool Allowed(uid_t uid, gid_t gid) const;

  const ArenaFdServerOptions options_;
  UniqueFd listen_fd_;
  UniqueFd stop_fd_;  // eventfd; written by the destructor.
  const int memfd_;
  const uint64_t incarnation_;
  const uint64_t size_bytes_;
  std::atomic<uint64_t> granted_{0};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

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

 private:
  MappedArena(SharedMapping mapping, ArenaHandleValidator validator)
      : mapping_(std::move(mapping)), validator_(validator) {}
  SharedMapping mapping_;
  ArenaHandleValidator validator_;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_ARENA_ARENA_FD_SERVER_H_
