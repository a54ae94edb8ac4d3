#ifndef CAIRN_TOOLS_CAIRNCTL_RPC_UTIL_H_
#define CAIRN_TOOLS_CAIRNCTL_RPC_UTIL_H_

// Helpers shared by cairnctl's online verbs (rpc_commands.cc, infer_commands.cc).

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/config/flags.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"

namespace cairn::infer::v1 {
class ChatPrompt;
}  // namespace cairn::infer::v1

namespace cairn::cairnctl {

// The longest --timeout an online verb takes: a month. Longer ones ("inf", "2562047h") are
// exit 2, as are zero and negative ones.
inline constexpr absl::Duration kMaxCallTimeout = absl::Hours(24 * 30);
// The shortest --timeout: shorter ones cannot reach even a local daemon.
inline constexpr absl::Duration kMinCallTimeout = absl::Milliseconds(1);

struct CommonFlags {
  std::string addr;  // Empty: the cache daemon's default address.
  absl::Duration timeout = absl::Seconds(10);
  bool json = false;
};

// The cache daemon's default address: $CAIRN_CACHE_ADDR, else cache.sock in the runtime
// directory ($CAIRN_RUNTIME_DIR, $XDG_RUNTIME_DIR/cairn, /tmp/cairn-UID).
std::string DefaultCacheAddress();

// Parses `args` with the common flags (--addr, --timeout, --json) plus the verb's own; returns
// the positionals, or prints the error (exit 2) / usage (exit 0) and sets `exit_code` (-1 when
// the verb should go on). More than `max_positionals` positionals is an error (exit 2): a verb
// that takes none does not ignore a mistyped argument. So is an address, given or the default,
// that ValidatePeerAddress refuses.
std::vector<std::string> ParseFlags(FlagSet& flags, CommonFlags& common,
                                    const std::vector<std::string>& args, std::ostream& out,
                                    std::ostream& err, int* exit_code,
                                    size_t max_positionals = SIZE_MAX);

// The protobuf JSON mapping of `m` (field names as in the proto), indented.
std::string ToJson(const google::protobuf::Message& m);

// Fills `chat` from `generate --chat`'s JSON array of OpenAI messages (infer_commands.cc). Each
// message needs a string role; `content` may be a string, null, or an array of text parts
// ({"type": "text", "text": ...} or bare strings, joined with newlines as the gateway joins
// them); `name`, `reasoning_content` and `tool_call_id` are kept. Anything else (an empty array,
// a media part, tool_calls, an unknown field) is InvalidArgument naming it, never dropped.
absl::Status ParseChat(const std::string& json, infer::v1::ChatPrompt* chat);

// Prints a failed call's status; returns exit code 1.
int Fail(std::ostream& err, const grpc::Status& s);

}  // namespace cairn::cairnctl

#endif  // CAIRN_TOOLS_CAIRNCTL_RPC_UTIL_H_
