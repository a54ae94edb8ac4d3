#ifndef CAIRN_SERVICES_GATEWAY_METRICS_H_
#define CAIRN_SERVICES_GATEWAY_METRICS_H_

// The gateway's Prometheus metrics: what it measures itself (requests by route and status,
// TTFT and inter-token times, prompt tokens reused vs prefilled, restore and capture times as
// each request's cache result reports them), plus the daemons' own numbers from their status
// calls: slots by state and queue depth (cairn-infer ListSlots); RAM and disk bytes by kind,
// cache hits by tier and evictions by reason (cairn-cache GetStatus, with --cache). Rendered
// in the text exposition format.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "cairn/infer/v1/infer.pb.h"
#include "common/concurrency/mutex.h"
#include "services/gateway/dashboard/cache_monitor.h"
#include "services/gateway/dashboard/dashboard_state.h"
#include "services/gateway/http/http_server.h"
#include "services/gateway/upstream/infer_pool.h"

namespace cairn::gateway {

// A histogram of milliseconds with fixed buckets. Thread-compatible.
class MsHistogram {
 public:
  static constexpr std::array<double, 14> kBucketsMs = {1,   2,   5,    10,   25,   50,    100,
                                                        250, 500, 1000, 2500, 5000, 10000, 30000};
  void Observe(double ms);
  // Appends the histogram's lines for metric `name` (with `help`).
  void Render(absl::string_view name, absl::string_view help, std::string* out) const;
  // Appends only the sample lines, each with `labels` ("tier=\"ram\"") before `le`.
  void RenderSamples(absl::string_view name, absl::string_view labels, std::string* out) const;
  // The upper bound of the bucket holding quantile `q` (0..1) of the observations: an
  // estimate from above; the largest observation past the last bucket; 0 when empty.
  double Quantile(double q) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::array<uint64_t, kBucketsMs.size()> counts_{};
  uint64_t count_ = 0;
  double sum_ = 0;
  double max_ = 0;
};

// Thread-safe.
class GatewayMetrics {
 public:
  void CountRequest(absl::string_view route, int status) ABSL_LOCKS_EXCLUDED(mu_);
  void ObserveInterToken(double ms) ABSL_LOCKS_EXCLUDED(mu_);
  // Records a finished generation: TTFT, tokens reused vs prefilled, tier, restore/capture.
  void ObserveFinished(const infer_v1::Finished& finished) ABSL_LOCKS_EXCLUDED(mu_);
  void CountCancelled() ABSL_LOCKS_EXCLUDED(mu_);

  // TTFT by the tier the prompt was restored from, cold first.
  std::vector<TierLatency> TtftByTier() const ABSL_LOCKS_EXCLUDED(mu_);

  // Renders every metric; `daemons`, `http` and `cache` (null without --cache) are read by
  // the caller just before.
  std::string Render(const std::vector<DaemonStatus>& daemons, const HttpServerStats& http,
                     const CacheSnapshot* cache) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> hits_by_tier_ ABSL_GUARDED_BY(mu_);
  MsHistogram ttft_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, MsHistogram> ttft_by_tier_ ABSL_GUARDED_BY(mu_);
  MsHistogram inter_token_ ABSL_GUARDED_BY(mu_);
  MsHistogram restore_ ABSL_GUARDED_BY(mu_);
  MsHistogram capture_ ABSL_GUARDED_BY(mu_);
  uint64_t prompt_tokens_reused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prompt_tokens_prefilled_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completion_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cancelled_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_METRICS_H_
