#ifndef CAIRN_SERVICES_CACHE_SIM_TRACE_GENERATOR_H_
#define CAIRN_SERVICES_CACHE_SIM_TRACE_GENERATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/cache/sim/trace.h"

namespace cairn::cache::sim {

// Shapes of coding-agent traffic (anchors.md §5, TraceLab): one long system prompt with tool
// definitions shared by every conversation, ~700-token appends per step (tool results),
// answers the next request sends back, reasoning that the next rendering drops (the prompt
// then diverges at the stable boundary), edits of recent messages, subagents that share the
// system prompt and diverge after it, compaction of long histories, and idle gaps.
// Defaults are the generator's `cairnctl gen-trace` flags.
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
  double edit_probability = 0.05;       // The next turn edits one of the last messages.
  double subagent_probability = 0.08;   // A turn starts a subagent.
  int subagent_turns = 4;
  int64_t subagent_task_tokens = 1200;
  int64_t compaction_threshold_tokens = 100000;  // Longer histories are compacted...
  int64_t compaction_summary_tokens = 4000;      // ... into a summary of this size.
  double step_seconds_mean = 8;                  // Gap between steps of one conversation.
  double idle_probability = 0.1;                 // A step is followed by a human pause ...
  double idle_seconds_mean = 600;                // ... of this mean length.
};

// Named shapes of traffic (`cairnctl gen-trace --preset`), each the defaults above with:
// - "agent": nothing changed (several coding-agent conversations at once);
// - "single-user": one user's agent session: one conversation of 100 turns that starts
//   subagents (probability 0.1 per turn, subagents' turns too; 5 turns each), few human
//   pauses;
// - "team": a team server: 24 conversations of 10 turns arriving together, so conversations
//   far outnumber slots;
// - "long-context": three long sessions with 2,500-token appends and 6,000-token first
//   messages, compacted near a 128K window (threshold 120,000, 8,000-token summary).
const std::vector<std::string>& TracePresetNames();
// The options of preset `name` with `seed`. InvalidArgument for an unknown name.
absl::StatusOr<AgentTraceOptions> TracePreset(absl::string_view name, uint64_t seed);

// Returns the requests in arrival order. InvalidArgument for nonsensical options.
absl::StatusOr<std::vector<TraceRequest>> GenerateAgentTrace(const AgentTraceOptions& options);

}  // namespace cairn::cache::sim

#endif  // CAIRN_SERVICES_CACHE_SIM_TRACE_GENERATOR_H_
