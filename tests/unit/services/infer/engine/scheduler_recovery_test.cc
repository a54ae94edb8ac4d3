// The scheduler after things go wrong: a forward pass that fails part-way, a restore that fails
// into a slot with a live frontier, and requests cancelled or expired while they wait in the
// queue. In each case no later request may continue a slot whose state is not what its tokens
// say, and a request that never ran must not disturb a slot.
#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/infer/engine/scheduler.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "tests/unit/services/infer/engine/recording_sink.h"
#include "tests/unit/services/infer/engine/scheduler_recovery_fakes.h"

namespace cairn::infer {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

using recovery_testing::Favoured;
using recovery_testing::kStop;
using recovery_testing::kVocab;
using recovery_testing::kWait;
using recovery_testing::QuietStateCache;
using recovery_testing::RunningSumModel;

constexpr int kLongAnswer = 40;  // Tokens the request beside a restore decodes.

// A cache daemon stand-in that offers one RAM checkpoint at `offer_depth` for every longer
// prompt once armed. Its restores reset the slot first, as the real client's do, then fail at
// their first poll, or wait (a lease not ready) until their request ends, or until the cache
// goes (Lose), or become ready after the other slots made progress (ReadyAfter).
//
// Scheduler thread only, except the arming calls, made while no request runs, and Lose.
class ScriptedRestoreCache final : public QuietStateCache {
 public:
  absl::StatusOr<StatePlan> Lookup(absl::Span<const int32_t> prompt, int64_t, int64_t,
                                   const std::string&) override {
    StatePlan plan;
    if (offer_depth_ > 0 && static_cast<int64_t>(prompt.size()) > offer_depth_) {
      plan.candidates.push_back({StateTier::kRam, offer_depth_, /*checkpoint_id=*/7, -1});
    }
    return plan;
  }
  absl::Status StartRestore(uint64_t, int slot, const std::string&, KvMemory* memory) override {
    ++restores_;
    ++running_;
    polls_ = 0;
    if (progress_) from_ = progress_();
    return memory->Reset(slot);
  }
  absl::StatusOr<std::optional<RestoreStats>> PollRestore(int slot, KvMemory* memory,
                                                          const RestoreLimits& limits) override {
    ++polls_;
    absl::StatusOr<std::optional<RestoreStats>> r = Poll(slot, memory, limits);
    if (!r.ok() || r->has_value()) --running_;
    return r;
  }
  void AbandonRestore(int, KvMemory*, const absl::Status&) override {
    ++abandoned_;
    --running_;
  }

  void Offer(int64_t depth) { offer_depth_ = depth; }
  // The cache goes away: a waiting restore's next poll fails with Unavailable.
  void Lose() { lost_ = true; }
  // Restores started, abandoned by the scheduler, and not yet ended (its lease still held).
  int abandoned() const { return abandoned_; }
  int running() const { return running_; }
  // Restores of `tokens` (the checkpoint's prefix) become ready once `progress` grew by `steps`
  // since the restore began (the spills its lease waits for take that long).
  void ReadyAfter(std::vector<int32_t> tokens, std::function<int64_t()> progress, int64_t steps) {
    offer_depth_ = static_cast<int64_t>(tokens.size());
    tokens_ = std::move(tokens);
    progress_ = std::move(progress);
    ready_after_ = steps;
  }
  int restores() const { return restores_; }
  // Polls of the latest restore (read once the scheduler stopped).
  int polls() const { return polls_; }
  // Restores wait (a lease not ready) until their request ends; `restoring` is notified once
  // one waits.
  void WaitInRestores() { wait_ = true; }
  Notification& restoring() { return restoring_; }

 private:
  absl::StatusOr<std::optional<RestoreStats>> Poll(int slot, KvMemory* memory,
                                                   const RestoreLimits& limits) {
    if (lost_) return absl::UnavailableError("the cache session was lost while the restore waited");
    if (progress_) {
      if (progress_() < from_ + ready_after_) return std::nullopt;
      return Load(slot, memory);
    }
    if (!wait_) return absl::DataLossError("checksum mismatch in the checkpoint's rows");
    // As the real client's wait for a lease: until the request is cancelled or expires.
    if (polls_ == 1) restoring_.Notify();
    if (limits.cancelled && limits.cancelled()) {
      return absl::CancelledError("the request was cancelled while its restore waited");
    }
    if (absl::Now() >= limits.deadline) {
      return absl::DeadlineExceededError("the request's deadline passed while its restore waited");
    }
    return std::nullopt;
  }
  // Writes the checkpoint of tokens_ into `slot` as RunningSumModel would have computed it.
  absl::StatusOr<RestoreStats> Load(int slot, KvMemory* memory) {
    const int64_t depth = static_cast<int64_t>(tokens_.size());
    std::vector<float> rows(tokens_.begin(), tokens_.end());
    float sum = 0;
    for (int32_t t : tokens_) sum += static_cast<float>(t);
    auto bytes = [](const float* f, size_t n) {
      return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(f), n * sizeof(float));
    };
    absl::Status st = memory->BeginRestore(slot);
    if (st.ok()) st = memory->CopyRowsIn(slot, 0, 0, bytes(rows.data(), rows.size()));
    if (st.ok()) st = memory->LoadPrivateState(slot, depth, bytes(&sum, 1));
    if (st.ok()) st = memory->Validate(slot, depth);
    if (!st.ok()) return st;
    RestoreStats stats;
    stats.depth = depth;
    stats.rows_copied = depth;
    return stats;
  }

  int64_t offer_depth_ = 0;
  std::vector<int32_t> tokens_;
  std::function<int64_t()> progress_;
  int64_t ready_after_ = 0;
  int64_t from_ = 0;
  std::atomic<bool> lost_{false};
  int restores_ = 0;
  int polls_ = 0;
  int abandoned_ = 0;
  int running_ = 0;
  bool wait_ = false;
  Notification restoring_;
};

class SchedulerRecoveryTest : public ::testing::Test {
 protected:
  void Start(StateCache* cache, const SchedulerOptions& options = {}, int slots = 1) {
    absl::StatusOr<std::unique_ptr<SlotKvMemory>> memory =
        SlotKvMemory::Create(model_.state_layout(), {.slots = slots, .max_rows = 64});
    ASSERT_TRUE(memory.ok()) << memory.status();
    memory_ = std::move(*memory);
    scheduler_ = std::make_unique<Scheduler>(&model_, memory_.get(), cache, options);
    scheduler_->Start();
  }
  void TearDown() override {
    model_.Release();
    if (scheduler_ != nullptr) scheduler_->Shutdown(absl::Now() + kWait);
  }

  // Queues a greedy request for `prompt` of one token.
  void Submit(std::vector<int32_t> prompt, Outcome* outcome, bool cancelled = false,
              absl::Time deadline = absl::InfiniteFuture()) {
    GenerateRequest req;
    req.id = "r";
    req.conversation = "c";
    req.prompt = std::move(prompt);
    req.max_tokens = 1;
    req.stop_ids = {kStop};
    req.deadline = deadline;
    req.sink = std::make_unique<RecordingSink>(outcome, cancelled);
    ASSERT_TRUE(scheduler_->Submit(std::move(req)).ok());
  }
  // Queues a request of another conversation that decodes kLongAnswer tokens into `running`,
  // then, while its prefill pass runs, queues `prompt` (as Submit) into `outcome`: the second
  // request is admitted while the first one decodes.
  void SubmitBeside(Outcome* running, std::vector<int32_t> prompt, Outcome* outcome) {
    model_.BlockNextPass();
    GenerateRequest req;
    req.id = "running";
    req.conversation = "a";
    req.prompt = {9, 9};
    req.max_tokens = kLongAnswer;
    req.stop_ids = {kStop};
    req.sink = std::make_unique<RecordingSink>(running, false);
    ASSERT_TRUE(scheduler_->Submit(std::move(req)).ok());
    model_.WaitUntilBlocked();
    Submit(std::move(prompt), outcome);
    model_.Release();
  }
  // Starts a one-slot scheduler over cache_ and a request into `outcome` whose restore waits
  // for its lease until the request ends; returns once it waits.
  void StartWaitingRestore(Outcome* outcome) {
    Start(&cache_);
    cache_.Offer(6);
    cache_.WaitInRestores();
    Submit({1, 2, 3, 4, 5, 6, 7, 8}, outcome);
    ASSERT_TRUE(cache_.restoring().WaitForNotificationWithTimeout(kWait));
  }
  // Cancels the request of `cancelled` (its restore waiting) and waits for its end, then runs
  // another one restoring the same checkpoint into `expired` with a deadline 200 ms away.
  void CancelThenExpire(Outcome* cancelled, Outcome* expired) {
    cancelled->cancel.store(true);
    ASSERT_TRUE(cancelled->done.WaitForNotificationWithTimeout(kWait));
    Submit({1, 2, 3, 4, 5, 6, 7, 9}, expired, /*cancelled=*/false,
           absl::Now() + absl::Milliseconds(200));
    ASSERT_TRUE(expired->done.WaitForNotificationWithTimeout(kWait));
  }
  void Run(std::vector<int32_t> prompt, Outcome* outcome) {
    Submit(std::move(prompt), outcome);
    ASSERT_TRUE(outcome->done.WaitForNotificationWithTimeout(kWait));
  }
  static int32_t FirstToken(Outcome& o) {
    MutexLock lock(&o.mu);
    return o.tokens.empty() ? -1 : o.tokens.front();
  }

  RunningSumModel model_;
  ScriptedRestoreCache cache_;  // Outlives the scheduler, which TearDown stops.
  std::unique_ptr<SlotKvMemory> memory_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerRecoveryTest, AFailedPassLeavesNoSlotToContinue) {
  Start(nullptr);
  Outcome first;
  Run({1, 2, 3, 4}, &first);
  ASSERT_TRUE(first.Status().ok()) << first.Status();
  EXPECT_EQ(FirstToken(first), Favoured(10));

  // Continues the live frontier at 4; the pass moves the running sum, then fails.
  model_.FailCall(1);
  Outcome failed;
  Run({1, 2, 3, 4, 5, 6}, &failed);
  {
    MutexLock lock(&failed.mu);
    EXPECT_EQ(failed.status.code(), absl::StatusCode::kInternal) << failed.status;
  }

  // The same prompt again: computed from scratch, not continued from the half-done pass.
  Outcome again;
  Run({1, 2, 3, 4, 5, 6}, &again);
  ASSERT_TRUE(again.Status().ok()) << again.Status();
  EXPECT_EQ(FirstToken(again), Favoured(21));
  MutexLock lock(&again.mu);
  EXPECT_EQ(again.info.cache.tier, StateTier::kCold);
  EXPECT_EQ(model_.passes().back(), std::make_pair(int64_t{0}, int64_t{6}));
}

TEST_F(SchedulerRecoveryTest, AFailedDecodePassLeavesNoSlotToContinue) {
  Start(nullptr);
  // Two tokens: the prefill (sum 6) answers Favoured(6) = 7, whose decode pass fails.
  ASSERT_EQ(Favoured(6), 7);
  model_.FailCall(2);
  Outcome failed;
  GenerateRequest req;
  req.id = "r";
  req.prompt = {1, 2, 3};
  req.max_tokens = 2;
  req.stop_ids = {kStop};
  req.sink = std::make_unique<RecordingSink>(&failed, false);
  ASSERT_TRUE(scheduler_->Submit(std::move(req)).ok());
  ASSERT_TRUE(failed.done.WaitForNotificationWithTimeout(kWait));
  {
    MutexLock lock(&failed.mu);
    EXPECT_EQ(failed.status.code(), absl::StatusCode::kInternal) << failed.status;
    EXPECT_EQ(failed.tokens, std::vector<int32_t>{7});
  }
  // The prompt and the answer: computed from scratch (sum 13), not continued from the prompt's
  // 3 tokens with a state that already counted the 7 (sum 20).
  Outcome again;
  Run({1, 2, 3, 7}, &again);
  ASSERT_TRUE(again.Status().ok()) << again.Status();
  EXPECT_EQ(FirstToken(again), Favoured(13));
  MutexLock lock(&again.mu);
  EXPECT_EQ(again.info.cache.tier, StateTier::kCold);
}

TEST_F(SchedulerRecoveryTest, AFaultedModelEndsEveryRequestAndAdmitsNoMore) {
  // A pass fails and the model faults with it (a device lost): the running request and the one
  // queued behind it end UNAVAILABLE naming the fault, on_fault is called once, and the
  // scheduler refuses what comes after.
  Mutex mu;
  std::vector<absl::Status> faults;
  Notification faulted;
  SchedulerOptions options;
  options.on_fault = [&](const absl::Status& fault) {
    {
      MutexLock lock(&mu);
      faults.push_back(fault);
    }
    faulted.Notify();
  };
  Start(nullptr, options);
  model_.BlockNextPass();
  model_.FailCall(1, /*fault=*/true);
  Outcome running, queued;
  Submit({1, 2, 3}, &running);
  model_.WaitUntilBlocked();
  Submit({4, 5}, &queued);
  model_.Release();
  ASSERT_TRUE(running.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(queued.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(faulted.WaitForNotificationWithTimeout(kWait));
  for (Outcome* o : {&running, &queued}) {
    const absl::Status status = o->Status();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_NE(status.message().find("the device was lost"), absl::string_view::npos) << status;
  }
  {
    MutexLock lock(&mu);
    ASSERT_EQ(faults.size(), 1u);
    EXPECT_EQ(faults[0].message(), "the device was lost");
  }
  Outcome later;
  GenerateRequest req;
  req.id = "later";
  req.prompt = {1, 2};
  req.max_tokens = 1;
  req.sink = std::make_unique<RecordingSink>(&later, false);
  const absl::Status refused = scheduler_->Submit(std::move(req));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("the device was lost"), absl::string_view::npos) << refused;
  // One pass ran: the failed one.
  EXPECT_EQ(model_.passes().size(), 1u);
}

TEST_F(SchedulerRecoveryTest, AFailedRestoreIntoALiveSlotPrefillsTheWholePrompt) {
  ScriptedRestoreCache& cache = cache_;
  Start(&cache);
  Outcome first;
  Run({1, 2, 3, 4}, &first);
  ASSERT_TRUE(first.Status().ok()) << first.Status();

  // The cache offers a checkpoint deeper than the slot's live 4 tokens; restoring it fails
  // after the slot was overwritten.
  cache.Offer(6);
  Outcome next;
  Run({1, 2, 3, 4, 5, 6, 7, 8}, &next);
  ASSERT_TRUE(next.Status().ok()) << next.Status();
  EXPECT_EQ(cache.restores(), 1);
  EXPECT_EQ(FirstToken(next), Favoured(36));
  MutexLock lock(&next.mu);
  EXPECT_EQ(next.info.cache.tier, StateTier::kCold);
  EXPECT_EQ(model_.passes().back(), std::make_pair(int64_t{0}, int64_t{8}));
}

// A restore stopped by its request's own end is no failure and no cold prefill follows: the
// log says so (not as a warning where the client cancelled), and the request ends with its
// cancellation or deadline.
TEST_F(SchedulerRecoveryTest, ARestoreStoppedByItsRequestIsLoggedAsSuch) {
  ScriptedRestoreCache& cache = cache_;
  Start(&cache);
  Outcome first;
  Run({1, 2, 3, 4}, &first);
  ASSERT_TRUE(first.Status().ok()) << first.Status();
  cache.Offer(6);
  cache.WaitInRestores();

  ::testing::internal::CaptureStderr();
  Outcome cancelled;
  Submit({1, 2, 3, 4, 5, 6, 7, 8}, &cancelled);
  ASSERT_TRUE(cache.restoring().WaitForNotificationWithTimeout(kWait));
  Outcome expired;
  CancelThenExpire(&cancelled, &expired);
  const std::string log = ::testing::internal::GetCapturedStderr();

  EXPECT_EQ(cache.restores(), 2);
  EXPECT_EQ(cancelled.Status().code(), absl::StatusCode::kCancelled) << cancelled.Status();
  EXPECT_EQ(expired.Status().code(), absl::StatusCode::kDeadlineExceeded) << expired.Status();
  EXPECT_THAT(log, Not(HasSubstr("prefilling cold"))) << log;
  EXPECT_THAT(log,
              ContainsRegex("I[0-9 :.]+scheduler[a-z_]*\\.cc:[0-9]+\\] restoring checkpoint 7 into "
                            "slot 0 stopped: the client cancelled request r"))
      << log;
  EXPECT_THAT(log,
              ContainsRegex("W[0-9 :.]+scheduler[a-z_]*\\.cc:[0-9]+\\] restoring checkpoint 7 into "
                            "slot 0 stopped: the deadline of request r passed"))
      << log;
}

// A restore whose lease waits for spills holds its own slot only: the other slots go on
// decoding meanwhile, and the restored request then continues the checkpoint exactly.
TEST_F(SchedulerRecoveryTest, OtherSlotsDecodeWhileARestoreWaitsForItsLease) {
  ScriptedRestoreCache& cache = cache_;
  Start(&cache, {}, /*slots=*/2);
  Outcome running;
  cache.ReadyAfter(
      {1, 2, 3, 4, 5, 6},
      [&running] {
        MutexLock lock(&running.mu);
        return static_cast<int64_t>(running.tokens.size());
      },
      /*steps=*/5);
  Outcome restored;
  SubmitBeside(&running, {1, 2, 3, 4, 5, 6, 7, 8}, &restored);

  ASSERT_TRUE(restored.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(running.done.WaitForNotificationWithTimeout(kWait));

  EXPECT_EQ(cache.restores(), 1);
  ASSERT_TRUE(restored.Status().ok()) << restored.Status();
  EXPECT_EQ(FirstToken(restored), Favoured(36));
  {
    MutexLock lock(&restored.mu);
    EXPECT_EQ(restored.info.cache.tier, StateTier::kRam);
    EXPECT_EQ(restored.info.cache.restored_depth, 6);
  }
  ASSERT_TRUE(running.Status().ok()) << running.Status();
  MutexLock lock(&running.mu);
  EXPECT_EQ(running.tokens.size(), static_cast<size_t>(kLongAnswer));
}

// A restore whose lease never becomes ready holds only its slot: the request beside it
// finishes its whole answer meanwhile. Its client's cancellation, then another request's
// deadline, end each wait with the request's status, the lease given back.
TEST_F(SchedulerRecoveryTest, ARestoreWaitingForItsLeaseEndsWithItsRequestOnly) {
  ScriptedRestoreCache& cache = cache_;
  Start(&cache, {}, /*slots=*/2);
  cache.Offer(6);
  cache.WaitInRestores();
  Outcome running, cancelled;

  SubmitBeside(&running, {1, 2, 3, 4, 5, 6, 7, 8}, &cancelled);
  ASSERT_TRUE(running.done.WaitForNotificationWithTimeout(kWait));
  const bool waited = !cancelled.done.HasBeenNotified();
  Outcome expired;
  CancelThenExpire(&cancelled, &expired);

  ASSERT_TRUE(running.Status().ok()) << running.Status();
  {
    MutexLock lock(&running.mu);
    EXPECT_EQ(running.tokens.size(), static_cast<size_t>(kLongAnswer));
  }
  EXPECT_TRUE(waited);
  EXPECT_EQ(cancelled.Status().code(), absl::StatusCode::kCancelled) << cancelled.Status();
  EXPECT_EQ(expired.Status().code(), absl::StatusCode::kDeadlineExceeded) << expired.Status();
  for (Outcome* o : {&cancelled, &expired}) {
    MutexLock lock(&o->mu);
    EXPECT_FALSE(o->started);
    EXPECT_THAT(o->info.cache.miss_reason, HasSubstr("restore stopped"))
        << o->info.cache.miss_reason;
  }
  scheduler_->Shutdown(absl::Now() + kWait);
  EXPECT_EQ(cache.restores(), 2);
  EXPECT_EQ(cache.running(), 0);
}

// A cache that goes away while a restore waits ends the wait: the request prefills cold and
// answers as if it had never been offered the checkpoint.
TEST_F(SchedulerRecoveryTest, ARestoreWaitingWhenTheCacheGoesPrefillsCold) {
  ScriptedRestoreCache& cache = cache_;
  Outcome outcome;
  StartWaitingRestore(&outcome);

  cache.Lose();
  ASSERT_TRUE(outcome.done.WaitForNotificationWithTimeout(kWait));

  ASSERT_TRUE(outcome.Status().ok()) << outcome.Status();
  EXPECT_EQ(FirstToken(outcome), Favoured(36));
  MutexLock lock(&outcome.mu);
  EXPECT_EQ(outcome.info.cache.tier, StateTier::kCold);
  EXPECT_THAT(outcome.info.cache.miss_reason, HasSubstr("restore failed"));
  EXPECT_EQ(model_.passes().back(), std::make_pair(int64_t{0}, int64_t{8}));
}

// A shutdown whose deadline passes while a restore waits cancels its request and gives its
// lease back (the scheduler abandons the restore; no poll ends it).
TEST_F(SchedulerRecoveryTest, AShutdownAbandonsARestoreWaitingForItsLease) {
  ScriptedRestoreCache& cache = cache_;
  Outcome outcome;
  StartWaitingRestore(&outcome);

  scheduler_->Shutdown(absl::Now());

  ASSERT_TRUE(outcome.done.HasBeenNotified());
  EXPECT_EQ(outcome.Status().code(), absl::StatusCode::kCancelled) << outcome.Status();
  EXPECT_EQ(cache.abandoned(), 1);
  EXPECT_EQ(cache.running(), 0);
  EXPECT_TRUE(model_.passes().empty());
}

// A drain whose deadline is still ahead lets a restore waiting for its lease go on waiting,
// without spinning: the scheduler polls it once per poll interval (20 ms), as before the drain.
TEST_F(SchedulerRecoveryTest, ADrainWaitsForARestoreWithoutSpinning) {
  ScriptedRestoreCache& cache = cache_;
  Outcome outcome;
  StartWaitingRestore(&outcome);

  scheduler_->Shutdown(absl::Now() + absl::Milliseconds(400));

  ASSERT_TRUE(outcome.done.HasBeenNotified());
  EXPECT_EQ(outcome.Status().code(), absl::StatusCode::kCancelled) << outcome.Status();
  EXPECT_EQ(cache.abandoned(), 1);
  // 400 ms at one poll each 20 ms is about 20; a spinning loop polls thousands of times.
  EXPECT_LT(cache.polls(), 100);
}

TEST_F(SchedulerRecoveryTest, RequestsCancelledOrExpiredInTheQueueNeverTouchASlot) {
  Start(nullptr);
  Outcome first;
  model_.BlockNextPass();
  Submit({1, 2, 3, 4}, &first);
  model_.WaitUntilBlocked();
  // Queued behind the running request: one cancelled by its client, one past its deadline.
  Outcome cancelled, expired;
  Submit({9, 9, 9}, &cancelled, /*cancelled=*/true);
  Submit({8, 8}, &expired, /*cancelled=*/false, absl::Now() - absl::Seconds(1));
  model_.Release();
  ASSERT_TRUE(first.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(cancelled.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(expired.done.WaitForNotificationWithTimeout(kWait));
  {
    MutexLock lock(&cancelled.mu);
    EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled) << cancelled.status;
    EXPECT_FALSE(cancelled.started);
    EXPECT_EQ(cancelled.info.reason, FinishReason::kCancelled);
  }
  {
    MutexLock lock(&expired.mu);
    EXPECT_EQ(expired.status.code(), absl::StatusCode::kDeadlineExceeded) << expired.status;
    EXPECT_FALSE(expired.started);
  }
  // The first request's frontier is still in the slot.
  Outcome next;
  Run({1, 2, 3, 4, 5}, &next);
  ASSERT_TRUE(next.Status().ok()) << next.Status();
  EXPECT_EQ(FirstToken(next), Favoured(15));
  MutexLock lock(&next.mu);
  EXPECT_EQ(next.info.cache.tier, StateTier::kLive);
  EXPECT_EQ(next.info.cache.restored_depth, 4);
}

}  // namespace
}  // namespace cairn::infer
