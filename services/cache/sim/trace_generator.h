#ifndef CAIRN_SERVICES_CACHE_SIM_TRACE_GENERATOR_H_
#define CAIRN_SERVICES_CACHE_SIM_TRACE_GENERATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/cache/sim/trace.h"

namespace cairn::cache::sim {

// Shapes of coding-agent traffic (docs/benchmarks.md lists each parameter with its source): one
// long system prompt with tool definitions shared by every conversation, ~700-token appends per
// step (tool results, with an optional heavy tail), answers the next request sends back,
// reasoning that the next rendering drops (the prompt then diverges at the stable boundary),
// edits of earlier messages, subagents that share the system prompt (or fork the parent's whole
// prompt) and diverge after it, compaction of long histories, and idle gaps.
// Defaults are the generator's `cairnctl gen-trace` flags. The options added after the first
// version default to "off", so that the older presets give the same traces as before.
struct AgentTraceOptions {
  uint64_t seed = 1;
  int conversations = 6;
  int turns_per_conversation = 24;
  int64_t system_prompt_tokens = 6000;  // Shared system prompt + tool definitions.
  int64_t first_user_tokens = 1500;
  int64_t append_tokens_mean = 700;  // Tool results / user messages per step.
  int64_t append_tokens_max = 8000;
  int64_t answer_tokens_mean = 250;  // Visible answer (gen), sent back next turn.
  double reasoning_fraction = 0.5;   // Turns whose reasoning the next rendering drops.
  int64_t reasoning_tokens_mean = 400;
  int64_t assistant_header_tokens = 5;  // Generation prompt past the stable boundary.
  double edit_probability = 0.05;       // The next turn edits one of the last messages...
  int edit_back_messages = 4;           // ... at most this many messages back.
  double subagent_probability = 0.08;   // A turn starts a subagent.
  int subagent_turns = 4;
  int64_t subagent_task_tokens = 1200;
  // A subagent forks the parent's whole prompt (history included) instead of starting from the
  // system prompt alone.
  double subagent_fork_probability = 0;
  // Heavy tail of tool results: an append is, with this probability, a tool result whose length
  // is Pareto-distributed with scale `append_tokens_mean` and shape `tool_result_tail_alpha`
  // (capped at `append_tokens_max`); otherwise exponential with mean `append_tokens_mean`.
  double tool_result_tail_probability = 0;
  double tool_result_tail_alpha = 1.2;
  int64_t compaction_threshold_tokens = 100000;  // Longer histories are compacted...
  int64_t compaction_summary_tokens = 4000;      // ... into a summary of this size.
  double step_seconds_mean = 8;                  // Gap between steps of one conversation.
  double idle_probability = 0.1;                 // A step is followed by a human pause ...
  double idle_seconds_mean = 600;                // ... of this mean length.
  // Multiplies every token length above (at least 1 token each), so that a trace suits a small
  // model: 0.125 turns a 6,000-token system prompt into 750 tokens. Times are not scaled.
  double token_scale = 1;
};

// Named shapes of traffic (`cairnctl gen-trace --preset`), each the defaults above with:
// - "agent": nothing changed (several coding-agent conversations at once);
// - "agent-8": 8 conversations (`gen-trace --conversations 8`, the traces issue 13 was filed
//   with); not in TracePresetNames (the evaluation set), only in the traces out of it;
// - "single-user": one user's agent session: one conversation of 100 turns that starts
//   subagents (probability 0.1 per turn, subagents' turns too; 5 turns each), few human
//   pauses;
// - "team": a team server: 24 conversations of 10 turns arriving together, so conversations
//   far outnumber slots;
// - "long-context": three long sessions with 2,500-token appends and 6,000-token first
//   messages, compacted near a 128K window (threshold 120,000, 8,000-token summary);
// - "coding-agent": every published shape at once (docs/benchmarks.md): 4 sessions of 30 turns,
//   an 8,000-token system prompt with tools, 700-token appends with a heavy tail of tool
//   results (a quarter of the appends, Pareto shape 1.2, up to 32,000 tokens), edits up to 8
//   messages back, subagents (probability 0.1, 4 turns) of which half fork the parent's prompt,
//   compaction past 100,000 tokens, idle gaps of 5 minutes on average.
// The presets of the evaluation set (`cairnctl evaluate`), every one but "agent-8".
const std::vector<std::string>& TracePresetNames();
// The options of preset `name` with `seed`. InvalidArgument for an unknown name.
absl::StatusOr<AgentTraceOptions> TracePreset(absl::string_view name, uint64_t seed);

// `options` with every token length multiplied by `options.token_scale` (rounded, at least 1;
// the threshold and maximum too) and the scale reset to 1.
AgentTraceOptions ScaledTokens(const AgentTraceOptions& options);

// Returns the requests in arrival order (token lengths scaled by `options.token_scale`).
// InvalidArgument for nonsensical options.
absl::StatusOr<std::vector<TraceRequest>> GenerateAgentTrace(const AgentTraceOptions& options);

}  // namespace cairn::cache::sim

#endif  // CAIRN_SERVICES_CACHE_SIM_TRACE_GENERATOR_H_
