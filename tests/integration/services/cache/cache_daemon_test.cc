// The cache daemon over gRPC, driven by a test client that plays the inference daemon: real
// shared memory (the arena memfd received over SCM_RIGHTS), real sessions, captures, spills
// of borrowed rows, and restores whose bytes must come back equal.

#include "services/cache/cache_daemon.h"

#include <unistd.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/checksum/checksum.h"
#include "common/concurrency/thread_pool.h"
#include "common/grpc/client.h"
#include "common/grpc/server_runner.h"
#include "common/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "services/cache/arena/arena_fd_server.h"
#include "services/cache/cache_service.h"
#include "tests/integration/services/cache/fake_infer.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using testing::FakeInfer;
using testing::kPrivateBytes;
using testing::Server;
using testing::TempPath;
using testing::Tokens;

// Flips one byte of chunk 1's file under the disk tier at `root`.
bool DamageFirstChunkFile(const std::string& root) {
  return std::system(("f=$(ls " + root + "/chunks/c-0000000000000001-* | head -1) && " +
                      "printf '\\377' | dd of=\"$f\" bs=1 seek=300 conv=notrunc status=none")
                         .c_str()) == 0;
}

// Starts `slot` of `infer`'s session cold (another conversation takes it), as the scheduler
// does before a prefill overwrites it.
grpc::Status StartColdSlot(FakeInfer& infer, uint32_t slot, v1::StartSlotResponse* started) {
  v1::StartSlotRequest start;
  start.set_session_id(infer.session());
  start.set_model_id(infer.model());
  start.set_slot(slot);
  start.set_mode(v1::StartSlotRequest::MODE_COLD);
  return infer.Call(&v1::CacheService::Stub::StartSlot, start, started);
}

TEST(CacheDaemonTest, CaptureSpillAndRestoreFromRamGiveBackEveryByte) {
  Server server;
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  std::vector<uint32_t> a = Tokens(1, 100);

  // Conversation A: captures at 40 (two full chunks + a tail) and 96 (six full chunks).
  std::vector<uint64_t> ids = infer.PrefillCold(0, a, {40, 96}, 11);
  ASSERT_EQ(ids.size(), 2u);
  // Conversation B takes slot 0: A's borrowed chunks must be preserved first (the
  // StartSlot answer carries the spill, which the fake performs).
  infer.PrefillCold(0, Tokens(2, 50), {}, 22);
  // A returns with a longer prompt: the lookup finds the deepest RAM checkpoint.
  std::vector<uint32_t> a2 = a;
  a2.push_back(4242);
  v1::LookupResponse found = infer.Lookup(a2);

  EXPECT_EQ(found.best().tier(), v1::TIER_RAM);
  EXPECT_EQ(found.best().depth(), 96u);
  ASSERT_NO_FATAL_FAILURE(infer.RestoreAndVerify(1, ids[1]));
  ASSERT_NO_FATAL_FAILURE(infer.RestoreAndVerify(0, ids[0]));
}

// The lookup tells the client what overwriting each of its slots would spill first, so that
// its scheduler can take the cheapest of equally good slots (docs/cache-policy.md).
TEST(CacheDaemonTest, LookupListsWhatOverwritingEachSlotWouldSpill) {
  Server server;
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  constexpr uint64_t kChunkBytes = testing::kChunkRows * 2 * testing::kRowBytes;  // 2 components.
  // Slot 0: 100 tokens, a checkpoint at 96 borrows its six full chunks. Slot 1: 20 tokens,
  // no checkpoint: one full chunk of rows no capture has made a chunk of yet.
  infer.PrefillCold(0, Tokens(1, 100), {96}, 11);
  infer.PrefillCold(1, Tokens(2, 20), {}, 22);

  v1::LookupResponse found = infer.Lookup(Tokens(3, 10));

  std::map<uint32_t, uint64_t> spills;
  for (const v1::SlotSpillCost& c : found.slot_spills()) spills[c.slot()] = c.bytes();
  EXPECT_EQ(spills, (std::map<uint32_t, uint64_t>{{0, 6 * kChunkBytes}, {1, kChunkBytes}}));
  // Once slot 0's chunks were preserved (another conversation took the slot), they are in the
  // arena: the slot now only puts its new rows at stake.
  infer.PrefillCold(0, Tokens(4, 8), {}, 33);
  found = infer.Lookup(Tokens(3, 10));
  spills.clear();
  for (const v1::SlotSpillCost& c : found.slot_spills()) spills[c.slot()] = c.bytes();
  EXPECT_EQ(spills, (std::map<uint32_t, uint64_t>{{1, kChunkBytes}}));
}

TEST(CacheDaemonTest, LookupPrefersALiveFrontierOnEqualDepth) {
  Server server;
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  std::vector<uint32_t> a = Tokens(3, 64);
  infer.PrefillCold(0, a, {64}, 5);
  std::vector<uint32_t> a2 = a;
  a2.push_back(1);

  v1::LookupResponse found = infer.Lookup(a2);

  EXPECT_EQ(found.best().tier(), v1::TIER_LIVE);
  EXPECT_EQ(found.best().depth(), 64u);
  EXPECT_EQ(found.best().slot(), 0u);
}

TEST(CacheDaemonTest, InspectionCallsReportTheCheckpoints) {
  Server server;
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  std::vector<uint32_t> a = Tokens(4, 80);
  std::vector<uint64_t> ids = infer.PrefillCold(0, a, {32, 64}, 6);
  std::vector<uint32_t> b = a;
  b.resize(40);
  b.push_back(9);
  b.push_back(9);
  infer.PrefillCold(1, b, {42}, 7);

  v1::GetStatusResponse status;
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::GetStatus, v1::GetStatusRequest(), &status).ok());
  v1::ListCheckpointsResponse list;
  ASSERT_TRUE(
      infer.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list)
          .ok());
  v1::GetTreeResponse tree;
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::GetTree, v1::GetTreeRequest(), &tree).ok());

  EXPECT_EQ(status.ram().checkpoints(), 3u);
  // The automatic cap in effect (RAM budget over the model's private state), not 0.
  EXPECT_EQ(status.ram().max_checkpoints(), (uint64_t{8} << 20) / kPrivateBytes);
  EXPECT_EQ(status.sessions(), 1u);
  EXPECT_GT(status.ram().private_bytes(), 3 * kPrivateBytes - 1);
  EXPECT_EQ(list.checkpoints_size(), 3);
  // Checkpoints at 32, 42 and 64, with a branch point at 40 where b leaves a.
  std::map<uint64_t, uint64_t> depth_to_parent_depth;
  std::map<uint64_t, uint64_t> id_to_depth = {{0, 0}};
  for (const auto& n : tree.nodes()) id_to_depth[n.node_id()] = n.depth();
  for (const auto& n : tree.nodes()) depth_to_parent_depth[n.depth()] = id_to_depth[n.parent_id()];
  EXPECT_EQ(depth_to_parent_depth[32], 0u);
  EXPECT_EQ(depth_to_parent_depth[40], 32u);
  EXPECT_EQ(depth_to_parent_depth[42], 40u);
  EXPECT_EQ(depth_to_parent_depth[64], 40u);
  EXPECT_EQ(tree.nodes_size(), 4);
}

TEST(CacheDaemonTest, StreamEventsDeliversAdmissionsAndFollowsNewOnes) {
  Server server;
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  infer.PrefillCold(0, Tokens(5, 40), {40}, 8);
  auto ctx = NewClientContext(absl::Seconds(20));
  v1::StreamEventsRequest req;
  req.set_follow(true);
  req.set_limit(2);
  auto reader = infer.stub()->StreamEvents(ctx.get(), req);
  v1::Event first;
  ASSERT_TRUE(reader->Read(&first));
  EXPECT_EQ(first.kind(), v1::EVENT_KIND_ADMIT);

  std::thread later([&] { infer.PrefillCold(1, Tokens(6, 40), {40}, 9); });
  v1::Event second;
  bool got = reader->Read(&second);
  later.join();

  ASSERT_TRUE(got);
  EXPECT_GT(second.seq(), first.seq());
  v1::Event none;
  EXPECT_FALSE(reader->Read(&none));  // The limit ends the stream.
  EXPECT_TRUE(reader->Finish().ok());
}

TEST(CacheDaemonTest, AFollowingEventStreamCanBeCancelledWhileItWaits) {
  Server server;
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  infer.PrefillCold(0, Tokens(40, 40), {40}, 8);
  auto ctx = NewClientContext(absl::Seconds(20));
  v1::StreamEventsRequest req;
  req.set_follow(true);
  auto reader = infer.stub()->StreamEvents(ctx.get(), req);
  v1::Event first;
  ASSERT_TRUE(reader->Read(&first));

  ctx->TryCancel();
  v1::Event more;
  while (reader->Read(&more)) {
  }

  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // New events after the cancellation reach nobody and break nothing.
  EXPECT_EQ(infer.PrefillCold(1, Tokens(41, 40), {40}, 9).size(), 1u);
}

TEST(CacheDaemonTest, PeerDeathDropsCheckpointsWithUnspilledBorrowedRows) {
  Server server;
  uint64_t kept = 0;
  uint64_t dropped = 0;
  {
    FakeInfer infer(server.address());
    ASSERT_NO_FATAL_FAILURE(infer.Open());
    // A checkpoint at 16 rows borrows one full chunk from slot 0.
    dropped = infer.PrefillCold(0, Tokens(7, 20), {16}, 10)[0];
    // One with only a tail borrows nothing.
    kept = infer.PrefillCold(1, Tokens(8, 10), {10}, 12)[0];
  }  // The session ends without spilling slot 0's rows.

  FakeInfer next(server.address());
  ASSERT_NO_FATAL_FAILURE(next.Open());
  v1::ListCheckpointsResponse list;
  ASSERT_TRUE(
      next.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list)
          .ok());

  std::vector<uint64_t> ids;
  for (const auto& c : list.checkpoints()) ids.push_back(c.checkpoint_id());
  EXPECT_EQ(ids, std::vector<uint64_t>{kept}) << "dropped was " << dropped;
  // The kept checkpoint still restores from RAM after the other daemon died.
  v1::LookupResponse found = next.Lookup(Tokens(8, 12));
  EXPECT_EQ(found.best().tier(), v1::TIER_RAM);
  EXPECT_EQ(found.best().checkpoint_id(), kept);
}

TEST(CacheDaemonTest, MalformedRequestsAreRejected) {
  Server server;
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());

  struct Case {
    std::string name;
    grpc::Status status;
    grpc::StatusCode want;
  };
  std::vector<Case> cases;
  {
    v1::RegisterModelRequest r;
    r.set_session_id(infer.session());
    r.mutable_identity()->set_digest("x");
    v1::RegisterModelResponse resp;
    cases.push_back({"layout without components",
                     infer.Call(&v1::CacheService::Stub::RegisterModel, r, &resp),
                     grpc::StatusCode::INVALID_ARGUMENT});
    r.mutable_layout()->add_components()->set_id(3);
    cases.push_back({"component ids out of order",
                     infer.Call(&v1::CacheService::Stub::RegisterModel, r, &resp),
                     grpc::StatusCode::INVALID_ARGUMENT});
    v1::RegisterModelRequest other;
    other.set_session_id(infer.session());
    other.mutable_identity()->set_digest("test-model-v1");
    other.mutable_layout()->set_chunk_rows(16);
    auto* c = other.mutable_layout()->add_components();
    c->set_kind(v1::COMPONENT_KIND_PRIVATE);
    c->set_private_bytes(1);
    cases.push_back({"same identity, other layout",
                     infer.Call(&v1::CacheService::Stub::RegisterModel, other, &resp),
                     grpc::StatusCode::FAILED_PRECONDITION});
  }
  {
    v1::LookupRequest r;
    r.set_session_id(infer.session());
    r.set_model_id(infer.model());
    v1::LookupResponse resp;
    cases.push_back({"empty prompt", infer.Call(&v1::CacheService::Stub::Lookup, r, &resp),
                     grpc::StatusCode::INVALID_ARGUMENT});
    r.add_tokens(0xFFFFFFFFu);
    cases.push_back({"token out of range", infer.Call(&v1::CacheService::Stub::Lookup, r, &resp),
                     grpc::StatusCode::INVALID_ARGUMENT});
    r.clear_tokens();
    r.add_tokens(1);
    r.set_model_id(999);
    cases.push_back({"unknown model", infer.Call(&v1::CacheService::Stub::Lookup, r, &resp),
                     grpc::StatusCode::NOT_FOUND});
    r.set_model_id(infer.model());
    r.set_session_id(12345);
    cases.push_back({"unknown session", infer.Call(&v1::CacheService::Stub::Lookup, r, &resp),
                     grpc::StatusCode::NOT_FOUND});
  }
  {
    v1::ReserveCaptureRequest r;
    r.set_session_id(infer.session());
    r.set_model_id(infer.model());
    r.set_slot(0);
    r.set_depth(5);
    r.set_kind(v1::CAPTURE_KIND_END);
    v1::CaptureReservation resp;
    cases.push_back({"capture on an unknown slot",
                     infer.Call(&v1::CacheService::Stub::ReserveCapture, r, &resp),
                     grpc::StatusCode::NOT_FOUND});
    infer.PrefillCold(0, Tokens(9, 8), {}, 1);
    cases.push_back({"capture depth not the frontier",
                     infer.Call(&v1::CacheService::Stub::ReserveCapture, r, &resp),
                     grpc::StatusCode::FAILED_PRECONDITION});
    r.set_depth(8);
    r.set_kind(v1::CAPTURE_KIND_UNSPECIFIED);
    cases.push_back({"capture without kind",
                     infer.Call(&v1::CacheService::Stub::ReserveCapture, r, &resp),
                     grpc::StatusCode::INVALID_ARGUMENT});
  }
  {
    v1::AcquireRestoreRequest r;
    r.set_session_id(infer.session());
    r.set_model_id(infer.model());
    r.set_checkpoint_id(777);
    v1::RestoreLease resp;
    cases.push_back({"restore of an unknown checkpoint",
                     infer.Call(&v1::CacheService::Stub::AcquireRestore, r, &resp),
                     grpc::StatusCode::NOT_FOUND});
    v1::ReleaseLeaseRequest rel;
    rel.set_session_id(infer.session());
    rel.set_lease_id(4);
    v1::ReleaseLeaseResponse released;
    cases.push_back({"release of a lease never held",
                     infer.Call(&v1::CacheService::Stub::ReleaseLease, rel, &released),
                     grpc::StatusCode::NOT_FOUND});
    // A SpillDone for a spill never asked for is ignored; the session stays usable.
    v1::SessionClientMessage done;
    done.mutable_spill_done()->set_spill_id(99);
    done.mutable_spill_done()->add_chunk_ids(1);
    ASSERT_TRUE(infer.Write(done));
    v1::GetStatusResponse status;
    cases.push_back(
        {"a call after a spill report never asked for",
         infer.Call(&v1::CacheService::Stub::GetStatus, v1::GetStatusRequest(), &status),
         grpc::StatusCode::OK});
  }
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.error_code(), c.want) << c.name << ": " << c.status.error_message();
  }
}

TEST(CacheDaemonTest, RestoreIntoAnotherSlotWaitsForBorrowedRowsToBeSpilled) {
  Server server;
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  // The checkpoint's two full chunks still live only in slot 0.
  std::vector<uint64_t> ids = infer.PrefillCold(0, Tokens(11, 40), {40}, 4);
  v1::RestoreLease lease;

  grpc::Status s = infer.AcquireRestore(1, ids[0], &lease);

  // The lease comes at once, not ready: the daemon asks for the rows on the session stream
  // and settles the lease with LeaseReady once they are in the arena.
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(lease.ready());
  ASSERT_EQ(lease.awaiting_spills_size(), 1);
  v1::SpillRequest spill = infer.NextSpillRequest();
  EXPECT_EQ(spill.spill_id(), lease.awaiting_spills(0));
  EXPECT_TRUE(spill.urgent());
  EXPECT_EQ(spill.slot(), 0u);
  EXPECT_EQ(spill.chunks_size(), 2);
  ASSERT_NO_FATAL_FAILURE(infer.DoSpill(spill));
  v1::LeaseReady ready = infer.AwaitLeaseReady(lease.lease_id());
  ASSERT_TRUE(ready.ok()) << ready.failure();
  EXPECT_EQ(ready.chunks_size(), 2);
  FakeInfer::ApplyLeaseReady(ready, &lease);
  ASSERT_NO_FATAL_FAILURE(infer.VerifyAndRelease(1, ids[0], lease));
}

TEST(CacheDaemonTest, ARestoreOfRowsBorrowedByAnotherSessionCompletesThroughLeaseReady) {
  Server server;
  FakeInfer a(server.address());
  FakeInfer b(server.address());
  ASSERT_NO_FATAL_FAILURE(a.Open());
  ASSERT_NO_FATAL_FAILURE(b.Open());
  std::vector<uint64_t> ids = a.PrefillCold(0, Tokens(50, 40), {40}, 5);
  b.set_captured(a.captured());
  v1::RestoreLease lease;

  grpc::Status s = b.AcquireRestore(0, ids[0], &lease);

  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(lease.ready());
  ASSERT_EQ(lease.awaiting_spills_size(), 1);
  // A gets the urgent spill on its stream, performs it, and B's lease becomes ready: no call
  // is repeated.
  v1::SpillRequest spill = a.NextSpillRequest();
  EXPECT_EQ(spill.spill_id(), lease.awaiting_spills(0));
  EXPECT_TRUE(spill.urgent());
  ASSERT_NO_FATAL_FAILURE(a.DoSpill(spill));
  v1::LeaseReady ready = b.AwaitLeaseReady(lease.lease_id());
  ASSERT_TRUE(ready.ok()) << ready.failure();
  FakeInfer::ApplyLeaseReady(ready, &lease);
  ASSERT_NO_FATAL_FAILURE(b.VerifyAndRelease(0, ids[0], lease));
  // The chunks stay in the arena: the next restore is ready at once.
  v1::RestoreLease again;
  ASSERT_TRUE(b.AcquireRestore(1, ids[0], &again).ok());
  EXPECT_TRUE(again.ready());
}

// How the session that owes a spill dies.
enum class Death { kStreamClosed, kHeartbeatTimeout };

class OwnerDeathTest : public ::testing::TestWithParam<Death> {};

TEST_P(OwnerDeathTest, TheWaitingLeaseFailsAndTheCheckpointIsDroppedWithNothingLeft) {
  FakeClock clock(absl::FromUnixSeconds(1000));
  const std::string root = TempPath("owner-death");
  ASSERT_EQ(std::system(("rm -rf " + root).c_str()), 0);
  Server server(8 << 20, root, &clock);
  FakeInfer a(server.address());
  FakeInfer b(server.address());
  ASSERT_NO_FATAL_FAILURE(a.Open());
  ASSERT_NO_FATAL_FAILURE(b.Open());
  a.set_capture_kind(v1::CAPTURE_KIND_END);  // Goes to disk once its chunks are in the arena.
  std::vector<uint64_t> ids = a.PrefillCold(0, Tokens(51, 40), {40}, 6);
  ASSERT_EQ(server.daemon()->DeferredPersistsForTest(), 1u);
  v1::RestoreLease lease;
  ASSERT_TRUE(b.AcquireRestore(0, ids[0], &lease).ok());
  ASSERT_FALSE(lease.ready());
  v1::SpillRequest spill = a.NextSpillRequest();  // Never performed.

  if (GetParam() == Death::kStreamClosed) {
    a.EndSession();
  } else {
    clock.Advance(absl::Seconds(11));  // Past the session timeout; b stays alive.
    ASSERT_TRUE(b.Heartbeat());
    server.daemon()->Touch(b.session()).IgnoreError();
    server.daemon()->Tick();
  }

  v1::LeaseReady ready = b.AwaitLeaseReady(lease.lease_id());
  EXPECT_FALSE(ready.ok());
  EXPECT_FALSE(ready.failure().empty());
  v1::ListCheckpointsResponse list;
  ASSERT_TRUE(
      b.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list).ok());
  EXPECT_EQ(list.checkpoints_size(), 0);
  EXPECT_EQ(b.Lookup(Tokens(51, 41)).best().tier(), v1::TIER_UNSPECIFIED);
  std::vector<v1::Event> events = server.daemon()->EventsAfter(0, 0);
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [&](const v1::Event& e) {
    return e.kind() == v1::EVENT_KIND_QUARANTINE && e.checkpoint_id() == ids[0];
  }));
  EXPECT_EQ(server.daemon()->DeferredPersistsForTest(), 0u);
  EXPECT_EQ(server.daemon()->arena().allocator().used_bytes(), 0u);
  v1::RestoreLease gone;
  EXPECT_EQ(b.AcquireRestore(0, ids[0], &gone).error_code(), grpc::StatusCode::NOT_FOUND);
  (void)spill;
}

INSTANTIATE_TEST_SUITE_P(CacheDaemonTest, OwnerDeathTest,
                         ::testing::Values(Death::kStreamClosed, Death::kHeartbeatTimeout),
                         [](const ::testing::TestParamInfo<Death>& p) {
                           return p.param == Death::kStreamClosed ? "StreamClosed"
                                                                  : "HeartbeatTimeout";
                         });

TEST(CacheDaemonTest, StartSlotPreservesBorrowedRowsThroughTheStream) {
  Server server;
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  std::vector<uint64_t> ids = infer.PrefillCold(0, Tokens(52, 40), {40}, 7);
  v1::StartSlotResponse started;

  ASSERT_TRUE(StartColdSlot(infer, 0, &started).ok());

  // One spill, sent on the stream, preserves the two borrowed chunks before the overwrite.
  ASSERT_EQ(started.preserve_spills_size(), 1);
  v1::SpillRequest spill = infer.NextSpillRequest();
  EXPECT_EQ(spill.spill_id(), started.preserve_spills(0));
  EXPECT_TRUE(spill.urgent());
  EXPECT_EQ(spill.chunks_size(), 2);
  ASSERT_NO_FATAL_FAILURE(infer.DoSpill(spill));
  // Once reported, the checkpoint restores from the arena without waiting.
  // The report travels the stream, the call does not: if the call overtakes it, the lease
  // waits for the same spill instead of asking again.
  v1::RestoreLease lease;
  ASSERT_TRUE(infer.AcquireRestore(1, ids[0], &lease).ok());
  if (!lease.ready()) {
    EXPECT_EQ(lease.awaiting_spills(0), spill.spill_id());
    v1::LeaseReady ready = infer.AwaitLeaseReady(lease.lease_id());
    ASSERT_TRUE(ready.ok()) << ready.failure();
    FakeInfer::ApplyLeaseReady(ready, &lease);
  }
  ASSERT_NO_FATAL_FAILURE(infer.VerifyAndRelease(1, ids[0], lease));
}

// A spill the cache cannot ask for (the arena has no room for the rows it would preserve)
// fails at once; the StartSlot answer then names no spill to wait for, since no request for it
// will ever come on the stream. Told of one, the client would stall all its slots for its
// whole spill wait and then end its session.
TEST(CacheDaemonTest, AStartSlotAnswerNamesNoSpillThatCouldNotBeAskedFor) {
  // The arena's regions are whole pages: a chunk of 2 KiB takes 4 KiB of it, so the arena fills
  // before the RAM budget (which counts 2 KiB a chunk) does. Five checkpoints take five of its
  // eight pages for their private states; slot 0's four borrowed chunks would need four more.
  constexpr int64_t kPage = 4096;
  Server server(8 * kPage);
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  infer.PrefillCold(0, Tokens(61, 64), {16, 32, 48, 64}, 5);
  infer.PrefillCold(1, Tokens(62, 16), {16}, 6);
  ASSERT_EQ(server.daemon()->arena().allocator().used_bytes(), 5u * kPage);

  v1::StartSlotResponse started;
  ASSERT_TRUE(StartColdSlot(infer, 0, &started).ok());

  EXPECT_EQ(started.preserve_spills_size(), 0);
  // The checkpoints that needed the rows are gone; slot 1's is untouched.
  EXPECT_EQ(infer.Lookup(Tokens(61, 65)).best().tier(), v1::TIER_UNSPECIFIED);
  v1::LookupResponse found = infer.Lookup(Tokens(62, 17));
  EXPECT_EQ(found.best().depth(), 16u);
}

TEST(CacheDaemonTest, ASpillReportWithAWrongChecksumDropsTheCheckpointWithADataLossEvent) {
  Server server;
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  std::vector<uint64_t> ids = infer.PrefillCold(0, Tokens(53, 40), {40}, 8);
  infer.set_checksum_skew(1);
  v1::RestoreLease lease;
  ASSERT_TRUE(infer.AcquireRestore(1, ids[0], &lease).ok());
  ASSERT_FALSE(lease.ready());

  v1::LeaseReady ready = infer.AwaitLeaseReady(lease.lease_id());

  EXPECT_FALSE(ready.ok());
  std::vector<v1::Event> events = server.daemon()->EventsAfter(0, 0);
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [&](const v1::Event& e) {
    return e.kind() == v1::EVENT_KIND_QUARANTINE && e.checkpoint_id() == ids[0] &&
           absl::StrContains(e.reason(), "data loss");
  }));
  v1::ListCheckpointsResponse list;
  ASSERT_TRUE(
      infer.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list)
          .ok());
  EXPECT_EQ(list.checkpoints_size(), 0);
}

TEST(CacheDaemonTest, DrainingTellsTheSessionsAndEndsThemPromptly) {
  Server server;
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  infer.PrefillCold(0, Tokens(54, 20), {16}, 9);
  const absl::Time start = absl::Now();

  server.Drain(absl::Seconds(1));

  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(infer.AwaitSessionEnd().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(infer.SawDraining());
}

TEST(CacheDaemonTest, PromptCheckpointsReachDiskAndRestoreFromThereAfterRamEviction) {
  const std::string root = TempPath("disk-evict");
  ASSERT_EQ(std::system(("rm -rf " + root).c_str()), 0);
  Server server(8 << 20, root);
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  infer.set_capture_kind(v1::CAPTURE_KIND_END);
  std::vector<uint32_t> a = Tokens(13, 72);
  // 72 tokens: four full chunks and an 8-row tail; then slot 0 changes hands, so the
  // borrowed chunks are spilled and the deferred disk write can go ahead.
  std::vector<uint64_t> ids = infer.PrefillCold(0, a, {72}, 21);
  infer.PrefillCold(0, Tokens(14, 20), {}, 22);
  const uint64_t persisted = infer.FlushUntilPersisted(1);
  v1::EvictRequest evict;
  evict.set_checkpoint_id(ids[0]);
  v1::EvictResponse evicted;

  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::Evict, evict, &evicted).ok());

  EXPECT_EQ(persisted, 1u);
  // GetStatus counts the eviction by tier and reason and splits the disk tier's bytes.
  v1::GetStatusResponse status;
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::GetStatus, v1::GetStatusRequest(), &status).ok());
  ASSERT_EQ(status.evictions_size(), 1);
  EXPECT_EQ(status.evictions(0).tier(), v1::TIER_RAM);
  EXPECT_EQ(status.evictions(0).reason(), "explicit");
  EXPECT_EQ(status.evictions(0).count(), 1u);
  EXPECT_EQ(status.disk().checkpoints(), 1u);
  EXPECT_GT(status.disk().row_bytes(), 0u);
  EXPECT_GT(status.disk().private_bytes(), 0u);
  EXPECT_EQ(status.disk().row_bytes() + status.disk().private_bytes(), status.disk().used_bytes());
  std::vector<uint32_t> a2 = a;
  a2.push_back(7);
  v1::LookupResponse found = infer.Lookup(a2);
  EXPECT_EQ(found.best().tier(), v1::TIER_DISK);
  EXPECT_EQ(found.best().depth(), 72u);
  ASSERT_NO_FATAL_FAILURE(infer.RestoreAndVerify(1, ids[0]));
  EXPECT_EQ(infer.last_restore_tier(), v1::TIER_DISK);
  // Evicting the disk copy too leaves only the live frontier of the slot restored into.
  evict.set_include_disk(true);
  v1::EvictResponse gone;
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::Evict, evict, &gone).ok());
  EXPECT_EQ(gone.evicted_size(), 1);
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::GetStatus, v1::GetStatusRequest(), &status).ok());
  int disk_evictions = 0;
  for (const v1::EvictionCount& e : status.evictions()) {
    if (e.tier() == v1::TIER_DISK) disk_evictions += static_cast<int>(e.count());
  }
  EXPECT_EQ(disk_evictions, 1);
  v1::LookupResponse after = infer.Lookup(a2);
  EXPECT_EQ(after.best().tier(), v1::TIER_LIVE);
  EXPECT_EQ(after.others_size(), 0);
}

TEST(CacheDaemonTest, AfterARestartTheNextTurnRestoresFromDiskByteForByte) {
  const std::string root = TempPath("disk-restart");
  ASSERT_EQ(std::system(("rm -rf " + root).c_str()), 0);
  std::vector<uint32_t> a = Tokens(15, 300);
  std::vector<uint64_t> ids;
  std::map<uint64_t, FakeInfer::SlotState> captured;
  {
    Server server(8 << 20, root);
    FakeInfer infer(server.address());
    ASSERT_NO_FATAL_FAILURE(infer.Open());
    infer.set_capture_kind(v1::CAPTURE_KIND_END);
    ids = infer.PrefillCold(0, a, {300}, 31);
    // A second conversation shares a's first 200 tokens; its prompt end goes to disk too and
    // shares a's chunk files.
    std::vector<uint32_t> b(a.begin(), a.begin() + 200);
    for (uint32_t t : Tokens(18, 60)) b.push_back(t);
    std::vector<uint64_t> b_ids = infer.PrefillCold(1, b, {260}, 34);
    ids.push_back(b_ids[0]);
    infer.PrefillCold(0, Tokens(16, 10), {}, 32);  // Spills the borrowed rows: writes go ahead.
    infer.PrefillCold(1, Tokens(19, 10), {}, 35);
    ASSERT_EQ(infer.FlushUntilPersisted(2), 2u);
    captured = infer.captured();
  }

  Server restarted(8 << 20, root);
  FakeInfer infer(restarted.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  infer.set_captured(captured);
  std::vector<uint32_t> next = a;
  next.push_back(77);
  v1::LookupResponse found = infer.Lookup(next);

  EXPECT_EQ(found.best().tier(), v1::TIER_DISK);
  EXPECT_EQ(found.best().depth(), 300u);
  EXPECT_EQ(found.best().checkpoint_id(), ids[0]);
  ASSERT_NO_FATAL_FAILURE(infer.RestoreAndVerify(0, ids[0]));
  ASSERT_NO_FATAL_FAILURE(infer.RestoreAndVerify(1, ids[1]));
  // New captures get ids that do not collide with the recovered ones.
  std::vector<uint64_t> more = infer.PrefillCold(1, Tokens(17, 20), {20}, 33);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_GT(more[0], std::max(ids[0], ids[1]));
}

TEST(CacheDaemonTest, ACorruptChunkOnDiskQuarantinesEveryDependentAndLookupFallsBack) {
  const std::string root = TempPath("disk-corrupt");
  ASSERT_EQ(std::system(("rm -rf " + root).c_str()), 0);
  std::vector<uint32_t> a = Tokens(20, 100);
  std::vector<uint32_t> b = a;  // a's continuation: restores a and shares its chunks.
  for (uint32_t t : Tokens(21, 40)) b.push_back(t);
  std::vector<uint32_t> c = Tokens(22, 50);  // Unrelated: must stay restorable.
  std::map<uint64_t, FakeInfer::SlotState> captured;
  uint64_t a_id = 0, b_id = 0, c_id = 0;
  {
    Server server(8 << 20, root);
    FakeInfer infer(server.address());
    ASSERT_NO_FATAL_FAILURE(infer.Open());
    infer.set_capture_kind(v1::CAPTURE_KIND_LEARNED);  // Written whatever the spacing.
    a_id = infer.PrefillCold(0, a, {100}, 41)[0];
    c_id = infer.PrefillCold(1, c, {50}, 43)[0];
    infer.PrefillCold(0, Tokens(23, 4), {}, 44);  // Spills a's rows.
    ASSERT_NO_FATAL_FAILURE(infer.RestoreAndVerify(0, a_id));
    b_id = infer.ExtendAndCapture(0, b, {140}, 42)[0];
    infer.PrefillCold(0, Tokens(24, 4), {}, 45);
    infer.PrefillCold(1, Tokens(25, 4), {}, 46);
    ASSERT_EQ(infer.FlushUntilPersisted(3), 3u);
    captured = infer.captured();
  }
  // Chunk 1 is a's first chunk, which b shares by provenance: flip one byte of its file.
  ASSERT_TRUE(DamageFirstChunkFile(root));
  Server restarted(8 << 20, root);
  FakeInfer infer(restarted.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  infer.set_captured(captured);
  v1::AcquireRestoreRequest ar;
  ar.set_session_id(infer.session());
  ar.set_model_id(infer.model());
  ar.set_checkpoint_id(b_id);
  ar.set_slot(0);
  v1::RestoreLease lease;

  grpc::Status s = infer.Call(&v1::CacheService::Stub::AcquireRestore, ar, &lease);

  EXPECT_EQ(s.error_code(), grpc::StatusCode::DATA_LOSS) << s.error_message();
  // Both checkpoints that list the chunk are gone from the index; the prompt falls back cold.
  std::vector<uint32_t> next = b;
  next.push_back(1);
  EXPECT_EQ(infer.Lookup(next).best().tier(), v1::TIER_UNSPECIFIED);
  v1::ListCheckpointsResponse list;
  ASSERT_TRUE(
      infer.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list)
          .ok());
  ASSERT_EQ(list.checkpoints_size(), 1);
  EXPECT_EQ(list.checkpoints(0).checkpoint_id(), c_id);
  // The manifest recorded the kind it was captured as: it comes back learned, not as an end.
  EXPECT_EQ(list.checkpoints(0).kind(), v1::CAPTURE_KIND_LEARNED);
  // No false positive: the untouched checkpoint restores byte for byte; the daemon is healthy.
  ASSERT_NO_FATAL_FAILURE(infer.RestoreAndVerify(1, c_id));
  v1::GetStatusResponse status;
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::GetStatus, v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.quarantined(), 2u);
  EXPECT_TRUE(status.disk_healthy());
  (void)a_id;
}

TEST(CacheDaemonTest, TheScrubberQuarantinesADamagedCheckpointBeforeAnyRestoreNeedsIt) {
  const std::string root = TempPath("disk-scrub");
  ASSERT_EQ(std::system(("rm -rf " + root).c_str()), 0);
  std::vector<uint32_t> a = Tokens(26, 100);
  std::vector<uint32_t> c = Tokens(27, 50);
  uint64_t a_id = 0, c_id = 0;
  {
    Server server(8 << 20, root);
    FakeInfer infer(server.address());
    ASSERT_NO_FATAL_FAILURE(infer.Open());
    infer.set_capture_kind(v1::CAPTURE_KIND_LEARNED);
    a_id = infer.PrefillCold(0, a, {100}, 51)[0];
    c_id = infer.PrefillCold(1, c, {50}, 53)[0];
    infer.PrefillCold(0, Tokens(28, 4), {}, 54);  // Spills the rows: the writes go ahead.
    infer.PrefillCold(1, Tokens(29, 4), {}, 55);
    ASSERT_EQ(infer.FlushUntilPersisted(2), 2u);
  }
  // a's first chunk is chunk 1: flip one byte of its file.
  ASSERT_TRUE(DamageFirstChunkFile(root));
  Server restarted(8 << 20, root);
  FakeInfer infer(restarted.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());

  restarted.daemon()->ScrubPassForTest();

  // No restore was needed to find it: the index no longer offers it, with an event.
  std::vector<uint32_t> next = a;
  next.push_back(1);
  EXPECT_EQ(infer.Lookup(next).best().tier(), v1::TIER_UNSPECIFIED);
  v1::ListCheckpointsResponse list;
  ASSERT_TRUE(
      infer.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list)
          .ok());
  ASSERT_EQ(list.checkpoints_size(), 1);
  EXPECT_EQ(list.checkpoints(0).checkpoint_id(), c_id);
  std::vector<v1::Event> events = restarted.daemon()->EventsAfter(0, 0);
  EXPECT_TRUE(std::any_of(events.begin(), events.end(),
                          [&](const v1::Event& e) { return e.checkpoint_id() == a_id; }));
  v1::GetStatusResponse status;
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::GetStatus, v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.quarantined(), 1u);
  EXPECT_TRUE(status.disk_healthy());
}

TEST(CacheDaemonTest, ASilentSessionExpiresAndItsStreamEndsAtTheNextMessage) {
  FakeClock clock(absl::FromUnixSeconds(1000));
  Server server(8 << 20, "", &clock);
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  // One checkpoint borrows a chunk from slot 0 (never spilled), one owns only a tail.
  infer.PrefillCold(0, Tokens(30, 20), {16}, 1);
  uint64_t kept = infer.PrefillCold(1, Tokens(31, 10), {10}, 2)[0];

  clock.Advance(absl::Seconds(11));  // Past the 10 s session timeout without a heartbeat.
  server.daemon()->Tick();

  v1::GetStatusResponse status;
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::GetStatus, v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.sessions(), 0u);
  v1::ListCheckpointsResponse list;
  ASSERT_TRUE(
      infer.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list)
          .ok());
  ASSERT_EQ(list.checkpoints_size(), 1);
  EXPECT_EQ(list.checkpoints(0).checkpoint_id(), kept);
  infer.Heartbeat();
  EXPECT_EQ(infer.AwaitSessionEnd().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(CacheDaemonTest, HandlesFromAnotherArenaIncarnationAreRefusedByTheClient) {
  Server first;
  FakeInfer infer(first.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  std::vector<uint64_t> ids = infer.PrefillCold(0, Tokens(10, 40), {40}, 3);
  infer.PrefillCold(0, Tokens(12, 8), {}, 2);  // Slot 0 changes hands: rows are preserved.
  v1::AcquireRestoreRequest ar;
  ar.set_session_id(infer.session());
  ar.set_model_id(infer.model());
  ar.set_checkpoint_id(ids[0]);
  ar.set_slot(1);
  v1::RestoreLease lease;
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::AcquireRestore, ar, &lease).ok());
  ArenaHandle stale{lease.private_state().region().incarnation() + 1,
                    lease.private_state().region().offset(),
                    lease.private_state().region().length()};

  EXPECT_THAT(infer.arena()->Resolve(stale),
              cairn::testing::StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace cairn::cache
