#include "services/cache/event_hub.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cairn::cache {
namespace {

v1::Event Numbered(uint64_t seq) {
  v1::Event e;
  e.set_seq(seq);
  return e;
}

TEST(EventHubTest, KeepsTheLatestEventsUpToItsCapacity) {
  EventHub hub(3);
  for (uint64_t i = 1; i <= 5; ++i) hub.Append(Numbered(i));

  std::vector<v1::Event> all = hub.After(0, 0);
  std::vector<v1::Event> two = hub.After(3, 0);
  std::vector<v1::Event> limited = hub.After(0, 1);

  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all.front().seq(), 3u);
  EXPECT_EQ(hub.LastSeq(), 5u);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two.front().seq(), 4u);
  ASSERT_EQ(limited.size(), 1u);
}

TEST(EventHubTest, AWaiterIsWokenOnceByTheNextEventUnlessItIsAlreadyThere) {
  EventHub hub(8);
  hub.Append(Numbered(1));
  int woken = 0;

  EXPECT_EQ(hub.Wait(0, [&] { ++woken; }), 0u);  // Event 1 is newer than 0: fetch instead.
  uint64_t token = hub.Wait(1, [&] { ++woken; });
  ASSERT_NE(token, 0u);
  for (auto& wake : hub.Append(Numbered(2))) wake();
  for (auto& wake : hub.Append(Numbered(3))) wake();

  EXPECT_EQ(woken, 1);
  EXPECT_EQ(hub.waiting(), 0u);
}

TEST(EventHubTest, ACancelledWaiterIsNeverWoken) {
  EventHub hub(8);
  bool woken = false;
  uint64_t token = hub.Wait(0, [&] { woken = true; });

  hub.Cancel(token);
  for (auto& wake : hub.Append(Numbered(1))) wake();

  EXPECT_FALSE(woken);
}

// Appenders and followers on several threads (run under TSan with the unit label).
TEST(EventHubTest, ConcurrentAppendsAndFollowersSeeEveryEventInOrder) {
  EventHub hub(100000);
  constexpr uint64_t kEvents = 2000;
  std::atomic<uint64_t> next{1};
  std::vector<std::thread> writers;
  // One seq counter under a single writer lock keeps seqs increasing, as the daemon does.
  Mutex order;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&] {
      while (true) {
        std::vector<std::function<void()>> wakes;
        {
          MutexLock lock(&order);
          const uint64_t seq = next.fetch_add(1);
          if (seq > kEvents) return;
          wakes = hub.Append(Numbered(seq));
        }
        for (auto& wake : wakes) wake();
      }
    });
  }
  std::vector<uint64_t> seen;
  uint64_t after = 0;
  while (after < kEvents) {
    for (const v1::Event& e : hub.After(after, 0)) {
      seen.push_back(e.seq());
      after = e.seq();
    }
  }
  for (std::thread& t : writers) t.join();

  ASSERT_EQ(seen.size(), kEvents);
  for (uint64_t i = 0; i < kEvents; ++i) EXPECT_EQ(seen[i], i + 1);
}

}  // namespace
}  // namespace cairn::cache
