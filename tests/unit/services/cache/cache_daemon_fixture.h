#ifndef CAIRN_TESTS_UNIT_SERVICES_CACHE_CACHE_DAEMON_FIXTURE_H_
#define CAIRN_TESTS_UNIT_SERVICES_CACHE_CACHE_DAEMON_FIXTURE_H_

// The daemon fixtures the daemon's part tests share: a daemon in process (no gRPC) with one
// open session and one registered model, and the same with a disk tier.

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/notification.h"
#include "common/time/clock.h"
#include "gtest/gtest.h"
#include "services/cache/cache_daemon.h"

namespace cairn::cache {

inline constexpr uint32_t kChunkRows = 16;

// Keeps what the daemon sends to a session. Thread-safe.
class RecordingSink final : public SessionSink {
 public:
  void Send(v1::SessionServerMessage message) override ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    messages_.push_back(std::move(message));
  }
  std::vector<v1::SessionServerMessage> messages() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return messages_;
  }

 private:
  mutable Mutex mu_;
  std::vector<v1::SessionServerMessage> messages_ ABSL_GUARDED_BY(mu_);
};

class CacheDaemonPartsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(CacheDaemonOptions()); }

  // Creates the daemon with `options` (4 MiB of RAM), opens the session and registers the
  // model.
  void Start(CacheDaemonOptions options) {
    options.cache.ram_bytes = 4 << 20;
    absl::StatusOr<std::unique_ptr<CacheDaemon>> daemon = CacheDaemon::Create(options, &clock_);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    absl::StatusOr<SessionWelcome> welcome =
        daemon_->OpenSession(SessionHello{"unit", 1, 2}, &sink_);
    ASSERT_TRUE(welcome.ok()) << welcome.status();
    session_ = welcome->session_id;
    absl::StatusOr<RegisteredModel> registered = daemon_->RegisterModel(Registration());
    ASSERT_TRUE(registered.ok()) << registered.status();
    model_ = registered->model_id;
  }

  ModelRegistration Registration(const std::string& compatibility = "unit-model") const {
    ModelRegistration reg;
    reg.session_id = session_;
    reg.compatibility = compatibility;
    reg.layout.chunk_rows = kChunkRows;
    StateComponent rows;
    rows.name = "rows";
    rows.kind = ComponentKind::kRows;
    rows.bytes_per_row = 64;
    StateComponent priv;
    priv.name = "private";
    priv.kind = ComponentKind::kPrivate;
    priv.private_bytes = 4096;
    reg.layout.components = {rows, priv};
    return reg;
  }

  PromptLookup LookupOf(uint64_t n) const {
    PromptLookup lookup;
    lookup.session_id = session_;
    lookup.model_id = model_;
    for (uint64_t i = 0; i < n; ++i) lookup.tokens.push_back(static_cast<TokenId>(100 + i));
    return lookup;
  }

  // Cold-starts slot 0 on `n` tokens and captures them as `kind`; returns the checkpoint id.
  uint64_t Capture(uint64_t n, CaptureKind kind = CaptureKind::kEnd) {
    StartCold(n);
    CaptureRequest req = CaptureAt(n);
    req.kind = kind;
    absl::StatusOr<CaptureGrant> reserved = daemon_->ReserveCapture(req);
    EXPECT_TRUE(reserved.ok()) << reserved.status();
    if (!reserved.ok()) return 0;
    absl::StatusOr<CommitResult> committed =
        daemon_->CommitCapture(CaptureCommit{session_, reserved->reservation_id, 0, 0});
    EXPECT_TRUE(committed.ok()) << committed.status();
    return committed.ok() ? committed->checkpoint_id : 0;
  }

  // Cold-starts slot 0 and extends its frontier to `n` tokens.
  void StartCold(uint64_t n) {
    SlotStart start;
    start.session_id = session_;
    start.model_id = model_;
    EXPECT_TRUE(daemon_->StartSlot(start).ok());
    FrontierUpdate up;
    up.session_id = session_;
    up.model_id = model_;
    for (uint64_t i = 0; i < n; ++i) up.tokens.push_back(static_cast<TokenId>(100 + i));
    absl::StatusOr<uint64_t> depth = daemon_->UpdateFrontier(up);
    EXPECT_TRUE(depth.ok()) << depth.status();
  }

  CaptureRequest CaptureAt(uint64_t depth, uint32_t slot = 0) const {
    CaptureRequest req;
    req.session_id = session_;
    req.model_id = model_;
    req.slot = slot;
    req.depth = depth;
    req.kind = CaptureKind::kEnd;
    return req;
  }

  RestoreRequest RestoreOf(uint64_t checkpoint, uint32_t slot) const {
    RestoreRequest req;
    req.session_id = session_;
    req.model_id = model_;
    req.checkpoint_id = checkpoint;
    req.slot = slot;
    return req;
  }

  // Answers every spill request sent so far with the XXH3 of what its regions hold.
  void AnswerSpills() {
    for (const v1::SessionServerMessage& m : sink_.messages()) {
      if (!m.has_spill_request()) continue;
      SpillReport report;
      report.spill_id = m.spill_request().spill_id();
      for (const v1::ChunkSpill& c : m.spill_request().chunks()) {
        report.chunk_ids.push_back(c.chunk_id());
      }
      daemon_->SpillDone(session_, report).IgnoreError();  // Answered before: NotFound.
    }
  }

  FakeClock clock_;
  RecordingSink sink_;
  std::unique_ptr<CacheDaemon> daemon_;
  uint64_t session_ = 0;
  uint64_t model_ = 0;
};

// The same daemon with a disk tier (and its scrubber) in a fresh folder `name`, made unique
// to the running test and process: ctest runs each test of a suite in a process of its own,
// in parallel.
class DiskTierPartsTest : public CacheDaemonPartsTest {
 protected:
  void StartWithDisk(const std::string& name) {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = absl::StrCat(::testing::TempDir(), "/", name, "-",
                         absl::StrReplaceAll(test->name(), {{"/", "_"}}), "-", getpid());
    std::filesystem::remove_all(root_);
    StartOnRoot();
  }
  // A new daemon on the same folder, as after a restart (a new session, the model again).
  void Restart() {
    daemon_.reset();
    StartOnRoot();
  }
  void TearDown() override {
    daemon_.reset();
    std::filesystem::remove_all(root_);
  }

  // Waits until every disk write queued so far has finished.
  void Flush() {
    Notification flushed;
    daemon_->StartFlush(absl::Seconds(30), [&](absl::Status, uint64_t) { flushed.Notify(); });
    flushed.WaitForNotification();
  }
  // The options StartWithDisk and Restart start the daemon with (on root_).
  virtual CacheDaemonOptions DiskOptions() const {
    CacheDaemonOptions options;
    options.disk_root = root_;
    options.disk.free_space_reserve_bytes = 0;
    options.cache.disk_bytes = 64 << 20;
    return options;
  }

  std::string root_;

 private:
  void StartOnRoot() { Start(DiskOptions()); }
};

}  // namespace cairn::cache

#endif  // CAIRN_TESTS_UNIT_SERVICES_CACHE_CACHE_DAEMON_FIXTURE_H_
