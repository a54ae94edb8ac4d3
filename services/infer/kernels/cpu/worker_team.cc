#include "services/infer/kernels/cpu/worker_team.h"

#include <algorithm>
#include <chrono>

namespace cairn::infer::cpu {
namespace {

// Polls of an atomic between readings of the clock while a helper watches for the next loop.
constexpr int kPollsPerClockRead = 64;
// Polls the calling thread makes waiting for the helpers of a loop before it sleeps until the
// last one leaves.
constexpr int kPollsBeforeSleep = 2048;

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

WorkerTeam::WorkerTeam(int helpers, absl::Duration spin)
    : spin_ns_(std::max<int64_t>(0, absl::ToInt64Nanoseconds(spin))) {
  threads_.reserve(static_cast<size_t>(std::max(0, helpers)));
  for (int h = 0; h < helpers; ++h) threads_.emplace_back([this, h] { HelperMain(h + 1); });
}

WorkerTeam::~WorkerTeam() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    epoch_.fetch_add(1);
  }
  cv_.SignalAll();
  for (std::thread& t : threads_) t.join();
}

void WorkerTeam::Run(int64_t n, int max_helpers, absl::FunctionRef<void(int64_t, int)> fn) {
  if (n <= 0) return;
  const int seats = static_cast<int>(std::min<int64_t>({max_helpers, helpers(), n - 1}));
  if (seats <= 0) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  auto loop = std::make_shared<Loop>();
  loop->body = &fn;
  loop->n = n;
  loop->seats.store(seats);
  bool wake = false;
  {
    MutexLock lock(&mu_);
    loop_ = loop;
    epoch_.fetch_add(1);
    wake = sleeping_ > 0;
  }
  if (wake) cv_.SignalAll();
  for (int64_t i = loop->next.fetch_add(1); i < n; i = loop->next.fetch_add(1)) fn(i, 0);
  // Every item is taken: a helper that joins from now on takes none (`next` only grows, and a
  // helper counts itself in `joined` before it takes an item), so only those counted now can
  // still be running one.
  for (int polls = 0; loop->joined.load() > 0 && polls < kPollsBeforeSleep; ++polls) Pause();
  if (loop->joined.load() == 0) return;
  MutexLock lock(&mu_);
  loop->caller_sleeps.store(true);
  // A helper that leaves after this store sees it and signals under mu_; one that left before
  // it is already out of `joined`.
  while (loop->joined.load() > 0) done_.Wait(&mu_);
}

void WorkerTeam::HelperMain(int worker) {
  uint64_t seen = 0;
  while (true) {
    if (spin_ns_ > 0 && epoch_.load() == seen) {
      const int64_t until = NowNs() + spin_ns_;
      for (int polls = 1; epoch_.load() == seen; ++polls) {
        Pause();
        if (polls % kPollsPerClockRead == 0 && NowNs() > until) break;
      }
    }
    std::shared_ptr<Loop> loop;
    {
      MutexLock lock(&mu_);
      if (epoch_.load() == seen && !stop_) {
        ++sleeping_;
        while (epoch_.load() == seen && !stop_) cv_.Wait(&mu_);
        --sleeping_;
      }
      if (stop_) return;
      seen = epoch_.load();
      loop = loop_;
    }
    if (loop == nullptr || loop->seats.fetch_sub(1) <= 0) continue;
    loop->joined.fetch_add(1);
    // An item below n means the caller is still in Run, so `body` is alive.
    for (int64_t i = loop->next.fetch_add(1); i < loop->n; i = loop->next.fetch_add(1)) {
      (*loop->body)(i, worker);
    }
    if (loop->joined.fetch_sub(1) == 1 && loop->caller_sleeps.load()) {
      MutexLock lock(&mu_);
      done_.SignalAll();
    }
  }
}

}  // namespace cairn::infer::cpu
