#ifndef CAIRN_TESTS_INTEGRATION_SERVICES_CACHE_FAKE_INFER_H_
#define CAIRN_TESTS_INTEGRATION_SERVICES_CACHE_FAKE_INFER_H_

// Cache daemon test support: an in-process daemon with its gRPC server, and a test client that
// plays cairn-infer against a cache daemon: one session, the arena mapped
// from the descriptor the daemon hands over, slots whose rows and private state are
// pseudo-random bytes kept locally, captures, spills and restores checked byte for byte.

#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
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

namespace cairn::cache::testing {

constexpr uint32_t kChunkRows = 16;
constexpr uint64_t kRowBytes = 64;        // Per row component.
constexpr uint64_t kPrivateBytes = 4096;  // One private component.
constexpr absl::Duration kRpcTimeout = absl::Seconds(10);

inline std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/cairn-cache-it-" + std::to_string(::getpid()) + "-" + name;
}

// A cache daemon with its gRPC server in this process.
class Server {
 public:
  explicit Server(int64_t ram_bytes = 8 << 20, const std::string& disk_root = "",
                  const Clock* clock = RealClock::Get())
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
    auto daemon = CacheDaemon::Create(options, clock);
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
  grpc::Status Call(grpc::Status (v1::CacheService::Stub::*method)(grpc::ClientContext*, const Req&,
                                                                   Resp*),
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
    slots_[slot] = SlotState();
    return ExtendAndCapture(slot, tokens, captures, seed);
  }

  // Continues `slot` from its current frontier (after PrefillCold or RestoreAndVerify) along
  // `tokens`, capturing at every depth in `captures`, then to the end of `tokens`.
  std::vector<uint64_t> ExtendAndCapture(uint32_t slot, const std::vector<uint32_t>& tokens,
                                         const std::vector<uint64_t>& captures, uint32_t seed) {
    std::vector<uint64_t> ids;
    SlotState& st = slots_[slot];
    std::mt19937 rng(seed);
    uint64_t depth = st.tokens.size();
    grpc::Status s;
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

  // Sends a heartbeat; false if the stream is gone.
  bool Heartbeat() {
    v1::SessionClientMessage m;
    m.mutable_heartbeat()->set_sent_unix_ms(1);
    return stream_->Write(m);
  }
  // Reads until the server ends the session stream and returns its status.
  grpc::Status AwaitSessionEnd() {
    v1::SessionServerMessage m;
    while (stream_->Read(&m)) {
    }
    grpc::Status s = stream_->Finish();
    stream_.reset();
    return s;
  }

  // Tells the daemon `slot` has no work (the disk writer stops yielding to it). Any borrowed
  // rows left in the slot come back as a spill request on the stream (see ServeOneSpill).
  void ReportIdle(uint32_t slot) {
    v1::SessionClientMessage m;
    m.mutable_slot_idle()->set_slot(slot);
    ASSERT_TRUE(stream_->Write(m));
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

inline std::vector<uint32_t> Tokens(uint32_t seed, size_t n) {
  std::vector<uint32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = (seed * 7919u + static_cast<uint32_t>(i) * 31u) % 5000u;
  return out;
}

}  // namespace cairn::cache::testing

#endif  // CAIRN_TESTS_INTEGRATION_SERVICES_CACHE_FAKE_INFER_H_
