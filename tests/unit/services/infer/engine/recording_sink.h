// A RequestSink for the scheduler's tests that records what one request saw.
#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_ENGINE_RECORDING_SINK_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_ENGINE_RECORDING_SINK_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/notification.h"
#include "services/infer/engine/request.h"

namespace cairn::infer {

// What one request's sink saw. Written on the scheduler thread; read after `done`.
struct Outcome {
  Mutex mu;
  bool started ABSL_GUARDED_BY(mu) = false;
  std::vector<int32_t> tokens ABSL_GUARDED_BY(mu);
  absl::Status status ABSL_GUARDED_BY(mu);
  FinishInfo info ABSL_GUARDED_BY(mu);
  Notification done;
  std::atomic<bool> cancel{false};  // Set by a test: the client goes away.

  absl::Status Status() {
    MutexLock lock(&mu);
    return status;
  }
};

// Records into `outcome`; `cancelled`: the client is gone from the start.
class RecordingSink final : public RequestSink {
 public:
  explicit RecordingSink(Outcome* outcome, bool cancelled = false)
      : outcome_(outcome), cancelled_(cancelled) {}
  void OnStarted(const StartInfo&) override {
    MutexLock lock(&outcome_->mu);
    outcome_->started = true;
  }
  bool OnToken(const SampledToken& token) override {
    MutexLock lock(&outcome_->mu);
    outcome_->tokens.push_back(token.id);
    return true;
  }
  void OnFinished(const absl::Status& status, const FinishInfo& info) override {
    {
      MutexLock lock(&outcome_->mu);
      outcome_->status = status;
      outcome_->info = info;
    }
    outcome_->done.Notify();
  }
  bool Cancelled() const override { return cancelled_ || outcome_->cancel.load(); }

 private:
  Outcome* const outcome_;
  const bool cancelled_;
};

}  // namespace cairn::infer

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_ENGINE_RECORDING_SINK_H_
