// Property tests: random agent-like traffic over the cache with small budgets, checking the
// invariants after every request.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/cache/core/checkpoint_cache.h"
#include "services/cache/core/event_log.h"
#include "services/cache/core/request_runner.h"
#include "tests/unit/services/cache/core/cache_test_util.h"

namespace cairn::cache {
namespace {

using ::cairn::cache::testing::SimpleLayout;

// Deterministic random numbers for the trace.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t Next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }
  int64_t Uniform(int64_t lo, int64_t hi) {  // [lo, hi]
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Chance(int percent) { return Uniform(0, 99) < percent; }

 private:
  uint64_t state_;
};

struct Conv {
  std::string name;
  Identities ids;
  std::vector<TokenId> history;
};

// Checks every invariant the cache promises; returns the first violation or "".
std::string CheckInvariants(const CheckpointCache& cache, const VectorEventSink& sink) {
  const ByteLedger& ram = cache.ram_ledger();
  const ByteLedger& disk = cache.disk_ledger();
  if (ram.used() + ram.reserved() > ram.budget()) return "ram ledger over budget";
  if (disk.used() + disk.reserved() > disk.budget()) return "disk ledger over budget";
  std::map<ChunkId, int64_t> ram_refs;
  std::map<ChunkId, int64_t> disk_refs;
  int64_t in_ram = 0;
  for (const CheckpointInfo& c : cache.Checkpoints()) {
    if (!c.in_ram && !c.on_disk) return absl::StrCat("checkpoint ", c.id, " in no tier");
    in_ram += c.in_ram ? 1 : 0;
    for (ChunkId id : c.chunks) {
      if (c.in_ram) ++ram_refs[id];
      if (c.on_disk) ++disk_refs[id];
    }
  }
  if (in_ram > cache.options().retention.max_checkpoints) return "checkpoint cap exceeded";
  for (const auto& [id, refs] : ram_refs) {
    absl::StatusOr<ChunkInfo> chunk = cache.GetChunk(id);
    if (!chunk.ok()) return absl::StrCat("chunk ", id, " freed while referenced");
    if (chunk->ram_refs != refs) return absl::StrCat("chunk ", id, " ram refs wrong");
  }
  for (const auto& [id, refs] : disk_refs) {
    absl::StatusOr<ChunkInfo> chunk = cache.GetChunk(id);
    if (!chunk.ok()) return absl::StrCat("chunk ", id, " freed while on disk");
    if (chunk->disk_refs != refs) return absl::StrCat("chunk ", id, " disk refs wrong");
  }
  absl::StatusOr<CacheStateSummary> replayed = ReplayEvents(sink.events());
  if (!replayed.ok()) return std::string(replayed.status().message());
  if (!(*replayed == cache.Summary())) return "replaying the event log gives another state";
  return "";
}

// Runs `steps` random requests from `seed`, asserting the invariants after each.
void RunRandomTraffic(int seed, int steps) {
  Rng rng(static_cast<uint64_t>(seed));
  CacheOptions options;
  options.ram_bytes = rng.Uniform(20000, 400000);
  options.disk_bytes = rng.Chance(50) ? rng.Uniform(50000, 800000) : 0;
  options.retention.max_checkpoints = static_cast<int>(rng.Uniform(3, 20));
  options.planner.grid_step = 256;
  options.planner.max_pass_tokens = 300;
  options.planner.learned_min_tokens = 64;
  FakeClock clock;
  absl::StatusOr<std::unique_ptr<CheckpointCache>> created =
      CheckpointCache::Create(options, &clock);
  ASSERT_TRUE(created.ok()) << created.status();
  CheckpointCache& cache = **created;
  VectorEventSink sink;
  cache.events().AddSink(&sink);
  ASSERT_TRUE(cache.RegisterLayout("m1", SimpleLayout(10, 2000, 64)).ok());
  ASSERT_TRUE(cache.RegisterLayout("m2", SimpleLayout(7, 900, 32)).ok());
  std::vector<std::unique_ptr<RequestRunner>> runners;
  runners.push_back(std::make_unique<RequestRunner>(&cache, rng.Uniform(1, 3), 1));
  runners.push_back(std::make_unique<RequestRunner>(&cache, rng.Uniform(1, 2), 2));

  std::vector<TokenId> system;
  for (int i = 0; i < 700; ++i) system.push_back(static_cast<TokenId>(rng.Uniform(0, 50)));
  std::vector<Conv> convs;
  for (int i = 0; i < 6; ++i) {
    Conv c;
    c.name = absl::StrCat("c", i);
    c.ids = {i % 3 == 2 ? "m2" : "m1", i == 4 ? "image:1" : ""};
    c.history.assign(system.begin(), system.begin() + rng.Uniform(0, 700));
    convs.push_back(std::move(c));
  }

  for (int step = 0; step < steps; ++step) {
    clock.Advance(absl::Seconds(rng.Uniform(1, 100)));
    Conv& conv = convs[static_cast<size_t>(rng.Uniform(0, 5))];
    if (rng.Chance(15) && !conv.history.empty()) {  // Edit: diverge somewhere earlier.
      conv.history.resize(
          static_cast<size_t>(rng.Uniform(0, static_cast<int64_t>(conv.history.size()))));
    }
    int64_t append = rng.Uniform(1, 600);
    for (int64_t i = 0; i < append; ++i) {
      conv.history.push_back(static_cast<TokenId>(rng.Uniform(0, 50)));
    }
    std::vector<TokenId> generated;
    for (int64_t i = rng.Uniform(0, 40); i > 0; --i) {
      generated.push_back(static_cast<TokenId>(rng.Uniform(0, 50)));
    }
    ServeRequest request;
    request.identities = conv.ids;
    request.conversation = conv.name;
    request.tokens = conv.history;
    request.stable_boundary =
        rng.Chance(70) ? static_cast<int64_t>(conv.history.size()) - rng.Uniform(0, 5) : -1;
    request.generated = generated;
    RequestRunner& runner = *runners[static_cast<size_t>(rng.Uniform(0, 1))];
    uint64_t session = &runner == runners[0].get() ? 1 : 2;

    // The restore the runner will choose: its tokens must be a prefix of the prompt and its
    // identities must match.
    absl::StatusOr<LookupResult> found =
        cache.Lookup({conv.ids, conv.history, request.stable_boundary, session});
    ASSERT_TRUE(found.ok()) << found.status();
    if (found->best.tier == Tier::kRam || found->best.tier == Tier::kDisk) {
      absl::StatusOr<std::vector<TokenId>> tokens = cache.CheckpointTokens(found->best.checkpoint);
      absl::StatusOr<CheckpointInfo> info = cache.GetCheckpoint(found->best.checkpoint);
      ASSERT_TRUE(tokens.ok() && info.ok());
      ASSERT_LE(tokens->size(), conv.history.size());
      EXPECT_TRUE(std::equal(tokens->begin(), tokens->end(), conv.history.begin()));
      EXPECT_EQ(info->compatibility, conv.ids.compatibility);
    }
    absl::StatusOr<ServeOutcome> out = runner.Serve(request);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->used.tier, found->best.tier);
    EXPECT_EQ(out->used.depth, found->best.depth);
    EXPECT_EQ(out->prefilled, static_cast<int64_t>(conv.history.size()) - out->used.depth);
    conv.history.insert(conv.history.end(), generated.begin(), generated.end());

    if (rng.Chance(5)) cache.DropSlot({session, static_cast<int32_t>(rng.Uniform(0, 2))});
    if (rng.Chance(5)) {
      std::vector<CheckpointInfo> all = cache.Checkpoints();
      if (!all.empty()) {
        const CheckpointInfo& victim =
            all[static_cast<size_t>(rng.Uniform(0, static_cast<int64_t>(all.size()) - 1))];
        if (!victim.chunks.empty() && victim.on_disk && victim.id % 2 == 0) {
          // Only the chunk's disk copy is lost (no draw, so the seeds' traffic stays the same).
          ASSERT_TRUE(cache.ForgetDiskChunk(victim.chunks.front(), "chunk file corrupt").ok());
        } else if (!victim.chunks.empty()) {
          ASSERT_TRUE(cache.QuarantineChunk(victim.chunks.front(), "corrupt").ok());
        } else if (victim.in_ram) {
          ASSERT_TRUE(cache.Evict(victim.id, "explicit").ok());
        }
      }
    }
    std::string violation = CheckInvariants(cache, sink);
    ASSERT_EQ(violation, "") << "seed " << seed << " step " << step;
  }
  EXPECT_GT(sink.events().size(), 0u);
}

class CachePropertyTest : public ::testing::TestWithParam<int> {};

TEST_P(CachePropertyTest, InvariantsHoldOverRandomTraffic) { RunRandomTraffic(GetParam(), 120); }

INSTANTIATE_TEST_SUITE_P(Seeds, CachePropertyTest, ::testing::Range(1, 41),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "Seed" + std::to_string(p.param);
                         });

// A longer soak, off by default: CAIRN_CACHE_SOAK_SEEDS=N runs seeds F..F+N-1 with 1,000
// requests each, F = CAIRN_CACHE_SOAK_FIRST_SEED (default 1000; shards of a long run differ).
TEST(CachePropertySoakTest, InvariantsHoldOverManySeeds) {
  const char* env = std::getenv("CAIRN_CACHE_SOAK_SEEDS");
  if (env == nullptr) GTEST_SKIP() << "set CAIRN_CACHE_SOAK_SEEDS to run the soak";
  const int seeds = std::atoi(env);
  const char* first_env = std::getenv("CAIRN_CACHE_SOAK_FIRST_SEED");
  const int first = first_env != nullptr ? std::atoi(first_env) : 1000;
  std::cout << "cache soak: seeds " << first << ".." << first + seeds - 1 << "\n";
  for (int seed = first; seed < first + seeds && !::testing::Test::HasFatalFailure(); ++seed) {
    RunRandomTraffic(seed, 1000);
  }
}

}  // namespace
}  // namespace cairn::cache
