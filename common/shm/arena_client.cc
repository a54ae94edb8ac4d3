#include "common/shm/arena_client.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/shm/fd_passing.h"
#include "common/shm/memfd.h"
#include "common/shm/unique_fd.h"
#include "common/status/status_macros.h"

namespace cairn {

absl::StatusOr<MappedArena> MappedArena::Connect(const ArenaClientOptions& options) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options.socket_path.empty() || options.socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena socket path \"", options.socket_path, "\" is empty or too long"));
  }
  std::memcpy(addr.sun_path, options.socket_path.data(), options.socket_path.size());
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  const int64_t timeout_us = absl::ToInt64Microseconds(options.timeout);
  timeval tv{static_cast<time_t>(timeout_us / 1000000),
             static_cast<suseconds_t>(timeout_us % 1000000)};
  ::setsockopt(sock.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("connect ", options.socket_path, ": ", std::strerror(errno)));
  }
  ASSIGN_OR_RETURN(PeerCredentials server, GetPeerCredentials(sock.get()));
  const uid_t want_uid = options.server_uid.value_or(::geteuid());
  if (server.uid != want_uid) {
    return absl::PermissionDeniedError(
        absl::StrCat("arena server runs as uid ", server.uid, ", expected ", want_uid));
  }
  if (options.server_gid.has_value() && server.gid != *options.server_gid) {
    return absl::PermissionDeniedError(
        absl::StrCat("arena server runs as gid ", server.gid, ", expected ", *options.server_gid));
  }
  ASSIGN_OR_RETURN(ReceivedMessage message,
                   ReceiveWithFds(sock.get(), sizeof(ArenaGrant), /*max_fds=*/1));
  ArenaGrant grant;  // Copied once, then validated (SM9).
  if (message.payload.size() != sizeof(grant)) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena grant of ", message.payload.size(), " bytes"));
  }
  std::memcpy(&grant, message.payload.data(), sizeof(grant));
  if (grant.magic != kArenaGrantMagic || grant.version != kArenaGrantVersion) {
    return absl::InvalidArgumentError("arena grant has a bad magic or version");
  }
  if (grant.granted != 1) {
    return absl::PermissionDeniedError("the cache daemon refused to share its arena");
  }
  if (message.fds.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena grant carries ", message.fds.size(), " descriptors"));
  }
  if (grant.incarnation == 0 ||
      (options.expected_incarnation != 0 && grant.incarnation != options.expected_incarnation)) {
    return absl::FailedPreconditionError(
        absl::StrCat("arena incarnation ", absl::Hex(grant.incarnation), " is not the expected ",
                     absl::Hex(options.expected_incarnation)));
  }
  ASSIGN_OR_RETURN(uint64_t size, ValidateSealedMemfd(message.fds[0].get(), grant.size_bytes));
  ASSIGN_OR_RETURN(SharedMapping mapping,
                   SharedMapping::Map(message.fds[0].get(), size, /*writable=*/true));
  return MappedArena(std::move(mapping), ArenaHandleValidator(grant.incarnation, size));
}

}  // namespace cairn
