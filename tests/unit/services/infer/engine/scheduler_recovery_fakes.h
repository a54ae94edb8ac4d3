// The fakes the scheduler's recovery tests share: a model with real per-slot state and a
// connected cache daemon stand-in that accepts every call.
#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_ENGINE_SCHEDULER_RECOVERY_FAKES_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_ENGINE_SCHEDULER_RECOVERY_FAKES_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"
#include "common/concurrency/notification.h"
#include "gtest/gtest.h"
#include "services/infer/engine/kv_memory.h"
#include "services/infer/engine/state_cache.h"
#include "services/infer/models/model.h"

namespace cairn::infer::recovery_testing {

inline constexpr int32_t kVocab = 64;
inline constexpr int32_t kStop = 63;
inline constexpr absl::Duration kWait = absl::Seconds(30);

// The token a slot whose tokens sum to `sum` favours (never 0 or kStop).
inline int32_t Favoured(int64_t sum) { return static_cast<int32_t>(1 + sum % (kVocab - 2)); }

// A model with real per-slot state: one row a token (the token) and a private running sum of
// every token the slot has seen, which it updates before it commits the pass, as the hybrid
// models update their conv and recurrent state. Its logits favour Favoured(sum), so a slot
// continued from a wrong state answers a wrong token. It can fail its next pass after the
// private state moved, and block a pass until released.
//
// Thread-compatible: the scheduler thread runs it; the test arms it while no pass runs or
// through the gate.
class RunningSumModel final : public Model {
 public:
  RunningSumModel() {
    info_.architecture = "running-sum";
    info_.vocab_size = kVocab;
    layout_.components.push_back({"layers.0.k", ComponentKind::kRows, 0, 1});
    layout_.components.push_back({"layers.0.sum", ComponentKind::kPrivate, 0, 1});
  }
  const ModelInfo& info() const override { return info_; }
  const StateLayout& state_layout() const override { return layout_; }

  absl::Status ForwardBatchInto(absl::Span<const SequencePass> batch,
                                std::vector<std::vector<float>>& results) override {
    if (block_next_.exchange(false)) {
      entered_.Notify();
      release_.WaitForNotification();
    }
    const bool fail = fail_in_.fetch_sub(1) == 1;
    results.resize(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      SlotState* slot = batch[i].slot;
      const int64_t n = static_cast<int64_t>(batch[i].tokens.size());
      if (absl::Status st = slot->PrepareAppend(n); !st.ok()) return st;
      {
        MutexLock lock(&mu_);
        passes_.push_back({slot->position(), n});
      }
      float& sum = slot->data(1)[0];
      for (int64_t t = 0; t < n; ++t) {
        slot->data(0)[slot->position() + t] = static_cast<float>(batch[i].tokens[t]);
        sum += static_cast<float>(batch[i].tokens[t]);
      }
      if (fail) {
        if (fault_on_fail_) {
          MutexLock lock(&mu_);
          fault_ = absl::InternalError("the device was lost");
        }
        return absl::InternalError("the device failed part-way through the pass");
      }
      slot->CommitAppend(n);
      std::vector<float>& row = results[i];
      row.assign(kVocab, 0.0f);
      row[Favoured(static_cast<int64_t>(sum))] = 10.0f;
    }
    return absl::OkStatus();
  }

  // Fails the `calls`-th call from now (1: the next), after its first pass moved the state;
  // with `fault`, the model faults there too (Fault() reports it from then on).
  void FailCall(int calls, bool fault = false) {
    fault_on_fail_ = fault;
    fail_in_ = calls;
  }
  absl::Status Fault() const override {
    MutexLock lock(&mu_);
    return fault_;
  }
  void BlockNextPass() { block_next_ = true; }
  void WaitUntilBlocked() { ASSERT_TRUE(entered_.WaitForNotificationWithTimeout(kWait)); }
  void Release() { release_.Notify(); }
  // The passes so far: (the slot's position before it, tokens).
  std::vector<std::pair<int64_t, int64_t>> passes() const {
    MutexLock lock(&mu_);
    return passes_;
  }

 private:
  ModelInfo info_;
  StateLayout layout_;
  std::atomic<int> fail_in_{0};
  std::atomic<bool> fault_on_fail_{false};
  std::atomic<bool> block_next_{false};
  Notification entered_;
  Notification release_;
  mutable Mutex mu_;
  std::vector<std::pair<int64_t, int64_t>> passes_ ABSL_GUARDED_BY(mu_);
  absl::Status fault_ ABSL_GUARDED_BY(mu_);
};

// A connected cache daemon stand-in that plans nothing and accepts every call: the fakes below
// override what their tests script.
class QuietStateCache : public StateCache {
 public:
  bool connected() const override { return true; }
  uint64_t generation() const override { return 1; }
  absl::StatusOr<StatePlan> Lookup(absl::Span<const int32_t>, int64_t, int64_t,
                                   const std::string&) override {
    return StatePlan();
  }
  absl::Status StartSlot(int, bool, const std::string&, KvMemory*) override {
    return absl::OkStatus();
  }
  absl::Status StartRestore(uint64_t, int, const std::string&, KvMemory*) override {
    return absl::NotFoundError("no checkpoints here");
  }
  absl::StatusOr<std::optional<RestoreStats>> PollRestore(int, KvMemory*,
                                                          const RestoreLimits&) override {
    return absl::FailedPreconditionError("no restore runs");
  }
  void AbandonRestore(int, KvMemory*, const absl::Status&) override {}
  absl::Status UpdateFrontier(int, absl::Span<const int32_t>, int64_t) override {
    return absl::OkStatus();
  }
  absl::Status Capture(int, int64_t, CapturePointKind, const std::string&, int64_t,
                       KvMemory*) override {
    return absl::OkStatus();
  }
  void SlotIdle(int) override {}
  void SlotBusy(int) override {}
  bool RunBackgroundWork(KvMemory*, absl::Duration) override { return false; }
  bool HasBackgroundWork() const override { return false; }
};

}  // namespace cairn::infer::recovery_testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_ENGINE_SCHEDULER_RECOVERY_FAKES_H_
