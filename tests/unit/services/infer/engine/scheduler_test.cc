// The scheduler's token constraints (structured outputs): a request's TokenConstraint decides
// which tokens may come next, and its errors end the request; a request without one samples as
// before.
#include "services/infer/engine/scheduler.h"

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/notification.h"
#include "gtest/gtest.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "services/infer/engine/token_constraint.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/engine/recording_sink.h"

namespace cairn::infer {
namespace {

using ::cairn::testing::StatusIs;

constexpr int32_t kVocab = 130;    // Three mask words, the last one partly used.
constexpr int32_t kFavourite = 7;  // The token every row of logits favours.
constexpr int32_t kStop = 129;     // The request's stop token.
constexpr absl::Duration kWait = absl::Seconds(30);

// A stateless model of kVocab logits a row, each row `Row(pass)`.
class RowModel : public Model {
 public:
  explicit RowModel(const char* architecture) {
    info_.architecture = architecture;
    info_.vocab_size = kVocab;
    layout_.components.push_back({"layers.0.k", ComponentKind::kRows, 0, 1});
  }
  const ModelInfo& info() const override { return info_; }
  const StateLayout& state_layout() const override { return layout_; }
  absl::Status ForwardBatchInto(absl::Span<const SequencePass> batch,
                                std::vector<std::vector<float>>& results) override {
    results.resize(batch.size());
    for (size_t s = 0; s < batch.size(); ++s) {
      results[s].resize(kVocab);
      Row(batch[s], absl::MakeSpan(results[s]));
    }
    return absl::OkStatus();
  }

 private:
  virtual void Row(const SequencePass& pass, absl::Span<float> row) const = 0;
  ModelInfo info_;
  StateLayout layout_;
};

// Every row of logits favours kFavourite, then lower ids (logit 1 - id / 1000).
class FavouriteTokenModel final : public RowModel {
 public:
  FavouriteTokenModel() : RowModel("favourite-token") {}

 private:
  void Row(const SequencePass&, absl::Span<float> row) const override {
    for (int32_t id = 0; id < kVocab; ++id) row[id] = 1.0f - static_cast<float>(id) / 1000.0f;
    row[kFavourite] = 10.0f;
  }
};

// Allows exactly `script` followed by kStop, one token at a time; records what it was told.
// Optionally fails Allowed or Accept at token `fail_at` (counted from 0).
class ScriptedConstraint final : public TokenConstraint {
 public:
  enum class Fail { kNever, kAllowed, kAccept, kAllowNothing };
  ScriptedConstraint(std::vector<int32_t> script, std::vector<int32_t>* accepted,
                     Fail fail = Fail::kNever, size_t fail_at = 0)
      : script_(std::move(script)), accepted_(accepted), fail_(fail), fail_at_(fail_at) {
    script_.push_back(kStop);
  }
  absl::Status Allowed(absl::Span<uint64_t> allowed) override {
    if (fail_ == Fail::kAllowed && next_ == fail_at_) {
      return absl::FailedPreconditionError("scripted allowed failure");
    }
    for (uint64_t& w : allowed) w = 0;
    if (fail_ == Fail::kAllowNothing && next_ == fail_at_) return absl::OkStatus();
    if (next_ < script_.size()) {
      const int32_t id = script_[next_];
      allowed[id / 64] |= uint64_t{1} << (id % 64);
    }
    return absl::OkStatus();
  }
  absl::Status Accept(int32_t token) override {
    accepted_->push_back(token);
    if (fail_ == Fail::kAccept && next_ == fail_at_) {
      return absl::DataLossError("scripted accept failure");
    }
    if (next_ >= script_.size() || token != script_[next_]) {
      return absl::InternalError("a token the constraint did not allow");
    }
    ++next_;
    return absl::OkStatus();
  }

 private:
  std::vector<int32_t> script_;
  std::vector<int32_t>* const accepted_;
  const Fail fail_;
  const size_t fail_at_;
  size_t next_ = 0;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<SlotKvMemory>> memory =
        SlotKvMemory::Create(model_.state_layout(), {.slots = 1, .max_rows = 256});
    ASSERT_TRUE(memory.ok()) << memory.status();
    memory_ = std::move(*memory);
    scheduler_ = std::make_unique<Scheduler>(&model_, memory_.get(), nullptr, SchedulerOptions{});
    scheduler_->Start();
  }
  void TearDown() override {
    if (scheduler_ != nullptr) scheduler_->Shutdown(absl::Now() + kWait);
  }

  // Runs a request for `prompt` with `sampling` and `constraint` (null: none) to its end.
  void Run(std::unique_ptr<TokenConstraint> constraint, const SamplingOptions& sampling,
           int64_t max_tokens, Outcome* outcome) {
    GenerateRequest req;
    req.id = "r";
    req.prompt = {1, 2, 3};
    req.sampling = sampling;
    req.max_tokens = max_tokens;
    req.stop_ids = {kStop};
    req.sink = std::make_unique<RecordingSink>(outcome);
    req.constraint = std::move(constraint);
    ASSERT_TRUE(scheduler_->Submit(std::move(req)).ok());
    ASSERT_TRUE(outcome->done.WaitForNotificationWithTimeout(kWait));
  }

  FavouriteTokenModel model_;
  std::unique_ptr<SlotKvMemory> memory_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, UnconstrainedGreedyTakesTheLargestLogit) {
  Outcome out;

  Run(nullptr, {}, 3, &out);

  MutexLock lock(&out.mu);
  EXPECT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{kFavourite, kFavourite, kFavourite}));
  EXPECT_EQ(out.info.reason, FinishReason::kLength);
}

TEST_F(SchedulerTest, ConstrainedGreedyGeneratesTheScriptThenStops) {
  const std::vector<int32_t> script = {3, 64, 128, 3, 0};
  std::vector<int32_t> accepted;
  Outcome out;

  Run(std::make_unique<ScriptedConstraint>(script, &accepted), {}, 50, &out);

  MutexLock lock(&out.mu);
  EXPECT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.tokens, script);  // The stop token ends the request unemitted.
  EXPECT_EQ(out.info.reason, FinishReason::kStop);
  EXPECT_EQ(out.info.completion_tokens, static_cast<int64_t>(script.size() + 1));
  std::vector<int32_t> with_stop = script;
  with_stop.push_back(kStop);
  EXPECT_EQ(accepted, with_stop);
}

TEST_F(SchedulerTest, ConstrainedSamplingGeneratesTheScriptThenStops) {
  const std::vector<int32_t> script = {100, 5, 6, 66};
  std::vector<int32_t> accepted;
  SamplingOptions sampling;
  sampling.temperature = 1.0f;
  sampling.top_k = 3;
  sampling.seed = 9;
  Outcome out;

  Run(std::make_unique<ScriptedConstraint>(script, &accepted), sampling, 50, &out);

  MutexLock lock(&out.mu);
  EXPECT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.tokens, script);
  EXPECT_EQ(out.info.reason, FinishReason::kStop);
}

TEST_F(SchedulerTest, ConstrainedRequestStillStopsAtMaxTokens) {
  std::vector<int32_t> accepted;
  Outcome out;

  Run(std::make_unique<ScriptedConstraint>(std::vector<int32_t>{4, 5, 6, 7}, &accepted), {}, 2,
      &out);

  MutexLock lock(&out.mu);
  EXPECT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(out.info.reason, FinishReason::kLength);
}

TEST_F(SchedulerTest, AllowedErrorEndsTheRequestWithIt) {
  std::vector<int32_t> accepted;
  Outcome out;

  Run(std::make_unique<ScriptedConstraint>(std::vector<int32_t>{4, 5, 6}, &accepted,
                                           ScriptedConstraint::Fail::kAllowed, 2),
      {}, 50, &out);

  MutexLock lock(&out.mu);
  EXPECT_THAT(out.status, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(out.status.message(), "scripted allowed failure");
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{4, 5}));
}

TEST_F(SchedulerTest, AcceptErrorEndsTheRequestWithIt) {
  std::vector<int32_t> accepted;
  Outcome out;

  // Fails on the first token, sampled right after the prefill.
  Run(std::make_unique<ScriptedConstraint>(std::vector<int32_t>{4, 5, 6}, &accepted,
                                           ScriptedConstraint::Fail::kAccept, 0),
      {}, 50, &out);

  MutexLock lock(&out.mu);
  EXPECT_THAT(out.status, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_TRUE(out.tokens.empty());
  EXPECT_EQ(accepted, (std::vector<int32_t>{4}));
}

TEST_F(SchedulerTest, AConstraintAllowingNothingEndsTheRequestWithInternal) {
  std::vector<int32_t> accepted;
  Outcome out;

  Run(std::make_unique<ScriptedConstraint>(std::vector<int32_t>{4, 5}, &accepted,
                                           ScriptedConstraint::Fail::kAllowNothing, 1),
      {}, 50, &out);

  MutexLock lock(&out.mu);
  EXPECT_THAT(out.status, StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{4}));
}

// Free for its first `free` tokens (Allowed is never asked then; every token still reaches
// Accept), then the script of a ScriptedConstraint.
class PartlyFreeConstraint final : public TokenConstraint {
 public:
  PartlyFreeConstraint(size_t free, std::vector<int32_t> script, std::vector<int32_t>* accepted)
      : free_(free), scripted_(std::move(script), &scripted_accepted_), accepted_(accepted) {}
  absl::Status Allowed(absl::Span<uint64_t> allowed) override {
    if (accepted_->size() < free_) return absl::InternalError("Allowed asked while free");
    return scripted_.Allowed(allowed);
  }
  absl::Status Accept(int32_t token) override {
    accepted_->push_back(token);
    return accepted_->size() <= free_ ? absl::OkStatus() : scripted_.Accept(token);
  }
  bool Unconstrained() const override { return accepted_->size() < free_; }

 private:
  const size_t free_;
  std::vector<int32_t> scripted_accepted_;
  ScriptedConstraint scripted_;
  std::vector<int32_t>* const accepted_;
};

// While a constraint is free, tokens are sampled as without one: the same choices under
// sampling with the same seed; then the constraint holds the rest.
TEST_F(SchedulerTest, FreeTokensAreSampledAsWithoutAConstraint) {
  SamplingOptions sampling;
  sampling.temperature = 1.0f;
  sampling.seed = 5;
  Outcome alone;
  Run(nullptr, sampling, 4, &alone);
  std::vector<int32_t> accepted;
  Outcome out;

  Run(std::make_unique<PartlyFreeConstraint>(4, std::vector<int32_t>{100, 101}, &accepted),
      sampling, 50, &out);

  MutexLock lock_alone(&alone.mu);
  MutexLock lock(&out.mu);
  ASSERT_TRUE(alone.status.ok()) << alone.status;
  EXPECT_TRUE(out.status.ok()) << out.status;
  std::vector<int32_t> expected = alone.tokens;
  expected.push_back(100);
  expected.push_back(101);
  EXPECT_EQ(out.tokens, expected);
  EXPECT_EQ(out.info.reason, FinishReason::kStop);
  expected.push_back(kStop);
  EXPECT_EQ(accepted, expected);
}

// A request for `prompt` of `max_tokens` greedy tokens that reports to `outcome`.
GenerateRequest SimpleRequest(Outcome* outcome, int64_t max_tokens = 2) {
  GenerateRequest req;
  req.id = "q";
  req.prompt = {1, 2, 3};
  req.max_tokens = max_tokens;
  req.stop_ids = {kStop};
  req.sink = std::make_unique<RecordingSink>(outcome);
  return req;
}

// max_queue bounds the requests waiting for a slot, not those an idle slot takes: with
// --max-queue 0 a daemon still serves one request per idle slot.
TEST(SchedulerQueueTest, AZeroQueueStillServesAnIdleSlot) {
  FavouriteTokenModel model;
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> memory =
      SlotKvMemory::Create(model.state_layout(), {.slots = 1, .max_rows = 64});
  ASSERT_TRUE(memory.ok()) << memory.status();
  SchedulerOptions options;
  options.max_queue = 0;
  Scheduler scheduler(&model, memory->get(), nullptr, options);
  scheduler.Start();
  Outcome out;

  const absl::Status submitted = scheduler.Submit(SimpleRequest(&out));

  ASSERT_TRUE(submitted.ok()) << submitted;
  ASSERT_TRUE(out.done.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(out.Status().ok()) << out.Status();
}

// A burst that arrives before the scheduler thread admits anything: the idle slots take as
// many requests as they are, the queue max_queue more, and only the next is refused.
TEST(SchedulerQueueTest, ABurstFillsTheIdleSlotsThenTheQueue) {
  FavouriteTokenModel model;
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> memory =
      SlotKvMemory::Create(model.state_layout(), {.slots = 2, .max_rows = 64});
  ASSERT_TRUE(memory.ok()) << memory.status();
  SchedulerOptions options;
  options.max_queue = 1;
  Scheduler scheduler(&model, memory->get(), nullptr, options);  // Not started.
  Outcome outs[4];

  for (int i = 0; i < 3; ++i) {
    const absl::Status submitted = scheduler.Submit(SimpleRequest(&outs[i]));
    EXPECT_TRUE(submitted.ok()) << "request " << i << ": " << submitted;
  }
  EXPECT_THAT(scheduler.Submit(SimpleRequest(&outs[3])),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

// Records into an Outcome like RecordingSink; the first OnToken signals `entered` and waits for
// `release`, and so does the first Cancelled() call when `gate_cancelled` is set.
class GatedSink final : public RequestSink {
 public:
  GatedSink(Outcome* outcome, Notification* entered, Notification* release, bool gate_cancelled)
      : inner_(outcome),
        outcome_(outcome),
        entered_(entered),
        release_(release),
        gate_cancelled_(gate_cancelled) {}
  void OnStarted(const StartInfo& info) override { inner_.OnStarted(info); }
  bool OnToken(const SampledToken& token) override {
    if (!gate_cancelled_) Gate();
    return inner_.OnToken(token);
  }
  void OnFinished(const absl::Status& status, const FinishInfo& info) override {
    inner_.OnFinished(status, info);
  }
  bool Cancelled() const override {
    if (gate_cancelled_) Gate();
    return outcome_->cancel.load();
  }

 private:
  void Gate() const {
    if (gated_.exchange(true)) return;
    entered_->Notify();
    release_->WaitForNotificationWithTimeout(kWait);
  }
  RecordingSink inner_;
  Outcome* const outcome_;
  Notification* const entered_;
  Notification* const release_;
  const bool gate_cancelled_;
  mutable std::atomic<bool> gated_{false};
};

// The scheduler thread asks a queued request's sink whether its client went away without
// taking the request out of the queue meanwhile: a request submitted then still finds the
// queue full (it found it empty, and the queue grew past max_queue, under a gateway's load).
TEST(SchedulerQueueTest, TheQueueStaysFullWhileItsSinksAreAsked) {
  FavouriteTokenModel model;
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> memory =
      SlotKvMemory::Create(model.state_layout(), {.slots = 1, .max_rows = 64});
  ASSERT_TRUE(memory.ok()) << memory.status();
  SchedulerOptions options;
  options.max_queue = 1;
  Scheduler scheduler(&model, memory->get(), nullptr, options);
  scheduler.Start();
  Outcome running, queued, extra;
  Notification token_entered, token_release, asked_entered, asked_release;

  // The running request holds the only slot, stopped at its first token until the second one
  // has queued.
  GenerateRequest first = SimpleRequest(&running, /*max_tokens=*/32);
  first.stop_ids.clear();
  first.sink = std::make_unique<GatedSink>(&running, &token_entered, &token_release, false);
  ASSERT_TRUE(scheduler.Submit(std::move(first)).ok());
  ASSERT_TRUE(token_entered.WaitForNotificationWithTimeout(kWait));
  GenerateRequest second = SimpleRequest(&queued);
  second.sink = std::make_unique<GatedSink>(&queued, &asked_entered, &asked_release, true);
  ASSERT_TRUE(scheduler.Submit(std::move(second)).ok());
  token_release.Notify();
  ASSERT_TRUE(asked_entered.WaitForNotificationWithTimeout(kWait));

  const absl::Status third = scheduler.Submit(SimpleRequest(&extra));

  asked_release.Notify();
  EXPECT_THAT(third, StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_TRUE(running.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(queued.done.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(running.Status().ok()) << running.Status();
  EXPECT_TRUE(queued.Status().ok()) << queued.Status();
  if (third.ok()) {
    EXPECT_TRUE(extra.done.WaitForNotificationWithTimeout(kWait));
  }
}

// A queued request whose client went away ends cancelled without taking a slot, and the
// requests around it are served.
TEST(SchedulerQueueTest, ACancelledQueuedRequestEndsAndTheOthersAreServed) {
  FavouriteTokenModel model;
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> memory =
      SlotKvMemory::Create(model.state_layout(), {.slots = 1, .max_rows = 64});
  ASSERT_TRUE(memory.ok()) << memory.status();
  SchedulerOptions options;
  options.max_queue = 3;
  Scheduler scheduler(&model, memory->get(), nullptr, options);
  scheduler.Start();
  Outcome running, outs[3];
  Notification token_entered, token_release;
  GenerateRequest first = SimpleRequest(&running, /*max_tokens=*/8);
  first.sink = std::make_unique<GatedSink>(&running, &token_entered, &token_release, false);
  ASSERT_TRUE(scheduler.Submit(std::move(first)).ok());
  ASSERT_TRUE(token_entered.WaitForNotificationWithTimeout(kWait));
  for (int i = 0; i < 3; ++i) {
    GenerateRequest req = SimpleRequest(&outs[i]);
    req.id = absl::StrCat("q", i);
    ASSERT_TRUE(scheduler.Submit(std::move(req)).ok());
  }
  outs[1].cancel = true;

  token_release.Notify();

  for (Outcome* o : {&running, &outs[0], &outs[1], &outs[2]}) {
    ASSERT_TRUE(o->done.WaitForNotificationWithTimeout(kWait));
  }
  EXPECT_THAT(outs[1].Status(), StatusIs(absl::StatusCode::kCancelled));
  MutexLock lock(&outs[1].mu);
  EXPECT_FALSE(outs[1].started);
  EXPECT_TRUE(outs[0].Status().ok()) << outs[0].Status();
  EXPECT_TRUE(outs[2].Status().ok()) << outs[2].Status();
}

// A row of logits is a hash of the pass's last token: a request's logits depend on its own
// tokens alone, and differ from token to token.
class HashedLogitsModel final : public RowModel {
 public:
  HashedLogitsModel() : RowModel("hashed-logits") {}

 private:
  void Row(const SequencePass& pass, absl::Span<float> row) const override {
    uint64_t h = 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(pass.tokens.back()) + 1);
    for (int32_t id = 0; id < kVocab; ++id) {
      h ^= h >> 29;
      h *= 0xbf58476d1ce4e5b9ull;
      h ^= h >> 32;
      row[id] = static_cast<float>(h % 6000) / 1000.0f - 3.0f;
    }
  }
};

// The token choices of one decode step run side by side on the sampling workers: each
// request's tokens, finish and constraint calls are those it gets alone with the scheduler
// thread choosing every token (greedy, seeded sampling with and without top_k, logprobs, a
// constraint that finishes, one whose Accept fails part way).
TEST(SchedulerSamplingTest, ARequestChoosesAsItWouldAloneWhateverThreadChooses) {
  constexpr int kRequests = 7;
  struct Result {
    std::vector<int32_t> tokens;
    std::vector<int32_t> accepted;
    absl::StatusCode code = absl::StatusCode::kOk;
  };
  const auto make = [](int i, Outcome* out, std::vector<int32_t>* accepted) {
    GenerateRequest req;
    req.id = absl::StrCat("r", i);
    req.prompt = {1, 2 + i, 3};
    req.max_tokens = 24;
    req.stop_ids = {kStop};
    req.sink = std::make_unique<RecordingSink>(out);
    if (i % 4 != 0) {
      req.sampling.temperature = 0.3f * static_cast<float>(i);
      req.sampling.top_k = i % 2 == 0 ? 20 : 0;
      req.sampling.top_p = 0.9f;
      req.sampling.seed = 40 + i;
    }
    req.sampling.logprobs = i % 3;
    if (i == 5)
      req.constraint =
          std::make_unique<ScriptedConstraint>(std::vector<int32_t>{9, 90, 19, 7}, accepted);
    if (i == 6)
      req.constraint = std::make_unique<ScriptedConstraint>(
          std::vector<int32_t>{4, 44, 4, 44, 4}, accepted, ScriptedConstraint::Fail::kAccept, 3);
    return req;
  };
  // All requests at once on `threads` sampling threads, or (threads 0) each alone on one.
  const auto run = [&](int threads) {
    std::vector<Result> results(kRequests);
    HashedLogitsModel model;
    absl::StatusOr<std::unique_ptr<SlotKvMemory>> memory =
        SlotKvMemory::Create(model.state_layout(), {.slots = kRequests, .max_rows = 64});
    EXPECT_TRUE(memory.ok()) << memory.status();
    if (!memory.ok()) return results;
    SchedulerOptions options;
    options.sampling_threads = threads == 0 ? 1 : threads;
    Scheduler scheduler(&model, memory->get(), nullptr, options);
    scheduler.Start();
    Outcome outs[kRequests];
    for (int i = 0; i < kRequests; ++i) {
      EXPECT_TRUE(scheduler.Submit(make(i, &outs[i], &results[i].accepted)).ok());
      if (threads == 0) {
        EXPECT_TRUE(outs[i].done.WaitForNotificationWithTimeout(kWait));
      }
    }
    for (int i = 0; i < kRequests; ++i) {
      EXPECT_TRUE(outs[i].done.WaitForNotificationWithTimeout(kWait));
      MutexLock lock(&outs[i].mu);
      results[i].tokens = outs[i].tokens;
      results[i].code = outs[i].status.code();
    }
    scheduler.Shutdown(absl::Now() + kWait);
    return results;
  };

  const std::vector<Result> alone = run(0);
  for (int threads : {2, 4}) {
    const std::vector<Result> together = run(threads);
    for (int i = 0; i < kRequests; ++i) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, request " << i);
      EXPECT_EQ(together[i].tokens, alone[i].tokens);
      EXPECT_EQ(together[i].accepted, alone[i].accepted);
      EXPECT_EQ(together[i].code, alone[i].code);
    }
  }
  EXPECT_EQ(alone[0].tokens.size(), 24u);  // Greedy over the hashed rows: no stop drawn.
  EXPECT_EQ(alone[5].tokens, (std::vector<int32_t>{9, 90, 19, 7}));
  EXPECT_EQ(alone[6].code, absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace cairn::infer
