#include "services/cache/sim/report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace cairn::cache::sim {

using Json = nlohmann::json;

namespace {

std::string Seconds(double ms) { return absl::StrFormat("%.2fs", ms / 1000.0); }
std::string Ratio(double r) { return absl::StrFormat("%.2fx", r); }
std::string Gb(int64_t bytes) {
  return absl::StrFormat("%.2f GB", static_cast<double>(bytes) / 1e9);
}

}  // namespace

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      std::string cell = row[i];
      // First column left-aligned, numbers right-aligned.
      std::string pad(widths[i] - cell.size(), ' ');
      absl::StrAppend(&line, i == 0 ? cell + pad : pad + cell, i + 1 < row.size() ? "  " : "");
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string FormatRequestLine(const RequestReport& rep) {
  const RequestResult& r = rep.result;
  std::string restored = r.restored_tier == Tier::kNone
                             ? "cold"
                             : absl::StrCat(TierName(r.restored_tier), "@", r.restored_depth);
  std::string out =
      absl::StrCat("#", rep.index, " conv ", rep.conv, " t ", absl::StrFormat("%.1fs", rep.t),
                   " prompt ", rep.prompt_tokens, " restored ", restored, " prefilled ",
                   r.prefilled, " ttft ", Seconds(rep.ttft_ms));
  if (!r.captures.empty()) {
    absl::StrAppend(&out, " captures ",
                    absl::StrJoin(r.captures, ",", [](std::string* s, const SimCapture& c) {
                      absl::StrAppend(s, c.pos, ":", CaptureKindName(c.kind));
                    }));
  }
  if (!r.evicted.empty()) {
    absl::StrAppend(&out, " evicted ",
                    absl::StrJoin(r.evicted, ",", [](std::string* s, const SimEviction& e) {
                      absl::StrAppend(s, e.id, ":", e.reason);
                    }));
  }
  return out;
}

std::string FormatTotals(const Totals& t) {
  return FormatTable({
      {"policy", t.policy},
      {"requests", absl::StrCat(t.requests)},
      {"prompt tokens", absl::StrCat(t.prompt_tokens)},
      {"tokens prefilled", absl::StrCat(t.prefilled)},
      {"hit ratio", absl::StrFormat("%.3f", t.hit_ratio)},
      {"restored live/ram/disk/cold",
       absl::StrCat(t.restored_live, "/", t.restored_ram, "/", t.restored_disk, "/", t.cold)},
      {"captures", absl::StrCat(t.captures)},
      {"evictions", absl::StrCat(t.evictions)},
      {"ttft total", Seconds(t.ttft_ms_total)},
      {"ttft mean / p50 / p95", absl::StrCat(Seconds(t.ttft_ms_mean), " / ", Seconds(t.ttft_ms_p50),
                                             " / ", Seconds(t.ttft_ms_p95))},
      {"peak bytes", absl::StrCat(t.peak_bytes, " (", Gb(t.peak_bytes), ")")},
      {"oracle prefilled / ratio", absl::StrCat(t.oracle_prefilled, " / ", Ratio(t.vs_oracle))},
  });
}

std::string FormatComparison(const std::vector<Totals>& totals) {
  std::vector<std::vector<std::string>> rows = {{"policy", "prompt tok", "prefilled", "hit ratio",
                                                 "live/ram/disk/cold", "ttft mean", "ttft p95",
                                                 "ttft total", "peak", "/ oracle"}};
  for (const Totals& t : totals) {
    rows.push_back(
        {t.policy, absl::StrCat(t.prompt_tokens), absl::StrCat(t.prefilled),
         absl::StrFormat("%.3f", t.hit_ratio),
         absl::StrCat(t.restored_live, "/", t.restored_ram, "/", t.restored_disk, "/", t.cold),
         Seconds(t.ttft_ms_mean), Seconds(t.ttft_ms_p95), Seconds(t.ttft_ms_total),
         Gb(t.peak_bytes), Ratio(t.vs_oracle)});
  }
  return FormatTable(rows);
}

std::string RequestJson(const RequestReport& rep, absl::string_view policy) {
  const RequestResult& r = rep.result;
  Json j;
  j["policy"] = std::string(policy);
  j["index"] = rep.index;
  j["line"] = rep.line;
  j["conv"] = rep.conv;
  j["prompt_tokens"] = rep.prompt_tokens;
  j["restored_tier"] = std::string(TierName(r.restored_tier));
  j["restored_depth"] = r.restored_depth;
  j["prefilled"] = r.prefilled;
  Json captures = Json::array();
  for (const SimCapture& c : r.captures) {
    captures.push_back({{"pos", c.pos}, {"kind", std::string(CaptureKindName(c.kind))}});
  }
  j["captures"] = std::move(captures);
  Json evicted = Json::array();
  for (const SimEviction& e : r.evicted) {
    Json one = {{"id", e.id}, {"reason", e.reason}};
    if (!e.conv.empty()) one["conv"] = e.conv;
    if (e.depth >= 0) one["depth"] = e.depth;
    evicted.push_back(std::move(one));
  }
  j["evicted"] = std::move(evicted);
  j["ttft_ms"] = rep.ttft_ms;
  j["restore_ms"] = rep.restore_ms;
  j["prefill_ms"] = rep.prefill_ms;
  j["bytes_in_use"] = rep.bytes_in_use;
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string TotalsJson(const Totals& t) {
  Json j;
  j["policy"] = t.policy;
  j["requests"] = t.requests;
  j["prompt_tokens"] = t.prompt_tokens;
  j["tokens_prefilled"] = t.prefilled;
  j["tokens_reused"] = t.reused;
  j["hit_ratio"] = t.hit_ratio;
  j["restored_live"] = t.restored_live;
  j["restored_ram"] = t.restored_ram;
  j["restored_disk"] = t.restored_disk;
  j["cold"] = t.cold;
  j["captures"] = t.captures;
  j["evictions"] = t.evictions;
  j["ttft_ms_total"] = t.ttft_ms_total;
  j["ttft_ms_mean"] = t.ttft_ms_mean;
  j["ttft_ms_p50"] = t.ttft_ms_p50;
  j["ttft_ms_p95"] = t.ttft_ms_p95;
  j["peak_bytes"] = t.peak_bytes;
  j["oracle_prefilled"] = t.oracle_prefilled;
  j["vs_oracle"] = t.vs_oracle;
  Json out;
  out["totals"] = std::move(j);
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace cairn::cache::sim
