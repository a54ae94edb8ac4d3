#ifndef CAIRN_SERVICES_CACHE_SIM_TRACE_H_
#define CAIRN_SERVICES_CACHE_SIM_TRACE_H_

// Request traces for `cairnctl simulate` (docs/architecture.md §9). JSONL, one request per line:
//
//   {"conv": "A", "t": 12.5, "segments": [...], "stable": K, "gen": M}
//
// `conv` (string, required) names the conversation; `t` (seconds, optional, default 0) is the
// arrival time; `segments` (required, non-empty) build the prompt's tokens in order; `stable`
// (optional) is the stable boundary in tokens (0 <= K <= prompt length); `gen` (optional,
// default 0) is the number of tokens the model generates, which extend the live frontier.
// A segment is exactly one of:
//   {"text": "..."}                   one token per UTF-8 byte, id = the byte value (0..255);
//                                     a stand-in tokenizer, deterministic and model-free;
//   {"ids": [1, 2, 3]}                explicit token ids, each in [0, 2^31);
//   {"rand": SEED, "len": N, "skip": S}   ids S..S+N-1 of the pseudo-random stream SEED
//                                     (`skip` optional, default 0).
// Blank lines and lines starting with '#' are ignored. Unknown fields, wrong types and
// out-of-range values are errors naming the line.
//
// The pseudo-random stream: element i (0-based) of stream SEED is
//   splitmix64(SEED + (i + 1) * 0x9E3779B97F4A7C15) mod vocab_size
// where splitmix64 is the finaliser z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
// z *= 0x94D049BB133111EB; z ^= z >> 31 (the i-th output of SplitMix64 seeded with SEED), so
// any element is computed directly and two segments with one seed agree on their overlap.
// vocab_size defaults to 151,936 (the Qwen3 vocabulary).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/cache/core/types.h"

namespace cairn::cache::sim {

struct TraceOptions {
  int64_t vocab_size = 151936;           // Modulus of the pseudo-random stream.
  int64_t max_request_tokens = 1 << 24;  // Longer prompts are an error, not an OOM.
  // PrepareRequests only. False: the model's answers are never found in the next prompt (a
  // replay through the gateway sends the trace's tokens, not what the model generated).
  bool answers_resent = true;
  // PrepareRequests only. False: requests carry no stable boundary (a token-id prompt through
  // /v1/completions cannot name one).
  bool keep_stable = true;
};

struct Segment {
  enum class Kind { kText, kIds, kRand };
  Kind kind = Kind::kText;
  std::string text;          // kText.
  std::vector<TokenId> ids;  // kIds.
  uint64_t seed = 0;         // kRand.
  int64_t len = 0;           // kRand.
  int64_t skip = 0;          // kRand.
};

struct TraceRequest {
  int line = 0;  // 1-based line in the trace file.
  std::string conv;
  double t = 0;
  std::vector<Segment> segments;
  int64_t stable = -1;  // -1: absent.
  int64_t gen = 0;
};

// Element `index` of pseudo-random stream `seed` (see the file comment).
TokenId RandomToken(uint64_t seed, uint64_t index, int64_t vocab_size);

// Parses a whole trace. InvalidArgument naming the line on any error.
absl::StatusOr<std::vector<TraceRequest>> ParseTrace(absl::string_view text,
                                                     const TraceOptions& options = {});
// Reads and parses the file at `path`. NotFound if it cannot be opened.
absl::StatusOr<std::vector<TraceRequest>> ReadTraceFile(const std::string& path,
                                                        const TraceOptions& options = {});
// The prompt's tokens; also the start offset of every segment (message starts).
struct Prompt {
  std::vector<TokenId> tokens;
  std::vector<int64_t> segment_starts;
};
Prompt Materialize(const TraceRequest& request, const TraceOptions& options = {});

// One JSON line for `request` (the inverse of ParseTrace, without the newline).
std::string FormatTraceLine(const TraceRequest& request);

}  // namespace cairn::cache::sim

#endif  // CAIRN_SERVICES_CACHE_SIM_TRACE_H_
