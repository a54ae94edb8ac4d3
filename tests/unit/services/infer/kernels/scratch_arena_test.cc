#include "services/infer/kernels/scratch_arena.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

// Host memory that calls itself a device (not host-visible unless `visible`), counts
// allocations and refuses allocations beyond `limit` bytes in all.
class CountingDeviceMemory final : public DeviceMemory {
 public:
  explicit CountingDeviceMemory(bool visible = false) : visible_(visible) {}
  const char* name() const override { return "counting"; }
  bool host_visible() const override { return visible_; }
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
  const bool visible_;
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

// One pass that takes `bytes` (and 7 floats before them) and ends.
void Pass(ScratchArena& arena, int64_t bytes) {
  {
    ScratchArena::Frame frame(arena);
    CAIRN_ASSERT_OK(arena.Take<float>(7).status());
    CAIRN_ASSERT_OK(arena.Take<char>(bytes).status());
  }
  arena.EndPass();
}

TEST(ScratchArenaTest, HostMemoryKeepsItsBlockBetweenPasses) {
  CountingDeviceMemory memory(/*visible=*/true);
  ScratchArena arena(&memory);
  for (int pass = 0; pass < 20; ++pass) Pass(arena, 3 * ScratchArena::kMinBlockBytes);
  // The first pass grew two blocks, the second merged them; then nothing.
  EXPECT_EQ(memory.allocations, 3);
  EXPECT_GE(arena.held_bytes(), 3 * ScratchArena::kMinBlockBytes);
}

TEST(ScratchArenaTest, HostMemoryShrinksAfterSmallPassesInARow) {
  CountingDeviceMemory memory(/*visible=*/true);
  ScratchArena arena(&memory);
  const int64_t big = 16 * ScratchArena::kMinBlockBytes;
  const int64_t small = ScratchArena::kMinBlockBytes / 2;
  Pass(arena, big);
  Pass(arena, big);
  const int64_t held = arena.held_bytes();
  ASSERT_GE(held, big);
  // Small passes alternating with big ones keep the block.
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < ScratchArena::kTrimAfterPasses - 1; ++i) Pass(arena, small);
    Pass(arena, big);
  }
  EXPECT_EQ(arena.held_bytes(), held);
  const int allocations = memory.allocations;
  // kTrimAfterPasses small ones in a row give it back; the next pass allocates a small block.
  for (int i = 0; i < ScratchArena::kTrimAfterPasses - 1; ++i) Pass(arena, small);
  EXPECT_EQ(arena.held_bytes(), held);
  Pass(arena, small);
  EXPECT_EQ(arena.held_bytes(), 0);
  EXPECT_EQ(memory.live(), 0);
  Pass(arena, small);
  EXPECT_EQ(memory.allocations, allocations + 1);
  EXPECT_EQ(arena.held_bytes(), ScratchArena::kMinBlockBytes);
  // A device's block never shrinks.
  CountingDeviceMemory device;
  ScratchArena device_arena(&device);
  Pass(device_arena, big);
  Pass(device_arena, big);
  const int64_t device_held = device_arena.held_bytes();
  for (int i = 0; i < 2 * ScratchArena::kTrimAfterPasses; ++i) Pass(device_arena, small);
  EXPECT_EQ(device_arena.held_bytes(), device_held);
}

TEST(ScratchArenaTest, HostTakesArePoisonedWhenAssertionsAreOn) {
#ifdef NDEBUG
  GTEST_SKIP() << "assertions are off in this build: takes are not filled";
#else
  ScratchArena arena(HostDeviceMemory());
  {
    ScratchArena::Frame frame(arena);
    float* x = Value(arena.Take<float>(1000));
    ASSERT_NE(x, nullptr);
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(std::isnan(x[i])) << i;
    std::memset(x, 0, 4000);
  }
  ScratchArena::Frame frame(arena);
  int32_t* y = Value(arena.Take<int32_t>(1000));
  ASSERT_NE(y, nullptr);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(y[i], -1) << i;  // The zeros written above are gone.
#endif
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
