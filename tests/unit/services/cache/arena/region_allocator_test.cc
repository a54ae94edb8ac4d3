// The arena allocator: pin-step boundaries, reuse, handle validation (docs/architecture.md §3,
// docs/reliability.md SM4-SM6, test G3).

#include "services/cache/arena/region_allocator.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

constexpr uint64_t kIncarnation = 0x1234;
constexpr uint64_t kKiB = 1024;

// A small geometry: 64 KiB first pin, 16 KiB steps, 1 KiB alignment, 256 KiB arena.
RegionAllocatorOptions SmallOptions() {
  RegionAllocatorOptions o;
  o.arena_bytes = 256 * kKiB;
  o.alignment = kKiB;
  o.first_pin_bytes = 64 * kKiB;
  o.pin_step_bytes = 16 * kKiB;
  return o;
}

std::unique_ptr<RegionAllocator> MakeAllocator(const RegionAllocatorOptions& o = SmallOptions()) {
  auto a = RegionAllocator::Create(kIncarnation, o);
  return a.ok() ? std::move(*a) : nullptr;
}

bool Straddles(const ArenaHandle& h, const RegionAllocator& a) {
  return a.NextPinBoundary(h.offset) < h.offset + h.length;
}

TEST(RegionAllocatorTest, RejectsBadGeometry) {
  RegionAllocatorOptions o = SmallOptions();
  o.alignment = 3000;

  EXPECT_THAT(RegionAllocator::Create(kIncarnation, o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(RegionAllocatorTest, PinBoundariesFollowFirstPinThenSteps) {
  auto a = MakeAllocator();
  ASSERT_NE(a, nullptr);

  EXPECT_EQ(a->NextPinBoundary(0), 64 * kKiB);
  EXPECT_EQ(a->NextPinBoundary(64 * kKiB), 80 * kKiB);
  EXPECT_EQ(a->NextPinBoundary(79 * kKiB), 80 * kKiB);
  EXPECT_EQ(a->NextPinBoundary(std::numeric_limits<uint64_t>::max() - 1),
            std::numeric_limits<uint64_t>::max());
}

TEST(RegionAllocatorTest, RegionSkipsAheadRatherThanStraddleABoundary) {
  auto a = MakeAllocator();
  ASSERT_NE(a, nullptr);
  auto first = a->Allocate(60 * kKiB, RegionKind::kPrivateState);
  ASSERT_TRUE(first.ok()) << first.status();

  auto second = a->Allocate(8 * kKiB, RegionKind::kChunk);

  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->handle.offset, 64 * kKiB);
  EXPECT_FALSE(Straddles(second->handle, *a));
  auto small = a->Allocate(4 * kKiB, RegionKind::kTail);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->handle.offset, 60 * kKiB);  // The gap before the boundary is reused.
}

TEST(RegionAllocatorTest, RandomAllocationsNeverStraddleOrOverlap) {
  auto a = MakeAllocator();
  ASSERT_NE(a, nullptr);
  std::mt19937_64 rng(7);
  std::vector<ArenaHandle> live;

  for (int i = 0; i < 2000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t victim = rng() % live.size();
      ASSERT_TRUE(a->Free(live[victim]).ok());
      live.erase(live.begin() + victim);
      continue;
    }
    auto r = a->Allocate(1 + rng() % (16 * kKiB), RegionKind::kChunk);
    if (!r.ok()) {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
      continue;
    }
    ASSERT_FALSE(Straddles(r->handle, *a)) << r->handle.offset << "+" << r->handle.length;
    for (const ArenaHandle& other : live) {
      ASSERT_TRUE(r->handle.offset + r->handle.length <= other.offset ||
                  other.offset + other.length <= r->handle.offset);
    }
    live.push_back(r->handle);
  }

  for (const ArenaHandle& h : live) ASSERT_TRUE(a->Free(h).ok());
  EXPECT_EQ(a->used_bytes(), 0u);
  auto whole_segment = a->Allocate(64 * kKiB, RegionKind::kChunk);  // Coalesced again.
  EXPECT_TRUE(whole_segment.ok()) << whole_segment.status();
}

TEST(RegionAllocatorTest, ExhaustionAndOversizeAreErrors) {
  auto a = MakeAllocator();
  ASSERT_NE(a, nullptr);

  EXPECT_THAT(a->Allocate(0, RegionKind::kChunk).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(a->Allocate(65 * kKiB, RegionKind::kChunk).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(a->Allocate(16 * kKiB, RegionKind::kChunk).ok());
  EXPECT_THAT(a->Allocate(16 * kKiB, RegionKind::kChunk).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(RegionAllocatorTest, ValidateLiveRejectsTheBoundsTable) {
  auto a = MakeAllocator();
  ASSERT_NE(a, nullptr);
  auto r = a->Allocate(8 * kKiB, RegionKind::kChunk);
  ASSERT_TRUE(r.ok());
  const ArenaHandle h = r->handle;
  const uint64_t max = std::numeric_limits<uint64_t>::max();

  CAIRN_EXPECT_OK(a->ValidateLive(h));
  CAIRN_EXPECT_OK(a->ValidateLive({kIncarnation, h.offset + 100, 200}));
  EXPECT_THAT(a->ValidateLive({kIncarnation + 1, h.offset, h.length}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  const std::vector<ArenaHandle> bad = {
      {kIncarnation, h.offset, 0},
      {kIncarnation, h.offset, h.length + 1},
      {kIncarnation, h.offset + h.length, 1},  // Just past the region (free).
      {kIncarnation, 256 * kKiB, 1},           // At the arena size.
      {kIncarnation, 256 * kKiB + 1, 1},
      {kIncarnation, uint64_t{1} << 63, 1},
      {kIncarnation, max, 1},
      {kIncarnation, h.offset + 1, max},  // offset + length wraps.
  };
  for (const ArenaHandle& b : bad) {
    EXPECT_THAT(a->ValidateLive(b), StatusIs(absl::StatusCode::kInvalidArgument))
        << b.offset << "+" << b.length;
  }
  ASSERT_TRUE(a->Free(h).ok());
  EXPECT_THAT(a->ValidateLive(h), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(a->Free(h), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace cairn::cache
