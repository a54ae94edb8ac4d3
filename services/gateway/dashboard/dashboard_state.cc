#include "services/gateway/dashboard/dashboard_state.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/match.h"
#include "absl/time/clock.h"

namespace cairn::gateway {

namespace {

// "STATE_DECODE" -> "decode", "TIER_RAM" -> "ram", "EVENT_KIND_EVICT" -> "evict".
std::string EnumWord(std::string name, absl::string_view prefix) {
  if (absl::StartsWith(name, prefix)) name = name.substr(prefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string CacheTier(cache_v1::Tier tier) { return EnumWord(cache_v1::Tier_Name(tier), "TIER_"); }

Json BudgetJson(const cache_v1::Budget& b) {
  const BudgetSplit split = SplitBudget(b);
  return {{"capacity", split.capacity},
          {"shared_rows", split.rows},
          {"private_state", split.private_state},
          {"reserved", split.reserved},
          {"free", split.free},
          {"full_copy", b.full_copy_bytes()},
          {"checkpoints", b.checkpoints()},
          {"max_checkpoints", b.max_checkpoints()}};
}

Json DaemonJson(const DaemonStatus& d) {
  Json slots = Json::array();
  for (const infer_v1::SlotInfo& s : d.slots.slots()) {
    slots.push_back({{"slot", s.slot()},
                     {"state", EnumWord(infer_v1::SlotInfo::State_Name(s.state()), "STATE_")},
                     {"tokens", s.tokens()},
                     {"conversation", s.conversation()},
                     {"request_id", s.request_id()},
                     {"borrowed_chunks", s.borrowed_chunks()},
                     {"spilled_chunks", s.spilled_chunks()}});
  }
  return {{"address", d.address},
          {"ready", d.ready},
          {"error", d.error},
          {"model", d.model.name()},
          {"architecture", d.model.architecture()},
          {"backend", d.model.backend()},
          {"cache_connected", d.model.cache_connected()},
          {"queued", d.slots.queued_requests()},
          {"inflight", d.inflight},
          {"slots", std::move(slots)}};
}

Json TreeJson(const cache_v1::GetTreeResponse& tree) {
  Json nodes = Json::array();
  for (const cache_v1::TreeNode& n : tree.nodes()) {
    Json candidates = Json::array();
    for (const cache_v1::Candidate& c : n.candidates()) {
      candidates.push_back({{"tier", CacheTier(c.tier())},
                            {"depth", c.depth()},
                            {"checkpoint", c.checkpoint_id()},
                            {"slot", c.slot()}});
    }
    nodes.push_back({{"id", n.node_id()},
                     {"parent", n.parent_id()},
                     {"depth", n.depth()},
                     {"edge_tokens", n.edge_tokens()},
                     {"candidates", std::move(candidates)}});
  }
  return {{"nodes", std::move(nodes)}, {"truncated", tree.truncated()}};
}

Json CacheJson(const CacheSnapshot& c) {
  Json j = {{"address", c.address}, {"up", c.up}, {"error", c.error}};
  if (!c.up) return j;
  const cache_v1::GetStatusResponse& s = c.status;
  j["ram"] = BudgetJson(s.ram());
  j["disk"] = s.disk_enabled() ? BudgetJson(s.disk()) : Json(nullptr);
  j["disk_healthy"] = s.disk_healthy();
  j["sessions"] = s.sessions();
  j["lookups"] = s.lookups();
  j["hits"] = {{"live", s.hits_live()}, {"ram", s.hits_ram()}, {"disk", s.hits_disk()}};
  j["tokens_restored"] = s.tokens_restored();
  Json evictions = Json::array();
  for (const cache_v1::EvictionCount& e : s.evictions()) {
    evictions.push_back(
        {{"tier", CacheTier(e.tier())}, {"reason", e.reason()}, {"count", e.count()}});
  }
  j["evictions"] = std::move(evictions);
  j["tree"] = TreeJson(c.tree);
  Json events = Json::array();
  // Newest first, as the page lists them.
  for (auto it = c.events.rbegin(); it != c.events.rend(); ++it) {
    const cache_v1::Event& e = *it;
    events.push_back({{"seq", e.seq()},
                      {"unix_ms", e.unix_ms()},
                      {"kind", EnumWord(cache_v1::EventKind_Name(e.kind()), "EVENT_KIND_")},
                      {"checkpoint", e.checkpoint_id()},
                      {"depth", e.depth()},
                      {"tier", CacheTier(e.tier())},
                      {"reason", e.reason()},
                      {"bytes", e.bytes()},
                      {"detail", e.detail()},
                      {"conversation", e.conversation()}});
  }
  j["events"] = std::move(events);
  return j;
}

}  // namespace

BudgetSplit SplitBudget(const cache_v1::Budget& b) {
  BudgetSplit split;
  split.capacity = b.capacity_bytes();
  split.rows = b.row_bytes();
  split.private_state = b.private_bytes();
  const uint64_t used = std::max(b.used_bytes(), split.rows + split.private_state);
  split.reserved = used - split.rows - split.private_state;
  split.free = split.capacity > used ? split.capacity - used : 0;
  return split;
}

Json DashboardState(const DashboardInputs& in) {
  Json daemons = Json::array();
  for (const DaemonStatus& d : in.daemons) daemons.push_back(DaemonJson(d));
  Json ttft = Json::array();
  for (const TierLatency& t : in.ttft_by_tier) {
    ttft.push_back({{"tier", t.tier},
                    {"count", t.count},
                    {"mean_ms", t.mean_ms},
                    {"p50_ms", t.p50_ms},
                    {"p90_ms", t.p90_ms},
                    {"p99_ms", t.p99_ms}});
  }
  return {{"unix_ms", absl::ToUnixMillis(absl::Now())},
          {"daemons", std::move(daemons)},
          {"cache", in.cache != nullptr ? CacheJson(*in.cache) : Json(nullptr)},
          {"ttft_by_tier", std::move(ttft)},
          {"gateway",
           {{"connections", in.http.connections},
            {"inflight", in.http.inflight},
            {"rejected_busy", in.http.rejected_busy}}}};
}

}  // namespace cairn::gateway
