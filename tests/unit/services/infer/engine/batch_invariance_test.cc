// Batch invariance (docs/architecture.md §6): a sequence's logits and state never depend on which
// other sequences share its forward batch, bit for bit, for every architecture.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/infer/engine/generation.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/models/model_test_util.h"

namespace cairn::infer {
namespace {

using ::cairn::testing::StatusIs;

constexpr int kSlots = 4;
constexpr int kDecodeSteps = 6;

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class BatchInvarianceTest : public ::testing::TestWithParam<std::string> {};

// Prefills slot `i` with its own prompt (lengths differ per slot), then decodes greedily,
// either all slots in one batch per step or one slot at a time; every step's logits must be
// bit-identical.
TEST_P(BatchInvarianceTest, BatchedDecodeEqualsDecodingAlone) {
  auto backend = testing::TestBackend();
  absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset(GetParam(), backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t vocab = (*model)->info().vocab_size;
  auto run = [&](bool batched) {
    auto memory = SlotKvMemory::Create((*model)->state_layout(), {kSlots, 512});
    EXPECT_TRUE(memory.ok());
    std::vector<std::vector<std::vector<float>>> steps(kSlots);
    std::vector<int32_t> next(kSlots);
    for (int i = 0; i < kSlots; ++i) {
      const std::vector<int32_t> prompt = testing::RandomTokens(40 + 17 * i, vocab, 100 + i);
      auto logits = (*model)->Forward((*memory)->slot(i), prompt, {});
      EXPECT_TRUE(logits.ok()) << logits.status();
      next[i] = Argmax(logits->data(), vocab);
    }
    for (int step = 0; step < kDecodeSteps; ++step) {
      if (batched) {
        std::vector<SequencePass> passes;
        for (int i = 0; i < kSlots; ++i) {
          passes.push_back({(*memory)->slot(i), absl::MakeConstSpan(&next[i], 1), false});
        }
        auto out = (*model)->ForwardBatch(passes);
        EXPECT_TRUE(out.ok()) << out.status();
        for (int i = 0; i < kSlots; ++i) steps[i].push_back((*out)[i]);
      } else {
        for (int i = 0; i < kSlots; ++i) {
          auto out = (*model)->Forward((*memory)->slot(i), absl::MakeConstSpan(&next[i], 1), {});
          EXPECT_TRUE(out.ok()) << out.status();
          steps[i].push_back(*out);
        }
      }
      for (int i = 0; i < kSlots; ++i) next[i] = Argmax(steps[i].back().data(), vocab);
    }
    return steps;
  };

  const auto alone = run(false);
  const auto together = run(true);

  for (int i = 0; i < kSlots; ++i) {
    for (int step = 0; step < kDecodeSteps; ++step) {
      EXPECT_TRUE(SameBytes(alone[i][step], together[i][step])) << "slot " << i << " step " << step;
    }
  }
}

// A long prefill pass sharing the batch with decode steps leaves each sequence's bits as if it
// ran alone.
TEST_P(BatchInvarianceTest, MixedPrefillAndDecodeBatchEqualsAlone) {
  auto backend = testing::TestBackend();
  absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset(GetParam(), backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t vocab = (*model)->info().vocab_size;
  const std::vector<int32_t> a = testing::RandomTokens(50, vocab, 1);
  const std::vector<int32_t> b = testing::RandomTokens(70, vocab, 2);
  const int32_t one = 7;
  auto memory = SlotKvMemory::Create((*model)->state_layout(), {4, 256});
  ASSERT_TRUE(memory.ok());
  ASSERT_TRUE((*model)->Forward((*memory)->slot(0), a, {}).ok());
  ASSERT_TRUE((*model)->Forward((*memory)->slot(2), a, {}).ok());

  auto alone_decode = (*model)->Forward((*memory)->slot(0), absl::MakeConstSpan(&one, 1), {});
  auto alone_prefill = (*model)->Forward((*memory)->slot(1), b, {});
  const SequencePass passes[] = {{(*memory)->slot(2), absl::MakeConstSpan(&one, 1), false},
                                 {(*memory)->slot(3), b, false}};
  auto together = (*model)->ForwardBatch(passes);

  ASSERT_TRUE(alone_decode.ok() && alone_prefill.ok() && together.ok());
  EXPECT_TRUE(SameBytes(*alone_decode, (*together)[0]));
  EXPECT_TRUE(SameBytes(*alone_prefill, (*together)[1]));
}

TEST_P(BatchInvarianceTest, BadBatchesChangeNoSlot) {
  auto backend = testing::TestBackend();
  absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset(GetParam(), backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  auto memory = SlotKvMemory::Create((*model)->state_layout(), {2, 64});
  ASSERT_TRUE(memory.ok());
  const int32_t ok_token = 3;
  const int32_t bad_token = static_cast<int32_t>((*model)->info().vocab_size);

  const SequencePass twice[] = {{(*memory)->slot(0), absl::MakeConstSpan(&ok_token, 1), false},
                                {(*memory)->slot(0), absl::MakeConstSpan(&ok_token, 1), false}};
  const SequencePass bad[] = {{(*memory)->slot(0), absl::MakeConstSpan(&ok_token, 1), false},
                              {(*memory)->slot(1), absl::MakeConstSpan(&bad_token, 1), false}};

  EXPECT_THAT((*model)->ForwardBatch(twice).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*model)->ForwardBatch(bad).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*model)->ForwardBatch({}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ((*memory)->slot(0)->position(), 0);
  EXPECT_EQ((*memory)->slot(1)->position(), 0);
}

INSTANTIATE_TEST_SUITE_P(Architectures, BatchInvarianceTest,
                         ::testing::Values("dense", "next", "moe", "qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace cairn::infer
