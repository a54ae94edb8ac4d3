// The chunked gated delta rule on the matrix units (hip::GatedDeltaMma, the default for chunk 64
// and dk up to 128) against the CPU backend and against the fp32 kernels (mma_delta off): both
// within the recurrence tolerance over several segments, with fast and slow decays; and the
// 4-byte copy path (unaligned q and k) gives the bits of the 16-byte one. Skips without a device.

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "tests/unit/services/infer/kernels/hip/hip_kernel_test_fixture.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer {
namespace {

using testing::HipKernelBackendTest;
using testing::kRecurrenceTolerance;
using testing::Measured;
using testing::RelErr;
using testing::SameBits;

struct DeltaInputs {
  int64_t tokens;
  int kh, vh, dk, dv;
  std::vector<float> q, k, v, g, beta, state0;
};

// Unit-norm keys and scaled queries as the model passes them; decays drawn from [g_lo, g_hi].
DeltaInputs MakeInputs(CpuKernelBackend& cpu, int64_t tokens, int kh, int vh, int dk, int dv,
                       float g_lo, float g_hi, uint64_t seed) {
  DeltaInputs in{tokens, kh, vh, dk, dv, {}, {}, {}, {}, {}, {}};
  in.q = RandomFloats(tokens * kh * dk, seed);
  in.k = RandomFloats(tokens * kh * dk, seed + 1);
  in.v = RandomFloats(tokens * vh * dv, seed + 2);
  in.g = RandomFloats(tokens * vh, seed + 3, g_lo, g_hi);
  in.beta = RandomFloats(tokens * vh, seed + 4, 0.1f, 0.9f);
  in.state0 = RandomFloats(static_cast<size_t>(vh) * dk * dv, seed + 5, -0.2f, 0.2f);
  cpu.L2Normalize(in.k.data(), tokens * kh, dk, 1e-6f, 1.0f);
  cpu.L2Normalize(in.q.data(), tokens * kh, dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(dk)));
  return in;
}

class HipGatedDeltaMmaTest : public HipKernelBackendTest {
 protected:
  // Runs the rule (chunked with `chunk`, 0: recurrent) on `b`; q and k start `offset` floats
  // into their buffers.
  // Returns the outputs followed by the final state.
  std::vector<float> RunOn(HipKernelBackend& b, const DeltaInputs& in, int offset = 0,
                           int chunk = 64) {
    std::vector<float> q(offset, 0.0f), k(offset, 0.0f);
    q.insert(q.end(), in.q.begin(), in.q.end());
    k.insert(k.end(), in.k.begin(), in.k.end());
    DeviceBuffer dq = Up(q), dk = Up(k), dv = Up(in.v), dg = Up(in.g), db = Up(in.beta),
                 s = Up(in.state0), o = Poisoned(in.tokens * in.vh * in.dv);
    b.GatedDeltaRule({dq.floats() + offset, dk.floats() + offset, dv.floats(), dg.floats(),
                      db.floats(), s.floats(), o.floats(), in.tokens, in.kh, in.vh, in.dk, in.dv,
                      chunk});
    EXPECT_TRUE(b.Synchronize().ok()) << b.status();
    std::vector<float> out = Down(o, in.tokens * in.vh * in.dv);
    const std::vector<float> state = Down(s, in.state0.size());
    out.insert(out.end(), state.begin(), state.end());
    return out;
  }

  std::vector<float> RunCpu(const DeltaInputs& in) {
    std::vector<float> state = in.state0, out(in.tokens * in.vh * in.dv);
    cpu_->GatedDeltaRule({in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                          state.data(), out.data(), in.tokens, in.kh, in.vh, in.dk, in.dv, 64});
    out.insert(out.end(), state.begin(), state.end());
    return out;
  }
};

TEST_F(HipGatedDeltaMmaTest, MatchesCpuAndTheFp32KernelsOverSegments) {
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> fp32 =
      HipKernelBackend::Create({.mma_delta = false});
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  struct Case {
    int64_t tokens;
    int kh, vh, dk, dv;
    float g_lo, g_hi;
  };
  // Past the default segment (4096 tokens) with a partial last chunk; slow decays (a state
  // that remembers several chunks); a narrower head with dv not a multiple of the scan's slice.
  for (const Case c :
       {Case{4200, 2, 4, 128, 128, -0.5f, -0.01f}, Case{1500, 1, 2, 128, 128, -0.02f, -0.001f},
        Case{333, 2, 2, 64, 40, -0.5f, -0.01f}}) {
    const DeltaInputs in = MakeInputs(*cpu_, c.tokens, c.kh, c.vh, c.dk, c.dv, c.g_lo, c.g_hi,
                                      70 + static_cast<uint64_t>(c.tokens));
    const std::vector<float> ref = RunCpu(in);
    const std::vector<float> mma = RunOn(*gpu_, in);
    const std::vector<float> f32 = RunOn(**fp32, in);
    const std::string name =
        absl::StrCat(c.tokens, " tokens ", c.dk, "x", c.dv, " g in [", c.g_lo, ", ", c.g_hi, "]");
    EXPECT_LT(Measured(name + " delta (matrix units) vs cpu", RelErr(mma, ref)),
              kRecurrenceTolerance);
    EXPECT_LT(Measured(name + " delta (fp32) vs cpu", RelErr(f32, ref)), kRecurrenceTolerance);
    EXPECT_TRUE(SameBits(mma, RunOn(*gpu_, in)));
  }
}

TEST_F(HipGatedDeltaMmaTest, StridedRowsGiveThePackedBits) {
  // q, k and v read in place from the model's conv output rows ([q | k | v] a token, qk_ld and
  // v_ld the row's width): the packed rows' bits on the matrix-unit path, the fp32 kernels and
  // the recurrent form; with rows a multiple of 4 floats apart (16-byte copies) and not.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> fp32 =
      HipKernelBackend::Create({.mma_delta = false});
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  const DeltaInputs in = MakeInputs(*cpu_, 333, 2, 4, 128, 64, -0.5f, -0.01f, 91);
  const int64_t qk = int64_t{in.kh} * in.dk, vw = int64_t{in.vh} * in.dv;
  for (const int64_t pad : {0, 4, 3}) {
    const int64_t ld = 2 * qk + vw + pad;
    const std::vector<float> wide =
        WideDeltaRows(in.q.data(), in.k.data(), in.v.data(), in.tokens, qk, vw, ld);
    for (const int chunk : {64, 0}) {
      for (HipKernelBackend* b : {gpu_.get(), fp32->get()}) {
        const std::vector<float> packed = RunOn(*b, in, 0, chunk);
        DeviceBuffer dw = Up(wide), dg = Up(in.g), db = Up(in.beta), st = Up(in.state0),
                     o = Poisoned(in.tokens * vw);
        GatedDeltaArgs a{dw.floats(),
                         dw.floats() + qk,
                         dw.floats() + 2 * qk,
                         dg.floats(),
                         db.floats(),
                         st.floats(),
                         o.floats(),
                         in.tokens,
                         in.kh,
                         in.vh,
                         in.dk,
                         in.dv,
                         chunk};
        a.qk_ld = ld;
        a.v_ld = ld;
        b->GatedDeltaRule(a);
        ASSERT_TRUE(b->Synchronize().ok()) << b->status();
        std::vector<float> out = Down(o, in.tokens * vw);
        const std::vector<float> state = Down(st, in.state0.size());
        out.insert(out.end(), state.begin(), state.end());
        EXPECT_TRUE(SameBits(packed, out))
            << "pad " << pad << ", chunk " << chunk << (b == gpu_.get() ? ", mma" : ", fp32");
      }
    }
  }
  // Strides shorter than the rows are refused.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> bad = HipKernelBackend::Create({});
  ASSERT_TRUE(bad.ok()) << bad.status();
  DeviceBuffer any = Up(std::vector<float>(4096, 0.0f));
  GatedDeltaArgs a{any.floats(),
                   any.floats(),
                   any.floats(),
                   any.floats(),
                   any.floats(),
                   any.floats(),
                   any.floats(),
                   2,
                   2,
                   4,
                   8,
                   8,
                   0};
  a.qk_ld = 15;
  (*bad)->GatedDeltaRule(a);
  EXPECT_FALSE((*bad)->Synchronize().ok());
}

TEST_F(HipGatedDeltaMmaTest, UnalignedQueriesAndKeysGiveTheAlignedBits) {
  const DeltaInputs in = MakeInputs(*cpu_, 200, 2, 4, 128, 64, -0.5f, -0.01f, 90);
  const std::vector<float> aligned = RunOn(*gpu_, in, 0);
  const std::vector<float> unaligned = RunOn(*gpu_, in, 1);
  EXPECT_TRUE(SameBits(aligned, unaligned));
  EXPECT_LT(Measured("delta (matrix units) 200 tokens", RelErr(aligned, RunCpu(in))),
            kRecurrenceTolerance);
}

}  // namespace
}  // namespace cairn::infer
