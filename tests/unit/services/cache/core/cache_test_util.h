#ifndef CAIRN_TESTS_UNIT_SERVICES_CACHE_CORE_CACHE_TEST_UTIL_H_
#define CAIRN_TESTS_UNIT_SERVICES_CACHE_CORE_CACHE_TEST_UTIL_H_

// Helpers shared by the cache core tests: token sequences, layouts and a cache with a fake
// clock.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/time/clock.h"
#include "services/cache/core/checkpoint_cache.h"
#include "services/cache/core/model_layout.h"

namespace cairn::cache::testing {

// `n` distinct tokens base, base + 1, ...: sequences with different bases never share a token.
inline std::vector<TokenId> Tokens(int64_t n, TokenId base) {
  std::vector<TokenId> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(base + static_cast<TokenId>(i));
  return out;
}

inline std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// One rows component and one private component.
inline ModelLayout SimpleLayout(int64_t bytes_per_row, int64_t private_bytes,
                                int64_t chunk_rows = ModelLayout::kDefaultChunkRows) {
  ModelLayout layout;
  layout.chunk_rows = chunk_rows;
  layout.components.push_back({"kv", ComponentKind::kRows, bytes_per_row, 0});
  layout.components.push_back({"recurrent", ComponentKind::kPrivate, 0, private_bytes});
  return layout;
}

inline const Identities& TestIds() {
  static const Identities* ids = new Identities{"model-a", ""};
  return *ids;
}

// Records which checkpoints the core says left the disk tier and the RAM tier.
class TierListener final : public ResidencyListener {
 public:
  void ChunkLeftRam(ChunkId) override {}
  void CheckpointLeftRam(CheckpointId id) override { left_ram.push_back(id); }
  void CheckpointLeftDisk(CheckpointId id) override { left_disk.push_back(id); }
  void SpillFinished(uint64_t, bool, const std::string&) override {}
  std::vector<CheckpointId> left_ram;
  std::vector<CheckpointId> left_disk;
};

// A cache with `options` and `layout` registered under TestIds().
struct TestCache {
  FakeClock clock;
  std::unique_ptr<CheckpointCache> cache;
};

inline std::unique_ptr<TestCache> MakeCache(CacheOptions options, const ModelLayout& layout) {
  auto t = std::make_unique<TestCache>();
  absl::StatusOr<std::unique_ptr<CheckpointCache>> cache =
      CheckpointCache::Create(std::move(options), &t->clock);
  if (!cache.ok()) return nullptr;
  t->cache = std::move(*cache);
  if (!t->cache->RegisterLayout(TestIds().compatibility, layout).ok()) return nullptr;
  return t;
}

}  // namespace cairn::cache::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_CACHE_CORE_CACHE_TEST_UTIL_H_
