// The cache daemon's real client, GrpcStateCache, against an in-process cache daemon, driven the
// way the scheduler drives it but without a model: a "forward pass" writes rows and private
// state that are a pure function of the token prefix, so every restore can be checked byte for
// byte. Covers the protocol paths the end-to-end tests reach only by chance: a restore that waits
// for another slot's borrowed rows, preservation before a slot is overwritten, idle spills in
// the background, and a restarted cache daemon whose old checkpoint ids are never used. The
// client against a cache that answers but never reads its stream is in
// cache_client_stalled_test.cc.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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
using ::cairn::infer::testing::kPrivateFloats;
using ::cairn::infer::testing::kRowFloats;
using ::cairn::infer::testing::Layout;
using ::cairn::testing::StatusIs;

constexpr int kSlots = 2;

uint64_t Mix(uint64_t h, int32_t token) {
  h ^= static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ull + (h << 6) +
       (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// The row a forward pass leaves for the token at `r` given the prefix hash through it.
std::vector<float> Row(uint64_t h) {
  std::vector<float> row(kRowFloats);
  for (int64_t i = 0; i < kRowFloats; ++i) row[i] = static_cast<float>((h >> (i * 4)) & 0xffff);
  return row;
}

// The private state after a prefix whose hash is `h`.
std::vector<float> Private(uint64_t h) {
  std::vector<float> p(kPrivateFloats);
  for (int64_t i = 0; i < kPrivateFloats; ++i) {
    p[i] = static_cast<float>((h ^ (static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull)) & 0xffffff);
  }
  return p;
}

std::vector<int32_t> Tokens(int32_t seed, int64_t n) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed * 7919 + i * 104729) % 50000);
  return t;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Plays the scheduler over slots in host memory and the real cache client.
class Driver {
 public:
  // `device_memory`: passed to the client as the backend's memory (arena pinning).
  // `rows_only`: the layout has no private component (Layout()). `slot_memory`: where the
  // slots live; `background_spill_bytes`: the client's option of that name.
  explicit Driver(const std::string& address, DeviceMemory* device_memory = nullptr,
                  bool rows_only = false, DeviceMemory* slot_memory = HostDeviceMemory(),
                  int64_t background_spill_bytes = GrpcStateCacheOptions().background_spill_bytes)
      : rows_only_(rows_only) {
    absl::StatusOr<std::unique_ptr<SlotKvMemory>> kv = SlotKvMemory::Create(
        Layout(rows_only), {.slots = kSlots, .max_rows = kMaxRows, .memory = slot_memory});
    EXPECT_TRUE(kv.ok()) << kv.status();
    kv_ = *std::move(kv);
    GrpcStateCacheOptions o;
    o.address = address;
    o.instance_name = "cache-client-test";
    o.slots = kSlots;
    o.model_name = "driver";
    // Another layout is another model to the cache.
    o.identity.set_digest(rows_only ? "cache-client-test-rows-only" : "cache-client-test-model");
    o.layout = Layout(rows_only);
    o.rpc_timeout = absl::Seconds(10);
    o.reconnect_min = absl::Milliseconds(20);
    o.reconnect_max = absl::Milliseconds(200);
    o.device_memory = device_memory;
    o.background_spill_bytes = background_spill_bytes;
    cache_ = std::make_unique<GrpcStateCache>(o, [] {});
    tokens_.resize(kSlots);
  }
  ~Driver() { cache_->Shutdown(); }

  GrpcStateCache& cache() { return *cache_; }
  SlotKvMemory& kv() { return *kv_; }

  // A cold start of `slot` for `conversation`, then a prefill of `prompt` that captures at its
  // end (as the scheduler does for the prompt-end capture).
  void PrefillAndCapture(int slot, const std::string& conversation,
                         const std::vector<int32_t>& prompt) {
    CAIRN_ASSERT_OK(cache_->StartSlot(slot, /*cold=*/true, conversation, kv_.get()));
    CAIRN_ASSERT_OK(kv_->Reset(slot));
    tokens_[slot].clear();
    Append(slot, prompt);
    CAIRN_ASSERT_OK(cache_->UpdateFrontier(slot, prompt, 0));
    CAIRN_ASSERT_OK(cache_->Capture(slot, static_cast<int64_t>(prompt.size()),
                                    CapturePointKind::kEnd, conversation, 0, kv_.get()));
  }

  // Writes the rows and private state a forward pass over `tokens` would leave in `slot`.
  void Append(int slot, const std::vector<int32_t>& tokens) {
    SlotState* s = kv_->slot(slot);
    CAIRN_ASSERT_OK(s->PrepareAppend(static_cast<int64_t>(tokens.size())));
    uint64_t h = Hash(tokens_[slot]);
    for (size_t i = 0; i < tokens.size(); ++i) {
      h = Mix(h, tokens[i]);
      const std::vector<float> row = Row(h);
      const int64_t r = s->position() + static_cast<int64_t>(i);
      CAIRN_ASSERT_OK(s->memory()->Upload(s->data(0) + r * kRowFloats, row.data(), kRowFloats * 4));
    }
    if (!rows_only_) {
      const std::vector<float> p = Private(h);
      CAIRN_ASSERT_OK(s->memory()->Upload(s->data(1), p.data(), kPrivateFloats * 4));
    }
    s->CommitAppend(static_cast<int64_t>(tokens.size()));
    tokens_[slot].insert(tokens_[slot].end(), tokens.begin(), tokens.end());
  }

  // Checks that `slot` holds exactly the state of `prefix`.
  void ExpectHolds(int slot, const std::vector<int32_t>& prefix) {
    SlotState* s = kv_->slot(slot);
    ASSERT_TRUE(s->runnable());
    ASSERT_EQ(s->position(), static_cast<int64_t>(prefix.size()));
    std::vector<uint8_t> rows(prefix.size() * kRowFloats * 4);
    CAIRN_ASSERT_OK(
        kv_->CopyRowsOut(slot, 0, 0, static_cast<int64_t>(prefix.size()), absl::MakeSpan(rows)));
    const float* got = reinterpret_cast<const float*>(rows.data());
    uint64_t h = 0;
    for (size_t r = 0; r < prefix.size(); ++r) {
      h = Mix(h, prefix[r]);
      const std::vector<float> want = Row(h);
      ASSERT_EQ(std::vector<float>(got + r * kRowFloats, got + (r + 1) * kRowFloats), want)
          << "row " << r;
    }
    if (rows_only_) return;
    std::vector<uint8_t> priv(kPrivateFloats * 4);
    ASSERT_TRUE(kv_->CapturePrivateState(slot, absl::MakeSpan(priv)).ok());
    const float* p = reinterpret_cast<const float*>(priv.data());
    EXPECT_EQ(std::vector<float>(p, p + kPrivateFloats), Private(h));
  }

  // The deepest RAM candidate the cache offers for `prompt`, or 0.
  uint64_t RamCandidate(const std::vector<int32_t>& prompt, int64_t* depth) {
    absl::StatusOr<StatePlan> plan = cache_->Lookup(prompt, 0, 0, "lookup");
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return 0;
    for (const StateCandidate& c : plan->candidates) {
      if (c.tier == StateTier::kRam) {
        *depth = c.depth;
        return c.checkpoint_id;
      }
    }
    return 0;
  }

  void Forget(int slot) { tokens_[slot].clear(); }

 private:
  static uint64_t Hash(const std::vector<int32_t>& tokens) {
    uint64_t h = 0;
    for (int32_t t : tokens) h = Mix(h, t);
    return h;
  }

  const bool rows_only_;
  std::unique_ptr<SlotKvMemory> kv_;
  std::unique_ptr<GrpcStateCache> cache_;
  std::vector<std::vector<int32_t>> tokens_;
};

class CacheClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<cache::testing::Server>(32 << 20);
    driver_ = std::make_unique<Driver>(server_->address());
    ASSERT_TRUE(driver_->cache().WaitConnected(absl::Seconds(10)));
  }

  std::unique_ptr<cache::testing::Server> server_;
  std::unique_ptr<Driver> driver_;
};

TEST_F(CacheClientTest, RestoreIntoAnotherSlotWaitsForTheBorrowedRows) {
  // 600 tokens: two full chunks stay borrowed in slot 0, which keeps working (not idle).
  const std::vector<int32_t> a = Tokens(1, 600);
  driver_->PrefillAndCapture(0, "a", a);
  int64_t depth = 0;
  const uint64_t id = driver_->RamCandidate(Concat(a, Tokens(2, 10)), &depth);
  ASSERT_NE(id, 0u);
  EXPECT_EQ(depth, 600);

  // The lease is ready only after this client spilled slot 0's rows, which Restore does itself.
  absl::StatusOr<RestoreStats> r = driver_->cache().Restore(id, 1, "a", &driver_->kv(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->depth, 600);
  driver_->ExpectHolds(1, a);
  driver_->ExpectHolds(0, a);  // The spill copied; slot 0 is unchanged.
}

// A restore whose lease waits for rows another daemon's slot still holds ends when its
// request does: Cancelled once the client is gone, DeadlineExceeded at the request's deadline,
// each long before the client's lease wait, and the session goes on (a lease that is not ready
// is given back, not the session ended). Polled, it never waits for the lease: each poll
// answers at once until the other daemon spilled the rows, then restores them.
TEST_F(CacheClientTest, ARestoreWaitingForItsLeaseEndsWithItsRequest) {
  Driver other(server_->address());
  ASSERT_TRUE(other.cache().WaitConnected(absl::Seconds(10)));
  // 600 tokens: two full chunks stay borrowed in the other daemon's slot 0, which never spills
  // them while this test does not drive it.
  const std::vector<int32_t> a = Tokens(1, 600);
  other.PrefillAndCapture(0, "a", a);
  int64_t depth = 0;
  const uint64_t id = driver_->RamCandidate(Concat(a, Tokens(2, 10)), &depth);
  ASSERT_NE(id, 0u);
  const uint64_t generation = driver_->cache().generation();

  std::atomic<bool> gone{false};
  RestoreLimits cancelled;
  cancelled.cancelled = [&gone] { return gone.load(); };
  std::thread client([&gone] {
    absl::SleepFor(absl::Milliseconds(200));
    gone.store(true);
  });
  absl::Time t0 = absl::Now();
  absl::StatusOr<RestoreStats> r = driver_->cache().Restore(id, 1, "a", &driver_->kv(), cancelled);
  client.join();
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));

  RestoreLimits deadline;
  deadline.deadline = absl::Now() + absl::Milliseconds(200);
  t0 = absl::Now();
  r = driver_->cache().Restore(id, 1, "a", &driver_->kv(), deadline);
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));

  EXPECT_TRUE(driver_->cache().connected());
  EXPECT_EQ(driver_->cache().generation(), generation);
  // Once the other daemon spills its rows, the same checkpoint restores on the same session.
  ASSERT_TRUE(driver_->cache().StartRestore(id, 1, "a", &driver_->kv()).ok());
  t0 = absl::Now();
  absl::StatusOr<std::optional<RestoreStats>> polled =
      driver_->cache().PollRestore(1, &driver_->kv(), {});
  ASSERT_TRUE(polled.ok()) << polled.status();
  EXPECT_FALSE(polled->has_value());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  for (int i = 0; i < 1000 && polled.ok() && !polled->has_value(); ++i) {
    other.cache().RunBackgroundWork(&other.kv(), absl::Milliseconds(100));
    absl::SleepFor(absl::Milliseconds(5));
    polled = driver_->cache().PollRestore(1, &driver_->kv(), {});
  }
  ASSERT_TRUE(polled.ok()) << polled.status();
  ASSERT_TRUE(polled->has_value());
  EXPECT_EQ((*polled)->depth, 600);
  driver_->ExpectHolds(1, a);
  EXPECT_EQ(driver_->cache().generation(), generation);
}

// A model without private state: its checkpoints are rows alone, and one at a chunk boundary
// holds no private or tail bytes at all (a zero-byte state region).
TEST_F(CacheClientTest, ARowsOnlyLayoutCapturesAndRestoresWithoutPrivateState) {
  Driver rows(server_->address(), nullptr, /*rows_only=*/true);
  ASSERT_TRUE(rows.cache().WaitConnected(absl::Seconds(10)));
  for (const int64_t n : {int64_t{600}, 2 * kRowsPerChunk}) {
    SCOPED_TRACE(n);
    const std::vector<int32_t> a = Tokens(static_cast<int32_t>(n), n);
    rows.PrefillAndCapture(0, absl::StrCat("rows-", n), a);
    int64_t depth = 0;
    const uint64_t id = rows.RamCandidate(Concat(a, Tokens(2, 10)), &depth);
    ASSERT_NE(id, 0u);
    EXPECT_EQ(depth, n);

    absl::StatusOr<RestoreStats> r =
        rows.cache().Restore(id, 1, absl::StrCat("rows-", n), &rows.kv(), {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->depth, n);
    rows.ExpectHolds(1, a);
    rows.Forget(1);
  }
}

TEST_F(CacheClientTest, ABorrowedCheckpointSurvivesItsSlotBeingOverwritten) {
  const std::vector<int32_t> a = Tokens(3, 700);
  driver_->PrefillAndCapture(0, "a", a);
  // Conversation b takes slot 0: StartSlot preserves a's borrowed rows before they change.
  driver_->PrefillAndCapture(0, "b", Tokens(4, 900));
  driver_->ExpectHolds(0, Tokens(4, 900));

  int64_t depth = 0;
  const uint64_t id = driver_->RamCandidate(Concat(a, Tokens(5, 10)), &depth);
  ASSERT_NE(id, 0u);
  EXPECT_EQ(depth, 700);
  absl::StatusOr<RestoreStats> r = driver_->cache().Restore(id, 1, "a", &driver_->kv(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  driver_->ExpectHolds(1, a);
}

// A slot start the cache refuses (here a conversation label longer than it takes; a timeout or
// spill requests that never arrive end the same way) leaves the scheduler overwriting the slot
// without the cache's leave, while checkpoints still borrow its rows: the client must make the
// cache forget them (it ends the session), so that no later spill copies the new rows into an
// old checkpoint and a restore never hands back another conversation's state.
TEST_F(CacheClientTest, ARefusedSlotStartNeverLetsAnotherConversationsRowsBeRestored) {
  const std::vector<int32_t> a = Tokens(10, 700);
  driver_->PrefillAndCapture(0, "a", a);

  const absl::Status started =
      driver_->cache().StartSlot(0, /*cold=*/true, std::string(300, 'b'), &driver_->kv());
  ASSERT_FALSE(started.ok());
  // What the scheduler does next: the request prefills the slot cold, without the cache.
  CAIRN_ASSERT_OK(driver_->kv().Reset(0));
  driver_->Forget(0);
  driver_->Append(0, Tokens(11, 900));
  ASSERT_TRUE(driver_->cache().WaitConnected(absl::Seconds(10)));

  int64_t depth = 0;
  const uint64_t id = driver_->RamCandidate(Concat(a, Tokens(12, 5)), &depth);
  if (id != 0) {
    absl::StatusOr<RestoreStats> r = driver_->cache().Restore(id, 1, "a", &driver_->kv(), {});
    if (r.ok()) driver_->ExpectHolds(1, a);
  }
}

TEST_F(CacheClientTest, IdleSpillsRunInTheBackgroundAndThenTheSlotIsNotNeeded) {
  const std::vector<int32_t> a = Tokens(6, 1000);
  driver_->PrefillAndCapture(0, "a", a);
  driver_->cache().SlotIdle(0);
  // The cache asks for the idle slot's borrowed rows; the scheduler's idle loop does them.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!driver_->cache().HasBackgroundWork() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(driver_->cache().HasBackgroundWork()) << "no idle spill was asked for";
  while (driver_->cache().RunBackgroundWork(&driver_->kv(), absl::Milliseconds(50))) {
  }

  // Scribble over slot 0's rows behind the cache's back: if any chunk were still borrowed, the
  // restore below would copy these zeros and fail the check.
  SlotState* s0 = driver_->kv().slot(0);
  const std::vector<float> zeros(a.size() * kRowFloats, 0.0f);
  CAIRN_ASSERT_OK(s0->memory()->Upload(s0->data(0), zeros.data(), zeros.size() * 4));

  int64_t depth = 0;
  const uint64_t id = driver_->RamCandidate(Concat(a, Tokens(7, 3)), &depth);
  ASSERT_NE(id, 0u);
  absl::StatusOr<RestoreStats> r = driver_->cache().Restore(id, 1, "a", &driver_->kv(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  driver_->ExpectHolds(1, a);
}

// Host memory whose background copies run as a slow device's would: none has happened until
// someone waits for it (then each copies the bytes its source holds at that moment), and
// BackgroundDone says so until `Release` lets them run.
class SlowCopies final : public DeviceMemory {
 public:
  const char* name() const override { return "slow-copies"; }
  bool host_visible() const override { return true; }
  absl::StatusOr<void*> Allocate(int64_t bytes) override { return host_->Allocate(bytes); }
  void Free(void* p) override { host_->Free(p); }
  absl::Status Upload(void* d, const void* s, int64_t n) override { return host_->Upload(d, s, n); }
  absl::Status Download(void* d, const void* s, int64_t n) override {
    return host_->Download(d, s, n);
  }
  absl::Status Copy(void* d, const void* s, int64_t n) override { return host_->Copy(d, s, n); }
  absl::Status Zero(void* d, int64_t n) override { return host_->Zero(d, n); }
  absl::StatusOr<uint64_t> DownloadBackground(void* dst, const void* src, int64_t n) override {
    pending_.push_back({++issued_, dst, src, n});
    return issued_;
  }
  absl::StatusOr<bool> BackgroundDone(uint64_t ticket) override {
    if (released_) {
      absl::Status waited = WaitBackground(issued_);
      if (!waited.ok()) return waited;
    }
    return ticket <= done_;
  }
  absl::Status WaitBackground(uint64_t ticket) override {
    while (done_ < ticket && !pending_.empty()) {
      std::memcpy(pending_.front().dst, pending_.front().src, pending_.front().bytes);
      done_ = pending_.front().ticket;
      pending_.erase(pending_.begin());
    }
    return absl::OkStatus();
  }
  void Release() { released_ = true; }
  uint64_t issued() const { return issued_; }
  uint64_t done() const { return done_; }

 private:
  struct Pending {
    uint64_t ticket;
    void* dst;
    const void* src;
    int64_t bytes;
  };
  DeviceMemory* const host_ = HostDeviceMemory();
  std::vector<Pending> pending_;
  uint64_t issued_ = 0;
  uint64_t done_ = 0;
  bool released_ = false;
};

// Idle spills start while the slots are busy (no budget), copy in the background and are
// answered only when their copies are done: a restore that needs the rows waits for them
// (the cache's lease is ready only after the answers), and the restored rows are right.
// Captures `a` in slot 0 of `d`, lets the slot go idle and waits for the cache to ask for its
// borrowed rows (idle spills).
void CaptureAndIdle(Driver& d, const std::vector<int32_t>& a) {
  ASSERT_TRUE(d.cache().WaitConnected(absl::Seconds(10)));
  d.PrefillAndCapture(0, "a", a);
  d.cache().SlotIdle(0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!d.cache().HasBackgroundWork() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(d.cache().HasBackgroundWork()) << "no idle spill was asked for";
}

// Restores conversation "a" (its checkpoint at the end of `a`) into slot 1 and checks its rows.
void RestoreIntoSlot1(Driver& d, const std::vector<int32_t>& a) {
  int64_t depth = 0;
  const uint64_t id = d.RamCandidate(Concat(a, Tokens(7, 3)), &depth);
  ASSERT_NE(id, 0u);
  absl::StatusOr<RestoreStats> r = d.cache().Restore(id, 1, "a", &d.kv(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  d.ExpectHolds(1, a);
}

TEST_F(CacheClientTest, BackgroundSpillsAreAnsweredWhenTheirCopiesAreDone) {
  SlowCopies slow;
  Driver d(server_->address(), nullptr, false, &slow);
  const std::vector<int32_t> a = Tokens(6, 1000);
  ASSERT_NO_FATAL_FAILURE(CaptureAndIdle(d, a));
  // Busy: the spills start in the background and stay unanswered while their copies wait.
  for (int i = 0; i < 20; ++i) d.cache().RunBackgroundWork(&d.kv(), absl::ZeroDuration());
  EXPECT_GT(slow.issued(), 0u);
  EXPECT_EQ(slow.done(), 0u);
  EXPECT_TRUE(d.cache().HasBackgroundWork());

  ASSERT_NO_FATAL_FAILURE(RestoreIntoSlot1(d, a));
  EXPECT_EQ(slow.done(), slow.issued());
  d.ExpectHolds(0, a);
}

// The copies complete on their own (the device finished): polling answers them, and once every
// chunk is spilled the slot's rows are not needed by the checkpoint any more.
TEST_F(CacheClientTest, BackgroundSpillsThatFinishAreAnsweredByPolling) {
  SlowCopies slow;
  Driver d(server_->address(), nullptr, false, &slow);
  const std::vector<int32_t> a = Tokens(6, 1000);
  ASSERT_NO_FATAL_FAILURE(CaptureAndIdle(d, a));
  d.cache().RunBackgroundWork(&d.kv(), absl::ZeroDuration());
  ASSERT_GT(slow.issued(), 0u);
  slow.Release();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (d.cache().RunBackgroundWork(&d.kv(), absl::ZeroDuration()) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_FALSE(d.cache().HasBackgroundWork());
  EXPECT_EQ(slow.done(), slow.issued());

  // Scribble over slot 0's rows behind the cache's back: a chunk still borrowed would make
  // the restore below copy these zeros.
  SlotState* s0 = d.kv().slot(0);
  const std::vector<float> zeros(a.size() * kRowFloats, 0.0f);
  CAIRN_ASSERT_OK(s0->memory()->Upload(s0->data(0), zeros.data(), zeros.size() * 4));
  ASSERT_NO_FATAL_FAILURE(RestoreIntoSlot1(d, a));
}

TEST_F(CacheClientTest, ARestartedCacheNeverSeesAnOldCheckpointId) {
  const std::vector<int32_t> a = Tokens(8, 600);
  driver_->PrefillAndCapture(0, "a", a);
  int64_t depth = 0;
  const uint64_t old_id = driver_->RamCandidate(Concat(a, Tokens(9, 4)), &depth);
  ASSERT_NE(old_id, 0u);
  const uint64_t generation = driver_->cache().generation();

  server_.reset();  // The cache daemon goes away (no disk tier: its RAM is gone with it).
  EXPECT_EQ(driver_->cache().Lookup(a, 0, 0, "a").status().code(), absl::StatusCode::kUnavailable);
  server_ = std::make_unique<cache::testing::Server>(32 << 20);  // Same address, new arena.
  ASSERT_TRUE(driver_->cache().WaitConnected(absl::Seconds(10)));
  EXPECT_NE(driver_->cache().generation(), generation);

  // The new daemon knows nothing of the old id; the restore fails cleanly and empties the slot.
  absl::StatusOr<RestoreStats> r = driver_->cache().Restore(old_id, 1, "a", &driver_->kv(), {});
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(driver_->kv().slot(1)->runnable());
  EXPECT_EQ(driver_->kv().slot(1)->position(), 0);
  driver_->Forget(1);

  // And the new session works: capture and restore again.
  driver_->PrefillAndCapture(0, "a", a);
  const uint64_t id = driver_->RamCandidate(Concat(a, Tokens(9, 4)), &depth);
  ASSERT_NE(id, 0u);
  absl::StatusOr<RestoreStats> again = driver_->cache().Restore(id, 1, "a", &driver_->kv(), {});
  ASSERT_TRUE(again.ok()) << again.status();
  driver_->ExpectHolds(1, a);
}

// A device memory that only records page-locking (the slots stay in host memory).
class PinRecorder final : public DeviceMemory {
 public:
  const char* name() const override { return "pin-recorder"; }
  bool host_visible() const override { return false; }
  absl::StatusOr<void*> Allocate(int64_t) override { return nullptr; }
  void Free(void*) override {}
  absl::Status Upload(void*, const void*, int64_t) override { return absl::OkStatus(); }
  absl::Status Download(void*, const void*, int64_t) override { return absl::OkStatus(); }
  absl::Status Copy(void*, const void*, int64_t) override { return absl::OkStatus(); }
  absl::Status Zero(void*, int64_t) override { return absl::OkStatus(); }
  absl::Status RegisterHost(void*, int64_t bytes) override {
    MutexLock lock(&mu);
    registered.push_back(bytes);
    return absl::OkStatus();
  }
  absl::Status UnregisterHost(void*) override {
    MutexLock lock(&mu);
    ++unregistered;
    return absl::OkStatus();
  }
  Mutex mu;
  std::vector<int64_t> registered ABSL_GUARDED_BY(mu);
  int unregistered ABSL_GUARDED_BY(mu) = 0;
};

TEST_F(CacheClientTest, ADeviceBackendPinsTheArenaInTheCachesStepsAndReleasesIt) {
  PinRecorder pins;
  {
    Driver gpu(server_->address(), &pins);
    ASSERT_TRUE(gpu.cache().WaitConnected(absl::Seconds(10)));
    const std::vector<int32_t> a = Tokens(10, 600);
    gpu.PrefillAndCapture(0, "a", a);
    MutexLock lock(&pins.mu);
    ASSERT_FALSE(pins.registered.empty());
    EXPECT_EQ(pins.registered[0], int64_t{1} << 20);  // The test daemon's first pinning step.
  }
  MutexLock lock(&pins.mu);
  EXPECT_EQ(pins.unregistered, static_cast<int>(pins.registered.size()));
}

// A cache daemon that welcomes a session (the arena handed over, the model registered) and then
// never reads its stream again, as a hung one: the client's writes block once flow control
// fills. Its server keeps the stream's flow-control window small, so that they do soon. A
// restore gets a lease that is not ready (kLease, then the next ids); releasing it sends
// LeaseReady for it (the answer crossing the release) and then an empty idle SpillRequest, which
// wakes the client's scheduler once the LeaseReady before it was handled.
}  // namespace
}  // namespace cairn::infer
