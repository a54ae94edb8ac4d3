#include "services/infer/kernels/cpu/pass_flops.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace cairn::infer::cpu {
namespace {

// The weights of one Gated DeltaNet layer of the bench-50m preset (hidden 512, MLP 1280, 4
// k-heads and 8 v-heads of 64): in_proj_qkv [2 * 256 + 512, 512], in_proj_z [512, 512],
// in_proj_b and in_proj_a [8, 512], out_proj [512, 512], gate and up [1280, 512], down
// [512, 1280].
const std::vector<std::pair<int64_t, int64_t>> kGdnLayer = {
    {1024, 512}, {512, 512}, {8, 512}, {8, 512}, {512, 512}, {1280, 512}, {1280, 512}, {512, 1280}};

TEST(PassFlopsTest, LinearLayersOfOneLayerMatchAHandCount) {
  // 512 * (1024 + 512 + 8 + 8 + 512 + 1280 + 1280) + 512 * 1280 = 3,022,848 parameters, two
  // FLOPs each per token: 6,045,696 per token, 3,095,396,352 for 512 tokens.
  const std::vector<PassProduct> products = LinearPassProducts(kGdnLayer, 512);
  ASSERT_EQ(products.size(), kGdnLayer.size());
  EXPECT_DOUBLE_EQ(ModelFlops(products), 3095396352.0);
  for (const PassProduct& p : products) {
    EXPECT_EQ(p.part, PassPart::kLinear);
    EXPECT_EQ(p.m, 512);
    EXPECT_TRUE(p.transposed_b);
    EXPECT_DOUBLE_EQ(p.model_flops, ShapeFlops(p));  // Every linear product is whole.
  }
}

TEST(PassFlopsTest, AttentionCountsTheCausalTriangleOnly) {
  // 512 queries from position 0, head size 64: the rows see 1 + 2 + ... + 512 = 131,328 keys,
  // 4 * 64 FLOPs each (scores and values): 33,619,968 per head.
  const std::vector<PassProduct> first = AttentionPassProducts(512, 0, 64);
  EXPECT_DOUBLE_EQ(ModelFlops(first), 33619968.0);
  // The two blocks of 256 rows compute 256 * 256 and 256 * 512 scores and as many value
  // products: 196,608 keys, 4 * 64 FLOPs each, of which the masked third is not counted.
  double computed = 0;
  for (const PassProduct& p : first) computed += ShapeFlops(p);
  EXPECT_DOUBLE_EQ(computed, 50331648.0);
  // 300 queries after 100 earlier keys (the blocks of 256 and 44 rows): 300 * 100 +
  // (1 + ... + 300) = 30,000 + 45,150 = 75,150 keys, 256 FLOPs each: 19,238,400.
  EXPECT_DOUBLE_EQ(ModelFlops(AttentionPassProducts(300, 100, 64)), 19238400.0);
  // One decode-like row after 1000 keys: it sees 1001 keys; head size 128: 1001 * 512.
  EXPECT_DOUBLE_EQ(ModelFlops(AttentionPassProducts(1, 1000, 128)), 512512.0);
}

TEST(PassFlopsTest, ChunkedDeltaRuleMatchesAHandCount) {
  // One chunk of 64 tokens, dk = dv = 64: below the diagonal 64 * 63 / 2 = 2016 entries, with
  // it 2080. K K^T 2016 * 128 = 258,048; the substitution into u and w 2 * 258,048; W S, Q S
  // and K'^T V_new 3 * 2 * 64^3 = 1,572,864; Q K^T and P V_new 2 * 2080 * 128 = 532,480.
  // In all 2,879,488 per head.
  EXPECT_DOUBLE_EQ(ModelFlops(DeltaRulePassProducts(64, 64, 64, 64)), 2879488.0);
  // 100 tokens: a chunk of 64 and one of 36 (630 below the diagonal, 666 with it): 258,048 +
  // ... for 64, and for 36: 3 * 630 * 128 + 3 * 2 * 36 * 64 * 64 + 2 * 666 * 128 = 241,920 +
  // 884,736 + 170,496 = 1,297,152.
  EXPECT_DOUBLE_EQ(ModelFlops(DeltaRulePassProducts(100, 64, 64, 64)), 2879488.0 + 1297152.0);
  // Recurrent: three products of 2 dk dv per token: 10 tokens, dk 64, dv 128: 491,520.
  EXPECT_DOUBLE_EQ(ModelFlops(DeltaRulePassProducts(10, 64, 128, 0)), 491520.0);
  for (const PassProduct& p : DeltaRulePassProducts(100, 64, 64, 64)) {
    EXPECT_EQ(p.part, PassPart::kDeltaRule);
    EXPECT_LE(p.model_flops, ShapeFlops(p));
  }
}

}  // namespace
}  // namespace cairn::infer::cpu
