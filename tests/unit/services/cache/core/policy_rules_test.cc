// The policy rules docs/cache-policy.md measured on agent traces, each with a case where the
// seed's rule loses and the new one wins.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/cache/core/checkpoint_cache.h"
#include "services/cache/core/request_runner.h"
#include "services/cache/core/retention.h"
#include "tests/unit/services/cache/core/cache_test_util.h"

namespace cairn::cache {
namespace {

using testing::Concat;
using testing::MakeCache;
using testing::SimpleLayout;
using testing::TestIds;
using testing::Tokens;

// The byte arithmetic of the rules before charge_on_spill counts a checkpoint's rows when it
// is admitted; their tests keep that accounting.
CacheOptions AdmissionCharging() {
  CacheOptions options;
  options.retention.charge_on_spill = false;
  return options;
}

constexpr int64_t kPrivate = 10000;  // One private state.
constexpr int64_t kRowBytes = 10;    // Per token: 1,000 tokens of rows cost one private state.

// Prefills `tokens` past what `slot` holds (cold when `cold`) and captures there.
CheckpointId Capture(CheckpointCache& cache, int32_t slot, const std::vector<TokenId>& tokens,
                     const std::string& conv, bool cold) {
  SlotKey key{1, slot};
  if (cold) {
    EXPECT_TRUE(cache.StartCold(key, TestIds(), conv).ok());
  }
  EXPECT_TRUE(cache.ExtendSlot(key, tokens).ok());
  absl::StatusOr<CaptureTicket> ticket = cache.BeginCapture(key, CaptureKind::kStable, conv, -1);
  EXPECT_TRUE(ticket.ok()) << ticket.status();
  if (!ticket.ok()) return 0;
  return cache.CommitCapture(ticket->id).value_or(0);
}

TEST(RetentionPolicyTest, SupersededRanksAfterCheapAndBeforeIdle) {
  RankInput superseded{CaptureKind::kStable, 1000, 1000, 10, 100, /*conversation_idle=*/true,
                       /*superseded=*/true};
  RankInput cheap = superseded;
  cheap.private_bytes = 8001 * 1000;
  RetentionOptions seed;
  seed.superseded_first = false;

  EXPECT_EQ(RetentionPolicy().Classify(superseded), EvictionRank::kSuperseded);
  EXPECT_EQ(RetentionPolicy().Classify(cheap), EvictionRank::kCheap);
  EXPECT_EQ(RetentionPolicy(seed).Classify(superseded), EvictionRank::kIdle);
  EXPECT_LT(EvictionRank::kCheap, EvictionRank::kSuperseded);
  EXPECT_LT(EvictionRank::kSuperseded, EvictionRank::kIdle);
  EXPECT_EQ(EvictionRankName(EvictionRank::kSuperseded), "superseded");
}

TEST(RetentionPolicyTest, AutomaticCapFollowsTheBudgetAboveTheSeedsFloor) {
  RetentionPolicy automatic;
  RetentionOptions fixed;
  fixed.max_checkpoints = 7;
  const int64_t gib = int64_t{1} << 30;
  const int64_t private_bytes = 133000000;

  EXPECT_EQ(automatic.CheckpointCap(64 * gib, private_bytes), 64 * gib / private_bytes);
  EXPECT_EQ(automatic.CheckpointCap(4 * gib, private_bytes), 128);  // The floor.
  EXPECT_EQ(automatic.CheckpointCap(gib, 0), std::numeric_limits<int>::max());
  EXPECT_EQ(RetentionPolicy(fixed).CheckpointCap(64 * gib, private_bytes), 7);
}

// Conversation B holds one checkpoint; then A takes two turns, the second extending the
// first. A new conversation needs room for one more. The seed's rule evicts B (least recently
// used conversation), losing B's only state; superseded-first evicts A's first turn, which
// A's second turn already covers, and every conversation can still resume where it was.
void SupersededCase(bool superseded_first, CheckpointId* evicted, CheckpointId* b_id,
                    CheckpointId* a1_id) {
  CacheOptions options = AdmissionCharging();
  options.retention.superseded_first = superseded_first;
  // B, A1 and A2 (private + 1,000 new tokens of rows each) and 6,000 free.
  options.ram_bytes = 3 * 2 * kPrivate + 6000;
  auto t = testing::MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  *b_id = Capture(cache, 0, Tokens(1000, 100000), "B", /*cold=*/true);
  t->clock.Advance(absl::Seconds(1));
  *a1_id = Capture(cache, 1, Tokens(1000, 0), "A", /*cold=*/true);
  t->clock.Advance(absl::Seconds(1));
  CheckpointId a2 = Capture(cache, 1, Tokens(1000, 50000), "A", /*cold=*/false);
  ASSERT_NE(a2, 0u);
  ASSERT_EQ(cache.ram_ledger().free(), 6000);
  const uint64_t before = cache.events().logged();

  // Needs 15,000: A1's private state (10,000) or all of B (20,000) make room.
  ASSERT_NE(Capture(cache, 0, Tokens(500, 200000), "C", /*cold=*/true), 0u);

  std::vector<CheckpointId> gone;
  for (const Event& e : cache.events().recent()) {
    if (e.seq > before && e.type == EventType::kEvict) gone.push_back(e.checkpoint);
  }
  ASSERT_EQ(gone.size(), 1u);
  *evicted = gone.front();
  EXPECT_TRUE(cache.GetCheckpoint(a2)->in_ram);
}

TEST(CheckpointCachePolicyTest, SupersededCheckpointGoesBeforeAnotherConversationsOnlyState) {
  CheckpointId evicted = 0, b = 0, a1 = 0;
  SupersededCase(/*superseded_first=*/false, &evicted, &b, &a1);
  EXPECT_EQ(evicted, b) << "the seed's rule";
  SupersededCase(/*superseded_first=*/true, &evicted, &b, &a1);
  EXPECT_EQ(evicted, a1);
}

TEST(CheckpointCachePolicyTest, ACheckpointAnotherConversationBuildsOnIsNotSuperseded) {
  CacheOptions options = AdmissionCharging();
  options.ram_bytes = 3 * 2 * kPrivate + 1000;
  auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  // A's shared prefix, A's own continuation, and B's continuation of the shared prefix.
  CheckpointId shared = Capture(cache, 0, Tokens(1000, 0), "A", /*cold=*/true);
  CheckpointId a2 = Capture(cache, 0, Tokens(1000, 50000), "A", /*cold=*/false);
  t->clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(cache.Restore(shared, {1, 1}, TestIds(), "B").ok());
  CheckpointId b = Capture(cache, 1, Tokens(1000, 70000), "B", /*cold=*/false);
  ASSERT_NE(b, 0u);
  ASSERT_EQ(cache.ram_ledger().free(), 1000);

  // Needs 20,000: evicting the shared prefix would free only its private state (10,000), so
  // treating it as A's superseded state would lose it and A2 both.
  ASSERT_NE(Capture(cache, 0, Tokens(1000, 200000), "C", /*cold=*/true), 0u);

  EXPECT_TRUE(cache.GetCheckpoint(shared)->in_ram);
  EXPECT_FALSE(cache.GetCheckpoint(a2).ok());  // A's least recently used leaf.
  EXPECT_TRUE(cache.GetCheckpoint(b)->in_ram);
}

TEST(CheckpointCachePolicyTest, AutomaticCapAdmitsPastTheSeeds128WhenTheBudgetHoldsThem) {
  CacheOptions options = AdmissionCharging();
  options.ram_bytes = 300 * (kPrivate + 100 * kRowBytes);
  auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;

  for (int i = 0; i < 200; ++i) {
    ASSERT_NE(Capture(cache, 0, Tokens(100, 1000 * i), "c" + std::to_string(i), true), 0u);
  }

  EXPECT_EQ(cache.RamAccounting().checkpoints, 200);
  EXPECT_EQ(cache.retention().CheckpointCap(options.ram_bytes, kPrivate), 330);
}

TEST(RetentionPolicyTest, AdmissionRankIsTheCapturesOwnRank) {
  RetentionPolicy policy;
  RetentionOptions seed;
  seed.admission_by_rank = false;
  RankInput grid{CaptureKind::kGrid, 2048, 5000, 10, 100, /*conversation_idle=*/true, false};
  RankInput end{CaptureKind::kEnd, 5005, 5000, 10, 100, false, false};
  RankInput stable{CaptureKind::kStable, 5000, 5000, 10, 100, /*conversation_idle=*/true, false};

  EXPECT_EQ(policy.AdmissionRank(grid), EvictionRank::kSuperseded);  // The stable follows.
  EXPECT_EQ(policy.AdmissionRank(end), EvictionRank::kRetryCopy);
  EXPECT_EQ(policy.AdmissionRank(stable), EvictionRank::kReused);  // In use, so not idle.
  EXPECT_EQ(RetentionPolicy(seed).AdmissionRank(end), EvictionRank::kReused);
}

// B holds one stable checkpoint; A then captures a prompt-end retry copy that does not fit next
// to it. The seed's rule evicts B's only state for A's retry copy; admission by rank rejects
// the retry copy (with a reject event naming the rank) and keeps B.
TEST(CheckpointCachePolicyTest, ARetryCopyDoesNotEvictAnotherConversationsState) {
  for (bool by_rank : {false, true}) {
    CacheOptions options = AdmissionCharging();
    options.retention.admission_by_rank = by_rank;
    options.ram_bytes = 2 * 2 * kPrivate + 5000;
    auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
    ASSERT_NE(t, nullptr);
    CheckpointCache& cache = *t->cache;
    CheckpointId b = Capture(cache, 0, Tokens(1000, 100000), "B", /*cold=*/true);
    CheckpointId a = Capture(cache, 1, Tokens(1000, 0), "A", /*cold=*/true);
    ASSERT_NE(a, 0u);
    ASSERT_TRUE(cache.ExtendSlot({1, 1}, Tokens(5, 50000)).ok());

    absl::StatusOr<CaptureTicket> retry =
        cache.BeginCapture({1, 1}, CaptureKind::kEnd, "A", /*stable_boundary=*/1000);

    if (by_rank) {
      EXPECT_FALSE(retry.ok());
      EXPECT_TRUE(cache.GetCheckpoint(b)->in_ram);
      ASSERT_FALSE(cache.events().recent().empty());
      EXPECT_EQ(cache.events().recent().back().type, EventType::kReject);
      EXPECT_THAT(cache.events().recent().back().reason, ::testing::HasSubstr("retry-copy"));
    } else {
      EXPECT_TRUE(retry.ok()) << "the seed's rule";
      EXPECT_FALSE(cache.GetCheckpoint(b).ok());
    }
  }
}

// After a compaction (or an edit) A's new history leaves its old branch: the old branch is
// superseded and goes before B's state, though A stays the most recently used conversation.
TEST(CheckpointCachePolicyTest, AnOldBranchOfAnActiveConversationIsSuperseded) {
  CacheOptions options = AdmissionCharging();
  options.ram_bytes = 3 * 2 * kPrivate + 1000;
  auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  CheckpointId b = Capture(cache, 0, Tokens(1000, 100000), "B", /*cold=*/true);
  t->clock.Advance(absl::Seconds(1));
  CheckpointId old_branch = Capture(cache, 1, Tokens(1000, 0), "A", /*cold=*/true);
  t->clock.Advance(absl::Seconds(1));
  CheckpointId compacted = Capture(cache, 1, Tokens(1000, 300000), "A", /*cold=*/true);
  ASSERT_NE(compacted, 0u);

  ASSERT_NE(Capture(cache, 0, Tokens(1000, 200000), "C", /*cold=*/true), 0u);

  EXPECT_FALSE(cache.GetCheckpoint(old_branch).ok());
  EXPECT_TRUE(cache.GetCheckpoint(b)->in_ram);
  EXPECT_TRUE(cache.GetCheckpoint(compacted)->in_ram);
}

TEST(RetentionPolicyTest, ShallowerFirstInsideTheIdleAndReusedRanksOnly) {
  absl::Time t0 = absl::UnixEpoch();
  auto item = [&](CheckpointId id, EvictionRank rank, int seconds, int64_t depth) {
    RetentionItem i;
    i.id = id;
    i.rank = rank;
    i.last_use = t0 + absl::Seconds(seconds);
    i.depth = depth;
    return i;
  };
  std::vector<RetentionItem> items = {
      item(1, EvictionRank::kIdle, 0, 30000),     item(2, EvictionRank::kIdle, 5, 8000),
      item(3, EvictionRank::kReused, 9, 9000),    item(4, EvictionRank::kReused, 1, 20000),
      item(5, EvictionRank::kSuperseded, 9, 100), item(6, EvictionRank::kSuperseded, 1, 9000)};
  RetentionOptions seed;
  seed.shallow_first = false;

  EXPECT_EQ(RetentionPolicy().EvictionOrder(items), (std::vector<CheckpointId>{6, 5, 2, 1, 3, 4}));
  EXPECT_EQ(RetentionPolicy(seed).EvictionOrder(items),
            (std::vector<CheckpointId>{6, 5, 1, 2, 4, 3}));
}

TEST(RetentionPolicyTest, ShallowBySavedOrdersByTheTokensPastAnotherConversationsCheckpoint) {
  auto item = [](CheckpointId id, int64_t depth, int64_t own_tokens) {
    RetentionItem i;
    i.id = id;
    i.rank = EvictionRank::kIdle;
    i.depth = depth;
    i.own_tokens = own_tokens;
    return i;
  };
  // 1: a parent's state at 30,000 tokens past the 8,000-token preamble; 2: a subagent forked
  // from it that added 2,000; 3: another conversation's 12,000-token state.
  std::vector<RetentionItem> items = {item(1, 30000, 22000), item(2, 32000, 2000),
                                      item(3, 12000, 4000)};
  RetentionOptions saved;
  saved.shallow_by_saved = true;

  EXPECT_EQ(RetentionPolicy().EvictionOrder(items), (std::vector<CheckpointId>{3, 1, 2}));
  EXPECT_EQ(RetentionPolicy(saved).EvictionOrder(items), (std::vector<CheckpointId>{2, 3, 1}));
}

TEST(RetentionPolicyTest, OnlyPointsTheClientResendsSupersede) {
  RetentionPolicy policy;
  RankInput stable{CaptureKind::kStable, 2000, 2000, 10, 100, false, false};
  RankInput end_past_stable{CaptureKind::kEnd, 2005, 2000, 10, 100, false, false};
  RankInput frontier{CaptureKind::kReused, 2300, 2000, 10, 100, false, false};
  RankInput end_unknown_stable{CaptureKind::kEnd, 2005, -1, 10, 100, false, false};

  EXPECT_TRUE(policy.Supersedes(stable));
  EXPECT_FALSE(policy.Supersedes(end_past_stable));
  EXPECT_FALSE(policy.Supersedes(frontier));
  EXPECT_TRUE(policy.Supersedes(end_unknown_stable));
  // A preserved frontier past its request's stable boundary ranks with superseded ones (a
  // retry copy under the seed's ranks).
  EXPECT_EQ(policy.Classify(frontier), EvictionRank::kSuperseded);
  RetentionOptions seed;
  seed.frontier_with_superseded = false;
  EXPECT_EQ(RetentionPolicy(seed).Classify(frontier), EvictionRank::kRetryCopy);
}

// F: the frontier of conversation B (prompt 1,000 + answer 300), preserved before A took its
// slot; E: A's prompt-end retry copy, 5 header tokens past A's stable boundary. One must go.
// As retry copies both, the older (F) would go; F saves B 300 tokens, E saves A 5.
TEST(CheckpointCachePolicyTest, APreservedFrontierOutlivesARetryCopy) {
  for (bool with_superseded : {false, true}) {
    CacheOptions options = AdmissionCharging();
    options.retention.frontier_with_superseded = with_superseded;
    options.ram_bytes = 1300 * kRowBytes + 1005 * kRowBytes + 2 * kPrivate + 5000;
    auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
    ASSERT_NE(t, nullptr);
    CheckpointCache& cache = *t->cache;
    ASSERT_TRUE(cache.StartCold({1, 0}, TestIds(), "B").ok());
    ASSERT_TRUE(cache.ExtendSlot({1, 0}, Tokens(1300, 100000)).ok());
    absl::StatusOr<CaptureTicket> f = cache.BeginCapture({1, 0}, CaptureKind::kReused, "B", 1000);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(cache.CommitCapture(f->id).ok());
    t->clock.Advance(absl::Seconds(1));
    ASSERT_TRUE(cache.StartCold({1, 1}, TestIds(), "A").ok());
    ASSERT_TRUE(cache.ExtendSlot({1, 1}, Tokens(1005, 0)).ok());
    absl::StatusOr<CaptureTicket> e = cache.BeginCapture({1, 1}, CaptureKind::kEnd, "A", 1000);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE(cache.CommitCapture(e->id).ok());
    t->clock.Advance(absl::Seconds(1));

    ASSERT_NE(Capture(cache, 0, Tokens(500, 200000), "C", /*cold=*/true), 0u);

    EXPECT_EQ(cache.GetCheckpoint(f->id).ok(), with_superseded);
    EXPECT_EQ(cache.GetCheckpoint(e->id).ok(), !with_superseded);
  }
}

// One slot. A's first turn answers 300 tokens; B takes the slot; A's second turn resends its
// prompt and the answer. Without preservation A resumes at its prompt end and recomputes the
// answer; with it, A resumes after the answer.
int64_t SecondTurnRestoreDepth(bool preserve_frontier) {
  CacheOptions options = AdmissionCharging();
  options.planner.preserve_frontier = preserve_frontier;
  auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  EXPECT_NE(t, nullptr);
  if (t == nullptr) return -1;
  RequestRunner runner(t->cache.get(), 1);
  std::vector<TokenId> a1 = Tokens(3000, 0);
  std::vector<TokenId> answer = Tokens(300, 50000);
  std::vector<TokenId> a2 = Concat(Concat(a1, answer), Tokens(500, 60000));
  std::vector<TokenId> b1 = Tokens(2000, 100000);
  ServeRequest request{TestIds(), "A", a1, 3000, answer};
  EXPECT_TRUE(runner.Serve(request).ok());
  request = ServeRequest{TestIds(), "B", b1, 2000, {}};
  absl::StatusOr<ServeOutcome> b = runner.Serve(request);
  EXPECT_TRUE(b.ok());
  if (!b.ok()) return -1;
  EXPECT_EQ(b->preserved_frontier.admitted, preserve_frontier);
  request = ServeRequest{TestIds(), "A", a2, 3300, {}};
  absl::StatusOr<ServeOutcome> second = runner.Serve(request);
  EXPECT_TRUE(second.ok());
  if (!second.ok()) return -1;
  EXPECT_EQ(second->used.tier, Tier::kRam);
  return second->used.depth;
}

TEST(RequestRunnerPolicyTest, FrontierIsPreservedWhenAnotherConversationTakesTheSlot) {
  EXPECT_EQ(SecondTurnRestoreDepth(/*preserve_frontier=*/false), 3000) << "the seed's rule";
  EXPECT_EQ(SecondTurnRestoreDepth(/*preserve_frontier=*/true), 3300);
}

TEST(RequestRunnerPolicyTest, PreservingAFrontierNeverEvictsTheCheckpointAboutToBeRestored) {
  CacheOptions options = AdmissionCharging();
  // Room for A's prompt end (40,000), B's (12,000) and 5,000 more: B's frontier (11,000) needs
  // an eviction, and A's checkpoint, least recently used, would be the victim.
  options.ram_bytes = 40000 + 12000 + 5000;
  options.planner.max_grid_points = 0;
  auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  ASSERT_NE(t, nullptr);
  RequestRunner runner(t->cache.get(), 1);
  std::vector<TokenId> a1 = Tokens(3000, 0);
  ServeRequest request{TestIds(), "A", a1, -1, {}};
  ASSERT_TRUE(runner.Serve(request).ok());
  std::vector<TokenId> b1 = Tokens(200, 100000);
  std::vector<TokenId> b_answer = Tokens(100, 110000);
  request = ServeRequest{TestIds(), "B", b1, -1, b_answer};
  ASSERT_TRUE(runner.Serve(request).ok());
  ASSERT_EQ(t->cache->ram_ledger().free(), 5000);

  // A again: B's frontier is captured, but A's checkpoint is pinned while it is.
  std::vector<TokenId> a2 = Concat(a1, Tokens(10, 70000));
  request = ServeRequest{TestIds(), "A", a2, -1, {}};
  absl::StatusOr<ServeOutcome> again = runner.Serve(request);

  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->used.tier, Tier::kRam);
  EXPECT_EQ(again->used.depth, 3000);
  EXPECT_TRUE(again->preserved_frontier.admitted);
  EXPECT_LE(t->cache->ram_ledger().used(), options.ram_bytes);
}

// A borrowed row costs the arena nothing until its slot is overwritten (charge_on_spill):
// capturing A charges only its private state; the overwrite charges A's rows.
int64_t UsedAfterCaptureThenOverwrite(bool charge_on_spill, int64_t* used_after_capture) {
  CacheOptions options;
  options.retention.charge_on_spill = charge_on_spill;
  auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  EXPECT_NE(t, nullptr);
  if (t == nullptr) return -1;
  CheckpointCache& cache = *t->cache;
  EXPECT_NE(Capture(cache, 0, Tokens(1000, 0), "A", /*cold=*/true), 0u);
  *used_after_capture = cache.ram_ledger().used();
  absl::StatusOr<std::vector<uint64_t>> spills = cache.StartCold({1, 0}, TestIds(), "B");
  EXPECT_TRUE(spills.ok());
  EXPECT_EQ(spills.value_or(std::vector<uint64_t>{}).size(), 1u);
  return cache.ram_ledger().used();
}

TEST(CheckpointCachePolicyTest, BorrowedRowsAreChargedWhenSpilledNotWhenCaptured) {
  int64_t at_capture = 0;
  EXPECT_EQ(UsedAfterCaptureThenOverwrite(/*charge_on_spill=*/false, &at_capture),
            kPrivate + 1000 * kRowBytes);
  EXPECT_EQ(at_capture, kPrivate + 1000 * kRowBytes) << "the seed's rule";

  EXPECT_EQ(UsedAfterCaptureThenOverwrite(/*charge_on_spill=*/true, &at_capture),
            kPrivate + 1000 * kRowBytes);
  EXPECT_EQ(at_capture, kPrivate);
}

TEST(CheckpointCachePolicyTest, ASpillMakesRoomByRankAndTheBudgetHolds) {
  CacheOptions options;
  options.retention.charge_on_spill = true;
  options.ram_bytes = 2 * kPrivate + 5000;
  auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  const CheckpointId a = Capture(cache, 0, Tokens(1000, 0), "A", /*cold=*/true);
  t->clock.Advance(absl::Seconds(1));
  const CheckpointId b = Capture(cache, 1, Tokens(1000, 50000), "B", /*cold=*/true);
  ASSERT_NE(b, 0u);
  const uint64_t before = cache.events().logged();

  // C takes slot 1: B's rows (10,000) need room (5,000 free); A, least recently used, goes.
  ASSERT_TRUE(cache.StartCold({1, 1}, TestIds(), "C").ok());

  EXPECT_FALSE(cache.InRam(a));
  EXPECT_TRUE(cache.InRam(b));
  EXPECT_EQ(cache.ram_ledger().used(), kPrivate + 1000 * kRowBytes);
  bool logged = false;
  for (const Event& e : cache.events().recent()) {
    if (e.seq > before && e.type == EventType::kEvict && e.checkpoint == a) {
      logged = e.reason.find("room for a spill") != std::string::npos;
    }
  }
  EXPECT_TRUE(logged);
}

// Serves `requests` in order and returns the last outcome.
ServeOutcome ServeAll(RequestRunner& runner, const std::vector<ServeRequest>& requests) {
  ServeOutcome last;
  for (const ServeRequest& r : requests) {
    absl::StatusOr<ServeOutcome> out = runner.Serve(r);
    EXPECT_TRUE(out.ok()) << out.status();
    if (out.ok()) last = *out;
  }
  return last;
}

// Two slots: A in slot 0, B in slot 1, A continues in slot 0, then A edits its last message.
// The least recently used slot is B's; the slot holding A's rows is slot 0.
ServeOutcome EditedTurn(bool restore_in_holding_slot) {
  CacheOptions options;
  options.planner.restore_in_holding_slot = restore_in_holding_slot;
  auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  EXPECT_NE(t, nullptr);
  if (t == nullptr) return {};
  RequestRunner runner(t->cache.get(), 2);
  std::vector<TokenId> a1 = Tokens(3000, 0);
  std::vector<TokenId> a2 = Concat(a1, Tokens(500, 10000));
  std::vector<TokenId> edited = Concat(a1, Tokens(600, 20000));
  std::vector<TokenId> b = Tokens(2000, 100000);  // Named: a request's tokens are a view.
  std::vector<ServeRequest> requests = {{TestIds(), "A", a1, 3000, {}},
                                        {TestIds(), "B", b, 2000, {}},
                                        {TestIds(), "A", a2, 3000, {}},
                                        {TestIds(), "A", edited, 3000, {}}};
  return ServeAll(runner, requests);
}

TEST(RequestRunnerPolicyTest, ARestoreRunsInTheSlotThatHoldsItsRows) {
  ServeOutcome lru = EditedTurn(/*restore_in_holding_slot=*/false);
  EXPECT_EQ(lru.used.tier, Tier::kRam);
  EXPECT_EQ(lru.slot, 1) << "the seed's rule: least recently used, B's";
  EXPECT_EQ(lru.restore.kept_rows, 0);

  ServeOutcome holding = EditedTurn(/*restore_in_holding_slot=*/true);
  EXPECT_EQ(holding.used.tier, Tier::kRam);
  EXPECT_EQ(holding.used.depth, 3000);
  EXPECT_EQ(holding.slot, 0);
  EXPECT_EQ(holding.restore.kept_rows, 3000);
}

TEST(RetentionPolicyTest, ValuePerByteOrdersInsideARankAndAcrossRanksWhenAsked) {
  auto item = [](CheckpointId id, EvictionRank rank, int64_t saved, int64_t freed) {
    RetentionItem i;
    i.id = id;
    i.rank = rank;
    i.saved_tokens = saved;
    i.freed_bytes = freed;
    return i;
  };
  // 1: 10 tokens per kB; 2: 1; 3: 5; 4 (superseded): 20.
  std::vector<RetentionItem> items = {
      item(1, EvictionRank::kIdle, 10000, 1000), item(2, EvictionRank::kIdle, 1000, 1000),
      item(3, EvictionRank::kReused, 5000, 1000), item(4, EvictionRank::kSuperseded, 20000, 1000)};
  RetentionOptions within;
  within.value_per_byte = true;
  RetentionOptions across = within;
  across.value_across_ranks = true;  // Superseded weighs 0.1, idle 0.5, reused 1.

  EXPECT_EQ(RetentionPolicy(within).EvictionOrder(items), (std::vector<CheckpointId>{4, 2, 1, 3}));
  EXPECT_EQ(RetentionPolicy(across).EvictionOrder(items), (std::vector<CheckpointId>{2, 4, 1, 3}));
}

TEST(RetentionPolicyTest, EditReachCoversRecentMessageBoundariesOnly) {
  RetentionOptions options;
  options.edit_reach_turns = 2;
  RetentionPolicy reach(options);
  RankInput stable{CaptureKind::kStable, 2000, 2000, 10, 1, false, /*superseded=*/true};
  stable.turns_back = 2;
  RankInput grid = stable;
  grid.kind = CaptureKind::kGrid;
  RankInput retry_copy = stable;
  retry_copy.kind = CaptureKind::kEnd;
  retry_copy.depth = 2005;
  RankInput old = stable;
  old.turns_back = 3;

  EXPECT_TRUE(reach.InEditReach(stable));
  EXPECT_FALSE(reach.InEditReach(grid)) << "no edit resumes inside a message";
  EXPECT_FALSE(reach.InEditReach(retry_copy));
  EXPECT_FALSE(reach.InEditReach(old));
  RetentionOptions off;
  off.edit_reach_turns = 0;
  EXPECT_FALSE(RetentionPolicy(off).InEditReach(stable));
}

TEST(RetentionPolicyTest, WithinEditReachTheCheapestLossGoesLastAmongSuperseded) {
  auto item = [](CheckpointId id, bool reach, int64_t saved, bool frontier) {
    RetentionItem i;
    i.id = id;
    i.rank = EvictionRank::kSuperseded;
    i.edit_reach = reach;
    i.saved_tokens = saved;
    i.frontier = frontier;
    return i;
  };
  // 1: within reach, an edit would lose 1,000 tokens (value 50); 2: outside reach; 3: within
  // reach, 100 tokens (5); 4: the latest preserved frontier, 300 answer tokens (150).
  std::vector<RetentionItem> items = {item(1, true, 1000, false), item(2, false, 5000, false),
                                      item(3, true, 100, false), item(4, true, 300, true)};
  RetentionOptions options;
  options.edit_reach_turns = 2;

  EXPECT_EQ(RetentionPolicy(options).EvictionOrder(items), (std::vector<CheckpointId>{2, 3, 1, 4}));
}

// A's turns leave stable checkpoints at 1000, 2000, 2300 and 3000; then B needs the room of
// two private states. Without edit reach the oldest superseded go (1000, 2000); with it the
// one outside reach (1000) and the one whose loss costs an edit least (2300, 300 tokens past
// 2000). An edit of A's turn after 2000 then resumes at 2000 instead of from scratch.
int64_t EditResumesAt(int edit_reach_turns) {
  CacheOptions options = AdmissionCharging();
  options.retention.edit_reach_turns = edit_reach_turns;
  options.ram_bytes = 3000 * kRowBytes + 4 * kPrivate + 500 * kRowBytes + kPrivate - 2 * kPrivate;
  auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  EXPECT_NE(t, nullptr);
  if (t == nullptr) return -1;
  CheckpointCache& cache = *t->cache;
  const std::vector<TokenId> a = Tokens(3000, 0);
  EXPECT_TRUE(cache.StartCold({1, 0}, TestIds(), "A").ok());
  int64_t at = 0;
  for (int64_t depth : {1000, 2000, 2300, 3000}) {
    EXPECT_TRUE(cache.ExtendSlot({1, 0}, absl::MakeConstSpan(a).subspan(at, depth - at)).ok());
    at = depth;
    absl::StatusOr<CaptureTicket> ticket =
        cache.BeginCapture({1, 0}, CaptureKind::kStable, "A", depth);
    EXPECT_TRUE(ticket.ok()) << ticket.status();
    if (ticket.ok()) {
      EXPECT_TRUE(cache.CommitCapture(ticket->id).ok());
    }
    t->clock.Advance(absl::Seconds(1));
  }
  EXPECT_NE(Capture(cache, 1, Tokens(500, 100000), "B", /*cold=*/true), 0u);
  const std::vector<TokenId> edited = Concat(Tokens(2050, 0), Tokens(400, 200000));
  absl::StatusOr<LookupResult> found =
      cache.Lookup(LookupRequest{TestIds(), edited, -1, /*daemon_session=*/2});
  EXPECT_TRUE(found.ok()) << found.status();
  if (!found.ok()) return -1;
  return found->best.tier == Tier::kRam ? found->best.depth : 0;
}

TEST(CheckpointCachePolicyTest, EditReachKeepsAnEarlierTurnsBoundary) {
  EXPECT_EQ(EditResumesAt(0), 0) << "without edit reach";
  EXPECT_EQ(EditResumesAt(2), 2000);
}

// Slot 0 holds B (a shared 1000-token preamble, then 500 rows of its own, borrowed); slot 1
// holds A, restored from the arena, with 100 rows of its own. C shares only the preamble with
// both. The first holding slot is B's, whose overwrite spills 500 rows; A's spills 100.
ServeOutcome PreambleOnlyRequest(bool holding_slot_cheapest) {
  CacheOptions options;
  options.planner.holding_slot_cheapest = holding_slot_cheapest;
  options.planner.max_grid_points = 0;
  auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  EXPECT_NE(t, nullptr);
  if (t == nullptr) return {};
  RequestRunner runner(t->cache.get(), 2);
  const std::vector<TokenId> preamble = Tokens(1000, 0);
  const std::vector<TokenId> a1 = Concat(preamble, Tokens(3000, 10000));
  const std::vector<TokenId> a2 = Concat(a1, Tokens(100, 20000));
  const std::vector<TokenId> b = Concat(preamble, Tokens(500, 30000));
  const std::vector<TokenId> c = Concat(preamble, Tokens(200, 40000));
  std::vector<ServeRequest> requests = {{TestIds(), "A", a1, 1000, {}},
                                        {TestIds(), "B", b, 1000, {}},
                                        {TestIds(), "A", a2, 4000, {}},
                                        {TestIds(), "C", c, 1000, {}}};
  return ServeAll(runner, requests);
}

TEST(RequestRunnerPolicyTest, AmongSlotsHoldingThePreambleTheCheapestToOverwriteIsTaken) {
  ServeOutcome first = PreambleOnlyRequest(/*holding_slot_cheapest=*/false);
  EXPECT_EQ(first.used.depth, 1000);
  EXPECT_EQ(first.slot, 0);
  ServeOutcome cheapest = PreambleOnlyRequest(/*holding_slot_cheapest=*/true);
  EXPECT_EQ(cheapest.used.depth, 1000);
  EXPECT_EQ(cheapest.slot, 1);
}

// Slot 0 holds A's 3000 computed rows, slot 1 B's 500; C shares nothing. The least recently
// used slot is A's; overwriting B's spills less.
TEST(RequestRunnerPolicyTest, CheapestSlotSpillsLessThanTheLeastRecentlyUsed) {
  for (bool cheapest : {false, true}) {
    CacheOptions options;
    options.planner.cheapest_slot = cheapest;
    options.planner.max_grid_points = 0;
    auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
    ASSERT_NE(t, nullptr);
    RequestRunner runner(t->cache.get(), 2);
    const std::vector<TokenId> a = Tokens(3000, 0);
    const std::vector<TokenId> b = Tokens(500, 100000);
    const std::vector<TokenId> c_tokens = Tokens(200, 200000);
    ASSERT_TRUE(runner.Serve({TestIds(), "A", a, 3000, {}}).ok());
    ASSERT_TRUE(runner.Serve({TestIds(), "B", b, 500, {}}).ok());
    EXPECT_EQ(t->cache->SlotSpillBytes({1, 0}).value_or(-1), 3000 * kRowBytes);
    EXPECT_EQ(t->cache->SlotSpillBytes({1, 1}).value_or(-1), 500 * kRowBytes);

    absl::StatusOr<ServeOutcome> c = runner.Serve({TestIds(), "C", c_tokens, 200, {}});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->slot, cheapest ? 1 : 0);
  }
}

TEST(RetentionPolicyTest, OverdueConversationsGoEarlierInsideTheIdleAndReusedRanksOnly) {
  // Ids 1 to 6: two idle, two reused, two superseded; the second of each pair overdue in the
  // idle and reused ranks and the first in the superseded one, where the rule does not apply.
  const EvictionRank ranks[] = {EvictionRank::kIdle,       EvictionRank::kIdle,
                                EvictionRank::kReused,     EvictionRank::kReused,
                                EvictionRank::kSuperseded, EvictionRank::kSuperseded};
  const int64_t depths[] = {8000, 12000, 9000, 20000, 9000, 100};
  const bool overdue[] = {false, true, false, true, true, false};
  std::vector<RetentionItem> items(6);
  for (size_t k = 0; k < items.size(); ++k) {
    items[k].id = k + 1;
    items[k].rank = ranks[k];
    items[k].depth = depths[k];
    items[k].overdue = overdue[k];
  }
  RetentionOptions weighed;  // Overdue depth counts half: 12,000 as 6,000, 20,000 as 10,000.
  weighed.overdue_gaps = 2;
  weighed.overdue_depth_weight = 0.5;
  RetentionOptions first = weighed;
  first.overdue_depth_weight = 0;
  RetentionOptions off;
  off.overdue_gaps = 0;

  EXPECT_EQ(RetentionPolicy(weighed).EvictionOrder(items),
            (std::vector<CheckpointId>{5, 6, 2, 1, 3, 4}));
  EXPECT_EQ(RetentionPolicy(first).EvictionOrder(items),
            (std::vector<CheckpointId>{5, 6, 2, 1, 4, 3}));
  EXPECT_EQ(RetentionPolicy(off).EvictionOrder(items),
            (std::vector<CheckpointId>{5, 6, 1, 2, 3, 4}));
}

// D takes three turns a second apart and stops; S takes two, ten seconds apart; a new
// conversation then needs more room than S's superseded first turn frees, and one of the
// latest states (D's, 3,000 tokens, or S's, 2,100; both ranked reused) must go too. Shallow
// first keeps D's deeper state; D, silent for twelve of its one-second gaps, is overdue, so the
// rule evicts D's instead (its depth counted at most at half, 1,500) and the event says why.
// Returns that second eviction.
// `d_gap` spaces D's turns (zero: all at once, so D has no rhythm to be late for).
CheckpointId OverdueVictim(double overdue_gaps, double overdue_depth_weight, CheckpointId* d3,
                           CheckpointId* s2, std::string* reason,
                           absl::Duration d_gap = absl::Seconds(1)) {
  CacheOptions options = AdmissionCharging();
  // D3 (3,000 rows, 40,000 with its private state), S1 (30,000) and S2 (11,000) fill it.
  options.ram_bytes = 81000;
  options.retention.overdue_gaps = overdue_gaps;
  options.retention.overdue_depth_weight = overdue_depth_weight;
  auto t = MakeCache(options, SimpleLayout(kRowBytes, kPrivate, /*chunk_rows=*/100));
  CheckpointCache& cache = *t->cache;
  CheckpointId d = Capture(cache, 0, Tokens(1000, 0), "D", /*cold=*/true);
  for (int turn = 1; turn <= 2; ++turn) {
    t->clock.Advance(d_gap);
    EXPECT_TRUE(cache.Restore(d, {1, 0}, TestIds(), "D").ok());
    d = Capture(cache, 0, Tokens(1000, 1000 * turn), "D", /*cold=*/false);
  }
  *d3 = d;
  t->clock.Advance(absl::Seconds(1));
  CheckpointId s = Capture(cache, 1, Tokens(2000, 100000), "S", /*cold=*/true);
  t->clock.Advance(absl::Seconds(10));
  EXPECT_TRUE(cache.Restore(s, {1, 1}, TestIds(), "S").ok());
  *s2 = Capture(cache, 1, Tokens(100, 102000), "S", /*cold=*/false);
  EXPECT_TRUE(cache.GetCheckpoint(*d3)->in_ram);
  EXPECT_EQ(cache.ram_ledger().free(), 0);
  const uint64_t before = cache.events().recent().back().seq;

  t->clock.Advance(absl::Seconds(1));
  EXPECT_NE(Capture(cache, 0, Tokens(500, 200000), "N", /*cold=*/true), 0u);

  std::vector<Event> evicted;
  for (const Event& e : cache.events().recent()) {
    if (e.seq > before && e.type == EventType::kEvict) evicted.push_back(e);
  }
  EXPECT_EQ(evicted.size(), 2u);
  if (evicted.size() != 2) return 0;
  EXPECT_EQ(evicted[0].checkpoint, s);  // S's first turn, superseded.
  *reason = evicted[1].reason;
  return evicted[1].checkpoint;
}

TEST(CheckpointCachePolicyTest, AnOverdueConversationsDeepStateGoesBeforeAnActiveOnesShallowOne) {
  CheckpointId d3 = 0, s2 = 0;
  std::string reason;
  EXPECT_EQ(OverdueVictim(/*overdue_gaps=*/0, 0.5, &d3, &s2, &reason), s2) << "shallow first";
  EXPECT_EQ(reason, "reused");
  EXPECT_EQ(OverdueVictim(/*overdue_gaps=*/2, 0.5, &d3, &s2, &reason), d3);
  EXPECT_EQ(reason, "overdue conversation, reused");
  EXPECT_EQ(OverdueVictim(/*overdue_gaps=*/2, 0, &d3, &s2, &reason), d3);
}

TEST(CheckpointCachePolicyTest, AConversationWhoseRequestsAllCameAtOnceIsNeverOverdue) {
  CheckpointId d3 = 0, s2 = 0;
  std::string reason;

  const CheckpointId victim = OverdueVictim(/*overdue_gaps=*/2, 0.5, &d3, &s2, &reason,
                                            /*d_gap=*/absl::ZeroDuration());

  EXPECT_EQ(victim, s2) << "D's mean gap is zero: shallow first, as without the rule";
  EXPECT_EQ(reason, "reused");
}

}  // namespace
}  // namespace cairn::cache
