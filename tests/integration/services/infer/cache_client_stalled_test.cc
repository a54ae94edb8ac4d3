// The cache daemon's client, GrpcStateCache, against a cache that answers its calls but never
// reads its session stream and answers restore leases only as the test asks: writes that block
// on flow control, lease answers that cross their release, and a ready lease whose session ends
// before the restore's first poll.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "services/cache/arena/arena.h"
#include "services/cache/arena/arena_fd_server.h"
#include "services/infer/cache_client/grpc_state_cache.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "tests/integration/services/cache/fake_infer.h"
#include "tests/integration/services/infer/cache_client_layout.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

using ::cairn::infer::testing::kMaxRows;
using ::cairn::infer::testing::Layout;
using ::cairn::testing::StatusIs;

class DeafCache final : public cache::v1::CacheService::Service {
 public:
  static constexpr uint64_t kLease = 7;

  DeafCache() {
    cache::ArenaOptions ao;
    ao.size_bytes = 1 << 20;
    absl::StatusOr<std::unique_ptr<cache::Arena>> arena = cache::Arena::Create(ao);
    EXPECT_TRUE(arena.ok()) << arena.status();
    arena_ = *std::move(arena);
    cache::ArenaFdServerOptions fo;
    fo.socket_path = cache::testing::TempPath("deaf-arena.sock");
    absl::StatusOr<std::unique_ptr<cache::ArenaFdServer>> fd_server =
        cache::ArenaFdServer::Create(fo, arena_->fd(), arena_->incarnation(), arena_->size());
    EXPECT_TRUE(fd_server.ok()) << fd_server.status();
    fd_server_ = *std::move(fd_server);
    arena_socket_ = fo.socket_path;
    address_ = "unix:" + cache::testing::TempPath("deaf-grpc.sock");
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
    builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8192);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
  }
  ~DeafCache() override {
    stop_.store(true);
    server_->Shutdown();
  }

  const std::string& address() const { return address_; }
  int sessions() const { return sessions_.load(); }
  // Leases answered ready at once (no rows, an empty private state) from now on.
  void AnswerReady() { ready_.store(true); }
  // ReleaseLease answers after `delay` from now on.
  void DelayReleases(absl::Duration delay) {
    release_delay_ms_.store(absl::ToInt64Milliseconds(delay));
  }
  // Lookup answers after `delay` from now on.
  void DelayLookups(absl::Duration delay) {
    lookup_delay_ms_.store(absl::ToInt64Milliseconds(delay));
  }
  // Ends the sessions open now (their streams close); later ones stay open.
  void EndOpenSessions() { ended_.store(sessions_.load()); }
  int releases() const { return releases_.load(); }

  grpc::Status Session(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<cache::v1::SessionServerMessage,
                                                cache::v1::SessionClientMessage>* stream) override {
    cache::v1::SessionClientMessage hello;
    if (!stream->Read(&hello)) return grpc::Status::CANCELLED;
    const int session = sessions_.fetch_add(1) + 1;
    cache::v1::SessionServerMessage m;
    cache::v1::Welcome* welcome = m.mutable_welcome();
    welcome->set_session_id(static_cast<uint64_t>(session));
    welcome->set_cache_incarnation(1);
    welcome->set_heartbeat_interval_ms(60000);
    cache::v1::ArenaInfo* arena = welcome->mutable_arena();
    arena->set_incarnation(arena_->incarnation());
    arena->set_size_bytes(arena_->size());
    arena->set_fd_socket_path(arena_socket_);
    arena->set_first_pin_bytes(arena_->size());
    arena->set_pin_step_bytes(arena_->size());
    {
      MutexLock lock(&mu_);
      stream->Write(m);
      stream_ = stream;
    }
    while (!stop_.load() && !ctx->IsCancelled() && ended_.load() < session) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    MutexLock lock(&mu_);
    if (stream_ == stream) stream_ = nullptr;
    return grpc::Status::OK;
  }
  grpc::Status Lookup(grpc::ServerContext*, const cache::v1::LookupRequest*,
                      cache::v1::LookupResponse*) override {
    absl::SleepFor(absl::Milliseconds(lookup_delay_ms_.load()));
    return grpc::Status::OK;
  }
  grpc::Status AcquireRestore(grpc::ServerContext*, const cache::v1::AcquireRestoreRequest*,
                              cache::v1::RestoreLease* lease) override {
    lease->set_lease_id(next_lease_.fetch_add(1));
    lease->set_ready(ready_.load());
    return grpc::Status::OK;
  }
  grpc::Status ReleaseLease(grpc::ServerContext*, const cache::v1::ReleaseLeaseRequest* request,
                            cache::v1::ReleaseLeaseResponse*) override {
    releases_.fetch_add(1);
    absl::SleepFor(absl::Milliseconds(release_delay_ms_.load()));
    MutexLock lock(&mu_);
    if (stream_ != nullptr && request->lease_id() >= kLease) {
      cache::v1::SessionServerMessage ready;
      ready.mutable_lease_ready()->set_lease_id(request->lease_id());
      ready.mutable_lease_ready()->set_ok(true);
      stream_->Write(ready);
      cache::v1::SessionServerMessage spill;
      spill.mutable_spill_request()->set_spill_id(1);
      stream_->Write(spill);
    }
    return grpc::Status::OK;
  }
  grpc::Status RegisterModel(grpc::ServerContext*, const cache::v1::RegisterModelRequest*,
                             cache::v1::RegisterModelResponse* response) override {
    response->set_model_id(1);
    return grpc::Status::OK;
  }

 private:
  std::unique_ptr<cache::Arena> arena_;
  std::unique_ptr<cache::ArenaFdServer> fd_server_;
  std::string arena_socket_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<bool> stop_{false};
  std::atomic<int> sessions_{0};
  std::atomic<uint64_t> next_lease_{kLease};
  std::atomic<bool> ready_{false};
  std::atomic<int64_t> release_delay_ms_{0};
  std::atomic<int64_t> lookup_delay_ms_{0};
  std::atomic<int> ended_{0};
  std::atomic<int> releases_{0};
  Mutex mu_;
  grpc::ServerReaderWriter<cache::v1::SessionServerMessage, cache::v1::SessionClientMessage>*
      stream_ ABSL_GUARDED_BY(mu_) = nullptr;
};

GrpcStateCacheOptions DeafCacheClientOptions(const std::string& address) {
  GrpcStateCacheOptions o;
  o.address = address;
  o.instance_name = "cache-client-test";
  o.slots = 1;
  o.model_name = "driver";
  o.identity.set_digest("cache-client-test-model");
  o.layout = Layout();
  o.reconnect_min = absl::Milliseconds(20);
  o.reconnect_max = absl::Milliseconds(200);
  return o;
}

// A write the cache daemon never reads (SlotIdle here, as the scheduler's SpillDone, SlotBusy
// or a heartbeat) blocks under the write lock once flow control fills. After
// stream_write_timeout the watchdog cancels the stream, which fails the write and ends the
// session; the session thread then reconnects.
TEST(CacheClientStalledTest, AWriteTheCacheNeverReadsEndsTheSessionAfterTheWriteTimeout) {
  DeafCache deaf;
  GrpcStateCacheOptions o = DeafCacheClientOptions(deaf.address());
  o.stream_write_timeout = absl::Milliseconds(300);
  GrpcStateCache cache(o, [] {});
  ASSERT_TRUE(cache.WaitConnected(absl::Seconds(10)));
  const uint64_t generation = cache.generation();

  absl::Duration longest;
  int64_t writes = 0;
  const absl::Time t0 = absl::Now();
  while (cache.connected() && absl::Now() - t0 < absl::Seconds(60)) {
    const absl::Time w0 = absl::Now();
    cache.SlotIdle(0);
    longest = std::max(longest, absl::Now() - w0);
    ++writes;
  }
  EXPECT_FALSE(cache.connected()) << writes << " writes never blocked";
  // The last write blocked until the watchdog ended it, and not much longer.
  EXPECT_GE(longest, o.stream_write_timeout) << writes << " writes";
  EXPECT_LT(longest, absl::Seconds(5));

  ASSERT_TRUE(cache.WaitConnected(absl::Seconds(10)));
  EXPECT_GT(cache.generation(), generation);
  EXPECT_GE(deaf.sessions(), 2);
  cache.Shutdown();
}

// A call the cache does not answer within rpc_timeout (a stopped or swamped cache daemon) ends
// the session at once: the requests behind it find no session and go on without the cache
// instead of each waiting out the timeout on the scheduler thread. The session thread then
// reconnects.
TEST(CacheClientStalledTest, ACallPastTheRpcTimeoutEndsTheSession) {
  DeafCache deaf;
  GrpcStateCacheOptions o = DeafCacheClientOptions(deaf.address());
  o.rpc_timeout = absl::Milliseconds(200);
  GrpcStateCache cache(o, [] {});
  ASSERT_TRUE(cache.WaitConnected(absl::Seconds(10)));
  const uint64_t generation = cache.generation();
  deaf.DelayLookups(absl::Seconds(2));
  const std::vector<int32_t> prompt = {1, 2, 3};

  EXPECT_THAT(cache.Lookup(prompt, 0, 0, "c").status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(cache.connected() && cache.generation() == generation);
  EXPECT_THAT(cache.Lookup(prompt, 0, 0, "c").status(), StatusIs(absl::StatusCode::kUnavailable));

  deaf.DelayLookups(absl::ZeroDuration());
  ASSERT_TRUE(cache.WaitConnected(absl::Seconds(10)));
  EXPECT_GT(cache.generation(), generation);
  EXPECT_TRUE(cache.Lookup(prompt, 0, 0, "c").ok());
  cache.Shutdown();
}

// Restores checkpoint 42 into `slot` for a request already cancelled (its lease released not
// ready), then waits until `wakes` says the DeafCache's LeaseReady crossing the release and the
// SpillRequest after it were handled.
void RestoreCancelledAndWaitForItsAnswer(GrpcStateCache& cache, KvMemory* kv, int slot,
                                         const std::atomic<int>& wakes) {
  const int woken = wakes.load();
  RestoreLimits cancelled;
  cancelled.cancelled = [] { return true; };
  absl::StatusOr<RestoreStats> r = cache.Restore(42, slot, "a", kv, cancelled);
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kCancelled));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (wakes.load() == woken && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_GT(wakes.load(), woken);
}

// The LeaseReady of a restore given up on (here: its request was cancelled) that crosses the
// restore's ReleaseLease is never read: it is dropped, not kept until the session ends.
TEST(CacheClientStalledTest, ALeaseAnswerCrossingItsReleaseIsNotKept) {
  DeafCache deaf;
  std::atomic<int> wakes{0};
  GrpcStateCache cache(DeafCacheClientOptions(deaf.address()), [&wakes] { wakes.fetch_add(1); });
  ASSERT_TRUE(cache.WaitConnected(absl::Seconds(10)));
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> kv =
      SlotKvMemory::Create(Layout(), {.slots = 1, .max_rows = kMaxRows});
  ASSERT_TRUE(kv.ok()) << kv.status();

  RestoreCancelledAndWaitForItsAnswer(cache, kv->get(), 0, wakes);

  EXPECT_EQ(cache.LeaseAnswersForTest(), 0u);
  EXPECT_TRUE(cache.connected());
  cache.Shutdown();
}

// The same with another restore still waiting: the crossing answer is dropped by the next
// poll, not kept for as long as any restore runs (restores that overlap without end would
// keep every such answer).
TEST(CacheClientStalledTest, ALeaseAnswerCrossingItsReleaseIsNotKeptWhileOthersWait) {
  DeafCache deaf;
  std::atomic<int> wakes{0};
  GrpcStateCacheOptions o = DeafCacheClientOptions(deaf.address());
  o.slots = 2;
  GrpcStateCache cache(o, [&wakes] { wakes.fetch_add(1); });
  ASSERT_TRUE(cache.WaitConnected(absl::Seconds(10)));
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> kv =
      SlotKvMemory::Create(Layout(), {.slots = 2, .max_rows = kMaxRows});
  ASSERT_TRUE(kv.ok()) << kv.status();
  CAIRN_ASSERT_OK(cache.StartRestore(41, 1, "b", kv->get()));

  RestoreCancelledAndWaitForItsAnswer(cache, kv->get(), 0, wakes);
  absl::StatusOr<std::optional<RestoreStats>> polled = cache.PollRestore(1, kv->get(), {});

  ASSERT_TRUE(polled.ok()) << polled.status();
  EXPECT_FALSE(polled->has_value());
  EXPECT_EQ(cache.LeaseAnswersForTest(), 0u);
  cache.AbandonRestore(1, kv->get(), absl::CancelledError("the test ends"));
  cache.Shutdown();
}

// A lease answered ready at once whose session ends before the restore's first poll: the poll
// copies nothing from the old session's arena and fails Unavailable (the request prefills
// cold), without a ReleaseLease over the ended session (the cache released its leases at the
// session's end; the call would wait up to the RPC timeout for a daemon that may be gone).
TEST(CacheClientStalledTest, AReadyLeaseOfAnEndedSessionIsNotCopiedNorReleased) {
  DeafCache deaf;
  deaf.AnswerReady();
  deaf.DelayReleases(absl::Seconds(5));
  GrpcStateCacheOptions o = DeafCacheClientOptions(deaf.address());
  o.reconnect_min = absl::Seconds(30);  // The session stays ended while the test polls.
  o.reconnect_max = absl::Seconds(30);
  GrpcStateCache cache(o, [] {});
  ASSERT_TRUE(cache.WaitConnected(absl::Seconds(10)));
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> kv =
      SlotKvMemory::Create(Layout(), {.slots = 1, .max_rows = kMaxRows});
  ASSERT_TRUE(kv.ok()) << kv.status();
  CAIRN_ASSERT_OK(cache.StartRestore(42, 0, "a", kv->get()));

  deaf.EndOpenSessions();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (cache.connected() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_FALSE(cache.connected());
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::optional<RestoreStats>> polled = cache.PollRestore(0, kv->get(), {});

  EXPECT_THAT(polled.status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  EXPECT_EQ(deaf.releases(), 0);
  cache.Shutdown();
}

}  // namespace
}  // namespace cairn::infer
