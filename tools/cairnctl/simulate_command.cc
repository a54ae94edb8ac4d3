// `cairnctl simulate`, `cairnctl evaluate` and `cairnctl gen-trace` (tools/cairnctl/README.md).

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/config/flags.h"
#include "services/cache/sim/calibration.h"
#include "services/cache/sim/comparison.h"
#include "services/cache/sim/evaluation.h"
#include "services/cache/sim/report.h"
#include "services/cache/sim/simulator.h"
#include "services/cache/sim/trace.h"
#include "services/cache/sim/trace_generator.h"
#include "tools/cairnctl/command.h"
#include "tools/cairnctl/verb_flags.h"

namespace cairn::cairnctl {
namespace {

using cache::sim::AgentTraceOptions;
using cache::sim::SimOptions;

// Bounds of the offline verbs' flags: each far beyond a real setting, close enough that a typo
// (a negative cost, a zero bandwidth, a week-long step, a billion-token system prompt) is exit 2
// with the flag's name rather than a division by zero, an endless trace or an allocation failure.
constexpr int kMaxSimSlots = 1024;
constexpr double kMaxCostMs = 1e9;                     // Per token or per pass.
constexpr double kMinBandwidth = 1;                    // Bytes per second.
constexpr double kMaxBandwidth = 1e15;                 // A petabyte per second.
constexpr int64_t kMaxTraceTokens = int64_t{1} << 24;  // A trace prompt's limit (trace.h).
constexpr int kMaxTraceCount = 100000;                 // Conversations, turns, messages back.
constexpr double kMaxGapSeconds = 30 * 24 * 3600.0;    // Mean step or idle gap: a month.

void AddSimFlags(FlagSet& flags, SimOptions& o, uint64_t* ram, uint64_t* disk,
                 uint64_t* private_bytes) {
  cache::sim::PolicyOptions& p = o.policy;
  flags.AddBytes("ram-bytes", ram, "RAM budget of every policy (K, M, G, Ki, Mi, Gi)");
  flags.AddBytes("disk-bytes", disk, "cairn's disk tier budget; 0: no disk tier");
  flags.Add("slots", &p.slots, "execution slots", 1, kMaxSimSlots);
  flags.Add("vocab", &o.trace.vocab_size, "modulus of the pseudo-random token stream", 2, kNoMax64);
  // Cost model.
  flags.Add("prefill-ms-per-token", &p.cost.prefill_ms_per_token, "prefill cost at depth 0", 0,
            kMaxCostMs);
  flags.Add("prefill-ms-per-token-per-1k", &p.cost.prefill_ms_per_token_per_1k,
            "extra prefill cost per token per 1,000 tokens of depth", 0, kMaxCostMs);
  flags.Add("pass-overhead-ms", &p.cost.pass_overhead_ms, "fixed cost of one prefill pass", 0,
            kMaxCostMs);
  flags.Add("ram-restore-bytes-per-s", &p.cost.ram_restore_bytes_per_s, "RAM restore bandwidth",
            kMinBandwidth, kMaxBandwidth);
  flags.Add("disk-restore-bytes-per-s", &p.cost.disk_restore_bytes_per_s, "disk restore bandwidth",
            kMinBandwidth, kMaxBandwidth);
  flags.Add("capture-bytes-per-s", &p.cost.capture_bytes_per_s, "capture copy bandwidth",
            kMinBandwidth, kMaxBandwidth);
  flags.Add("bytes-per-row", &p.cost.bytes_per_row, "row bytes of one token");
  flags.AddBytes("private-bytes", private_bytes, "private state of one checkpoint");
  flags.Add("chunk-rows", &p.cost.chunk_rows, "rows per chunk");
  // Planner and retention.
  flags.Add("grid-step", &p.planner.grid_step, "grid points sit on multiples of this");
  flags.Add("max-grid-points", &p.planner.max_grid_points, "grid points per request");
  flags.Add("grid-snap-tokens", &p.planner.grid_snap_tokens, "grid point snaps to a pass end");
  flags.Add("learned-min-tokens", &p.planner.learned_min_tokens,
            "learned point must extend reuse this far");
  flags.Add("learned-merge-tokens", &p.planner.learned_merge_tokens,
            "learned point merges with a capture this close");
  flags.Add("max-pass-tokens", &p.planner.max_pass_tokens, "longest prefill pass (all policies)");
  flags.Add("grid-budget-share", &p.planner.grid_budget_share,
            "share of the RAM budget one request's grid points may hold");
  flags.Add("preserve-frontier", &p.planner.preserve_frontier,
            "capture a slot's frontier before another conversation overwrites it");
  flags.Add("restore-in-holding-slot", &p.planner.restore_in_holding_slot,
            "restore in the slot that holds the restored rows, not the least recently used");
  flags.Add("preserve-frontier-min-tokens", &p.planner.preserve_frontier_min_tokens,
            "preserve a frontier only this many tokens past the deepest checkpoint on its path "
            "(0: always)");
  flags.Add("cheapest-slot", &p.planner.cheapest_slot,
            "when no slot holds the restore depth, the slot whose overwrite spills the fewest "
            "bytes, not the least recently used");
  flags.Add("holding-slot-cheapest", &p.planner.holding_slot_cheapest,
            "among slots holding the restore depth equally far, the one whose overwrite spills "
            "the fewest bytes");
  flags.Add("max-checkpoints", &p.retention.max_checkpoints,
            "RAM checkpoint cap; 0: budget / private bytes, at least --min-checkpoints");
  flags.Add("min-checkpoints", &p.retention.min_checkpoints, "floor of the automatic cap");
  flags.Add("admission-by-rank", &p.retention.admission_by_rank,
            "a capture may evict only checkpoints ranked at or below its own rank");
  flags.Add("frontier-with-superseded", &p.retention.frontier_with_superseded,
            "a preserved frontier ranks with superseded checkpoints, not retry copies");
  flags.Add("shallow-first", &p.retention.shallow_first,
            "inside the idle and reused ranks, shallower checkpoints go first");
  flags.Add("shallow-by-saved", &p.retention.shallow_by_saved,
            "with --shallow-first: order by the tokens a checkpoint adds to the deepest "
            "checkpoint of another conversation above it, not by its depth");
  flags.Add("overdue-gaps", &p.retention.overdue_gaps,
            "inside the idle and reused ranks, a conversation not used for this many of its "
            "mean gaps between requests is overdue and goes earlier (0: off)");
  flags.Add("overdue-depth-weight", &p.retention.overdue_depth_weight,
            "with --shallow-first: an overdue conversation's depth counts this much instead of "
            "going first (0)");
  flags.Add("charge-on-spill", &p.retention.charge_on_spill,
            "charge borrowed rows to the RAM budget when they are spilled, not at admission");
  flags.Add("value-per-byte", &p.retention.value_per_byte,
            "inside a rank, evict the least tokens saved per byte freed first");
  flags.Add("value-across-ranks", &p.retention.value_across_ranks,
            "with --value-per-byte: value weighed by each rank's likelihood of reuse decides "
            "across ranks, ranks break ties");
  flags.Add("superseded-first", &p.retention.superseded_first,
            "evict checkpoints their own conversation continued past before idle ones");
  flags.Add("edit-reach-turns", &p.retention.edit_reach_turns,
            "superseded checkpoints at message boundaries of the latest request and this many "
            "before it go last among the superseded (0: off)");
  flags.Add("edit-reach-share", &p.retention.edit_reach_share,
            "share of the RAM budget in private state of checkpoints within edit reach that "
            "keep their conversation's rank (the most tokens saved first)");
  flags.Add("continue-reuse", &p.retention.continue_reuse,
            "edit reach: likelihood that the next turn continues from the latest preserved "
            "frontier");
  flags.Add("edit-reuse", &p.retention.edit_reuse,
            "edit reach: likelihood that an edit comes back to a checkpoint");
  flags.Add("cheap-ratio", &p.retention.cheap_ratio,
            "cheap: private bytes above this multiple of restorable row bytes");
  flags.Add("near-duplicate-tokens", &p.retention.near_duplicate_tokens,
            "covered near-duplicate distance");
  flags.Add("disk-spacing-tokens", &p.retention.disk_spacing_tokens,
            "prompt checkpoints closer than this to one on disk are not written");
  // Baselines.
  flags.Add("llamacpp-ctx-checkpoints", &p.llamacpp_ctx_checkpoints, "checkpoints per slot");
  flags.Add("llamacpp-checkpoint-share", &p.llamacpp_checkpoint_share,
            "share of the RAM budget in slot checkpoints (the rest is --cache-ram)");
  flags.Add("llamacpp-min-step", &p.llamacpp_min_step, "checkpoint min step");
  flags.Add("llamacpp-ubatch", &p.llamacpp_ubatch, "n_ubatch");
  flags.Add("block-tokens", &p.block_tokens, "block size of the block-aligned policy");
  flags.Add("marconi-recency-weight", &p.marconi_recency_weight,
            "Marconi eviction: weight of recency against FLOPs per byte");
}

// The value of `--name V` or `--name=V` in `args` (the last one wins); empty when absent.
std::string ScanFlag(const std::vector<std::string>& args, const std::string& name) {
  std::string value;
  const std::string flag = "--" + name;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) value = args[i + 1];
    if (args[i].rfind(flag + "=", 0) == 0) value = args[i].substr(flag.size() + 1);
  }
  return value;
}

// Parses a list of byte counts; on an error prints it (naming `flag`) and returns false.
bool ParseByteList(const std::vector<std::string>& items, const std::string& flag,
                   std::vector<int64_t>* out, std::ostream& err) {
  out->clear();
  for (const std::string& item : items) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(item);
    if (!bytes.ok() || *bytes > static_cast<uint64_t>(INT64_MAX)) {
      err << "--" << flag << ": bad byte count '" << item << "'\n";
      return false;
    }
    out->push_back(static_cast<int64_t>(*bytes));
  }
  return true;
}

// `simulate --calibrate CSV`: fits the cost model to a replay, then predicts the same trace
// with it and puts prediction and measurement side by side. Returns the exit code.
int RunCalibrated(SimOptions options, const std::string& csv, const std::string& tsv_path,
                  std::vector<cache::sim::TraceRequest> trace, const std::string& policy,
                  std::ostream& out, std::ostream& err) {
  absl::StatusOr<std::vector<cache::sim::ReplayRecord>> records = cache::sim::ReadReplayCsv(csv);
  if (!records.ok()) {
    err << "simulate: --calibrate: " << records.status().message() << "\n";
    return 1;
  }
  // The replay's rows name requests of this trace; one past its end is another trace's row (and
  // an index near INT_MAX must not overflow the count below).
  int64_t max_index = -1;
  for (const cache::sim::ReplayRecord& r : *records) {
    if (r.index < 0 || static_cast<uint64_t>(r.index) >= trace.size()) {
      err << "simulate: --calibrate: " << csv << ": row of request " << r.index << " (line "
          << r.line << ") is outside the trace's " << trace.size()
          << " requests (was the replay of another trace?)\n";
      return 1;
    }
    max_index = std::max<int64_t>(max_index, r.index);
  }
  absl::StatusOr<cache::sim::CalibrationFit> fit =
      cache::sim::Calibrate(*records, options.policy.cost, options.policy.planner.max_pass_tokens);
  if (!fit.ok()) {
    err << "simulate: --calibrate: " << fit.status().message() << "\n";
    return 1;
  }
  out << "calibration from " << csv << "\n"
      << cache::sim::FormatCalibration(*fit, options.policy.cost) << "\n";
  options.policy.cost = fit->cost;
  if (static_cast<uint64_t>(max_index + 1) < trace.size()) {
    trace.resize(static_cast<size_t>(max_index + 1));
  }
  std::vector<cache::sim::SimRequest> requests = cache::sim::PrepareRequests(trace, options.trace);
  absl::StatusOr<cache::sim::SimResult> predicted = cache::sim::Simulate(requests, policy, options);
  if (!predicted.ok()) {
    err << "simulate: " << predicted.status().message() << "\n";
    return absl::IsInvalidArgument(predicted.status()) ? 2 : 1;
  }
  absl::StatusOr<cache::sim::PredictionComparison> comparison =
      cache::sim::ComparePrediction(*records, *predicted);
  if (!comparison.ok()) {
    err << "simulate: --calibrate: " << comparison.status().message() << "\n";
    return 1;
  }
  out << "prediction (" << policy << ", calibrated) vs replay\n"
      << cache::sim::FormatPrediction(*comparison);
  if (!tsv_path.empty()) {
    std::ofstream file(tsv_path, std::ios::binary | std::ios::trunc);
    file << cache::sim::PredictionTsv(*records, *predicted);
    file.flush();
    if (!file) {
      err << "simulate: cannot write " << tsv_path << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

int RunSimulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  SimOptions options;
  std::string trace_path;
  std::string policy = "all";
  bool json = false;
  bool per_request = false;
  uint64_t ram = static_cast<uint64_t>(options.policy.ram_bytes);
  uint64_t disk = static_cast<uint64_t>(options.policy.disk_bytes);
  uint64_t private_bytes = static_cast<uint64_t>(options.policy.cost.private_bytes);
  FlagSet flags(
      "cairnctl simulate",
      "replays a trace (JSONL, docs/architecture.md §9) through a cache policy with a cost model");
  flags.Add("trace", &trace_path, "trace file (required)");
  flags.Add("policy", &policy,
            "cairn | none | live-only | llamacpp | block-aligned | marconi | oracle | all");
  flags.Add("json", &json, "one JSON object per request, then {\"totals\": ...}");
  flags.Add("per-request", &per_request, "with --policy all: also print every request");
  std::string calibrate;
  std::string prediction_tsv;
  flags.Add("calibrate", &calibrate,
            "fit the cost model to this replay CSV (cairnctl replay --csv), then compare the "
            "calibrated prediction (--policy, default cairn) with the replay");
  flags.Add("prediction-tsv", &prediction_tsv,
            "with --calibrate: write per-request measured and predicted values here");
  flags.Add("answers-resent", &options.trace.answers_resent,
            "the model's answers appear in the next prompt (default: true; false with "
            "--calibrate, as a replay sends the trace's tokens)");
  flags.Add("keep-stable", &options.trace.keep_stable,
            "requests keep the trace's stable boundaries (default: true; false with "
            "--calibrate, as token-id prompts carry none)");
  AddSimFlags(flags, options, &ram, &disk, &private_bytes);
  int code = 0;
  if (!ParseVerbFlags(flags, args, out, err, &code)) return code;
  if (!calibrate.empty()) {
    if (!flags.WasSet("answers-resent")) options.trace.answers_resent = false;
    if (!flags.WasSet("keep-stable")) options.trace.keep_stable = false;
    if (policy == "all") policy = "cairn";
  }
  if (trace_path.empty()) {
    err << "simulate: --trace FILE is required\n";
    return 2;
  }
  options.policy.ram_bytes = static_cast<int64_t>(ram);
  options.policy.disk_bytes = static_cast<int64_t>(disk);
  options.policy.cost.private_bytes = static_cast<int64_t>(private_bytes);
  if (options.policy.ram_bytes < 0 || options.policy.disk_bytes < 0 ||
      options.policy.cost.private_bytes < 0) {
    err << "simulate: byte sizes out of range\n";
    return 2;
  }

  const std::vector<std::string>& known = cache::sim::PolicyNames();
  if (policy != "all" && std::find(known.begin(), known.end(), policy) == known.end()) {
    err << "simulate: unknown policy '" << policy << "'\n";
    return 2;
  }
  absl::StatusOr<std::vector<cache::sim::TraceRequest>> trace =
      cache::sim::ReadTraceFile(trace_path, options.trace);
  if (!trace.ok()) {
    err << "simulate: " << trace.status().message() << "\n";
    return 1;
  }
  if (!calibrate.empty()) {
    return RunCalibrated(options, calibrate, prediction_tsv, *std::move(trace), policy, out, err);
  }
  std::vector<std::string> policies;
  if (policy == "all") {
    policies = cache::sim::PolicyNames();
  } else {
    policies = {policy};
  }
  std::vector<cache::sim::SimRequest> requests = cache::sim::PrepareRequests(*trace, options.trace);
  std::vector<cache::sim::Totals> totals;
  const bool print_requests = policies.size() == 1 || per_request || json;
  for (const std::string& name : policies) {
    absl::StatusOr<cache::sim::SimResult> result = cache::sim::Simulate(requests, name, options);
    if (!result.ok()) {
      err << "simulate: " << result.status().message() << "\n";
      return absl::IsInvalidArgument(result.status()) ? 2 : 1;
    }
    if (print_requests) {
      for (const cache::sim::RequestReport& r : result->requests) {
        out << (json ? cache::sim::RequestJson(r, name) : cache::sim::FormatRequestLine(r)) << "\n";
      }
    }
    if (json) {
      out << cache::sim::TotalsJson(result->totals) << "\n";
    } else if (policies.size() == 1) {
      out << "\n" << cache::sim::FormatTotals(result->totals);
    }
    totals.push_back(result->totals);
  }
  if (!json && policies.size() > 1) {
    if (per_request) out << "\n";
    out << cache::sim::FormatComparison(totals);
  }
  return 0;
}

int RunEvaluate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  cache::sim::EvalOptions eval;
  std::vector<std::string> presets = cache::sim::TracePresetNames();
  std::vector<std::string> seeds;
  for (uint64_t seed : cache::sim::EvaluationSeeds()) seeds.push_back(absl::StrCat(seed));
  bool out_of_set = false;
  std::vector<std::string> budgets = {"4Gi", "8Gi", "16Gi", "64Gi"};
  std::vector<std::string> disks = {"0"};
  std::vector<std::string> traces;
  uint64_t ram = 0;
  uint64_t disk = 0;
  uint64_t private_bytes = static_cast<uint64_t>(eval.base.policy.cost.private_bytes);
  eval.base.policy.slots = 2;
  FlagSet flags("cairnctl evaluate",
                "runs cairn, every peer model and the oracle over generated traces (presets x "
                "seeds) and trace files, at every RAM and disk budget, and prints one table");
  flags.Add("presets", &presets, "gen-trace presets (empty: none)");
  flags.Add("seeds", &seeds, "seeds of every preset");
  flags.Add("out-of-set", &out_of_set,
            "traces outside the evaluation set: its presets and agent-8 (gen-trace "
            "--conversations 8) x seeds 4, 5, 6, 9-13 (--presets and --seeds still override)");
  flags.Add("trace", &traces, "trace files to add to the set");
  flags.Add("budgets", &budgets, "RAM budgets");
  flags.Add("disk-budgets", &disks, "cairn's disk tier budgets (0: none)");
  flags.Add("max-vs-peer", &eval.max_vs_peer, "bar at small budgets: cairn / best peer");
  flags.Add("max-vs-oracle", &eval.max_vs_oracle, "bar above them: cairn / oracle");
  AddSimFlags(flags, eval.base, &ram, &disk, &private_bytes);
  int code = 0;
  if (!ParseVerbFlags(flags, args, out, err, &code)) return code;
  if (flags.WasSet("ram-bytes") || flags.WasSet("disk-bytes")) {
    err << "evaluate: use --budgets and --disk-budgets\n";
    return 2;
  }
  eval.base.policy.cost.private_bytes = static_cast<int64_t>(private_bytes);
  if (out_of_set && !flags.WasSet("presets")) presets = cache::sim::OutOfSetPresetNames();
  if (out_of_set && !flags.WasSet("seeds")) {
    seeds.clear();
    for (uint64_t seed : cache::sim::OutOfSetSeeds()) seeds.push_back(absl::StrCat(seed));
  }
  if (!ParseByteList(budgets, "budgets", &eval.ram_budgets, err) ||
      !ParseByteList(disks, "disk-budgets", &eval.disk_budgets, err)) {
    return 2;
  }
  if (eval.ram_budgets.empty() || eval.disk_budgets.empty()) {
    err << "evaluate: --budgets and --disk-budgets need at least one value\n";
    return 2;
  }
  std::vector<cache::sim::EvalTrace> set;
  for (const std::string& preset : presets) {
    for (const std::string& seed_text : seeds) {
      uint64_t seed = 0;
      if (!absl::SimpleAtoi(seed_text, &seed)) {
        err << "evaluate: --seeds: bad seed '" << seed_text << "'\n";
        return 2;
      }
      absl::StatusOr<AgentTraceOptions> options = cache::sim::TracePreset(preset, seed);
      if (!options.ok()) {
        err << "evaluate: " << options.status().message() << "\n";
        return 2;
      }
      absl::StatusOr<std::vector<cache::sim::TraceRequest>> trace =
          cache::sim::GenerateAgentTrace(*options);
      if (!trace.ok()) {
        err << "evaluate: " << trace.status().message() << "\n";
        return 2;
      }
      set.push_back(
          {absl::StrCat(preset, "/", seed), cache::sim::PrepareRequests(*trace, eval.base.trace)});
    }
  }
  for (const std::string& path : traces) {
    absl::StatusOr<std::vector<cache::sim::TraceRequest>> trace =
        cache::sim::ReadTraceFile(path, eval.base.trace);
    if (!trace.ok()) {
      err << "evaluate: " << trace.status().message() << "\n";
      return 1;
    }
    set.push_back({path, cache::sim::PrepareRequests(*trace, eval.base.trace)});
  }
  if (set.empty()) {
    err << "evaluate: no traces (give --presets or --trace)\n";
    return 2;
  }
  absl::StatusOr<std::vector<cache::sim::EvalRow>> rows = cache::sim::Evaluate(set, eval);
  if (!rows.ok()) {
    err << "evaluate: " << rows.status().message() << "\n";
    return absl::IsInvalidArgument(rows.status()) ? 2 : 1;
  }
  out << cache::sim::FormatEvaluation(*rows, eval);
  return 0;
}

int RunCompare(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  cache::sim::ComparisonOptions compare;
  std::string trace_path;
  std::string out_dir;
  std::vector<std::string> budgets = {"2Gi", "8Gi", "32Gi"};
  std::string cdf_budget;
  uint64_t ram = 0;
  uint64_t disk = uint64_t{64} << 30;
  uint64_t private_bytes = static_cast<uint64_t>(compare.base.policy.cost.private_bytes);
  compare.base.policy.slots = 2;
  FlagSet flags("cairnctl compare",
                "runs every policy over a trace at several RAM budgets, and cairn also with its "
                "disk tier; prints a Markdown table and writes the data of the report's plots");
  flags.Add("trace", &trace_path, "trace file (required)");
  flags.Add("budgets", &budgets, "RAM budgets");
  flags.Add("cdf-budget", &cdf_budget, "budget of the TTFT CDF data (default: the middle one)");
  flags.Add("out-dir", &out_dir,
            "write compare.md, recomputed_vs_budget.dat and ttft_cdf.dat here (gnuplot blocks)");
  AddSimFlags(flags, compare.base, &ram, &disk, &private_bytes);
  int code = 0;
  if (!ParseVerbFlags(flags, args, out, err, &code)) return code;
  if (trace_path.empty()) {
    err << "compare: --trace FILE is required\n";
    return 2;
  }
  if (flags.WasSet("ram-bytes")) {
    err << "compare: use --budgets (--disk-bytes is cairn's disk tier in the +disk rows)\n";
    return 2;
  }
  compare.base.policy.cost.private_bytes = static_cast<int64_t>(private_bytes);
  if (disk > static_cast<uint64_t>(INT64_MAX) || compare.base.policy.cost.private_bytes < 0) {
    err << "compare: byte sizes out of range\n";
    return 2;
  }
  compare.disk_bytes = static_cast<int64_t>(disk);
  if (!ParseByteList(budgets, "budgets", &compare.ram_budgets, err)) return 2;
  if (compare.ram_budgets.empty()) {
    err << "compare: --budgets needs at least one value\n";
    return 2;
  }
  int64_t cdf_bytes = compare.ram_budgets[compare.ram_budgets.size() / 2];
  if (!cdf_budget.empty()) {
    std::vector<int64_t> one;
    if (!ParseByteList({cdf_budget}, "cdf-budget", &one, err)) return 2;
    cdf_bytes = one.front();
    if (std::find(compare.ram_budgets.begin(), compare.ram_budgets.end(), cdf_bytes) ==
        compare.ram_budgets.end()) {
      err << "compare: --cdf-budget " << cdf_budget << " is not one of --budgets\n";
      return 2;
    }
  }
  absl::StatusOr<std::vector<cache::sim::TraceRequest>> trace =
      cache::sim::ReadTraceFile(trace_path, compare.base.trace);
  if (!trace.ok()) {
    err << "compare: " << trace.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::vector<cache::sim::ComparisonRow>> rows =
      cache::sim::ComparePolicies(cache::sim::PrepareRequests(*trace, compare.base.trace), compare);
  if (!rows.ok()) {
    err << "compare: " << rows.status().message() << "\n";
    return absl::IsInvalidArgument(rows.status()) ? 2 : 1;
  }
  const std::string table = cache::sim::ComparisonMarkdown(*rows);
  out << table;
  if (!out_dir.empty()) {
    const std::vector<std::pair<std::string, std::string>> files = {
        {"compare.md", table},
        {"recomputed_vs_budget.dat", cache::sim::RecomputedVsBudgetData(*rows)},
        {"ttft_cdf.dat", cache::sim::TtftCdfData(*rows, cdf_bytes)}};
    for (const auto& [name, text] : files) {
      std::ofstream file(out_dir + "/" + name, std::ios::binary | std::ios::trunc);
      file << text;
      file.flush();
      if (!file) {
        err << "compare: cannot write " << out_dir << "/" << name << "\n";
        return 1;
      }
    }
  }
  return 0;
}

int RunGenTrace(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  // The preset sets the defaults every other flag may override.
  std::string preset = ScanFlag(args, "preset");
  if (preset.empty()) preset = "agent";
  absl::StatusOr<AgentTraceOptions> base =
      cache::sim::TracePreset(preset, AgentTraceOptions{}.seed);
  if (!base.ok()) {
    err << "gen-trace: " << base.status().message() << "\n";
    return 2;
  }
  AgentTraceOptions o = *base;
  std::string path;
  int64_t seed = static_cast<int64_t>(o.seed);
  FlagSet flags("cairnctl gen-trace", "writes a synthetic coding-agent trace (JSONL)");
  flags.Add("preset", &preset,
            "agent | agent-8 | single-user | team | long-context | coding-agent: defaults the "
            "other flags override");
  flags.Add("out", &path, "output file; stdout when empty");
  flags.Add("seed", &seed, "random seed", 0, kNoMax64);
  flags.Add("conversations", &o.conversations, "top-level conversations", 1, kMaxTraceCount);
  flags.Add("turns", &o.turns_per_conversation, "turns per conversation", 1, kMaxTraceCount);
  flags.Add("system-prompt-tokens", &o.system_prompt_tokens, "shared system prompt + tools", 0,
            kMaxTraceTokens);
  flags.Add("first-user-tokens", &o.first_user_tokens, "mean first user message", 1,
            kMaxTraceTokens);
  flags.Add("append-tokens", &o.append_tokens_mean, "mean append per step", 1, kMaxTraceTokens);
  flags.Add("append-tokens-max", &o.append_tokens_max, "longest message", 1, kMaxTraceTokens);
  flags.Add("answer-tokens", &o.answer_tokens_mean, "mean visible answer", 1, kMaxTraceTokens);
  flags.Add("reasoning-fraction", &o.reasoning_fraction, "turns whose reasoning is dropped", 0, 1);
  flags.Add("reasoning-tokens", &o.reasoning_tokens_mean, "mean reasoning length", 0,
            kMaxTraceTokens);
  flags.Add("edit-probability", &o.edit_probability, "a turn edits an earlier message", 0, 1);
  flags.Add("edit-back-messages", &o.edit_back_messages, "an edit reaches this many messages back",
            1, kMaxTraceCount);
  flags.Add("subagent-probability", &o.subagent_probability, "a turn starts a subagent", 0, 1);
  flags.Add("subagent-turns", &o.subagent_turns, "turns per subagent", 0, kMaxTraceCount);
  flags.Add("subagent-fork-probability", &o.subagent_fork_probability,
            "a subagent forks the parent's whole prompt, not only the system prompt", 0, 1);
  flags.Add("tool-result-tail-probability", &o.tool_result_tail_probability,
            "an append is a heavy-tailed tool result (Pareto)", 0, 1);
  flags.Add("tool-result-tail-alpha", &o.tool_result_tail_alpha,
            "Pareto shape of tool results (smaller: heavier tail)");
  flags.Add("compaction-threshold-tokens", &o.compaction_threshold_tokens,
            "histories longer than this are compacted", 1, kMaxTraceTokens);
  flags.Add("compaction-summary-tokens", &o.compaction_summary_tokens,
            "summary a compacted history restarts from", 0, kMaxTraceTokens);
  flags.Add("step-seconds", &o.step_seconds_mean, "mean gap between steps", 0, kMaxGapSeconds);
  flags.Add("idle-probability", &o.idle_probability, "a step is followed by a human pause", 0, 1);
  flags.Add("idle-seconds", &o.idle_seconds_mean, "mean pause", 0, kMaxGapSeconds);
  flags.Add("scale", &o.token_scale,
            "multiplies every token length (e.g. 0.125 for a small CPU model); times unchanged");
  int code = 0;
  if (!ParseVerbFlags(flags, args, out, err, &code)) return code;
  o.seed = static_cast<uint64_t>(seed);
  absl::StatusOr<std::vector<cache::sim::TraceRequest>> trace = cache::sim::GenerateAgentTrace(o);
  if (!trace.ok()) {
    err << "gen-trace: " << trace.status().message() << "\n";
    return 2;
  }
  std::ofstream file;
  if (!path.empty()) {
    file.open(path, std::ios::binary | std::ios::trunc);
    if (!file) {
      err << "gen-trace: cannot write " << path << "\n";
      return 1;
    }
  }
  std::ostream& sink = path.empty() ? out : file;
  for (const cache::sim::TraceRequest& r : *trace) sink << cache::sim::FormatTraceLine(r) << "\n";
  sink.flush();
  if (!sink) {
    err << "gen-trace: write failed\n";
    return 1;
  }
  return 0;
}

}  // namespace cairn::cairnctl
