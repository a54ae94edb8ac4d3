// `cairnctl replay` (tools/cairnctl/README.md): sends a trace through the gateway's
// /v1/completions with token-id prompts and records what every request cost.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "nlohmann/json.hpp"
#include "services/cache/sim/replay_log.h"
#include "services/cache/sim/trace.h"
#include "tools/cairnctl/command.h"
#include "tools/cairnctl/completion_stream.h"
#include "tools/cairnctl/http_client.h"
#include "tools/cairnctl/verb_flags.h"

namespace cairn::cairnctl {
namespace {

using cache::sim::ReplayRecord;
using Json = nlohmann::json;

// The Qwen3 tokenizer's ordinary tokens; ids from 151,643 up are special tokens.
constexpr int64_t kDefaultVocab = 151643;
constexpr absl::Duration kProgressInterval = absl::Milliseconds(500);
// The latest a request may be sent after the start (its arrival time / --speedup): a replay
// longer than this is a mistake (a tiny --speedup, an absurd "t"), and an infinite one would
// wait for ever.
constexpr double kMaxSendOffsetSeconds = 30 * 24 * 3600.0;
// The most --speedup may be: arrival times in microseconds of a replay.
constexpr double kMaxSpeedup = 1e6;
// The longest --timeout: a request that may take a month is no longer bounded.
constexpr absl::Duration kMaxRequestTimeout = absl::Hours(24 * 30);

struct ReplayOptions {
  std::string trace;
  std::string gateway = "http://127.0.0.1:8080";
  std::string model;  // Empty: the first model /v1/models lists.
  int concurrency = 2;
  double speedup = 1;  // 0: ignore arrival times.
  int64_t vocab = kDefaultVocab;
  int64_t max_gen = 0;  // 0: the trace's gen.
  int64_t limit = 0;    // 0: every request.
  std::string csv;
  std::string summary_json;
  absl::Duration timeout = absl::Minutes(10);
  bool progress = true;
};

// The requests of a trace, handed out in arrival order, one at a time per conversation (a
// conversation's next request waits for the previous one to finish), never before its
// arrival time / speedup. Thread-safe.
class Dispatcher {
 public:
  Dispatcher(const std::vector<cache::sim::TraceRequest>& trace, double speedup, absl::Time start)
      : trace_(trace), speedup_(speedup), start_(start) {
    std::vector<size_t> order(trace.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return trace[a].t < trace[b].t; });
    for (size_t i : order) queues_[trace[i].conv].push_back(i);
    left_ = order.size();
  }

  // Blocks until a request may be sent; returns false when none is left.
  bool Next(size_t* index) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    while (true) {
      if (left_ == 0) return false;
      const std::string* best = nullptr;
      absl::Time best_due = absl::InfiniteFuture();
      for (const auto& [conv, queue] : queues_) {
        if (queue.empty() || busy_.contains(conv)) continue;
        const absl::Time due = Due(queue.front());
        if (due < best_due) {
          best_due = due;
          best = &conv;
        }
      }
      const absl::Time now = absl::Now();
      if (best != nullptr && best_due <= now) {
        *index = queues_[*best].front();
        queues_[*best].pop_front();
        busy_.insert(*best);
        --left_;
        return true;
      }
      // Wait for a finish (which frees a conversation) or the next arrival; bounded either way.
      const absl::Duration wait =
          best == nullptr ? absl::Seconds(1) : std::min(best_due - now, absl::Seconds(1));
      cv_.WaitWithTimeout(&mu_, wait);
    }
  }

  void Done(size_t index) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    busy_.erase(trace_[index].conv);
    cv_.SignalAll();
  }

 private:
  absl::Time Due(size_t index) const {
    if (speedup_ <= 0) return start_;
    return start_ + absl::Seconds(trace_[index].t / speedup_);
  }

  const std::vector<cache::sim::TraceRequest>& trace_;
  const double speedup_;
  const absl::Time start_;
  Mutex mu_;
  CondVar cv_;
  std::map<std::string, std::deque<size_t>> queues_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> busy_ ABSL_GUARDED_BY(mu_);
  size_t left_ ABSL_GUARDED_BY(mu_) = 0;
};

// Collects the records and prints the progress line. Thread-safe.
class Recorder {
 public:
  Recorder(size_t total, bool progress, std::ostream& err)
      : total_(total), progress_(progress), err_(err), records_(total) {}

  void Add(const ReplayRecord& r) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    records_[static_cast<size_t>(r.index)] = r;
    present_.push_back(static_cast<size_t>(r.index));
    if (r.error.empty()) {
      prompt_ += r.prompt_tokens;
      reused_ += r.reused;
      ttft_.push_back(r.ttft_ms);
    } else {
      ++errors_;
    }
    const absl::Time now = absl::Now();
    if (progress_ && (now - last_print_ >= kProgressInterval || present_.size() == total_)) {
      last_print_ = now;
      err_ << absl::StrFormat(
                  "\rreplay: %zu/%zu done, %lld failed, hit ratio %.3f, ttft p50 %.0f ms    ",
                  present_.size(), total_, static_cast<long long>(errors_),
                  prompt_ > 0 ? static_cast<double>(reused_) / static_cast<double>(prompt_) : 0.0,
                  cache::sim::Percentile(ttft_, 0.5))
           << std::flush;
    }
  }

  std::vector<ReplayRecord> Records() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    std::vector<size_t> order = present_;
    std::sort(order.begin(), order.end());
    std::vector<ReplayRecord> out;
    for (size_t i : order) out.push_back(records_[i]);
    return out;
  }

 private:
  const size_t total_;
  const bool progress_;
  std::ostream& err_;
  Mutex mu_;
  std::vector<ReplayRecord> records_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> present_ ABSL_GUARDED_BY(mu_);
  int64_t prompt_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t errors_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<double> ttft_ ABSL_GUARDED_BY(mu_);
  absl::Time last_print_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// The request body of trace request `r`.
std::string RequestBody(const cache::sim::TraceRequest& r, const ReplayOptions& o,
                        const std::string& model, int64_t* prompt_tokens, int64_t* gen) {
  cache::sim::TraceOptions trace_options;
  trace_options.vocab_size = o.vocab;
  cache::sim::Prompt p = cache::sim::Materialize(r, trace_options);
  Json ids = Json::array();
  for (cache::TokenId id : p.tokens) ids.push_back(static_cast<int64_t>(id) % o.vocab);
  *prompt_tokens = static_cast<int64_t>(p.tokens.size());
  *gen = std::max<int64_t>(1, o.max_gen > 0 ? std::min(r.gen, o.max_gen) : r.gen);
  Json body = {{"model", model},
               {"prompt", ids},
               {"max_tokens", *gen},
               {"temperature", 0},
               {"ignore_eos", true},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"prompt_cache_key", r.conv}};
  // The user's strings were checked for UTF-8 up front and the trace's are parsed JSON; replace
  // anything else rather than throw.
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

ReplayRecord SendOne(HttpClient& client, const cache::sim::TraceRequest& r, size_t index,
                     const ReplayOptions& o, const std::string& model, absl::Time start) {
  ReplayRecord rec;
  rec.index = static_cast<int>(index);
  rec.line = r.line;
  rec.conv = r.conv;
  rec.t = r.t;
  const std::string body = RequestBody(r, o, model, &rec.prompt_tokens, &rec.gen_tokens);
  CompletionStream stream;
  const absl::Time sent = absl::Now();
  absl::Time first = absl::InfiniteFuture();
  rec.sent_s = absl::ToDoubleSeconds(sent - start);
  absl::StatusOr<HttpResult> result =
      client.Post("/v1/completions", body, [&](absl::string_view bytes) {
        if (stream.Feed(bytes) && first == absl::InfiniteFuture()) first = absl::Now();
      });
  const absl::Time end = absl::Now();
  rec.total_ms = absl::ToDoubleMilliseconds(end - sent);
  rec.ttft_ms = absl::ToDoubleMilliseconds((first == absl::InfiniteFuture() ? end : first) - sent);
  stream.Fill(&rec);
  if (!result.ok()) {
    rec.error = std::string(result.status().message());
  } else if (result->status != 200) {
    rec.error = absl::StrCat("http ", result->status);
  }
  return rec;
}

bool WriteFile(const std::string& path, const std::string& text, std::ostream& err) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  file.flush();
  if (!file) {
    err << "replay: cannot write " << path << "\n";
    return false;
  }
  return true;
}

}  // namespace

int RunReplay(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ReplayOptions o;
  FlagSet flags("cairnctl replay",
                "sends a trace through the gateway (/v1/completions, token-id prompts), honouring "
                "arrival times and per-conversation order, and records TTFT, tier and tokens");
  flags.Add("trace", &o.trace, "trace file (JSONL, required)");
  flags.Add("gateway", &o.gateway, "gateway URL");
  flags.Add("model", &o.model, "model name; empty: the first one /v1/models lists");
  flags.Add("concurrency", &o.concurrency, "requests in flight at most (one thread each)", 1,
            kMaxThreadsFlag);
  flags.Add("speedup", &o.speedup, "arrival times are divided by this; 0 ignores them", 0,
            kMaxSpeedup);
  flags.Add("vocab", &o.vocab, "token ids are taken modulo this (the model's ordinary tokens)", 2,
            kNoMax64);
  flags.Add("max-gen", &o.max_gen, "cap on the tokens generated per request; 0: the trace's", 0,
            kNoMax64);
  flags.Add("limit", &o.limit, "replay only the first N requests; 0: all", 0, kNoMax64);
  flags.Add("csv", &o.csv, "write one CSV row per request here");
  flags.Add("summary-json", &o.summary_json, "write the summary as JSON here");
  flags.Add("timeout", &o.timeout,
            "deadline of one request: connecting, sending and the whole streamed answer",
            absl::Milliseconds(1), kMaxRequestTimeout);
  flags.Add("progress", &o.progress, "print a live progress line on stderr");
  int code = 0;
  if (!ParseVerbFlags(flags, args, out, err, &code)) return code;
  if (o.trace.empty()) {
    err << "replay: --trace FILE is required\n";
    return 2;
  }
  if (absl::Status s = CheckUtf8(o.model, "--model"); !s.ok()) {
    err << "replay: " << s.message() << "\n";
    return 2;
  }
  absl::StatusOr<HttpUrl> url = ParseHttpUrl(o.gateway);
  if (!url.ok()) {
    err << "replay: --gateway: " << url.status().message() << "\n";
    return 2;
  }
  cache::sim::TraceOptions trace_options;
  trace_options.vocab_size = o.vocab;
  absl::StatusOr<std::vector<cache::sim::TraceRequest>> trace =
      cache::sim::ReadTraceFile(o.trace, trace_options);
  if (!trace.ok()) {
    err << "replay: " << trace.status().message() << "\n";
    return 1;
  }
  if (o.limit > 0 && static_cast<size_t>(o.limit) < trace->size()) {
    trace->resize(static_cast<size_t>(o.limit));
  }
  if (o.speedup > 0) {
    for (const cache::sim::TraceRequest& r : *trace) {
      const double offset = r.t / o.speedup;
      if (!std::isfinite(offset) || offset > kMaxSendOffsetSeconds) {
        err << "replay: " << o.trace << ":" << r.line << ": arrival time " << r.t
            << " s / --speedup " << o.speedup << " is more than 30 days after the start "
            << "(raise --speedup, or --speedup 0 to ignore arrival times)\n";
        return 2;
      }
    }
  }
  std::string model = o.model;
  if (model.empty()) {
    HttpClient probe(*url, o.timeout);
    absl::StatusOr<HttpResult> models = probe.Get("/v1/models");
    if (!models.ok() || models->status != 200) {
      err << "replay: GET /v1/models failed: "
          << (models.ok() ? absl::StrCat("http ", models->status)
                          : std::string(models.status().message()))
          << "\n";
      return 1;
    }
    Json j = Json::parse(models->body, nullptr, false);
    if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
        !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
      err << "replay: /v1/models lists no model\n";
      return 1;
    }
    model = j["data"][0]["id"].get<std::string>();
  }

  const absl::Time start = absl::Now();
  Dispatcher dispatcher(*trace, o.speedup, start);
  Recorder recorder(trace->size(), o.progress, err);
  std::vector<std::thread> workers;
  for (int w = 0; w < o.concurrency; ++w) {
    // std::thread throws when the system refuses a thread; go on with those that started.
    try {
      workers.emplace_back([&] {
        HttpClient client(*url, o.timeout);
        size_t index = 0;
        while (dispatcher.Next(&index)) {
          recorder.Add(SendOne(client, (*trace)[index], index, o, model, start));
          dispatcher.Done(index);
        }
      });
    } catch (const std::system_error& e) {
      err << "replay: could not start thread " << w + 1 << " of --concurrency " << o.concurrency
          << ": " << e.what() << (workers.empty() ? "\n" : "; going on with fewer\n");
      break;
    }
  }
  if (workers.empty()) return 1;
  for (std::thread& t : workers) t.join();
  if (o.progress) err << "\n";

  std::vector<ReplayRecord> records = recorder.Records();
  if (!o.csv.empty()) {
    std::string text = cache::sim::ReplayCsvHeader() + "\n";
    for (const ReplayRecord& r : records) text += cache::sim::ReplayCsvLine(r) + "\n";
    if (!WriteFile(o.csv, text, err)) return 1;
  }
  cache::sim::ReplaySummary summary = cache::sim::Summarize(records);
  if (!o.summary_json.empty() &&
      !WriteFile(o.summary_json, cache::sim::ReplaySummaryJson(summary) + "\n", err)) {
    return 1;
  }
  out << cache::sim::FormatReplaySummary(summary);
  for (const ReplayRecord& r : records) {
    if (!r.error.empty()) {
      err << "replay: first failure: request " << r.index << " (line " << r.line << "): " << r.error
          << "\n";
      break;
    }
  }
  return summary.errors > 0 ? 1 : 0;
}

}  // namespace cairn::cairnctl
