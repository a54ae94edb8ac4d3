// The background writer: order, merging of superseded writes, bounded yields to the model,
// shutdown (docs/architecture.md §4).

#include "services/cache/disk/background_writer.h"

#include <memory>
#include <vector>

#include "common/concurrency/mutex.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::CheckpointFactory;
using ::cairn::cache::testing::FakeModelActivity;
using ::cairn::cache::testing::RestoreAll;
using ::cairn::cache::testing::TempDir;

constexpr absl::Duration kDeadline = absl::Seconds(30);

// Collects job results. Thread-safe.
class Results {
 public:
  std::function<void(absl::Status)> For(uint64_t id) {
    return [this, id](absl::Status s) {
      MutexLock lock(&mu_);
      results_[id] = s;
    };
  }
  absl::Status Get(uint64_t id) {
    MutexLock lock(&mu_);
    auto it = results_.find(id);
    return it == results_.end() ? absl::UnknownError("no result") : it->second;
  }

 private:
  Mutex mu_;
  std::map<uint64_t, absl::Status> results_ ABSL_GUARDED_BY(mu_);
};

class BackgroundWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = testing::OpenTestStore(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  // A writer held by the busy model in the middle of checkpoint `id`'s write.
  std::unique_ptr<BackgroundWriter> HeldWriter(uint64_t id) {
    BackgroundWriterOptions options;
    options.max_yield = kDeadline;
    auto writer = std::make_unique<BackgroundWriter>(store_.get(), &model_, options);
    model_.SetBusy(true);
    EXPECT_TRUE(writer->Enqueue(Job(factory_.Build(id, {}, 1))).ok());
    EXPECT_TRUE(model_.WaitForWaits(2));
    return writer;
  }
  WriteJob Job(PublishRequest r, std::vector<uint64_t> supersedes = {}) {
    WriteJob job;
    job.done = results_.For(r.checkpoint_id);
    job.request = std::move(r);
    job.supersedes = std::move(supersedes);
    return job;
  }

  TempDir dir_;
  std::unique_ptr<DiskStore> store_;
  CheckpointFactory factory_{16, 1024};
  FakeModelActivity model_;
  Results results_;
};

TEST_F(BackgroundWriterTest, PublishesInOrderSoLaterJobsMayShareEarlierChunks) {
  BackgroundWriter writer(store_.get(), &model_, {});
  CAIRN_ASSERT_OK(writer.Enqueue(Job(factory_.Build(1, {}, 2))));
  CAIRN_ASSERT_OK(writer.Enqueue(Job(factory_.Build(2, factory_.ChunksOf(1), 1))));

  ASSERT_TRUE(writer.WaitIdle(kDeadline));

  CAIRN_EXPECT_OK(results_.Get(1));
  CAIRN_EXPECT_OK(results_.Get(2));
  auto bytes = RestoreAll(store_.get(), 2);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, factory_.Expected(2));
  EXPECT_EQ(writer.stats().published, 2u);
}

TEST_F(BackgroundWriterTest, AJobSupersedesThePendingJobsItNames) {
  BackgroundWriterOptions options;
  options.max_yield = kDeadline;  // Hold the writer while the queue is arranged.
  BackgroundWriter writer(store_.get(), &model_, options);
  model_.SetBusy(true);
  CAIRN_ASSERT_OK(writer.Enqueue(Job(factory_.Build(1, {}, 1))));
  ASSERT_TRUE(model_.WaitForWaits(2));  // The writer holds job 1 and is yielding.
  CAIRN_ASSERT_OK(writer.Enqueue(Job(factory_.Build(2, {}, 2))));

  CAIRN_ASSERT_OK(writer.Enqueue(Job(factory_.Build(3, factory_.ChunksOf(2), 1), {2})));
  model_.SetBusy(false);
  ASSERT_TRUE(writer.WaitIdle(kDeadline));

  EXPECT_EQ(results_.Get(2).code(), absl::StatusCode::kCancelled);
  CAIRN_EXPECT_OK(results_.Get(3));
  EXPECT_FALSE(store_->HasCheckpoint(2));
  auto bytes = RestoreAll(store_.get(), 3);  // Job 2's chunks were written by job 3.
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, factory_.Expected(3));
  EXPECT_EQ(writer.stats().merged, 1u);
}

TEST_F(BackgroundWriterTest, QueuedBytesCountTheRunningAndPendingJobsUntilWritten) {
  PublishRequest first = factory_.Build(1, {}, 1);
  PublishRequest second = factory_.Build(2, {}, 2);
  uint64_t expected = first.state.size() + second.state.size();
  for (const PublishRequest* r : {&first, &second}) {
    for (const ChunkWrite& c : r->new_chunks) expected += c.bytes.size();
  }
  BackgroundWriterOptions options;
  options.max_yield = kDeadline;
  BackgroundWriter writer(store_.get(), &model_, options);
  model_.SetBusy(true);
  CAIRN_ASSERT_OK(writer.Enqueue(Job(std::move(first))));
  ASSERT_TRUE(model_.WaitForWaits(2));  // Job 1 runs, held by the busy model.
  CAIRN_ASSERT_OK(writer.Enqueue(Job(std::move(second))));

  EXPECT_EQ(writer.stats().queued_bytes, expected);
  model_.SetBusy(false);
  ASSERT_TRUE(writer.WaitIdle(kDeadline));
  EXPECT_EQ(writer.stats().queued_bytes, 0u);
}

TEST_F(BackgroundWriterTest, FullQueueRefusesUnlessTheJobSupersedesAPendingOne) {
  BackgroundWriterOptions options;
  options.max_yield = kDeadline;
  options.max_queue = 1;
  BackgroundWriter writer(store_.get(), &model_, options);
  model_.SetBusy(true);
  CAIRN_ASSERT_OK(writer.Enqueue(Job(factory_.Build(1, {}, 1))));
  ASSERT_TRUE(model_.WaitForWaits(2));
  CAIRN_ASSERT_OK(writer.Enqueue(Job(factory_.Build(2, {}, 1))));

  EXPECT_EQ(writer.Enqueue(Job(factory_.Build(3, {}, 1))).code(),
            absl::StatusCode::kResourceExhausted);
  CAIRN_EXPECT_OK(writer.Enqueue(Job(factory_.Build(4, {}, 2), {2})));

  model_.SetBusy(false);
  ASSERT_TRUE(writer.WaitIdle(kDeadline));
  EXPECT_EQ(results_.Get(2).code(), absl::StatusCode::kCancelled);
  CAIRN_EXPECT_OK(results_.Get(4));
  EXPECT_EQ(results_.Get(3).code(), absl::StatusCode::kUnknown);  // Never queued.
}

TEST_F(BackgroundWriterTest, YieldsToABusyModelForAtMostMaxYield) {
  BackgroundWriterOptions options;
  options.max_yield = absl::Milliseconds(5);
  BackgroundWriter writer(store_.get(), &model_, options);
  model_.SetBusy(true);  // Never idle: the writer must still make progress.

  CAIRN_ASSERT_OK(writer.Enqueue(Job(factory_.Build(1, {}, 1))));

  ASSERT_TRUE(writer.WaitIdle(kDeadline));
  CAIRN_EXPECT_OK(results_.Get(1));
  EXPECT_GE(writer.stats().yields, 1u);
}

TEST_F(BackgroundWriterTest, ShutdownCancelsPendingJobs) {
  BackgroundWriterOptions options;
  options.max_yield = kDeadline;
  auto writer = std::make_unique<BackgroundWriter>(store_.get(), &model_, options);
  model_.SetBusy(true);
  CAIRN_ASSERT_OK(writer->Enqueue(Job(factory_.Build(1, {}, 1))));
  ASSERT_TRUE(model_.WaitForWaits(2));
  CAIRN_ASSERT_OK(writer->Enqueue(Job(factory_.Build(2, {}, 1))));

  model_.SetBusy(false);
  writer->Shutdown();

  EXPECT_NE(results_.Get(1).code(), absl::StatusCode::kUnknown);  // Ran to completion.
  EXPECT_EQ(results_.Get(2).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(writer->Enqueue(Job(factory_.Build(3, {}, 1))).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(BackgroundWriterTest, IdleWaiterRunsAtOnceWhenNothingIsQueued) {
  BackgroundWriter writer(store_.get(), &model_, BackgroundWriterOptions());
  bool ran = false;

  const uint64_t token = writer.NotifyWhenIdle([&ran] { ran = true; });

  EXPECT_EQ(token, 0u);
  EXPECT_TRUE(ran);
}

TEST_F(BackgroundWriterTest, IdleWaiterRunsOnTheWriterThreadOnceTheQueueDrains) {
  std::unique_ptr<BackgroundWriter> writer = HeldWriter(1);
  Mutex mu;
  CondVar cv;
  bool ran = false;
  absl::Status seen_by_waiter = absl::UnknownError("not run");

  const uint64_t token = writer->NotifyWhenIdle([&] {
    MutexLock lock(&mu);
    ran = true;
    seen_by_waiter = results_.Get(1);
    cv.SignalAll();
  });
  ASSERT_NE(token, 0u);
  {
    MutexLock lock(&mu);
    EXPECT_FALSE(ran);  // The job is held by the busy model: the caller is not blocked.
  }
  model_.SetBusy(false);

  const absl::Time deadline = absl::Now() + kDeadline;
  MutexLock lock(&mu);
  while (!ran && absl::Now() < deadline) cv.WaitWithTimeout(&mu, deadline - absl::Now());
  EXPECT_TRUE(ran);
  CAIRN_EXPECT_OK(seen_by_waiter);  // Runs after the job's own completion.
  EXPECT_FALSE(writer->CancelIdleWait(token));
}

TEST_F(BackgroundWriterTest, CancelledIdleWaiterNeverRuns) {
  std::unique_ptr<BackgroundWriter> writer = HeldWriter(1);
  bool ran = false;
  const uint64_t token = writer->NotifyWhenIdle([&ran] { ran = true; });

  EXPECT_TRUE(writer->CancelIdleWait(token));
  model_.SetBusy(false);
  ASSERT_TRUE(writer->WaitIdle(kDeadline));

  EXPECT_FALSE(ran);
}

TEST_F(BackgroundWriterTest, ShutdownAnswersIdleWaiters) {
  std::unique_ptr<BackgroundWriter> writer = HeldWriter(1);
  CAIRN_ASSERT_OK(writer->Enqueue(Job(factory_.Build(2, {}, 1))));
  bool ran = false;
  ASSERT_NE(writer->NotifyWhenIdle([&ran] { ran = true; }), 0u);

  model_.SetBusy(false);
  writer->Shutdown();

  EXPECT_TRUE(ran);
}

// A job announced by Expect() keeps the writer from idling until it is queued and written: a
// flush that starts between the daemon's decision to write and its Enqueue (which waits for the
// daemon's lock to be released) covers that write.
TEST_F(BackgroundWriterTest, AnExpectedJobIsWaitedForBeforeItIsQueued) {
  // Declared before the writer, so its thread is joined before they go.
  Mutex mu;
  CondVar cv;
  bool ran = false;
  absl::Status seen_by_waiter = absl::UnknownError("not run");
  BackgroundWriter writer(store_.get(), &model_, BackgroundWriterOptions());

  writer.Expect();
  const uint64_t token = writer.NotifyWhenIdle([&] {
    MutexLock lock(&mu);
    seen_by_waiter = results_.Get(1);
    ran = true;
    cv.SignalAll();
  });
  ASSERT_NE(token, 0u);
  EXPECT_FALSE(writer.WaitIdle(absl::Milliseconds(50)));
  {
    MutexLock lock(&mu);
    EXPECT_FALSE(ran);
  }

  CAIRN_ASSERT_OK(writer.Enqueue(Job(factory_.Build(1, {}, 1)), /*expected=*/true));
  // The waiter runs on the writer thread after the job (WaitIdle may return just before it).
  const absl::Time deadline = absl::Now() + kDeadline;
  MutexLock lock(&mu);
  while (!ran && absl::Now() < deadline) cv.WaitWithTimeout(&mu, deadline - absl::Now());
  EXPECT_TRUE(ran);
  CAIRN_EXPECT_OK(seen_by_waiter);  // The waiter ran after the expected job was written.
}

// An expected job that is refused ends the expectation too: the waiters run then.
TEST_F(BackgroundWriterTest, AnExpectedJobRefusedAfterShutdownLeavesNoWaiterBehind) {
  BackgroundWriter writer(store_.get(), &model_, BackgroundWriterOptions());
  writer.Expect();
  bool before = false;
  ASSERT_NE(writer.NotifyWhenIdle([&before] { before = true; }), 0u);
  writer.Shutdown();  // Answers the waiters; the expected job would be refused now.
  EXPECT_TRUE(before);
  bool after = false;
  EXPECT_EQ(writer.NotifyWhenIdle([&after] { after = true; }), 0u);
  EXPECT_TRUE(after);

  EXPECT_FALSE(writer.Enqueue(Job(factory_.Build(1, {}, 1)), /*expected=*/true).ok());
  EXPECT_TRUE(writer.WaitIdle(absl::ZeroDuration()));
}

TEST_F(BackgroundWriterTest, AnExpectedJobTheFullQueueRefusesReleasesTheWaiters) {
  BackgroundWriterOptions options;
  options.max_queue = 1;
  options.max_yield = kDeadline;
  BackgroundWriter writer(store_.get(), &model_, options);
  model_.SetBusy(true);
  CAIRN_ASSERT_OK(writer.Enqueue(Job(factory_.Build(1, {}, 1))));  // Running, held.
  ASSERT_TRUE(model_.WaitForWaits(2));
  CAIRN_ASSERT_OK(writer.Enqueue(Job(factory_.Build(2, {}, 1))));  // Fills the queue.
  writer.Expect();
  bool ran = false;
  ASSERT_NE(writer.NotifyWhenIdle([&ran] { ran = true; }), 0u);

  EXPECT_FALSE(writer.Enqueue(Job(factory_.Build(3, {}, 1)), /*expected=*/true).ok());
  model_.SetBusy(false);
  ASSERT_TRUE(writer.WaitIdle(kDeadline));  // Jobs 1 and 2 written, 3 no longer expected.
  writer.Shutdown();
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace cairn::cache
