#ifndef CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_FAKE_INFER_SERVICE_H_
#define CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_FAKE_INFER_SERVICE_H_

// A scripted cairn.infer.v1.InferService for gateway tests: each Generate plays a Script
// (messages, pauses, a wait for the client to cancel, a final status), chosen by a function
// of the request. Unary calls answer from a toy byte-level "tokenizer". Served in-process on
// 127.0.0.1:0 through ServerRunner, so a test against the real daemon changes only the
// address.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cairn/infer/v1/infer.grpc.pb.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/notification.h"
#include "common/grpc/server_runner.h"

namespace cairn::gateway::testing {

namespace infer_v1 = ::cairn::infer::v1;

struct Script {
  struct Step {
    enum Kind { kSend, kPause, kWaitForCancel } kind = kSend;
    infer_v1::GenerateResponse message;
    absl::Duration pause;
  };
  std::vector<Step> steps;
  grpc::Status status = grpc::Status::OK;  // Returned after the steps.

  Script& Started(uint32_t prompt_tokens, uint64_t cached = 0);
  Script& Text(const std::string& text);
  Script& Reasoning(const std::string& text);
  Script& ToolCall(uint32_t index, const std::string& id, const std::string& name,
                   const std::string& arguments_delta);
  Script& Finished(infer_v1::Finished finished);
  Script& Pause(absl::Duration d);
  Script& WaitForCancel();
  Script& Fail(grpc::StatusCode code, const std::string& message);

  // Started, the texts as deltas, Finished(STOP) with `content` their concatenation.
  static Script Reply(const std::vector<std::string>& texts);
  // Started, reasoning "I should look", then one read_file tool call ({"path":"a.txt"}) in three
  // argument deltas, Finished(TOOL_CALLS) carrying both (any request: a SetScript chooser).
  static Script ReadFileToolCall(const infer_v1::GenerateRequest& request);
  // A Finished with the usual counts (prompt 12, cached 8, completion `completion`).
  static infer_v1::Finished MakeFinished(infer_v1::Finished::Reason reason, uint32_t completion);
};

// Thread-safe.
class FakeInferService final : public infer_v1::InferService::Service {
 public:
  FakeInferService();

  // Chooses the script for each Generate (default: Script::Reply({"Hello", " world"})).
  void SetScript(std::function<Script(const infer_v1::GenerateRequest&)> choose)
      ABSL_LOCKS_EXCLUDED(mu_);
  void SetModel(infer_v1::GetModelInfoResponse model) ABSL_LOCKS_EXCLUDED(mu_);
  // What ListSlots answers (default: two idle slots).
  void SetSlots(infer_v1::ListSlotsResponse slots) ABSL_LOCKS_EXCLUDED(mu_);

  // The last Generate request received.
  infer_v1::GenerateRequest last_request() const ABSL_LOCKS_EXCLUDED(mu_);
  int generate_calls() const ABSL_LOCKS_EXCLUDED(mu_);
  int cancelled_calls() const ABSL_LOCKS_EXCLUDED(mu_);
  // Notified when a Generate sees its client cancel.
  Notification& cancelled() { return cancelled_; }
  // Notified when a Generate reaches a kWaitForCancel step.
  Notification& waiting() { return waiting_; }

  grpc::Status Generate(grpc::ServerContext* context, const infer_v1::GenerateRequest* request,
                        grpc::ServerWriter<infer_v1::GenerateResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext*, const infer_v1::TokenizeRequest* request,
                        infer_v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext*, const infer_v1::DetokenizeRequest* request,
                          infer_v1::DetokenizeResponse* response) override;
  grpc::Status ApplyTemplate(grpc::ServerContext*, const infer_v1::ApplyTemplateRequest* request,
                             infer_v1::ApplyTemplateResponse* response) override;
  grpc::Status ListSlots(grpc::ServerContext*, const infer_v1::ListSlotsRequest*,
                         infer_v1::ListSlotsResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext*, const infer_v1::GetModelInfoRequest*,
                            infer_v1::GetModelInfoResponse* response) override;

 private:
  mutable Mutex mu_;
  std::function<Script(const infer_v1::GenerateRequest&)> choose_ ABSL_GUARDED_BY(mu_);
  infer_v1::GetModelInfoResponse model_ ABSL_GUARDED_BY(mu_);
  infer_v1::ListSlotsResponse slots_ ABSL_GUARDED_BY(mu_);
  infer_v1::GenerateRequest last_request_ ABSL_GUARDED_BY(mu_);
  int generate_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_calls_ ABSL_GUARDED_BY(mu_) = 0;
  Notification cancelled_;
  Notification waiting_;
};

// The fake served on 127.0.0.1:0.
class FakeInferServer {
 public:
  FakeInferServer();
  ~FakeInferServer();
  const std::string& address() const { return runner_->address(); }
  FakeInferService& service() { return service_; }

 private:
  FakeInferService service_;
  std::unique_ptr<ServerRunner> runner_;
};

}  // namespace cairn::gateway::testing

#endif  // CAIRN_TESTS_INTEGRATION_SERVICES_GATEWAY_FAKE_INFER_SERVICE_H_
