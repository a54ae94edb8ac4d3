#include "services/cache/arena/arena_fd_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/net/unix_socket_path.h"
#include "common/shm/fd_passing.h"
#include "common/shm/memfd.h"
#include "common/status/status_macros.h"

namespace cairn::cache {
namespace {

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("bad unix socket path '", path, "'"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ArenaFdServer>> ArenaFdServer::Create(
    const ArenaFdServerOptions& options, int memfd, uint64_t incarnation, uint64_t size_bytes) {
  ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(options.socket_path));
  UniqueFd listen_fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listen_fd.valid()) return ErrnoError("socket");
  // A stale socket from a previous run is removed; a live one (a second cairn-cache on the same
  // path) is refused rather than taken from the daemon that serves it.
  RETURN_IF_ERROR(PrepareUnixSocketPath(options.socket_path));
  if (::bind(listen_fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoError(absl::StrCat("bind ", options.socket_path));
  }
  if (::chmod(options.socket_path.c_str(), options.socket_mode) != 0) {
    return ErrnoError(absl::StrCat("chmod ", options.socket_path));
  }
  if (::listen(listen_fd.get(), options.listen_backlog) != 0) return ErrnoError("listen");
  UniqueFd stop_fd(::eventfd(0, EFD_CLOEXEC));
  if (!stop_fd.valid()) return ErrnoError("eventfd");
  return std::unique_ptr<ArenaFdServer>(new ArenaFdServer(
      options, std::move(listen_fd), std::move(stop_fd), memfd, incarnation, size_bytes));
}

ArenaFdServer::ArenaFdServer(ArenaFdServerOptions options, UniqueFd listen_fd, UniqueFd stop_fd,
                             int memfd, uint64_t incarnation, uint64_t size_bytes)
    : options_(std::move(options)),
      listen_fd_(std::move(listen_fd)),
      stop_fd_(std::move(stop_fd)),
      memfd_(memfd),
      incarnation_(incarnation),
      size_bytes_(size_bytes),
      thread_([this] { Serve(); }) {}

ArenaFdServer::~ArenaFdServer() {
  const uint64_t one = 1;
  if (::write(stop_fd_.get(), &one, sizeof(one)) != sizeof(one)) {
    CAIRN_LOG(ERROR) << "cannot signal the arena fd server to stop: " << std::strerror(errno);
  }
  thread_.join();
  ::unlink(options_.socket_path.c_str());
}

uint64_t ArenaFdServer::granted() const { return granted_.load(); }
uint64_t ArenaFdServer::refused() const { return refused_.load(); }

bool ArenaFdServer::Allowed(uid_t uid, gid_t gid) const {
  const bool uid_ok = options_.arena_uids.empty()
                          ? uid == ::geteuid()
                          : std::find(options_.arena_uids.begin(), options_.arena_uids.end(),
                                      uid) != options_.arena_uids.end();
  const bool gid_ok = options_.arena_gids.empty() ||
                      std::find(options_.arena_gids.begin(), options_.arena_gids.end(), gid) !=
                          options_.arena_gids.end();
  return uid_ok && gid_ok;
}

void ArenaFdServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      CAIRN_LOG(ERROR) << "arena fd server poll failed: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) continue;  // The peer may have gone already; keep serving.
    HandleConnection(conn.get());
  }
}

void ArenaFdServer::HandleConnection(int conn) {
  // Check the peer before doing anything else (SM2).
  absl::StatusOr<PeerCredentials> peer = GetPeerCredentials(conn);
  ArenaGrant grant;
  grant.magic = kArenaGrantMagic;
  grant.version = kArenaGrantVersion;
  grant.incarnation = incarnation_;
  grant.size_bytes = size_bytes_;
  const bool allowed = peer.ok() && Allowed(peer->uid, peer->gid);
  grant.granted = allowed ? 1 : 0;
  std::vector<int> fds;
  if (allowed) fds.push_back(memfd_);
  // Counted before sending, so a peer that has its answer sees the count.
  ++(allowed ? granted_ : refused_);
  if (!allowed) {
    CAIRN_LOG(WARNING) << "arena refused to peer uid " << (peer.ok() ? peer->uid : 0) << " pid "
                       << (peer.ok() ? peer->pid : 0);
  }
  absl::Status sent = SendWithFds(
      conn, absl::string_view(reinterpret_cast<const char*>(&grant), sizeof(grant)), fds);
  if (!sent.ok()) CAIRN_LOG(WARNING) << "arena grant not delivered: " << sent;
}

}  // namespace cairn::cache
