// The MoE device tests' fixture (hip_moe_experts_test.cc, the decode path; hip_moe_prefill_test.cc,
// the prefill path and the routing): layer shapes, random bf16 experts uploaded in one or two
// parts, router logits with ties, and the CPU backend's result for comparison.

#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MOE_TEST_FIXTURE_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MOE_TEST_FIXTURE_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/scratch_arena.h"
#include "tests/unit/services/infer/kernels/hip/hip_kernel_test_fixture.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer::testing {

struct MoeShape {
  std::string name;
  int64_t tokens;
  int64_t hidden;
  int64_t width;
  int experts;
  int top_k;
  bool two_parts;  // gate and up rows of an expert in separate buffers.
  float hot_bias;  // Added to the logits of experts 1 and 5 (0: none): their picks collide.
};

// MoeExpertsArgs for shape `s` over device inputs x and logits and the uploaded experts (`out`
// left for the caller).
inline MoeExpertsArgs ShapeArgs(const MoeShape& s, const float* x, const float* logits,
                                const std::vector<WeightMatrix>& gate_up,
                                const std::vector<WeightMatrix>& down, bool row_invariant,
                                bool renormalise = true) {
  MoeExpertsArgs a;
  a.x = x;
  a.logits = logits;
  a.tokens = s.tokens;
  a.hidden = s.hidden;
  a.width = s.width;
  a.experts = s.experts;
  a.top_k = s.top_k;
  a.renormalise = renormalise;
  a.gate_up = gate_up.data();
  a.down = down.data();
  a.row_invariant = row_invariant;
  return a;
}

// Random experts (bf16 bits) of one shape: the fused layout [experts][2 * width][hidden] (gate
// rows, then up rows), with s.two_parts the same rows split into gate and up arrays (else those
// are empty), and down [experts][hidden][width].
struct MoeBits {
  std::vector<uint16_t> gate_up, gates, ups, down;
};

inline MoeBits RandomExperts(const MoeShape& s, uint64_t seed) {
  MoeBits b;
  const int64_t half = s.width * s.hidden;
  b.gate_up = RandomBf16ValueBits(static_cast<size_t>(s.experts * 2 * half), seed);
  b.down = RandomBf16ValueBits(static_cast<size_t>(s.experts * half), seed + 1);
  if (s.two_parts) {
    for (int e = 0; e < s.experts; ++e) {
      const uint16_t* m = b.gate_up.data() + e * 2 * half;
      b.gates.insert(b.gates.end(), m, m + half);
      b.ups.insert(b.ups.end(), m + half, m + 2 * half);
    }
  }
  return b;
}

// RandomExperts(s, seed), kept from an earlier call that asked for the same large experts: the
// 80B-like layer's (512 experts of 3 x 2048 x 512) take seconds to make, and a test runs it in
// several ways, token counts and paths. Only the latest large set is kept (gigabytes); sets under
// kKeptExpertsMinValues are made afresh each time (milliseconds) and leave it in place.
inline constexpr int64_t kKeptExpertsMinValues = int64_t{1} << 26;
inline std::shared_ptr<const MoeBits> SharedRandomExperts(const MoeShape& s, uint64_t seed) {
  if (static_cast<int64_t>(s.experts) * 3 * s.width * s.hidden < kKeptExpertsMinValues) {
    return std::make_shared<const MoeBits>(RandomExperts(s, seed));
  }
  struct Kept {
    int experts = -1;
    int64_t hidden = 0, width = 0;
    bool two_parts = false;
    uint64_t seed = 0;
    std::shared_ptr<const MoeBits> bits;
  };
  static Kept* kept = new Kept();
  // A set made with gate and up arrays serves a shape without them too.
  if (kept->bits == nullptr || kept->experts != s.experts || kept->hidden != s.hidden ||
      kept->width != s.width || (s.two_parts && !kept->two_parts) || kept->seed != seed) {
    kept->bits = nullptr;  // Its memory goes before the next set's is taken.
    kept->bits = std::make_shared<const MoeBits>(RandomExperts(s, seed));
    kept->experts = s.experts;
    kept->hidden = s.hidden;
    kept->width = s.width;
    kept->two_parts = s.two_parts;
    kept->seed = seed;
  }
  return kept->bits;
}

// Each expert's matrices over the arrays at `fused` (or, with s.two_parts and non-null `gates`,
// `gates` and `ups`) and `down`.
inline void ExpertMatrices(const MoeShape& s, const uint16_t* fused, const uint16_t* gates,
                           const uint16_t* ups, const uint16_t* dn,
                           std::vector<WeightMatrix>& gate_up, std::vector<WeightMatrix>& down) {
  const int64_t half = s.width * s.hidden;
  gate_up.clear();
  down.clear();
  for (int e = 0; e < s.experts; ++e) {
    if (s.two_parts && gates != nullptr) {
      WeightMatrix w = WeightMatrix::Of(gates + e * half, WeightType::kBF16, s.width, s.hidden);
      w.parts[1] = {ups + e * half, s.width};
      w.num_parts = 2;
      gate_up.push_back(w);
    } else {
      gate_up.push_back(
          WeightMatrix::Of(fused + e * 2 * half, WeightType::kBF16, 2 * s.width, s.hidden));
    }
    down.push_back(WeightMatrix::Of(dn + e * half, WeightType::kBF16, s.hidden, s.width));
  }
}

// `a` with UploadWithShared's shared expert (one matrix each, of `s`'s width) folded in.
inline MoeExpertsArgs WithSharedExpert(MoeExpertsArgs a, const MoeShape& s,
                                       const std::vector<WeightMatrix>& shared_gate_up,
                                       const std::vector<WeightMatrix>& shared_down) {
  a.shared_gate_up = &shared_gate_up[0];
  a.shared_down = &shared_down[0];
  a.shared_width = s.width;
  return a;
}

// Router logits for `s`'s tokens: random, and with a hot bias two favoured experts for every
// token and ties: token 0's logits all equal (its picks are experts 0 .. top_k - 1) and, with
// `tied_pairs`, token 1's in equal pairs.
inline std::vector<float> RouterLogits(const MoeShape& s, uint64_t seed, bool tied_pairs) {
  std::vector<float> logits = RandomFloats(s.tokens * s.experts, seed, -3.0f, 3.0f);
  if (s.hot_bias == 0.0f) return logits;
  for (int64_t t = 0; t < s.tokens; ++t) {
    logits[t * s.experts + 1] += s.hot_bias;
    logits[t * s.experts + 5] += s.hot_bias;
  }
  std::fill(logits.begin(), logits.begin() + s.experts, 0.25f);
  if (tied_pairs && s.tokens > 1) {
    for (int e = 0; e + 1 < s.experts; e += 2) logits[s.experts + e + 1] = logits[s.experts + e];
  }
  return logits;
}

class HipMoeExpertsTest : public HipKernelBackendTest {
 protected:
  // MoeExperts' decode path on shape `s` once for each of `ways` (a backend, or null: the
  // default, KernelBackend::MoeExperts, on the first way's backend) from the same random experts,
  // inputs, routing and `out` (seeds from `seed`), with the shared expert folded in or not: each
  // way's out in `outs`, the out it started from in `out0`.
  void RunWays(const MoeShape& s, uint64_t seed, bool tied_pairs, bool with_shared,
               const std::vector<HipKernelBackend*>& ways, std::vector<std::vector<float>>* outs,
               std::vector<float>* out0) {
    ASSERT_FALSE(ways.empty());
    ASSERT_NE(ways[0], nullptr);
    std::vector<DeviceBuffer> keep;
    std::vector<WeightMatrix> gate_up, down, shared_gate_up, shared_down;
    UploadWithShared(s, seed, keep, gate_up, down, shared_gate_up, shared_down);
    const std::vector<float> x = RandomFloats(s.tokens * s.hidden, seed + 2);
    const std::vector<float> logits = RouterLogits(s, seed + 4, tied_pairs);
    *out0 = RandomFloats(s.tokens * s.hidden, seed + 6);
    DeviceBuffer dx = Up(x), dl = Up(logits);
    MoeExpertsArgs a = ShapeArgs(s, dx.floats(), dl.floats(), gate_up, down, true);
    if (with_shared) {
      a.shared_gate_up = &shared_gate_up[0];
      a.shared_down = &shared_down[0];
      a.shared_width = s.width;
    }
    outs->clear();
    for (HipKernelBackend* way : ways) {
      DeviceBuffer out = Up(*out0);
      a.out = out.floats();
      HipKernelBackend* b = way != nullptr ? way : ways[0];
      ScratchArena scratch(b->memory());
      const absl::Status st =
          way == nullptr ? b->KernelBackend::MoeExperts(a, scratch) : b->MoeExperts(a, scratch);
      ASSERT_TRUE(st.ok()) << st << " " << b->status();
      ASSERT_TRUE(b->Synchronize().ok()) << b->status();
      outs->push_back(Down(out, out0->size()));
    }
  }

  // `a` (its out and residual uploaded from out0 and h0) on each of `backends`: each one's out
  // and residual, which the test compares bit for bit with the first backend's, in outs / hs.
  void RunOnEach(const std::vector<std::unique_ptr<HipKernelBackend>>& backends, MoeExpertsArgs a,
                 const std::vector<float>& out0, const std::vector<float>& h0,
                 std::vector<std::vector<float>>* outs, std::vector<std::vector<float>>* hs) {
    outs->clear();
    hs->clear();
    for (const std::unique_ptr<HipKernelBackend>& b : backends) {
      DeviceBuffer out = Up(out0), h = Up(h0);
      a.out = out.floats();
      a.residual = h.floats();
      ScratchArena scratch(b->memory());
      ASSERT_TRUE(b->MoeExperts(a, scratch).ok()) << b->status();
      ASSERT_TRUE(b->Synchronize().ok()) << b->status();
      outs->push_back(Down(out, out0.size()));
      hs->push_back(Down(h, h0.size()));
    }
  }

  // The CPU backend's MoeExperts of `a`'s shape over the host copies of its inputs: out0 plus
  // the routed sum.
  std::vector<float> CpuMoe(MoeExpertsArgs a, const std::vector<float>& x,
                            const std::vector<float>& logits, std::vector<float> out0,
                            const std::vector<WeightMatrix>& host_gate_up,
                            const std::vector<WeightMatrix>& host_down) {
    a.x = x.data();
    a.logits = logits.data();
    a.out = out0.data();
    a.gate_up = host_gate_up.data();
    a.down = host_down.data();
    ScratchArena host_scratch(cpu_->memory());
    EXPECT_TRUE(cpu_->MoeExperts(a, host_scratch).ok());
    return out0;
  }
  // PrefillTokensRowsDoNotDependOnTheCallsOtherTokens for one shape.
  void PrefillRowsDoNotDependOnOtherTokens(const MoeShape& s);
  // Random experts of shape `s` (seed) and a shared expert of their width (seed + 1), uploaded
  // (buffers kept in `keep`): the device matrices in gate_up / down and shared_gate_up /
  // shared_down (one each).
  void UploadWithShared(const MoeShape& s, uint64_t seed, std::vector<DeviceBuffer>& keep,
                        std::vector<WeightMatrix>& gate_up, std::vector<WeightMatrix>& down,
                        std::vector<WeightMatrix>& shared_gate_up,
                        std::vector<WeightMatrix>& shared_down) {
    MoeShape one = s;
    one.experts = 1;
    UploadExperts(s, *SharedRandomExperts(s, seed), keep, gate_up, down);
    UploadExperts(one, RandomExperts(one, seed + 1), keep, shared_gate_up, shared_down);
  }
  // Uploads `b` (buffers kept in `keep`) and returns the device matrices in gate_up / down.
  void UploadExperts(const MoeShape& s, const MoeBits& b, std::vector<DeviceBuffer>& keep,
                     std::vector<WeightMatrix>& gate_up, std::vector<WeightMatrix>& down) {
    // The gate and up arrays only where the shape splits them (RandomExperts leaves them empty
    // otherwise; a kept set may have them for a shape that does not).
    const auto up = [&](const std::vector<uint16_t>& bits) -> const uint16_t* {
      if (bits.empty()) return nullptr;
      keep.push_back(Up(bits));
      return static_cast<const uint16_t*>(keep.back().data());
    };
    const uint16_t* fused = up(b.gate_up);
    const uint16_t* gates = s.two_parts ? up(b.gates) : nullptr;
    const uint16_t* ups = s.two_parts ? up(b.ups) : nullptr;
    const uint16_t* dn = up(b.down);
    ExpertMatrices(s, fused, gates, ups, dn, gate_up, down);
  }
};

}  // namespace cairn::infer::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MOE_TEST_FIXTURE_H_
