#include "services/gateway/metrics.h"

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
}  // namespace

void MsHistogram::Observe(double ms) {
  for (size_t i = 0; i < kBucketsMs.size(); ++i) {
    if (ms <= kBucketsMs[i]) ++counts_[i];
  }
  ++count_;
  sum_ += ms;
}

void MsHistogram::Render(absl::string_view name, absl::string_view help, std::string* out) const {
  Header(name, "histogram", help, out);
  for (size_t i = 0; i < kBucketsMs.size(); ++i) {
    absl::StrAppend(out, name, "_bucket{le=\"", kBucketsMs[i], "\"} ", counts_[i], "\n");
  }
  absl::StrAppend(out, name, "_bucket{le=\"+Inf\"} ", count_, "\n", name, "_sum ", sum_, "\n", name,
                  "_count ", count_, "\n");
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

std::string GatewayMetrics::Render(const std::vector<DaemonStatus>& daemons,
                                   const HttpServerStats& http) const {
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
  std::string queued;
  for (const DaemonStatus& d : daemons) {
    if (!d.ready) continue;
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
  Header("cairn_infer_queued_requests", "gauge", "requests queued in the daemon, from ListSlots",
         &out);
  absl::StrAppend(&out, queued);
  return out;
}

}  // namespace cairn::gateway
