// The seed's worked examples (the reference design Cairn implements; docs/architecture.md), one
// named test each.

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/cache/core/capture_planner.h"
#include "services/cache/core/checkpoint_cache.h"
#include "services/cache/core/request_runner.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/cache/core/cache_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::Concat;
using ::cairn::cache::testing::MakeCache;
using ::cairn::cache::testing::SimpleLayout;
using ::cairn::cache::testing::TestIds;
using ::cairn::cache::testing::Tokens;

constexpr int64_t kGiB = int64_t{1} << 30;

std::vector<int64_t> Positions(const std::vector<CaptureOutcome>& captures) {
  std::vector<int64_t> out;
  for (const CaptureOutcome& c : captures) out.push_back(c.pos);
  return out;
}

const CaptureOutcome* Find(const std::vector<CaptureOutcome>& captures, int64_t pos) {
  for (const CaptureOutcome& c : captures) {
    if (c.pos == pos) return &c;
  }
  return nullptr;
}

ServeRequest Request(const std::string& conv, const std::vector<TokenId>& tokens,
                     int64_t stable = -1) {
  ServeRequest r;
  r.identities = TestIds();
  r.conversation = conv;
  r.tokens = tokens;
  r.stable_boundary = stable;
  return r;
}

// Cold-prefills `tokens` in `slot` and captures once at the end.
CheckpointId CaptureAt(CheckpointCache& cache, int32_t slot, const std::vector<TokenId>& tokens,
                       CaptureKind kind, const std::string& conv, int64_t stable = -1) {
  SlotKey key{1, slot};
  EXPECT_TRUE(cache.StartCold(key, TestIds(), conv).ok());
  EXPECT_TRUE(cache.ExtendSlot(key, tokens).ok());
  absl::StatusOr<CaptureTicket> ticket = cache.BeginCapture(key, kind, conv, stable);
  EXPECT_TRUE(ticket.ok()) << ticket.status();
  if (!ticket.ok()) return 0;
  absl::StatusOr<CheckpointId> id = cache.CommitCapture(ticket->id);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.value_or(0);
}

// The seed's accounting: a checkpoint's borrowed rows are charged when it is admitted, not
// when they are spilled (RetentionOptions::charge_on_spill, docs/cache-policy.md). Figures 9,
// 11 and 14 and section 4's storage numbers count rows that way.
CacheOptions SeedAccounting() {
  CacheOptions options;
  options.retention.charge_on_spill = false;
  return options;
}

TEST(WorkedExamplesTest, Figure3EditAt7001Restores6144AndRecomputes856) {
  auto t = MakeCache({}, SimpleLayout(100, 1000));
  ASSERT_NE(t, nullptr);
  RequestRunner runner(t->cache.get(), 1);
  std::vector<TokenId> a = Tokens(8192, 0);
  absl::StatusOr<ServeOutcome> first = runner.Serve(Request("A", a));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(Positions(first->captures), (std::vector<int64_t>{2048, 4096, 6144, 8192}));
  std::vector<TokenId> edited = Concat(Tokens(7000, 0), Tokens(1192, 1000000));

  absl::StatusOr<ServeOutcome> second = runner.Serve(Request("A", edited));

  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->used.tier, Tier::kRam);
  EXPECT_EQ(second->used.depth, 6144);
  EXPECT_EQ(second->shared_prefix, 7000);
  EXPECT_EQ(second->prefilled, 2048);
  EXPECT_EQ(second->shared_prefix - second->used.depth, 856);  // Unchanged, recomputed.
  EXPECT_EQ(8192 - second->shared_prefix, 1192);               // Edited.
}

TEST(WorkedExamplesTest, Figure6ThreeConversationsOnePrefixTwoComputationsOneCopy) {
  auto t = MakeCache({}, SimpleLayout(100, 1000));  // 256-row chunks, as Flash-Next.
  ASSERT_NE(t, nullptr);
  RequestRunner runner(t->cache.get(), 1);
  std::vector<TokenId> system = Tokens(6000, 0);
  std::vector<TokenId> c1 = Concat(system, Tokens(1000, 100000));
  std::vector<TokenId> c2 = Concat(system, Tokens(1000, 200000));
  std::vector<TokenId> c3 = Concat(system, Tokens(1000, 300000));
  absl::StatusOr<ServeOutcome> r1 = runner.Serve(Request("c1", c1));
  ASSERT_TRUE(r1.ok()) << r1.status();
  const CaptureOutcome* at4096 = Find(r1->captures, 4096);
  ASSERT_NE(at4096, nullptr);

  absl::StatusOr<ServeOutcome> r2 = runner.Serve(Request("c2", c2));
  absl::StatusOr<ServeOutcome> r3 = runner.Serve(Request("c3", c3));

  ASSERT_TRUE(r2.ok()) << r2.status();
  ASSERT_TRUE(r3.ok()) << r3.status();
  EXPECT_EQ(r2->used.depth, 4096);
  const CaptureOutcome* learned = Find(r2->captures, 6000);
  ASSERT_NE(learned, nullptr);
  EXPECT_EQ(learned->kind, CaptureKind::kLearned);
  EXPECT_EQ(r3->used.depth, 6000);
  EXPECT_EQ(r3->used.checkpoint, learned->id);
  EXPECT_EQ(r3->prefilled, 1000);
  absl::StatusOr<CheckpointInfo> base = t->cache->GetCheckpoint(at4096->id);
  absl::StatusOr<CheckpointInfo> mid = t->cache->GetCheckpoint(learned->id);
  absl::StatusOr<CheckpointInfo> end3 = t->cache->GetCheckpoint(Find(r3->captures, 7000)->id);
  ASSERT_TRUE(base.ok() && mid.ok() && end3.ok());
  ASSERT_EQ(mid->chunks.size(), 23u);  // 23 full chunks below 6,000; 112 rows of tail.
  EXPECT_EQ(mid->tail_bytes, 112 * 100);
  // Conversation 2 inherited conversation 1's bytes below 4,096 ...
  EXPECT_TRUE(std::equal(base->chunks.begin(), base->chunks.end(), mid->chunks.begin()));
  // ... and conversation 3 references the very same chunks below 5,888: one copy.
  EXPECT_TRUE(std::equal(mid->chunks.begin(), mid->chunks.end(), end3->chunks.begin()));
  std::set<ComputationId> computations;
  for (size_t j = 0; j < mid->chunks.size(); ++j) {
    computations.insert(t->cache->GetChunk(end3->chunks[j])->provenance);
  }
  EXPECT_EQ(computations.size(), 2u);  // Conversation 1's prefill and conversation 2's.
}

TEST(WorkedExamplesTest, Figure7ColdPrefillsDoNotShareARestoreDoes) {
  auto t = MakeCache({}, SimpleLayout(10, 1000, /*chunk_rows=*/2048));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  std::vector<TokenId> shared = Tokens(6144, 0);
  std::vector<TokenId> b = Concat(shared, Tokens(1000, 100000));
  std::vector<TokenId> a = Concat(shared, Tokens(1000, 200000));
  CheckpointId b_id = CaptureAt(cache, 0, b, CaptureKind::kEnd, "B");
  CheckpointId a_id = CaptureAt(cache, 1, a, CaptureKind::kEnd, "A");
  ASSERT_NE(a_id, 0u);
  ASSERT_NE(b_id, 0u);
  RequestRunner runner(&cache, 1, /*daemon_session=*/2);
  std::vector<TokenId> c = Concat(a, Tokens(1048, 300000));  // 8,192 tokens.

  absl::StatusOr<ServeOutcome> rc = runner.Serve(Request("C", c));

  ASSERT_TRUE(rc.ok()) << rc.status();
  absl::StatusOr<CheckpointInfo> ai = cache.GetCheckpoint(a_id);
  absl::StatusOr<CheckpointInfo> bi = cache.GetCheckpoint(b_id);
  ASSERT_TRUE(ai.ok() && bi.ok());
  ASSERT_EQ(ai->chunks.size(), 3u);
  ASSERT_EQ(bi->chunks.size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_NE(ai->chunks[j], bi->chunks[j]) << "cold prefills shared chunk " << j;
    EXPECT_NE(cache.GetChunk(ai->chunks[j])->provenance, cache.GetChunk(bi->chunks[j])->provenance);
  }
  EXPECT_EQ(rc->used.checkpoint, a_id);
  absl::StatusOr<CheckpointInfo> ci = cache.GetCheckpoint(Find(rc->captures, 8192)->id);
  ASSERT_TRUE(ci.ok());
  ASSERT_EQ(ci->chunks.size(), 4u);
  EXPECT_TRUE(std::equal(ai->chunks.begin(), ai->chunks.end(), ci->chunks.begin()));
  EXPECT_EQ(std::count(ai->chunks.begin(), ai->chunks.end(), ci->chunks[3]), 0);
}

TEST(WorkedExamplesTest, Figure8LearnedBoundaryAt6000) {
  auto t = MakeCache({}, SimpleLayout(100, 1000));
  ASSERT_NE(t, nullptr);
  RequestRunner runner(t->cache.get(), 1);
  std::vector<TokenId> system = Tokens(6000, 0);
  std::vector<TokenId> parent = Concat(system, Tokens(4000, 100000));
  ASSERT_TRUE(runner.Serve(Request("parent", parent)).ok());

  absl::StatusOr<ServeOutcome> sub1 =
      runner.Serve(Request("sub1", Concat(system, Tokens(1500, 200000))));
  absl::StatusOr<ServeOutcome> sub2 =
      runner.Serve(Request("sub2", Concat(system, Tokens(1500, 300000))));

  ASSERT_TRUE(sub1.ok()) << sub1.status();
  ASSERT_TRUE(sub2.ok()) << sub2.status();
  EXPECT_EQ(sub1->used.depth, 4096);
  EXPECT_EQ(sub1->shared_prefix, 6000);
  const CaptureOutcome* learned = Find(sub1->captures, 6000);
  ASSERT_NE(learned, nullptr);
  EXPECT_EQ(learned->kind, CaptureKind::kLearned);
  EXPECT_TRUE(learned->admitted);
  EXPECT_EQ(sub2->used.checkpoint, learned->id);
  EXPECT_EQ(sub2->prefilled, 1500);
}

TEST(WorkedExamplesTest, Figure8WithoutAnEarlierCheckpointPrefillsColdButLearns) {
  auto t = MakeCache({}, SimpleLayout(100, 1000));
  ASSERT_NE(t, nullptr);
  RequestRunner runner(t->cache.get(), 1);
  std::vector<TokenId> system = Tokens(1500, 0);  // Shorter than one grid step.
  ASSERT_TRUE(runner.Serve(Request("parent", Concat(system, Tokens(500, 100000)))).ok());

  absl::StatusOr<ServeOutcome> sub = runner.Serve(Request("sub", Concat(system, Tokens(700, 1))));

  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ(sub->used.tier, Tier::kNone);
  const CaptureOutcome* learned = Find(sub->captures, 1500);
  ASSERT_NE(learned, nullptr);
  EXPECT_EQ(learned->kind, CaptureKind::kLearned);
}

TEST(WorkedExamplesTest, Figure10Where12000TokenRequestLeavesCheckpoints) {
  CapturePlanner planner;
  PlanInput in;
  in.prompt_tokens = 12000;
  in.restore_depth = 4096;
  in.stable_boundary = 11500;
  in.shared_prefix = 6000;
  in.existing = {2048, 4096};

  absl::StatusOr<CapturePlan> plan = planner.Plan(in);

  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<PlannedCapture> expected = {{6000, CaptureKind::kLearned},
                                          {8192, CaptureKind::kGrid},
                                          {10240, CaptureKind::kGrid},
                                          {11500, CaptureKind::kStable},
                                          {12000, CaptureKind::kEnd}};
  EXPECT_EQ(plan->captures, expected);
  // Passes start at the restore point, stop at every capture and never exceed 2,048 tokens.
  ASSERT_FALSE(plan->passes.empty());
  EXPECT_EQ(plan->passes.front().begin, 4096);
  EXPECT_EQ(plan->passes.back().end, 12000);
  for (size_t i = 0; i < plan->passes.size(); ++i) {
    EXPECT_LE(plan->passes[i].end - plan->passes[i].begin, 2048);
    if (i > 0) {
      EXPECT_EQ(plan->passes[i].begin, plan->passes[i - 1].end);
    }
  }
}

TEST(WorkedExamplesTest, Figure10ReusedHistoryEndIsCapturedWhenItWasLive) {
  CapturePlanner planner;
  PlanInput in;
  in.prompt_tokens = 12000;
  in.restore_depth = 4096;
  in.restored_live = true;
  in.stable_boundary = 11500;

  absl::StatusOr<CapturePlan> plan = planner.Plan(in);

  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->captures.empty());
  EXPECT_EQ(plan->captures.front(), (PlannedCapture{4096, CaptureKind::kReused}));
}

TEST(WorkedExamplesTest, Figure11EvictionOrderInUnits) {
  // One unit: 10,000 bytes of private state. Rows cost 1 byte per token in 100-row chunks.
  ModelLayout layout = SimpleLayout(1, 10000, /*chunk_rows=*/100);
  // Two conversations with a stable checkpoint and a retry copy (21,400 bytes each), three
  // cheap checkpoints (10,100 each) and one more conversation (11,300): 84,400 bytes, so one
  // unit (10,100) is free.
  CacheOptions options = SeedAccounting();
  options.ram_bytes = 84400 + 10100;
  auto t = MakeCache(options, layout);
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  std::vector<CheckpointId> stable_ids;
  for (int i = 0; i < 2; ++i) {
    std::string conv = absl::StrCat("T", i);
    std::vector<TokenId> tokens = Tokens(1300, 10000 * (i + 1));
    stable_ids.push_back(CaptureAt(cache, i, tokens, CaptureKind::kStable, conv, 1300));
    SlotKey key{1, i};
    ASSERT_TRUE(cache.ExtendSlot(key, Tokens(100, 90000 + 1000 * i)).ok());
    absl::StatusOr<CaptureTicket> retry = cache.BeginCapture(key, CaptureKind::kEnd, conv, 1300);
    ASSERT_TRUE(retry.ok()) << retry.status();
    ASSERT_TRUE(cache.CommitCapture(retry->id).ok());
    t->clock.Advance(absl::Seconds(1));
  }
  for (int i = 0; i < 3; ++i) {
    CaptureAt(cache, 2 + i, Tokens(100, 200000 + 1000 * i), CaptureKind::kEnd,
              absl::StrCat("C", i));
    t->clock.Advance(absl::Seconds(1));
  }
  CheckpointId kept = CaptureAt(cache, 5, Tokens(1300, 300000), CaptureKind::kStable, "K", 1300);
  ASSERT_EQ(cache.ram_ledger().free(), 10100);
  const uint64_t before = cache.events().logged();

  // The new checkpoint needs a little over five units: 10,000 private + 40,600 rows.
  CheckpointId fresh = CaptureAt(cache, 6, Tokens(40600, 400000), CaptureKind::kStable, "N");

  ASSERT_NE(fresh, 0u);
  std::vector<std::string> reasons;
  for (const Event& e : cache.events().recent()) {
    if (e.seq > before && e.type == EventType::kEvict) reasons.push_back(e.reason);
  }
  EXPECT_EQ(reasons,
            (std::vector<std::string>{"retry-copy", "retry-copy", "cheap", "cheap", "cheap"}));
  EXPECT_TRUE(cache.GetCheckpoint(kept)->in_ram);
  EXPECT_TRUE(cache.GetCheckpoint(stable_ids[0])->in_ram);
  EXPECT_TRUE(cache.GetCheckpoint(stable_ids[1])->in_ram);
  EXPECT_LE(cache.ram_ledger().used(), cache.ram_ledger().budget());
}

TEST(WorkedExamplesTest, Figure14BorrowedRowsPreservedOnceChunksSurviveChildEviction) {
  auto t = MakeCache(SeedAccounting(), SimpleLayout(10, 1000, /*chunk_rows=*/2048));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  SlotKey slot1{1, 1};
  std::vector<TokenId> a = Tokens(12288, 0);
  ASSERT_TRUE(cache.StartCold(slot1, TestIds(), "A").ok());
  ASSERT_TRUE(cache.ExtendSlot(slot1, absl::MakeSpan(a).subspan(0, 8192)).ok());
  absl::StatusOr<CaptureTicket> t8 = cache.BeginCapture(slot1, CaptureKind::kGrid, "A", -1);
  ASSERT_TRUE(t8.ok()) << t8.status();
  ASSERT_EQ(t8->borrowed.size(), 4u);  // Capture copies private state, borrows rows.
  CheckpointId a8192 = *cache.CommitCapture(t8->id);
  ASSERT_TRUE(cache.ExtendSlot(slot1, absl::MakeSpan(a).subspan(8192)).ok());
  absl::StatusOr<CaptureTicket> t12 = cache.BeginCapture(slot1, CaptureKind::kEnd, "A", -1);
  ASSERT_TRUE(t12.ok()) << t12.status();
  CheckpointId a12288 = *cache.CommitCapture(t12->id);
  const int64_t used_before = cache.ram_ledger().used();

  absl::StatusOr<std::vector<uint64_t>> spills = cache.StartCold(slot1, TestIds(), "B");

  ASSERT_TRUE(spills.ok()) << spills.status();
  ASSERT_EQ(spills->size(), 1u);
  absl::StatusOr<SpillInfo> preserved = cache.GetSpill((*spills)[0]);
  ASSERT_TRUE(preserved.ok()) << preserved.status();
  EXPECT_EQ(preserved->chunks.size(), 6u);            // Each chunk copied once.
  EXPECT_EQ(cache.ram_ledger().used(), used_before);  // Space was reserved at admission.
  std::vector<ChunkId> small = cache.GetCheckpoint(a8192)->chunks;
  std::vector<ChunkId> big = cache.GetCheckpoint(a12288)->chunks;
  ASSERT_EQ(big.size(), 6u);
  EXPECT_TRUE(std::equal(small.begin(), small.end(), big.begin()));
  ASSERT_TRUE(cache.FinishSpill(preserved->id, big, {}, "").ok());
  for (ChunkId id : big) EXPECT_TRUE(cache.GetChunk(id)->in_arena);

  ASSERT_TRUE(cache.Evict(a8192, "test").ok());

  EXPECT_EQ(cache.ram_ledger().used(), used_before - 1000);  // Only its private state.
  for (ChunkId id : big) {
    absl::StatusOr<ChunkInfo> chunk = cache.GetChunk(id);
    ASSERT_TRUE(chunk.ok()) << chunk.status();
    EXPECT_EQ(chunk->ram_refs, 1);
  }
}

TEST(WorkedExamplesTest, Figure15OneLookupThreeTiers) {
  CacheOptions options;
  options.disk_bytes = 100 * kGiB;
  auto t = MakeCache(options, SimpleLayout(100, 1000));
  ASSERT_NE(t, nullptr);
  RequestRunner runner(t->cache.get(), 1);
  std::vector<TokenId> a = Concat(Tokens(4096, 0), Tokens(4096, 100000));
  absl::StatusOr<ServeOutcome> first = runner.Serve(Request("A", a));
  ASSERT_TRUE(first.ok()) << first.status();
  const CaptureOutcome* end = Find(first->captures, 8192);
  ASSERT_NE(end, nullptr);
  ASSERT_TRUE(end->persisted);
  ASSERT_TRUE(t->cache->Evict(end->id, "test").ok());  // Now on disk only.

  absl::StatusOr<LookupResult> found =
      t->cache->Lookup({TestIds(), Concat(a, Tokens(300, 900000)), -1, /*daemon_session=*/1});

  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->best.tier, Tier::kLive);  // Live beats disk at equal depth.
  EXPECT_EQ(found->best.depth, 8192);
  auto has = [&](Tier tier, int64_t depth) {
    return std::any_of(found->others.begin(), found->others.end(),
                       [&](const Candidate& c) { return c.tier == tier && c.depth == depth; });
  };
  EXPECT_TRUE(has(Tier::kDisk, 8192));
  EXPECT_TRUE(has(Tier::kRam, 4096));
  EXPECT_EQ(found->others.front().tier, Tier::kDisk);
}

TEST(WorkedExamplesTest, Grid95439TokenPrompt) {
  CapturePlanner planner;
  PlanInput in;
  in.prompt_tokens = 95439;
  in.stable_boundary = 95434;

  absl::StatusOr<CapturePlan> plan = planner.Plan(in);

  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<PlannedCapture> expected = {
      {22528, CaptureKind::kGrid}, {47104, CaptureKind::kGrid},   {69632, CaptureKind::kGrid},
      {94208, CaptureKind::kGrid}, {95434, CaptureKind::kStable}, {95439, CaptureKind::kEnd}};
  EXPECT_EQ(plan->captures, expected);
  EXPECT_EQ(planner.GridPositions(8192, 4), (std::vector<int64_t>{2048, 4096, 6144, 8192}));
}

TEST(WorkedExamplesTest, Grid95439SharesRowsAcrossSixCheckpoints) {
  // Flash-Next: 27,460 bytes per row, ~135 MB private (section 4's measured run).
  auto t = MakeCache(SeedAccounting(), SimpleLayout(27460, 135000000));
  ASSERT_NE(t, nullptr);
  RequestRunner runner(t->cache.get(), 1);
  std::vector<TokenId> prompt = Tokens(95439, 0);

  absl::StatusOr<ServeOutcome> out = runner.Serve(Request("A", prompt, 95434));

  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Positions(out->captures),
            (std::vector<int64_t>{22528, 47104, 69632, 94208, 95434, 95439}));
  Accounting acc = t->cache->RamAccounting();
  // One copy of the rows plus six private states, against 12.4 GB as complete copies (the
  // seed's "about 135 MB" of private state is rounded, hence the tolerance).
  EXPECT_EQ(acc.chunk_bytes, (95439 / 256) * 256 * int64_t{27460});
  EXPECT_NEAR(static_cast<double>(acc.full_copy_bytes) / 1e9, 12.4, 0.1);
  EXPECT_NEAR(static_cast<double>(acc.used) / 1e9, 3.43, 0.05);
}

TEST(WorkedExamplesTest, Figure9BudgetArithmetic) {
  CacheOptions options = SeedAccounting();
  options.ram_bytes = 9 * kGiB;
  auto t = MakeCache(options, SimpleLayout(27460, 133000000));
  ASSERT_NE(t, nullptr);
  CheckpointCache& cache = *t->cache;
  SlotKey slot{1, 0};
  std::vector<TokenId> conv = Tokens(100352, 0);
  ASSERT_TRUE(cache.StartCold(slot, TestIds(), "A").ok());
  int64_t at = 0;
  for (int64_t depth = 100352 - 7 * 2048; depth <= 100352; depth += 2048) {
    ASSERT_TRUE(cache.ExtendSlot(slot, absl::MakeSpan(conv).subspan(at, depth - at)).ok());
    at = depth;
    absl::StatusOr<CaptureTicket> ticket = cache.BeginCapture(slot, CaptureKind::kGrid, "A", -1);
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    ASSERT_TRUE(cache.CommitCapture(ticket->id).ok());
  }

  Accounting acc = cache.RamAccounting();

  auto gb = [](int64_t bytes) { return static_cast<double>(bytes) / 1e9; };
  EXPECT_EQ(acc.checkpoints, 8);
  EXPECT_EQ(acc.chunk_bytes, int64_t{100352} * 27460);  // Rows stored once.
  EXPECT_EQ(acc.private_bytes, 8 * int64_t{133000000});
  EXPECT_EQ(acc.tail_bytes, 0);
  EXPECT_NEAR(gb(acc.chunk_bytes), 2.76, 0.005);
  // The seed prints 1.07 GB; 8 x 133 MB (rounded in the seed) is 1.064 GB.
  EXPECT_NEAR(gb(acc.private_bytes), 1.07, 0.01);
  EXPECT_NEAR(gb(acc.used), 3.82, 0.005);
  EXPECT_NEAR(gb(acc.full_copy_bytes), 21.5, 0.05);
  EXPECT_NEAR(gb(acc.budget - acc.used), 5.84, 0.005);
}

}  // namespace
}  // namespace cairn::cache
