#include "services/cache/sim/trace_generator.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cairn::cache::sim {
namespace {

constexpr int64_t kMinSegmentTokens = 16;  // No message is shorter.
constexpr double kFirstArrivalSpread = 3;  // First requests arrive over ~3 step gaps.

// Deterministic draws on every platform (std distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  bool Chance(double p) { return Uniform() < p; }
  double Exponential(double mean) { return -mean * std::log(1.0 - Uniform()); }
  int64_t Size(int64_t mean, int64_t max) {
    return Clamp(Exponential(static_cast<double>(mean)), max);
  }
  // Pareto with scale `scale` and shape `alpha`: P(X > x) = (scale / x)^alpha for x >= scale.
  int64_t Pareto(int64_t scale, double alpha, int64_t max) {
    return Clamp(static_cast<double>(scale) / std::pow(1.0 - Uniform(), 1.0 / alpha), max);
  }

 private:
  static int64_t Clamp(double tokens, int64_t max) {
    return std::clamp<int64_t>(static_cast<int64_t>(std::min(tokens, 1e15)), kMinSegmentTokens,
                               std::max(kMinSegmentTokens, max));
  }

  uint64_t state_;
};

struct Conversation {
  std::string name;
  std::vector<Segment> history;
  double next_t = 0;
  int turns_left = 0;
};

Segment Rand(uint64_t seed, int64_t len) {
  Segment s;
  s.kind = Segment::Kind::kRand;
  s.seed = seed;
  s.len = len;
  return s;
}

// Draws with probability `p`; draws nothing when `p` is 0, so that options which are off leave
// the random stream (and the traces of the older presets) as they were.
bool MaybeChance(Rng& rng, double p) { return p > 0 && rng.Chance(p); }

int64_t ScaleTokens(int64_t tokens, double scale) {
  if (tokens <= 0) return tokens;
  return std::max<int64_t>(1, std::llround(static_cast<double>(tokens) * scale));
}

int64_t Length(const std::vector<Segment>& segments) {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.len;
  return n;
}

}  // namespace

const std::vector<std::string>& TracePresetNames() {
  static const auto* names =
      new std::vector<std::string>{"agent", "single-user", "team", "long-context", "coding-agent"};
  return *names;
}

absl::StatusOr<AgentTraceOptions> TracePreset(absl::string_view name, uint64_t seed) {
  AgentTraceOptions o;
  o.seed = seed;
  if (name == "agent") return o;
  if (name == "agent-8") {
    o.conversations = 8;
    return o;
  }
  if (name == "single-user") {
    o.conversations = 1;
    o.turns_per_conversation = 100;
    o.subagent_probability = 0.1;
    o.subagent_turns = 5;
    o.idle_probability = 0.05;
    return o;
  }
  if (name == "team") {
    o.conversations = 24;
    o.turns_per_conversation = 10;
    return o;
  }
  if (name == "long-context") {
    o.conversations = 3;
    o.turns_per_conversation = 60;
    o.first_user_tokens = 6000;
    o.append_tokens_mean = 2500;
    o.append_tokens_max = 16000;
    o.compaction_threshold_tokens = 120000;
    o.compaction_summary_tokens = 8000;
    return o;
  }
  if (name == "coding-agent") {
    o.conversations = 4;
    o.turns_per_conversation = 30;
    o.system_prompt_tokens = 8000;
    o.append_tokens_max = 32000;
    o.tool_result_tail_probability = 0.25;
    o.tool_result_tail_alpha = 1.2;
    o.edit_back_messages = 8;
    o.subagent_probability = 0.1;
    o.subagent_fork_probability = 0.5;
    o.idle_seconds_mean = 300;
    return o;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown trace preset '", name, "'"));
}

AgentTraceOptions ScaledTokens(const AgentTraceOptions& options) {
  AgentTraceOptions o = options;
  const double k = options.token_scale;
  for (int64_t* tokens :
       {&o.system_prompt_tokens, &o.first_user_tokens, &o.append_tokens_mean, &o.append_tokens_max,
        &o.answer_tokens_mean, &o.reasoning_tokens_mean, &o.subagent_task_tokens,
        &o.compaction_threshold_tokens, &o.compaction_summary_tokens}) {
    *tokens = ScaleTokens(*tokens, k);
  }
  o.token_scale = 1;
  return o;
}

absl::StatusOr<std::vector<TraceRequest>> GenerateAgentTrace(const AgentTraceOptions& options) {
  if (!(options.token_scale > 0 && options.token_scale <= 1000)) {
    return absl::InvalidArgumentError("agent trace: token_scale must be in (0, 1000]");
  }
  const AgentTraceOptions o = ScaledTokens(options);
  if (o.conversations < 1 || o.turns_per_conversation < 1 || o.system_prompt_tokens < 0 ||
      o.append_tokens_mean < 1 || o.answer_tokens_mean < 1 || o.first_user_tokens < 1 ||
      o.assistant_header_tokens < 1 || o.compaction_threshold_tokens < 1 ||
      o.edit_back_messages < 1) {
    return absl::InvalidArgumentError("agent trace: counts and sizes must be positive");
  }
  for (double p :
       {o.reasoning_fraction, o.edit_probability, o.subagent_probability,
        o.subagent_fork_probability, o.tool_result_tail_probability, o.idle_probability}) {
    if (!(p >= 0 && p <= 1)) {
      return absl::InvalidArgumentError("agent trace: probabilities must be in [0, 1]");
    }
  }
  if (o.subagent_probability * std::max(1, o.subagent_turns) >= 1) {
    // Subagents start subagents too: at one or more per subagent the trace never ends.
    return absl::InvalidArgumentError(
        "agent trace: subagent_probability x subagent_turns must be below 1");
  }
  if (!(o.tool_result_tail_alpha > 0)) {
    return absl::InvalidArgumentError("agent trace: tool_result_tail_alpha must be positive");
  }
  Rng rng(o.seed);
  uint64_t next_seed = o.seed * 1000003ull + 17;
  auto fresh = [&](int64_t len) { return Rand(next_seed++, len); };
  const Segment system = fresh(std::max<int64_t>(1, o.system_prompt_tokens));

  std::vector<Conversation> convs;
  for (int i = 0; i < o.conversations; ++i) {
    Conversation c;
    c.name = absl::StrCat("c", i);
    c.history = {system, fresh(rng.Size(o.first_user_tokens, o.append_tokens_max))};
    c.next_t = rng.Exponential(o.step_seconds_mean * kFirstArrivalSpread);
    c.turns_left = o.turns_per_conversation;
    convs.push_back(std::move(c));
  }
  std::vector<TraceRequest> out;
  int subagents = 0;
  while (true) {
    auto it = std::min_element(convs.begin(), convs.end(),
                               [](const Conversation& a, const Conversation& b) {
                                 if ((a.turns_left > 0) != (b.turns_left > 0))
                                   return a.turns_left > 0;
                                 return a.next_t < b.next_t;
                               });
    if (it == convs.end() || it->turns_left <= 0) break;
    const size_t index = static_cast<size_t>(it - convs.begin());

    TraceRequest r;
    r.conv = it->name;
    r.t = std::round(it->next_t * 10) / 10;
    r.segments = it->history;
    r.stable = Length(it->history);
    r.segments.push_back(fresh(o.assistant_header_tokens));
    const int64_t answer = rng.Size(o.answer_tokens_mean, o.append_tokens_max);
    const bool reasoning = rng.Chance(o.reasoning_fraction);
    const int64_t thoughts = reasoning ? rng.Size(o.reasoning_tokens_mean, o.append_tokens_max) : 0;
    r.gen = answer + thoughts;
    const Segment header = r.segments.back();
    out.push_back(r);

    Conversation& c = convs[index];
    --c.turns_left;
    // The next rendering: the answer is sent back; dropped reasoning re-renders the header.
    if (reasoning) {
      c.history.push_back(fresh(o.assistant_header_tokens));
      c.history.push_back(fresh(answer));
    } else {
      c.history.push_back(header);
      Segment answer_segment = fresh(r.gen);
      c.history.push_back(answer_segment);
    }
    const int64_t append =
        MaybeChance(rng, o.tool_result_tail_probability)
            ? rng.Pareto(o.append_tokens_mean, o.tool_result_tail_alpha, o.append_tokens_max)
            : rng.Size(o.append_tokens_mean, o.append_tokens_max);
    c.history.push_back(fresh(append));
    if (rng.Chance(o.edit_probability) && c.history.size() > 3) {
      // Edit one of the last messages: it and everything after it are rewritten.
      size_t back = 1 + static_cast<size_t>(
                            rng.Next() % std::min<size_t>(static_cast<size_t>(o.edit_back_messages),
                                                          c.history.size() - 2));
      size_t at = c.history.size() - back;
      int64_t len = c.history[at].len;
      c.history.resize(at);
      c.history.push_back(fresh(len));
    }
    if (Length(c.history) > o.compaction_threshold_tokens) {
      c.history = {system, fresh(o.compaction_summary_tokens)};
    }
    c.next_t += rng.Exponential(o.step_seconds_mean);
    if (rng.Chance(o.idle_probability)) c.next_t += rng.Exponential(o.idle_seconds_mean);
    if (rng.Chance(o.subagent_probability)) {
      Conversation sub;
      sub.name = absl::StrCat(c.name, ".sub", subagents++);
      const Segment task = fresh(rng.Size(o.subagent_task_tokens, o.append_tokens_max));
      if (MaybeChance(rng, o.subagent_fork_probability)) {
        // A fork: the parent's prompt as it stands, then the subagent's task.
        sub.history = convs[index].history;
        sub.history.push_back(task);
      } else {
        sub.history = {system, task};
      }
      sub.next_t = c.next_t;
      sub.turns_left = o.subagent_turns;
      convs.push_back(std::move(sub));
    }
  }
  return out;
}

}  // namespace cairn::cache::sim
