// The agent-trace parser of cairnctl simulate (services/cache/sim), and materializing what it
// accepted.

#include <vector>

#include "absl/strings/string_view.h"
#include "common/status/check.h"
#include "services/cache/sim/trace.h"
#include "tests/fuzz/fuzz_target.h"

CAIRN_FUZZ_TARGET(Trace) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  cairn::cache::sim::TraceOptions options;
  options.vocab_size = 1000;
  options.max_request_tokens = 1 << 16;  // Bounded work per input.
  absl::StatusOr<std::vector<cairn::cache::sim::TraceRequest>> trace =
      cairn::cache::sim::ParseTrace(text, options);
  if (!trace.ok()) return 0;
  for (const cairn::cache::sim::TraceRequest& r : *trace) {
    cairn::cache::sim::Prompt prompt = cairn::cache::sim::Materialize(r, options);
    for (cairn::cache::TokenId id : prompt.tokens) {
      CAIRN_CHECK(id >= 0);
    }
    // What the formatter writes, the parser reads back.
    CAIRN_CHECK(cairn::cache::sim::ParseTrace(cairn::cache::sim::FormatTraceLine(r), options).ok());
  }
  return 0;
}
