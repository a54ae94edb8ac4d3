#include "services/cache/sim/trace_generator.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/cache/sim/trace.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache::sim {
namespace {

using ::cairn::testing::StatusIs;

// One conversation whose every step appends only an answer and an append: no reasoning, no
// edits, no subagents, no compaction. Prompt n+1 - prompt n = header + answer + append.
AgentTraceOptions PlainSteps() {
  AgentTraceOptions o;
  o.conversations = 1;
  o.turns_per_conversation = 400;
  o.reasoning_fraction = 0;
  o.edit_probability = 0;
  o.subagent_probability = 0;
  o.idle_probability = 0;
  o.answer_tokens_mean = 1;  // Clamped to the 16-token minimum.
  o.append_tokens_mean = 700;
  o.append_tokens_max = 1 << 20;
  o.compaction_threshold_tokens = int64_t{1} << 40;
  return o;
}

int64_t PromptLength(const TraceRequest& r) {
  int64_t n = 0;
  for (const Segment& s : r.segments) n += s.len;
  return n;
}

// The appends of a PlainSteps() trace.
std::vector<int64_t> Appends(const std::vector<TraceRequest>& trace, const AgentTraceOptions& o) {
  std::vector<int64_t> out;
  for (size_t i = 1; i < trace.size(); ++i) {
    out.push_back(PromptLength(trace[i]) - PromptLength(trace[i - 1]) - o.assistant_header_tokens -
                  16);
  }
  return out;
}

double FractionAbove(const std::vector<int64_t>& v, int64_t x) {
  return static_cast<double>(std::count_if(v.begin(), v.end(), [x](int64_t n) { return n > x; })) /
         static_cast<double>(v.size());
}

TEST(TraceGeneratorTest, OlderPresetsGiveTheCommittedTrace) {
  const char* root = std::getenv("CAIRN_SOURCE_DIR");
  if (root == nullptr) GTEST_SKIP() << "CAIRN_SOURCE_DIR not set (run through ctest)";
  std::ifstream file(std::string(root) + "/tests/data/traces/agent_small.jsonl");
  std::stringstream committed;
  committed << file.rdbuf();
  AgentTraceOptions o;
  o.conversations = 3;
  o.turns_per_conversation = 6;
  o.seed = 7;
  o.system_prompt_tokens = 3000;

  absl::StatusOr<std::vector<TraceRequest>> trace = GenerateAgentTrace(o);

  ASSERT_TRUE(trace.ok()) << trace.status();
  std::string text;
  for (const TraceRequest& r : *trace) text += FormatTraceLine(r) + "\n";
  EXPECT_EQ(text, committed.str());
}

TEST(TraceGeneratorTest, ToolResultTailIsHeavierThanExponential) {
  AgentTraceOptions plain = PlainSteps();
  AgentTraceOptions tail = plain;
  tail.tool_result_tail_probability = 1;
  tail.tool_result_tail_alpha = 1.2;

  absl::StatusOr<std::vector<TraceRequest>> a = GenerateAgentTrace(plain);
  absl::StatusOr<std::vector<TraceRequest>> b = GenerateAgentTrace(tail);

  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int64_t> exp_appends = Appends(*a, plain);
  std::vector<int64_t> pareto_appends = Appends(*b, tail);
  // P(X > 4 x mean): e^-4 = 1.8% for the exponential, 4^-1.2 = 19% for the Pareto; and the
  // Pareto never goes below its scale.
  EXPECT_LT(FractionAbove(exp_appends, 4 * 700), 0.05);
  EXPECT_GT(FractionAbove(pareto_appends, 4 * 700), 0.12);
  EXPECT_EQ(FractionAbove(pareto_appends, 699), 1.0);
}

TEST(TraceGeneratorTest, ScaleShrinksEveryTokenLength) {
  absl::StatusOr<AgentTraceOptions> preset = TracePreset("coding-agent", 3);
  ASSERT_TRUE(preset.ok());
  AgentTraceOptions small = *preset;
  small.token_scale = 0.125;

  AgentTraceOptions scaled = ScaledTokens(small);
  absl::StatusOr<std::vector<TraceRequest>> trace = GenerateAgentTrace(small);

  EXPECT_EQ(scaled.system_prompt_tokens, 1000);
  EXPECT_EQ(scaled.append_tokens_mean, 88);
  EXPECT_EQ(scaled.compaction_threshold_tokens, 12500);
  EXPECT_EQ(scaled.assistant_header_tokens, preset->assistant_header_tokens);
  EXPECT_EQ(scaled.token_scale, 1);
  ASSERT_TRUE(trace.ok()) << trace.status();
  for (const TraceRequest& r : *trace) {
    EXPECT_EQ(r.segments.front().len, 1000) << r.line;
    // A history is compacted once it passes the threshold; the next step adds at most two
    // messages of at most append_tokens_max, a fork adds a task.
    EXPECT_LE(PromptLength(r), 12500 + 3 * scaled.append_tokens_max) << r.conv;
  }
}

TEST(TraceGeneratorTest, ForkedSubagentStartsWithTheParentsPrompt) {
  AgentTraceOptions o;
  o.conversations = 1;
  o.turns_per_conversation = 12;
  o.subagent_probability = 0.5;
  o.subagent_fork_probability = 1;
  o.subagent_turns = 1;
  o.edit_probability = 0;

  absl::StatusOr<std::vector<TraceRequest>> trace = GenerateAgentTrace(o);

  ASSERT_TRUE(trace.ok()) << trace.status();
  // A subagent's first request starts with the stable prefix (the history) of one of its
  // parent's requests: the parent's prompt at the step that started it.
  std::map<std::string, std::vector<const TraceRequest*>> seen;
  int forks = 0;
  for (const TraceRequest& r : *trace) {
    const size_t dot = r.conv.rfind(".sub");
    if (dot != std::string::npos && seen[r.conv].empty()) {
      Prompt s = Materialize(r);
      bool forked = false;
      for (const TraceRequest* parent : seen[r.conv.substr(0, dot)]) {
        Prompt p = Materialize(*parent);
        forked |= s.tokens.size() > static_cast<size_t>(parent->stable) &&
                  parent->stable > o.system_prompt_tokens &&
                  std::equal(p.tokens.begin(), p.tokens.begin() + parent->stable, s.tokens.begin());
      }
      EXPECT_TRUE(forked) << r.conv;
      ++forks;
    }
    seen[r.conv].push_back(&r);
  }
  EXPECT_GE(forks, 3);
}

TEST(TraceGeneratorTest, UnforkedSubagentSharesOnlyTheSystemPrompt) {
  AgentTraceOptions o;
  o.conversations = 1;
  o.turns_per_conversation = 8;
  o.subagent_probability = 0.5;
  o.subagent_turns = 1;

  absl::StatusOr<std::vector<TraceRequest>> trace = GenerateAgentTrace(o);

  ASSERT_TRUE(trace.ok()) << trace.status();
  for (const TraceRequest& r : *trace) {
    if (r.conv.find(".sub") == std::string::npos) continue;
    ASSERT_EQ(r.segments.size(), 3u) << r.conv;  // System prompt, task, header.
    EXPECT_EQ(r.segments[0].len, o.system_prompt_tokens);
  }
}

TEST(TraceGeneratorTest, CodingAgentPresetHasEveryShape) {
  absl::StatusOr<AgentTraceOptions> o = TracePreset("coding-agent", 1);

  ASSERT_TRUE(o.ok());
  EXPECT_GE(o->system_prompt_tokens, 2000);
  EXPECT_EQ(o->append_tokens_mean, 700);
  EXPECT_GT(o->tool_result_tail_probability, 0);
  EXPECT_GT(o->reasoning_fraction, 0);
  EXPECT_GT(o->edit_probability, 0);
  EXPECT_GT(o->subagent_fork_probability, 0);
  EXPECT_GT(o->idle_probability, 0);
  EXPECT_GT(o->conversations, 1);
  absl::StatusOr<std::vector<TraceRequest>> trace = GenerateAgentTrace(*o);
  ASSERT_TRUE(trace.ok()) << trace.status();
  int subagents = 0;
  for (const TraceRequest& r : *trace) subagents += r.conv.find(".sub") != std::string::npos;
  EXPECT_GT(subagents, 0);
}

TEST(TraceGeneratorTest, RejectsBadProbabilitiesAndScales) {
  AgentTraceOptions a;
  a.subagent_fork_probability = 1.5;
  AgentTraceOptions b;
  b.token_scale = 0;
  AgentTraceOptions c;
  c.tool_result_tail_alpha = -1;
  AgentTraceOptions d;  // Every subagent would start another: the trace never ends.
  d.subagent_probability = 1;
  d.subagent_turns = 1;

  EXPECT_THAT(GenerateAgentTrace(a).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(GenerateAgentTrace(b).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(GenerateAgentTrace(c).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(GenerateAgentTrace(d).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn::cache::sim
