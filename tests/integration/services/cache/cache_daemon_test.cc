// The cache daemon over gRPC, driven by a test client that plays the inference daemon: real
// shared memory (the arena memfd received over SCM_RIGHTS), real sessions, captures, spills
// of borrowed rows, and restores whose bytes must come back equal.

#include <unistd.h>

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/checksum/checksum.h"
#include "common/concurrency/thread_pool.h"
#include "common/grpc/client.h"
#include "common/grpc/server_runner.h"
#include "common/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "services/cache/arena/arena_fd_server.h"
#include "services/cache/cache_daemon.h"
#include "services/cache/cache_service.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

constexpr uint32_t kChunkRows = 16;
constexpr uint64_t kRowBytes = 64;       // Per row component.
constexpr uint64_t kPrivateBytes = 4096;  // One private component.
constexpr absl::Duration kRpcTimeout = absl::Seconds(10);

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/cairn-cache-it-" + std::to_string(::getpid()) + "-" + name;
}

// A daemon with its gRPC server in this process.
class Server {
 public:
  explicit Server(int64_t ram_bytes = 8 << 20, const std::string& disk_root = "")
      : pool_(2) {
    CacheDaemonOptions options;
    options.cache.ram_bytes = ram_bytes;
    if (!disk_root.empty()) {
      options.disk_root = disk_root;
      options.cache.disk_bytes = 64 << 20;
    }
    options.fd_server.socket_path = TempPath("arena.sock");
    options.arena.first_pin_bytes = 1 << 20;
    options.arena.pin_step_bytes = 1 << 20;
    auto daemon = CacheDaemon::Create(options, RealClock::Get());
    EXPECT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    service_ = std::make_unique<CacheServiceImpl>(daemon_.get(), &pool_);
    ServerRunnerOptions so;
    so.listen = "unix:" + TempPath("grpc.sock");
    so.drain_timeout = absl::Seconds(2);
    auto runner = ServerRunner::Start(so, {service_.get()});
    EXPECT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
    runner_->SetAllServing(true);
  }
  ~Server() {
    runner_->Drain();
    runner_->Wait();
    pool_.Shutdown();
  }
  const std::string& address() const { return runner_->address(); }
  CacheDaemon* daemon() { return daemon_.get(); }

 private:
  ThreadPool pool_;
  std::unique_ptr<CacheDaemon> daemon_;
  std::unique_ptr<CacheServiceImpl> service_;
  std::unique_ptr<ServerRunner> runner_;
};

// Plays cairn-infer: one session, the mapped arena, and a slot's rows in local memory.
class FakeInfer {
 public:
  explicit FakeInfer(const std::string& address)
      : stub_(v1::CacheService::NewStub(NewLocalChannel(address))) {}

  ~FakeInfer() { EndSession(); }

  void Open() {
    ctx_ = NewClientContext(absl::Minutes(5));
    stream_ = stub_->Session(ctx_.get());
    v1::SessionClientMessage hello;
    hello.mutable_hello()->set_instance_name("fake-infer");
    hello.mutable_hello()->set_pid(static_cast<uint32_t>(::getpid()));
    hello.mutable_hello()->set_slots(2);
    ASSERT_TRUE(stream_->Write(hello));
    v1::SessionServerMessage welcome;
    ASSERT_TRUE(stream_->Read(&welcome));
    ASSERT_TRUE(welcome.has_welcome());
    welcome_ = welcome.welcome();
    ArenaClientOptions ao;
    ao.socket_path = welcome_.arena().fd_socket_path();
    ao.expected_incarnation = welcome_.arena().incarnation();
    auto arena = MappedArena::Connect(ao);
    ASSERT_TRUE(arena.ok()) << arena.status();
    arena_ = std::make_unique<MappedArena>(std::move(*arena));

    v1::RegisterModelRequest reg;
    reg.set_session_id(session());
    reg.mutable_identity()->set_digest("test-model-v1");
    reg.mutable_layout()->set_chunk_rows(kChunkRows);
    for (uint32_t i = 0; i < 3; ++i) {
      v1::StateComponent* c = reg.mutable_layout()->add_components();
      c->set_id(i);
      if (i < 2) {
        c->set_kind(v1::COMPONENT_KIND_ROWS);
        c->set_bytes_per_row(kRowBytes);
      } else {
        c->set_kind(v1::COMPONENT_KIND_PRIVATE);
        c->set_private_bytes(kPrivateBytes);
      }
    }
    v1::RegisterModelResponse resp;
    grpc::Status s = Call(&v1::CacheService::Stub::RegisterModel, reg, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    model_ = resp.model_id();
  }

  void EndSession() {
    if (stream_ == nullptr) return;
    stream_->WritesDone();
    v1::SessionServerMessage m;
    while (stream_->Read(&m)) {
    }
    grpc::Status ignored = stream_->Finish();
    (void)ignored;
    stream_.reset();
  }

  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (v1::CacheService::Stub::*method)(grpc::ClientContext*,
                                                                   const Req&, Resp*),
                    const Req& req, Resp* resp) {
    auto ctx = NewClientContext(kRpcTimeout);
    return (stub_.get()->*method)(ctx.get(), req, resp);
  }

  // The slot's live state: rows per component and the private state, filled with bytes
  // derived from `seed` so that two computations differ.
  struct SlotState {
    std::vector<uint32_t> tokens;
    std::vector<std::vector<uint8_t>> rows = std::vector<std::vector<uint8_t>>(2);
    std::vector<uint8_t> private_state = std::vector<uint8_t>(kPrivateBytes);
  };

  // Cold-prefills `tokens` into `slot`, capturing at every depth in `captures`. Returns the
  // checkpoint ids. Rows and private state are pseudo-random bytes from `seed`.
  std::vector<uint64_t> PrefillCold(uint32_t slot, const std::vector<uint32_t>& tokens,
                                    const std::vector<uint64_t>& captures, uint32_t seed) {
    std::vector<uint64_t> ids;
    v1::StartSlotRequest start;
    start.set_session_id(session());
    start.set_model_id(model_);
    start.set_slot(slot);
    start.set_mode(v1::StartSlotRequest::MODE_COLD);
    start.set_conversation("conv-" + std::to_string(seed));
    v1::StartSlotResponse started;
    grpc::Status s = Call(&v1::CacheService::Stub::StartSlot, start, &started);
    EXPECT_TRUE(s.ok()) << s.error_message();
    DoSpill(started.preserve());
    SlotState& st = slots_[slot];
    st = SlotState();
    std::mt19937 rng(seed);
    uint64_t depth = 0;
    for (uint64_t capture : captures) {
      Extend(slot, tokens, depth, capture, rng);
      depth = capture;
      v1::ReserveCaptureRequest rr;
      rr.set_session_id(session());
      rr.set_model_id(model_);
      rr.set_slot(slot);
      rr.set_depth(depth);
      rr.set_kind(capture_kind_);
      rr.set_conversation("conv-" + std::to_string(seed));
      v1::CaptureReservation res;
      s = Call(&v1::CacheService::Stub::ReserveCapture, rr, &res);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) return ids;
      for (auto& b : st.private_state) b = static_cast<uint8_t>(rng());
      auto priv = arena_->Resolve(ToHandle(res.private_state().region()));
      EXPECT_TRUE(priv.ok()) << priv.status();
      std::copy(st.private_state.begin(), st.private_state.end(), priv->begin());
      uint64_t tail_sum = 0;
      if (res.tail().region().length() > 0) {
        auto tail = arena_->Resolve(ToHandle(res.tail().region()));
        EXPECT_TRUE(tail.ok()) << tail.status();
        WriteRows(st, res.tail().first_row(), res.tail().rows(), tail->data());
        tail_sum = Xxh3(tail->data(), tail->size());
      }
      v1::CommitCaptureRequest cr;
      cr.set_session_id(session());
      cr.set_reservation_id(res.reservation_id());
      cr.set_private_checksum(Xxh3(priv->data(), priv->size()));
      cr.set_tail_checksum(tail_sum);
      v1::CommitCaptureResponse committed;
      s = Call(&v1::CacheService::Stub::CommitCapture, cr, &committed);
      EXPECT_TRUE(s.ok()) << s.error_message();
      ids.push_back(committed.checkpoint_id());
      captured_[committed.checkpoint_id()] = st;
      captured_[committed.checkpoint_id()].tokens.assign(tokens.begin(), tokens.begin() + depth);
    }
    Extend(slot, tokens, depth, tokens.size(), rng);
    return ids;
  }

  // Copies the requested rows from the slot's local state into the arena and reports.
  void DoSpill(const v1::SpillRequest& spill) {
    if (spill.chunks_size() == 0) return;
    v1::CompleteSpillRequest done;
    done.set_session_id(session());
    done.mutable_done()->set_spill_id(spill.spill_id());
    SlotState& st = slots_[spill.slot()];
    for (const v1::ChunkSpill& c : spill.chunks()) {
      auto dest = arena_->Resolve(ToHandle(c.destination()));
      ASSERT_TRUE(dest.ok()) << dest.status();
      WriteRows(st, c.first_row(), c.rows(), dest->data());
      done.mutable_done()->add_chunk_ids(c.chunk_id());
      done.mutable_done()->add_checksums(Xxh3(dest->data(), dest->size()));
    }
    v1::CompleteSpillResponse resp;
    grpc::Status s = Call(&v1::CacheService::Stub::CompleteSpill, done, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // Restores `checkpoint` into `slot` and checks every byte against what was captured.
  void RestoreAndVerify(uint32_t slot, uint64_t checkpoint) {
    v1::AcquireRestoreRequest ar;
    ar.set_session_id(session());
    ar.set_model_id(model_);
    ar.set_checkpoint_id(checkpoint);
    ar.set_slot(slot);
    v1::RestoreLease lease;
    grpc::Status s = Call(&v1::CacheService::Stub::AcquireRestore, ar, &lease);
    ASSERT_TRUE(s.ok()) << s.error_message();
    DoSpill(lease.preserve());
    const SlotState& want = captured_.at(checkpoint);
    ASSERT_EQ(lease.depth(), want.tokens.size());
    last_restore_tier_ = lease.loaded_from();
    SlotState got;
    got.rows[0].resize(want.tokens.size() * kRowBytes);
    got.rows[1].resize(want.tokens.size() * kRowBytes);
    uint64_t kept = lease.kept_rows();
    for (uint64_t r = 0; r < kept; ++r) {  // Kept rows: the slot still holds them.
      for (int c = 0; c < 2; ++c) {
        std::copy_n(slots_[slot].rows[c].begin() + r * kRowBytes, kRowBytes,
                    got.rows[c].begin() + r * kRowBytes);
      }
    }
    for (const v1::ChunkRegion& chunk : lease.chunks()) {
      auto bytes = arena_->Resolve(ToHandle(chunk.region()));
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      ASSERT_EQ(Xxh3(bytes->data(), bytes->size()), chunk.checksum());
      ReadRows(&got, chunk.first_row(), chunk.rows(), bytes->data());
    }
    if (lease.tail().region().length() > 0) {
      auto bytes = arena_->Resolve(ToHandle(lease.tail().region()));
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      ASSERT_EQ(Xxh3(bytes->data(), bytes->size()), lease.tail().checksum());
      ReadRows(&got, lease.tail().first_row(), lease.tail().rows(), bytes->data());
    }
    auto priv = arena_->Resolve(ToHandle(lease.private_state().region()));
    ASSERT_TRUE(priv.ok()) << priv.status();
    got.private_state.assign(priv->begin(), priv->end());
    for (int c = 0; c < 2; ++c) {
      std::vector<uint8_t> expect(want.rows[c].begin(),
                                  want.rows[c].begin() + want.tokens.size() * kRowBytes);
      EXPECT_EQ(got.rows[c], expect) << "row component " << c;
    }
    EXPECT_EQ(got.private_state, want.private_state);
    v1::ReleaseLeaseRequest rel;
    rel.set_session_id(session());
    rel.set_lease_id(lease.lease_id());
    rel.set_restored(true);
    v1::ReleaseLeaseResponse released;
    s = Call(&v1::CacheService::Stub::ReleaseLease, rel, &released);
    ASSERT_TRUE(s.ok()) << s.error_message();
    slots_[slot] = got;
    slots_[slot].tokens = want.tokens;
  }

  // Reads the next server message on the session stream, which must be a spill request, and
  // performs it.
  void ServeOneSpill() {
    v1::SessionServerMessage m;
    ASSERT_TRUE(stream_->Read(&m));
    ASSERT_TRUE(m.has_spill_request()) << m.DebugString();
    EXPECT_TRUE(m.spill_request().urgent());
    DoSpill(m.spill_request());
  }

  v1::LookupResponse Lookup(const std::vector<uint32_t>& tokens) {
    v1::LookupRequest req;
    req.set_session_id(session());
    req.set_model_id(model_);
    for (uint32_t t : tokens) req.add_tokens(t);
    v1::LookupResponse resp;
    grpc::Status s = Call(&v1::CacheService::Stub::Lookup, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  void set_capture_kind(v1::CaptureKind kind) { capture_kind_ = kind; }
  // What was captured, by checkpoint id (to check restores made by another client).
  const std::map<uint64_t, SlotState>& captured() const { return captured_; }
  void set_captured(std::map<uint64_t, SlotState> c) { captured_ = std::move(c); }
  v1::Tier last_restore_tier() const { return last_restore_tier_; }
  uint64_t session() const { return welcome_.session_id(); }
  uint64_t model() const { return model_; }
  v1::CacheService::Stub* stub() { return stub_.get(); }
  const v1::Welcome& welcome() const { return welcome_; }
  MappedArena* arena() { return arena_.get(); }

 private:
  static ArenaHandle ToHandle(const v1::ArenaHandle& h) {
    return ArenaHandle{h.incarnation(), h.offset(), h.length()};
  }

  void Extend(uint32_t slot, const std::vector<uint32_t>& tokens, uint64_t from, uint64_t to,
              std::mt19937& rng) {
    if (to <= from) return;
    SlotState& st = slots_[slot];
    for (int c = 0; c < 2; ++c) {
      st.rows[c].resize(to * kRowBytes);
      for (uint64_t i = from * kRowBytes; i < to * kRowBytes; ++i) {
        st.rows[c][i] = static_cast<uint8_t>(rng());
      }
    }
    st.tokens.assign(tokens.begin(), tokens.begin() + to);
    v1::UpdateFrontierRequest up;
    up.set_session_id(session());
    up.set_model_id(model_);
    up.set_slot(slot);
    up.set_expected_depth(from);
    for (uint64_t i = from; i < to; ++i) up.add_append_tokens(tokens[i]);
    v1::UpdateFrontierResponse resp;
    grpc::Status s = Call(&v1::CacheService::Stub::UpdateFrontier, up, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(resp.depth(), to);
  }

  // Chunk/tail layout: component 0's rows, then component 1's.
  static void WriteRows(const SlotState& st, uint64_t first, uint64_t rows, uint8_t* out) {
    for (int c = 0; c < 2; ++c) {
      std::copy_n(st.rows[c].begin() + first * kRowBytes, rows * kRowBytes,
                  out + c * rows * kRowBytes);
    }
  }
  static void ReadRows(SlotState* st, uint64_t first, uint64_t rows, const uint8_t* in) {
    for (int c = 0; c < 2; ++c) {
      std::copy_n(in + c * rows * kRowBytes, rows * kRowBytes,
                  st->rows[c].begin() + first * kRowBytes);
    }
  }

  std::unique_ptr<v1::CacheService::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionClientMessage, v1::SessionServerMessage>>
      stream_;
  v1::Welcome welcome_;
  std::unique_ptr<MappedArena> arena_;
  uint64_t model_ = 0;
  v1::CaptureKind capture_kind_ = v1::CAPTURE_KIND_GRID;
  v1::Tier last_restore_tier_ = v1::TIER_UNSPECIFIED;
  std::map<uint32_t, SlotState> slots_;
  std::map<uint64_t, SlotState> captured_;
};

std::vector<uint32_t> Tokens(uint32_t seed, size_t n) {
  std::vector<uint32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = (seed * 7919u + static_cast<uint32_t>(i) * 31u) % 5000u;
  return out;
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
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::GetStatus, v1::GetStatusRequest(), &status)
                  .ok());
  v1::ListCheckpointsResponse list;
  ASSERT_TRUE(
      infer.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list)
          .ok());
  v1::GetTreeResponse tree;
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::GetTree, v1::GetTreeRequest(), &tree).ok());

  EXPECT_EQ(status.ram().checkpoints(), 3u);
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
    v1::CompleteSpillRequest spill;
    spill.set_session_id(infer.session());
    spill.mutable_done()->set_spill_id(99);
    v1::CompleteSpillResponse spilled;
    cases.push_back({"completion of a spill never asked",
                     infer.Call(&v1::CacheService::Stub::CompleteSpill, spill, &spilled),
                     grpc::StatusCode::NOT_FOUND});
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
  v1::AcquireRestoreRequest ar;
  ar.set_session_id(infer.session());
  ar.set_model_id(infer.model());
  ar.set_checkpoint_id(ids[0]);
  ar.set_slot(1);
  v1::RestoreLease lease;

  grpc::Status first = infer.Call(&v1::CacheService::Stub::AcquireRestore, ar, &lease);

  // The restore is refused for now, and the daemon asks for the rows on the session stream.
  EXPECT_EQ(first.error_code(), grpc::StatusCode::UNAVAILABLE) << first.error_message();
  ASSERT_NO_FATAL_FAILURE(infer.ServeOneSpill());
  ASSERT_NO_FATAL_FAILURE(infer.RestoreAndVerify(1, ids[0]));
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
  v1::FlushResponse flushed;
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::Flush, v1::FlushRequest(), &flushed).ok());
  v1::EvictRequest evict;
  evict.set_checkpoint_id(ids[0]);
  v1::EvictResponse evicted;

  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::Evict, evict, &evicted).ok());

  EXPECT_EQ(flushed.persisted(), 1u);
  std::vector<uint32_t> a2 = a;
  a2.push_back(7);
  v1::LookupResponse found = infer.Lookup(a2);
  EXPECT_EQ(found.best().tier(), v1::TIER_DISK);
  EXPECT_EQ(found.best().depth(), 72u);
  ASSERT_NO_FATAL_FAILURE(infer.RestoreAndVerify(1, ids[0]));
  EXPECT_EQ(infer.last_restore_tier(), v1::TIER_DISK);
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
    v1::FlushResponse flushed;
    ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::Flush, v1::FlushRequest(), &flushed).ok());
    ASSERT_EQ(flushed.persisted(), 2u);
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
