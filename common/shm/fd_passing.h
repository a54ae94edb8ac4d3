#ifndef CAIRN_COMMON_SHM_FD_PASSING_H_
#define CAIRN_COMMON_SHM_FD_PASSING_H_

// Passing descriptors over Unix stream sockets with SCM_RIGHTS (docs/reliability.md SM2, SM3).

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/shm/unique_fd.h"

namespace cairn {

// The most descriptors one message may carry.
inline constexpr size_t kMaxFdsPerMessage = 8;

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Returns the SO_PEERCRED credentials of the peer of Unix socket `sock`.
absl::StatusOr<PeerCredentials> GetPeerCredentials(int sock);

// Sends `payload` (1..65536 bytes) with `fds` (at most kMaxFdsPerMessage) attached, in one
// sendmsg. Retries EINTR; Unavailable if the peer is gone; InvalidArgument for bad sizes.
absl::Status SendWithFds(int sock, absl::string_view payload, absl::Span<const int> fds);

struct ReceivedMessage {
  std::string payload;
  std::vector<UniqueFd> fds;
};

// Receives one message of at most `max_payload` bytes with at most `max_fds` descriptors,
// with MSG_CMSG_CLOEXEC. A message whose control data was truncated (MSG_CTRUNC), that
// carries more than `max_fds` descriptors or any control message other than SCM_RIGHTS is
// rejected with InvalidArgument, and every descriptor that did arrive is closed.
// Unavailable on end of stream.
absl::StatusOr<ReceivedMessage> ReceiveWithFds(int sock, size_t max_payload, size_t max_fds);

}  // namespace cairn

#endif  // CAIRN_COMMON_SHM_FD_PASSING_H_
