#ifndef CAIRN_TESTS_SUPPORT_FREE_PORT_H_
#define CAIRN_TESTS_SUPPORT_FREE_PORT_H_

// For tests that start a real server process on a TCP port it cannot report back.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace cairn::testing {

// Returns a TCP port that was free a moment ago on 127.0.0.1 (0 if none could be bound). Another
// process may take it before the caller binds it; tests that can bind port 0 should.
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace cairn::testing

#endif  // CAIRN_TESTS_SUPPORT_FREE_PORT_H_
