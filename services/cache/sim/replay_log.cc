#include "services/cache/sim/replay_log.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "services/cache/sim/report.h"

namespace cairn::cache::sim {
namespace {

const std::vector<std::string>& Columns() {
  static const auto* columns =
      new std::vector<std::string>{"index",    "line",          "conv",       "t",
                                   "sent_s",   "prompt_tokens", "gen_tokens", "completion_tokens",
                                   "tier",     "depth",         "reused",     "prefilled",
                                   "captures", "restore_ms",    "capture_ms", "server_ttft_ms",
                                   "ttft_ms",  "total_ms",      "error"};
  return *columns;
}

std::string Quote(absl::string_view field) {
  if (field.find_first_of(",\"\n\r") == absl::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// Splits one CSV line (no embedded newlines: ReplayCsvLine never writes one unquoted, and
// quoted newlines are not produced by it either, since errors are single-line).
absl::StatusOr<std::vector<std::string>> SplitCsv(absl::string_view line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  if (quoted) return absl::InvalidArgumentError("unterminated quote");
  return fields;
}

std::string Ms(double ms) { return absl::StrFormat("%.1f", ms); }

}  // namespace

std::string ReplayCsvHeader() { return absl::StrJoin(Columns(), ","); }

std::string ReplayCsvLine(const ReplayRecord& r) {
  return absl::StrCat(
      r.index, ",", r.line, ",", Quote(r.conv), ",", r.t, ",", absl::StrFormat("%.3f", r.sent_s),
      ",", r.prompt_tokens, ",", r.gen_tokens, ",", r.completion_tokens, ",", Quote(r.tier), ",",
      r.depth, ",", r.reused, ",", r.prefilled, ",", r.captures, ",",
      absl::StrFormat("%.3f", r.restore_ms), ",", absl::StrFormat("%.3f", r.capture_ms), ",",
      absl::StrFormat("%.3f", r.server_ttft_ms), ",", absl::StrFormat("%.3f", r.ttft_ms), ",",
      absl::StrFormat("%.3f", r.total_ms), ",", Quote(r.error));
}

absl::StatusOr<std::vector<ReplayRecord>> ParseReplayCsv(absl::string_view text) {
  std::vector<ReplayRecord> out;
  absl::flat_hash_map<std::string, size_t> column;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    absl::StatusOr<std::vector<std::string>> fields = SplitCsv(line);
    if (!fields.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("replay csv line ", line_no, ": ", fields.status().message()));
    }
    if (column.empty()) {
      for (size_t i = 0; i < fields->size(); ++i) column[(*fields)[i]] = i;
      for (const std::string& name : Columns()) {
        if (!column.contains(name)) {
          return absl::InvalidArgumentError(
              absl::StrCat("replay csv line ", line_no, ": no column '", name, "'"));
        }
      }
      continue;
    }
    auto field = [&](const std::string& name) -> const std::string& {
      const size_t i = column[name];
      static const std::string* empty = new std::string;
      return i < fields->size() ? (*fields)[i] : *empty;
    };
    ReplayRecord r;
    bool ok = absl::SimpleAtoi(field("index"), &r.index) &&
              absl::SimpleAtoi(field("line"), &r.line) && absl::SimpleAtod(field("t"), &r.t) &&
              absl::SimpleAtod(field("sent_s"), &r.sent_s) &&
              absl::SimpleAtoi(field("prompt_tokens"), &r.prompt_tokens) &&
              absl::SimpleAtoi(field("gen_tokens"), &r.gen_tokens) &&
              absl::SimpleAtoi(field("completion_tokens"), &r.completion_tokens) &&
              absl::SimpleAtoi(field("depth"), &r.depth) &&
              absl::SimpleAtoi(field("reused"), &r.reused) &&
              absl::SimpleAtoi(field("prefilled"), &r.prefilled) &&
              absl::SimpleAtoi(field("captures"), &r.captures) &&
              absl::SimpleAtod(field("restore_ms"), &r.restore_ms) &&
              absl::SimpleAtod(field("capture_ms"), &r.capture_ms) &&
              absl::SimpleAtod(field("server_ttft_ms"), &r.server_ttft_ms) &&
              absl::SimpleAtod(field("ttft_ms"), &r.ttft_ms) &&
              absl::SimpleAtod(field("total_ms"), &r.total_ms);
    if (!ok || fields->size() != column.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("replay csv line ", line_no, ": malformed row"));
    }
    r.conv = field("conv");
    r.tier = field("tier");
    r.error = field("error");
    out.push_back(std::move(r));
  }
  if (column.empty()) return absl::InvalidArgumentError("replay csv: no header");
  return out;
}

absl::StatusOr<std::vector<ReplayRecord>> ReadReplayCsv(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream text;
  text << file.rdbuf();
  return ParseReplayCsv(text.str());
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(q * static_cast<double>(values.size()));
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(i, values.size() - 1)];
}

LatencyStats Latencies(const std::vector<double>& ms) {
  LatencyStats s;
  s.requests = static_cast<int64_t>(ms.size());
  if (ms.empty()) return s;
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean = sum / static_cast<double>(ms.size());
  s.p50 = Percentile(ms, 0.50);
  s.p95 = Percentile(ms, 0.95);
  s.p99 = Percentile(ms, 0.99);
  return s;
}

ReplaySummary Summarize(const std::vector<ReplayRecord>& records) {
  ReplaySummary s;
  std::vector<double> ttft, server;
  std::map<std::string, std::vector<double>> ttft_by, server_by;
  double first = 0, last = 0;
  bool any = false;
  for (const ReplayRecord& r : records) {
    if (!r.error.empty()) {
      ++s.errors;
      continue;
    }
    ++s.requests;
    s.prompt_tokens += r.prompt_tokens;
    s.reused += r.reused;
    s.prefilled += r.prefilled;
    s.completion_tokens += r.completion_tokens;
    ttft.push_back(r.ttft_ms);
    server.push_back(r.server_ttft_ms);
    ttft_by[r.tier].push_back(r.ttft_ms);
    server_by[r.tier].push_back(r.server_ttft_ms);
    const double end = r.sent_s + r.total_ms / 1000;
    first = any ? std::min(first, r.sent_s) : r.sent_s;
    last = any ? std::max(last, end) : end;
    any = true;
  }
  s.hit_ratio = s.prompt_tokens > 0
                    ? static_cast<double>(s.reused) / static_cast<double>(s.prompt_tokens)
                    : 0;
  s.wall_s = last - first;
  if (s.wall_s > 0) {
    s.requests_per_s = static_cast<double>(s.requests) / s.wall_s;
    s.prompt_tokens_per_s = static_cast<double>(s.prompt_tokens) / s.wall_s;
    s.completion_tokens_per_s = static_cast<double>(s.completion_tokens) / s.wall_s;
  }
  s.ttft = Latencies(ttft);
  s.server_ttft = Latencies(server);
  for (const auto& [tier, ms] : ttft_by) s.ttft_by_tier[tier] = Latencies(ms);
  for (const auto& [tier, ms] : server_by) s.server_ttft_by_tier[tier] = Latencies(ms);
  return s;
}

std::string FormatReplaySummary(const ReplaySummary& s) {
  std::string out = FormatTable({
      {"requests", absl::StrCat(s.requests, " ok, ", s.errors, " failed")},
      {"prompt tokens", absl::StrCat(s.prompt_tokens)},
      {"reused (cached_tokens)", absl::StrCat(s.reused)},
      {"prefilled", absl::StrCat(s.prefilled)},
      {"hit ratio", absl::StrFormat("%.3f", s.hit_ratio)},
      {"wall time", absl::StrFormat("%.1f s", s.wall_s)},
      {"throughput",
       absl::StrFormat("%.2f requests/s, %.0f prompt tokens/s, %.1f generated/s", s.requests_per_s,
                       s.prompt_tokens_per_s, s.completion_tokens_per_s)},
  });
  std::vector<std::vector<std::string>> rows = {{"ttft (ms)", "requests", "p50", "p95", "p99",
                                                 "mean", "server p50", "server p95", "server p99"}};
  auto row = [&rows](const std::string& name, const LatencyStats& c, const LatencyStats& v) {
    rows.push_back({name, absl::StrCat(c.requests), Ms(c.p50), Ms(c.p95), Ms(c.p99), Ms(c.mean),
                    Ms(v.p50), Ms(v.p95), Ms(v.p99)});
  };
  row("all", s.ttft, s.server_ttft);
  for (const auto& [tier, stats] : s.ttft_by_tier) {
    row(tier, stats, s.server_ttft_by_tier.at(tier));
  }
  return absl::StrCat(out, "\n", FormatTable(rows));
}

std::string ReplaySummaryJson(const ReplaySummary& s) {
  auto lat = [](const LatencyStats& l) {
    return nlohmann::json{
        {"requests", l.requests}, {"p50", l.p50}, {"p95", l.p95}, {"p99", l.p99}, {"mean", l.mean}};
  };
  nlohmann::json j = {{"requests", s.requests},
                      {"errors", s.errors},
                      {"prompt_tokens", s.prompt_tokens},
                      {"reused", s.reused},
                      {"prefilled", s.prefilled},
                      {"completion_tokens", s.completion_tokens},
                      {"hit_ratio", s.hit_ratio},
                      {"wall_s", s.wall_s},
                      {"requests_per_s", s.requests_per_s},
                      {"prompt_tokens_per_s", s.prompt_tokens_per_s},
                      {"completion_tokens_per_s", s.completion_tokens_per_s},
                      {"ttft_ms", lat(s.ttft)},
                      {"server_ttft_ms", lat(s.server_ttft)}};
  nlohmann::json by = nlohmann::json::object(), server_by = nlohmann::json::object();
  for (const auto& [tier, stats] : s.ttft_by_tier) by[tier] = lat(stats);
  for (const auto& [tier, stats] : s.server_ttft_by_tier) server_by[tier] = lat(stats);
  j["ttft_ms_by_tier"] = by;
  j["server_ttft_ms_by_tier"] = server_by;
  return j.dump();
}

}  // namespace cairn::cache::sim
