#ifndef CAIRN_TESTS_INTEGRATION_SERVICES_CACHE_FAKE_INFER_H_
#define CAIRN_TESTS_INTEGRATION_SERVICES_CACHE_FAKE_INFER_H_

// Cache daemon test support: an in-process daemon with its gRPC server, and a test client that
// plays cairn-infer against a cache daemon: one session, the arena mapped
// from the descriptor the daemon hands over, slots whose rows and private state are
// pseudo-random bytes kept locally, captures, spills and restores checked byte for byte.
//
// FakeInfer is the reference client of the session protocol (docs/cache-protocol.md): a
// reader thread collects the server's stream messages (spill requests, LeaseReady, Draining)
// in an inbox; spills are performed from the slots' local rows and reported with SpillDone on
// the stream; preserve spills are reported before a slot is overwritten; a lease that is not
// ready is read only after its LeaseReady, serving the session's own spill requests meanwhile.

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/checksum/checksum.h"
#include "common/concurrency/mutex.h"
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
  // `file_system`: nullptr = POSIX (a fault-injecting one for disk-full tests); `disk_bytes`
  // 0 = the daemon's default share of the free space.
  explicit Server(int64_t ram_bytes = 8 << 20, const std::string& disk_root = "",
                  const Clock* clock = RealClock::Get(), FileSystem* file_system = nullptr,
                  int64_t disk_bytes = 64 << 20)
      : pool_(2) {
    CacheDaemonOptions options;
    options.cache.ram_bytes = ram_bytes;
    if (!disk_root.empty()) {
      options.disk_root = disk_root;
      options.cache.disk_bytes = disk_bytes;
      options.file_system = file_system;
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
  // What main.cc does on SIGTERM: sessions are told and ended, then the server drains.
  void Drain(absl::Duration session_grace) {
    service_->DrainSessions(session_grace);
    EXPECT_TRUE(service_->DrainCalls(absl::Seconds(10)));
    runner_->Drain();
    runner_->Wait();
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
    reader_ = std::thread([this] { ReadStream(); });
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

  // Closes the session (pending spill requests stay unanswered) and waits for its end.
  void EndSession() {
    if (stream_ == nullptr) return;
    {
      MutexLock lock(&write_mu_);
      stream_->WritesDone();
    }
    grpc::Status ignored = AwaitSessionEnd();
    (void)ignored;
  }

  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (v1::CacheService::Stub::*method)(grpc::ClientContext*, const Req&,
                                                                   Resp*),
                    const Req& req, Resp* resp) {
    auto ctx = NewClientContext(kRpcTimeout);
    return (stub_.get()->*method)(ctx.get(), req, resp);
  }

  // Flushes until `expected` checkpoints in all were published, or a few seconds went by;
  // returns how many were. The SpillDone that lets a deferred disk write go ahead travels on
  // the session stream, so a Flush sent just after it may reach the daemon first and not
  // wait for that write.
  uint64_t FlushUntilPersisted(uint64_t expected) {
    uint64_t persisted = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    for (;;) {
      v1::FlushResponse flushed;
      grpc::Status s = Call(&v1::CacheService::Stub::Flush, v1::FlushRequest(), &flushed);
      EXPECT_TRUE(s.ok()) << s.error_message();
      persisted += flushed.persisted();
      if (!s.ok() || persisted >= expected || absl::Now() > deadline) return persisted;
      absl::SleepFor(absl::Milliseconds(5));
    }
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
    ServeSpills(started.preserve_spills());
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

  // Copies the requested rows from the slot's local state into the arena and reports them
  // with SpillDone on the stream.
  void DoSpill(const v1::SpillRequest& spill) {
    v1::SessionClientMessage m;
    v1::SpillDone* done = m.mutable_spill_done();
    done->set_spill_id(spill.spill_id());
    SlotState& st = slots_[spill.slot()];
    for (const v1::ChunkSpill& c : spill.chunks()) {
      auto dest = arena_->Resolve(ToHandle(c.destination()));
      ASSERT_TRUE(dest.ok()) << dest.status();
      WriteRows(st, c.first_row(), c.rows(), dest->data());
      done->add_chunk_ids(c.chunk_id());
      done->add_checksums(Xxh3(dest->data(), dest->size()) + checksum_skew_);
    }
    ASSERT_TRUE(Write(m));
  }

  // Waits for the spill requests `ids` on the stream and performs them.
  void ServeSpills(const google::protobuf::RepeatedField<uint64_t>& ids) {
    for (uint64_t id : ids) {
      v1::SessionServerMessage m;
      ASSERT_TRUE(Take(
          [id](const v1::SessionServerMessage& x) {
            return x.has_spill_request() && x.spill_request().spill_id() == id;
          },
          &m))
          << "spill request " << id << " never arrived";
      ASSERT_NO_FATAL_FAILURE(DoSpill(m.spill_request()));
    }
  }

  // Waits for the next spill request on the stream and performs it (urgent or not).
  void ServeOneSpill() {
    v1::SessionServerMessage m;
    ASSERT_TRUE(Take([](const v1::SessionServerMessage& x) { return x.has_spill_request(); }, &m))
        << "no spill request arrived";
    ASSERT_NO_FATAL_FAILURE(DoSpill(m.spill_request()));
  }

  // Waits for the next spill request and returns it without performing it.
  v1::SpillRequest NextSpillRequest() {
    v1::SessionServerMessage m;
    EXPECT_TRUE(Take([](const v1::SessionServerMessage& x) { return x.has_spill_request(); }, &m))
        << "no spill request arrived";
    return m.spill_request();
  }

  // Waits for LeaseReady of `lease_id`, performing this session's spill requests meanwhile
  // (a lease may wait for rows this very session holds).
  v1::LeaseReady AwaitLeaseReady(uint64_t lease_id) {
    const absl::Time deadline = absl::Now() + kRpcTimeout;
    while (absl::Now() < deadline) {
      v1::SessionServerMessage m;
      bool got = Take(
          [lease_id](const v1::SessionServerMessage& x) {
            return x.has_spill_request() ||
                   (x.has_lease_ready() && x.lease_ready().lease_id() == lease_id);
          },
          &m);
      if (!got) break;
      if (m.has_lease_ready()) return m.lease_ready();
      DoSpill(m.spill_request());
    }
    ADD_FAILURE() << "no LeaseReady for lease " << lease_id;
    return v1::LeaseReady();
  }

  // True once the server sent Draining on the stream.
  bool SawDraining() {
    MutexLock lock(&inbox_mu_);
    for (const v1::SessionServerMessage& m : inbox_) {
      if (m.has_draining()) return true;
    }
    return false;
  }

  // Asks for a restore lease of `checkpoint` into `slot`.
  grpc::Status AcquireRestore(uint32_t slot, uint64_t checkpoint, v1::RestoreLease* lease) {
    v1::AcquireRestoreRequest ar;
    ar.set_session_id(session());
    ar.set_model_id(model_);
    ar.set_checkpoint_id(checkpoint);
    ar.set_slot(slot);
    return Call(&v1::CacheService::Stub::AcquireRestore, ar, lease);
  }

  // Restores `checkpoint` into `slot` and checks every byte against what was captured.
  void RestoreAndVerify(uint32_t slot, uint64_t checkpoint) {
    v1::RestoreLease lease;
    grpc::Status s = AcquireRestore(slot, checkpoint, &lease);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_NO_FATAL_FAILURE(ServeSpills(lease.preserve_spills()));
    if (!lease.ready()) {
      v1::LeaseReady ready = AwaitLeaseReady(lease.lease_id());
      ASSERT_TRUE(ready.ok()) << ready.failure();
      ApplyLeaseReady(ready, &lease);
    }
    ASSERT_NO_FATAL_FAILURE(VerifyAndRelease(slot, checkpoint, lease));
  }

  // Fills in the checksums LeaseReady carries for the chunks that were not resident yet.
  static void ApplyLeaseReady(const v1::LeaseReady& ready, v1::RestoreLease* lease) {
    for (const v1::ChunkRegion& c : ready.chunks()) {
      for (v1::ChunkRegion& mine : *lease->mutable_chunks()) {
        if (mine.chunk_id() == c.chunk_id()) mine = c;
      }
    }
    lease->set_ready(true);
  }

  // Reads a ready lease into `slot`, checks every byte against what was captured, releases it.
  void VerifyAndRelease(uint32_t slot, uint64_t checkpoint, const v1::RestoreLease& lease) {
    grpc::Status s;
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
    return Write(m);
  }
  // Waits until the server ends the session stream and returns its status.
  grpc::Status AwaitSessionEnd() {
    if (reader_.joinable()) reader_.join();
    grpc::Status s = stream_->Finish();
    stream_.reset();
    return s;
  }

  // Tells the daemon `slot` has no work (the disk writer stops yielding to it). Any borrowed
  // rows left in the slot come back as a spill request on the stream (see ServeOneSpill).
  void ReportIdle(uint32_t slot) {
    v1::SessionClientMessage m;
    m.mutable_slot_idle()->set_slot(slot);
    ASSERT_TRUE(Write(m));
  }

  // Writes `m` on the session stream; false if the stream is gone.
  bool Write(const v1::SessionClientMessage& m) {
    MutexLock lock(&write_mu_);
    return stream_ != nullptr && stream_->Write(m);
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
  // Added to every spill checksum reported (non-zero: the reports lie).
  void set_checksum_skew(uint64_t skew) { checksum_skew_ = skew; }
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
  // The reader thread: every server message after Welcome goes to the inbox.
  void ReadStream() {
    v1::SessionServerMessage m;
    while (stream_->Read(&m)) {
      MutexLock lock(&inbox_mu_);
      inbox_.push_back(m);
      inbox_cv_.SignalAll();
    }
    MutexLock lock(&inbox_mu_);
    stream_ended_ = true;
    inbox_cv_.SignalAll();
  }

  // Removes the first inbox message matching `match` into `out`, waiting up to kRpcTimeout.
  bool Take(const std::function<bool(const v1::SessionServerMessage&)>& match,
            v1::SessionServerMessage* out) {
    const absl::Time deadline = absl::Now() + kRpcTimeout;
    MutexLock lock(&inbox_mu_);
    while (true) {
      for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
        if (match(*it)) {
          *out = std::move(*it);
          inbox_.erase(it);
          return true;
        }
      }
      const absl::Duration left = deadline - absl::Now();
      if (stream_ended_ || left <= absl::ZeroDuration()) return false;
      inbox_cv_.WaitWithTimeout(&inbox_mu_, left);
    }
  }

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
  std::thread reader_;
  Mutex write_mu_;  // One writer at a time on the stream.
  Mutex inbox_mu_;
  CondVar inbox_cv_;
  std::deque<v1::SessionServerMessage> inbox_ ABSL_GUARDED_BY(inbox_mu_);
  bool stream_ended_ ABSL_GUARDED_BY(inbox_mu_) = false;
  uint64_t checksum_skew_ = 0;
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

// Token i of conversation `seed`: a splitmix64 hash of (seed, i), so two seeds share no prefix
// however many conversations a test makes (a linear formula repeated every 5,000 seeds, and the
// 1,000-kill soak then captured the same tokens twice).
inline std::vector<uint32_t> Tokens(uint32_t seed, size_t n) {
  std::vector<uint32_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = (uint64_t{seed} << 32 | i) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    out[i] = static_cast<uint32_t>(z % 5000u);
  }
  return out;
}

}  // namespace cairn::cache::testing

#endif  // CAIRN_TESTS_INTEGRATION_SERVICES_CACHE_FAKE_INFER_H_
