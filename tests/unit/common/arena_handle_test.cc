#include "common/shm/arena_handle.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn {
namespace {

constexpr uint64_t kIncarnation = 0xC0FFEE;
constexpr uint64_t kSize = 1 << 20;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

struct BadHandle {
  std::string name;
  ArenaHandle handle;
  absl::StatusCode code;
};

// The G3 table of docs/reliability.md: every entry must be refused, in release builds too.
TEST(ArenaHandleValidatorTest, RejectsEveryBadHandle) {
  ArenaHandleValidator v(kIncarnation, kSize, 64);
  std::vector<BadHandle> table = {
      {"zero length", {kIncarnation, 0, 0}, absl::StatusCode::kInvalidArgument},
      {"offset at size", {kIncarnation, kSize, 64}, absl::StatusCode::kInvalidArgument},
      {"offset at size+1", {kIncarnation, kSize + 1, 1}, absl::StatusCode::kInvalidArgument},
      {"length size+1", {kIncarnation, 0, kSize + 1}, absl::StatusCode::kInvalidArgument},
      {"end one past size", {kIncarnation, kSize - 64, 65}, absl::StatusCode::kInvalidArgument},
      {"offset 2^63", {kIncarnation, 1ull << 63, 64}, absl::StatusCode::kInvalidArgument},
      {"length 2^63", {kIncarnation, 0, 1ull << 63}, absl::StatusCode::kInvalidArgument},
      {"offset 2^64-1", {kIncarnation, kMax, 1}, absl::StatusCode::kInvalidArgument},
      {"length 2^64-1", {kIncarnation, 0, kMax}, absl::StatusCode::kInvalidArgument},
      {"offset+length wraps", {kIncarnation, 64, kMax - 63}, absl::StatusCode::kInvalidArgument},
      {"offset+length wraps to 0",
       {kIncarnation, 128, kMax - 127},
       absl::StatusCode::kInvalidArgument},
      {"misaligned", {kIncarnation, 3, 64}, absl::StatusCode::kInvalidArgument},
      {"stale incarnation", {kIncarnation + 1, 0, 64}, absl::StatusCode::kFailedPrecondition},
      {"incarnation zero", {0, 0, 64}, absl::StatusCode::kFailedPrecondition},
  };
  for (const BadHandle& bad : table) {
    absl::Status s = v.Validate(bad.handle);

    EXPECT_EQ(s.code(), bad.code) << bad.name << ": " << s;
  }
}

TEST(ArenaHandleValidatorTest, AcceptsRangesInside) {
  ArenaHandleValidator v(kIncarnation, kSize, 64);

  CAIRN_EXPECT_OK(v.Validate({kIncarnation, 0, kSize}));
  CAIRN_EXPECT_OK(v.Validate({kIncarnation, 0, 1}));
  CAIRN_EXPECT_OK(v.Validate({kIncarnation, kSize - 64, 64}));
  CAIRN_EXPECT_OK(v.Validate({kIncarnation, 4096, 100}));
}

TEST(ArenaHandleValidatorTest, ResolveReturnsTheBytes) {
  std::vector<uint8_t> arena(kSize);
  ArenaHandleValidator v(kIncarnation, kSize);

  auto span = v.Resolve({kIncarnation, 10, 20}, arena.data());

  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ(span->data(), arena.data() + 10);
  EXPECT_EQ(span->size(), 20u);
  EXPECT_FALSE(v.Resolve({kIncarnation, kSize, 1}, arena.data()).ok());
}

TEST(ArenaHandleTest, IncarnationsAreNonZeroAndDistinct) {
  uint64_t a = NewIncarnation();
  uint64_t b = NewIncarnation();

  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
}

TEST(ArenaHandleTest, IdBasesAreRandomAndExactInJson) {
  uint64_t a = RandomIdBase();
  uint64_t b = RandomIdBase();

  EXPECT_NE(a, b);
  for (uint64_t v : {a, b}) {
    EXPECT_GE(v, kIdBaseFloor);
    EXPECT_LT(v, kIdBaseFloor + kIdBaseSpan);
    EXPECT_LT(v, uint64_t{1} << 53);
  }
}

TEST(RangeInsideTest, Edges) {
  EXPECT_TRUE(RangeInside(0, 0, 0));
  EXPECT_TRUE(RangeInside(10, 0, 10));
  EXPECT_FALSE(RangeInside(11, 0, 10));
  EXPECT_FALSE(RangeInside(1, kMax, 10));
  EXPECT_FALSE(RangeInside(kMax, kMax, kMax - 1));
}

}  // namespace
}  // namespace cairn
