#include "services/infer/engine/slot_kv_memory.h"

#include <cstring>
#include <map>
#include <ostream>
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

// A device memory whose pointers the host cannot dereference, as a GPU's: addresses in the
// first 64 KiB of the address space, which Linux never maps (vm.mmap_min_addr), backed by host
// storage reached only through Upload / Download / Copy / Zero. Any host access to a slot's
// buffer by SlotKvMemory or SlotState would crash the test.
class OpaqueMemory final : public DeviceMemory {
 public:
  const char* name() const override { return "opaque"; }
  bool host_visible() const override { return false; }
  absl::StatusOr<void*> Allocate(int64_t bytes) override {
    if (bytes == 0) return nullptr;
    const uintptr_t at = next_;
    next_ += (static_cast<uintptr_t>(bytes) + 63) / 64 * 64;
    if (next_ > kEnd) return absl::ResourceExhaustedError("opaque memory full");
    blocks_[at] = std::vector<uint8_t>(static_cast<size_t>(bytes), 0);
    return reinterpret_cast<void*>(at);
  }
  void Free(void* device) override { blocks_.erase(reinterpret_cast<uintptr_t>(device)); }
  absl::Status Upload(void* dst, const void* src, int64_t bytes) override {
    ++transfers;
    std::memcpy(Host(dst, bytes), src, bytes);
    return absl::OkStatus();
  }
  absl::Status Download(void* dst, const void* src, int64_t bytes) override {
    ++transfers;
    std::memcpy(dst, Host(src, bytes), bytes);
    return absl::OkStatus();
  }
  absl::Status Copy(void* dst, const void* src, int64_t bytes) override {
    std::memmove(Host(dst, bytes), Host(src, bytes), bytes);
    return absl::OkStatus();
  }
  absl::Status Zero(void* dst, int64_t bytes) override {
    std::memset(Host(dst, bytes), 0, bytes);
    return absl::OkStatus();
  }
  // Background copies as a slow device runs them: nothing is copied until someone waits, and
  // then the bytes the source holds at that moment are (so a copy waited for only after its
  // rows were rewritten would bring the new bytes).
  absl::StatusOr<uint64_t> DownloadBackground(void* dst, const void* src, int64_t bytes) override {
    Host(src, bytes);  // Checks the range now.
    background_.push_back({++issued_, dst, src, bytes});
    return issued_;
  }
  absl::StatusOr<bool> BackgroundDone(uint64_t ticket) override { return ticket <= done_; }
  absl::Status WaitBackground(uint64_t ticket) override {
    while (done_ < ticket && !background_.empty()) {
      const Pending& p = background_.front();
      std::memcpy(p.dst, Host(p.src, p.bytes), p.bytes);
      done_ = p.ticket;
      background_.erase(background_.begin());
    }
    return absl::OkStatus();
  }

  int transfers = 0;

 private:
  static constexpr uintptr_t kEnd = 0x10000;
  // The host bytes behind [device, device + bytes), which must lie in one allocation.
  uint8_t* Host(const void* device, int64_t bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(device);
    auto it = blocks_.upper_bound(a);
    EXPECT_NE(it, blocks_.begin()) << "not device memory";
    --it;
    EXPECT_LE(a + bytes, it->first + it->second.size()) << "copy beyond an allocation";
    return it->second.data() + (a - it->first);
  }
  uintptr_t next_ = 0x1000;
  std::map<uintptr_t, std::vector<uint8_t>> blocks_;
  struct Pending {
    uint64_t ticket;
    void* dst;
    const void* src;
    int64_t bytes;
  };
  std::vector<Pending> background_;
  uint64_t issued_ = 0;
  uint64_t done_ = 0;
};

enum class MemoryKind { kHost, kOpaqueDevice };

void PrintTo(MemoryKind kind, std::ostream* os) {
  *os << (kind == MemoryKind::kHost ? "host" : "opaque device");
}

// Every test runs over host memory and over memory the host cannot touch: the KvMemory
// contract must not depend on where the slots live.
class SlotKvMemoryTest : public ::testing::TestWithParam<MemoryKind> {
 protected:
  void SetUp() override {
    DeviceMemory* device =
        GetParam() == MemoryKind::kHost ? HostDeviceMemory() : static_cast<DeviceMemory*>(&opaque_);
    absl::StatusOr<std::unique_ptr<SlotKvMemory>> m =
        SlotKvMemory::Create(TwoComponents(), {.slots = 2, .max_rows = 8, .memory = device});
    ASSERT_TRUE(m.ok()) << m.status();
    memory_ = *std::move(m);
  }

  // Appends `n` rows to slot 0 as a forward pass would (through the memory, as kernels on the
  // device would write them).
  void Append(int64_t n) {
    SlotState* s = memory_->slot(0);
    ASSERT_TRUE(s->PrepareAppend(n).ok());
    for (int64_t r = s->position(); r < s->position() + n; ++r) {
      const float row[2] = {static_cast<float>(r), -static_cast<float>(r)};
      CAIRN_ASSERT_OK(s->memory()->Upload(s->data(0) + 2 * r, row, sizeof(row)));
    }
    float counter = 0;
    CAIRN_ASSERT_OK(s->memory()->Download(&counter, s->data(1), sizeof(float)));
    counter += 1.0f;
    CAIRN_ASSERT_OK(s->memory()->Upload(s->data(1), &counter, sizeof(float)));
    s->CommitAppend(n);
  }

  OpaqueMemory opaque_;
  std::unique_ptr<SlotKvMemory> memory_;
};

INSTANTIATE_TEST_SUITE_P(Memories, SlotKvMemoryTest,
                         ::testing::Values(MemoryKind::kHost, MemoryKind::kOpaqueDevice),
                         [](const ::testing::TestParamInfo<MemoryKind>& p) {
                           return p.param == MemoryKind::kHost ? "Host" : "OpaqueDevice";
                         });

TEST_P(SlotKvMemoryTest, LayoutSizesAddUp) {
  EXPECT_EQ(memory_->layout().row_bytes(), 8);
  EXPECT_EQ(memory_->layout().private_bytes(), 12);
  EXPECT_EQ(kRowsPerChunk, 256);
}

TEST_P(SlotKvMemoryTest, CopiesOnlyValidRows) {
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

TEST_P(SlotKvMemoryTest, CaptureNeedsTheExactSizeAndLoadNeedsARestore) {
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

TEST_P(SlotKvMemoryTest, HookRunsBeforeRowsBelowTheHighWaterMarkChange) {
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

// A background copy of a slot's rows (an idle spill) brings the rows as they were when it
// started, however late the device runs it: the memory waits for it before a restore or a
// reset rewrites them, and before the user's hook runs. Over host memory the copy is done at
// once (ticket 0).
TEST_P(SlotKvMemoryTest, BackgroundCopiesFinishBeforeTheirRowsChange) {
  // Rows of component 0 are two floats (8 bytes).
  std::vector<uint8_t> expect(32), out(32, 0xee), out2(16, 0xee);
  std::vector<bool> copied_at_hook;
  memory_->SetOverwriteHook([&](int slot, int64_t) {
    EXPECT_EQ(slot, 0);
    copied_at_hook.push_back(out == expect);
  });
  Append(4);
  CAIRN_ASSERT_OK(memory_->CopyRowsOut(0, 0, 0, 4, absl::MakeSpan(expect)));
  absl::StatusOr<uint64_t> ticket = memory_->CopyRowsOutBackground(0, 0, 0, 4, absl::MakeSpan(out));
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  absl::StatusOr<uint64_t> ticket2 =
      memory_->CopyRowsOutBackground(0, 0, 1, 2, absl::MakeSpan(out2));
  ASSERT_TRUE(ticket2.ok()) << ticket2.status();
  EXPECT_THAT(memory_->CopyRowsOutBackground(0, 0, 2, 4, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kOutOfRange));  // Rows past the position.
  absl::StatusOr<bool> done = memory_->BackgroundCopyDone(*ticket);
  ASSERT_TRUE(done.ok()) << done.status();
  if (GetParam() == MemoryKind::kHost) {
    EXPECT_EQ(*ticket, 0u);
    EXPECT_TRUE(*done);
  } else {
    EXPECT_GT(*ticket2, *ticket);
    EXPECT_FALSE(*done);  // The slow device has not run it.
  }

  // A restore from row 0 rewrites the rows: both copies are done first.
  CAIRN_ASSERT_OK(memory_->BeginRestore(0, 0));
  ASSERT_EQ(copied_at_hook.size(), 1u);
  EXPECT_TRUE(copied_at_hook[0]);
  EXPECT_EQ(out, expect);
  EXPECT_EQ(std::vector<uint8_t>(out2.begin(), out2.end()),
            std::vector<uint8_t>(expect.begin() + 8, expect.begin() + 24));
  done = memory_->BackgroundCopyDone(*ticket2);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done);
  std::vector<uint8_t> other(32, 0x11);
  CAIRN_ASSERT_OK(memory_->CopyRowsIn(0, 0, 0, other));
  EXPECT_EQ(out, expect);

  // Reset likewise; waiting for a ticket already done returns at once.
  std::vector<uint8_t> priv(12, 0);
  CAIRN_ASSERT_OK(memory_->LoadPrivateState(0, 4, priv));
  CAIRN_ASSERT_OK(memory_->Validate(0, 4));
  ticket = memory_->CopyRowsOutBackground(0, 0, 0, 4, absl::MakeSpan(out));
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  CAIRN_ASSERT_OK(memory_->Reset(0));
  EXPECT_EQ(out, other);
  CAIRN_EXPECT_OK(memory_->WaitBackgroundCopy(*ticket));
  CAIRN_EXPECT_OK(memory_->WaitBackgroundCopy(*ticket2));
}

TEST_P(SlotKvMemoryTest, ResetZeroesPrivateStateAndRestoreRoundTrips) {
  Append(3);
  std::vector<uint8_t> rows(24), priv(12);
  CAIRN_ASSERT_OK(memory_->CopyRowsOut(0, 0, 0, 3, absl::MakeSpan(rows)));
  ASSERT_TRUE(memory_->CapturePrivateState(0, absl::MakeSpan(priv)).ok());

  // Slot 1 gets slot 0's state by restore; slot 0 is emptied.
  CAIRN_ASSERT_OK(memory_->BeginRestore(1));
  CAIRN_ASSERT_OK(memory_->CopyRowsIn(1, 0, 0, rows));
  CAIRN_ASSERT_OK(memory_->LoadPrivateState(1, 3, priv));
  CAIRN_ASSERT_OK(memory_->Validate(1, 3));
  CAIRN_ASSERT_OK(memory_->Reset(0));

  std::vector<uint8_t> rows1(24), priv1(12), priv0(12);
  CAIRN_ASSERT_OK(memory_->CopyRowsOut(1, 0, 0, 3, absl::MakeSpan(rows1)));
  ASSERT_TRUE(memory_->CapturePrivateState(1, absl::MakeSpan(priv1)).ok());
  ASSERT_TRUE(memory_->CapturePrivateState(0, absl::MakeSpan(priv0)).ok());
  EXPECT_EQ(rows1, rows);
  EXPECT_EQ(priv1, priv);
  EXPECT_EQ(reinterpret_cast<const float*>(priv.data())[0], 1.0f);
  EXPECT_EQ(priv0, std::vector<uint8_t>(12, 0));
  EXPECT_EQ(memory_->slot(0)->position(), 0);
  if (GetParam() == MemoryKind::kOpaqueDevice) {
    EXPECT_GT(opaque_.transfers, 0);
  }
}

TEST_P(SlotKvMemoryTest, BadArgumentsAreErrors) {
  EXPECT_THAT(memory_->Reset(5), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SlotKvMemory::Create(TwoComponents(), {.slots = 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(memory_->slot(0)->PrepareAppend(9), StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace cairn::infer
