// What a quarantine on the disk tier takes from the daemon's policy: only disk copies, and
// only the checkpoints whose bytes exist nowhere else. RAM checkpoints that share chunks with a
// damaged disk checkpoint, or are the damaged one, keep serving their own intact bytes (in
// process, without gRPC, under TSan with the unit label).

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/checksum/checksum.h"
#include "gtest/gtest.h"
#include "services/cache/cache_daemon.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/cache_daemon_fixture.h"
#include "tests/unit/services/cache/disk/disk_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

constexpr uint8_t kPrivateByte = 0x11;
constexpr uint8_t kTailByte = 0x22;

// The byte every row of chunk `id` holds in these tests.
uint8_t ChunkByte(uint64_t id) { return static_cast<uint8_t>(0x40 + id); }

// Slot 0 grows one prompt (tokens 100, 101, ...) and captures along it; every byte written
// into the arena (state, tail, spilled rows) is a known pattern.
class QuarantineScopeTest : public DiskTierPartsTest {
 protected:
  void SetUp() override {
    StartWithDisk("quarantine-scope");
    StartPrompt();
  }

  // Starts slot 0 cold, with an empty prompt.
  void StartPrompt() {
    SlotStart start;
    start.session_id = session_;
    start.model_id = model_;
    ASSERT_TRUE(daemon_->StartSlot(start).ok());
    depth_ = 0;
  }

  // Fills `region` with `byte`; returns the region's XXH3 (0 for an empty region).
  uint64_t Fill(const ArenaHandle& region, uint8_t byte) {
    if (region.length == 0) return 0;
    absl::StatusOr<absl::Span<uint8_t>> bytes = daemon_->arena().Resolve(region);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok()) return 0;
    std::memset(bytes->data(), byte, bytes->size());
    return Xxh3(bytes->data(), bytes->size());
  }

  // Extends slot 0's prompt to `depth` tokens and captures there as `kind`, with patterned
  // private state and tail; returns the checkpoint id.
  uint64_t CaptureAs(uint64_t depth, CaptureKind kind) {
    FrontierUpdate up;
    up.session_id = session_;
    up.model_id = model_;
    up.expected_depth = depth_;
    for (uint64_t i = depth_; i < depth; ++i) up.tokens.push_back(static_cast<TokenId>(100 + i));
    EXPECT_TRUE(daemon_->UpdateFrontier(up).ok());
    depth_ = depth;
    CaptureRequest req = CaptureAt(depth);
    req.kind = kind;
    return CaptureFilled(req);
  }

  // Captures as `req` asks, with patterned private state and tail; returns the checkpoint id.
  uint64_t CaptureFilled(const CaptureRequest& req) {
    absl::StatusOr<CaptureGrant> reserved = daemon_->ReserveCapture(req);
    EXPECT_TRUE(reserved.ok()) << reserved.status();
    if (!reserved.ok()) return 0;
    const uint64_t private_sum = Fill(reserved->private_state.region, kPrivateByte);
    const uint64_t tail_sum = Fill(reserved->tail.region, kTailByte);
    absl::StatusOr<CommitResult> committed = daemon_->CommitCapture(
        CaptureCommit{session_, reserved->reservation_id, private_sum, tail_sum});
    EXPECT_TRUE(committed.ok()) << committed.status();
    return committed.ok() ? committed->checkpoint_id : 0;
  }

  // Slot `slot` goes idle until all its borrowed rows are spilled (each chunk's pattern written
  // into its region first, and the spill answered). Spill requests sent before a restart are
  // not answered again.
  void Spill(uint32_t slot = 0) {
    for (bool spilled = true; spilled;) {
      ASSERT_TRUE(daemon_->SlotIdle(session_, slot).ok());
      const std::vector<v1::SessionServerMessage> messages = sink_.messages();
      spilled = false;
      for (; answered_ < messages.size(); ++answered_) {
        const v1::SessionServerMessage& m = messages[answered_];
        if (!m.has_spill_request()) continue;
        spilled = true;
        SpillReport report;
        report.spill_id = m.spill_request().spill_id();
        for (const v1::ChunkSpill& c : m.spill_request().chunks()) {
          const v1::ArenaHandle& d = c.destination();
          Fill(ArenaHandle{d.incarnation(), d.offset(), d.length()}, ChunkByte(c.chunk_id()));
          report.chunk_ids.push_back(c.chunk_id());
        }
        EXPECT_TRUE(daemon_->SpillDone(session_, report).ok());
      }
    }
  }

  // Spill, then every disk write that was waiting for the spilled rows finishes.
  void SpillAndFlush() {
    Spill();
    Flush();
  }

  // CaptureAs, then the checkpoint is written to disk and evicted from RAM; returns its id.
  uint64_t CaptureOnDiskOnly(uint64_t depth, CaptureKind kind = CaptureKind::kEnd) {
    const uint64_t id = CaptureAs(depth, kind);
    SpillAndFlush();
    EXPECT_TRUE(daemon_->Evict(EvictOrder{id, false, false}).ok());
    return id;
  }

  // The checkpoint rows, by id.
  std::vector<CheckpointRow> Rows() const {
    absl::StatusOr<std::vector<CheckpointRow>> rows = daemon_->Checkpoints(0, Tier::kNone);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? *rows : std::vector<CheckpointRow>{};
  }

  // Flips a byte of every file in the disk tier's folder `dir` ("states" or "chunks") whose
  // name starts with `prefix`.
  void DamageFiles(const std::string& dir, const std::string& prefix = "") {
    for (const auto& f : std::filesystem::directory_iterator(root_ + "/" + dir)) {
      if (f.path().filename().string().rfind(prefix, 0) != 0) continue;
      std::fstream file(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      file.seekg(100);
      const char c = static_cast<char>(file.get());
      file.seekp(100);
      file.put(static_cast<char>(c ^ 0x5a));
    }
  }

  // Restores checkpoint `id` into slot 1 from tier `from` and checks every byte the lease
  // hands out against the patterns written, then releases the lease.
  void ExpectRestoresIntact(uint64_t id, size_t chunks, Tier from = Tier::kRam) {
    absl::StatusOr<RestoreGrant> lease = daemon_->AcquireRestore(RestoreOf(id, 1));
    ASSERT_TRUE(lease.ok()) << lease.status();
    EXPECT_EQ(lease->loaded_from, from);
    EXPECT_TRUE(lease->ready);
    ASSERT_EQ(lease->chunks.size(), chunks);
    auto expect_all = [&](const ArenaHandle& region, uint8_t byte, uint64_t checksum) {
      absl::StatusOr<absl::Span<uint8_t>> bytes = daemon_->arena().Resolve(region);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      EXPECT_EQ(Xxh3(bytes->data(), bytes->size()), checksum);
      for (uint8_t b : *bytes) ASSERT_EQ(b, byte) << "region at " << region.offset;
    };
    for (const ChunkGrant& c : lease->chunks) {
      expect_all(c.region, ChunkByte(c.chunk_id), c.checksum);
    }
    expect_all(lease->private_state.region, kPrivateByte, lease->private_state.checksum);
    expect_all(lease->tail.region, kTailByte, lease->tail.checksum);
    EXPECT_TRUE(daemon_->ReleaseLease(LeaseRelease{session_, lease->lease_id, true, ""}).ok());
  }

  // Checks that `survivor` is the one checkpoint left, in RAM (and on disk too if `on_disk`),
  // restoring its own `chunks` chunks intact, and that none of `gone` restores from any tier.
  void ExpectOnlySurvivor(uint64_t survivor, const std::vector<uint64_t>& gone, size_t chunks = 2,
                          bool on_disk = false) {
    std::vector<CheckpointRow> rows = Rows();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].id, survivor);
    EXPECT_EQ(rows[0].tier, Tier::kRam);
    EXPECT_EQ(rows[0].on_disk, on_disk);
    ExpectRestoresIntact(survivor, chunks);
    for (uint64_t id : gone) {
      EXPECT_THAT(daemon_->AcquireRestore(RestoreOf(id, 1)).status(),
                  StatusIs(absl::StatusCode::kNotFound))
          << id;
    }
  }

  // The review's case: checkpoint `disk_only` (returned first) at 40 tokens, only on disk,
  // and a RAM-only one at 44 over the same 2 chunks, not written as the first sits just
  // before it on disk.
  std::pair<uint64_t, uint64_t> DiskOnlyAndRamSharer() {
    const uint64_t disk_only = CaptureAs(40, CaptureKind::kEnd);  // 2 chunks, 8 tail rows.
    SpillAndFlush();
    const uint64_t in_ram = CaptureAs(44, CaptureKind::kEnd);
    EXPECT_TRUE(daemon_->Evict(EvictOrder{disk_only, false, false}).ok());
    return {disk_only, in_ram};
  }

  // After a restart, checkpoint `id` is the only one left, on disk, and restores from disk
  // with every byte intact.
  void ExpectDurable(uint64_t id, size_t chunks) {
    Restart();
    std::vector<CheckpointRow> after = Rows();
    ASSERT_EQ(after.size(), 1u);
    EXPECT_EQ(after[0].id, id);
    EXPECT_EQ(after[0].tier, Tier::kDisk);
    ExpectRestoresIntact(id, chunks, Tier::kDisk);
  }

  // One checkpoint at 40 tokens (2 chunks, 8 tail rows), in RAM and on disk; its files in
  // `dir` are damaged and a scrub pass reports it. Returns its id.
  uint64_t ScrubbedWhileInRam(const std::string& dir) {
    const uint64_t id = CaptureAs(40, CaptureKind::kEnd);
    SpillAndFlush();
    std::vector<CheckpointRow> before = Rows();
    EXPECT_EQ(before.size(), 1u);
    EXPECT_TRUE(!before.empty() && before[0].on_disk);
    DamageFiles(dir);
    daemon_->ScrubPassForTest();
    return id;
  }

  uint64_t depth_ = 0;   // Slot 0's frontier.
  size_t answered_ = 0;  // Messages to the session looked at by Spill.
};

TEST_F(QuarantineScopeTest, ADamagedStateFileKeepsTheRamCheckpointSharingItsChunks) {
  const auto [on_disk, in_ram] = DiskOnlyAndRamSharer();
  std::vector<CheckpointRow> before = Rows();
  ASSERT_EQ(before.size(), 2u);
  ASSERT_EQ(before[0].tier, Tier::kDisk);
  ASSERT_EQ(before[1].tier, Tier::kRam);
  ASSERT_FALSE(before[1].on_disk);
  DamageFiles("states");

  daemon_->ScrubPassForTest();
  Flush();  // Nothing on disk covers it any more: it is written.

  ExpectOnlySurvivor(in_ram, {on_disk}, 2, /*on_disk=*/true);
  absl::StatusOr<Explanation> explained = daemon_->Explain(ExplainQuery{0, LookupOf(48).tokens});
  ASSERT_TRUE(explained.ok()) << explained.status();
  EXPECT_EQ(explained->result.best.checkpoint, in_ram);
  EXPECT_EQ(explained->result.best.tier, Tier::kRam);
}

TEST_F(QuarantineScopeTest, ADamagedChunkDropsTheDiskOnlyCheckpointsAndKeepsTheRamOne) {
  const auto [first, in_ram] = DiskOnlyAndRamSharer();
  // Learned checkpoints are always written: 3 chunks, the first 2 shared with both others.
  const uint64_t deeper = CaptureAs(56, CaptureKind::kLearned);
  SpillAndFlush();
  ASSERT_TRUE(daemon_->Evict(EvictOrder{deeper, false, false}).ok());
  ASSERT_EQ(Rows().size(), 3u);
  DamageFiles("chunks");

  daemon_->ScrubPassForTest();
  Flush();

  // Both disk-only checkpoints list the damaged chunks: no tier keeps them. The RAM one, no
  // longer covered by the first on disk, is written.
  ExpectOnlySurvivor(in_ram, {first, deeper}, 2, /*on_disk=*/true);
}

TEST_F(QuarantineScopeTest, ADamagedChunkKeepsACheckpointAlsoInRamAndWritesItToDiskAgain) {
  const uint64_t first = CaptureAs(40, CaptureKind::kEnd);
  SpillAndFlush();
  const uint64_t both = CaptureAs(56, CaptureKind::kLearned);  // Shares the first 2 chunks.
  SpillAndFlush();
  ASSERT_TRUE(daemon_->Evict(EvictOrder{first, false, false}).ok());
  std::vector<CheckpointRow> before = Rows();
  ASSERT_EQ(before.size(), 2u);
  ASSERT_EQ(before[1].tier, Tier::kRam);
  ASSERT_TRUE(before[1].on_disk);
  DamageFiles("chunks");

  daemon_->ScrubPassForTest();
  Flush();  // Its write was queued again when it lost its disk copy.

  // The store quarantined both; the RAM copy of the second never came from the bad files, and
  // it was durable, so it is written again from those bytes and survives a restart.
  ExpectOnlySurvivor(both, {first}, 3, /*on_disk=*/true);
  ExpectDurable(both, 3);
}

TEST_F(QuarantineScopeTest, AFailedDiskRestoreKeepsTheRamCheckpointSharingItsChunks) {
  const auto [on_disk, in_ram] = DiskOnlyAndRamSharer();
  DamageFiles("states");

  absl::StatusOr<RestoreGrant> damaged = daemon_->AcquireRestore(RestoreOf(on_disk, 1));
  Flush();

  EXPECT_THAT(damaged.status(), StatusIs(absl::StatusCode::kDataLoss));
  ExpectOnlySurvivor(in_ram, {on_disk}, 2, /*on_disk=*/true);
}

// The checkpoint the scrubber reports is in RAM too: its RAM bytes never came from the bad
// file, so only its disk copy goes, and it is written again from RAM.
TEST_F(QuarantineScopeTest, AScrubbedCheckpointWithADamagedStateFileKeepsItsRamCopy) {
  const uint64_t id = ScrubbedWhileInRam("states");

  Flush();  // Its write was queued again when it lost its disk copy.

  ExpectOnlySurvivor(id, {}, 2, /*on_disk=*/true);
  ExpectDurable(id, 2);
}

TEST_F(QuarantineScopeTest, AScrubbedCheckpointWithADamagedChunkKeepsItsRamCopy) {
  const uint64_t id = ScrubbedWhileInRam("chunks");

  Flush();

  ExpectOnlySurvivor(id, {}, 2, /*on_disk=*/true);
  ExpectDurable(id, 2);
}

// The RAM checkpoint at 44 was not written because the one at 40 sat just before it on disk;
// once that one is lost, nothing on disk covers the prompt, so it is written in its place.
TEST_F(QuarantineScopeTest, ARamCheckpointSkippedForALostDiskNeighbourIsWrittenInItsPlace) {
  const auto [on_disk, in_ram] = DiskOnlyAndRamSharer();
  DamageFiles("states");

  daemon_->ScrubPassForTest();
  Flush();

  ExpectOnlySurvivor(in_ram, {on_disk}, 2, /*on_disk=*/true);
  ExpectDurable(in_ram, 2);
}

TEST_F(QuarantineScopeTest, QuarantinesFromBeforeTheStartNameNoCheckpointOfThisRun) {
  const uint64_t before = CaptureAs(40, CaptureKind::kEnd);
  SpillAndFlush();
  ASSERT_TRUE(daemon_->Evict(EvictOrder{before, false, false}).ok());
  DamageFiles("states");
  daemon_->ScrubPassForTest();
  ASSERT_TRUE(Rows().empty());
  Restart();  // The store lists the quarantine as one from before this start.
  StartPrompt();
  // The disk tier's largest id counts quarantined checkpoints too: the id never comes again.
  const uint64_t grid = CaptureAs(40, CaptureKind::kGrid);  // Never written to disk.
  ASSERT_GT(grid, before);
  const uint64_t learned = CaptureAs(56, CaptureKind::kLearned);
  SpillAndFlush();
  ASSERT_TRUE(daemon_->Evict(EvictOrder{learned, false, false}).ok());  // Disk only.
  DamageFiles("states");

  daemon_->ScrubPassForTest();  // Reports `learned`, the store's only new quarantine.

  ExpectOnlySurvivor(grid, {learned});
}

// The same with a disk writer that yields to a busy model for long: while slot 1 is busy, a
// queued write waits before it starts.
class HeldWriterQuarantineTest : public QuarantineScopeTest {
 protected:
  CacheDaemonOptions DiskOptions() const override {
    CacheDaemonOptions options = QuarantineScopeTest::DiskOptions();
    options.writer.max_yield = absl::Seconds(30);
    return options;
  }

  // Holds the disk writer (`hold`) or lets it go, with the busy slot of a second session: the
  // test may use both slots of the first.
  void HoldWriter(bool hold) {
    if (holder_ == 0) {
      absl::StatusOr<SessionWelcome> welcome =
          daemon_->OpenSession(SessionHello{"holder", 2, 1}, &holder_sink_);
      ASSERT_TRUE(welcome.ok()) << welcome.status();
      holder_ = welcome->session_id;
    }
    ASSERT_TRUE((hold ? daemon_->SlotBusy(holder_, 0) : daemon_->SlotIdle(holder_, 0)).ok());
  }

  // Extends slot 1's prompt (tokens `first_token`, `first_token` + 1, ...) from `from` tokens
  // (0: a cold start) to `to` and captures there as `kind` (its own chunks), with its rows
  // spilled. Returns the checkpoint id.
  uint64_t CaptureOnSlot1(TokenId first_token, uint64_t from, uint64_t to, CaptureKind kind) {
    if (from == 0) {
      SlotStart start;
      start.session_id = session_;
      start.model_id = model_;
      start.slot = 1;
      EXPECT_TRUE(daemon_->StartSlot(start).ok());
    }
    FrontierUpdate up;
    up.session_id = session_;
    up.model_id = model_;
    up.slot = 1;
    up.expected_depth = from;
    for (uint64_t i = from; i < to; ++i) up.tokens.push_back(first_token + static_cast<TokenId>(i));
    EXPECT_TRUE(daemon_->UpdateFrontier(up).ok());
    CaptureRequest req = CaptureAt(to, 1);
    req.kind = kind;
    const uint64_t id = CaptureFilled(req);
    Spill(1);
    return id;
  }

  RecordingSink holder_sink_;
  uint64_t holder_ = 0;
};

// A write queued over chunks already on disk loses them before it starts: the checkpoint is
// still in RAM with every byte, so it is written again, its chunks as new ones.
TEST_F(HeldWriterQuarantineTest, AQueuedWriteWhoseSharedChunksAreLostIsQueuedAgain) {
  const uint64_t first = CaptureOnDiskOnly(40);
  ASSERT_TRUE(daemon_->SlotBusy(session_, 1).ok());                   // Holds the writer.
  const uint64_t learned = CaptureAs(56, CaptureKind::kLearned);      // Shares 2 chunks.
  Spill();  // Its write is queued, sharing the first's 2 chunk files, and waits.
  DamageFiles("chunks");
  daemon_->ScrubPassForTest();  // The first goes, and the store deletes its chunk files.

  ASSERT_TRUE(daemon_->SlotIdle(session_, 1).ok());
  Flush();

  ExpectOnlySurvivor(learned, {first}, 3, /*on_disk=*/true);
  ExpectDurable(learned, 3);
}

// Two queued writes share the chunks lost: each is refused and written again, the lost chunks
// anew by the first retry and shared by the second, although the other write still referenced
// them when they were lost.
TEST_F(HeldWriterQuarantineTest, TwoQueuedWritesSharingLostChunksAreBothWrittenAgain) {
  CaptureOnDiskOnly(40);
  ASSERT_TRUE(daemon_->SlotBusy(session_, 1).ok());                   // Holds the writer.
  // Learned checkpoints are always written: both share the first's 2 chunks and nothing else.
  const uint64_t second = CaptureAs(44, CaptureKind::kLearned);
  const uint64_t third = CaptureAs(47, CaptureKind::kLearned);
  Spill();  // Both writes are queued and wait.
  DamageFiles("chunks");
  daemon_->ScrubPassForTest();  // The first goes, and the store deletes its chunk files.

  ASSERT_TRUE(daemon_->SlotIdle(session_, 1).ok());
  Flush();

  std::vector<CheckpointRow> rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].id, second);
  EXPECT_EQ(rows[1].id, third);
  EXPECT_TRUE(rows[0].on_disk);
  EXPECT_TRUE(rows[1].on_disk);
  Restart();
  rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].tier, Tier::kDisk);
  EXPECT_EQ(rows[1].tier, Tier::kDisk);
  ExpectRestoresIntact(third, 2, Tier::kDisk);
}

// The same with hooks in the disk tier's file system.
class HookedWriterQuarantineTest : public HeldWriterQuarantineTest {
 protected:
  CacheDaemonOptions DiskOptions() const override {
    CacheDaemonOptions options = HeldWriterQuarantineTest::DiskOptions();
    options.file_system = &fs_;
    return options;
  }

  mutable testing::HookFileSystem fs_;  // The daemon writes through it.
};

// The scrubber's quarantine is handled before the scrubber reports it (here by a write refused
// for chunks an earlier quarantine took), and the checkpoint, still in RAM, is written again
// meanwhile: the report leaves the new copy alone.
TEST_F(HookedWriterQuarantineTest, AScrubReportAfterTheCheckpointIsWrittenAgainLeavesTheNewCopy) {
  // On slot 1, another prompt: a checkpoint on disk only, then a learned one sharing its
  // chunks, whose write is queued and waits.
  const uint64_t other = CaptureOnSlot1(500, 0, 32, CaptureKind::kEnd);
  ASSERT_TRUE(daemon_->SlotIdle(session_, 0).ok());  // Lets the writer go.
  Flush();
  ASSERT_TRUE(daemon_->Evict(EvictOrder{other, false, false}).ok());
  const uint64_t id = CaptureAs(40, CaptureKind::kEnd);  // In RAM and on disk.
  SpillAndFlush();
  HoldWriter(true);
  const uint64_t learned = CaptureOnSlot1(500, 32, 48, CaptureKind::kLearned);
  DamageFiles("states");  // Both checkpoints on disk.
  bool raced = false;
  fs_.SetAfterDelete([&](const std::string& path) {
    if (raced || !absl::StrContains(path, absl::StrFormat("/states/s-%016x-", id))) return;
    raced = true;
    // The store has quarantined `id` and deletes its files; the scrubber has not reported it.
    // The learned checkpoint's write is refused (the quarantine of `other`, reported already,
    // took its chunks): handling that refusal handles `id`'s quarantine too.
    HoldWriter(false);
    Flush();
  });

  daemon_->ScrubPassForTest();
  Flush();

  ASSERT_TRUE(raced);
  std::vector<CheckpointRow> rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].id, id);
  EXPECT_TRUE(rows[0].on_disk);
  EXPECT_EQ(rows[1].id, learned);
  EXPECT_TRUE(rows[1].on_disk);
  // `other`, `id`, `id` again and the learned checkpoint: nothing written twice.
  EXPECT_EQ(daemon_->disk_store()->stats().published, 4u);
}

// A write refused for a lost chunk is queued once more; refused again (another chunk it shares
// is lost while the retry runs), it is not queued a third time, and stays in RAM only.
TEST_F(HookedWriterQuarantineTest, AWriteRefusedTwiceIsNotQueuedAThirdTime) {
  CaptureOnDiskOnly(32);                                                 // Chunks 1 and 2.
  const uint64_t middle = CaptureOnDiskOnly(48, CaptureKind::kLearned);  // And chunk 3.
  HoldWriter(true);
  // It shares chunks 1 to 3; its write is queued, and waits.
  const uint64_t learned = CaptureAs(64, CaptureKind::kLearned);
  Spill();
  // The middle one goes, and with it chunk 3 (chunks 1 and 2 stay: the first lists them).
  DamageFiles("states", absl::StrFormat("s-%016x-", middle));
  daemon_->ScrubPassForTest();
  // The retry writes chunk 3 anew and shares chunks 1 and 2; as it starts writing, their files
  // are found damaged (the first goes too).
  bool damaged = false;
  int state_files = 0;  // Created since, one per write: on the writer's thread.
  fs_.SetBeforeCreate([&](const std::string& path) {
    state_files += absl::StrContains(path, "/states/") ? 1 : 0;
    if (damaged || !absl::StrContains(path, "/chunks/")) return;
    damaged = true;
    DamageFiles("chunks");
    daemon_->ScrubPassForTest();
  });

  HoldWriter(false);
  Flush();

  ASSERT_TRUE(damaged);
  EXPECT_EQ(state_files, 1);  // The retry, refused; no third write.
  std::vector<CheckpointRow> rows = Rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].id, learned);
  EXPECT_FALSE(rows[0].on_disk);
  EXPECT_EQ(daemon_->DeferredPersistsForTest(), 0u);
}

// The same with prompt checkpoints 16 tokens apart on disk at least, and a second session
// whose busy slot holds the writer while the test uses both slots of the first.
class SpacedWriterQuarantineTest : public HeldWriterQuarantineTest {
 protected:
  CacheDaemonOptions DiskOptions() const override {
    CacheDaemonOptions options = HeldWriterQuarantineTest::DiskOptions();
    options.cache.retention.disk_spacing_tokens = 16;
    return options;
  }
};

// A refused write whose retry queues nothing (a checkpoint written meanwhile sits just before
// it) leaves no mark: when it is written later and refused again, that refusal is a first one
// and is retried.
TEST_F(SpacedWriterQuarantineTest, ARetryThatQueuesNothingDoesNotCountAsTheRetry) {
  CaptureOnDiskOnly(32);  // Chunks 1 and 2.
  HoldWriter(true);
  const uint64_t prompt = CaptureAs(56, CaptureKind::kEnd);  // Shares the first's 2 chunks.
  Spill();                                                   // Its write is queued, and waits.
  const uint64_t near = CaptureOnSlot1(100, 0, 48, CaptureKind::kEnd);  // 8 tokens before it.
  DamageFiles("chunks");
  daemon_->ScrubPassForTest();  // The first goes with its chunk files.
  HoldWriter(false);
  Flush();  // The prompt's write is refused; its retry queues nothing: `near` is being written.
  std::vector<CheckpointRow> rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_FALSE(rows[0].on_disk);
  ASSERT_TRUE(rows[1].on_disk);
  // A learned checkpoint writes the prompt's chunks anew. Then `near` is lost: the prompt is
  // written again, sharing those chunks, which are lost in turn before the write starts.
  const uint64_t learned = CaptureAs(64, CaptureKind::kLearned);
  SpillAndFlush();
  ASSERT_TRUE(daemon_->Evict(EvictOrder{near, false, false}).ok());
  HoldWriter(true);
  DamageFiles("states", absl::StrFormat("s-%016x-", near));
  daemon_->ScrubPassForTest();  // `near` goes; the prompt's write is queued.
  DamageFiles("chunks");        // The learned one's only.
  daemon_->ScrubPassForTest();

  HoldWriter(false);
  Flush();

  rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].id, prompt);
  EXPECT_TRUE(rows[0].on_disk);  // Refused once more, then written.
  EXPECT_EQ(rows[1].id, learned);
  EXPECT_TRUE(rows[1].on_disk);
}

}  // namespace
}  // namespace cairn::cache
