#include "services/infer/kernels/scratch_arena.h"

#include <cstdint>
#include <cstring>
#include <map>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

// Host memory that calls itself a device (not host-visible), counts allocations and refuses
// allocations beyond `limit` bytes in all.
class CountingDeviceMemory final : public DeviceMemory {
 public:
  const char* name() const override { return "counting"; }
  bool host_visible() const override { return false; }
  absl::StatusOr<void*> Allocate(int64_t bytes) override {
    if (live_ + bytes > limit) return absl::ResourceExhaustedError("full");
    absl::StatusOr<void*> p = HostDeviceMemory()->Allocate(bytes);
    if (p.ok()) {
      ++allocations;
      live_ += bytes;
      sizes_[*p] = bytes;
    }
    return p;
  }
  void Free(void* p) override {
    if (p == nullptr) return;
    live_ -= sizes_[p];
    sizes_.erase(p);
    HostDeviceMemory()->Free(p);
  }
  absl::Status Upload(void* d, const void* s, int64_t n) override {
    return HostDeviceMemory()->Upload(d, s, n);
  }
  absl::Status Download(void* d, const void* s, int64_t n) override {
    return HostDeviceMemory()->Download(d, s, n);
  }
  absl::Status Copy(void* d, const void* s, int64_t n) override {
    return HostDeviceMemory()->Copy(d, s, n);
  }
  absl::Status Zero(void* d, int64_t n) override { return HostDeviceMemory()->Zero(d, n); }

  int64_t live() const { return live_; }
  int allocations = 0;
  int64_t limit = int64_t{1} << 40;

 private:
  int64_t live_ = 0;
  std::map<void*, int64_t> sizes_;
};

// The value of a Take, or a test failure and nullptr.
template <typename T>
T* Value(absl::StatusOr<T*> p) {
  if (!p.ok()) {
    ADD_FAILURE() << p.status();
    return nullptr;
  }
  return *p;
}

TEST(ScratchArenaTest, DeviceFramesReuseMemoryAndPassesMergeIntoOneBlock) {
  CountingDeviceMemory memory;
  ScratchArena arena(&memory);
  constexpr int64_t kBig = ScratchArena::kMinBlockBytes / sizeof(float);  // One block's worth.
  float* first = nullptr;
  {
    ScratchArena::Frame frame(arena);
    first = Value(arena.Take<float>(100));
    ASSERT_NE(first, nullptr);
    float* second = Value(arena.Take<float>(3));
    EXPECT_EQ(reinterpret_cast<char*>(second) - reinterpret_cast<char*>(first),
              ScratchArena::kAlignment * 2);  // 400 bytes round up to 512.
    EXPECT_EQ(memory.allocations, 1);
  }
  {
    ScratchArena::Frame frame(arena);
    float* again = Value(arena.Take<float>(7));
    EXPECT_EQ(again, first);  // Given back by the frame, taken again.
    // Outgrows the first block: a second one.
    float* big = Value(arena.Take<float>(kBig));
    static_cast<void>(big);
    EXPECT_EQ(memory.allocations, 2);
  }
  arena.EndPass();
  const int64_t merged = memory.live();
  EXPECT_EQ(merged, 0);  // Both blocks went; the next Take allocates their sum at once.
  for (int pass = 0; pass < 3; ++pass) {
    {
      ScratchArena::Frame frame(arena);
      CAIRN_ASSERT_OK(arena.Take<float>(7).status());
      CAIRN_ASSERT_OK(arena.Take<float>(kBig).status());
    }
    arena.EndPass();
  }
  EXPECT_EQ(memory.allocations, 3);  // The steady state allocates nothing.
  EXPECT_GE(arena.held_bytes(), ScratchArena::kMinBlockBytes * 3);
}

TEST(ScratchArenaTest, NestedFramesGiveBackOnlyTheirOwn) {
  CountingDeviceMemory memory;
  ScratchArena arena(&memory);
  ScratchArena::Frame outer(arena);
  int32_t* a = Value(arena.Take<int32_t>(10));
  float* inner_ptr = nullptr;
  {
    ScratchArena::Frame inner(arena);
    inner_ptr = Value(arena.Take<float>(10));
    ASSERT_NE(inner_ptr, nullptr);
    EXPECT_NE(static_cast<void*>(inner_ptr), static_cast<void*>(a));
  }
  float* b = Value(arena.Take<float>(10));
  EXPECT_EQ(b, inner_ptr);
}

TEST(ScratchArenaTest, HostMemoryAllocatesPerTakeZeroFilledAndFreesAtFrameEnd) {
  ScratchArena arena(HostDeviceMemory());
  {
    ScratchArena::Frame frame(arena);
    float* x = Value(arena.Take<float>(1000));
    ASSERT_NE(x, nullptr);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(x[i], 0.0f);
    std::memset(x, 0xff, 4000);
  }
  ScratchArena::Frame frame(arena);
  float* y = Value(arena.Take<float>(1000));
  ASSERT_NE(y, nullptr);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(y[i], 0.0f);
  EXPECT_EQ(arena.held_bytes(), 0);
}

TEST(ScratchArenaTest, ErrorsAreStatuses) {
  CountingDeviceMemory memory;
  memory.limit = 1000;
  ScratchArena arena(&memory);
  EXPECT_EQ(arena.Take<float>(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(arena.Take<float>(10).status().code(), absl::StatusCode::kResourceExhausted);
  absl::StatusOr<float*> none = arena.Take<float>(0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

}  // namespace
}  // namespace cairn::infer
