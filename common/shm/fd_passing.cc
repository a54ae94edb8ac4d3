#include "common/shm/fd_passing.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cairn {
namespace {
constexpr size_t kMaxPayload = 65536;
}  // namespace

absl::StatusOr<PeerCredentials> GetPeerCredentials(int sock) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("SO_PEERCRED: ", std::strerror(errno)));
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

absl::Status SendWithFds(int sock, absl::string_view payload, absl::Span<const int> fds) {
  if (payload.empty() || payload.size() > kMaxPayload) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload of ", payload.size(), " bytes is outside 1..", kMaxPayload));
  }
  if (fds.size() > kMaxFdsPerMessage) {
    return absl::InvalidArgumentError(
        absl::StrCat(fds.size(), " descriptors exceed the limit ", kMaxFdsPerMessage));
  }
  struct iovec iov;
  iov.iov_base = const_cast<char*>(payload.data());
  iov.iov_len = payload.size();
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  std::memset(control, 0, sizeof(control));
  struct msghdr msg;
  std::memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  while (true) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) {
      if (static_cast<size_t>(n) != payload.size()) {
        return absl::UnavailableError("short sendmsg on descriptor socket");
      }
      return absl::OkStatus();
    }
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET) {
      return absl::UnavailableError(absl::StrCat("sendmsg: ", std::strerror(errno)));
    }
    return absl::InternalError(absl::StrCat("sendmsg: ", std::strerror(errno)));
  }
}

absl::StatusOr<ReceivedMessage> ReceiveWithFds(int sock, size_t max_payload, size_t max_fds) {
  if (max_payload == 0 || max_payload > kMaxPayload || max_fds > kMaxFdsPerMessage) {
    return absl::InvalidArgumentError("bad receive limits");
  }
  ReceivedMessage out;
  out.payload.resize(max_payload);
  struct iovec iov;
  iov.iov_base = out.payload.data();
  iov.iov_len = out.payload.size();
  // Room for the limit plus one, so an over-full message shows up as too many rather than
  // only as MSG_CTRUNC.
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * (kMaxFdsPerMessage + 1))];
  struct msghdr msg;
  std::memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * (max_fds + 1));
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return absl::UnavailableError(absl::StrCat("recvmsg: ", std::strerror(errno)));

  // Take ownership of everything that arrived before judging the message.
  bool foreign_control = false;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        out.fds.emplace_back(fd);
      }
    } else {
      foreign_control = true;
    }
  }
  if (msg.msg_flags & MSG_CTRUNC) {
    return absl::InvalidArgumentError("descriptor message truncated (MSG_CTRUNC)");
  }
  if (foreign_control) return absl::InvalidArgumentError("unexpected control message");
  if (out.fds.size() > max_fds) {
    return absl::InvalidArgumentError(absl::StrCat("message carries ", out.fds.size(),
                                                   " descriptors, at most ", max_fds, " expected"));
  }
  if (n == 0) return absl::UnavailableError("descriptor socket closed by peer");
  if (msg.msg_flags & MSG_TRUNC) return absl::InvalidArgumentError("payload truncated");
  out.payload.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace cairn
