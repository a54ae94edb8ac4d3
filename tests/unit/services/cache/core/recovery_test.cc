// Checkpoints found in the disk tier at start-up re-enter the policy core (AdmitRecovered).

#include <vector>

#include "gtest/gtest.h"
#include "services/cache/core/checkpoint_cache.h"
#include "services/cache/core/event_log.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/core/cache_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::MakeCache;
using ::cairn::cache::testing::SimpleLayout;
using ::cairn::cache::testing::TestIds;
using ::cairn::cache::testing::Tokens;
using ::cairn::testing::StatusIs;

constexpr int64_t kChunkRows = 16;

CacheOptions DiskOptions() {
  CacheOptions o;
  o.ram_bytes = 1 << 20;
  o.disk_bytes = 1 << 20;
  return o;
}

TEST(CheckpointCacheRecoveryTest, RecoveredCheckpointIsADiskCandidate) {
  auto t = MakeCache(DiskOptions(), SimpleLayout(8, 100, kChunkRows));
  ASSERT_NE(t, nullptr);
  std::vector<TokenId> tokens = Tokens(40, 1);
  const ComputationId run = t->cache->NewComputationId();

  CAIRN_ASSERT_OK(t->cache->AdmitRecovered(7, TestIds(), tokens, {101, 102}, CaptureKind::kEnd,
                                           run));

  std::vector<TokenId> prompt = Tokens(50, 1);
  absl::StatusOr<LookupResult> r = t->cache->Lookup({TestIds(), prompt, -1});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->best.tier, Tier::kDisk);
  EXPECT_EQ(r->best.depth, 40);
  EXPECT_EQ(r->best.checkpoint, 7u);
  // Disk accounting: two chunks of 16 rows x 8 bytes, 100 private bytes, an 8-row tail.
  EXPECT_EQ(t->cache->disk_ledger().used(), 2 * 16 * 8 + 100 + 8 * 8);
}

TEST(CheckpointCacheRecoveryTest, RecoveredCheckpointsShareChunksAndReplayFromEvents) {
  auto t = MakeCache(DiskOptions(), SimpleLayout(8, 100, kChunkRows));
  ASSERT_NE(t, nullptr);
  VectorEventSink sink;
  t->cache->events().AddSink(&sink);
  const ComputationId run = t->cache->NewComputationId();

  CAIRN_ASSERT_OK(t->cache->AdmitRecovered(3, TestIds(), Tokens(40, 1), {11, 12},
                                           CaptureKind::kEnd, run));
  CAIRN_ASSERT_OK(t->cache->AdmitRecovered(4, TestIds(), Tokens(64, 1), {11, 12, 13, 14},
                                           CaptureKind::kEnd, run));

  absl::StatusOr<CacheStateSummary> replayed = ReplayEvents(sink.events());
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(*replayed, t->cache->Summary());
  absl::StatusOr<ChunkInfo> shared = t->cache->GetChunk(11);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->disk_refs, 2);
}

TEST(CheckpointCacheRecoveryTest, NewIdsStayAboveRecoveredOnes) {
  auto t = MakeCache(DiskOptions(), SimpleLayout(8, 100, kChunkRows));
  ASSERT_NE(t, nullptr);
  t->cache->ReserveIdsAbove(500, 900);
  SlotKey slot{1, 0};
  ASSERT_TRUE(t->cache->StartCold(slot, TestIds(), "c").ok());
  CAIRN_ASSERT_OK(t->cache->ExtendSlot(slot, Tokens(20, 1)));

  absl::StatusOr<CaptureTicket> ticket =
      t->cache->BeginCapture(slot, CaptureKind::kEnd, "c", -1);

  ASSERT_TRUE(ticket.ok()) << ticket.status();
  EXPECT_GT(ticket->id, 900u);
  ASSERT_EQ(ticket->chunks.size(), 1u);
  EXPECT_GT(ticket->chunks[0], 500u);
}

TEST(CheckpointCacheRecoveryTest, NoIdIsMintedPastTheLimit) {
  auto t = MakeCache(DiskOptions(), SimpleLayout(8, 100, kChunkRows));
  ASSERT_NE(t, nullptr);
  t->cache->ReserveIdsAbove(0, 900);
  t->cache->LimitCheckpointIds(900);
  SlotKey slot{1, 0};
  ASSERT_TRUE(t->cache->StartCold(slot, TestIds(), "c").ok());
  CAIRN_ASSERT_OK(t->cache->ExtendSlot(slot, Tokens(20, 1)));

  EXPECT_THAT(t->cache->BeginCapture(slot, CaptureKind::kEnd, "c", -1).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(t->cache->next_checkpoint_id(), 901u);  // Nothing minted.
  t->cache->LimitCheckpointIds(901);
  absl::StatusOr<CaptureTicket> ticket = t->cache->BeginCapture(slot, CaptureKind::kEnd, "c", -1);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  EXPECT_EQ(ticket->id, 901u);
}

TEST(CheckpointCacheRecoveryTest, NoChunkIdIsMintedPastTheLimit) {
  auto t = MakeCache(DiskOptions(), SimpleLayout(8, 100, kChunkRows));
  ASSERT_NE(t, nullptr);
  t->cache->ReserveIdsAbove(500, 0);
  t->cache->LimitChunkIds(501);  // One of the two chunks the capture mints.
  SlotKey slot{1, 0};
  ASSERT_TRUE(t->cache->StartCold(slot, TestIds(), "c").ok());
  CAIRN_ASSERT_OK(t->cache->ExtendSlot(slot, Tokens(2 * kChunkRows + 1, 1)));
  ASSERT_EQ(t->cache->ChunksToMint(slot), 2);

  EXPECT_THAT(t->cache->BeginCapture(slot, CaptureKind::kEnd, "c", -1).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(t->cache->next_chunk_id(), 501u);  // Nothing minted.
  EXPECT_EQ(t->cache->next_checkpoint_id(), 1u);
  t->cache->LimitChunkIds(502);
  absl::StatusOr<CaptureTicket> ticket = t->cache->BeginCapture(slot, CaptureKind::kEnd, "c", -1);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  EXPECT_EQ(ticket->chunks, (std::vector<ChunkId>{501, 502}));
  EXPECT_EQ(t->cache->ChunksToMint(slot), 0);
}

TEST(CheckpointCacheRecoveryTest, BadRecoveriesAreRefused) {
  auto t = MakeCache(DiskOptions(), SimpleLayout(8, 100, kChunkRows));
  ASSERT_NE(t, nullptr);
  const ComputationId run = t->cache->NewComputationId();
  CAIRN_ASSERT_OK(t->cache->AdmitRecovered(3, TestIds(), Tokens(40, 1), {11, 12},
                                           CaptureKind::kEnd, run));

  EXPECT_THAT(t->cache->AdmitRecovered(3, TestIds(), Tokens(40, 1), {11, 12}, CaptureKind::kEnd,
                                       run),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(t->cache->AdmitRecovered(5, TestIds(), Tokens(40, 1), {11}, CaptureKind::kEnd, run),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(t->cache->AdmitRecovered(6, TestIds(), Tokens(40, 1), {12, 11}, CaptureKind::kEnd,
                                       run),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(t->cache->AdmitRecovered(8, Identities{"other-model", ""}, Tokens(40, 1), {21, 22},
                                       CaptureKind::kEnd, run),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(t->cache->AdmitRecovered(9, TestIds(), Tokens(16 * 4096, 1),
                                       std::vector<ChunkId>(4096, 0), CaptureKind::kEnd, run),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CheckpointCacheRecoveryTest, RecoveryBeyondTheDiskBudgetIsResourceExhausted) {
  CacheOptions o = DiskOptions();
  o.disk_bytes = 200;
  auto t = MakeCache(o, SimpleLayout(8, 100, kChunkRows));
  ASSERT_NE(t, nullptr);

  EXPECT_THAT(t->cache->AdmitRecovered(3, TestIds(), Tokens(40, 1), {11, 12}, CaptureKind::kEnd,
                                       t->cache->NewComputationId()),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(t->cache->disk_ledger().used(), 0);
}

}  // namespace
}  // namespace cairn::cache
