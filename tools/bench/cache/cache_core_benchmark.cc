// Lookup and admission cost of the cache core at the seed's scale: 128 RAM checkpoints of
// ~100K tokens (16 conversations sharing a 6,000-token system prompt, 8 checkpoints 2,048
// apart each, as in figure 9), Flash-Next sizes.
//
//   ninja -C build/<release dir> cairn_cache_core_benchmark
//   build/<release dir>/tools/bench/cache/cairn_cache_core_benchmark

#include <cstdint>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/status/check.h"
#include "common/time/clock.h"
#include "services/cache/core/checkpoint_cache.h"

namespace cairn::cache {
namespace {

constexpr int kConversations = 16;
constexpr int kCheckpointsPerConversation = 8;
constexpr int64_t kDepth = 100352;
constexpr int64_t kSpacing = 2048;
constexpr int64_t kSystemPrompt = 6000;
const Identities kIds{"flash-next", ""};

std::vector<TokenId> Conversation(int c) {
  std::vector<TokenId> tokens;
  tokens.reserve(kDepth + 4096);
  for (int64_t i = 0; i < kDepth + 4096; ++i) {
    tokens.push_back(i < kSystemPrompt ? static_cast<TokenId>(i)
                                       : static_cast<TokenId>(1000000 * (c + 1) + i));
  }
  return tokens;
}

struct Fixture {
  FakeClock clock;
  std::unique_ptr<CheckpointCache> cache;
  std::vector<std::vector<TokenId>> convs;
};

// 128 checkpoints; the slot of conversation c is {1, c}.
std::unique_ptr<Fixture> Build(int max_checkpoints) {
  auto f = std::make_unique<Fixture>();
  CacheOptions options;
  options.ram_bytes = int64_t{1} << 40;  // Accounting only: nothing is allocated.
  options.retention.max_checkpoints = max_checkpoints;
  f->cache = std::move(CheckpointCache::Create(options, &f->clock)).value();
  ModelLayout layout;
  layout.components = {{"kv", ComponentKind::kRows, 27460, 0},
                       {"recurrent", ComponentKind::kPrivate, 0, 133000000}};
  CAIRN_CHECK(f->cache->RegisterLayout(kIds.compatibility, layout).ok());
  for (int c = 0; c < kConversations; ++c) {
    f->convs.push_back(Conversation(c));
    const std::vector<TokenId>& tokens = f->convs.back();
    SlotKey slot{1, c};
    CAIRN_CHECK(f->cache->StartCold(slot, kIds, "conv").ok());
    int64_t at = 0;
    for (int k = kCheckpointsPerConversation - 1; k >= 0; --k) {
      int64_t depth = kDepth - k * kSpacing;
      CAIRN_CHECK(f->cache->ExtendSlot(slot, absl::MakeConstSpan(tokens).subspan(at, depth - at))
                      .ok());
      at = depth;
      absl::StatusOr<CaptureTicket> t = f->cache->BeginCapture(slot, CaptureKind::kGrid, "conv", -1);
      CAIRN_CHECK(t.ok());
      CAIRN_CHECK(f->cache->CommitCapture(t->id).ok());
    }
  }
  CAIRN_CHECK(f->cache->Checkpoints().size() == kConversations * kCheckpointsPerConversation);
  return f;
}

Fixture& Shared() {
  static Fixture* f = Build(128).release();
  return *f;
}

// A 100K-token prompt continuing conversation 7: walks ~100K tokens to the deepest candidate.
void BM_Lookup100KTokenPrompt(benchmark::State& state) {
  Fixture& f = Shared();
  std::vector<TokenId> prompt(f.convs[7].begin(), f.convs[7].begin() + kDepth + 512);
  for (auto _ : state) {
    absl::StatusOr<LookupResult> r = f.cache->Lookup({kIds, prompt, -1, 2});
    benchmark::DoNotOptimize(r);
    CAIRN_CHECK(r.ok() && r->best.depth == kDepth);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(prompt.size()));
}
BENCHMARK(BM_Lookup100KTokenPrompt)->Unit(benchmark::kMicrosecond);

// A prompt that leaves the tree after the system prompt.
void BM_LookupMissAfterSystemPrompt(benchmark::State& state) {
  Fixture& f = Shared();
  std::vector<TokenId> prompt = Conversation(99);
  for (auto _ : state) {
    absl::StatusOr<LookupResult> r = f.cache->Lookup({kIds, prompt, -1, 2});
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_LookupMissAfterSystemPrompt)->Unit(benchmark::kMicrosecond);

// Admission at depth ~100K with the cache at its 128-checkpoint cap, so every admission ranks
// the other checkpoints and evicts one. Frontier updates are excluded (measured below).
void BM_AdmitAtCapWithEviction(benchmark::State& state) {
  std::unique_ptr<Fixture> f = Build(128);
  SlotKey slot{1, 0};
  int64_t at = kDepth;
  for (auto _ : state) {
    state.PauseTiming();
    CAIRN_CHECK(f->cache->ExtendSlot(slot, absl::MakeConstSpan(f->convs[0]).subspan(at, 1)).ok());
    ++at;
    if (at >= static_cast<int64_t>(f->convs[0].size())) {
      state.SkipWithError("ran out of tokens");
      break;
    }
    state.ResumeTiming();
    absl::StatusOr<CaptureTicket> t = f->cache->BeginCapture(slot, CaptureKind::kGrid, "conv", -1);
    CAIRN_CHECK(t.ok());
    CAIRN_CHECK(f->cache->CommitCapture(t->id).ok());
  }
}
BENCHMARK(BM_AdmitAtCapWithEviction)->Unit(benchmark::kMicrosecond)->Iterations(2000);

// One frontier update (UpdateFrontier): re-indexing a ~100K-token live frontier.
void BM_ExtendFrontier100K(benchmark::State& state) {
  std::unique_ptr<Fixture> f = Build(128);
  SlotKey slot{1, 3};
  int64_t at = kDepth;
  for (auto _ : state) {
    CAIRN_CHECK(f->cache->ExtendSlot(slot, absl::MakeConstSpan(f->convs[3]).subspan(at, 1)).ok());
    if (++at >= static_cast<int64_t>(f->convs[3].size())) {
      state.SkipWithError("ran out of tokens");
      break;
    }
  }
}
BENCHMARK(BM_ExtendFrontier100K)->Unit(benchmark::kMicrosecond)->Iterations(2000);

}  // namespace
}  // namespace cairn::cache
