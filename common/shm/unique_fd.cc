#include "common/shm/unique_fd.h"

#include <unistd.h>

namespace cairn {

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);  // close() errors on a descriptor we own carry no action.
  fd_ = fd;
}

}  // namespace cairn
