#ifndef CAIRN_TESTS_INTEGRATION_SERVICES_INFER_INFER_HARNESS_H_
#define CAIRN_TESTS_INTEGRATION_SERVICES_INFER_INFER_HARNESS_H_

// cairn-infer test support: model folders (random weights of a real architecture, optionally with
// the real Qwen3 tokenizer and template), an in-process inference daemon on a Unix socket, a
// client that collects a Generate stream, and the uncached reference run that a served
// request must equal bit for bit.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/concurrency/thread_pool.h"
#include "common/grpc/server_runner.h"
#include "services/infer/daemon/infer_service.h"
#include "services/infer/daemon/served_model.h"
#include "services/infer/engine/scheduler.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "services/infer/engine/state_cache.h"

namespace cairn::infer::testing {

// Vocabulary that holds every id of the real Qwen3 tokenizer.
inline constexpr int64_t kQwen3Vocab = 151936;

// Writes random-checkpoint preset `preset` into a fresh folder; with `qwen3_text`, with the
// Qwen3 vocabulary and the real tokenizer.json / tokenizer_config.json (the official chat
// template included; for the "demo" preset, the demo model's files of WriteDemoTextFiles instead).
// Returns the folder. Fails if the tokenizer download is missing.
absl::StatusOr<std::string> MakeModelFolder(const std::string& preset, bool qwen3_text,
                                            const std::string& name);
// Whether the downloaded Qwen3 tokenizer is present (tools/fetch-test-data).
bool HaveQwen3Tokenizer();

struct InferServerOptions {
  std::string model_dir;
  int slots = 1;
  int64_t max_pass_tokens = 2048;
  int64_t context_tokens = 2048;
  int max_queue = 64;
  InferServiceOptions service;
  // Makes the state cache (null: none). Called with the served model and the scheduler's wake
  // callback.
  std::function<std::unique_ptr<StateCache>(const ServedModel&, std::function<void()>)> make_cache;
};

// An inference daemon in this process: the model, the slots, the scheduler and the gRPC server.
class InferServer {
 public:
  static absl::StatusOr<std::unique_ptr<InferServer>> Start(const InferServerOptions& options);
  ~InferServer();

  const std::string& address() const { return runner_->address(); }
  std::unique_ptr<v1::InferService::Stub> NewStub() const;
  const ServedModel& model() const { return *model_; }
  StateCache* cache() const { return cache_.get(); }
  // What SIGTERM does to the scheduler: stops admitting, cancels what still runs at `deadline`.
  void DrainSchedulerForTest(absl::Time deadline) { scheduler_->Shutdown(deadline); }

 private:
  InferServer() : pool_(4) {}
  ThreadPool pool_;
  std::unique_ptr<ServedModel> model_;
  std::unique_ptr<SlotKvMemory> memory_;
  std::unique_ptr<StateCache> cache_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<InferServiceImpl> service_;
  std::unique_ptr<ServerRunner> runner_;
};

// What one Generate call returned.
struct GenerateResult {
  grpc::Status status;
  v1::Started started;
  v1::Finished finished;
  std::vector<uint32_t> tokens;
  std::vector<float> logprobs;  // Of each generated token.
  std::vector<v1::TokenLogprob> logprob_entries;
  std::string text;
  std::string reasoning;
  int deltas = 0;
};

GenerateResult Generate(v1::InferService::Stub& stub, const v1::GenerateRequest& request,
                        absl::Duration timeout = absl::Seconds(120));

// A token-id request for greedy decoding of `max_tokens` with logprobs.
v1::GenerateRequest TokenRequest(const std::vector<int32_t>& prompt, uint32_t max_tokens);

// The kernel backend the daemons under test and the references run on: $CAIRN_TEST_BACKEND,
// "cpu" when unset (a GPU machine runs the same tests with "hip").
std::string TestBackendName();

// The uncached reference: loads `model_dir` afresh on TestBackendName()'s backend, prefills
// `passes` (consecutive pieces of the prompt), then decodes greedily one token per pass; returns
// the tokens and each token's logprob exactly as the daemon computes them.
struct ReferenceRun {
  std::vector<uint32_t> tokens;
  std::vector<float> logprobs;
};
absl::StatusOr<ReferenceRun> RunReference(const std::string& model_dir,
                                          const std::vector<std::vector<int32_t>>& passes,
                                          int max_tokens, bool pass_invariant = false);

}  // namespace cairn::infer::testing

#endif  // CAIRN_TESTS_INTEGRATION_SERVICES_INFER_INFER_HARNESS_H_
