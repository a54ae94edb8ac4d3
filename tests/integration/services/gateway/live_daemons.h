#ifndef CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_LIVE_DAEMONS_H_
#define CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_LIVE_DAEMONS_H_

// The real daemons as child processes for gateway tests: cairn-cache (optional) and
// cairn-infer on a tiny random-weight model (cairn-make-model's "dense" preset, vocabulary
// 1,024, no tokenizer: prompts are token ids), plus cairn-gateway itself when a test needs
// the real binary (its RSS and descriptors measured from outside).

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/process/child_process.h"

namespace cairn::gateway::testing {

struct LiveDaemonsOptions {
  bool cache = true;
  int slots = 1;
  int max_queue = 64;
  int context = 4096;  // Tokens per slot.
  int max_pass_tokens = 256;
};

// Thread-compatible. The destructor kills whatever still runs.
class LiveDaemons {
 public:
  // Makes the model and starts the daemons; waits until cairn-infer serves (and has its cache
  // session, with a cache).
  static absl::StatusOr<std::unique_ptr<LiveDaemons>> Start(const LiveDaemonsOptions& options);
  ~LiveDaemons();

  const std::string& dir() const { return dir_; }
  std::string infer_address() const { return infer_->address(); }
  std::string cache_address() const { return cache_ ? cache_->address() : ""; }
  pid_t infer_pid() const { return infer_->pid(); }
  // The daemon's slots now.
  absl::StatusOr<infer::v1::ListSlotsResponse> ListSlots() const;

 private:
  LiveDaemons() = default;
  std::string dir_;
  std::unique_ptr<ChildProcess> cache_;
  std::unique_ptr<ChildProcess> infer_;
  std::unique_ptr<infer::v1::InferService::Stub> stub_;
};

// Returns the path of a binary of this build ("services/gateway/cairn-gateway").
std::string BuiltBinary(const std::string& relative);

// A process's resident set and open descriptors, from /proc.
struct ProcessUsage {
  int64_t rss_bytes = 0;
  int fds = 0;
};
absl::StatusOr<ProcessUsage> UsageOf(pid_t pid);

// The TCP port process `pid` listens on (the first listening IPv4 socket it holds), read from
// /proc: a server started on port 0 needs no free-port guess. NotFound while it listens on
// none.
absl::StatusOr<int> ListeningPort(pid_t pid);

}  // namespace cairn::gateway::testing

#endif  // CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_LIVE_DAEMONS_H_
