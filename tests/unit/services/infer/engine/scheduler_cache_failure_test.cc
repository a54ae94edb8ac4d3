// The scheduler when a cache call fails with the session still up (a lookup, a capture) and
// when a slot cannot be emptied: the request goes on (or ends) cleanly, the slot's busy mark
// and frontier in the cache stay right, and the daemon never aborts.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "gtest/gtest.h"
#include "services/infer/engine/scheduler.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "tests/unit/services/infer/engine/recording_sink.h"
#include "tests/unit/services/infer/engine/scheduler_recovery_fakes.h"

namespace cairn::infer {
namespace {

using recovery_testing::kStop;
using recovery_testing::kWait;
using recovery_testing::QuietStateCache;
using recovery_testing::RunningSumModel;

// A connected cache daemon stand-in whose lookups fail once armed (a timeout), that records the
// position of the slot each cold StartSlot finds: a cold start must come before any of the
// slot's rows is overwritten, so that the cache preserves the rows its checkpoints borrow.
class FailingLookupCache final : public QuietStateCache {
 public:
  absl::StatusOr<StatePlan> Lookup(absl::Span<const int32_t>, int64_t, int64_t,
                                   const std::string&) override {
    if (fail_lookups_) return absl::UnavailableError("cache lookup: deadline exceeded");
    return StatePlan();
  }
  absl::Status StartSlot(int slot, bool cold, const std::string&, KvMemory* memory) override {
    if (cold) cold_starts_at_.push_back(memory->slot(slot)->position());
    return absl::OkStatus();
  }

  void FailLookups() { fail_lookups_ = true; }
  // Scheduler thread only; read once the requests are done.
  std::vector<int64_t> cold_starts_at_;

 private:
  std::atomic<bool> fail_lookups_{false};
};

// Plans a capture two tokens into every prompt and fails it as a timed-out call does, with
// the session still up; records the slot's busy mark and the frontier updates.
//
// Scheduler thread only; read once the scheduler is shut down, but for busy_.
class FailingCaptureCache final : public QuietStateCache {
 public:
  absl::StatusOr<StatePlan> Lookup(absl::Span<const int32_t> prompt, int64_t, int64_t,
                                   const std::string&) override {
    StatePlan plan;
    if (prompt.size() > 2) {
      plan.captures.push_back({2, CapturePointKind::kEnd});
      plan.pass_ends.push_back(2);
    }
    return plan;
  }
  absl::Status StartSlot(int, bool cold, const std::string&, KvMemory*) override {
    if (cold) ++cold_starts_;
    return absl::OkStatus();
  }
  absl::Status UpdateFrontier(int, absl::Span<const int32_t> tokens, int64_t from) override {
    updates_.push_back({from, static_cast<int64_t>(tokens.size())});
    return absl::OkStatus();
  }
  absl::Status Capture(int, int64_t, CapturePointKind, const std::string&, int64_t,
                       KvMemory*) override {
    ++captures_;
    return absl::UnavailableError("capture: deadline exceeded");
  }
  void SlotIdle(int) override { busy_ = false; }
  void SlotBusy(int) override { busy_ = true; }

  std::atomic<bool> busy_{false};  // Also read by the test between requests.
  int cold_starts_ = 0;
  int captures_ = 0;
  std::vector<std::pair<int64_t, int64_t>> updates_;  // (from, tokens) of each frontier update.
};

// A KvMemory that forwards to `inner` and, once told, fails every Reset as a faulted device's
// memory does.
class ResetFailingMemory final : public KvMemory {
 public:
  explicit ResetFailingMemory(KvMemory* inner) : inner_(inner) {}
  void FailResets() { fail_resets_ = true; }

  const StateLayout& layout() const override { return inner_->layout(); }
  int num_slots() const override { return inner_->num_slots(); }
  SlotState* slot(int slot) override { return inner_->slot(slot); }
  absl::StatusOr<int64_t> CapturePrivateState(int slot, absl::Span<uint8_t> out) override {
    return inner_->CapturePrivateState(slot, out);
  }
  absl::Status LoadPrivateState(int slot, int64_t position, absl::Span<const uint8_t> in) override {
    return inner_->LoadPrivateState(slot, position, in);
  }
  absl::Status CopyRowsOut(int slot, int component, int64_t first_row, int64_t count,
                           absl::Span<uint8_t> out) override {
    return inner_->CopyRowsOut(slot, component, first_row, count, out);
  }
  absl::Status CopyRowsIn(int slot, int component, int64_t first_row,
                          absl::Span<const uint8_t> in) override {
    return inner_->CopyRowsIn(slot, component, first_row, in);
  }
  absl::Status BeginRestore(int slot, int64_t keep_rows) override {
    return inner_->BeginRestore(slot, keep_rows);
  }
  absl::Status Validate(int slot, int64_t position) override {
    return inner_->Validate(slot, position);
  }
  absl::Status Reset(int slot) override {
    if (fail_resets_) return absl::InternalError("device memory: an earlier launch faulted");
    return inner_->Reset(slot);
  }
  void SetOverwriteHook(OverwriteHook hook) override { inner_->SetOverwriteHook(std::move(hook)); }

 private:
  KvMemory* const inner_;
  std::atomic<bool> fail_resets_{false};
};

class SchedulerCacheFailureTest : public ::testing::Test {
 protected:
  void Start(StateCache* cache) {
    absl::StatusOr<std::unique_ptr<SlotKvMemory>> memory =
        SlotKvMemory::Create(model_.state_layout(), {.slots = 1, .max_rows = 64});
    ASSERT_TRUE(memory.ok()) << memory.status();
    memory_ = std::move(*memory);
    scheduler_ = std::make_unique<Scheduler>(&model_, memory_.get(), cache, SchedulerOptions{});
    scheduler_->Start();
  }
  void TearDown() override {
    if (scheduler_ != nullptr) scheduler_->Shutdown(absl::Now() + kWait);
  }
  // Runs a greedy request for `prompt` of one token to its end.
  void Run(std::vector<int32_t> prompt, Outcome* outcome) {
    GenerateRequest req;
    req.id = "r";
    req.conversation = "c";
    req.prompt = std::move(prompt);
    req.max_tokens = 1;
    req.stop_ids = {kStop};
    req.sink = std::make_unique<RecordingSink>(outcome);
    ASSERT_TRUE(scheduler_->Submit(std::move(req)).ok());
    ASSERT_TRUE(outcome->done.WaitForNotificationWithTimeout(kWait));
  }

  RunningSumModel model_;
  std::unique_ptr<SlotKvMemory> memory_;
  std::unique_ptr<Scheduler> scheduler_;
};

// A request whose lookup fails goes on without the cache, but the cache is still connected and
// its checkpoints may borrow the rows of the slot the request overwrites: the slot is started
// cold with the cache first (which preserves them), as for any request.
TEST_F(SchedulerCacheFailureTest, ARequestWhoseLookupFailedStillStartsTheSlotBeforeOverwritingIt) {
  FailingLookupCache cache;
  Start(&cache);
  Outcome first;
  Run({1, 2, 3, 4}, &first);
  ASSERT_TRUE(first.Status().ok()) << first.Status();
  cache.FailLookups();

  Outcome other;
  Run({9, 8, 7}, &other);

  ASSERT_TRUE(other.Status().ok()) << other.Status();
  scheduler_->Shutdown(absl::Now() + kWait);
  // The first request's cold start found the slot empty; the other one's found the first
  // request's 4 tokens still there.
  EXPECT_EQ(cache.cold_starts_at_, (std::vector<int64_t>{0, 4}));
}

// A capture that fails with the cache session still up ends the request's use of the cache,
// not the slot's busy mark (the cache daemon's disk writer yields to busy slots, and would for
// good); and the slot registers its frontier anew before the next request continues it, since
// the cache's record stopped at the capture.
TEST_F(SchedulerCacheFailureTest, ACaptureThatFailsLeavesTheSlotIdleAndItsFrontierRegisteredAgain) {
  FailingCaptureCache cache;
  Start(&cache);
  Outcome first;
  Run({1, 2, 3, 4}, &first);
  ASSERT_TRUE(first.Status().ok()) << first.Status();
  EXPECT_FALSE(cache.busy_.load());
  Outcome next;
  Run({1, 2, 3, 4, 5, 6, 7}, &next);
  ASSERT_TRUE(next.Status().ok()) << next.Status();
  scheduler_->Shutdown(absl::Now() + kWait);

  EXPECT_EQ(cache.captures_, 1);  // The next request continues the slot past the capture.
  EXPECT_FALSE(cache.busy_.load());
  // The first request's cold start, then the re-registration of the slot's 4 tokens (the
  // prompt; the answer's one token was not fed) before the next request continues the slot.
  EXPECT_EQ(cache.cold_starts_, 2);
  ASSERT_FALSE(cache.updates_.empty());
  const auto registered = std::find_if(cache.updates_.begin(), cache.updates_.end(),
                                       [](const auto& u) { return u.first == 0 && u.second == 4; });
  EXPECT_NE(registered, cache.updates_.end());
}

// A slot that cannot be emptied for a cold prefill (the backend failed, as after a device
// fault) ends its request with the failure; the daemon does not abort, and the next request
// is answered too.
TEST(SchedulerResetTest, AResetThatFailsEndsTheRequestInsteadOfTheDaemon) {
  RunningSumModel model;
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> inner =
      SlotKvMemory::Create(model.state_layout(), {.slots = 1, .max_rows = 64});
  ASSERT_TRUE(inner.ok()) << inner.status();
  ResetFailingMemory memory(inner->get());
  Scheduler scheduler(&model, &memory, nullptr, {});
  scheduler.Start();
  memory.FailResets();
  Outcome outcomes[2];

  for (Outcome& o : outcomes) {
    GenerateRequest req;
    req.id = "r";
    req.prompt = {1, 2, 3};
    req.max_tokens = 1;
    req.stop_ids = {kStop};
    req.sink = std::make_unique<RecordingSink>(&o);
    ASSERT_TRUE(scheduler.Submit(std::move(req)).ok());
    ASSERT_TRUE(o.done.WaitForNotificationWithTimeout(kWait));
  }

  for (Outcome& o : outcomes) {
    EXPECT_EQ(o.Status().code(), absl::StatusCode::kInternal) << o.Status();
    MutexLock lock(&o.mu);
    EXPECT_TRUE(o.tokens.empty());
  }
}

}  // namespace
}  // namespace cairn::infer
