// The HIP backend's gated delta rule: the recurrent and chunked forms against the CPU backend
// over several shapes, batches of sequences and the fused steps (decode, and chunked prefill on
// the matrix units, with q, k and the gates worked out inside) against the separate calls,
// segments and call boundaries that leave the bits alone; the chunked rule on the matrix units
// (hip::GatedDeltaMma, the default for chunk 64 and dk up to 128) against the CPU backend and the
// fp32 kernels (mma_delta off) over several segments with fast and slow decays, the 4-byte copy
// path (unaligned q and k) against the 16-byte one, and strided rows against packed ones. Skips
// without a device.

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
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
  // Strides shorter than the rows, or negative, are refused.
  DeviceBuffer any = Up(std::vector<float>(4096, 0.0f));
  for (const auto& [qk_ld, v_ld] :
       {std::pair<int64_t, int64_t>{15, 0}, std::pair<int64_t, int64_t>{0, 31},
        std::pair<int64_t, int64_t>{-16, 0}}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> bad = HipKernelBackend::Create({});
    ASSERT_TRUE(bad.ok()) << bad.status();
    GatedDeltaArgs a;
    a.q = a.k = a.v = a.g = a.beta = any.floats();
    a.state = a.out = any.floats();
    a.tokens = 2;
    a.k_heads = 2;
    a.v_heads = 4;
    a.dk = 8;
    a.dv = 8;
    a.qk_ld = qk_ld;
    a.v_ld = v_ld;
    (*bad)->GatedDeltaRule(a);
    EXPECT_FALSE((*bad)->Synchronize().ok()) << qk_ld << " / " << v_ld;
  }
}

TEST_F(HipGatedDeltaMmaTest, UnalignedQueriesAndKeysGiveTheAlignedBits) {
  const DeltaInputs in = MakeInputs(*cpu_, 200, 2, 4, 128, 64, -0.5f, -0.01f, 90);
  const std::vector<float> aligned = RunOn(*gpu_, in, 0);
  const std::vector<float> unaligned = RunOn(*gpu_, in, 1);
  EXPECT_TRUE(SameBits(aligned, unaligned));
  EXPECT_LT(Measured("delta (matrix units) 200 tokens", RelErr(aligned, RunCpu(in))),
            kRecurrenceTolerance);
}

struct DeltaCase {
  int64_t tokens;
  int k_heads, v_heads, dk, dv, chunk;
};

void PrintTo(const DeltaCase& c, std::ostream* os) {
  *os << c.tokens << " tokens, " << c.k_heads << "k/" << c.v_heads << "v heads, " << c.dk << "x"
      << c.dv << ", chunk " << c.chunk;
}

class HipGatedDeltaTest : public HipKernelBackendTest,
                          public ::testing::WithParamInterface<DeltaCase> {};

TEST_P(HipGatedDeltaTest, MatchesCpuAndRepeatsBitForBit) {
  const DeltaCase c = GetParam();
  const int64_t qk_n = c.tokens * c.k_heads * c.dk;
  std::vector<float> q = RandomFloats(qk_n, 21), k = RandomFloats(qk_n, 22);
  const std::vector<float> v = RandomFloats(c.tokens * c.v_heads * c.dv, 23);
  const std::vector<float> g = RandomFloats(c.tokens * c.v_heads, 24, -0.5f, -0.01f);
  const std::vector<float> beta = RandomFloats(c.tokens * c.v_heads, 25, 0.1f, 0.9f);
  const std::vector<float> state0 = RandomFloats(c.v_heads * c.dk * c.dv, 26, -0.2f, 0.2f);
  // Unit-norm keys and scaled queries, as the model passes them.
  cpu_->L2Normalize(k.data(), c.tokens * c.k_heads, c.dk, 1e-6f, 1.0f);
  cpu_->L2Normalize(q.data(), c.tokens * c.k_heads, c.dk, 1e-6f,
                    1.0f / std::sqrt(static_cast<float>(c.dk)));
  std::vector<float> ref_state = state0, ref(c.tokens * c.v_heads * c.dv);
  cpu_->GatedDeltaRule({q.data(), k.data(), v.data(), g.data(), beta.data(), ref_state.data(),
                        ref.data(), c.tokens, c.k_heads, c.v_heads, c.dk, c.dv, c.chunk});
  DeviceBuffer dq = Up(q), dk = Up(k), dv = Up(v), dg = Up(g), db = Up(beta);
  DeviceBuffer s1 = Up(state0), s2 = Up(state0), o1 = Poisoned(ref.size()),
               o2 = Poisoned(ref.size());

  for (auto [s, o] : {std::pair{&s1, &o1}, std::pair{&s2, &o2}}) {
    gpu_->GatedDeltaRule({dq.floats(), dk.floats(), dv.floats(), dg.floats(), db.floats(),
                          s->floats(), o->floats(), c.tokens, c.k_heads, c.v_heads, c.dk, c.dv,
                          c.chunk});
  }

  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
  const std::vector<float> out = Down(o1, ref.size()), state = Down(s1, ref_state.size());
  const std::string name = ::testing::PrintToString(
      std::vector<int64_t>{c.tokens, c.k_heads, c.v_heads, c.dk, c.dv, c.chunk});
  EXPECT_LT(Measured(name + " delta out", RelErr(out, ref)), kRecurrenceTolerance);
  EXPECT_LT(Measured(name + " delta state", RelErr(state, ref_state)), kRecurrenceTolerance);
  EXPECT_TRUE(SameBits(out, Down(o2, ref.size())));
  EXPECT_TRUE(SameBits(state, Down(s2, ref_state.size())));
}

TEST_F(HipKernelBackendTest, GatedDeltaBatchGivesTheBitsOfOneCallPerSequence) {
  // 21 sequences: decode steps (more than one launch holds), a 3-token recurrent call, a chunked
  // pass in the middle, and a last step on the first sequence's state again (after its update).
  const int kh = 4, vh = 8, dk = 128, dv = 96;
  struct Seq {
    int64_t tokens;
    int chunk;
    int state;
  };
  std::vector<Seq> seqs;
  for (int i = 0; i < 18; ++i) seqs.push_back({1, 0, i});
  seqs.insert(seqs.begin() + 5, Seq{3, 0, 18});
  seqs.insert(seqs.begin() + 9, Seq{70, 64, 19});
  seqs.push_back({1, 0, 0});
  int64_t total = 0;
  for (const Seq& q : seqs) total += q.tokens;
  std::vector<float> q = RandomFloats(total * kh * dk, 60), k = RandomFloats(total * kh * dk, 61);
  cpu_->L2Normalize(k.data(), total * kh, dk, 1e-6f, 1.0f);
  cpu_->L2Normalize(q.data(), total * kh, dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(dk)));
  const std::vector<float> v = RandomFloats(total * vh * dv, 62),
                           g = RandomFloats(total * vh, 63, -0.5f, -0.01f),
                           beta = RandomFloats(total * vh, 64, 0.1f, 0.9f),
                           states0 = RandomFloats(20 * vh * dk * dv, 65, -0.2f, 0.2f);
  DeviceBuffer dq = Up(q), dk_ = Up(k), dv_ = Up(v), dg = Up(g), db = Up(beta);
  DeviceBuffer batch_states = Up(states0), one_states = Up(states0);
  DeviceBuffer batch_out = Poisoned(total * vh * dv), one_out = Poisoned(total * vh * dv);
  const auto args_for = [&](DeviceBuffer& states, DeviceBuffer& out) {
    std::vector<GatedDeltaArgs> args;
    int64_t at = 0;
    for (const Seq& s : seqs) {
      args.push_back({dq.floats() + at * kh * dk, dk_.floats() + at * kh * dk,
                      dv_.floats() + at * vh * dv, dg.floats() + at * vh, db.floats() + at * vh,
                      states.floats() + int64_t{s.state} * vh * dk * dv,
                      out.floats() + at * vh * dv, s.tokens, kh, vh, dk, dv, s.chunk});
      at += s.tokens;
    }
    return args;
  };
  gpu_->GatedDeltaRuleBatch(args_for(batch_states, batch_out));
  for (const GatedDeltaArgs& a : args_for(one_states, one_out)) gpu_->GatedDeltaRule(a);
  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
  EXPECT_TRUE(SameBits(Down(batch_out, total * vh * dv), Down(one_out, total * vh * dv)));
  EXPECT_TRUE(SameBits(Down(batch_states, states0.size()), Down(one_states, states0.size())));
}

// One GatedDeltaStepBatch call: sequences of tokens[i] tokens with chunk[i] (their token rows
// in the reverse order), two v-heads a k-head, rows as the model lays them out ([q | k | v] a
// token, and a projection row whose tail holds b and a for every v-head); with mixed_dv the odd
// sequences have half of dv.
struct StepCase {
  int kh, dk, dv;
  std::vector<int64_t> tokens;
  std::vector<int> chunk;
  bool mixed_dv;
  bool fused;  // The fused backend takes it without the three calls (gates left unwritten).
};

std::ostream& operator<<(std::ostream& os, const StepCase& c) {
  os << "dk=" << c.dk << " dv=" << c.dv << " sequences";
  for (size_t i = 0; i < c.tokens.size(); ++i) os << " " << c.tokens[i] << "/" << c.chunk[i];
  return os;
}

struct StepResult {
  std::vector<float> out, states, gates, conv;
  // With a norm: its output and a bf16 product over it (reading its rounded copy where the
  // backend keeps one), and the rounded copies the product read.
  std::vector<float> normed, product;
  int64_t rounded_reads = 0;
  int64_t norm_launches = 0;  // Step launches that normed inside (delta_norm_inside_launches).
};

// GatedDeltaStepNormBatch's norm in RunStepBatch: none (GatedDeltaStepBatch alone), in place
// over the outputs, or into rows of its own.
enum class StepNorm { kNone, kInPlace, kApart };

class HipDeltaStepTest : public HipKernelBackendTest {
 protected:
  StepResult RunStepBatch(HipKernelBackend& be, const StepCase& c, StepNorm norm = StepNorm::kNone);
};

StepResult HipDeltaStepTest::RunStepBatch(HipKernelBackend& be, const StepCase& c, StepNorm norm) {
  const int vh = 2 * c.kh;
  const int seqs = static_cast<int>(c.tokens.size());
  int64_t tokens = 0;
  for (int64_t n : c.tokens) tokens += n;
  const int64_t qk = static_cast<int64_t>(c.kh) * c.dk;
  const int64_t conv_ld = 2 * qk + static_cast<int64_t>(vh) * c.dv;
  const int64_t proj_ld = conv_ld + 2 * vh + 5;
  const int64_t state_floats = static_cast<int64_t>(vh) * c.dk * c.dv;
  const std::vector<float> conv = RandomFloats(tokens * conv_ld, 90),
                           proj = RandomFloats(tokens * proj_ld, 91, -3.0f, 3.0f),
                           dt_bias = RandomFloats(vh, 92),
                           neg_a = RandomFloats(vh, 93, -2.0f, -0.1f),
                           states0 = RandomFloats(seqs * state_floats, 94, -0.2f, 0.2f);
  DeviceBuffer dproj = Up(proj), ddt = Up(dt_bias), dna = Up(neg_a), dconv = Up(conv),
               dstates = Up(states0), dout = Poisoned(tokens * vh * c.dv),
               dg = Poisoned(tokens * vh), dbeta = Poisoned(tokens * vh);
  GatedDeltaInputs in;
  in.proj = dproj.floats();
  in.proj_ld = proj_ld;
  in.tokens = tokens;
  in.v_heads = vh;
  in.b_offset = conv_ld + 3;
  in.a_offset = conv_ld + 3 + vh;
  in.dt_bias = ddt.floats();
  in.neg_a = dna.floats();
  in.g = dg.floats();
  in.beta = dbeta.floats();
  in.q = dconv.floats();
  in.k = dconv.floats() + qk;
  in.q_scale = 1.0f / std::sqrt(static_cast<float>(c.dk));
  in.k_heads = c.kh;
  in.dk = c.dk;
  in.qk_ld = conv_ld;
  in.eps = 1e-6f;
  std::vector<GatedDeltaArgs> args;
  int64_t row = tokens;
  for (int i = 0; i < seqs; ++i) {
    row -= c.tokens[i];  // Sequence i's first token row.
    GatedDeltaArgs& a = args.emplace_back();
    a.q = in.q + row * conv_ld;
    a.k = in.k + row * conv_ld;
    a.v = dconv.floats() + row * conv_ld + 2 * qk;
    a.g = in.g + row * vh;
    a.beta = in.beta + row * vh;
    a.state = dstates.floats() + i * state_floats;
    a.out = dout.floats() + row * vh * c.dv;
    a.tokens = c.tokens[i];
    a.k_heads = c.kh;
    a.v_heads = vh;
    a.dk = c.dk;
    a.dv = c.mixed_dv && i % 2 == 1 ? c.dv / 2 : c.dv;
    a.chunk = c.chunk[i];
    a.qk_ld = conv_ld;
    a.v_ld = conv_ld;
  }
  if (norm == StepNorm::kNone) {
    be.GatedDeltaStepBatch(in, args);
    EXPECT_TRUE(be.Synchronize().ok()) << be.status();
    StepResult r;
    r.out = Down(dout, tokens * vh * c.dv);
    r.states = Down(dstates, states0.size());
    r.gates = Down(dg, tokens * vh);
    r.conv = Down(dconv, conv.size());
    return r;
  }
  // The gates in rows of their own, wider than the heads; then a product over the norm's rows.
  const int64_t width = static_cast<int64_t>(vh) * c.dv;
  const int64_t z_ld = width + 8, n = 37;
  const RandomBf16 w = RandomBf16Values(n * width, 95);
  DeviceBuffer dz = Up(RandomFloats(tokens * z_ld, 96, -4.0f, 4.0f)),
               dw = Up(RandomFloats(c.dv, 97, 0.5f, 1.5f)), dy = Poisoned(tokens * width),
               dwm = Up(w.bits), dp = Poisoned(tokens * n);
  GatedNormHeadsArgs na;
  na.x = dout.floats();
  na.z = dz.floats();
  na.tokens = tokens;
  na.heads = vh;
  na.dim = c.dv;
  na.z_ld = z_ld;
  na.w = dw.floats();
  na.eps = 1e-6f;
  na.y = norm == StepNorm::kInPlace ? dout.floats() : dy.floats();
  const int64_t reads = be.rounded_input_reads();
  const int64_t norm_launches = be.delta_norm_inside_launches();
  be.GatedDeltaStepNormBatch(in, args, na);
  be.MatMulRowsTyped(na.y, tokens, width, WeightMatrix::Of(dwm.data(), WeightType::kBF16, n, width),
                     dp.floats(), n, false);
  EXPECT_TRUE(be.Synchronize().ok()) << be.status();
  StepResult r;
  r.out = Down(dout, tokens * width);
  r.states = Down(dstates, states0.size());
  r.gates = Down(dg, tokens * vh);
  r.conv = Down(dconv, conv.size());
  r.normed = norm == StepNorm::kInPlace ? r.out : Down(dy, tokens * width);
  r.product = Down(dp, tokens * n);
  r.rounded_reads = be.rounded_input_reads() - reads;
  r.norm_launches = be.delta_norm_inside_launches() - norm_launches;
  return r;
}

TEST_F(HipDeltaStepTest, GatedDeltaStepWithItsInputsGivesTheBitsOfTheThreeCalls) {
  // GatedDeltaStepBatch with q and k as the conv leaves them and the gates in the projection
  // rows, fused (fuse_delta_inputs: decode steps in one launch, chunked calls normalising and
  // gating in their prepare kernels) against GdnGates, L2NormalizeTwo and GatedDeltaRuleBatch:
  // the same outputs and states, bit for bit. Decode steps at head sizes 128 (the 9B-like
  // model's), 256 (the largest the decode launch takes) and 40 (not a multiple of the warp);
  // prefills of one, several and partial chunks at dk 128 and 64 (the matrix units' path), with
  // and without decode steps beside them; batches the fused path does not take (a recurrent
  // call of several tokens, sequences of decode steps differing in dv, a chunked call at dk 40)
  // take the three calls on both backends.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> apart =
      HipKernelBackend::Create({.fuse_delta_inputs = false});
  ASSERT_TRUE(apart.ok()) << apart.status();
  const std::vector<int64_t> ones16(16, 1);
  const std::vector<StepCase> cases = {
      {4, 128, 96, ones16, std::vector<int>(16, 0), false, true},
      {2, 256, 64, {1, 1, 1}, {0, 0, 0}, false, true},
      {3, 40, 24, {1, 1, 1, 1, 1}, {0, 0, 0, 0, 0}, false, true},
      {4, 128, 96, {1, 1, 1, 1}, {64, 0, 0, 0}, false, true},
      {4, 128, 96, {1, 1, 1, 1}, {0, 0, 0, 0}, true, false},
      {4, 128, 96, {150, 1, 65, 1}, {64, 0, 64, 0}, false, true},
      {4, 128, 96, {64}, {64}, false, true},
      {2, 64, 64, {300, 7}, {64, 64}, false, true},
      {4, 128, 96, {70, 5}, {64, 0}, false, false},
      {3, 40, 24, {100}, {64}, false, false},
  };
  for (const StepCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << c);
    int64_t tokens = 0;
    for (int64_t n : c.tokens) tokens += n;
    const StepResult a = RunStepBatch(**apart, c);
    const StepResult f = RunStepBatch(*gpu_, c);
    EXPECT_TRUE(SameBits(f.out, a.out));
    EXPECT_TRUE(SameBits(f.states, a.states));
    // The fused path leaves the gates and q, k unwritten; the three calls write them.
    const auto nans = [](const std::vector<float>& x) {
      return std::count_if(x.begin(), x.end(), [](float v) { return std::isnan(v); });
    };
    EXPECT_EQ(nans(a.gates), 0);
    EXPECT_EQ(nans(f.gates), c.fused ? static_cast<int64_t>(f.gates.size()) : 0);
    EXPECT_EQ(SameBits(f.conv, a.conv), !c.fused);
    // Every output written (with mixed dv, half of the narrower sequences' rows stay unwritten).
    const int64_t narrow = static_cast<int64_t>(c.tokens.size()) / 2;
    EXPECT_EQ(nans(f.out), c.mixed_dv ? narrow * 2 * c.kh * (c.dv - c.dv / 2) : 0);
  }
}

TEST_F(HipDeltaStepTest, GatedDeltaStepWithTheNormGivesTheBitsOfTheStepThenTheNorm) {
  // GatedDeltaStepNormBatch with the gated norm inside the decode steps' launch (fuse_delta_norm:
  // a head's blocks a cluster, the squares added through their shared memory), the kernel
  // compiled for one and for four blocks a multiprocessor, against the steps then a norm
  // launch: the same outputs, states, normed rows (in place and into rows of their own) and a
  // bf16 product over them (the same rounded copies read). Heads of 96 (three blocks a cluster),
  // 128, 64 at dk 256 and 256 (eight blocks); 1 to 20 sequences (two launches past 16); batches
  // the norm does not take inside (dv 24, a chunked call beside the steps, steps of mixed dv)
  // take the two calls.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> apart =
      HipKernelBackend::Create({.round_product_inputs_min_rows = 1, .fuse_delta_norm = false});
  ASSERT_TRUE(apart.ok()) << apart.status();
  std::vector<std::unique_ptr<HipKernelBackend>> inside;
  for (const int blocks : {1, 4}) {
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> b =
        HipKernelBackend::Create({.round_product_inputs_min_rows = 1,
                                  .fuse_delta_norm = true,
                                  .delta_step_min_blocks = blocks});
    ASSERT_TRUE(b.ok()) << b.status();
    inside.push_back(*std::move(b));
  }
  const auto ones = [](int n) { return std::vector<int64_t>(n, 1); };
  const auto zeros = [](int n) { return std::vector<int>(n, 0); };
  const std::vector<StepCase> cases = {
      {4, 128, 96, ones(16), zeros(16), false, true},
      {2, 128, 128, ones(1), zeros(1), false, true},
      {2, 128, 128, ones(4), zeros(4), false, true},
      {2, 128, 128, ones(20), zeros(20), false, true},
      {2, 256, 64, ones(3), zeros(3), false, true},
      {1, 64, 256, ones(2), zeros(2), false, true},
      {3, 40, 24, ones(5), zeros(5), false, true},
      {4, 128, 96, {1, 1, 1, 1}, {64, 0, 0, 0}, false, true},
      {4, 128, 96, {1, 1, 1, 1}, {0, 0, 0, 0}, true, false},
  };
  for (const StepCase& c : cases) {
    for (const StepNorm norm : {StepNorm::kInPlace, StepNorm::kApart}) {
      SCOPED_TRACE(::testing::Message() << c << (norm == StepNorm::kInPlace ? " in place" : ""));
      const StepResult a = RunStepBatch(**apart, c, norm);
      EXPECT_EQ(a.norm_launches, 0);
      // The norm inside where every call is a decode step of one dv, a multiple of 32: a launch
      // each 16 sequences.
      const bool takes = c.dv % 32 == 0 && !c.mixed_dv &&
                         std::all_of(c.chunk.begin(), c.chunk.end(), [](int k) { return k == 0; });
      const int64_t launches = takes ? (static_cast<int64_t>(c.tokens.size()) + 15) / 16 : 0;
      for (size_t i = 0; i < inside.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << "backend " << i);
        const StepResult f = RunStepBatch(*inside[i], c, norm);
        EXPECT_EQ(f.norm_launches, launches);
        EXPECT_TRUE(SameBits(f.out, a.out));
        EXPECT_TRUE(SameBits(f.states, a.states));
        EXPECT_TRUE(SameBits(f.normed, a.normed));
        EXPECT_TRUE(SameBits(f.product, a.product));
        EXPECT_EQ(f.rounded_reads, a.rounded_reads);
      }
      // Every row normed (mixed dv leaves half of the narrower sequences' outputs unwritten).
      if (!c.mixed_dv) {
        EXPECT_EQ(
            std::count_if(a.normed.begin(), a.normed.end(), [](float v) { return std::isnan(v); }),
            0);
      }
    }
  }
}

TEST_F(HipDeltaStepTest, ARefusedClusterLaunchNormsEveryRowApart) {
  // A device that refuses the cluster launch (SetRefuseClusterLaunchesForTest): the call's steps
  // run without the norm and every row is normed apart, the later launches of a call of more
  // than 16 sequences too, with the bits of the two launches; no launch counted as normed inside.
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> apart =
      HipKernelBackend::Create({.round_product_inputs_min_rows = 1, .fuse_delta_norm = false});
  ASSERT_TRUE(apart.ok()) << apart.status();
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> refused =
      HipKernelBackend::Create({.round_product_inputs_min_rows = 1, .fuse_delta_norm = true});
  ASSERT_TRUE(refused.ok()) << refused.status();
  const std::vector<StepCase> cases = {
      {2, 128, 128, std::vector<int64_t>(20, 1), std::vector<int>(20, 0), false, true},
      {2, 128, 128, std::vector<int64_t>(36, 1), std::vector<int>(36, 0), false, true},
      {4, 128, 96, std::vector<int64_t>(3, 1), std::vector<int>(3, 0), false, true},
  };
  for (const StepCase& c : cases) {
    for (const StepNorm norm : {StepNorm::kInPlace, StepNorm::kApart}) {
      SCOPED_TRACE(::testing::Message() << c << (norm == StepNorm::kInPlace ? " in place" : ""));
      (*refused)->SetRefuseClusterLaunchesForTest(true);
      const StepResult a = RunStepBatch(**apart, c, norm);
      const StepResult f = RunStepBatch(**refused, c, norm);
      EXPECT_EQ(f.norm_launches, 0);
      EXPECT_TRUE(SameBits(f.out, a.out));
      EXPECT_TRUE(SameBits(f.states, a.states));
      EXPECT_TRUE(SameBits(f.normed, a.normed));
      EXPECT_TRUE(SameBits(f.product, a.product));
      EXPECT_EQ(
          std::count_if(f.normed.begin(), f.normed.end(), [](float v) { return std::isnan(v); }),
          0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HipGatedDeltaTest,
    ::testing::Values(DeltaCase{1, 2, 6, 8, 12, 0},        // One decode step, odd sizes.
                      DeltaCase{37, 2, 6, 8, 12, 0},       // Recurrent over a short prompt.
                      DeltaCase{1, 2, 6, 8, 12, 64},       // One token, chunked.
                      DeltaCase{150, 2, 6, 8, 12, 64},     // Two chunks and a partial one.
                      DeltaCase{100, 2, 6, 8, 12, 4},      // Small chunks.
                      DeltaCase{65, 4, 8, 128, 128, 64},   // Real head sizes across a chunk.
                      DeltaCase{20, 4, 8, 128, 128, 0},    // Real head sizes, recurrent.
                      DeltaCase{1000, 2, 4, 256, 96, 64},  // Largest dk, dv not a multiple of 32.
                      DeltaCase{5000, 1, 2, 64, 64, 64}),  // Longer than one segment.
    [](const ::testing::TestParamInfo<DeltaCase>& p) {
      const DeltaCase& c = p.param;
      return absl::StrCat(
          c.tokens, "tokens_k", c.k_heads, "_v", c.v_heads, "_", c.dk, "x", c.dv,
          c.chunk == 0 ? std::string("_recurrent") : absl::StrCat("_chunk", c.chunk));
    });

TEST_F(HipKernelBackendTest, ChunkedDeltaRuleDoesNotDependOnSegmentsOrCallBoundaries) {
  absl::StatusOr<std::unique_ptr<HipKernelBackend>> small =
      HipKernelBackend::Create({.delta_segment_tokens = 128});
  ASSERT_TRUE(small.ok()) << small.status();
  const int64_t tokens = 640;
  const int kh = 2, vh = 4, dk = 64, dv = 64, chunk = 64;
  std::vector<float> q = RandomFloats(tokens * kh * dk, 27), k = RandomFloats(tokens * kh * dk, 28);
  cpu_->L2Normalize(k.data(), tokens * kh, dk, 1e-6f, 1.0f);
  cpu_->L2Normalize(q.data(), tokens * kh, dk, 1e-6f, 0.125f);
  const std::vector<float> v = RandomFloats(tokens * vh * dv, 29);
  const std::vector<float> g = RandomFloats(tokens * vh, 30, -0.5f, -0.01f);
  const std::vector<float> beta = RandomFloats(tokens * vh, 31, 0.1f, 0.9f);
  const std::vector<float> state0 = RandomFloats(vh * dk * dv, 32, -0.2f, 0.2f);
  auto run = [&](HipKernelBackend& b, const std::vector<int64_t>& passes) {
    DeviceBuffer dq = Up(q), dk_ = Up(k), dv_ = Up(v), dg = Up(g), db = Up(beta), s = Up(state0),
                 o = Poisoned(tokens * vh * dv);
    int64_t first = 0;
    for (const int64_t n : passes) {
      b.GatedDeltaRule({dq.floats() + first * kh * dk, dk_.floats() + first * kh * dk,
                        dv_.floats() + first * vh * dv, dg.floats() + first * vh,
                        db.floats() + first * vh, s.floats(), o.floats() + first * vh * dv, n, kh,
                        vh, dk, dv, chunk});
      first += n;
    }
    // Up() and Down() use gpu_'s stream: wait for `b`'s own first.
    EXPECT_TRUE(b.Synchronize().ok());
    std::vector<float> out = Down(o, tokens * vh * dv);
    const std::vector<float> state = Down(s, vh * dk * dv);
    out.insert(out.end(), state.begin(), state.end());
    return out;
  };

  const std::vector<float> whole = run(*gpu_, {tokens});
  const std::vector<float> segmented = run(**small, {tokens});
  const std::vector<float> passes = run(*gpu_, {128, 320, 192});

  ASSERT_TRUE(gpu_->Synchronize().ok());
  ASSERT_TRUE((*small)->Synchronize().ok());
  EXPECT_TRUE(SameBits(whole, segmented));
  EXPECT_TRUE(SameBits(whole, passes));
}

}  // namespace
}  // namespace cairn::infer
