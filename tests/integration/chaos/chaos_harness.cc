#include "tests/integration/chaos/chaos_harness.h"

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cairn/cache/v1/cache.grpc.pb.h"
#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/concurrency/mutex.h"
#include "common/grpc/client.h"
#include "common/process/child_process.h"
#include "common/status/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/tokenizer.h"
#include "tests/integration/services/gateway/http_test_client.h"
#include "tests/integration/services/infer/infer_harness.h"
#include "tests/support/free_port.h"
#include "tests/unit/services/infer/models/model_test_util.h"

namespace cairn::chaos {
namespace {

namespace infer_v1 = ::cairn::infer::v1;
namespace cache_v1 = ::cairn::cache::v1;
using ::cairn::gateway::testing::HttpResult;
using ::cairn::gateway::testing::HttpTestClient;
using infer::testing::ReferenceRun;
using Json = nlohmann::json;

constexpr int64_t kPromptVocab = 1024;  // Token-id prompts draw from the first ids.
constexpr int64_t kSharedPrefix = 256;  // A system prompt every token-id conversation sends.
constexpr int kSystemWords = 100;       // The chat conversations' shared system prompt.
constexpr int kTaskWords = 60;          // A chat conversation's first user message (and more).
constexpr int kTurnWords = 20;          // A tool result or follow-up between turns.
constexpr int kWarmupCycles = 3;        // Usage is compared from here to the end of a phase.
constexpr int kMaxFdGrowth = 16;
// How much a survivor's resident memory may grow over a phase. Under a sanitizer freed memory
// sits in a quarantine (ASan's holds 256 MiB of freed user bytes, with chunk headers, redzones
// and shadow memory on top) until it is full, so a survivor of a sanitizer build grows whether
// or not it leaks: by 97-118 MiB in a phase of 20 kills at the soak's asan shards, and the
// overload test measured +359 and +372 MiB for a full quarantine, +8 MiB with
// ASAN_OPTIONS=quarantine_size_mb=8. The quarantine is left at its size (a smaller one catches
// fewer uses after free), so there only a gross leak is caught here; LeakSanitizer checks the
// survivors at their exit, when the harness stops them at the end.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kMaxRssGrowth = int64_t{512} << 20;
#else
constexpr int64_t kMaxRssGrowth = int64_t{96} << 20;
#endif
constexpr absl::Duration kStartTimeout = absl::Seconds(60);
constexpr absl::Duration kIdleTimeout = absl::Seconds(30);
constexpr absl::Duration kRetryPause = absl::Milliseconds(50);
constexpr absl::Duration kPollInterval = absl::Milliseconds(50);
constexpr absl::Duration kAnswerPollInterval = absl::Milliseconds(2);

enum class Api { kChat, kCompletions };

// One turn of a conversation and what the uncached greedy run of its rendered prompt gives.
struct Turn {
  Api api = Api::kChat;
  Json prompt;  // The "messages" (chat) or the "prompt" token ids (completions).
  size_t prompt_tokens = 0;
  ReferenceRun expected;
  std::vector<Json> expected_bytes;  // Each expected token's bytes, as OpenAI's logprobs give.
};
using Script = std::vector<std::vector<Turn>>;  // [conversation][turn].

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// `n` pseudo-words of lower-case letters, the same for the same seed.
std::string Words(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += ' ';
    const int letters = 3 + static_cast<int>(rng() % 6);
    for (int k = 0; k < letters; ++k) out += static_cast<char>('a' + rng() % 26);
  }
  return out;
}

// OpenAI's logprob "bytes" of a token: its bytes as integers, null when it has none.
Json BytesJson(const std::string& raw) {
  if (raw.empty()) return nullptr;
  Json out = Json::array();
  for (unsigned char c : raw) out.push_back(static_cast<int>(c));
  return out;
}

// What the gateway renders `messages` to, through its /tokenize route (the same parsing and
// chat template as a chat completion).
absl::StatusOr<std::vector<int32_t>> Render(int port, const Json& messages) {
  HttpTestClient client(port, absl::Seconds(30));
  HttpResult r = client.Post("/tokenize", Json{{"messages", messages}}.dump());
  const Json body = r.json();
  if (r.status != 200 || !body.contains("tokens")) {
    return absl::InternalError(
        absl::StrCat("/tokenize answered ", r.status, " ", r.error, " ", r.body.substr(0, 200)));
  }
  return body["tokens"].get<std::vector<int32_t>>();
}

// Agent conversations. Even ones chat: a shared system prompt, a task, then turns that append
// the answer and a follow-up of kTurnWords words. Odd ones send token ids: a shared system
// prompt of kSharedPrefix tokens, a task, then turns that append the answer and a tool result
// of ~50 tokens. Each prompt's expected answer comes from an uncached run of the prompt as the
// gateway renders it.
absl::StatusOr<Script> MakeScript(const std::string& model_dir, const ChaosOptions& o, int port) {
  ASSIGN_OR_RETURN(std::unique_ptr<infer::text::Tokenizer> tokenizer,
                   infer::text::Tokenizer::FromFile(model_dir + "/tokenizer.json"));
  const std::vector<int32_t> system =
      infer::testing::RandomTokens(kSharedPrefix, kPromptVocab, o.seed);
  Script script(static_cast<size_t>(o.conversations));
  for (int c = 0; c < o.conversations; ++c) {
    const uint64_t seed = o.seed * 1000 + 10 * c;
    const Api api = c % 2 == 0 ? Api::kChat : Api::kCompletions;
    Json messages =
        Json::array({{{"role", "system"}, {"content", Words(kSystemWords, o.seed)}},
                     {{"role", "user"}, {"content", Words(kTaskWords + 30 * c, seed)}}});
    std::vector<int32_t> ids =
        Concat(system, infer::testing::RandomTokens(200 + 90 * c, kPromptVocab, seed));
    for (int t = 0; t < o.turns; ++t) {
      Turn turn;
      turn.api = api;
      if (api == Api::kChat) {
        ASSIGN_OR_RETURN(ids, Render(port, messages));
        turn.prompt = messages;
      } else {
        turn.prompt = ids;
      }
      turn.prompt_tokens = ids.size();
      ASSIGN_OR_RETURN(turn.expected, infer::testing::RunReference(
                                          model_dir, {ids}, static_cast<int>(o.answer_tokens),
                                          /*pass_invariant=*/true));
      std::vector<int32_t> answer(turn.expected.tokens.begin(), turn.expected.tokens.end());
      // The random model may pick one of the embedding rows past the tokenizer's vocabulary
      // (Qwen3 pads it): such a token has no bytes and no text.
      std::vector<int32_t> known;
      for (int32_t id : answer) {
        absl::StatusOr<std::string> raw = tokenizer->DecodeBytes(absl::MakeConstSpan(&id, 1));
        turn.expected_bytes.push_back(BytesJson(raw.ok() ? *raw : ""));
        if (raw.ok()) known.push_back(id);
      }
      if (api == Api::kChat) {
        ASSIGN_OR_RETURN(std::string text, tokenizer->Decode(known, /*skip_special=*/true));
        messages.push_back({{"role", "assistant"}, {"content", text}});
        messages.push_back({{"role", "user"}, {"content", Words(kTurnWords, seed + t + 1)}});
      } else {
        ids = Concat(Concat(ids, answer),
                     infer::testing::RandomTokens(50, kPromptVocab, seed + t + 1));
      }
      script[c].push_back(std::move(turn));
    }
  }
  return script;
}

ProcessUsage UsageOf(pid_t pid) {
  ProcessUsage u;
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream in(line.substr(6));
      int64_t kib = 0;
      in >> kib;
      u.rss_bytes = kib * 1024;
    }
  }
  if (DIR* d = ::opendir(absl::StrCat("/proc/", pid, "/fd").c_str())) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++u.fds;
    }
    ::closedir(d);
  }
  return u;
}

// The three daemons, their addresses and restarts.
class Daemons {
 public:
  Daemons(const std::string& dir, const std::string& model_dir, const ChaosOptions& o, int port)
      : port_(port),
        disk_dir_(dir + "/disk"),
        cache_({std::string(CAIRN_BINARY_DIR) + "/services/cache/cairn-cache",
                "--listen=unix:" + dir + "/cache.sock", "--arena-socket=" + dir + "/arena.sock",
                "--cache-ram-bytes=16Mi", "--cache-disk=" + disk_dir_, "--cache-disk-bytes=1Gi",
                "--log-level=error"},
               "unix:" + dir + "/cache.sock"),
        infer_({std::string(CAIRN_BINARY_DIR) + "/services/infer/daemon/cairn-infer",
                "--model=" + model_dir, "--sessions=" + std::to_string(o.slots),
                "--cache=unix:" + dir + "/cache.sock", "--listen=unix:" + dir + "/infer.sock",
                "--threads=1", "--context=4096", "--numerics=pass-invariant",
                "--max-pass-tokens=256", "--log-level=error"},
               "unix:" + dir + "/infer.sock"),
        // The gateway also watches the cache (its dashboard and /metrics), as in production.
        gateway_(
            {std::string(CAIRN_BINARY_DIR) + "/services/gateway/cairn-gateway",
             absl::StrCat("--listen=127.0.0.1:", port), "--infer=unix:" + dir + "/infer.sock",
             "--cache=unix:" + dir + "/cache.sock", "--refresh-interval=200ms", "--retry-after=1",
             "--generate-timeout=" + absl::FormatDuration(2 * o.request_bound),
             "--log-level=error"},
            "") {}

  ChildProcess& cache() { return cache_; }
  ChildProcess& infer() { return infer_; }
  ChildProcess& gateway() { return gateway_; }
  int port() const { return port_; }

  absl::Status Start(ChildProcess& p) {
    RETURN_IF_ERROR(p.Start());
    if (&p == &gateway_) return WaitGatewayReady();
    return p.WaitServing(kStartTimeout);
  }

  // Waits until the gateway answers /health with 200 (it has a ready cairn-infer).
  absl::Status WaitGatewayReady() {
    const absl::Time deadline = absl::Now() + kStartTimeout;
    while (absl::Now() < deadline) {
      HttpTestClient client(port_, absl::Seconds(2));
      if (client.Get("/health").status == 200) return absl::OkStatus();
      absl::SleepFor(kPollInterval);  // Polling another process's start.
    }
    return absl::DeadlineExceededError("cairn-gateway never reported a ready daemon on /health");
  }

  // Waits until cairn-infer reports its cache session (after either restarts).
  absl::Status WaitCacheConnected() {
    auto stub = infer_v1::InferService::NewStub(NewLocalChannel(infer_.address()));
    const absl::Time deadline = absl::Now() + kStartTimeout;
    while (absl::Now() < deadline) {
      auto ctx = NewClientContext(absl::Seconds(2));
      infer_v1::GetModelInfoResponse info;
      if (stub->GetModelInfo(ctx.get(), {}, &info).ok() && info.cache_connected()) {
        return absl::OkStatus();
      }
      absl::SleepFor(kPollInterval);  // Polling another process's reconnect.
    }
    return absl::DeadlineExceededError("cairn-infer never reconnected to cairn-cache");
  }

  // Waits until every slot of cairn-infer is idle and nothing is queued.
  absl::Status WaitSlotsIdle() {
    auto stub = infer_v1::InferService::NewStub(NewLocalChannel(infer_.address()));
    const absl::Time deadline = absl::Now() + kIdleTimeout;
    std::string last = "no answer";
    while (absl::Now() < deadline) {
      auto ctx = NewClientContext(absl::Seconds(2));
      infer_v1::ListSlotsResponse slots;
      if (stub->ListSlots(ctx.get(), {}, &slots).ok()) {
        const int busy = static_cast<int>(std::count_if(
            slots.slots().begin(), slots.slots().end(),
            [](const auto& s) { return s.state() != infer_v1::SlotInfo::STATE_IDLE; }));
        if (busy == 0 && slots.queued_requests() == 0) return absl::OkStatus();
        last = absl::StrCat(busy, " slots busy, ", slots.queued_requests(), " queued");
      }
      absl::SleepFor(kPollInterval);  // Polling another process's slots.
    }
    return absl::DeadlineExceededError(absl::StrCat("cairn-infer after the load: ", last));
  }

  // The checkpoints cairn-cache reports on disk.
  absl::StatusOr<std::set<uint64_t>> OnDisk() {
    auto stub = cache_v1::CacheService::NewStub(NewLocalChannel(cache_.address()));
    auto ctx = NewClientContext(absl::Seconds(10));
    cache_v1::ListCheckpointsResponse list;
    grpc::Status s = stub->ListCheckpoints(ctx.get(), {}, &list);
    if (!s.ok()) return absl::UnavailableError(s.error_message());
    std::set<uint64_t> out;
    for (const auto& c : list.checkpoints()) {
      if (c.on_disk()) out.insert(c.checkpoint_id());
    }
    return out;
  }

  // Whether a disk publish was cut short: a manifest still under its temporary name (call
  // while cairn-cache is dead, so that nothing moves).
  bool PublishInterrupted() const {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(disk_dir_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (absl::EndsWith(it->path().filename().string(), ".tmp")) return true;
    }
    return false;
  }

 private:
  const int port_;
  const std::string disk_dir_;
  ChildProcess cache_;
  ChildProcess infer_;
  ChildProcess gateway_;
};

// What one HTTP exchange with the gateway gave, parsed from a JSON body or an SSE stream.
struct Answer {
  int status = 0;  // 0: no HTTP response (see transport_error).
  std::string transport_error;
  bool retry_after = false;  // The response carried Retry-After.
  bool done = false;         // A JSON body with choices, or a stream that ended with [DONE].
  std::string error_code;    // From an error body or an error event ("unavailable", ...).
  std::string error_message;
  std::vector<uint32_t> ids;  // Completions: the generated token ids.
  std::vector<float> logprobs;
  std::vector<Json> bytes;    // Chat: each token's bytes.
  std::string tier = "cold";  // The "cairn" object's restore tier.
};

// Adds one choice (a whole answer, or one stream chunk's) to `a`.
void AddChoice(const Json& choice, Api api, Answer* a) {
  const Json& lp = choice.contains("logprobs") ? choice["logprobs"] : Json();
  if (api == Api::kChat) {
    if (lp.is_object() && lp.contains("content") && lp["content"].is_array()) {
      for (const Json& entry : lp["content"]) {
        a->logprobs.push_back(entry.value("logprob", 0.0f));
        a->bytes.push_back(entry.contains("bytes") ? entry["bytes"] : Json());
      }
    }
    return;
  }
  if (choice.contains("token_ids") && choice["token_ids"].is_array()) {
    for (const Json& id : choice["token_ids"]) a->ids.push_back(id.get<uint32_t>());
  }
  if (lp.is_object() && lp.contains("token_logprobs") && lp["token_logprobs"].is_array()) {
    for (const Json& v : lp["token_logprobs"]) a->logprobs.push_back(v.get<float>());
  }
}

// Reads the "error" object or the "cairn" object of a body or chunk into `a`.
void AddTopLevel(const Json& j, Answer* a) {
  if (j.contains("error") && j["error"].is_object()) {
    // Not a string (null, say): an empty code, which Record reports as a bad error, rather than
    // an exception that ends the harness with its daemons still running.
    const Json& error = j["error"];
    const auto text = [&](const char* key) {
      return error.contains(key) && error[key].is_string() ? error[key].get<std::string>()
                                                           : std::string();
    };
    a->error_code = text("code");
    a->error_message = text("message");
  }
  if (j.contains("cairn") && j["cairn"].is_object()) a->tier = j["cairn"].value("tier", "cold");
}

Answer Parse(const HttpResult& r, bool stream, Api api) {
  Answer a;
  a.status = r.status;
  a.transport_error = r.error;
  a.retry_after = r.headers.contains("retry-after");
  if (r.status != 200 || !stream) {
    const Json j = r.json();
    if (!j.is_object()) return a;
    AddTopLevel(j, &a);
    if (r.status == 200 && j.contains("choices") && j["choices"].is_array() &&
        !j["choices"].empty()) {
      AddChoice(j["choices"][0], api, &a);
      a.done = true;
    }
    return a;
  }
  for (const gateway::testing::SseEvent& e : gateway::testing::ParseSse(r.body)) {
    if (e.data == "[DONE]") {
      a.done = true;
      continue;
    }
    const Json j = Json::parse(e.data, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;
    AddTopLevel(j, &a);
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      AddChoice(j["choices"][0], api, &a);
    }
  }
  return a;
}

bool SameLogprobs(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The replayed agent load: one thread per conversation, each sending its turns in order through
// the gateway (streamed and not, in turn) and starting over after the last; a failed turn is
// sent again.
class Load {
 public:
  Load(const Script& script, const ChaosOptions& o, int port)
      : script_(script), options_(o), port_(port) {}
  ~Load() { Stop(); }

  void Start() {
    for (size_t c = 0; c < script_.size(); ++c) {
      threads_.emplace_back([this, c] { Run(c); });
    }
  }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  int in_flight() const { return in_flight_.load(); }
  int64_t answers() const { return answers_.load(); }  // Requests completed so far.
  // Failures from now on count for `phase`.
  void BeginPhase(const std::string& phase) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    phase_ = phase;
  }
  // The gateway is about to be killed / serves again: connection errors of requests that
  // overlap a kill are the expected failure.
  void GatewayDown() { ++gateway_epoch_; }
  void GatewayUp() { ++gateway_epoch_; }
  // Adds this load's counts and findings to `report`.
  void AddTo(ChaosReport* report) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    report->completed += report_.completed;
    report->completed_streamed += report_.completed_streamed;
    report->completed_chat += report_.completed_chat;
    report->retried += report_.retried;
    report->restored += report_.restored;
    report->restored_from_disk += report_.restored_from_disk;
    report->slowest_failure = std::max(report->slowest_failure, report_.slowest_failure);
    for (auto& s : report_.wrong_outputs) report->wrong_outputs.push_back(s);
    for (auto& s : report_.bad_errors) report->bad_errors.push_back(s);
    report->failures = report_.failures;
  }

 private:
  // The request body of `turn`.
  std::string Body(const Turn& turn, size_t c, bool stream) const {
    Json body = {{"model", "chaos"}, {"max_tokens", options_.answer_tokens},
                 {"temperature", 0}, {"ignore_eos", true},
                 {"stream", stream}, {"prompt_cache_key", absl::StrCat("agent-", c)}};
    if (turn.api == Api::kChat) {
      body["messages"] = turn.prompt;
      body["logprobs"] = true;
    } else {
      body["prompt"] = turn.prompt;
      body["logprobs"] = 1;
      body["return_token_ids"] = true;
    }
    return body.dump();
  }

  void Run(size_t c) {
    size_t t = 0;
    int64_t sent = 0;
    while (!stop_) {
      const Turn& turn = script_[c][t];
      const bool stream = sent++ % 2 == 0;
      const std::string path = turn.api == Api::kChat ? "/v1/chat/completions" : "/v1/completions";
      const int64_t epoch = gateway_epoch_.load();
      const absl::Time start = absl::Now();
      ++in_flight_;
      HttpResult r;
      {
        HttpTestClient client(port_, 2 * options_.request_bound);
        r = client.Post(path, Body(turn, c, stream));
      }
      --in_flight_;
      const absl::Duration took = absl::Now() - start;
      // Down when sent (odd epoch), or killed while the request ran.
      const bool gateway_killed = epoch % 2 == 1 || gateway_epoch_.load() != epoch;
      const bool ok =
          Record(Parse(r, stream, turn.api), turn, stream, took, gateway_killed,
                 absl::StrCat("conversation ", c, " turn ", t, " (", turn.prompt_tokens,
                              " prompt tokens, ", stream ? "streamed" : "not streamed", ")"));
      if (ok) {
        ++answers_;
        t = (t + 1) % script_[c].size();
      } else {
        absl::SleepFor(kRetryPause);  // A client's pause before retrying, not synchronisation.
      }
    }
  }

  // Checks one answer against the oracle. Returns whether the request completed.
  bool Record(const Answer& a, const Turn& turn, bool stream, absl::Duration took,
              bool gateway_killed, const std::string& what) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    const bool completed = a.status == 200 && a.done && a.error_code.empty();
    if (completed) {
      ++report_.completed;
      if (stream) ++report_.completed_streamed;
      if (turn.api == Api::kChat) ++report_.completed_chat;
      if (a.tier == "ram" || a.tier == "disk") ++report_.restored;
      if (a.tier == "disk") ++report_.restored_from_disk;
      const bool same_tokens =
          turn.api == Api::kChat ? a.bytes == turn.expected_bytes : a.ids == turn.expected.tokens;
      if (!same_tokens || !SameLogprobs(a.logprobs, turn.expected.logprobs)) {
        report_.wrong_outputs.push_back(absl::StrCat(
            what, ": the answer differs from the uncached run (restored from tier ", a.tier, ")"));
      }
      return true;
    }
    const std::string cut = a.error_message.substr(0, a.error_message.find(':'));
    std::string kind;
    if (took > options_.request_bound) {
      kind = "";  // A hang, whatever it ended with.
    } else if (a.status == 503 && a.retry_after && a.error_code == "unavailable") {
      kind = absl::StrCat("http 503: ", cut);
    } else if (a.status == 200 && a.error_code == "unavailable") {
      kind = absl::StrCat("stream: ", cut);
    } else if (a.status == 0 && gateway_killed) {
      kind = absl::StrCat("connection: ", a.transport_error);
    }
    if (kind.empty()) {
      report_.bad_errors.push_back(absl::StrCat(
          what, ": HTTP ", a.status, " code \"", a.error_code, "\" \"", a.error_message,
          "\" transport \"", a.transport_error, "\"", a.retry_after ? " with" : " without",
          " Retry-After after ", absl::FormatDuration(took)));
      return false;
    }
    ++report_.retried;
    report_.slowest_failure = std::max(report_.slowest_failure, took);
    ++report_.failures[phase_][kind];
    return false;
  }

  const Script& script_;
  const ChaosOptions options_;
  const int port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<int64_t> answers_{0};
  std::atomic<int64_t> gateway_epoch_{0};  // Odd while the gateway is down.
  std::vector<std::thread> threads_;
  Mutex mu_;
  std::string phase_ ABSL_GUARDED_BY(mu_);
  ChaosReport report_ ABSL_GUARDED_BY(mu_);
};

// Checks that a surviving daemon's usage stayed flat over its phase.
void CheckFlat(const SurvivorUsage& u, ChaosReport* report) {
  const std::string who = absl::StrCat(u.daemon, " while killing ", u.phase);
  if (u.end.fds > u.start.fds + kMaxFdGrowth) {
    report->leaks.push_back(
        absl::StrCat(who, ": open descriptors grew from ", u.start.fds, " to ", u.end.fds));
  }
  if (u.end.rss_bytes > u.start.rss_bytes + kMaxRssGrowth) {
    report->leaks.push_back(absl::StrCat(who, ": resident memory grew from ",
                                         u.start.rss_bytes >> 20, " MiB to ", u.end.rss_bytes >> 20,
                                         " MiB"));
  }
}

// Waits until the load has completed more than `answers` requests or `until` passes; returns
// whether it had.
bool WaitForAnswer(const Load& load, int64_t answers, absl::Time until) {
  while (load.answers() == answers && absl::Now() < until) {
    absl::SleepFor(kAnswerPollInterval);  // Watching the load, not synchronising.
  }
  return load.answers() != answers;
}

// One phase: the daemon killed, the ones that survive, and how often.
struct Phase {
  std::string name;
  ChildProcess* victim;
  std::vector<std::pair<std::string, ChildProcess*>> survivors;
  int kills;
  int* survived;  // The report's count.
};

}  // namespace

absl::StatusOr<ChaosReport> RunChaos(const ChaosOptions& o) {
  const std::string dir = o.work_dir;
  if (std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot create ", dir));
  }
  ASSIGN_OR_RETURN(std::string model_dir,
                   infer::testing::MakeModelFolder("dense", /*qwen3_text=*/true, "chaos-model"));
  const int port = ::cairn::testing::FreeLoopbackPort();
  if (port == 0) return absl::UnavailableError("no free TCP port on 127.0.0.1");

  Daemons daemons(dir, model_dir, o, port);
  RETURN_IF_ERROR(daemons.Start(daemons.cache()));
  RETURN_IF_ERROR(daemons.Start(daemons.infer()));
  RETURN_IF_ERROR(daemons.WaitCacheConnected());
  RETURN_IF_ERROR(daemons.Start(daemons.gateway()));
  ASSIGN_OR_RETURN(Script script, MakeScript(model_dir, o, port));

  ChaosReport report;
  std::mt19937_64 rng(o.seed);
  auto random_run = [&] {
    std::uniform_int_distribution<int64_t> ms(absl::ToInt64Milliseconds(o.min_run),
                                              absl::ToInt64Milliseconds(o.max_run));
    return absl::Milliseconds(ms(rng));
  };
  Load load(script, o, port);
  load.Start();

  ChildProcess* cache = &daemons.cache();
  ChildProcess* infer = &daemons.infer();
  ChildProcess* gateway = &daemons.gateway();
  const std::vector<Phase> phases = {
      // cairn-infer must keep serving without the cache and reconnect.
      {"cairn-cache",
       cache,
       {{"cairn-infer", infer}, {"cairn-gateway", gateway}},
       o.cache_kills,
       &report.cache_kills},
      // cairn-cache keeps its checkpoints and reclaims the sessions; the gateway answers 503.
      {"cairn-infer",
       infer,
       {{"cairn-cache", cache}, {"cairn-gateway", gateway}},
       o.infer_kills,
       &report.infer_kills},
      // The daemons behind it cancel what the dead gateway had asked for.
      {"cairn-gateway",
       gateway,
       {{"cairn-cache", cache}, {"cairn-infer", infer}},
       o.gateway_kills,
       &report.gateway_kills},
  };
  for (const Phase& phase : phases) {
    load.BeginPhase(phase.name);
    std::vector<SurvivorUsage> usage;
    for (const auto& survivor : phase.survivors)
      usage.push_back({phase.name, survivor.first, {}, {}});
    const absl::Time phase_start = absl::Now();
    // The load's completed requests when the victim last served again.
    int64_t answers_when_serving = load.answers();
    for (int k = 0; k < phase.kills; ++k) {
      // The random point of the kill. Every other cache kill lands earlier, as soon as an answer
      // completes: its slot goes idle and the disk writer, which yields to busy slots, publishes
      // the request's captures then.
      const absl::Time until = absl::Now() + random_run();
      const bool after_answer = phase.victim == cache && k % 2 == 1;
      const int64_t answers = load.answers();
      if (after_answer) {
        WaitForAnswer(load, answers, until);
      } else {
        absl::SleepFor(until - absl::Now());
      }
      // Not before the load has completed a request since the restart (see ChaosOptions).
      if (load.answers() == answers_when_serving) {
        ++report.kills_held_for_progress;
        if (!WaitForAnswer(load, answers_when_serving, absl::Now() + o.request_bound)) {
          ++report.kills_without_progress;
        }
      }
      if (after_answer && load.answers() != answers) ++report.cache_kills_after_answer;
      absl::StatusOr<std::set<uint64_t>> acknowledged;
      if (phase.victim == cache) acknowledged = daemons.OnDisk();
      if (load.in_flight() > 0) ++report.kills_mid_stream;
      if (phase.victim == gateway) load.GatewayDown();
      const absl::Time killed = absl::Now();
      phase.victim->Kill();
      if (phase.victim == cache && daemons.PublishInterrupted()) ++report.cache_kills_mid_publish;
      RETURN_IF_ERROR(daemons.Start(*phase.victim));
      if (phase.victim == gateway) {
        load.GatewayUp();
      } else {
        RETURN_IF_ERROR(daemons.WaitCacheConnected());
      }
      ++*phase.survived;
      answers_when_serving = load.answers();
      const absl::Duration restart = absl::Now() - killed;
      report.restart_total[phase.name] += restart;
      report.restart_slowest[phase.name] = std::max(report.restart_slowest[phase.name], restart);
      if (phase.victim == cache) {
        absl::StatusOr<std::set<uint64_t>> after = daemons.OnDisk();
        if (acknowledged.ok() && after.ok()) {
          report.checkpoints_on_disk =
              std::max<int64_t>(report.checkpoints_on_disk, static_cast<int64_t>(after->size()));
          for (uint64_t id : *acknowledged) {
            if (!after->contains(id)) {
              report.lost_checkpoints.push_back(
                  absl::StrCat("checkpoint ", id, " was on disk before cache kill ", k + 1,
                               " and missing after the restart"));
            }
          }
        }
      }
      for (size_t i = 0; i < usage.size(); ++i) {
        const ProcessUsage now = UsageOf(phase.survivors[i].second->pid());
        if (k == std::min(kWarmupCycles, phase.kills - 1)) usage[i].start = now;
        usage[i].end = now;
      }
    }
    report.phase_length[phase.name] = absl::Now() - phase_start;
    for (const SurvivorUsage& u : usage) {
      CheckFlat(u, &report);
      report.usage.push_back(u);
    }
  }
  load.Stop();
  load.AddTo(&report);
  if (absl::Status idle = daemons.WaitSlotsIdle(); !idle.ok()) {
    report.leaks.push_back(std::string(idle.message()));
  }
  // A clean shutdown exits 0; under a sanitizer LeakSanitizer checks each daemon at its exit
  // and makes a leak its exit code.
  for (const auto& [name, daemon] :
       {std::pair<std::string, ChildProcess*>{"cairn-gateway", gateway},
        {"cairn-infer", infer},
        {"cairn-cache", cache}}) {
    if (const int code = daemon->Terminate(); code != 0) {
      report.leaks.push_back(absl::StrCat(name, " exited with ", code,
                                          " after SIGTERM (a leak, under LeakSanitizer)"));
    }
  }
  return report;
}

std::string FormatReport(const ChaosReport& r) {
  std::string out = absl::StrFormat(
      "chaos: %d cache, %d infer and %d gateway kills survived (%d with requests in flight; "
      "%d cache kills right after an answer, %d inside a disk publish; %d held until the load "
      "completed a request since the restart, %d without one); %d requests completed "
      "(%d streamed, %d chat), "
      "all compared with the uncached run: %d wrong; %d restored cached state (%d from disk); "
      "%d failed with a retriable error and were sent again (slowest %s); %d other errors or "
      "overruns; up to %d checkpoints on disk, %d lost; %d leaks",
      r.cache_kills, r.infer_kills, r.gateway_kills, r.kills_mid_stream, r.cache_kills_after_answer,
      r.cache_kills_mid_publish, r.kills_held_for_progress, r.kills_without_progress, r.completed,
      r.completed_streamed, r.completed_chat, r.wrong_outputs.size(), r.restored,
      r.restored_from_disk, r.retried, absl::FormatDuration(r.slowest_failure), r.bad_errors.size(),
      r.checkpoints_on_disk, r.lost_checkpoints.size(), r.leaks.size());
  for (const auto& [daemon, total] : r.restart_total) {
    const int kills = daemon == "cairn-cache"   ? r.cache_kills
                      : daemon == "cairn-infer" ? r.infer_kills
                                                : r.gateway_kills;
    absl::StrAppend(&out, "\n  ", daemon, ": phase of ",
                    absl::FormatDuration(r.phase_length.at(daemon)), ", kill to serving again ",
                    absl::FormatDuration(total / std::max(kills, 1)), " on average, slowest ",
                    absl::FormatDuration(r.restart_slowest.at(daemon)));
  }
  for (const SurvivorUsage& u : r.usage) {
    absl::StrAppendFormat(&out, "\n  %s while killing %s: %d -> %d fds, %d -> %d MiB", u.daemon,
                          u.phase, u.start.fds, u.end.fds, u.start.rss_bytes >> 20,
                          u.end.rss_bytes >> 20);
  }
  for (const auto& [phase, kinds] : r.failures) {
    for (const auto& [kind, n] : kinds) {
      absl::StrAppend(&out, "\n  while killing ", phase, ": ", n, " x ", kind);
    }
  }
  return out;
}

}  // namespace cairn::chaos
