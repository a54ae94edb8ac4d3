// Arena residency: one region per chunk and per checkpoint state, freed exactly once.

#include "services/cache/arena_residency.h"

#include <memory>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache {
namespace {

using ::cairn::testing::StatusIs;

constexpr uint64_t kArenaBytes = uint64_t{1} << 20;
constexpr uint64_t kPage = 4096;

class ArenaResidencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ArenaOptions o;
    o.size_bytes = kArenaBytes;
    o.first_pin_bytes = kArenaBytes;
    o.pin_step_bytes = kArenaBytes;
    o.alignment = kPage;
    auto arena = Arena::Create(o);
    ASSERT_TRUE(arena.ok()) << arena.status();
    arena_ = std::move(*arena);
    residency_ = std::make_unique<ArenaResidency>(arena_.get());
  }
  uint64_t UsedBytes() const { return arena_->allocator().used_bytes(); }

  std::unique_ptr<Arena> arena_;
  std::unique_ptr<ArenaResidency> residency_;
};

TEST_F(ArenaResidencyTest, AChunkGetsOneRegionHoweverOftenItIsReserved) {
  auto first = residency_->ReserveChunk(7, 3 * kPage);
  ASSERT_TRUE(first.ok()) << first.status();
  const uint64_t used_after_first = UsedBytes();

  auto again = residency_->ReserveChunk(7, 3 * kPage);

  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(UsedBytes(), used_after_first);
  EXPECT_EQ(residency_->chunk_count(), 1u);
  auto bytes = residency_->Resolve(**again);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->size(), 3 * kPage);
}

TEST_F(ArenaResidencyTest, DroppingFreesTheRegionOnce) {
  ASSERT_TRUE(residency_->ReserveChunk(1, kPage).ok());
  auto state = residency_->Allocate(kPage + 100, RegionKind::kPrivateState);
  ASSERT_TRUE(state.ok()) << state.status();
  StateBytes sb;
  sb.region = *state;
  sb.private_bytes = kPage;
  sb.tail_bytes = 100;
  residency_->AdoptCheckpoint(5, sb);

  residency_->DropChunk(1);
  residency_->DropChunk(1);  // Gone already: nothing to free.
  residency_->DropCheckpoint(5);
  residency_->DropCheckpoint(5);

  EXPECT_EQ(UsedBytes(), 0u);
  EXPECT_EQ(residency_->FindChunk(1), nullptr);
  EXPECT_EQ(residency_->FindCheckpoint(5), nullptr);
}

TEST_F(ArenaResidencyTest, AFullArenaIsResourceExhaustedAndRecordsNothing) {
  ASSERT_TRUE(residency_->ReserveChunk(1, kArenaBytes).ok());

  EXPECT_THAT(residency_->ReserveChunk(2, kPage).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));

  EXPECT_EQ(residency_->FindChunk(2), nullptr);
}

TEST_F(ArenaResidencyTest, AZeroByteAllocationHoldsNoRegion) {
  auto none = residency_->Allocate(0, RegionKind::kTail);

  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->bytes, 0u);
  HeldRegion held = *none;
  residency_->Free(&held);  // No-op.
}

TEST_F(ArenaResidencyTest, AStateSplitsIntoPrivateAndTailHandles) {
  auto region = residency_->Allocate(300, RegionKind::kPrivateState);
  ASSERT_TRUE(region.ok()) << region.status();
  StateBytes sb;
  sb.region = *region;
  sb.private_bytes = 200;
  sb.tail_bytes = 100;

  EXPECT_EQ(sb.private_handle().offset, region->region.offset);
  EXPECT_EQ(sb.private_handle().length, 200u);
  EXPECT_EQ(sb.tail_handle().offset, region->region.offset + 200);
  EXPECT_EQ(sb.tail_handle().length, 100u);
}

TEST_F(ArenaResidencyTest, ARegionDroppedWhileHeldIsFreedWithItsLastHold) {
  auto chunk = residency_->ReserveChunk(7, kPage);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  const HeldRegion region = **chunk;
  residency_->Hold(region);
  residency_->Hold(region);  // Two leases read it.

  residency_->DropChunk(7);
  const uint64_t used_dropped = UsedBytes();
  residency_->Unhold(region);
  const uint64_t used_one_hold = UsedBytes();
  residency_->Unhold(region);

  EXPECT_EQ(residency_->FindChunk(7), nullptr);
  EXPECT_EQ(used_dropped, kPage);
  EXPECT_EQ(used_one_hold, kPage);
  EXPECT_EQ(UsedBytes(), 0u);
  EXPECT_EQ(residency_->set_aside_count(), 0u);
  residency_->Unhold(region);  // No hold left: nothing happens.
  EXPECT_EQ(UsedBytes(), 0u);
}

TEST_F(ArenaResidencyTest, AHeldRegionStillRecordedIsFreedOnlyWhenDropped) {
  auto chunk = residency_->ReserveChunk(7, kPage);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  residency_->Hold(**chunk);

  residency_->Unhold(**chunk);

  EXPECT_NE(residency_->FindChunk(7), nullptr);
  EXPECT_EQ(UsedBytes(), kPage);
  residency_->DropChunk(7);
  EXPECT_EQ(UsedBytes(), 0u);
}

}  // namespace
}  // namespace cairn::cache
