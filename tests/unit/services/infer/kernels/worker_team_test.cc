#include "services/infer/kernels/cpu/worker_team.h"

#include <atomic>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace cairn::infer::cpu {
namespace {

// Every item of every loop runs exactly once, on a worker index in range, whether the helpers
// watch for the next loop or sleep between loops, and with loops back to back (the helpers then
// often join a loop late or not at all).
void CheckLoops(int helpers, absl::Duration spin) {
  WorkerTeam team(helpers, spin);
  EXPECT_EQ(team.helpers(), helpers);
  for (int round = 0; round < 2000; ++round) {
    const int64_t n = round % 37;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> bad_worker{0};
    team.Run(n, helpers, [&](int64_t i, int worker) {
      if (worker < 0 || worker > helpers) bad_worker.fetch_add(1);
      hits[static_cast<size_t>(i)].fetch_add(1);
    });
    // Run returned: every item is done and visible here.
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
    ASSERT_EQ(bad_worker.load(), 0);
  }
}

TEST(WorkerTeamTest, EveryItemOnceWithSpinningHelpers) { CheckLoops(3, absl::Microseconds(100)); }

TEST(WorkerTeamTest, EveryItemOnceWithSleepingHelpers) { CheckLoops(2, absl::ZeroDuration()); }

TEST(WorkerTeamTest, WithoutHelpersTheCallerRunsEverything) {
  WorkerTeam team(0, absl::Microseconds(100));
  std::vector<int> workers;
  team.Run(5, 4, [&](int64_t, int worker) { workers.push_back(worker); });
  EXPECT_EQ(workers, std::vector<int>(5, 0));
}

TEST(WorkerTeamTest, AtMostMaxHelpersJoin) {
  WorkerTeam team(3, absl::Microseconds(100));
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> seen_mask{0};
    team.Run(64, 1, [&](int64_t, int worker) { seen_mask.fetch_or(1 << worker); });
    // The caller (worker 0) and at most one helper.
    EXPECT_LE(__builtin_popcount(seen_mask.load() & ~1), 1);
  }
}

}  // namespace
}  // namespace cairn::infer::cpu
