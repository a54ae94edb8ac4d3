// The disk tier as the daemon runs it: the budget comes from the file system when not given
// and is bounded by it; a disk that fills makes the policy core evict by rank, with events,
// and the index never lists a checkpoint whose files are gone.

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "common/concurrency/notification.h"
#include "gtest/gtest.h"
#include "services/cache/disk/file_system.h"
#include "services/cache/disk/testing/fault_file_system.h"
#include "tests/integration/services/cache/fake_infer.h"

namespace cairn::cache {
namespace {

using testing::FakeInfer;
using testing::Server;
using testing::TempPath;
using testing::Tokens;

constexpr uint64_t kReserve = uint64_t{64} << 20;    // DiskStoreOptions' default reserve.
constexpr absl::Duration kWait = absl::Seconds(30);  // Bound of every wait below.

// The POSIX file system with a gate on file creation and one on opening files to read: while
// closed, the disk writer stops at its next new file, a disk load at its next file. Thread-safe.
class GatedFileSystem final : public FileSystem {
 public:
  void CloseReads() {
    MutexLock lock(&mu_);
    reads_open_ = false;
  }
  void OpenReads() {
    MutexLock lock(&mu_);
    reads_open_ = true;
    cv_.SignalAll();
  }
  // Waits until `n` readers are held at the gate; false after kWait.
  bool WaitForHeldReaders(int n) {
    const absl::Time deadline = absl::Now() + kWait;
    MutexLock lock(&mu_);
    while (held_readers_ < n && absl::Now() < deadline) {
      cv_.WaitWithTimeout(&mu_, deadline - absl::Now());
    }
    return held_readers_ >= n;
  }
  void Close() {
    MutexLock lock(&mu_);
    open_ = false;
  }
  void Open() {
    MutexLock lock(&mu_);
    open_ = true;
    cv_.SignalAll();
  }
  // Waits until a writer is held at the gate; false after kWait.
  bool WaitForHeldWriter() {
    const absl::Time deadline = absl::Now() + kWait;
    MutexLock lock(&mu_);
    while (held_ == 0 && absl::Now() < deadline) cv_.WaitWithTimeout(&mu_, deadline - absl::Now());
    return held_ > 0;
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    {
      const absl::Time deadline = absl::Now() + kWait;
      MutexLock lock(&mu_);
      ++held_;
      cv_.SignalAll();
      while (!open_ && absl::Now() < deadline) cv_.WaitWithTimeout(&mu_, deadline - absl::Now());
      --held_;
    }
    return base_->NewWritableFile(path);
  }
  absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    {
      const absl::Time deadline = absl::Now() + kWait;
      MutexLock lock(&mu_);
      ++held_readers_;
      cv_.SignalAll();
      while (!reads_open_ && absl::Now() < deadline) {
        cv_.WaitWithTimeout(&mu_, deadline - absl::Now());
      }
      --held_readers_;
    }
    return base_->NewReadableFile(path);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    return base_->Rename(from, to);
  }
  absl::Status Delete(const std::string& path) override { return base_->Delete(path); }
  absl::Status CreateDir(const std::string& path) override { return base_->CreateDir(path); }
  absl::Status SyncDir(const std::string& path) override { return base_->SyncDir(path); }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    return base_->ListDir(path);
  }
  absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    return base_->FileSize(path);
  }
  absl::StatusOr<uint64_t> FreeBytes(const std::string& path) override {
    return base_->FreeBytes(path);
  }

 private:
  FileSystem* const base_ = PosixFileSystem();
  Mutex mu_;
  CondVar cv_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_open_ ABSL_GUARDED_BY(mu_) = true;
  int held_readers_ ABSL_GUARDED_BY(mu_) = 0;
};

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = TempPath(::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(std::system(("rm -rf " + root_).c_str()), 0);
  }

  v1::GetStatusResponse Status(FakeInfer& infer) {
    v1::GetStatusResponse status;
    EXPECT_TRUE(
        infer.Call(&v1::CacheService::Stub::GetStatus, v1::GetStatusRequest(), &status).ok());
    return status;
  }

  // Captures a prompt-end checkpoint of `n` tokens in `slot`, then hands the slot to another
  // prompt so the borrowed rows are spilled and the disk write can run; waits for the writer.
  uint64_t CaptureAndFlush(FakeInfer& infer, uint32_t slot, uint32_t seed, size_t n) {
    uint64_t id = infer.PrefillCold(slot, Tokens(seed, n), {n}, seed)[0];
    infer.PrefillCold(slot, Tokens(seed + 1000, 4), {}, seed + 1000);
    // The spill of the checkpoint's rows was reported on the session stream, which the daemon
    // reads on its own; the disk write is queued once it has taken the report (the checkpoint
    // is no longer borrowed). A Flush sent before that would find nothing to wait for.
    const absl::Time deadline = absl::Now() + kWait;
    while (absl::Now() < deadline) {
      v1::ListCheckpointsResponse list;
      EXPECT_TRUE(
          infer.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list)
              .ok());
      bool borrowed = false;
      for (const v1::CheckpointInfo& c : list.checkpoints()) {
        borrowed |= c.checkpoint_id() == id && c.borrowed();
      }
      if (!borrowed) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    v1::FlushResponse flushed;
    EXPECT_TRUE(infer.Call(&v1::CacheService::Stub::Flush, v1::FlushRequest(), &flushed).ok());
    return id;
  }

  // Captures a prompt-end checkpoint, writes it to disk and evicts its RAM copy: a restore of
  // the returned id reads from disk.
  uint64_t OnDiskOnly(FakeInfer& infer) {
    infer.set_capture_kind(v1::CAPTURE_KIND_END);
    const uint64_t id = CaptureAndFlush(infer, 0, 5, 72);
    v1::EvictRequest evict;
    evict.set_checkpoint_id(id);
    v1::EvictResponse evicted;
    EXPECT_TRUE(infer.Call(&v1::CacheService::Stub::Evict, evict, &evicted).ok());
    return id;
  }

  std::string root_;
  FaultFileSystem fs_{PosixFileSystem()};
};

TEST_F(DiskTierTest, WithoutABudgetTheTierTakesAStatedShareOfTheFreeSpace) {
  fs_.SetFreeBytes(kReserve + (uint64_t{400} << 20));

  Server server(8 << 20, root_, RealClock::Get(), &fs_, /*disk_bytes=*/0);
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());

  v1::GetStatusResponse status = Status(infer);
  EXPECT_EQ(status.disk().capacity_bytes(), uint64_t{200} << 20);  // Half of 400 MiB.
  EXPECT_EQ(status.disk_free_bytes(), uint64_t{400} << 20);
  EXPECT_EQ(status.disk().used_bytes(), 0u);
}

TEST_F(DiskTierTest, ABudgetLargerThanTheFreeSpaceIsBoundedByIt) {
  fs_.SetFreeBytes(kReserve + (uint64_t{100} << 20));

  Server server(8 << 20, root_, RealClock::Get(), &fs_, /*disk_bytes=*/int64_t{1} << 40);
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());

  EXPECT_EQ(Status(infer).disk().capacity_bytes(), uint64_t{100} << 20);
}

TEST_F(DiskTierTest, ADiskThatFillsMakesThePolicyEvictByRankWithEvents) {
  Server server(8 << 20, root_, RealClock::Get(), &fs_);
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  infer.set_capture_kind(v1::CAPTURE_KIND_END);
  const uint64_t first = CaptureAndFlush(infer, 0, 1, 72);
  ASSERT_TRUE(server.daemon()->disk_store()->HasCheckpoint(first));
  fs_.SetFreeBytes(kReserve + 1000);  // The file system fills behind the ledger's back.

  const uint64_t second = CaptureAndFlush(infer, 1, 2, 72);

  // The write failed for lack of space: the core evicted the older disk checkpoint by rank,
  // with an event, and nothing in the index points at missing files. (Polled, though the
  // flush now waits for a write decided before it even where its queueing comes later.)
  const auto evicted = [&] {
    std::vector<v1::Event> events = server.daemon()->EventsAfter(0, 0);
    return std::any_of(events.begin(), events.end(), [&](const v1::Event& e) {
      return e.kind() == v1::EVENT_KIND_EVICT && e.checkpoint_id() == first &&
             absl::StrContains(e.reason(), "disk full");
    });
  };
  const absl::Time deadline = absl::Now() + kWait;
  while (!evicted() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  EXPECT_TRUE(evicted());
  v1::ListCheckpointsResponse list;
  ASSERT_TRUE(
      infer.Call(&v1::CacheService::Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &list)
          .ok());
  for (const v1::CheckpointInfo& c : list.checkpoints()) {
    if (c.on_disk()) {
      EXPECT_TRUE(server.daemon()->disk_store()->HasCheckpoint(c.checkpoint_id()))
          << "checkpoint " << c.checkpoint_id() << " is indexed on disk without files";
    }
    EXPECT_FALSE(c.checkpoint_id() == first && c.on_disk());
  }
  std::vector<uint32_t> again = Tokens(1, 72);
  again.push_back(9);
  EXPECT_NE(infer.Lookup(again).best().tier(), v1::TIER_DISK);
  // With room again, the next capture reaches the disk.
  fs_.SetFreeBytes(std::nullopt);
  const uint64_t third = CaptureAndFlush(infer, 0, 3, 72);
  const absl::Time written_by = absl::Now() + kWait;
  while (!server.daemon()->disk_store()->HasCheckpoint(third) && absl::Now() < written_by) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_TRUE(server.daemon()->disk_store()->HasCheckpoint(third));
  (void)second;
}

TEST_F(DiskTierTest, FlushWaitsForTheWriterWithoutHoldingAnIoThread) {
  GatedFileSystem fs;
  Server server(8 << 20, root_, RealClock::Get(), &fs);  // Two I/O threads.
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  infer.set_capture_kind(v1::CAPTURE_KIND_END);
  fs.Close();
  const uint64_t id = infer.PrefillCold(0, Tokens(1, 72), {72}, 1)[0];
  infer.PrefillCold(0, Tokens(1001, 4), {}, 1001);  // Spills the rows: the write starts.
  ASSERT_TRUE(fs.WaitForHeldWriter());

  // More flushes than I/O threads, all waiting for the held write.
  std::atomic<int> flushed{0};
  std::vector<std::thread> flushes;
  for (int i = 0; i < 4; ++i) {
    flushes.emplace_back([&] {
      v1::FlushResponse r;
      if (infer.Call(&v1::CacheService::Stub::Flush, v1::FlushRequest(), &r).ok()) ++flushed;
    });
  }
  const absl::Time deadline = absl::Now() + kWait;
  while (server.daemon()->WaitingFlushesForTest() < 4 && absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(server.daemon()->WaitingFlushesForTest(), 4u);

  // The I/O threads still answer other calls, and a flush whose caller gives up ends.
  v1::GetStatusResponse status = Status(infer);
  EXPECT_TRUE(status.disk_enabled());
  auto stub = v1::CacheService::NewStub(NewLocalChannel(server.address()));
  std::unique_ptr<grpc::ClientContext> short_ctx = NewClientContext(absl::Milliseconds(200));
  v1::FlushResponse ignored;
  EXPECT_EQ(stub->Flush(short_ctx.get(), v1::FlushRequest(), &ignored).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  fs.Open();
  for (std::thread& t : flushes) t.join();

  EXPECT_EQ(flushed.load(), 4);
  EXPECT_TRUE(server.daemon()->disk_store()->HasCheckpoint(id));
  EXPECT_EQ(server.daemon()->WaitingFlushesForTest(), 0u);
}

TEST_F(DiskTierTest, DiskLoadsRunOnTheirOwnPoolAndLeaveTheIoThreadsFree) {
  GatedFileSystem fs;
  Server server(8 << 20, root_, RealClock::Get(), &fs);  // Two I/O threads, two loaders.
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  FakeInfer other(server.address());  // FakeInfer sessions have two slots.
  ASSERT_NO_FATAL_FAILURE(other.Open());
  const uint64_t id = OnDiskOnly(infer);
  fs.CloseReads();

  // More restores from disk than I/O threads, two held reading, one queued for a loader.
  std::vector<grpc::Status> answers(3);
  std::vector<v1::RestoreLease> leases(3);
  std::vector<std::thread> restores;
  for (uint32_t i = 0; i < 3; ++i) {
    FakeInfer* client = i < 2 ? &infer : &other;
    restores.emplace_back([client, &answers, &leases, id, i] {
      answers[i] = client->AcquireRestore(i % 2, id, &leases[i]);
    });
  }
  const bool held = fs.WaitForHeldReaders(2);

  // The I/O threads still answer other calls meanwhile.
  auto stub = v1::CacheService::NewStub(NewLocalChannel(server.address()));
  std::unique_ptr<grpc::ClientContext> ctx = NewClientContext(absl::Seconds(5));
  v1::GetStatusResponse status;
  grpc::Status answered = stub->GetStatus(ctx.get(), v1::GetStatusRequest(), &status);
  fs.OpenReads();
  for (std::thread& t : restores) t.join();

  EXPECT_TRUE(held);
  EXPECT_TRUE(answered.ok()) << answered.error_message();
  for (size_t i = 0; i < answers.size(); ++i) {
    EXPECT_TRUE(answers[i].ok()) << answers[i].error_message();
    EXPECT_EQ(leases[i].loaded_from(), v1::TIER_DISK);
  }
}

TEST_F(DiskTierTest, ADiskLoadWhoseDeadlinePassedIsAnsweredDeadlineExceededAndHoldsNothing) {
  Server server(8 << 20, root_);
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  const uint64_t id = OnDiskOnly(infer);
  RestoreRequest req;
  req.session_id = infer.session();
  req.model_id = infer.model();
  req.checkpoint_id = id;
  req.slot = 1;
  Notification answered;
  absl::Status status;

  server.daemon()->AcquireRestoreAsync(req, absl::Now() - absl::Seconds(1),
                                       [&](absl::StatusOr<RestoreGrant> lease) {
                                         status = lease.status();
                                         answered.Notify();
                                       });

  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  // Nothing was kept for it: the slot takes a lease and the checkpoint restores from disk.
  ASSERT_NO_FATAL_FAILURE(infer.RestoreAndVerify(1, id));
  EXPECT_EQ(infer.last_restore_tier(), v1::TIER_DISK);
}

TEST_F(DiskTierTest, ARetriedRestoreFromDiskGetsTheFirstLeaseAndReadsOnce) {
  Server server(8 << 20, root_);
  FakeInfer infer(server.address());
  ASSERT_NO_FATAL_FAILURE(infer.Open());
  const uint64_t id = OnDiskOnly(infer);
  v1::AcquireRestoreRequest req;
  req.set_session_id(infer.session());
  req.set_model_id(infer.model());
  req.set_checkpoint_id(id);
  req.set_slot(1);
  req.set_client_request_id(7);
  v1::RestoreLease first;
  v1::RestoreLease retry;

  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::AcquireRestore, req, &first).ok());
  const uint64_t arena_used = server.daemon()->arena().allocator().used_bytes();
  ASSERT_TRUE(infer.Call(&v1::CacheService::Stub::AcquireRestore, req, &retry).ok());

  EXPECT_EQ(first.loaded_from(), v1::TIER_DISK);
  EXPECT_EQ(retry.lease_id(), first.lease_id());
  EXPECT_EQ(retry.loaded_from(), v1::TIER_DISK);
  // The retry read nothing and took no regions of its own.
  EXPECT_EQ(server.daemon()->arena().allocator().used_bytes(), arena_used);
}

}  // namespace
}  // namespace cairn::cache
