#include "services/cache/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "common/status/status_macros.h"
#include "common/time/clock.h"
#include "services/cache/sim/replay_log.h"

namespace cairn::cache::sim {

namespace {

// Ids for generated tokens that no prompt contains: above every vocabulary id.
constexpr TokenId kFreshTokenBase = TokenId{1} << 30;
constexpr char kOracle[] = "oracle";

}  // namespace

std::vector<SimRequest> PrepareRequests(const std::vector<TraceRequest>& trace,
                                        const TraceOptions& options) {
  std::vector<SimRequest> out;
  out.reserve(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    Prompt p = Materialize(trace[i], options);
    SimRequest r;
    r.index = static_cast<int>(i);
    r.line = trace[i].line;
    r.conv = trace[i].conv;
    r.t = trace[i].t;
    r.tokens = std::move(p.tokens);
    r.segment_starts = std::move(p.segment_starts);
    r.stable = options.keep_stable ? trace[i].stable : -1;
    out.push_back(std::move(r));
  }
  // Generated tokens, from each conversation's next request.
  absl::flat_hash_map<std::string, size_t> next_of;
  TokenId fresh = kFreshTokenBase;
  for (size_t k = out.size(); k-- > 0;) {
    const int64_t gen = trace[k].gen;
    SimRequest& r = out[k];
    auto it = next_of.find(r.conv);
    const std::vector<TokenId>* next = it == next_of.end() ? nullptr : &out[it->second].tokens;
    const size_t n = r.tokens.size();
    if (options.answers_resent && next != nullptr && next->size() > n &&
        std::equal(r.tokens.begin(), r.tokens.end(), next->begin())) {
      size_t take = std::min(static_cast<size_t>(gen), next->size() - n);
      r.generated.assign(next->begin() + static_cast<ptrdiff_t>(n),
                         next->begin() + static_cast<ptrdiff_t>(n + take));
    }
    while (static_cast<int64_t>(r.generated.size()) < gen) r.generated.push_back(fresh++);
    next_of[r.conv] = k;
  }
  return out;
}

absl::StatusOr<SimResult> Simulate(const std::vector<SimRequest>& requests,
                                   absl::string_view policy_name, const SimOptions& options) {
  FakeClock clock;
  ASSIGN_OR_RETURN(std::unique_ptr<Policy> policy, MakePolicy(policy_name, options.policy, &clock));
  CostModel cost(options.policy.cost);
  SimResult result;
  Totals& t = result.totals;
  t.policy = std::string(policy_name);
  std::vector<double> ttfts;
  for (const SimRequest& request : requests) {
    clock.SetTime(absl::UnixEpoch() + absl::Seconds(request.t));
    ASSIGN_OR_RETURN(RequestResult r, policy->Serve(request));
    RequestReport rep;
    rep.index = request.index;
    rep.line = request.line;
    rep.conv = request.conv;
    rep.t = request.t;
    rep.prompt_tokens = static_cast<int64_t>(request.tokens.size());
    rep.restore_ms = cost.RestoreMs(r.restored_tier, r.restore_bytes);
    rep.prefill_ms = cost.PassesMs(r.passes);
    rep.capture_ms = cost.CaptureMs(r.capture_bytes);
    rep.ttft_ms = rep.restore_ms + rep.prefill_ms + rep.capture_ms;
    rep.bytes_in_use = policy->BytesInUse();
    rep.result = std::move(r);

    ++t.requests;
    t.prompt_tokens += rep.prompt_tokens;
    t.prefilled += rep.result.prefilled;
    switch (rep.result.restored_tier) {
      case Tier::kLive:
        ++t.restored_live;
        break;
      case Tier::kRam:
        ++t.restored_ram;
        break;
      case Tier::kDisk:
        ++t.restored_disk;
        break;
      case Tier::kNone:
        ++t.cold;
        break;
    }
    t.captures += static_cast<int64_t>(rep.result.captures.size());
    t.evictions += static_cast<int64_t>(rep.result.evicted.size());
    t.ttft_ms_total += rep.ttft_ms;
    ttfts.push_back(rep.ttft_ms);
    result.requests.push_back(std::move(rep));
  }
  t.reused = t.prompt_tokens - t.prefilled;
  t.hit_ratio = t.prompt_tokens > 0
                    ? static_cast<double>(t.reused) / static_cast<double>(t.prompt_tokens)
                    : 0;
  t.ttft_ms_mean = t.requests > 0 ? t.ttft_ms_total / static_cast<double>(t.requests) : 0;
  t.ttft_ms_p50 = Percentile(ttfts, 0.50);
  t.ttft_ms_p95 = Percentile(ttfts, 0.95);
  t.peak_bytes = policy->PeakBytes();
  if (policy_name == kOracle) {
    t.oracle_prefilled = t.prefilled;
  } else {
    ASSIGN_OR_RETURN(SimResult bound, Simulate(requests, kOracle, options));
    t.oracle_prefilled = bound.totals.prefilled;
  }
  t.vs_oracle = t.oracle_prefilled > 0
                    ? static_cast<double>(t.prefilled) / static_cast<double>(t.oracle_prefilled)
                    : 0;
  return result;
}

}  // namespace cairn::cache::sim
