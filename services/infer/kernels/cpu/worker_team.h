#ifndef CAIRN_SERVICES_INFER_KERNELS_CPU_WORKER_TEAM_H_
#define CAIRN_SERVICES_INFER_KERNELS_CPU_WORKER_TEAM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "common/concurrency/mutex.h"

namespace cairn::infer::cpu {

// Helper threads that run the items of one parallel loop at a time together with the calling
// thread (CpuKernelBackend's loops). Between loops a helper may watch for the next one for up
// to `spin` before it sleeps on a condition variable (a decode step runs about a hundred short
// loops back to back, each a wake-up otherwise); with `spin` zero every helper sleeps between
// loops. Either way a loop costs one shared allocation and, only while a helper sleeps, one
// signal: no queue of closures, and the caller waits for the helpers that joined by polling
// for a few microseconds (they are finishing their last item), then on a condition variable
// (a prefill pass's items take milliseconds: polling would spend the caller's processor time).
//
// The calling thread takes items too and waits only for helpers that joined the loop before
// every item was taken (a helper the machine delays then finds nothing to do, and the loop does
// not wait for it to be scheduled).
//
// Thread-compatible for Run (one loop at a time, from one calling thread at a time, as the
// backend is used); the helpers are the team's own.
class WorkerTeam {
 public:
  // Starts `helpers` (>= 0) helper threads.
  WorkerTeam(int helpers, absl::Duration spin);
  ~WorkerTeam();
  WorkerTeam(const WorkerTeam&) = delete;
  WorkerTeam& operator=(const WorkerTeam&) = delete;

  int helpers() const { return static_cast<int>(threads_.size()); }

  // Runs fn(i, worker) for every i in [0, n), on the calling thread (worker 0) and the helpers
  // (workers 1 .. helpers()); at most `max_helpers` helpers join. Returns when every item is done.
  void Run(int64_t n, int max_helpers, absl::FunctionRef<void(int64_t, int)> fn);

 private:
  // One loop: shared with the helpers, which may hold it after Run returns.
  struct Loop {
    const absl::FunctionRef<void(int64_t, int)>* body = nullptr;
    int64_t n = 0;
    int max_helpers = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int> joined{0};  // Helpers between joining and leaving.
    std::atomic<int> seats{0};   // Helpers that may still join.
    // The caller sleeps on done_ until `joined` is zero (set under mu_).
    std::atomic<bool> caller_sleeps{false};
  };

  void HelperMain(int worker);

  const int64_t spin_ns_;
  // Bumped (under mu_) when loop_ is replaced; helpers spin on it.
  std::atomic<uint64_t> epoch_{0};
  Mutex mu_;
  CondVar cv_;    // Helpers wait here for the next loop.
  CondVar done_;  // The caller waits here for a loop's last helper (Loop::caller_sleeps).
  std::shared_ptr<Loop> loop_ ABSL_GUARDED_BY(mu_);
  int sleeping_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // Written only by the constructor and destructor.
};

}  // namespace cairn::infer::cpu

#endif  // CAIRN_SERVICES_INFER_KERNELS_CPU_WORKER_TEAM_H_
