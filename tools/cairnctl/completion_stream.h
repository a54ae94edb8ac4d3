#ifndef CAIRN_TOOLS_CAIRNCTL_COMPLETION_STREAM_H_
#define CAIRN_TOOLS_CAIRNCTL_COMPLETION_STREAM_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "services/cache/sim/replay_log.h"

namespace cairn::cairnctl {

// Reads the server-sent events of one streamed `/v1/completions` response as they arrive and
// fills a replay record from them: the first event carrying text or a finish reason marks the
// first token; the last one carries the `cairn` object and the usage. SSE comments (": ping")
// are skipped; an error event or a malformed one (not JSON, or a field of the wrong type or out
// of range) sets `error`; nothing the server sends throws or aborts. Thread-compatible.
class CompletionStream {
 public:
  // Feeds the next piece of the body. Returns true when this piece completed the first event
  // that marks the first token (the caller timestamps it).
  bool Feed(absl::string_view bytes);
  // Copies what the events said into `record` (tier, depth, prefilled, reused, captures,
  // restore/capture/server TTFT ms, completion tokens), and sets `record->error` when the
  // stream carried an error or never finished.
  void Fill(cache::sim::ReplayRecord* record) const;

 private:
  // Counts beyond this (2^53, what a double holds exactly) are malformed.
  static constexpr int64_t kMaxCount = int64_t{1} << 53;

  bool HandleEvent(absl::string_view event);
  bool ReadString(const nlohmann::json& object, absl::string_view where, absl::string_view key,
                  std::string* out);
  bool ReadCount(const nlohmann::json& object, absl::string_view where, absl::string_view key,
                 int64_t* out);
  bool ReadMs(const nlohmann::json& object, absl::string_view where, absl::string_view key,
              double* out);
  bool BadField(absl::string_view where, absl::string_view key, absl::string_view what);

  std::string pending_;
  bool first_token_ = false;
  bool finished_ = false;
  bool done_ = false;  // data: [DONE]
  std::string error_;
  std::string tier_ = "cold";
  int64_t depth_ = 0;
  int64_t prefilled_ = 0;
  int64_t captures_ = 0;
  double restore_ms_ = 0;
  double capture_ms_ = 0;
  double server_ttft_ms_ = 0;
  int64_t reused_ = 0;
  int64_t completion_tokens_ = 0;
  bool have_cairn_ = false;
};

}  // namespace cairn::cairnctl

#endif  // CAIRN_TOOLS_CAIRNCTL_COMPLETION_STREAM_H_
