#ifndef CAIRN_SERVICES_CACHE_ARENA_ARENA_FD_SERVER_H_
#define CAIRN_SERVICES_CACHE_ARENA_ARENA_FD_SERVER_H_

// Hands the arena memfd to inference daemons over a Unix stream socket with SCM_RIGHTS, after
// checking the peer's SO_PEERCRED (docs/reliability.md SM2, SM3).

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
#include "common/shm/arena_client.h"
#include "common/shm/arena_handle.h"
#include "common/shm/mapping.h"
#include "common/shm/unique_fd.h"

namespace cairn::cache {

// The grant format and the receiving side live in common/shm/arena_client.h (the inference
// daemon uses them too); these names keep the cache's code unchanged.
using ::cairn::ArenaClientOptions;
using ::cairn::ArenaGrant;
using ::cairn::kArenaGrantMagic;
using ::cairn::kArenaGrantVersion;
using ::cairn::MappedArena;

struct ArenaFdServerOptions {
  std::string socket_path;        // Created (a stale socket file is replaced).
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
  // InvalidArgument for an empty or too long path, AlreadyExists when another process listens
  // on the path (PrepareUnixSocketPath).
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

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_ARENA_ARENA_FD_SERVER_H_
