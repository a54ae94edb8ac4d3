#ifndef CAIRN_COMMON_NET_UNIX_SOCKET_PATH_H_
#define CAIRN_COMMON_NET_UNIX_SOCKET_PATH_H_

// Making a Unix socket path free for bind() without taking it from a running daemon.

#include <string>

#include "absl/status/status.h"

namespace cairn {

// Prepares `path` for a new listening Unix socket. Nothing there: OK, if its folder exists
// (else NotFound) and this user may create a file in it (else PermissionDenied). A socket that no
// process listens on (left by a crash): removed, OK. A socket a process accepts connections on:
// AlreadyExists naming the path, so that a second daemon started on the same socket refuses
// instead of unlinking the first one's socket and taking its clients. A file that is not a
// socket: FailedPrecondition (never removed). InvalidArgument if `path` does not fit in
// sockaddr_un; PermissionDenied if the socket cannot be probed or removed.
//
// Two daemons starting at the same instant may both find the path free; this check is for the
// operator who starts a second instance, not a lock.
absl::Status PrepareUnixSocketPath(const std::string& path);

}  // namespace cairn

#endif  // CAIRN_COMMON_NET_UNIX_SOCKET_PATH_H_
