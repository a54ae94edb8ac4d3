#ifndef CAIRN_SERVICES_GATEWAY_UPSTREAM_INFER_POOL_H_
#define CAIRN_SERVICES_GATEWAY_UPSTREAM_INFER_POOL_H_

// gRPC clients of one or more cairn-infer daemons (cairn.infer.v1.InferService). Requests
// for a model go to a daemon serving it: the one whose slot holds the request's
// conversation if it has room, else the least loaded. Every call has a deadline (RPC1);
// read-only calls, and Generate before its first message, are retried on UNAVAILABLE on
// another daemon serving the model (RPC2), never past the first deadline.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cairn/infer/v1/infer.pb.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/notification.h"

namespace cairn::gateway {

namespace infer_v1 = ::cairn::infer::v1;

class GenerateCall;

struct InferPoolOptions {
  std::vector<std::string> addresses;                   // "unix:PATH" or "HOST:PORT".
  absl::Duration rpc_timeout = absl::Seconds(10);       // Unary calls.
  absl::Duration generate_timeout = absl::Minutes(30);  // One whole generation.
  absl::Duration refresh_interval = absl::Seconds(2);   // GetModelInfo + ListSlots per daemon.
  absl::Duration refresh_timeout = absl::Seconds(2);    // Deadline of those calls.
  // When false, a model name no daemon serves is NotFound; when true and every daemon
  // serves the same model, any name reaches it (agents often send names like "gpt-4o").
  bool any_model_name = true;
  // Runs on a gRPC thread after a Generate attempt failed and before its retry starts, with
  // the call being retried (tests cancel it there).
  std::function<void(GenerateCall*)> before_retry_for_test;
};

// What the gateway knows of one daemon, as of the last refresh.
struct DaemonStatus {
  std::string address;
  bool ready = false;  // Its last GetModelInfo succeeded.
  std::string error;   // Why not ready.
  infer_v1::GetModelInfoResponse model;
  infer_v1::ListSlotsResponse slots;
  int64_t inflight = 0;  // Generate calls this gateway has open on it.
};

// A served model.
struct ModelEntry {
  std::string name;
  uint32_t context_length = 0;
  uint32_t vocab_size = 0;
  int daemons = 0;
};

// Receives one Generate stream. Methods run on gRPC's threads and must not block.
class GenerateObserver {
 public:
  virtual ~GenerateObserver() = default;
  // One message; the next arrives only after GenerateCall::ReadNext().
  virtual void OnMessage(infer_v1::GenerateResponse message) = 0;
  // The end of the call, once: OK after Finished, else the error (CANCELLED after Cancel).
  virtual void OnDone(absl::Status status) = 0;
};

// A running Generate. Thread-safe.
class GenerateCall {
 public:
  virtual ~GenerateCall() = default;
  // Asks for the next message (flow control: one message in flight at a time).
  virtual void ReadNext() = 0;
  // Cancels the call (TryCancel on its context); OnDone follows with CANCELLED.
  virtual void Cancel() = 0;
};

template <typename Response>
using UnaryCallback = std::function<void(absl::StatusOr<Response>)>;

class InferDaemon;
class GenerateRun;

// Thread-safe. A background thread refreshes the daemons' model and slot information.
class InferPool {
 public:
  // Creates the channels and starts refreshing. InvalidArgument without addresses, with one that
  // ValidatePeerAddress refuses, or with one given twice.
  static absl::StatusOr<std::unique_ptr<InferPool>> Create(const InferPoolOptions& options);
  ~InferPool();
  InferPool(const InferPool&) = delete;
  InferPool& operator=(const InferPool&) = delete;

  // Cancels every open call, waits for them to end (their observers and callbacks
  // released), stops refreshing. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // Refreshes every daemon now (blocking, bounded by refresh_timeout per call).
  void RefreshNow();
  // Waits until at least one daemon is ready. Returns false at `timeout`.
  bool WaitForReady(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<DaemonStatus> Daemons() const;
  std::vector<ModelEntry> Models() const;
  // Resolves a requested model name (empty: the only model). NotFound for a model no daemon
  // serves; Unavailable when no daemon is ready.
  absl::StatusOr<ModelEntry> ResolveModel(absl::string_view requested) const;

  // Starts `request` on a daemon serving `model`. `observer` gets every message and then
  // OnDone (also for failures to start). Returns a handle for flow control and cancel.
  std::shared_ptr<GenerateCall> Generate(const std::string& model,
                                         infer_v1::GenerateRequest request,
                                         std::shared_ptr<GenerateObserver> observer);

  // Unary calls for `model`; `done` runs once on a gRPC thread (or inline when no daemon
  // can take the call) and must not block.
  void Tokenize(const std::string& model, infer_v1::TokenizeRequest request,
                UnaryCallback<infer_v1::TokenizeResponse> done);
  void Detokenize(const std::string& model, infer_v1::DetokenizeRequest request,
                  UnaryCallback<infer_v1::DetokenizeResponse> done);
  void ApplyTemplate(const std::string& model, infer_v1::ApplyTemplateRequest request,
                     UnaryCallback<infer_v1::ApplyTemplateResponse> done);

  const InferPoolOptions& options() const { return options_; }

  // Internal: used by the call objects.
  void CallStarted() ABSL_LOCKS_EXCLUDED(mu_);
  void CallEnded() ABSL_LOCKS_EXCLUDED(mu_);
  void RunEnded(GenerateRun* run) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit InferPool(InferPoolOptions options);
  // Returns the daemons serving `model`, best first (conversation affinity, then load).
  std::vector<InferDaemon*> Candidates(const std::string& model,
                                       const std::string& conversation) const;
  template <typename Request, typename Response, typename Method>
  void Unary(const std::string& model, Request request, Method method,
             UnaryCallback<Response> done);

  const InferPoolOptions options_;
  std::vector<std::unique_ptr<InferDaemon>> daemons_;  // Fixed after Create.
  mutable Mutex mu_;
  CondVar cv_;
  int64_t open_calls_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<GenerateRun*, std::weak_ptr<GenerateRun>> runs_ ABSL_GUARDED_BY(mu_);
  Notification stop_;
  std::thread refresher_;
};

}  // namespace cairn::gateway

#endif  // CAIRN_SERVICES_GATEWAY_UPSTREAM_INFER_POOL_H_
