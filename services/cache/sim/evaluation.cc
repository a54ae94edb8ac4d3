#include "services/cache/sim/evaluation.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "services/cache/sim/report.h"
#include "services/cache/sim/trace_generator.h"

namespace cairn::cache::sim {
namespace {

double Ratio(int64_t a, int64_t b) {
  return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0;
}

std::string GiB(int64_t bytes) {
  return absl::StrFormat("%g GiB", static_cast<double>(bytes) / static_cast<double>(1 << 30));
}

std::string Gb(int64_t bytes) {
  return absl::StrFormat("%.2f GB", static_cast<double>(bytes) / 1e9);
}

}  // namespace

const std::vector<uint64_t>& EvaluationSeeds() {
  static const auto* seeds = new std::vector<uint64_t>{1, 2, 3};
  return *seeds;
}

const std::vector<std::string>& OutOfSetPresetNames() {
  static const auto* names = [] {
    auto* all = new std::vector<std::string>(TracePresetNames());
    all->push_back("agent-8");
    return all;
  }();
  return *names;
}

const std::vector<uint64_t>& OutOfSetSeeds() {
  static const auto* seeds = new std::vector<uint64_t>{4, 5, 6, 9, 10, 11, 12, 13};
  return *seeds;
}

absl::StatusOr<std::vector<EvalRow>> Evaluate(const std::vector<EvalTrace>& traces,
                                              const EvalOptions& options) {
  std::vector<EvalRow> rows;
  for (const EvalTrace& trace : traces) {
    for (int64_t ram : options.ram_budgets) {
      SimOptions sim = options.base;
      sim.policy.ram_bytes = ram;
      sim.policy.disk_bytes = 0;
      std::string best_peer;
      int64_t best_prefilled = 0;
      std::string peak_peer;
      int64_t peer_peak = 0;
      for (const std::string& peer : options.peers) {
        ASSIGN_OR_RETURN(SimResult r, Simulate(trace.requests, peer, sim));
        if (best_peer.empty() || r.totals.prefilled < best_prefilled) {
          best_peer = peer;
          best_prefilled = r.totals.prefilled;
        }
        if (peak_peer.empty() || r.totals.peak_bytes > peer_peak) {
          peak_peer = peer;
          peer_peak = r.totals.peak_bytes;
        }
      }
      for (int64_t disk : options.disk_budgets) {
        sim.policy.disk_bytes = disk;
        ASSIGN_OR_RETURN(SimResult cairn, Simulate(trace.requests, "cairn", sim));
        EvalRow row;
        row.trace = trace.name;
        row.ram_bytes = ram;
        row.disk_bytes = disk;
        row.cairn = cairn.totals;
        row.best_peer = best_peer;
        row.best_peer_prefilled = best_prefilled;
        row.peak_peer = peak_peer;
        row.peer_peak_bytes = peer_peak;
        row.vs_peer = Ratio(cairn.totals.prefilled, best_prefilled);
        row.vs_oracle = cairn.totals.vs_oracle;
        row.meets_bar = ram <= options.small_budget_bytes ? row.vs_peer <= options.max_vs_peer
                                                          : row.vs_oracle <= options.max_vs_oracle;
        row.meets_bar = row.meets_bar && cairn.totals.peak_bytes <= ram;
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

std::string FormatEvaluation(const std::vector<EvalRow>& rows, const EvalOptions& options) {
  std::vector<std::vector<std::string>> table = {
      {"trace", "ram", "disk", "cairn", "best peer", "peer prefilled", "cairn/peer", "oracle",
       "cairn/oracle", "cairn peak", "peer peak", "bar"}};
  // Per (RAM, disk) budget: cairn's total, the worst ratios and their rows, the rows meeting
  // the bar and the names of those that do not.
  struct Worst {
    int64_t prefilled = 0;
    double vs_peer = 0;
    std::string vs_peer_trace;
    double vs_oracle = 0;
    std::string vs_oracle_trace;
    int met = 0;
    int rows = 0;
    std::vector<std::string> missed;
  };
  std::map<std::pair<int64_t, int64_t>, Worst> worst;
  for (const EvalRow& r : rows) {
    table.push_back({r.trace, GiB(r.ram_bytes), r.disk_bytes > 0 ? GiB(r.disk_bytes) : "-",
                     absl::StrCat(r.cairn.prefilled), r.best_peer,
                     absl::StrCat(r.best_peer_prefilled), absl::StrFormat("%.3f", r.vs_peer),
                     absl::StrCat(r.cairn.oracle_prefilled), absl::StrFormat("%.3f", r.vs_oracle),
                     Gb(r.cairn.peak_bytes),
                     absl::StrCat(Gb(r.peer_peak_bytes), " ", r.peak_peer,
                                  r.peer_peak_bytes > r.ram_bytes ? " OVER" : ""),
                     r.meets_bar ? "ok" : "MISSED"});
    Worst& w = worst[{r.ram_bytes, r.disk_bytes}];
    w.prefilled += r.cairn.prefilled;
    if (w.vs_peer_trace.empty() || r.vs_peer > w.vs_peer) {
      w.vs_peer = r.vs_peer;
      w.vs_peer_trace = r.trace;
    }
    if (w.vs_oracle_trace.empty() || r.vs_oracle > w.vs_oracle) {
      w.vs_oracle = r.vs_oracle;
      w.vs_oracle_trace = r.trace;
    }
    w.met += r.meets_bar ? 1 : 0;
    if (!r.meets_bar) w.missed.push_back(r.trace);
    ++w.rows;
  }
  std::vector<std::vector<std::string>> summary = {{"ram", "disk", "cairn prefilled",
                                                    "worst cairn/peer", "worst cairn/oracle", "bar",
                                                    "rows meeting it", "missed"}};
  int met = 0;
  int total = 0;
  for (const auto& [budgets, w] : worst) {
    summary.push_back(
        {GiB(budgets.first), budgets.second > 0 ? GiB(budgets.second) : "-",
         absl::StrCat(w.prefilled), absl::StrFormat("%.3f %s", w.vs_peer, w.vs_peer_trace),
         absl::StrFormat("%.3f %s", w.vs_oracle, w.vs_oracle_trace),
         budgets.first <= options.small_budget_bytes
             ? absl::StrFormat("cairn/peer <= %.2f", options.max_vs_peer)
             : absl::StrFormat("cairn/oracle <= %.2f", options.max_vs_oracle),
         absl::StrCat(w.met, "/", w.rows), w.missed.empty() ? "-" : absl::StrJoin(w.missed, " ")});
    met += w.met;
    total += w.rows;
  }
  return absl::StrCat(FormatTable(table), "\n", FormatTable(summary),
                      "\nrows meeting the bar: ", met, "/", total, "\n");
}

}  // namespace cairn::cache::sim
