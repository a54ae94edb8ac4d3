// Sealed memfds and descriptor passing (docs/reliability.md SM1-SM3, test G2).

#include "common/shm/memfd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/shm/fd_passing.h"
#include "common/shm/mapping.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn {
namespace {

using ::cairn::testing::StatusIs;

struct SocketPair {
  UniqueFd a, b;
};

SocketPair MakeSocketPair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return {};
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

int CountOpenFds() {
  int n = 0;
  for (int fd = 0; fd < 1024; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1) ++n;
  }
  return n;
}

TEST(MemfdTest, CreatesASealedMemfdThatValidates) {
  const uint64_t size = 4 * PageSize();

  auto fd = CreateSealedMemfd("test-arena", size);

  ASSERT_TRUE(fd.ok()) << fd.status();
  auto validated = ValidateSealedMemfd(fd->get(), size);
  ASSERT_TRUE(validated.ok()) << validated.status();
  EXPECT_EQ(*validated, size);
}

TEST(MemfdTest, SealsStopTruncationAndGrowth) {
  auto fd = CreateSealedMemfd("test-arena", PageSize());
  ASSERT_TRUE(fd.ok());

  EXPECT_NE(::ftruncate(fd->get(), 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(fd->get(), 2 * PageSize()), 0);
  EXPECT_EQ(errno, EPERM);
}

TEST(MemfdTest, RejectsBadSizes) {
  EXPECT_THAT(CreateSealedMemfd("x", 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CreateSealedMemfd("x", PageSize() + 1), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MemfdTest, ValidatorRejectsEverythingButAProperlySealedMemfd) {
  const uint64_t page = PageSize();
  // Unsealed memfd.
  UniqueFd unsealed(::memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(unsealed.valid());
  ASSERT_EQ(::ftruncate(unsealed.get(), page), 0);
  // Memfd missing the grow seal.
  UniqueFd no_grow(::memfd_create("nogrow", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_EQ(::ftruncate(no_grow.get(), page), 0);
  ASSERT_EQ(::fcntl(no_grow.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL), 0);
  // Memfd missing the shrink seal.
  UniqueFd no_shrink(::memfd_create("noshrink", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_EQ(::ftruncate(no_shrink.get(), page), 0);
  ASSERT_EQ(::fcntl(no_shrink.get(), F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SEAL), 0);
  // A regular file, /dev/zero and a socket.
  std::string path = ::testing::TempDir() + "/memfd_test_regular";
  UniqueFd regular(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_EQ(::ftruncate(regular.get(), page), 0);
  UniqueFd dev_zero(::open("/dev/zero", O_RDWR | O_CLOEXEC));
  SocketPair sp = MakeSocketPair();

  for (int fd : {unsealed.get(), no_grow.get(), no_shrink.get(), regular.get(), dev_zero.get(),
                 sp.a.get()}) {
    EXPECT_THAT(ValidateSealedMemfd(fd, page), StatusIs(absl::StatusCode::kInvalidArgument))
        << "fd " << fd;
  }
  ::unlink(path.c_str());
}

TEST(MemfdTest, ValidatorRejectsASizeMismatch) {
  auto fd = CreateSealedMemfd("x", 2 * PageSize());
  ASSERT_TRUE(fd.ok());

  EXPECT_THAT(ValidateSealedMemfd(fd->get(), PageSize()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// The arena crosses a process boundary: the child receives the memfd, validates it, maps it
// and writes a pattern; the parent sees the pattern through its own mapping.
TEST(FdPassingTest, PassesAMemfdToAnotherProcess) {
  const uint64_t size = 2 * PageSize();
  auto memfd = CreateSealedMemfd("shared", size);
  ASSERT_TRUE(memfd.ok());
  auto parent_map = SharedMapping::Map(memfd->get(), size, true);
  ASSERT_TRUE(parent_map.ok());
  SocketPair sp = MakeSocketPair();
  ASSERT_TRUE(sp.a.valid());

  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    sp.a.Reset();
    auto msg = ReceiveWithFds(sp.b.get(), 256, 1);
    if (!msg.ok() || msg->fds.size() != 1 || msg->payload != "arena v1") ::_exit(2);
    auto checked = ValidateSealedMemfd(msg->fds[0].get(), size);
    if (!checked.ok()) ::_exit(3);
    auto creds = GetPeerCredentials(sp.b.get());
    if (!creds.ok() || creds->uid != ::getuid()) ::_exit(4);
    auto map = SharedMapping::Map(msg->fds[0].get(), *checked, true);
    if (!map.ok()) ::_exit(5);
    for (uint64_t i = 0; i < size; ++i) map->data()[i] = static_cast<uint8_t>(i * 7);
    ::_exit(0);
  }
  sp.b.Reset();
  int fds[] = {memfd->get()};

  CAIRN_ASSERT_OK(SendWithFds(sp.a.get(), "arena v1", fds));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);

  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  for (uint64_t i = 0; i < size; ++i) {
    ASSERT_EQ(parent_map->data()[i], static_cast<uint8_t>(i * 7)) << i;
  }
}

TEST(FdPassingTest, TooManyDescriptorsAreRejectedAndClosed) {
  SocketPair sp = MakeSocketPair();
  std::vector<UniqueFd> owned;
  std::vector<int> raw;
  for (int i = 0; i < 3; ++i) {
    owned.emplace_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    raw.push_back(owned.back().get());
  }
  int before = CountOpenFds();

  CAIRN_ASSERT_OK(SendWithFds(sp.a.get(), "x", raw));
  auto msg = ReceiveWithFds(sp.b.get(), 16, 1);

  EXPECT_THAT(msg, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(CountOpenFds(), before);  // Nothing leaked.
}

TEST(FdPassingTest, PeerCloseIsUnavailable) {
  SocketPair sp = MakeSocketPair();
  sp.a.Reset();

  EXPECT_THAT(ReceiveWithFds(sp.b.get(), 16, 1), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(FdPassingTest, SendRejectsBadSizes) {
  SocketPair sp = MakeSocketPair();
  std::vector<int> nine(9, 0);

  EXPECT_THAT(SendWithFds(sp.a.get(), "", {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SendWithFds(sp.a.get(), "x", nine), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn
