// The arena and its descriptor hand-over (reliability-plan.md SM1-SM3, SM10, test G2).

#include "services/cache/arena/arena.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

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

TEST(ArenaTest, PeerReceivesSealedArenaAndSeesTheSameBytes) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  ArenaFdServerOptions so;
  so.socket_path = SocketPath("ok");
  auto server = ArenaFdServer::Create(so, arena->fd(), arena->incarnation(), arena->size());
  ASSERT_TRUE(server.ok()) << server.status();
  auto region = arena->allocator().Allocate(4096, RegionKind::kTail);
  ASSERT_TRUE(region.ok());
  auto ours = arena->Resolve(region->handle);
  ASSERT_TRUE(ours.ok());
  std::memcpy(ours->data(), "hello arena", 12);

  ArenaClientOptions co;
  co.socket_path = so.socket_path;
  co.expected_incarnation = arena->incarnation();
  auto peer = MappedArena::Connect(co);

  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->size(), kArenaBytes);
  auto theirs = peer->Resolve(region->handle);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_STREQ(reinterpret_cast<const char*>(theirs->data()), "hello arena");
  EXPECT_THAT(peer->Resolve({arena->incarnation(), kArenaBytes, 1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ((*server)->granted(), 1u);
}

TEST(ArenaTest, PeerWithDisallowedUidIsRefused) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  ArenaFdServerOptions so;
  so.socket_path = SocketPath("refused");
  so.arena_uids = {::geteuid() + 1};
  auto server = ArenaFdServer::Create(so, arena->fd(), arena->incarnation(), arena->size());
  ASSERT_TRUE(server.ok()) << server.status();
  ArenaClientOptions co;
  co.socket_path = so.socket_path;

  auto peer = MappedArena::Connect(co);

  EXPECT_THAT(peer.status(), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ((*server)->refused(), 1u);
}

TEST(ArenaTest, ClientRejectsWrongServerUidAndStaleIncarnation) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  ArenaFdServerOptions so;
  so.socket_path = SocketPath("checks");
  auto server = ArenaFdServer::Create(so, arena->fd(), arena->incarnation(), arena->size());
  ASSERT_TRUE(server.ok()) << server.status();
  ArenaClientOptions wrong_uid;
  wrong_uid.socket_path = so.socket_path;
  wrong_uid.server_uid = ::geteuid() + 1;
  ArenaClientOptions stale;
  stale.socket_path = so.socket_path;
  stale.expected_incarnation = arena->incarnation() ^ 1;

  EXPECT_THAT(MappedArena::Connect(wrong_uid).status(),
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
