// Flush waits for the disk writer without holding a thread: answered by the writer, by the
// deadline (the daemon's tick) or by the daemon's drain.

#include "services/cache/flush_waiters.h"

#include <memory>
#include <optional>

#include "common/concurrency/mutex.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::CheckpointFactory;
using ::cairn::cache::testing::FakeModelActivity;
using ::cairn::cache::testing::TempDir;

constexpr absl::Duration kDeadline = absl::Seconds(30);

// One flush's answer. Thread-safe.
class Answer {
 public:
  FlushWaiters::Done Callback() {
    return [this](absl::Status status, uint64_t persisted) {
      MutexLock lock(&mu_);
      status_ = std::move(status);
      persisted_ = persisted;
      cv_.SignalAll();
    };
  }
  bool answered() {
    MutexLock lock(&mu_);
    return status_.has_value();
  }
  // Waits (bounded) for the answer; Unknown if none came.
  absl::Status Wait() {
    const absl::Time deadline = absl::Now() + kDeadline;
    MutexLock lock(&mu_);
    while (!status_.has_value() && absl::Now() < deadline) {
      cv_.WaitWithTimeout(&mu_, deadline - absl::Now());
    }
    return status_.value_or(absl::UnknownError("no answer"));
  }
  uint64_t persisted() {
    MutexLock lock(&mu_);
    return persisted_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::optional<absl::Status> status_ ABSL_GUARDED_BY(mu_);
  uint64_t persisted_ ABSL_GUARDED_BY(mu_) = 0;
};

class FlushWaitersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = testing::OpenTestStore(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    BackgroundWriterOptions w;
    w.max_yield = kDeadline;  // The busy model holds the writer until the test lets go.
    writer_ = std::make_unique<BackgroundWriter>(store_.get(), &model_, w);
  }
  void TearDown() override { writer_->Shutdown(); }
  // Queues a write the writer holds until the model is idle.
  void QueueHeldWrite(uint64_t id) {
    model_.SetBusy(true);
    WriteJob job;
    job.request = factory_.Build(id, {}, 1);
    CAIRN_ASSERT_OK(writer_->Enqueue(std::move(job)));
    ASSERT_TRUE(model_.WaitForWaits(2));
  }

  TempDir dir_;
  std::unique_ptr<DiskStore> store_;
  CheckpointFactory factory_{16, 1024};
  FakeModelActivity model_;
  std::unique_ptr<BackgroundWriter> writer_;
  FakeClock clock_;
};

TEST_F(FlushWaitersTest, WithoutADiskTierAnswersAtOnce) {
  FlushWaiters flushes(nullptr, &clock_);
  Answer answer;

  flushes.Start(kDeadline, answer.Callback());

  ASSERT_TRUE(answer.answered());
  CAIRN_EXPECT_OK(answer.Wait());
  EXPECT_EQ(answer.persisted(), 0u);
}

TEST_F(FlushWaitersTest, AnIdleWriterAnswersAtOnce) {
  FlushWaiters flushes(writer_.get(), &clock_);
  Answer answer;

  flushes.Start(kDeadline, answer.Callback());

  ASSERT_TRUE(answer.answered());
  CAIRN_EXPECT_OK(answer.Wait());
  EXPECT_EQ(flushes.waiting(), 0u);
}

TEST_F(FlushWaitersTest, WaitsForQueuedWritesWithoutHoldingTheCaller) {
  FlushWaiters flushes(writer_.get(), &clock_);
  QueueHeldWrite(1);
  Answer answer;

  flushes.Start(kDeadline, answer.Callback());  // Returns although the write is held.
  EXPECT_FALSE(answer.answered());
  EXPECT_EQ(flushes.waiting(), 1u);
  model_.SetBusy(false);

  CAIRN_EXPECT_OK(answer.Wait());
  EXPECT_EQ(answer.persisted(), 1u);
  EXPECT_EQ(flushes.waiting(), 0u);
}

TEST_F(FlushWaitersTest, ExpiresAtItsDeadline) {
  FlushWaiters flushes(writer_.get(), &clock_);
  QueueHeldWrite(1);
  Answer answer;
  flushes.Start(absl::Seconds(5), answer.Callback());

  clock_.Advance(absl::Seconds(4));
  flushes.ExpireDue();
  EXPECT_FALSE(answer.answered());
  clock_.Advance(absl::Seconds(2));
  flushes.ExpireDue();

  EXPECT_EQ(answer.Wait().code(), absl::StatusCode::kDeadlineExceeded);
  model_.SetBusy(false);
  ASSERT_TRUE(writer_->WaitIdle(kDeadline));  // The writer finds no waiter left to answer.
  EXPECT_EQ(flushes.waiting(), 0u);
}

TEST_F(FlushWaitersTest, ShutdownAnswersWaitersAndRefusesNewOnes) {
  FlushWaiters flushes(writer_.get(), &clock_);
  QueueHeldWrite(1);
  Answer waiting;
  flushes.Start(kDeadline, waiting.Callback());

  flushes.Shutdown(absl::UnavailableError("draining"));
  Answer late;
  flushes.Start(kDeadline, late.Callback());

  EXPECT_EQ(waiting.Wait().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(late.Wait().code(), absl::StatusCode::kUnavailable);
  model_.SetBusy(false);
}

TEST_F(FlushWaitersTest, CancelAnswersCancelledOnce) {
  FlushWaiters flushes(writer_.get(), &clock_);
  QueueHeldWrite(1);
  Answer answer;
  const uint64_t id = flushes.Start(kDeadline, answer.Callback());
  ASSERT_NE(id, 0u);

  flushes.Cancel(id);
  flushes.Cancel(id);  // Settled already: nothing more.
  model_.SetBusy(false);
  ASSERT_TRUE(writer_->WaitIdle(kDeadline));

  EXPECT_EQ(answer.Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(flushes.waiting(), 0u);
}

}  // namespace
}  // namespace cairn::cache
