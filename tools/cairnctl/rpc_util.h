#ifndef CAIRN_TOOLS_CAIRNCTL_RPC_UTIL_H_
#define CAIRN_TOOLS_CAIRNCTL_RPC_UTIL_H_

// Helpers shared by cairnctl's online verbs (rpc_commands.cc, infer_commands.cc).

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/config/flags.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"

namespace cairn::cairnctl {

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

// Prints a failed call's status; returns exit code 1.
int Fail(std::ostream& err, const grpc::Status& s);

}  // namespace cairn::cairnctl

#endif  // CAIRN_TOOLS_CAIRNCTL_RPC_UTIL_H_
