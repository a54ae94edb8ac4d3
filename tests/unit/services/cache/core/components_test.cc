// Unit tests of the cache core's parts: ledger, prefix index, planner, retention, event log,
// layout and the cache's error paths.

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/cache/core/capture_planner.h"
#include "services/cache/core/checkpoint_cache.h"
#include "services/cache/core/event_log.h"
#include "services/cache/core/ledger.h"
#include "services/cache/core/model_layout.h"
#include "services/cache/core/radix_prefix_index.h"
#include "services/cache/core/retention.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/core/cache_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::Concat;
using ::cairn::cache::testing::MakeCache;
using ::cairn::cache::testing::SimpleLayout;
using ::cairn::cache::testing::TestIds;
using ::cairn::cache::testing::Tokens;
using ::cairn::testing::StatusIs;

TEST(ByteLedgerTest, ReserveCommitRollbackAndRelease) {
  ByteLedger ledger(100);

  absl::StatusOr<ByteLedger::ReservationId> a = ledger.Reserve(60);
  absl::StatusOr<ByteLedger::ReservationId> b = ledger.Reserve(50);
  absl::StatusOr<ByteLedger::ReservationId> c = ledger.Reserve(40);

  ASSERT_TRUE(a.ok() && c.ok());
  EXPECT_THAT(b.status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ledger.free(), 0);
  CAIRN_ASSERT_OK(ledger.Commit(*a));
  CAIRN_ASSERT_OK(ledger.Rollback(*c));
  EXPECT_EQ(ledger.used(), 60);
  EXPECT_EQ(ledger.reserved(), 0);
  EXPECT_EQ(ledger.peak(), 100);
  EXPECT_THAT(ledger.Commit(*c), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(ledger.Release(61), StatusIs(absl::StatusCode::kFailedPrecondition));
  CAIRN_EXPECT_OK(ledger.Release(60));
  EXPECT_THAT(ledger.Reserve(-1).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ByteLedgerTest, BudgetNeverDropsBelowWhatIsHeld) {
  ByteLedger ledger(100);
  ASSERT_TRUE(ledger.Reserve(70).ok());

  EXPECT_THAT(ledger.SetBudget(69), StatusIs(absl::StatusCode::kFailedPrecondition));
  CAIRN_EXPECT_OK(ledger.SetBudget(70));
  EXPECT_EQ(ledger.free(), 0);
}

TEST(RadixPrefixIndexTest, LookupCollectsEveryEntryOnThePathAndTheSharedPrefix) {
  RadixPrefixIndex index;
  index.Insert(Tokens(4, 0), {IndexEntry::Kind::kCheckpoint, 1});
  index.Insert(Tokens(8, 0), {IndexEntry::Kind::kCheckpoint, 2});
  index.Insert(Concat(Tokens(6, 0), Tokens(3, 100)), {IndexEntry::Kind::kLive, 3});

  RadixPrefixIndex::Walk walk = index.Lookup(Concat(Tokens(7, 0), Tokens(2, 50)));

  ASSERT_EQ(walk.hits.size(), 1u);
  EXPECT_EQ(walk.hits[0].entry.id, 1u);
  EXPECT_EQ(walk.hits[0].depth, 4);
  EXPECT_EQ(walk.shared_prefix, 7);
  EXPECT_EQ(index.token_count(), 11);
  EXPECT_EQ(index.Lookup(Tokens(10, 0)).hits.size(), 2u);
}

TEST(RadixPrefixIndexTest, HandlesSurviveSplitsAndRemovalsRecompress) {
  RadixPrefixIndex index;
  RadixPrefixIndex::Handle deep = index.Insert(Tokens(10, 0), {IndexEntry::Kind::kCheckpoint, 1});
  RadixPrefixIndex::Handle mid = index.Insert(Tokens(5, 0), {IndexEntry::Kind::kCheckpoint, 2});
  RadixPrefixIndex::Handle side =
      index.Insert(Concat(Tokens(5, 0), Tokens(5, 100)), {IndexEntry::Kind::kCheckpoint, 3});

  EXPECT_EQ(index.TokensAt(deep), Tokens(10, 0));
  EXPECT_TRUE(RadixPrefixIndex::IsBranchPoint(mid));
  EXPECT_TRUE(RadixPrefixIndex::IsLeaf(side));
  index.Remove(mid, {IndexEntry::Kind::kCheckpoint, 2});
  index.Remove(side, {IndexEntry::Kind::kCheckpoint, 3});

  EXPECT_EQ(index.TokensAt(deep), Tokens(10, 0));
  EXPECT_EQ(index.node_count(), 2u);  // Root and one compressed leaf.
  EXPECT_EQ(index.token_count(), 10);
  index.Remove(deep, {IndexEntry::Kind::kCheckpoint, 1});
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.token_count(), 0);
}

TEST(RadixPrefixIndexTest, NearAncestorsStopAtTheDistance) {
  RadixPrefixIndex index;
  index.Insert(Tokens(100, 0), {IndexEntry::Kind::kCheckpoint, 1});
  index.Insert(Tokens(200, 0), {IndexEntry::Kind::kCheckpoint, 2});
  RadixPrefixIndex::Handle leaf = index.Insert(Tokens(250, 0), {IndexEntry::Kind::kCheckpoint, 3});

  EXPECT_EQ(RadixPrefixIndex::NearAncestors(leaf, 50).size(), 1u);
  EXPECT_EQ(RadixPrefixIndex::NearAncestors(leaf, 149).size(), 1u);
  EXPECT_EQ(RadixPrefixIndex::NearAncestors(leaf, 150).size(), 2u);
}

TEST(RadixPrefixIndexTest, ExportTreeKeepsKeptEntriesAndTheBranchPointsBetweenThem) {
  RadixPrefixIndex index;
  index.Insert(Tokens(32, 0), {IndexEntry::Kind::kCheckpoint, 1});
  index.Insert(Tokens(64, 0), {IndexEntry::Kind::kCheckpoint, 2});
  index.Insert(Concat(Tokens(40, 0), Tokens(2, 900)), {IndexEntry::Kind::kCheckpoint, 3});
  index.Insert(Tokens(80, 0), {IndexEntry::Kind::kLive, 4});  // Left out: not kept.
  auto checkpoints = [](const IndexEntry& e) { return e.kind == IndexEntry::Kind::kCheckpoint; };

  RadixPrefixIndex::Export tree = index.ExportTree(checkpoints, 100);

  // 32 under the root, the branch point at 40 under 32, then 42 and 64 under it.
  ASSERT_EQ(tree.nodes.size(), 4u);
  EXPECT_FALSE(tree.truncated);
  EXPECT_EQ(tree.nodes[0].depth, 32);
  EXPECT_EQ(tree.nodes[0].parent, -1);
  EXPECT_EQ(tree.nodes[1].depth, 40);
  EXPECT_EQ(tree.nodes[1].parent, 0);
  EXPECT_TRUE(tree.nodes[1].entries.empty());
  for (int i : {2, 3}) {
    EXPECT_EQ(tree.nodes[i].parent, 1);
    ASSERT_EQ(tree.nodes[i].entries.size(), 1u);
  }
  EXPECT_EQ(tree.nodes[2].depth + tree.nodes[3].depth, 42 + 64);
  RadixPrefixIndex::Export small = index.ExportTree(checkpoints, 2);
  EXPECT_EQ(small.nodes.size(), 2u);
  EXPECT_TRUE(small.truncated);
}

TEST(CapturePlannerTest, GridPointSnapsToAPassEndWithin128) {
  CapturePlanner planner;
  PlanInput in;
  in.prompt_tokens = 10000;
  in.restore_depth = 100;
  in.restored_live = true;

  absl::StatusOr<CapturePlan> plan = planner.Plan(in);

  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<PlannedCapture> expected = {{100, CaptureKind::kReused}, {2148, CaptureKind::kGrid},
                                          {4196, CaptureKind::kGrid},  {6244, CaptureKind::kGrid},
                                          {8292, CaptureKind::kGrid},  {10000, CaptureKind::kEnd}};
  EXPECT_EQ(plan->captures, expected);
}

TEST(CapturePlannerTest, SmallBudgetGivesFewerGridPoints) {
  CapturePlanner planner;
  PlanInput in;
  in.prompt_tokens = 8192;
  in.private_bytes = 1000;

  in.ram_budget_bytes = 1000000;
  absl::StatusOr<CapturePlan> roomy = planner.Plan(in);
  in.ram_budget_bytes = 16000;  // One eighth holds two private states.
  absl::StatusOr<CapturePlan> tight = planner.Plan(in);
  in.ram_budget_bytes = 7999;
  absl::StatusOr<CapturePlan> none = planner.Plan(in);

  ASSERT_TRUE(roomy.ok() && tight.ok() && none.ok());
  EXPECT_EQ(roomy->grid_points, 4);
  EXPECT_EQ(tight->grid_points, 2);
  EXPECT_EQ(tight->captures,
            (std::vector<PlannedCapture>{{4096, CaptureKind::kGrid}, {8192, CaptureKind::kEnd}}));
  EXPECT_EQ(none->grid_points, 0);
  EXPECT_EQ(none->captures.size(), 1u);
}

TEST(CapturePlannerTest, LearnedPointNeeds512TokensAndMergesWithin64) {
  CapturePlanner planner;
  PlanInput in;
  in.prompt_tokens = 9000;
  in.restore_depth = 4096;
  in.existing = {4096};

  in.shared_prefix = 4096 + 511;
  absl::StatusOr<CapturePlan> short_reuse = planner.Plan(in);
  in.shared_prefix = 6000;
  in.stable_boundary = 6050;
  absl::StatusOr<CapturePlan> merged = planner.Plan(in);
  in.stable_boundary = -1;
  in.shared_prefix = 6100;  // Within 64 of the grid point 6144: the grid point yields.
  absl::StatusOr<CapturePlan> absorbs_grid = planner.Plan(in);

  ASSERT_TRUE(short_reuse.ok() && merged.ok() && absorbs_grid.ok());
  for (const PlannedCapture& c : short_reuse->captures) EXPECT_NE(c.kind, CaptureKind::kLearned);
  for (const PlannedCapture& c : merged->captures) EXPECT_NE(c.kind, CaptureKind::kLearned);
  EXPECT_EQ(absorbs_grid->captures,
            (std::vector<PlannedCapture>{{6100, CaptureKind::kLearned},
                                         {8148, CaptureKind::kGrid},  // 8,192 snapped.
                                         {9000, CaptureKind::kEnd}}));
}

TEST(CapturePlannerTest, ANamedSharedBoundaryIsALearnedPointBeforeAnyBranchExists) {
  PlanInput in;
  in.prompt_tokens = 13000;
  in.shared_boundary = 11668;  // An agent's system prompt and tools; nothing cached yet.

  absl::StatusOr<CapturePlan> named = CapturePlanner().Plan(in);
  PlannerOptions off;
  off.capture_shared_boundary = false;
  absl::StatusOr<CapturePlan> ignored = CapturePlanner(off).Plan(in);
  in.restore_depth = 11668 - 511;  // Too little past the restore point to pay for itself.
  absl::StatusOr<CapturePlan> too_close = CapturePlanner().Plan(in);

  ASSERT_TRUE(named.ok() && ignored.ok() && too_close.ok());
  auto has = [](const CapturePlan& p, int64_t pos, CaptureKind kind) {
    return std::find(p.captures.begin(), p.captures.end(), PlannedCapture{pos, kind}) !=
           p.captures.end();
  };
  EXPECT_TRUE(has(*named, 11668, CaptureKind::kLearned));
  // Prefill passes stop there, so the capture sees exactly that state.
  EXPECT_TRUE(std::any_of(named->passes.begin(), named->passes.end(),
                          [](const PrefillPass& p) { return p.end == 11668; }));
  EXPECT_FALSE(has(*ignored, 11668, CaptureKind::kLearned));
  EXPECT_FALSE(has(*too_close, 11668, CaptureKind::kLearned));
}

TEST(CapturePlannerTest, TheClientsPassLengthPlansThePasses) {
  // The client runs the passes: its longest pass (8192, a GPU's) replaces the planner's 2048.
  CapturePlanner planner;
  PlanInput in;
  in.prompt_tokens = 20000;
  in.max_pass_tokens = 8192;
  // No grid points (the budget holds none), so only the prompt's end cuts the passes.
  in.ram_budget_bytes = 1;
  in.private_bytes = int64_t{1} << 30;
  absl::StatusOr<CapturePlan> plan = planner.Plan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int64_t longest = 0;
  int64_t at = 0;
  for (const PrefillPass& p : plan->passes) {
    EXPECT_EQ(p.begin, at);
    longest = std::max(longest, p.end - p.begin);
    at = p.end;
  }
  EXPECT_EQ(at, 20000);
  EXPECT_EQ(longest, 8192);
  // Without it, the planner's own.
  in.max_pass_tokens = 0;
  plan = planner.Plan(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const PrefillPass& p : plan->passes) EXPECT_LE(p.end - p.begin, 2048);
  in.max_pass_tokens = -1;
  EXPECT_THAT(planner.Plan(in).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CapturePlannerTest, RejectsInconsistentInput) {
  CapturePlanner planner;
  PlanInput in;
  in.prompt_tokens = 10;
  in.restore_depth = 11;

  EXPECT_THAT(planner.Plan(in).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  PlannerOptions bad;
  bad.max_pass_tokens = 0;
  EXPECT_THAT(CapturePlanner(bad).Plan({}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(RetentionPolicyTest, ClassifiesByTheSeedsRanks) {
  RetentionPolicy policy;
  RankInput retry{CaptureKind::kEnd, 1005, 1000, 10, 100, false};
  RankInput cheap{CaptureKind::kGrid, 10, -1, 8001, 100, false};
  RankInput idle{CaptureKind::kGrid, 1000, -1, 10, 100, true};
  RankInput reused{CaptureKind::kStable, 1000, 1000, 10, 100, false};

  EXPECT_EQ(policy.Classify(retry), EvictionRank::kRetryCopy);
  EXPECT_EQ(policy.Classify(cheap), EvictionRank::kCheap);
  EXPECT_EQ(policy.Classify(idle), EvictionRank::kIdle);
  EXPECT_EQ(policy.Classify(reused), EvictionRank::kReused);
  cheap.private_bytes = 8000;  // Exactly 8x is not "more than".
  EXPECT_EQ(policy.Classify(cheap), EvictionRank::kReused);
}

TEST(RetentionPolicyTest, CoveredFirstBranchPointsLastPinnedNever) {
  RetentionPolicy policy;
  absl::Time t0 = absl::UnixEpoch();
  std::vector<RetentionItem> items = {
      {1, EvictionRank::kIdle, false, true, t0, false},  // Branch point.
      {2, EvictionRank::kIdle, false, false, t0 + absl::Seconds(5), false},
      {3, EvictionRank::kIdle, true, false, t0 + absl::Seconds(9), false},  // Covered.
      {4, EvictionRank::kIdle, false, false, t0 + absl::Seconds(1), false},
      {5, EvictionRank::kCheap, false, true, t0 + absl::Seconds(9), false},
      {6, EvictionRank::kRetryCopy, false, false, t0, true},  // Pinned.
      {7, EvictionRank::kReused, true, false, t0, false},
  };

  std::vector<CheckpointId> order = policy.EvictionOrder(items);

  EXPECT_EQ(order, (std::vector<CheckpointId>{5, 3, 4, 2, 1, 7}));
}

TEST(EventLogTest, RingKeepsTheLatestAndSinksSeeEverything) {
  EventLog log(2);
  VectorEventSink sink;
  log.AddSink(&sink);

  for (int i = 0; i < 3; ++i) log.Log(Event{});

  ASSERT_EQ(log.recent().size(), 2u);
  EXPECT_EQ(log.recent().front().seq, 2u);
  EXPECT_EQ(sink.events().size(), 3u);
  EXPECT_EQ(log.logged(), 3u);
}

TEST(EventLogTest, ReplayRejectsGapsAndUnknownCheckpoints) {
  Event evict;
  evict.seq = 1;
  evict.type = EventType::kEvict;
  evict.checkpoint = 9;
  Event admit;
  admit.seq = 2;

  EXPECT_THAT(ReplayEvents({evict}).status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(ReplayEvents({admit}).status(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(ModelLayoutTest, ValidatesComponents) {
  EXPECT_TRUE(SimpleLayout(27460, 133000000).Validate().ok());
  ModelLayout no_chunks = SimpleLayout(1, 1, 0);
  ModelLayout dup = SimpleLayout(1, 1);
  dup.components.push_back(dup.components.front());
  ModelLayout wrong_kind = SimpleLayout(1, 1);
  wrong_kind.components[0].private_bytes = 5;
  ModelLayout negative = SimpleLayout(-1, 1);

  EXPECT_THAT(no_chunks.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(dup.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(wrong_kind.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(negative.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ModelLayout{}.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ModelLayoutTest, SizesThatWouldOverflowAreRefused) {
  ModelLayout wide = SimpleLayout(int64_t{1} << 40, 1, 0xFFFFFFFFll);
  wide.components.push_back({"kv2", ComponentKind::kRows, int64_t{1} << 40, 0});
  ModelLayout deep_rows = SimpleLayout(int64_t{1} << 30, 1, 1);
  ModelLayout private_sum = SimpleLayout(1, ModelLayout::kMaxStateBytes);
  private_sum.components.push_back({"more", ComponentKind::kPrivate, 0, 1});
  // Found by the cache_rpc fuzz target: row bytes times kMaxTokens rows overflowed int64.
  ModelLayout wide_chunk = SimpleLayout(int64_t{1} << 41, 1, ModelLayout::kMaxTokens);

  EXPECT_THAT(wide.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(deep_rows.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(private_sum.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(wide_chunk.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(SimpleLayout(int64_t{1} << 20, int64_t{1} << 40, 256).Validate().ok());
}

TEST(CheckpointCacheTest, ErrorsAreStatusesNotCrashes) {
  auto t = MakeCache({}, SimpleLayout(10, 100));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  std::vector<TokenId> tokens = Tokens(10, 0);

  EXPECT_THAT(cache.Lookup({{"other-model", ""}, tokens, -1, 1}).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(cache.RegisterLayout(TestIds().compatibility, SimpleLayout(11, 100)),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(cache.BeginCapture({1, 0}, CaptureKind::kEnd, "A", -1).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(cache.Restore(42, {1, 0}, TestIds(), "A").status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(cache.CommitCapture(42).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(cache.Evict(42, "x"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(cache.BeginPersist(42).status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(CheckpointCache::Create({}, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CheckpointCacheTest, AbortRollsTheCaptureBack) {
  auto t = MakeCache({}, SimpleLayout(10, 100, 4));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  SlotKey slot{1, 0};
  ASSERT_TRUE(cache.StartCold(slot, TestIds(), "A").ok());
  ASSERT_TRUE(cache.ExtendSlot(slot, Tokens(10, 0)).ok());
  absl::StatusOr<CaptureTicket> ticket = cache.BeginCapture(slot, CaptureKind::kEnd, "A", -1);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  // Private state and a 2-row tail; the two full chunks of 4 rows are borrowed, charged when
  // they are spilled (RetentionOptions::charge_on_spill).
  EXPECT_EQ(cache.ram_ledger().used() + cache.ram_ledger().reserved(), 100 + 2 * 10);

  CAIRN_ASSERT_OK(cache.AbortCapture(ticket->id, "copy failed"));

  EXPECT_EQ(cache.ram_ledger().used() + cache.ram_ledger().reserved(), 0);
  EXPECT_TRUE(cache.Checkpoints().empty());
  EXPECT_EQ(cache.events().recent().back().type, EventType::kReject);
}

TEST(CheckpointCacheTest, CaptureLargerThanTheBudgetIsRejectedWithAnEvent) {
  CacheOptions options;
  options.ram_bytes = 150;
  auto t = MakeCache(options, SimpleLayout(10, 100, 4));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  SlotKey slot{1, 0};
  ASSERT_TRUE(cache.StartCold(slot, TestIds(), "A").ok());
  ASSERT_TRUE(cache.ExtendSlot(slot, Tokens(10, 0)).ok());

  EXPECT_THAT(cache.BeginCapture(slot, CaptureKind::kEnd, "A", -1).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(cache.events().recent().back().type, EventType::kReject);
  EXPECT_EQ(cache.ram_ledger().used(), 0);
}

TEST(CheckpointCacheTest, InputIdentityMustMatch) {
  auto t = MakeCache({}, SimpleLayout(10, 100));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  SlotKey slot{1, 0};
  std::vector<TokenId> tokens = Tokens(600, 0);
  ASSERT_TRUE(cache.StartCold(slot, TestIds(), "A").ok());
  ASSERT_TRUE(cache.ExtendSlot(slot, tokens).ok());
  absl::StatusOr<CaptureTicket> ticket = cache.BeginCapture(slot, CaptureKind::kEnd, "A", -1);
  ASSERT_TRUE(ticket.ok());
  CheckpointId id = *cache.CommitCapture(ticket->id);
  Identities with_image{TestIds().compatibility, "image:abc"};

  absl::StatusOr<LookupResult> found =
      cache.Lookup({with_image, Concat(tokens, Tokens(5, 9000)), -1, 1});

  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->best.tier, Tier::kNone);
  EXPECT_THAT(cache.Restore(id, {1, 1}, with_image, "B").status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(CheckpointCacheTest, DroppedSlotQuarantinesCheckpointsWithUnspilledRows) {
  auto t = MakeCache({}, SimpleLayout(10, 100, 4));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  SlotKey slot{1, 0};
  ASSERT_TRUE(cache.StartCold(slot, TestIds(), "A").ok());
  ASSERT_TRUE(cache.ExtendSlot(slot, Tokens(8, 0)).ok());
  absl::StatusOr<CaptureTicket> first = cache.BeginCapture(slot, CaptureKind::kGrid, "A", -1);
  ASSERT_TRUE(first.ok());
  CheckpointId spilled = *cache.CommitCapture(first->id);
  absl::StatusOr<SpillInfo> idle = cache.GetSpill(cache.SpillIdle(slot, 10));
  ASSERT_TRUE(idle.ok()) << idle.status();
  ASSERT_EQ(idle->chunks.size(), 2u);
  CAIRN_ASSERT_OK(cache.FinishSpill(idle->id, {idle->chunks[0].id, idle->chunks[1].id}, {}, ""));
  ASSERT_TRUE(cache.ExtendSlot(slot, Tokens(4, 100)).ok());
  absl::StatusOr<CaptureTicket> second = cache.BeginCapture(slot, CaptureKind::kEnd, "A", -1);
  ASSERT_TRUE(second.ok());
  CheckpointId borrowed = *cache.CommitCapture(second->id);

  cache.DropSlot(slot);

  EXPECT_TRUE(cache.GetCheckpoint(spilled).ok());
  EXPECT_THAT(cache.GetCheckpoint(borrowed).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(cache.events().recent().back().type, EventType::kQuarantine);
}

}  // namespace
}  // namespace cairn::cache

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::MakeCache;
using ::cairn::cache::testing::SimpleLayout;
using ::cairn::cache::testing::TestIds;
using ::cairn::cache::testing::Tokens;

TEST(CheckpointCacheRestoreTest, RestoreIntoAnotherSlotSpillsBorrowedChunksFirst) {
  auto t = MakeCache({}, SimpleLayout(10, 100, 4));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  SlotKey slot0{1, 0};
  SlotKey slot1{1, 1};
  ASSERT_TRUE(cache.StartCold(slot0, TestIds(), "A").ok());
  ASSERT_TRUE(cache.ExtendSlot(slot0, Tokens(10, 0)).ok());
  absl::StatusOr<CaptureTicket> ticket = cache.BeginCapture(slot0, CaptureKind::kEnd, "A", -1);
  ASSERT_TRUE(ticket.ok());
  CheckpointId id = *cache.CommitCapture(ticket->id);
  const int64_t used = cache.ram_ledger().used();

  absl::StatusOr<RestorePlan> plan = cache.Restore(id, slot1, TestIds(), "A");

  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kept_rows, 0);
  ASSERT_EQ(plan->awaiting_spills.size(), 1u);
  absl::StatusOr<SpillInfo> spill = cache.GetSpill(plan->awaiting_spills[0]);
  ASSERT_TRUE(spill.ok()) << spill.status();
  EXPECT_TRUE(spill->urgent);
  EXPECT_EQ(spill->slot, slot0);
  ASSERT_EQ(spill->chunks.size(), 2u);
  EXPECT_EQ(spill->chunks[1].row_begin, 4);
  EXPECT_EQ(cache.TakeNewSpills(), plan->awaiting_spills);
  // The spill charges the borrowed rows (RetentionOptions::charge_on_spill).
  EXPECT_EQ(cache.ram_ledger().used(), used + 2 * 4 * 10);
  for (ChunkId c : plan->chunks) {
    absl::StatusOr<ChunkInfo> chunk = cache.GetChunk(c);
    ASSERT_TRUE(chunk.ok());
    EXPECT_EQ(chunk->residency, Residency::kSpilling);
    EXPECT_EQ(chunk->holders.size(), 2u);  // Both slots hold these rows now.
  }
  CAIRN_ASSERT_OK(cache.FinishSpill(spill->id, plan->chunks, {}, ""));
  for (ChunkId c : plan->chunks) EXPECT_TRUE(cache.GetChunk(c)->in_arena);
  absl::StatusOr<std::vector<TokenId>> tokens = cache.SlotTokens(slot1);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(*tokens, Tokens(10, 0));
}

TEST(CheckpointCacheRestoreTest, RestoreIntoTheSameSlotKeepsSharedRows) {
  auto t = MakeCache({}, SimpleLayout(10, 100, 4));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  SlotKey slot{1, 0};
  ASSERT_TRUE(cache.StartCold(slot, TestIds(), "A").ok());
  ASSERT_TRUE(cache.ExtendSlot(slot, Tokens(9, 0)).ok());
  absl::StatusOr<CaptureTicket> first = cache.BeginCapture(slot, CaptureKind::kGrid, "A", -1);
  ASSERT_TRUE(first.ok());
  CheckpointId at9 = *cache.CommitCapture(first->id);
  ASSERT_TRUE(cache.ExtendSlot(slot, Tokens(8, 100)).ok());
  absl::StatusOr<CaptureTicket> second = cache.BeginCapture(slot, CaptureKind::kEnd, "A", -1);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(cache.CommitCapture(second->id).ok());

  absl::StatusOr<RestorePlan> plan = cache.Restore(at9, slot, TestIds(), "A");

  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kept_rows, 8);  // Two 4-row chunks are the same chunk ids.
  EXPECT_TRUE(plan->awaiting_spills.empty());
  ASSERT_EQ(plan->preserve_spills.size(), 1u);
  // Rows 8..16 of the deeper checkpoint.
  EXPECT_EQ(cache.GetSpill(plan->preserve_spills[0])->chunks.size(), 2u);
  EXPECT_EQ(plan->bytes_to_copy, 1 * 10 + 100);  // One tail row and the private state.
}

}  // namespace
}  // namespace cairn::cache

namespace cairn::cache {
namespace {

TEST(CheckpointCacheDiskTest, QuarantineAbandonsAWriteInFlight) {
  CacheOptions options;
  options.disk_bytes = 100000;
  auto t = testing::MakeCache(options, testing::SimpleLayout(10, 100, 4));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  SlotKey slot{1, 0};
  ASSERT_TRUE(cache.StartCold(slot, testing::TestIds(), "A").ok());
  ASSERT_TRUE(cache.ExtendSlot(slot, testing::Tokens(10, 0)).ok());
  absl::StatusOr<CaptureTicket> ticket = cache.BeginCapture(slot, CaptureKind::kEnd, "A", -1);
  ASSERT_TRUE(ticket.ok());
  CheckpointId id = *cache.CommitCapture(ticket->id);
  ASSERT_TRUE(cache.ShouldPersist(id));
  absl::StatusOr<PersistTicket> persist = cache.BeginPersist(id);
  ASSERT_TRUE(persist.ok()) << persist.status();
  EXPECT_EQ(persist->new_chunks.size(), 2u);
  EXPECT_EQ(cache.disk_ledger().used() + cache.disk_ledger().reserved(), 200);

  CAIRN_ASSERT_OK(cache.QuarantineChunk(persist->new_chunks.front(), "checksum mismatch"));

  EXPECT_EQ(cache.disk_ledger().used() + cache.disk_ledger().reserved(), 0);
  EXPECT_EQ(cache.ram_ledger().used(), 0);
  EXPECT_THAT(cache.CommitPersist(id), ::cairn::testing::StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(cache.Checkpoints().empty());
  EXPECT_EQ(cache.chunk_count(), 2u);  // Still the slot's live rows.
}

TEST(CheckpointCacheDiskTest, AWriteCoversTheQueuedWritesOfItsPrefixes) {
  CacheOptions options;
  options.disk_bytes = 100000;
  auto t = testing::MakeCache(options, testing::SimpleLayout(10, 100, 4));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  SlotKey slot{1, 0};
  SlotKey other{1, 1};
  auto capture = [&](SlotKey at, CaptureKind kind, int64_t n, TokenId base) {
    EXPECT_TRUE(cache.ExtendSlot(at, testing::Tokens(n, base)).ok());
    absl::StatusOr<CaptureTicket> ticket = cache.BeginCapture(at, kind, "c", -1);
    EXPECT_TRUE(ticket.ok()) << ticket.status();
    CheckpointId id = *cache.CommitCapture(ticket->id);
    EXPECT_TRUE(cache.BeginPersist(id).ok());
    return id;
  };
  ASSERT_TRUE(cache.StartCold(slot, testing::TestIds(), "A").ok());
  ASSERT_TRUE(cache.StartCold(other, testing::TestIds(), "B").ok());
  const CheckpointId learned = capture(slot, CaptureKind::kLearned, 4, 0);
  const CheckpointId prefix = capture(slot, CaptureKind::kEnd, 4, 100);
  const CheckpointId unrelated = capture(other, CaptureKind::kEnd, 8, 500);
  ASSERT_TRUE(cache.ExtendSlot(slot, testing::Tokens(4, 200)).ok());
  absl::StatusOr<CaptureTicket> ticket = cache.BeginCapture(slot, CaptureKind::kEnd, "c", -1);
  ASSERT_TRUE(ticket.ok());
  const CheckpointId deeper = *cache.CommitCapture(ticket->id);

  std::vector<CheckpointId> covered = cache.PersistsCoveredBy(deeper);

  // The prefix of the same tokens is covered; a learned one is always written; another
  // conversation's tokens are no prefix.
  EXPECT_EQ(covered, std::vector<CheckpointId>{prefix});
  (void)learned;
  (void)unrelated;
}

}  // namespace
}  // namespace cairn::cache

namespace cairn::cache {
namespace {

TEST(EventLogFormatTest, OneLineNamesTheDecisionReasonAndNumbers) {
  Event e;
  e.seq = 12;
  e.type = EventType::kEvict;
  e.checkpoint = 7;
  e.conversation = "A";
  e.depth = 8192;
  e.tier = Tier::kRam;
  e.bytes = 133000000;
  e.reason = "retry-copy";

  std::string line = FormatEvent(e);

  EXPECT_EQ(line,
            "#12 evict ckpt 7 conv A depth 8192 tier ram bytes 133000000 reason retry-copy "
            "ram_used 0");
}

}  // namespace
}  // namespace cairn::cache

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::MakeCache;
using ::cairn::cache::testing::SimpleLayout;
using ::cairn::cache::testing::TestIds;
using ::cairn::cache::testing::Tokens;
using ::cairn::testing::StatusIs;

// Records what the core reports.
class RecordingListener final : public ResidencyListener {
 public:
  void ChunkLeftRam(ChunkId id) override { chunks_left.push_back(id); }
  void CheckpointLeftRam(CheckpointId id) override { left_ram.push_back(id); }
  void CheckpointLeftDisk(CheckpointId id) override { left_disk.push_back(id); }
  void SpillFinished(uint64_t spill, bool ok, const std::string& failure) override {
    finished.push_back({spill, ok, failure});
  }
  struct Finished {
    uint64_t spill;
    bool ok;
    std::string failure;
  };
  std::vector<ChunkId> chunks_left;
  std::vector<CheckpointId> left_ram;
  std::vector<CheckpointId> left_disk;
  std::vector<Finished> finished;
};

// A cache with one checkpoint of 10 tokens (two borrowed 4-row chunks) captured in slot {1, 0}.
struct Borrowed {
  std::unique_ptr<testing::TestCache> t;
  RecordingListener listener;
  CheckpointId id = 0;
  SlotKey owner{1, 0};
};

std::unique_ptr<Borrowed> MakeBorrowed() {
  auto b = std::make_unique<Borrowed>();
  b->t = MakeCache({}, SimpleLayout(10, 100, 4));
  if (b->t == nullptr) return nullptr;
  CheckpointCache& cache = *b->t->cache;
  cache.SetListener(&b->listener);
  if (!cache.StartCold(b->owner, TestIds(), "A").ok()) return nullptr;
  if (!cache.ExtendSlot(b->owner, Tokens(10, 0)).ok()) return nullptr;
  absl::StatusOr<CaptureTicket> ticket = cache.BeginCapture(b->owner, CaptureKind::kEnd, "A", -1);
  if (!ticket.ok()) return nullptr;
  b->id = *cache.CommitCapture(ticket->id);
  return b;
}

TEST(ChunkResidencyTest, ASessionThatEndsFailsItsSpillsAndTheCheckpointGoes) {
  std::unique_ptr<Borrowed> b = MakeBorrowed();
  ASSERT_NE(b, nullptr);
  CheckpointCache& cache = *b->t->cache;
  absl::StatusOr<RestorePlan> plan = cache.Restore(b->id, {2, 0}, TestIds(), "B");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->awaiting_spills.size(), 1u);

  cache.FailSpillsOf(1, "session ended");

  EXPECT_THAT(cache.GetCheckpoint(b->id).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(cache.GetSpill(plan->awaiting_spills[0]).status(),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_EQ(b->listener.finished.size(), 1u);
  EXPECT_FALSE(b->listener.finished[0].ok);
  EXPECT_EQ(b->listener.left_ram, std::vector<CheckpointId>{b->id});
  EXPECT_EQ(b->listener.chunks_left.size(), 2u);  // Both regions can be freed.
  EXPECT_EQ(cache.ram_ledger().used(), 0);
}

TEST(ChunkResidencyTest, AChunkLeavingRamWhileSpillingKeepsItsRegionUntilTheSpillEnds) {
  std::unique_ptr<Borrowed> b = MakeBorrowed();
  ASSERT_NE(b, nullptr);
  CheckpointCache& cache = *b->t->cache;
  absl::StatusOr<std::vector<uint64_t>> spills = cache.StartCold(b->owner, TestIds(), "B");
  ASSERT_TRUE(spills.ok());
  ASSERT_EQ(spills->size(), 1u);

  CAIRN_ASSERT_OK(cache.Evict(b->id, "explicit"));

  EXPECT_TRUE(b->listener.chunks_left.empty());  // The daemon may still be writing them.
  absl::StatusOr<SpillInfo> spill = cache.GetSpill((*spills)[0]);
  ASSERT_TRUE(spill.ok());
  CAIRN_ASSERT_OK(cache.FinishSpill(spill->id, {spill->chunks[0].id, spill->chunks[1].id}, {}, ""));
  EXPECT_EQ(b->listener.chunks_left.size(), 2u);
  EXPECT_EQ(cache.chunk_count(), 0u);
}

TEST(ChunkResidencyTest, ADeclinedIdleSpillLeavesTheChunksBorrowedAndAnOverwriteWaitsForIt) {
  std::unique_ptr<Borrowed> b = MakeBorrowed();
  ASSERT_NE(b, nullptr);
  CheckpointCache& cache = *b->t->cache;
  const uint64_t idle = cache.SpillIdle(b->owner, 10);
  ASSERT_NE(idle, 0u);
  EXPECT_FALSE(cache.GetSpill(idle)->urgent);

  CAIRN_ASSERT_OK(cache.FinishSpill(idle, {}, {}, ""));  // Declined: the slot got busy.

  absl::StatusOr<CheckpointInfo> info = cache.GetCheckpoint(b->id);
  ASSERT_TRUE(info.ok());
  for (ChunkId c : info->chunks) EXPECT_EQ(cache.GetChunk(c)->residency, Residency::kBorrowed);
  // A second idle spill is under way when the slot is overwritten: the overwrite waits for it
  // and it becomes urgent (it may no longer be declined).
  const uint64_t again = cache.SpillIdle(b->owner, 10);
  absl::StatusOr<std::vector<uint64_t>> spills = cache.StartCold(b->owner, TestIds(), "B");
  ASSERT_TRUE(spills.ok());
  EXPECT_EQ(*spills, std::vector<uint64_t>{again});
  EXPECT_TRUE(cache.GetSpill(again)->urgent);
  CAIRN_ASSERT_OK(cache.FinishSpill(again, {}, {}, "rows overwritten"));
  EXPECT_THAT(cache.GetCheckpoint(b->id).status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ChunkResidencyTest, FinishingASpillChecksItsChunks) {
  std::unique_ptr<Borrowed> b = MakeBorrowed();
  ASSERT_NE(b, nullptr);
  CheckpointCache& cache = *b->t->cache;
  const uint64_t idle = cache.SpillIdle(b->owner, 10);

  EXPECT_THAT(cache.FinishSpill(idle, {999}, {}, ""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(cache.FinishSpill(idle + 1, {}, {}, ""), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(cache.GetSpill(idle).ok());  // Still outstanding after the bad reports.
}

TEST(ChunkResidencyTest, AnAbandonedRestoreLeavesTheSlotWithItsKeptRows) {
  std::unique_ptr<Borrowed> b = MakeBorrowed();
  ASSERT_NE(b, nullptr);
  CheckpointCache& cache = *b->t->cache;
  SlotKey other{2, 0};
  ASSERT_TRUE(cache.Restore(b->id, other, TestIds(), "B").ok());

  cache.AbandonRestore(other, 0);

  EXPECT_TRUE(cache.SlotTokens(other)->empty());
  absl::StatusOr<CheckpointInfo> info = cache.GetCheckpoint(b->id);
  ASSERT_TRUE(info.ok());
  for (ChunkId c : info->chunks) {
    EXPECT_EQ(cache.GetChunk(c)->holders, std::vector<SlotKey>{b->owner});
  }
}

}  // namespace
}  // namespace cairn::cache
