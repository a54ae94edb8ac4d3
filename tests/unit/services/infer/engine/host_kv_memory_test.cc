#include "services/infer/engine/host_kv_memory.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

using ::cairn::testing::StatusIs;

StateLayout TwoComponents() {
  StateLayout layout;
  layout.components.push_back({"layers.1.k", ComponentKind::kRows, 1, 2});
  layout.components.push_back({"layers.0.conv", ComponentKind::kPrivate, 0, 3});
  return layout;
}

class HostKvMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<HostKvMemory>> m =
        HostKvMemory::Create(TwoComponents(), {.slots = 2, .max_rows = 8});
    ASSERT_TRUE(m.ok()) << m.status();
    memory_ = *std::move(m);
  }

  // Appends `n` rows to slot 0 as a forward pass would.
  void Append(int64_t n) {
    SlotState* s = memory_->slot(0);
    ASSERT_TRUE(s->PrepareAppend(n).ok());
    for (int64_t r = s->position(); r < s->position() + n; ++r) {
      s->data(0)[2 * r] = static_cast<float>(r);
      s->data(0)[2 * r + 1] = -static_cast<float>(r);
    }
    s->data(1)[0] += 1.0f;
    s->CommitAppend(n);
  }

  std::unique_ptr<HostKvMemory> memory_;
};

TEST_F(HostKvMemoryTest, LayoutSizesAddUp) {
  EXPECT_EQ(memory_->layout().row_bytes(), 8);
  EXPECT_EQ(memory_->layout().private_bytes(), 12);
  EXPECT_EQ(kRowsPerChunk, 256);
}

TEST_F(HostKvMemoryTest, CopiesOnlyValidRows) {
  Append(3);
  std::vector<uint8_t> two(16), three(24);

  EXPECT_THAT(memory_->CopyRowsOut(0, 0, 2, 2, absl::MakeSpan(two)),
              StatusIs(absl::StatusCode::kOutOfRange));
  CAIRN_EXPECT_OK(memory_->CopyRowsOut(0, 0, 1, 2, absl::MakeSpan(two)));
  EXPECT_THAT(memory_->CopyRowsOut(0, 1, 0, 1, absl::MakeSpan(two)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(memory_->CopyRowsOut(0, 0, 0, 2, absl::MakeSpan(three)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(reinterpret_cast<const float*>(two.data())[2], 2.0f);
}

TEST_F(HostKvMemoryTest, CaptureNeedsTheExactSizeAndLoadNeedsARestore) {
  Append(2);
  std::vector<uint8_t> wrong(8), right(12);

  EXPECT_THAT(memory_->CapturePrivateState(0, absl::MakeSpan(wrong)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<int64_t> pos = memory_->CapturePrivateState(0, absl::MakeSpan(right));
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ(*pos, 2);
  EXPECT_THAT(memory_->LoadPrivateState(1, 2, right),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(memory_->CopyRowsIn(1, 0, 0, absl::MakeConstSpan(right).subspan(0, 8)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(HostKvMemoryTest, HookRunsBeforeRowsBelowTheHighWaterMarkChange) {
  std::vector<std::pair<int, int64_t>> calls;
  memory_->SetOverwriteHook([&calls](int slot, int64_t row) { calls.emplace_back(slot, row); });
  Append(4);
  EXPECT_TRUE(calls.empty());  // Appending fresh rows overwrites nothing.

  CAIRN_ASSERT_OK(memory_->BeginRestore(0));
  std::vector<uint8_t> rows(16, 0);
  CAIRN_ASSERT_OK(memory_->CopyRowsIn(0, 0, 0, rows));

  ASSERT_EQ(calls.size(), 1u);  // Once at BeginRestore; the high water mark is now 0.
  EXPECT_EQ(calls[0], std::make_pair(0, int64_t{0}));
  EXPECT_THAT(memory_->Validate(0, 2), StatusIs(absl::StatusCode::kFailedPrecondition));
  std::vector<uint8_t> priv(12, 0);
  CAIRN_ASSERT_OK(memory_->LoadPrivateState(0, 2, priv));
  CAIRN_EXPECT_OK(memory_->Validate(0, 2));
  EXPECT_EQ(memory_->slot(0)->position(), 2);
}

TEST_F(HostKvMemoryTest, BadArgumentsAreErrors) {
  EXPECT_THAT(memory_->Reset(5), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(HostKvMemory::Create(TwoComponents(), {.slots = 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(memory_->slot(0)->PrepareAppend(9), StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace cairn::infer
