// The arena and its descriptor hand-over (docs/reliability.md SM1-SM3, SM10, test G2).

#include "services/cache/arena/arena.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "services/cache/arena/arena_fd_server.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

constexpr uint64_t kArenaBytes = uint64_t{4} << 20;

std::string SocketPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("cairn-arena-" + std::to_string(::getpid()) + "-" + name + ".sock"))
      .string();
}

std::unique_ptr<Arena> MakeArena() {
  ArenaOptions o;
  o.size_bytes = kArenaBytes;
  o.first_pin_bytes = uint64_t{1} << 20;
  o.pin_step_bytes = uint64_t{256} << 10;
  auto arena = Arena::Create(o);
  return arena.ok() ? std::move(*arena) : nullptr;
}

TEST(ArenaTest, DefaultSizeIsAFractionOfFreeRamUnderTheCap) {
  auto bytes = DefaultArenaBytes(0.5, uint64_t{1} << 30);

  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_GT(*bytes, 0u);
  EXPECT_LE(*bytes, uint64_t{1} << 30);
  EXPECT_THAT(DefaultArenaBytes(0.0, 1).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

// systemd's ProcSubset=pid in the shipped unit hides /proc/meminfo; the shipped config asks for
// the default budget (cache-ram-bytes = 0).
TEST(ArenaTest, DefaultSizeWithoutProcMeminfoComesFromSysinfo) {
  auto bytes = DefaultArenaBytes(0.5, uint64_t{1} << 30, "/nonexistent/meminfo");

  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_GT(*bytes, 0u);
  EXPECT_LE(*bytes, uint64_t{1} << 30);
  EXPECT_EQ(*bytes % static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)), 0u);
}

TEST(ArenaTest, ResolveValidatesEveryHandle) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  auto region = arena->allocator().Allocate(8192, RegionKind::kChunk);
  ASSERT_TRUE(region.ok());

  auto bytes = arena->Resolve(region->handle);

  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->size(), 8192u);
  ArenaHandle stale = region->handle;
  stale.incarnation ^= 1;
  EXPECT_THAT(arena->Resolve(stale), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_TRUE(arena->allocator().Free(region->handle).ok());
  EXPECT_THAT(arena->Resolve(region->handle), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Serves a fresh arena on a per-test socket.
class ArenaFdServerTest : public ::testing::Test {
 protected:
  void Serve(const std::string& name, std::vector<uid_t> arena_uids = {}) {
    arena_ = MakeArena();
    ASSERT_NE(arena_, nullptr);
    ArenaFdServerOptions so;
    so.socket_path = SocketPath(name);
    so.arena_uids = std::move(arena_uids);
    auto server = ArenaFdServer::Create(so, arena_->fd(), arena_->incarnation(), arena_->size());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_.socket_path = so.socket_path;
  }

  std::unique_ptr<Arena> arena_;
  std::unique_ptr<ArenaFdServer> server_;
  ArenaClientOptions client_;
};

TEST_F(ArenaFdServerTest, PeerReceivesSealedArenaAndSeesTheSameBytes) {
  Serve("ok");
  auto region = arena_->allocator().Allocate(4096, RegionKind::kTail);
  ASSERT_TRUE(region.ok());
  auto ours = arena_->Resolve(region->handle);
  ASSERT_TRUE(ours.ok());
  std::memcpy(ours->data(), "hello arena", 12);
  client_.expected_incarnation = arena_->incarnation();

  auto peer = MappedArena::Connect(client_);

  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->size(), kArenaBytes);
  auto theirs = peer->Resolve(region->handle);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_STREQ(reinterpret_cast<const char*>(theirs->data()), "hello arena");
  EXPECT_THAT(peer->Resolve({arena_->incarnation(), kArenaBytes, 1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(server_->granted(), 1u);
}

TEST_F(ArenaFdServerTest, PeerWithDisallowedUidIsRefused) {
  Serve("refused", {::geteuid() + 1});

  auto peer = MappedArena::Connect(client_);

  EXPECT_THAT(peer.status(), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(server_->refused(), 1u);
}

TEST_F(ArenaFdServerTest, ASecondServerOnTheSamePathIsRefusedAndTheFirstKeepsServing) {
  Serve("twice");
  std::unique_ptr<Arena> other = MakeArena();
  ASSERT_NE(other, nullptr);
  ArenaFdServerOptions so;
  so.socket_path = client_.socket_path;

  auto second = ArenaFdServer::Create(so, other->fd(), other->incarnation(), other->size());

  EXPECT_THAT(second.status(), StatusIs(absl::StatusCode::kAlreadyExists));
  client_.expected_incarnation = arena_->incarnation();
  auto peer = MappedArena::Connect(client_);
  EXPECT_TRUE(peer.ok()) << peer.status();
}

TEST_F(ArenaFdServerTest, ClientRejectsWrongServerUidAndStaleIncarnation) {
  Serve("checks");
  ArenaClientOptions wrong_uid = client_;
  wrong_uid.server_uid = ::geteuid() + 1;
  ArenaClientOptions wrong_gid = client_;
  wrong_gid.server_gid = ::getegid() + 1;
  ArenaClientOptions stale = client_;
  stale.expected_incarnation = arena_->incarnation() ^ 1;

  EXPECT_THAT(MappedArena::Connect(wrong_uid).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(MappedArena::Connect(wrong_gid).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(MappedArena::Connect(stale).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(ArenaTest, NoServerIsUnavailable) {
  ArenaClientOptions co;
  co.socket_path = SocketPath("absent");

  EXPECT_THAT(MappedArena::Connect(co).status(), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace cairn::cache
