#include "services/cache/sim/calibration.h"

#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/cache/sim/report.h"

namespace cairn::cache::sim {
namespace {

constexpr int kTerms = 3;  // Passes, tokens, depth-weighted tokens.
using Row = std::array<double, kTerms>;

struct Sample {
  Row x;
  double y;
};

// Least squares over the terms set in `mask`; false when the system is singular.
bool SolveSubset(const std::vector<Sample>& samples, unsigned mask, Row* beta) {
  std::array<int, kTerms> idx{};
  int n = 0;
  for (int j = 0; j < kTerms; ++j) {
    if (mask & (1u << j)) idx[static_cast<size_t>(n++)] = j;
  }
  // Normal equations A b = c, solved by Gaussian elimination with partial pivoting.
  double a[kTerms][kTerms + 1] = {};
  for (const Sample& s : samples) {
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < n; ++c) a[r][c] += s.x[idx[r]] * s.x[idx[c]];
      a[r][n] += s.x[idx[r]] * s.y;
    }
  }
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    for (int r = col + 1; r < n; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    }
    if (std::abs(a[pivot][col]) < 1e-12) return false;
    for (int c = 0; c <= n; ++c) std::swap(a[col][c], a[pivot][c]);
    for (int r = 0; r < n; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (int c = col; c <= n; ++c) a[r][c] -= f * a[col][c];
    }
  }
  beta->fill(0);
  for (int r = 0; r < n; ++r) (*beta)[static_cast<size_t>(idx[r])] = a[r][n] / a[r][r];
  return true;
}

double SquaredError(const std::vector<Sample>& samples, const Row& beta) {
  double sum = 0;
  for (const Sample& s : samples) {
    double e = s.y;
    for (int j = 0; j < kTerms; ++j)
      e -= beta[static_cast<size_t>(j)] * s.x[static_cast<size_t>(j)];
    sum += e * e;
  }
  return sum;
}

}  // namespace

absl::StatusOr<CalibrationFit> Calibrate(const std::vector<ReplayRecord>& records,
                                         const CostModelOptions& base, int64_t max_pass_tokens) {
  if (max_pass_tokens < 1) return absl::InvalidArgumentError("max_pass_tokens must be positive");
  CalibrationFit fit;
  fit.cost = base;
  std::vector<Sample> samples;
  double ram_bytes = 0, ram_ms = 0, disk_bytes = 0, disk_ms = 0, cap_bytes = 0, cap_ms = 0;
  for (const ReplayRecord& r : records) {
    if (!r.error.empty()) continue;
    const double restore_bytes =
        static_cast<double>(r.depth) * static_cast<double>(base.bytes_per_row) +
        static_cast<double>(base.private_bytes);
    if (r.tier == "ram" && r.restore_ms > 0) {
      ram_bytes += restore_bytes;
      ram_ms += r.restore_ms;
      ++fit.ram_samples;
    } else if (r.tier == "disk" && r.restore_ms > 0) {
      disk_bytes += restore_bytes;
      disk_ms += r.restore_ms;
      ++fit.disk_samples;
    }
    if (r.captures > 0 && r.capture_ms > 0) {
      cap_bytes += static_cast<double>(r.captures) * static_cast<double>(base.private_bytes);
      cap_ms += r.capture_ms;
      ++fit.capture_samples;
    }
    if (r.prefilled <= 0) continue;
    const double n = static_cast<double>(r.prefilled);
    const double begin = static_cast<double>(r.prompt_tokens - r.prefilled);
    const double passes = std::ceil(n / static_cast<double>(max_pass_tokens)) +
                          static_cast<double>(std::max<int64_t>(0, r.captures - 1));
    const double depth_sum = (begin + (begin + n - 1)) * n / 2;
    samples.push_back({{passes, n, depth_sum / 1000.0},
                       std::max(0.0, r.server_ttft_ms - r.restore_ms - r.capture_ms)});
  }
  if (samples.empty()) return absl::InvalidArgumentError("no replayed request prefilled a token");
  fit.prefill_samples = static_cast<int64_t>(samples.size());

  Row best{};
  double best_error = std::numeric_limits<double>::infinity();
  for (unsigned mask = 1; mask < (1u << kTerms); ++mask) {
    Row beta;
    if (!SolveSubset(samples, mask, &beta)) continue;
    bool non_negative = true;
    for (double b : beta) non_negative &= b >= 0;
    if (!non_negative) continue;
    const double e = SquaredError(samples, beta);
    if (e < best_error) {
      best_error = e;
      best = beta;
    }
  }
  if (std::isinf(best_error)) {
    return absl::InvalidArgumentError("prefill samples admit no non-negative fit");
  }
  fit.cost.pass_overhead_ms = best[0];
  fit.cost.prefill_ms_per_token = best[1];
  fit.cost.prefill_ms_per_token_per_1k = best[2];
  fit.prefill_rms_ms = std::sqrt(best_error / static_cast<double>(samples.size()));
  if (ram_ms > 0) fit.cost.ram_restore_bytes_per_s = ram_bytes / (ram_ms / 1000);
  if (disk_ms > 0) fit.cost.disk_restore_bytes_per_s = disk_bytes / (disk_ms / 1000);
  if (cap_ms > 0) fit.cost.capture_bytes_per_s = cap_bytes / (cap_ms / 1000);
  return fit;
}

std::string FormatCalibration(const CalibrationFit& fit, const CostModelOptions& base) {
  auto g = [](double v) { return absl::StrFormat("%.4g", v); };
  const CostModelOptions& c = fit.cost;
  return FormatTable({
      {"cost model term", "base", "fitted", "samples"},
      {"pass-overhead-ms", g(base.pass_overhead_ms), g(c.pass_overhead_ms),
       absl::StrCat(fit.prefill_samples)},
      {"prefill-ms-per-token", g(base.prefill_ms_per_token), g(c.prefill_ms_per_token),
       absl::StrCat(fit.prefill_samples)},
      {"prefill-ms-per-token-per-1k", g(base.prefill_ms_per_token_per_1k),
       g(c.prefill_ms_per_token_per_1k), absl::StrCat(fit.prefill_samples)},
      {"ram-restore-bytes-per-s", g(base.ram_restore_bytes_per_s), g(c.ram_restore_bytes_per_s),
       absl::StrCat(fit.ram_samples)},
      {"disk-restore-bytes-per-s", g(base.disk_restore_bytes_per_s), g(c.disk_restore_bytes_per_s),
       absl::StrCat(fit.disk_samples)},
      {"capture-bytes-per-s", g(base.capture_bytes_per_s), g(c.capture_bytes_per_s),
       absl::StrCat(fit.capture_samples)},
      {"prefill fit rms (ms)", "", g(fit.prefill_rms_ms), ""},
  });
}

std::string TierLabel(Tier tier) {
  // The gateway calls a request without a restore "cold"; the cache core's name is "none".
  return tier == Tier::kNone ? "cold" : std::string(TierName(tier));
}

absl::StatusOr<PredictionComparison> ComparePrediction(const std::vector<ReplayRecord>& records,
                                                       const SimResult& predicted) {
  PredictionComparison c;
  Totals& m = c.measured;
  Totals& p = c.predicted;
  m.policy = "replay";
  p.policy = predicted.totals.policy;
  std::vector<double> m_ttft, p_ttft;
  double prefilled_error = 0, ttft_error = 0, ttft_sum = 0;
  int64_t same_tier = 0;
  for (const ReplayRecord& r : records) {
    if (!r.error.empty()) continue;
    if (r.index < 0 || static_cast<size_t>(r.index) >= predicted.requests.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("replay record ", r.index, " is not a request of the simulated trace"));
    }
    const RequestReport& q = predicted.requests[static_cast<size_t>(r.index)];
    ++c.requests;
    for (Totals* t : {&m, &p}) {
      ++t->requests;
      t->prompt_tokens += r.prompt_tokens;
    }
    m.prefilled += r.prefilled;
    p.prefilled += q.result.prefilled;
    const std::string tier_p = TierLabel(q.result.restored_tier);
    for (auto [t, tier] : {std::pair<Totals*, std::string>{&m, r.tier}, {&p, tier_p}}) {
      if (tier == "live") ++t->restored_live;
      if (tier == "ram") ++t->restored_ram;
      if (tier == "disk") ++t->restored_disk;
      if (tier == "cold") ++t->cold;
    }
    same_tier += r.tier == tier_p;
    m_ttft.push_back(r.server_ttft_ms);
    p_ttft.push_back(q.ttft_ms);
    m.ttft_ms_total += r.server_ttft_ms;
    p.ttft_ms_total += q.ttft_ms;
    prefilled_error += std::abs(static_cast<double>(r.prefilled - q.result.prefilled));
    ttft_error += std::abs(r.server_ttft_ms - q.ttft_ms);
    ttft_sum += r.server_ttft_ms;
  }
  for (Totals* t : {&m, &p}) {
    t->reused = t->prompt_tokens - t->prefilled;
    t->hit_ratio = t->prompt_tokens > 0
                       ? static_cast<double>(t->reused) / static_cast<double>(t->prompt_tokens)
                       : 0;
    t->ttft_ms_mean = t->requests > 0 ? t->ttft_ms_total / static_cast<double>(t->requests) : 0;
  }
  m.ttft_ms_p50 = Percentile(m_ttft, 0.5);
  m.ttft_ms_p95 = Percentile(m_ttft, 0.95);
  p.ttft_ms_p50 = Percentile(p_ttft, 0.5);
  p.ttft_ms_p95 = Percentile(p_ttft, 0.95);
  if (c.requests > 0) {
    c.tier_agreement = static_cast<double>(same_tier) / static_cast<double>(c.requests);
  }
  if (m.prefilled > 0) c.prefilled_abs_error = prefilled_error / static_cast<double>(m.prefilled);
  if (ttft_sum > 0) c.ttft_abs_error = ttft_error / ttft_sum;
  return c;
}

std::string FormatPrediction(const PredictionComparison& c) {
  const Totals& m = c.measured;
  const Totals& p = c.predicted;
  auto tiers = [](const Totals& t) {
    return absl::StrCat(t.restored_live, "/", t.restored_ram, "/", t.restored_disk, "/", t.cold);
  };
  auto ms = [](double v) { return absl::StrFormat("%.1f", v); };
  auto ratio = [](double a, double b) { return b > 0 ? absl::StrFormat("%.2fx", a / b) : "-"; };
  return FormatTable({
      {"quantity", "replay (measured)", "simulator (predicted)", "predicted / measured"},
      {"requests", absl::StrCat(m.requests), absl::StrCat(p.requests), ""},
      {"prompt tokens", absl::StrCat(m.prompt_tokens), absl::StrCat(p.prompt_tokens), ""},
      {"tokens prefilled", absl::StrCat(m.prefilled), absl::StrCat(p.prefilled),
       ratio(static_cast<double>(p.prefilled), static_cast<double>(m.prefilled))},
      {"hit ratio", absl::StrFormat("%.3f", m.hit_ratio), absl::StrFormat("%.3f", p.hit_ratio), ""},
      {"live/ram/disk/cold", tiers(m), tiers(p), ""},
      {"ttft p50 (ms)", ms(m.ttft_ms_p50), ms(p.ttft_ms_p50), ratio(p.ttft_ms_p50, m.ttft_ms_p50)},
      {"ttft p95 (ms)", ms(m.ttft_ms_p95), ms(p.ttft_ms_p95), ratio(p.ttft_ms_p95, m.ttft_ms_p95)},
      {"ttft mean (ms)", ms(m.ttft_ms_mean), ms(p.ttft_ms_mean),
       ratio(p.ttft_ms_mean, m.ttft_ms_mean)},
      {"ttft total (s)", absl::StrFormat("%.2f", m.ttft_ms_total / 1000),
       absl::StrFormat("%.2f", p.ttft_ms_total / 1000), ratio(p.ttft_ms_total, m.ttft_ms_total)},
      {"same tier, per request", "", absl::StrFormat("%.1f%%", 100 * c.tier_agreement), ""},
      {"prefilled error, per request", "", absl::StrFormat("%.1f%%", 100 * c.prefilled_abs_error),
       ""},
      {"ttft error, per request", "", absl::StrFormat("%.1f%%", 100 * c.ttft_abs_error), ""},
  });
}

std::string PredictionTsv(const std::vector<ReplayRecord>& records, const SimResult& predicted) {
  std::string out =
      "index\ttier\tpredicted_tier\tprefilled\tpredicted_prefilled\tttft_ms\tpredicted_ttft_ms\n";
  for (const ReplayRecord& r : records) {
    if (!r.error.empty() || r.index < 0 ||
        static_cast<size_t>(r.index) >= predicted.requests.size()) {
      continue;
    }
    const RequestReport& q = predicted.requests[static_cast<size_t>(r.index)];
    absl::StrAppend(&out, r.index, "\t", r.tier, "\t", TierLabel(q.result.restored_tier), "\t",
                    r.prefilled, "\t", q.result.prefilled, "\t",
                    absl::StrFormat("%.3f", r.server_ttft_ms), "\t",
                    absl::StrFormat("%.3f", q.ttft_ms), "\n");
  }
  return out;
}

}  // namespace cairn::cache::sim
