#include "services/gateway/dashboard/dashboard_state.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "services/gateway/dashboard/embedded_assets.h"
#include "services/gateway/metrics.h"

namespace cairn::gateway {
namespace {

cache_v1::Budget MakeBudget(uint64_t capacity, uint64_t used, uint64_t rows, uint64_t priv) {
  cache_v1::Budget b;
  b.set_capacity_bytes(capacity);
  b.set_used_bytes(used);
  b.set_row_bytes(rows);
  b.set_private_bytes(priv);
  b.set_full_copy_bytes(5 * rows);
  b.set_checkpoints(3);
  return b;
}

CacheSnapshot MakeSnapshot() {
  CacheSnapshot c;
  c.address = "unix:/run/cairn/cache.sock";
  c.up = true;
  *c.status.mutable_ram() = MakeBudget(1000, 700, 400, 250);
  c.status.set_hits_ram(4);
  c.status.set_lookups(9);
  cache_v1::EvictionCount* e = c.status.add_evictions();
  e->set_tier(cache_v1::TIER_RAM);
  e->set_reason("idle");
  e->set_count(2);
  cache_v1::TreeNode* n = c.tree.add_nodes();
  n->set_node_id(1);
  n->set_depth(2048);
  n->set_edge_tokens(2048);
  cache_v1::Candidate* cand = n->add_candidates();
  cand->set_tier(cache_v1::TIER_RAM);
  cand->set_depth(2048);
  cand->set_checkpoint_id(7);
  for (uint64_t seq : {1, 2}) {
    cache_v1::Event ev;
    ev.set_seq(seq);
    ev.set_kind(cache_v1::EVENT_KIND_ADMIT);
    c.events.push_back(ev);
  }
  return c;
}

TEST(DashboardStateTest, BudgetSplitAddsUpToTheCapacity) {
  const BudgetSplit s = SplitBudget(MakeBudget(1000, 700, 400, 250));

  EXPECT_EQ(s.rows, 400u);
  EXPECT_EQ(s.private_state, 250u);
  EXPECT_EQ(s.reserved, 50u);
  EXPECT_EQ(s.free, 300u);
  EXPECT_EQ(s.rows + s.private_state + s.reserved + s.free, s.capacity);
}

TEST(DashboardStateTest, BudgetSplitNeverUnderflows) {
  // A ledger that reports less than its parts (or a budget overshoot) clamps, never wraps.
  const BudgetSplit s = SplitBudget(MakeBudget(500, 100, 400, 250));

  EXPECT_EQ(s.reserved, 0u);
  EXPECT_EQ(s.free, 0u);
}

TEST(DashboardStateTest, StateCarriesSlotsBudgetTreeAndEvents) {
  DaemonStatus d;
  d.address = "unix:infer.sock";
  d.ready = true;
  d.model.set_name("demo");
  infer_v1::SlotInfo* slot = d.slots.add_slots();
  slot->set_slot(0);
  slot->set_state(infer_v1::SlotInfo::STATE_DECODE);
  slot->set_tokens(321);
  slot->set_conversation("<script>alert(1)</script>");
  const CacheSnapshot cache = MakeSnapshot();
  DashboardInputs in;
  in.daemons = {d};
  in.cache = &cache;
  in.ttft_by_tier = {TierLatency{"ram", 2, 40, 50, 50, 50}};

  const Json state = DashboardState(in);

  EXPECT_EQ(state["daemons"][0]["slots"][0]["state"], "decode");
  EXPECT_EQ(state["daemons"][0]["slots"][0]["tokens"], 321);
  EXPECT_EQ(state["daemons"][0]["slots"][0]["conversation"], "<script>alert(1)</script>");
  EXPECT_EQ(state["cache"]["ram"]["shared_rows"], 400);
  EXPECT_EQ(state["cache"]["ram"]["free"], 300);
  EXPECT_TRUE(state["cache"]["disk"].is_null());
  EXPECT_EQ(state["cache"]["tree"]["nodes"][0]["candidates"][0]["tier"], "ram");
  EXPECT_EQ(state["cache"]["evictions"][0]["reason"], "idle");
  EXPECT_EQ(state["cache"]["events"][0]["seq"], 2);  // Newest first.
  EXPECT_EQ(state["cache"]["events"][0]["kind"], "admit");
  EXPECT_EQ(state["ttft_by_tier"][0]["tier"], "ram");
}

TEST(DashboardStateTest, StateWithoutCacheSaysSo) {
  DashboardInputs in;

  const Json state = DashboardState(in);

  EXPECT_TRUE(state["cache"].is_null());
  EXPECT_TRUE(state["daemons"].empty());
}

TEST(DashboardStateTest, MetricsExportTheCacheDaemonsNumbers) {
  GatewayMetrics metrics;
  const CacheSnapshot cache = MakeSnapshot();

  const std::string text = metrics.Render({}, {}, &cache);

  EXPECT_TRUE(absl::StrContains(text, "cairn_cache_up 1\n")) << text;
  EXPECT_TRUE(
      absl::StrContains(text, "cairn_cache_bytes{tier=\"ram\",kind=\"shared_rows\"} 400\n"));
  EXPECT_TRUE(
      absl::StrContains(text, "cairn_cache_bytes{tier=\"ram\",kind=\"private_state\"} 250\n"));
  EXPECT_TRUE(absl::StrContains(text, "cairn_cache_bytes{tier=\"ram\",kind=\"free\"} 300\n"));
  EXPECT_TRUE(absl::StrContains(text, "cairn_cache_hits_total{tier=\"ram\"} 4\n"));
  EXPECT_TRUE(
      absl::StrContains(text, "cairn_cache_evictions_total{tier=\"ram\",reason=\"idle\"} 2\n"));
  EXPECT_FALSE(absl::StrContains(text, "tier=\"disk\",kind"));  // No disk tier configured.
}

TEST(DashboardStateTest, MetricsSayWhenTheCacheIsDown) {
  GatewayMetrics metrics;
  CacheSnapshot cache;
  cache.up = false;

  const std::string text = metrics.Render({}, {}, &cache);

  EXPECT_TRUE(absl::StrContains(text, "cairn_cache_up 0\n"));
  EXPECT_FALSE(absl::StrContains(text, "cairn_cache_bytes"));
}

TEST(DashboardStateTest, TtftByTierComesFromFinishedRequests) {
  GatewayMetrics metrics;
  for (double ms : {3.0, 4.0, 200.0}) {
    infer_v1::Finished f;
    f.mutable_cache()->set_restored_from(infer_v1::CacheResult::TIER_RAM);
    f.mutable_cache()->set_ttft_ms(ms);
    metrics.ObserveFinished(f);
  }
  infer_v1::Finished cold;
  cold.mutable_cache()->set_ttft_ms(900);
  metrics.ObserveFinished(cold);

  const std::vector<TierLatency> tiers = metrics.TtftByTier();

  ASSERT_EQ(tiers.size(), 2u);
  EXPECT_EQ(tiers[0].tier, "cold");
  EXPECT_EQ(tiers[1].tier, "ram");
  EXPECT_EQ(tiers[1].count, 3u);
  EXPECT_DOUBLE_EQ(tiers[1].mean_ms, 69.0);
  EXPECT_DOUBLE_EQ(tiers[1].p50_ms, 5.0);    // The bucket holding the median.
  EXPECT_DOUBLE_EQ(tiers[1].p99_ms, 200.0);  // Capped by the largest observation.
  const std::string text = metrics.Render({}, {}, nullptr);
  EXPECT_TRUE(absl::StrContains(text, "cairn_gateway_ttft_by_tier_ms_count{tier=\"ram\"} 3\n"));
}

TEST(DashboardStateTest, AssetsAreEmbeddedAndLoadNothingFromOutside) {
  const EmbeddedAsset* index = FindEmbeddedAsset("index.html");
  ASSERT_NE(index, nullptr);
  ASSERT_NE(FindEmbeddedAsset("dashboard.js"), nullptr);
  ASSERT_NE(FindEmbeddedAsset("dashboard.css"), nullptr);
  EXPECT_EQ(FindEmbeddedAsset("../CMakeLists.txt"), nullptr);
  const std::string html(reinterpret_cast<const char*>(index->data), index->size);
  EXPECT_TRUE(absl::StrContains(html, "/dashboard/dashboard.js"));

  for (int i = 0; i < kEmbeddedAssetCount; ++i) {
    const std::string text(reinterpret_cast<const char*>(kEmbeddedAssets[i].data),
                           kEmbeddedAssets[i].size);
    // The SVG namespace is a name, never fetched; anything else absolute would be a request.
    for (const char* external : {"src=\"http", "href=\"http", "src=\"//", "href=\"//", "url(http",
                                 "url(//", "@import", "fetch('http"}) {
      EXPECT_FALSE(absl::StrContains(text, external))
          << kEmbeddedAssets[i].name << ": " << external;
    }
    EXPECT_FALSE(absl::StrContains(text, "innerHTML")) << kEmbeddedAssets[i].name;
  }
}

}  // namespace
}  // namespace cairn::gateway
