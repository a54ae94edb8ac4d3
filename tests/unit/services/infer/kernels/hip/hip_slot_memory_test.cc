// Slot state in GPU memory: the engine's SlotKvMemory over the HIP backend's DeviceMemory. Rows
// and private state written on the device come back through KvMemory's copies byte for byte, a
// restore into another slot reproduces them, and Reset zeroes the private state on the device.
// Skips without a device.

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "services/infer/cache_client/arena_pins.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

StateLayout Layout() {
  StateLayout layout;
  layout.components.push_back({"layers.3.k", ComponentKind::kRows, 3, 96});
  layout.components.push_back({"layers.3.v", ComponentKind::kRows, 3, 96});
  layout.components.push_back({"layers.0.recurrent", ComponentKind::kPrivate, 0, 4096});
  return layout;
}

TEST(HipSlotMemoryTest, SlotsLiveOnTheDeviceAndRoundTripThroughKvMemory) {
  if (HipDeviceCount() == 0) GTEST_SKIP() << "no HIP device";
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> gpu = HipKernelBackend::Create({});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  DeviceMemory* device = (*gpu)->memory();
  EXPECT_FALSE(device->host_visible());
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> kv =
      SlotKvMemory::Create(Layout(), {.slots = 2, .max_rows = 300, .memory = device});
  ASSERT_TRUE(kv.ok()) << kv.status();

  // A forward pass of 257 tokens as kernels would leave it: rows and state written on the device.
  constexpr int64_t kTokens = 257;
  SlotState* s = (*kv)->slot(0);
  CAIRN_ASSERT_OK(s->PrepareAppend(kTokens));
  std::vector<float> k(kTokens * 96), v(kTokens * 96), state(4096);
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < v.size(); ++i) v[i] = -static_cast<float>(i);
  for (size_t i = 0; i < state.size(); ++i) state[i] = static_cast<float>(i % 97) - 3.0f;
  CAIRN_ASSERT_OK(device->Upload(s->data(0), k.data(), k.size() * sizeof(float)));
  CAIRN_ASSERT_OK(device->Upload(s->data(1), v.data(), v.size() * sizeof(float)));
  CAIRN_ASSERT_OK(device->Upload(s->data(2), state.data(), state.size() * sizeof(float)));
  s->CommitAppend(kTokens);

  // Capture as the cache client does, restore into slot 1, empty slot 0.
  std::vector<uint8_t> k_rows(k.size() * 4), v_rows(v.size() * 4), priv(state.size() * 4);
  CAIRN_ASSERT_OK((*kv)->CopyRowsOut(0, 0, 0, kTokens, absl::MakeSpan(k_rows)));
  CAIRN_ASSERT_OK((*kv)->CopyRowsOut(0, 1, 0, kTokens, absl::MakeSpan(v_rows)));
  ASSERT_TRUE((*kv)->CapturePrivateState(0, absl::MakeSpan(priv)).ok());
  EXPECT_EQ(std::memcmp(k_rows.data(), k.data(), k_rows.size()), 0);
  EXPECT_EQ(std::memcmp(priv.data(), state.data(), priv.size()), 0);

  CAIRN_ASSERT_OK((*kv)->BeginRestore(1));
  CAIRN_ASSERT_OK((*kv)->CopyRowsIn(1, 0, 0, k_rows));
  CAIRN_ASSERT_OK((*kv)->CopyRowsIn(1, 1, 0, v_rows));
  CAIRN_ASSERT_OK((*kv)->LoadPrivateState(1, kTokens, priv));
  CAIRN_ASSERT_OK((*kv)->Validate(1, kTokens));
  CAIRN_ASSERT_OK((*kv)->Reset(0));

  std::vector<float> v1(v.size()), state1(state.size()), state0(state.size(), 1.0f);
  CAIRN_ASSERT_OK(device->Download(v1.data(), (*kv)->slot(1)->data(1), v1.size() * 4));
  CAIRN_ASSERT_OK(device->Download(state1.data(), (*kv)->slot(1)->data(2), state1.size() * 4));
  CAIRN_ASSERT_OK(device->Download(state0.data(), (*kv)->slot(0)->data(2), state0.size() * 4));
  EXPECT_EQ(v1, v);
  EXPECT_EQ(state1, state);
  EXPECT_EQ(state0, std::vector<float>(state.size(), 0.0f));
}

TEST(HipSlotMemoryTest, AllocationsAreZeroedAndTooLargeOnesAreResourceExhausted) {
  if (HipDeviceCount() == 0) GTEST_SKIP() << "no HIP device";
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> gpu = HipKernelBackend::Create({});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate((*gpu)->memory(), 1 << 20);
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<float> host(1 << 18, 1.0f);
  CAIRN_ASSERT_OK((*gpu)->memory()->Download(host.data(), b->data(), 1 << 20));
  EXPECT_EQ(host, std::vector<float>(host.size(), 0.0f));
  EXPECT_EQ(DeviceBuffer::Allocate((*gpu)->memory(), int64_t{1} << 50).status().code(),
            absl::StatusCode::kResourceExhausted);
  // The failed allocation is not sticky.
  CAIRN_EXPECT_OK((*gpu)->Synchronize());
}

// UploadQueued copies land in their order, before any later work reads them, from sources the
// caller overwrote as soon as each call returned; a large copy still running when the next
// queued upload comes in is waited for (the staging is not overwritten under it).
TEST(HipSlotMemoryTest, QueuedUploadsLandInOrderFromReusedSources) {
  if (HipDeviceCount() == 0) GTEST_SKIP() << "no HIP device";
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> gpu = HipKernelBackend::Create({});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  DeviceMemory* device = (*gpu)->memory();
  constexpr int64_t kBig = int64_t{64} << 20;
  absl::StatusOr<DeviceBuffer> big = DeviceBuffer::Allocate(device, kBig);
  ASSERT_TRUE(big.ok()) << big.status();
  absl::StatusOr<DeviceBuffer> small = DeviceBuffer::Allocate(device, 4096);
  ASSERT_TRUE(small.ok()) << small.status();
  std::vector<uint8_t> source(static_cast<size_t>(kBig));
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 7 + 3);
  const std::vector<uint8_t> expected_big = source;
  CAIRN_ASSERT_OK(device->UploadQueued(big->data(), source.data(), kBig));
  std::fill(source.begin(), source.end(), uint8_t{0xee});
  // Two uploads into one buffer: the second wins; the first's source is already reused.
  std::vector<uint8_t> first(4096, 1);
  CAIRN_ASSERT_OK(device->UploadQueued(small->data(), first.data(), 4096));
  std::fill(first.begin(), first.end(), uint8_t{9});
  std::vector<uint8_t> second(4096);
  for (size_t i = 0; i < second.size(); ++i) second[i] = static_cast<uint8_t>(i);
  CAIRN_ASSERT_OK(device->UploadQueued(small->data(), second.data(), 4096));
  std::vector<uint8_t> back(static_cast<size_t>(kBig));
  CAIRN_ASSERT_OK(device->Download(back.data(), big->data(), kBig));
  EXPECT_TRUE(back == expected_big);
  std::vector<uint8_t> small_back(4096);
  CAIRN_ASSERT_OK(device->Download(small_back.data(), small->data(), 4096));
  EXPECT_EQ(small_back, second);
  EXPECT_EQ(device->UploadQueued(small->data(), second.data(), -1).code(),
            absl::StatusCode::kInvalidArgument);
  CAIRN_EXPECT_OK((*gpu)->Synchronize());
}

// Background downloads (idle spills): each runs after the work queued before it on the compute
// stream (here a queued upload of 64 MB), beside what comes after, and they complete in the
// order they were issued; through SlotKvMemory, a slot's rows are not rewritten (Reset) before
// the copy from them is done.
TEST(HipSlotMemoryTest, BackgroundDownloadsFollowTheWorkBeforeThemAndCompleteInOrder) {
  if (HipDeviceCount() == 0) GTEST_SKIP() << "no HIP device";
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> gpu = HipKernelBackend::Create({});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  DeviceMemory* device = (*gpu)->memory();
  constexpr int64_t kBig = int64_t{64} << 20;
  absl::StatusOr<DeviceBuffer> big = DeviceBuffer::Allocate(device, kBig);
  ASSERT_TRUE(big.ok()) << big.status();
  std::vector<uint8_t> source(static_cast<size_t>(kBig));
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 5 + 1);
  std::vector<uint8_t> out(static_cast<size_t>(kBig), 0), out_small(4096, 0);
  CAIRN_ASSERT_OK(device->RegisterHost(out.data(), kBig));
  CAIRN_ASSERT_OK(device->UploadQueued(big->data(), source.data(), kBig));
  absl::StatusOr<uint64_t> t1 = device->DownloadBackground(out.data(), big->data(), kBig);
  ASSERT_TRUE(t1.ok()) << t1.status();
  absl::StatusOr<uint64_t> t2 =
      device->DownloadBackground(out_small.data(), static_cast<uint8_t*>(big->data()) + 8192, 4096);
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_GT(*t1, 0u);
  EXPECT_GT(*t2, *t1);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool done = false;
  while (!done && absl::Now() < deadline) {
    absl::StatusOr<bool> d = device->BackgroundDone(*t2);
    ASSERT_TRUE(d.ok()) << d.status();
    done = *d;
  }
  ASSERT_TRUE(done);
  absl::StatusOr<bool> d1 = device->BackgroundDone(*t1);
  ASSERT_TRUE(d1.ok()) << d1.status();
  EXPECT_TRUE(*d1);
  EXPECT_TRUE(out == source);
  EXPECT_EQ(std::memcmp(out_small.data(), source.data() + 8192, 4096), 0);
  CAIRN_EXPECT_OK(device->WaitBackground(*t2));
  EXPECT_EQ(device->BackgroundDone(*t2 + 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->DownloadBackground(out.data(), big->data(), -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  CAIRN_EXPECT_OK(device->UnregisterHost(out.data()));

  absl::StatusOr<std::unique_ptr<SlotKvMemory>> kv =
      SlotKvMemory::Create(Layout(), {.slots = 2, .max_rows = 300, .memory = device});
  ASSERT_TRUE(kv.ok()) << kv.status();
  constexpr int64_t kTokens = 200;
  SlotState* s = (*kv)->slot(0);
  CAIRN_ASSERT_OK(s->PrepareAppend(kTokens));
  std::vector<float> k(kTokens * 96);
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i) * 0.25f;
  CAIRN_ASSERT_OK(device->Upload(s->data(0), k.data(), k.size() * sizeof(float)));
  s->CommitAppend(kTokens);
  std::vector<uint8_t> rows(k.size() * 4, 0);
  absl::StatusOr<uint64_t> t = (*kv)->CopyRowsOutBackground(0, 0, 0, kTokens, absl::MakeSpan(rows));
  ASSERT_TRUE(t.ok()) << t.status();
  CAIRN_ASSERT_OK((*kv)->Reset(0));  // Waits for the copy before the rows may change.
  CAIRN_ASSERT_OK(device->Zero(s->data(0), static_cast<int64_t>(k.size() * 4)));
  absl::StatusOr<bool> copied = (*kv)->BackgroundCopyDone(*t);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_TRUE(*copied);
  EXPECT_EQ(std::memcmp(rows.data(), k.data(), rows.size()), 0);
  CAIRN_EXPECT_OK((*gpu)->Synchronize());
}

// The cache's arena as cairn-infer maps it (shared memory), page-locked in steps by ArenaPins:
// copies inside each registered step run between it and the device, whole steps round-trip,
// and once the pins are released the memory can be registered again (they really were let go).
TEST(HipSlotMemoryTest, TheArenaIsPinnedInStepsAndCopiesInsideEachStepWork) {
  if (HipDeviceCount() == 0) GTEST_SKIP() << "no HIP device";
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> gpu = HipKernelBackend::Create({});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  DeviceMemory* device = (*gpu)->memory();
  constexpr uint64_t kFirst = 4 << 20;
  constexpr uint64_t kStep = 2 << 20;
  constexpr uint64_t kSize = kFirst + 3 * kStep;
  void* mapped = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  uint8_t* arena = static_cast<uint8_t*>(mapped);
  for (uint64_t i = 0; i < kSize; ++i) arena[i] = static_cast<uint8_t>(i * 7 + (i >> 12));

  absl::StatusOr<DeviceBuffer> d = DeviceBuffer::Allocate(device, kStep);
  ASSERT_TRUE(d.ok()) << d.status();
  {
    ArenaPins pins(device, arena, kSize, kFirst, kStep);
    EXPECT_EQ(pins.registered_steps(), 1);
    for (uint64_t at : {uint64_t{0}, kFirst - kStep, kFirst, kFirst + kStep, kFirst + 2 * kStep}) {
      pins.EnsurePinned(at, kStep);
      CAIRN_ASSERT_OK(device->Upload(d->data(), arena + at, kStep)) << "at " << at;
      std::vector<uint8_t> back(kStep);
      CAIRN_ASSERT_OK(device->Download(back.data(), d->data(), kStep));
      EXPECT_EQ(std::memcmp(back.data(), arena + at, kStep), 0) << "at " << at;
      // Device to arena, into the next step's start when there is one.
      const uint64_t to = at + kStep < kSize ? at + kStep : 0;
      pins.EnsurePinned(to, kStep);
      CAIRN_ASSERT_OK(device->Download(arena + to, d->data(), kStep));
      EXPECT_EQ(std::memcmp(arena + to, back.data(), kStep), 0);
    }
    EXPECT_EQ(pins.registered_steps(), 4);
  }
  // Released: registering the whole range again succeeds.
  CAIRN_EXPECT_OK(device->RegisterHost(arena, kSize));
  CAIRN_EXPECT_OK(device->UnregisterHost(arena));
  ::munmap(mapped, kSize);
  CAIRN_EXPECT_OK((*gpu)->Synchronize());
}

}  // namespace
}  // namespace cairn::infer
