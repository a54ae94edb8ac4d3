#ifndef CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_REAL_STACK_H_
#define CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_REAL_STACK_H_

// The whole stack as real processes, as tools/serve runs it: cairn-cache, cairn-infer on a
// random-weight model with the real Qwen3 tokenizer and the demo chat template, and
// cairn-gateway on a free 127.0.0.1 port, with sockets in a scratch folder.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/child_process.h"

namespace cairn::gateway::testing {

struct RealStackOptions {
  // A preset of RandomCheckpointPreset; its vocabulary becomes Qwen3's and the demo's
  // tokenizer and template are added.
  std::string preset = "dense";
  int sessions = 1;
  int64_t context_tokens = 4096;
  int max_output_tokens = 16;  // The gateway's cap (--max-output-tokens).
  absl::Duration start_timeout = absl::Seconds(120);
};

// Thread-compatible. The destructor stops the three daemons (gateway first).
class RealStack {
 public:
  // Starts the stack under `dir` (created). FailedPrecondition when the Qwen3 tokenizer has not
  // been fetched; DeadlineExceeded naming the daemon that did not come up.
  static absl::StatusOr<std::unique_ptr<RealStack>> Start(const std::string& dir,
                                                          const RealStackOptions& options);
  ~RealStack();

  int port() const { return port_; }
  const std::string& model_dir() const { return model_dir_; }
  // SIGTERM to each daemon, gateway first; returns true when all three exited 0.
  bool Stop();

 private:
  RealStack() = default;

  std::unique_ptr<ChildProcess> cache_;
  std::unique_ptr<ChildProcess> infer_;
  std::unique_ptr<ChildProcess> gateway_;
  std::string model_dir_;
  int port_ = 0;
};

// Whether tools/fetch-test-data has fetched the Qwen3 tokenizer.
bool HaveQwen3Tokenizer();

}  // namespace cairn::gateway::testing

#endif  // CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_REAL_STACK_H_
