#include "services/infer/cache_client/arena_pins.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace cairn::infer {
namespace {

// Records registrations; refuses those starting at `refuse_at`.
class RecordingMemory final : public DeviceMemory {
 public:
  explicit RecordingMemory(bool host_visible = false) : host_visible_(host_visible) {}
  const char* name() const override { return "recording"; }
  bool host_visible() const override { return host_visible_; }
  absl::StatusOr<void*> Allocate(int64_t) override { return nullptr; }
  void Free(void*) override {}
  absl::Status Upload(void*, const void*, int64_t) override { return absl::OkStatus(); }
  absl::Status Download(void*, const void*, int64_t) override { return absl::OkStatus(); }
  absl::Status Copy(void*, const void*, int64_t) override { return absl::OkStatus(); }
  absl::Status Zero(void*, int64_t) override { return absl::OkStatus(); }
  absl::Status RegisterHost(void* host, int64_t bytes) override {
    if (host == refuse_at) return absl::InternalError("refused");
    registered.emplace_back(static_cast<uint8_t*>(host), bytes);
    return absl::OkStatus();
  }
  absl::Status UnregisterHost(void* host) override {
    unregistered.push_back(static_cast<uint8_t*>(host));
    return absl::OkStatus();
  }

  void* refuse_at = nullptr;
  std::vector<std::pair<uint8_t*, int64_t>> registered;
  std::vector<uint8_t*> unregistered;

 private:
  const bool host_visible_;
};

constexpr uint64_t kSize = 1000;  // A first step of 400, then steps of 256 (the last is short).

TEST(ArenaPinsTest, TheFirstStepIsPinnedUpFrontAndLaterStepsWhenFirstTouched) {
  std::vector<uint8_t> arena(kSize);
  RecordingMemory memory;
  {
    ArenaPins pins(&memory, arena.data(), kSize, 400, 256);
    ASSERT_EQ(memory.registered.size(), 1u);
    EXPECT_EQ(memory.registered[0], std::make_pair(arena.data(), int64_t{400}));

    pins.EnsurePinned(10, 100);  // Inside the first step: nothing new.
    pins.EnsurePinned(700, 50);  // Step 2: [656, 912).
    pins.EnsurePinned(720, 10);  // Again: nothing new.
    pins.EnsurePinned(950, 50);  // The short last step [912, 1000).
    ASSERT_EQ(memory.registered.size(), 3u);
    EXPECT_EQ(memory.registered[1], std::make_pair(arena.data() + 656, int64_t{256}));
    EXPECT_EQ(memory.registered[2], std::make_pair(arena.data() + 912, int64_t{88}));
    EXPECT_EQ(pins.registered_steps(), 3);
    EXPECT_TRUE(memory.unregistered.empty());
  }
  // Every registration is released, and only those.
  EXPECT_EQ(memory.unregistered,
            (std::vector<uint8_t*>{arena.data(), arena.data() + 656, arena.data() + 912}));
}

TEST(ArenaPinsTest, ARefusedStepStaysPageableAndIsNotRetried) {
  std::vector<uint8_t> arena(kSize);
  RecordingMemory memory;
  memory.refuse_at = arena.data() + 400;
  {
    ArenaPins pins(&memory, arena.data(), kSize, 400, 256);
    pins.EnsurePinned(500, 10);
    pins.EnsurePinned(500, 10);
    EXPECT_EQ(pins.registered_steps(), 1);
  }
  EXPECT_EQ(memory.unregistered, std::vector<uint8_t*>{arena.data()});
}

TEST(ArenaPinsTest, HostMemoryAndUnknownStepsNeedNoRegistrationBeyondTheWhole) {
  std::vector<uint8_t> arena(kSize);
  RecordingMemory host(/*host_visible=*/true);
  {
    ArenaPins pins(&host, arena.data(), kSize, 400, 256);
    pins.EnsurePinned(900, 10);
  }
  EXPECT_TRUE(host.registered.empty());
  EXPECT_TRUE(host.unregistered.empty());

  RecordingMemory device;
  {
    ArenaPins pins(&device, arena.data(), kSize, 0, 0);  // No steps named: one registration.
    pins.EnsurePinned(900, 10);
    pins.EnsurePinned(2000, 10);  // Outside the arena: ignored.
  }
  ASSERT_EQ(device.registered.size(), 1u);
  EXPECT_EQ(device.registered[0].second, int64_t{kSize});
}

}  // namespace
}  // namespace cairn::infer
