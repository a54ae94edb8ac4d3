#include "services/gateway/metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "services/gateway/openai/format_util.h"

namespace cairn::gateway {

namespace {
std::string Escape(absl::string_view v) {
  return absl::StrReplaceAll(v, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}
void Header(absl::string_view name, absl::string_view type, absl::string_view help,
            std::string* out) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}
void Sample(absl::string_view name, absl::string_view labels, double value, std::string* out) {
  absl::StrAppend(out, name, labels.empty() ? "" : "{", labels, labels.empty() ? "" : "}", " ",
                  value, "\n");
}
// Appends cairn-cache's own numbers, from its last GetStatus.
void RenderCache(const CacheSnapshot& cache, std::string* out) {
  Header("cairn_cache_up", "gauge", "whether the cache daemon answered its last GetStatus", out);
  Sample("cairn_cache_up", "", cache.up ? 1 : 0, out);
  if (!cache.up) return;
  const cache_v1::GetStatusResponse& s = cache.status;
  std::vector<std::pair<std::string, const cache_v1::Budget*>> tiers = {{"ram", &s.ram()}};
  if (s.disk_enabled()) tiers.emplace_back("disk", &s.disk());
  Header("cairn_cache_bytes", "gauge",
         "cache bytes by tier and kind: shared_rows (chunks, stored once), private_state "
         "(private state and tails), reserved (pending captures and spills), free",
         out);
  for (const auto& [tier, b] : tiers) {
    const BudgetSplit split = SplitBudget(*b);
    for (const auto& [kind, bytes] : {std::pair<const char*, uint64_t>{"shared_rows", split.rows},
                                      {"private_state", split.private_state},
                                      {"reserved", split.reserved},
                                      {"free", split.free}}) {
      Sample("cairn_cache_bytes", absl::StrCat("tier=\"", tier, "\",kind=\"", kind, "\""),
             static_cast<double>(bytes), out);
    }
  }
  Header("cairn_cache_capacity_bytes", "gauge", "cache budget by tier", out);
  for (const auto& [tier, b] : tiers) {
    Sample("cairn_cache_capacity_bytes", absl::StrCat("tier=\"", tier, "\""),
           static_cast<double>(b->capacity_bytes()), out);
  }
  Header("cairn_cache_full_copy_bytes", "gauge",
         "what the stored checkpoints would take as full copies (without shared rows)", out);
  for (const auto& [tier, b] : tiers) {
    Sample("cairn_cache_full_copy_bytes", absl::StrCat("tier=\"", tier, "\""),
           static_cast<double>(b->full_copy_bytes()), out);
  }
  Header("cairn_cache_checkpoints", "gauge", "checkpoints held by tier", out);
  for (const auto& [tier, b] : tiers) {
    Sample("cairn_cache_checkpoints", absl::StrCat("tier=\"", tier, "\""),
           static_cast<double>(b->checkpoints()), out);
  }
  Header("cairn_cache_lookups_total", "counter", "prefix lookups", out);
  Sample("cairn_cache_lookups_total", "", static_cast<double>(s.lookups()), out);
  Header("cairn_cache_hits_total", "counter", "lookups answered from each tier", out);
  Sample("cairn_cache_hits_total", "tier=\"live\"", static_cast<double>(s.hits_live()), out);
  Sample("cairn_cache_hits_total", "tier=\"ram\"", static_cast<double>(s.hits_ram()), out);
  Sample("cairn_cache_hits_total", "tier=\"disk\"", static_cast<double>(s.hits_disk()), out);
  Header("cairn_cache_tokens_restored_total", "counter", "prompt tokens restored from the cache",
         out);
  Sample("cairn_cache_tokens_restored_total", "", static_cast<double>(s.tokens_restored()), out);
  Header("cairn_cache_evictions_total", "counter", "checkpoints evicted by tier and reason", out);
  for (const cache_v1::EvictionCount& e : s.evictions()) {
    Sample("cairn_cache_evictions_total",
           absl::StrCat("tier=\"", e.tier() == cache_v1::TIER_DISK ? "disk" : "ram", "\",reason=\"",
                        Escape(e.reason()), "\""),
           static_cast<double>(e.count()), out);
  }
  Header("cairn_cache_sessions", "gauge", "inference daemons connected to the cache", out);
  Sample("cairn_cache_sessions", "", s.sessions(), out);
  if (s.disk_enabled()) {
    Header("cairn_cache_disk_healthy", "gauge", "0 once the disk tier went read-only", out);
    Sample("cairn_cache_disk_healthy", "", s.disk_healthy() ? 1 : 0, out);
    Header("cairn_cache_disk_queue_bytes", "gauge", "bytes waiting to be written to disk", out);
    Sample("cairn_cache_disk_queue_bytes", "", static_cast<double>(s.disk_queue_bytes()), out);
    Header("cairn_cache_disk_fs_free_bytes", "gauge",
           "free space the disk tier can still use on its file system", out);
    Sample("cairn_cache_disk_fs_free_bytes", "", static_cast<double>(s.disk_free_bytes()), out);
    Header("cairn_cache_quarantined_total", "counter", "disk checkpoints quarantined", out);
    Sample("cairn_cache_quarantined_total", "", static_cast<double>(s.quarantined()), out);
  }
}

}  // namespace

void MsHistogram::Observe(double ms) {
  for (size_t i = 0; i < kBucketsMs.size(); ++i) {
    if (ms <= kBucketsMs[i]) ++counts_[i];
  }
  ++count_;
  sum_ += ms;
  max_ = std::max(max_, ms);
}

void MsHistogram::Render(absl::string_view name, absl::string_view help, std::string* out) const {
  Header(name, "histogram", help, out);
  RenderSamples(name, "", out);
}

void MsHistogram::RenderSamples(absl::string_view name, absl::string_view labels,
                                std::string* out) const {
  const std::string prefix = labels.empty() ? "" : absl::StrCat(labels, ",");
  const std::string plain = labels.empty() ? "" : absl::StrCat("{", labels, "}");
  for (size_t i = 0; i < kBucketsMs.size(); ++i) {
    absl::StrAppend(out, name, "_bucket{", prefix, "le=\"", kBucketsMs[i], "\"} ", counts_[i],
                    "\n");
  }
  absl::StrAppend(out, name, "_bucket{", prefix, "le=\"+Inf\"} ", count_, "\n", name, "_sum", plain,
                  " ", sum_, "\n", name, "_count", plain, " ", count_, "\n");
}

double MsHistogram::Quantile(double q) const {
  if (count_ == 0) return 0;
  const double rank = std::max(1.0, std::ceil(q * static_cast<double>(count_)));
  for (size_t i = 0; i < kBucketsMs.size(); ++i) {
    if (static_cast<double>(counts_[i]) >= rank) return std::min(kBucketsMs[i], max_);
  }
  return max_;
}

void GatewayMetrics::CountRequest(absl::string_view route, int status) {
  MutexLock lock(&mu_);
  ++requests_[{std::string(route), status}];
}

void GatewayMetrics::ObserveInterToken(double ms) {
  MutexLock lock(&mu_);
  inter_token_.Observe(ms);
}

void GatewayMetrics::ObserveFinished(const infer_v1::Finished& f) {
  MutexLock lock(&mu_);
  const auto& c = f.cache();
  ttft_.Observe(c.ttft_ms());
  ttft_by_tier_[std::string(TierName(c.restored_from()))].Observe(c.ttft_ms());
  if (c.restored_from() != infer_v1::CacheResult::TIER_UNSPECIFIED) {
    restore_.Observe(c.restore_ms());
  }
  if (c.captures() > 0) capture_.Observe(c.capture_ms());
  ++hits_by_tier_[std::string(TierName(c.restored_from()))];
  prompt_tokens_reused_ += f.cached_tokens();
  prompt_tokens_prefilled_ += c.prefilled_tokens();
  completion_tokens_ += f.completion_tokens();
}

void GatewayMetrics::CountCancelled() {
  MutexLock lock(&mu_);
  ++cancelled_;
}

std::vector<TierLatency> GatewayMetrics::TtftByTier() const {
  std::vector<TierLatency> out;
  MutexLock lock(&mu_);
  for (absl::string_view tier : {"cold", "live", "ram", "disk"}) {
    auto it = ttft_by_tier_.find(std::string(tier));
    if (it == ttft_by_tier_.end()) continue;
    const MsHistogram& h = it->second;
    out.push_back(TierLatency{std::string(tier), h.count(),
                              h.count() == 0 ? 0 : h.sum() / static_cast<double>(h.count()),
                              h.Quantile(0.5), h.Quantile(0.9), h.Quantile(0.99)});
  }
  return out;
}

std::string GatewayMetrics::Render(const std::vector<DaemonStatus>& daemons,
                                   const HttpServerStats& http, const CacheSnapshot* cache) const {
  std::string out;
  {
    MutexLock lock(&mu_);
    Header("cairn_gateway_requests_total", "counter", "HTTP requests answered by route and status",
           &out);
    for (const auto& [key, n] : requests_) {
      Sample("cairn_gateway_requests_total",
             absl::StrCat("route=\"", Escape(key.first), "\",status=\"", key.second, "\""), n,
             &out);
    }
    Header("cairn_gateway_cache_hits_total", "counter",
           "generations by the tier their prompt was restored from (cold: none)", &out);
    for (const auto& [tier, n] : hits_by_tier_) {
      Sample("cairn_gateway_cache_hits_total", absl::StrCat("tier=\"", tier, "\""), n, &out);
    }
    Header("cairn_gateway_prompt_tokens_total", "counter",
           "prompt tokens reused from the cache vs prefilled", &out);
    Sample("cairn_gateway_prompt_tokens_total", "kind=\"reused\"", prompt_tokens_reused_, &out);
    Sample("cairn_gateway_prompt_tokens_total", "kind=\"prefilled\"", prompt_tokens_prefilled_,
           &out);
    Header("cairn_gateway_completion_tokens_total", "counter", "tokens generated", &out);
    Sample("cairn_gateway_completion_tokens_total", "", completion_tokens_, &out);
    Header("cairn_gateway_cancelled_total", "counter",
           "generations cancelled because the client went away", &out);
    Sample("cairn_gateway_cancelled_total", "", cancelled_, &out);
    ttft_.Render("cairn_gateway_ttft_ms", "time to first token in milliseconds", &out);
    Header("cairn_gateway_ttft_by_tier_ms", "histogram",
           "time to first token in milliseconds by the tier the prompt was restored from", &out);
    for (const auto& [tier, h] : ttft_by_tier_) {
      h.RenderSamples("cairn_gateway_ttft_by_tier_ms", absl::StrCat("tier=\"", tier, "\""), &out);
    }
    inter_token_.Render("cairn_gateway_inter_token_ms",
                        "time between streamed deltas in milliseconds", &out);
    restore_.Render("cairn_gateway_restore_ms", "checkpoint restore time in milliseconds", &out);
    capture_.Render("cairn_gateway_capture_ms", "checkpoint capture time in milliseconds", &out);
  }
  Header("cairn_gateway_connections", "gauge", "open HTTP connections", &out);
  Sample("cairn_gateway_connections", "", static_cast<double>(http.connections), &out);
  Header("cairn_gateway_inflight_requests", "gauge", "admitted generation requests in progress",
         &out);
  Sample("cairn_gateway_inflight_requests", "", static_cast<double>(http.inflight), &out);
  Header("cairn_gateway_rejected_busy_total", "counter", "requests answered 503 when full", &out);
  Sample("cairn_gateway_rejected_busy_total", "", static_cast<double>(http.rejected_busy), &out);
  Header("cairn_infer_up", "gauge", "whether the inference daemon answered its last status call",
         &out);
  for (const DaemonStatus& d : daemons) {
    Sample("cairn_infer_up", absl::StrCat("daemon=\"", Escape(d.address), "\""), d.ready ? 1 : 0,
           &out);
  }
  std::string slots;
  std::string busy;
  std::string queued;
  for (const DaemonStatus& d : daemons) {
    if (!d.ready) continue;
    int busy_slots = 0;
    for (const auto& slot : d.slots.slots()) {
      busy_slots += slot.state() != infer_v1::SlotInfo::STATE_IDLE ? 1 : 0;
    }
    Sample("cairn_infer_slots_busy", absl::StrCat("daemon=\"", Escape(d.address), "\""), busy_slots,
           &busy);
    std::map<std::string, int> by_state;
    for (const auto& slot : d.slots.slots()) {
      std::string state = infer_v1::SlotInfo::State_Name(slot.state());
      if (absl::StartsWith(state, "STATE_")) state = state.substr(6);
      for (char& ch : state) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      ++by_state[state];
    }
    for (const auto& [state, n] : by_state) {
      Sample("cairn_infer_slots",
             absl::StrCat("daemon=\"", Escape(d.address), "\",state=\"", state, "\""), n, &slots);
    }
    Sample("cairn_infer_queued_requests", absl::StrCat("daemon=\"", Escape(d.address), "\""),
           d.slots.queued_requests(), &queued);
  }
  Header("cairn_infer_slots", "gauge", "slots by state, from ListSlots", &out);
  absl::StrAppend(&out, slots);
  Header("cairn_infer_slots_busy", "gauge", "slots not idle, from ListSlots", &out);
  absl::StrAppend(&out, busy);
  Header("cairn_infer_queued_requests", "gauge", "requests queued in the daemon, from ListSlots",
         &out);
  absl::StrAppend(&out, queued);
  if (cache != nullptr) RenderCache(*cache, &out);
  return out;
}

}  // namespace cairn::gateway
