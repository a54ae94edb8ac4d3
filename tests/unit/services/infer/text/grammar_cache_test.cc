#include "services/infer/text/grammar_cache.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "services/infer/text/json_constraint.h"

namespace cairn::infer::text {
namespace {

using Result = absl::StatusOr<std::shared_ptr<const JsonGrammar>>;

// Gets `key` from `cache`, counting the compilations in `compiled`.
Result Get(GrammarCache& cache, const std::string& key, int* compiled) {
  return cache.GetOrCompile(key, [&]() -> Result {
    ++*compiled;
    return JsonGrammar::FromSchema(R"({"type": "integer"})");
  });
}

TEST(GrammarCacheTest, AKeyIsCompiledOnceAndItsGrammarShared) {
  GrammarCache cache(4, 1 << 20);
  int compiled = 0;
  Result a = Get(cache, "schema a", &compiled);
  Result again = Get(cache, "schema a", &compiled);
  Result b = Get(cache, "schema b", &compiled);
  ASSERT_TRUE(a.ok() && again.ok() && b.ok());
  EXPECT_EQ(compiled, 2);
  EXPECT_EQ(a->get(), again->get());
  EXPECT_NE(a->get(), b->get());
  EXPECT_EQ(cache.size(), 2u);
}

TEST(GrammarCacheTest, ErrorsAreNotKeptAndNullptrIs) {
  GrammarCache cache(4, 1 << 20);
  int calls = 0;
  auto bad = [&]() -> Result {
    ++calls;
    return absl::InvalidArgumentError("bad schema");
  };
  EXPECT_FALSE(cache.GetOrCompile("k", bad).ok());
  EXPECT_FALSE(cache.GetOrCompile("k", bad).ok());
  EXPECT_EQ(calls, 2);
  auto none = [&]() -> Result {
    ++calls;
    return std::shared_ptr<const JsonGrammar>();
  };
  EXPECT_EQ(*cache.GetOrCompile("n", none), nullptr);
  EXPECT_EQ(*cache.GetOrCompile("n", none), nullptr);
  EXPECT_EQ(calls, 3);
}

TEST(GrammarCacheTest, TheLeastRecentlyUsedGoFirstPastEitherBound) {
  GrammarCache cache(2, 1 << 20);
  int compiled = 0;
  ASSERT_TRUE(Get(cache, "a", &compiled).ok());
  ASSERT_TRUE(Get(cache, "b", &compiled).ok());
  ASSERT_TRUE(Get(cache, "a", &compiled).ok());  // b is now the least recent.
  ASSERT_TRUE(Get(cache, "c", &compiled).ok());
  EXPECT_EQ(compiled, 3);
  ASSERT_TRUE(Get(cache, "a", &compiled).ok());
  EXPECT_EQ(compiled, 3);
  ASSERT_TRUE(Get(cache, "b", &compiled).ok());
  EXPECT_EQ(compiled, 4);

  // Key bytes: 10 bytes hold one 6-byte key; a key longer than the bound is never kept.
  GrammarCache small(8, 10);
  compiled = 0;
  ASSERT_TRUE(Get(small, "aaaaaa", &compiled).ok());
  ASSERT_TRUE(Get(small, "bbbbbb", &compiled).ok());
  EXPECT_EQ(small.size(), 1u);
  ASSERT_TRUE(Get(small, "bbbbbb", &compiled).ok());
  EXPECT_EQ(compiled, 2);
  ASSERT_TRUE(Get(small, std::string(11, 'x'), &compiled).ok());
  ASSERT_TRUE(Get(small, std::string(11, 'x'), &compiled).ok());
  EXPECT_EQ(compiled, 4);
  EXPECT_EQ(small.size(), 1u);

  GrammarCache off(0, 1 << 20);
  compiled = 0;
  ASSERT_TRUE(Get(off, "a", &compiled).ok());
  ASSERT_TRUE(Get(off, "a", &compiled).ok());
  EXPECT_EQ(compiled, 2);
}

TEST(GrammarCacheTest, HandlersShareItFromSeveralThreads) {
  GrammarCache cache(3, 1 << 20);
  std::atomic<int> compiled{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string key = "k" + std::to_string((i + t) % 5);
        Result r = cache.GetOrCompile(key, [&]() -> Result {
          ++compiled;
          return JsonGrammar::AnyObject();
        });
        EXPECT_TRUE(r.ok() && *r != nullptr);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_LE(cache.size(), 3u);
  EXPECT_GE(compiled.load(), 5);
}

}  // namespace
}  // namespace cairn::infer::text
