// SM10 (docs/reliability.md): a handle kept from an earlier incarnation of cairn-cache names
// nothing in the next one. The real daemon runs as a process; a client playing cairn-infer
// opens a session, registers a model, publishes a checkpoint to disk, holds a restore lease and
// an uncommitted capture reservation; the daemon is killed with SIGKILL and restarted; a second
// client opens a session on the new incarnation and holds objects of its own (a reservation
// whose id is the old one's when the daemon reuses checkpoint ids, and a lease). Then every
// old id and handle is presented to the new incarnation: each is refused with an error naming
// it, none reaches the new client's objects (they still commit, verify and release), and the
// old arena's incarnation is refused both in a handle and in the descriptor grant. The
// checkpoint acknowledged on disk is the one thing that outlives the restart, byte for byte.

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/process/child_process.h"
#include "common/shm/arena_client.h"
#include "common/shm/arena_handle.h"
#include "gtest/gtest.h"
#include "tests/integration/services/cache/fake_infer.h"

namespace cairn::cache {
namespace {

using testing::FakeInfer;
using testing::Tokens;

constexpr absl::Duration kStartTimeout = absl::Seconds(30);

// What the first client kept from the first incarnation.
struct OldHandles {
  uint64_t cache_incarnation = 0;
  uint64_t session = 0;
  uint64_t model = 0;
  uint64_t checkpoint = 0;  // Published to disk: the one id that must outlive the restart.
  uint64_t lease = 0;
  uint64_t reservation = 0;
  ArenaHandle region;  // The lease's private state in the old arena.
  std::map<uint64_t, FakeInfer::SlotState> captured;
};

// Expects `s` to refuse a stale id: NOT_FOUND or FAILED_PRECONDITION, naming `id`.
void ExpectRefused(const grpc::Status& s, uint64_t id, const std::string& what) {
  EXPECT_TRUE(s.error_code() == grpc::StatusCode::NOT_FOUND ||
              s.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
      << what << ": code " << s.error_code() << " \"" << s.error_message() << "\"";
  EXPECT_TRUE(absl::StrContains(s.error_message(), absl::StrCat(id)))
      << what << ": \"" << s.error_message() << "\" does not name " << id;
}

// Looks up a prompt under `session` and `model`; returns the call's status.
grpc::Status LookupAs(FakeInfer& client, uint64_t session, uint64_t model) {
  v1::LookupRequest req;
  req.set_session_id(session);
  req.set_model_id(model);
  for (uint32_t t : Tokens(1, 100)) req.add_tokens(t);
  v1::LookupResponse resp;
  return client.Call(&v1::CacheService::Stub::Lookup, req, &resp);
}

// Releases `lease` under `session`; returns the call's status.
grpc::Status ReleaseAs(FakeInfer& client, uint64_t session, uint64_t lease) {
  v1::ReleaseLeaseRequest req;
  req.set_session_id(session);
  req.set_lease_id(lease);
  v1::ReleaseLeaseResponse resp;
  return client.Call(&v1::CacheService::Stub::ReleaseLease, req, &resp);
}

// Reserves a capture at `slot`'s frontier of `depth` tokens without committing it.
v1::CaptureReservation Reserve(FakeInfer& client, uint32_t slot, uint64_t depth) {
  v1::ReserveCaptureRequest req;
  req.set_session_id(client.session());
  req.set_model_id(client.model());
  req.set_slot(slot);
  req.set_depth(depth);
  req.set_kind(v1::CAPTURE_KIND_END);
  v1::CaptureReservation res;
  grpc::Status s = client.Call(&v1::CacheService::Stub::ReserveCapture, req, &res);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return res;
}

// Acquires a lease of `checkpoint` into `slot` and waits until it is readable.
v1::RestoreLease Lease(FakeInfer& client, uint32_t slot, uint64_t checkpoint) {
  v1::RestoreLease lease;
  grpc::Status s = client.AcquireRestore(slot, checkpoint, &lease);
  EXPECT_TRUE(s.ok()) << s.error_message();
  client.ServeSpills(lease.preserve_spills());
  if (s.ok() && !lease.ready()) {
    v1::LeaseReady ready = client.AwaitLeaseReady(lease.lease_id());
    EXPECT_TRUE(ready.ok()) << ready.failure();
    FakeInfer::ApplyLeaseReady(ready, &lease);
  }
  return lease;
}

class StaleIncarnationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/cairn-stale-" + std::to_string(::getpid());
    ASSERT_EQ(std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str()), 0);
    cache_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{std::string(CAIRN_BINARY_DIR) + "/services/cache/cairn-cache",
                                 "--listen=unix:" + dir_ + "/grpc.sock",
                                 "--arena-socket=" + dir_ + "/arena.sock", "--cache-ram-bytes=64Mi",
                                 "--cache-disk=" + dir_ + "/disk", "--cache-disk-bytes=1Gi",
                                 "--log-level=error"},
        "unix:" + dir_ + "/grpc.sock");
    ASSERT_TRUE(cache_->Start().ok());
    ASSERT_TRUE(cache_->WaitServing(kStartTimeout).ok());
  }
  void TearDown() override {
    if (cache_ != nullptr) cache_->Kill();
    ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0);
  }

  // The first client's work in the first incarnation, ended by SIGKILL while it holds all of
  // it.
  void RunOldIncarnation(OldHandles* old) {
    FakeInfer a(cache_->address());
    ASSERT_NO_FATAL_FAILURE(a.Open());
    a.set_capture_kind(v1::CAPTURE_KIND_END);  // Prompt ends go to disk.
    std::vector<uint64_t> ids = a.PrefillCold(0, Tokens(1, 100), {100}, 1);
    ASSERT_EQ(ids.size(), 1u);
    // Another prompt in slot 0 makes the cache preserve the checkpoint's borrowed rows, so
    // that the disk writer has all of its bytes.
    a.PrefillCold(0, Tokens(2, 40), {}, 2);
    // The preserved rows' SpillDone travels on the session stream, so the daemon may queue the
    // disk write after a Flush sent right away (a Flush waits only for writes queued before
    // it): flush until the checkpoint is on disk, within a deadline.
    v1::ListCheckpointsResponse list;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    do {
      v1::FlushResponse flushed;
      ASSERT_TRUE(a.Call(&v1::CacheService::Stub::Flush, v1::FlushRequest(), &flushed).ok());
      list.Clear();
      ASSERT_TRUE(
          a.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list)
              .ok());
      ASSERT_EQ(list.checkpoints_size(), 1);
      if (list.checkpoints(0).on_disk()) break;
      absl::SleepFor(absl::Milliseconds(20));
    } while (absl::Now() < deadline);
    ASSERT_TRUE(list.checkpoints(0).on_disk()) << "the checkpoint was never acknowledged on disk";

    const v1::RestoreLease lease = Lease(a, 1, ids[0]);
    const v1::CaptureReservation reservation = Reserve(a, 0, 40);
    ASSERT_NE(reservation.reservation_id(), 0u);

    old->cache_incarnation = a.welcome().cache_incarnation();
    old->session = a.session();
    old->model = a.model();
    old->checkpoint = ids[0];
    old->lease = lease.lease_id();
    old->reservation = reservation.reservation_id();
    const v1::ArenaHandle& h = lease.private_state().region();
    old->region = ArenaHandle{h.incarnation(), h.offset(), h.length()};
    old->captured = a.captured();
    cache_->Kill();
  }

  std::string dir_;
  std::unique_ptr<ChildProcess> cache_;
};

TEST_F(StaleIncarnationTest, IdsAndHandlesFromBeforeARestartAreRefusedAndNameNothing) {
  OldHandles old;
  ASSERT_NO_FATAL_FAILURE(RunOldIncarnation(&old));
  ASSERT_TRUE(cache_->Start().ok());
  ASSERT_TRUE(cache_->WaitServing(kStartTimeout).ok());

  // The new client's own objects: an open reservation first (the daemon numbers reservations
  // like checkpoints, from the highest it recovered, so this one may carry the old id), then a
  // lease of the checkpoint that survived on disk.
  FakeInfer b(cache_->address());
  ASSERT_NO_FATAL_FAILURE(b.Open());
  b.set_captured(old.captured);
  b.PrefillCold(1, Tokens(4, 60), {}, 4);
  const v1::CaptureReservation reservation = Reserve(b, 1, 60);
  const v1::RestoreLease lease = Lease(b, 0, old.checkpoint);
  std::cout << "stale: old session " << old.session << ", model " << old.model << ", lease "
            << old.lease << ", reservation " << old.reservation << "; new session " << b.session()
            << ", model " << b.model() << ", lease " << lease.lease_id() << ", reservation "
            << reservation.reservation_id()
            << (reservation.reservation_id() == old.reservation ? " (the old reservation's id)"
                                                                : "")
            << "\n";
  EXPECT_NE(b.welcome().cache_incarnation(), old.cache_incarnation);
  EXPECT_NE(b.arena()->incarnation(), old.region.incarnation);
  EXPECT_NE(b.session(), old.session);
  EXPECT_NE(b.model(), old.model);
  EXPECT_NE(lease.lease_id(), old.lease);
  for (uint64_t id : {b.session(), b.model(), lease.lease_id()}) {
    EXPECT_GE(id, kIdBaseFloor);
    EXPECT_LT(id, kIdBaseFloor + kIdBaseSpan);
  }

  // The old session id, in every kind of call.
  {
    v1::RegisterModelRequest req;
    req.set_session_id(old.session);
    req.mutable_identity()->set_digest("test-model-v1");
    req.mutable_layout()->set_chunk_rows(testing::kChunkRows);
    v1::StateComponent* c = req.mutable_layout()->add_components();
    c->set_kind(v1::COMPONENT_KIND_PRIVATE);
    c->set_private_bytes(testing::kPrivateBytes);
    v1::RegisterModelResponse resp;
    ExpectRefused(b.Call(&v1::CacheService::Stub::RegisterModel, req, &resp), old.session,
                  "RegisterModel with the old session");
  }
  ExpectRefused(LookupAs(b, old.session, b.model()), old.session, "Lookup with the old session");
  {
    v1::StartSlotRequest req;
    req.set_session_id(old.session);
    req.set_model_id(b.model());
    req.set_mode(v1::StartSlotRequest::MODE_COLD);
    v1::StartSlotResponse resp;
    ExpectRefused(b.Call(&v1::CacheService::Stub::StartSlot, req, &resp), old.session,
                  "StartSlot with the old session");
  }
  // The old lease and reservation under their own (old) session: refused for the session,
  // even where the reservation id now names the new client's reservation.
  ExpectRefused(ReleaseAs(b, old.session, old.lease), old.session,
                "ReleaseLease of the old lease with the old session");
  ExpectRefused(ReleaseAs(b, old.session, lease.lease_id()), old.session,
                "ReleaseLease of the new lease with the old session");
  for (uint64_t id : {old.reservation, reservation.reservation_id()}) {
    v1::CommitCaptureRequest commit;
    commit.set_session_id(old.session);
    commit.set_reservation_id(id);
    v1::CommitCaptureResponse committed;
    ExpectRefused(b.Call(&v1::CacheService::Stub::CommitCapture, commit, &committed), old.session,
                  absl::StrCat("CommitCapture of reservation ", id, " with the old session"));
    v1::AbortCaptureRequest abort;
    abort.set_session_id(old.session);
    abort.set_reservation_id(id);
    v1::AbortCaptureResponse aborted;
    ExpectRefused(b.Call(&v1::CacheService::Stub::AbortCapture, abort, &aborted), old.session,
                  absl::StrCat("AbortCapture of reservation ", id, " with the old session"));
  }
  // The old model and lease ids under the new session.
  ExpectRefused(LookupAs(b, b.session(), old.model), old.model, "Lookup with the old model");
  {
    v1::AcquireRestoreRequest req;
    req.set_session_id(b.session());
    req.set_model_id(old.model);
    req.set_checkpoint_id(old.checkpoint);
    req.set_slot(1);
    v1::RestoreLease resp;
    ExpectRefused(b.Call(&v1::CacheService::Stub::AcquireRestore, req, &resp), old.model,
                  "AcquireRestore with the old model");
  }
  ExpectRefused(ReleaseAs(b, b.session(), old.lease), old.lease,
                "ReleaseLease of the old lease with the new session");
  // The old arena: a handle into it, and a grant asked for with its incarnation.
  absl::StatusOr<absl::Span<uint8_t>> resolved = b.arena()->Resolve(old.region);
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kFailedPrecondition) << resolved.status();
  ArenaClientOptions grant;
  grant.socket_path = b.welcome().arena().fd_socket_path();
  grant.expected_incarnation = old.region.incarnation;
  absl::StatusOr<MappedArena> stale_arena = MappedArena::Connect(grant);
  EXPECT_EQ(stale_arena.status().code(), absl::StatusCode::kFailedPrecondition)
      << stale_arena.status();

  // None of it touched the new client's objects: its reservation is still held (its own abort
  // succeeds once), its lease still reads the disk checkpoint byte for byte.
  v1::AbortCaptureRequest abort;
  abort.set_session_id(b.session());
  abort.set_reservation_id(reservation.reservation_id());
  v1::AbortCaptureResponse aborted;
  grpc::Status s = b.Call(&v1::CacheService::Stub::AbortCapture, abort, &aborted);
  EXPECT_TRUE(s.ok()) << s.error_message();
  ASSERT_NO_FATAL_FAILURE(b.VerifyAndRelease(0, old.checkpoint, lease));
  EXPECT_EQ(b.last_restore_tier(), v1::TIER_DISK);
}

}  // namespace
}  // namespace cairn::cache
