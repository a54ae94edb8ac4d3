#include "common/net/unix_socket_path.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cairn {

absl::Status PrepareUnixSocketPath(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("unix socket path \"", path, "\" is empty or ",
                                                   "longer than ", sizeof(addr.sun_path) - 1,
                                                   " bytes"));
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return absl::PermissionDeniedError(absl::StrCat("stat ", path, ": ", std::strerror(errno)));
    }
    // bind() would fail in the folder; say which folder and why (gRPC says only that no
    // address could be added).
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::NotFoundError(
          absl::StrCat("the folder of socket ", path, " does not exist (create ", dir, ")"));
    }
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create socket ", path, ": ", dir, " is not writable by this user"));
    }
    return absl::OkStatus();
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a socket"));
  }
  // A connect that succeeds means a process listens there: its socket, not a stale one.
  // Non-blocking, so that a listener whose backlog is full answers EAGAIN instead of blocking.
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  const int connect_errno = errno;
  ::close(fd);
  if (rc == 0 || connect_errno == EAGAIN) {  // EAGAIN: listening, its backlog full.
    return absl::AlreadyExistsError(
        absl::StrCat("another process is listening on ", path,
                     " (is this daemon already running? stop it first, or choose another path)"));
  }
  if (connect_errno == EACCES || connect_errno == EPERM) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot probe ", path, ": ", std::strerror(connect_errno)));
  }
  // ECONNREFUSED: nobody listens; the socket was left by a process that died.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot remove stale socket ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace cairn
