// An attention layer's inputs on the HIP backend: RoPE with the new key and value rows appended
// to the slots (RopeAppendBatch) and that launch with the output gate's split and the q / k norms
// before it (NormRopeAppendBatch), against the per-sequence and separate calls bit for bit and
// against the CPU backend. Skips without a device.

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "services/infer/kernels/cpu/cpu_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "tests/unit/services/infer/kernels/hip/hip_kernel_test_fixture.h"
#include "tests/unit/services/infer/kernels/random_floats.h"

namespace cairn::infer {
namespace {

using testing::HipKernelBackendTest;
using testing::Measured;
using testing::RelErr;
using testing::SameBits;

TEST_F(HipKernelBackendTest, RopeAppendBatchGivesTheBitsOfThePerSequenceCallsAndMatchesCpu) {
  // 19 sequences (more than one launch holds): one token each at positions from 4096 to 100000,
  // one of 3 tokens, and one with a full rotary width (a run of its own); padded row strides.
  const int q_heads = 16, kv_heads = 4, hd = 256;
  const int64_t q_ld = q_heads * hd + 40, width = kv_heads * hd, kv_ld = width + 12;
  const int n = 19;
  std::vector<int64_t> tokens(n, 1), positions(n);
  std::vector<int> rotary(n, 64);
  tokens[3] = 3;
  rotary[10] = hd;
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    positions[i] = i == 7 ? 100000 : 4096 + 37 * i;
    total += tokens[i];
  }
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / 64.0f);
  const int64_t slot_rows = 8;  // Each sequence's slot rows: [slot_rows, width].
  const std::vector<float> q = RandomFloats(total * q_ld, 90), k = RandomFloats(total * kv_ld, 91),
                           v = RandomFloats(total * kv_ld, 92),
                           slots = RandomFloats(n * slot_rows * width, 93);
  DeviceBuffer dfreq = Up(inv_freq), dk = Up(k), dv = Up(v);
  DeviceBuffer q_batch = Up(q), q_one = Up(q), k_batch = Up(slots), k_one = Up(slots),
               v_batch = Up(slots), v_one = Up(slots);
  std::vector<float> q_cpu = q, k_cpu = slots, v_cpu = slots;
  const auto args_for = [&](float* qb, const float* kb, const float* vb, float* kd, float* vd,
                            const float* freq) {
    std::vector<RopeAppendArgs> args;
    int64_t row = 0;
    for (int i = 0; i < n; ++i) {
      RopeAppendArgs& a = args.emplace_back();
      a.q = qb + row * q_ld;
      a.k = kb + row * kv_ld;
      a.v = vb + row * kv_ld;
      a.k_dst = kd + (i * slot_rows + 2) * width;
      a.v_dst = vd + (i * slot_rows + 2) * width;
      a.tokens = tokens[i];
      a.position = positions[i];
      a.q_ld = q_ld;
      a.kv_ld = kv_ld;
      a.q_heads = q_heads;
      a.kv_heads = kv_heads;
      a.head_dim = hd;
      a.rotary_dim = rotary[i];
      a.inv_freq = freq;
      row += tokens[i];
    }
    return args;
  };

  gpu_->RopeAppendBatch(args_for(q_batch.floats(), dk.floats(), dv.floats(), k_batch.floats(),
                                 v_batch.floats(), dfreq.floats()));
  for (const RopeAppendArgs& a : args_for(q_one.floats(), dk.floats(), dv.floats(), k_one.floats(),
                                          v_one.floats(), dfreq.floats())) {
    gpu_->Rope(a.q, a.tokens, a.q_ld, a.q_heads, a.head_dim, a.rotary_dim, a.inv_freq, a.position);
    gpu_->CopyRows(a.k, a.kv_ld, a.tokens, width, a.k_dst, width);
    gpu_->CopyRows(a.v, a.kv_ld, a.tokens, width, a.v_dst, width);
    gpu_->Rope(a.k_dst, a.tokens, width, a.kv_heads, a.head_dim, a.rotary_dim, a.inv_freq,
               a.position);
  }
  cpu_->RopeAppendBatch(
      args_for(q_cpu.data(), k.data(), v.data(), k_cpu.data(), v_cpu.data(), inv_freq.data()));

  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
  const std::vector<float> got_q = Down(q_batch, q.size()), got_k = Down(k_batch, slots.size()),
                           got_v = Down(v_batch, slots.size());
  EXPECT_TRUE(SameBits(got_q, Down(q_one, q.size())));
  EXPECT_TRUE(SameBits(got_k, Down(k_one, slots.size())));
  EXPECT_TRUE(SameBits(got_v, Down(v_one, slots.size())));
  EXPECT_TRUE(SameBits(got_v, v_cpu));  // Copies are exact.
  EXPECT_LT(Measured("rope append q", RelErr(got_q, q_cpu)), 1e-5f);
  EXPECT_LT(Measured("rope append k", RelErr(got_k, k_cpu)), 1e-5f);
  EXPECT_NE(got_k, slots);
}

// NormRopeAppendBatch's one launch (fuse_qk_norm_rope) against the default's calls (the split,
// both norms, RopeAppendBatch) from the same inputs: queries, gates, keys in place, the slots'
// key and value rows bit for bit; and against the CPU backend. 19 sequences (two launches), one
// of 3 tokens and one of 37; queries with the output gate in a decode step's fused q/k/v rows
// and without it in padded rows of their own; heads of 256 (rotary 64), 128 (rotary 32: pairs
// 16 apart, not a lane's) and 64 (rotary 64, the whole head); zero-centred weights or not.
TEST_F(HipKernelBackendTest, NormRopeAppendBatchGivesTheBitsOfTheSeparateCalls) {
  struct Case {
    int q_heads, kv_heads, hd, rotary;
    bool gated, zero_centred;
  };
  for (const Case& c : {Case{16, 2, 256, 64, true, true}, Case{8, 4, 128, 32, false, false},
                        Case{4, 1, 64, 64, true, false}, Case{6, 3, 128, 32, false, true}}) {
    SCOPED_TRACE(::testing::Message() << c.q_heads << "/" << c.kv_heads << " heads of " << c.hd
                                      << ", rotary " << c.rotary << (c.gated ? ", gated" : ""));
    const int n = 19;
    std::vector<int64_t> tokens(n, 1), positions(n);
    tokens[3] = 3;
    tokens[11] = 37;
    int64_t rows = 0;
    for (int i = 0; i < n; ++i) {
      positions[i] = i == 7 ? 100000 : 4096 + 37 * i;
      rows += tokens[i];
    }
    const int64_t q_width = static_cast<int64_t>(c.q_heads) * c.hd;
    const int64_t width = static_cast<int64_t>(c.kv_heads) * c.hd;
    // Gated: one buffer of fused rows [q/gate pairs | k | v] (a decode step's q/k/v product),
    // the queries split into rows of their own. Else q and k/v rows of their own, padded.
    const int64_t fused_ld = 2 * q_width + 2 * width;
    const int64_t q_ld = c.gated ? q_width : q_width + 40;
    const int64_t kv_ld = c.gated ? fused_ld : 2 * width + 12;  // [k | v | padding] rows.
    const int64_t slot_rows = 40;
    std::vector<float> inv_freq(c.rotary / 2);
    for (int i = 0; i < c.rotary / 2; ++i) {
      inv_freq[i] = std::pow(10000.0f, -2.0f * i / static_cast<float>(c.rotary));
    }
    const std::vector<float> fused = RandomFloats(rows * fused_ld, 94, -2.0f, 2.0f),
                             q0 = RandomFloats(rows * q_ld, 95, -2.0f, 2.0f),
                             kv0 = RandomFloats(rows * kv_ld, 96, -2.0f, 2.0f),
                             slots = RandomFloats(n * slot_rows * width, 97),
                             qn = RandomFloats(c.hd, 98), kn = RandomFloats(c.hd, 99);
    const DeviceBuffer dfreq = Up(inv_freq), dqn = Up(qn), dkn = Up(kn);
    // Each run's buffers: [0] fused rows or q, [1] k/v rows (ungated), [2] q (gated), [3] gate,
    // [4] key slots, [5] value slots.
    struct Run {
      std::vector<DeviceBuffer> b;
    };
    const auto fresh = [&] {
      Run r;
      r.b.push_back(Up(c.gated ? fused : q0));
      r.b.push_back(Up(kv0));
      r.b.push_back(Poisoned(rows * q_width));
      r.b.push_back(Poisoned(rows * q_width));
      r.b.push_back(Up(slots));
      r.b.push_back(Up(slots));
      return r;
    };
    const auto args_for = [&](float* base, float* kv, float* q, float* gate, float* kd, float* vd,
                              const float* qnorm, const float* knorm, const float* freq,
                              std::vector<RopeAppendArgs>* batch) {
      QkNormArgs norm;
      norm.rows = rows;
      if (c.gated) {
        norm.qg = base;
        norm.qg_ld = fused_ld;
        norm.gate = gate;
        norm.q = q;
        norm.k = base + 2 * q_width;
      } else {
        norm.q = base;
        norm.k = kv;
      }
      norm.q_ld = q_ld;
      norm.kv_ld = kv_ld;
      norm.q_heads = c.q_heads;
      norm.kv_heads = c.kv_heads;
      norm.head_dim = c.hd;
      norm.q_norm = qnorm;
      norm.k_norm = knorm;
      norm.eps = 1e-6f;
      norm.zero_centred = c.zero_centred;
      int64_t row = 0;
      for (int i = 0; i < n; ++i) {
        RopeAppendArgs& a = batch->emplace_back();
        a.q = norm.q + row * q_ld;
        a.k = norm.k + row * kv_ld;
        a.v = norm.k + width + row * kv_ld;
        a.k_dst = kd + (i * slot_rows + 2) * width;
        a.v_dst = vd + (i * slot_rows + 2) * width;
        a.tokens = tokens[i];
        a.position = positions[i];
        a.q_ld = q_ld;
        a.kv_ld = kv_ld;
        a.q_heads = c.q_heads;
        a.kv_heads = c.kv_heads;
        a.head_dim = c.hd;
        a.rotary_dim = c.rotary;
        a.inv_freq = freq;
        row += tokens[i];
      }
      return norm;
    };
    const auto run = [&](Run& r) {
      std::vector<RopeAppendArgs> batch;
      const QkNormArgs norm = args_for(r.b[0].floats(), r.b[1].floats(), r.b[2].floats(),
                                       r.b[3].floats(), r.b[4].floats(), r.b[5].floats(),
                                       dqn.floats(), dkn.floats(), dfreq.floats(), &batch);
      gpu_->NormRopeAppendBatch(norm, batch);
    };
    const auto down = [&](const Run& r) {
      std::vector<std::vector<float>> out;
      out.push_back(Down(r.b[0], c.gated ? fused.size() : q0.size()));
      out.push_back(Down(r.b[1], kv0.size()));
      for (int i = 2; i < 4; ++i) out.push_back(Down(r.b[i], rows * q_width));
      for (int i = 4; i < 6; ++i) out.push_back(Down(r.b[i], slots.size()));
      return out;
    };

    Run one = fresh(), apart = fresh();
    gpu_->SetFuseQkNormRopeForTest(true);
    const int64_t before = gpu_->norm_rope_launches();
    run(one);
    EXPECT_EQ(gpu_->norm_rope_launches(), before + 2);  // 16 sequences, then 3.
    gpu_->SetFuseQkNormRopeForTest(false);
    run(apart);
    gpu_->SetFuseQkNormRopeForTest(HipKernelBackendOptions().fuse_qk_norm_rope);
    EXPECT_EQ(gpu_->norm_rope_launches(), before + 2);
    ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
    const std::vector<std::vector<float>> got = down(one), want = down(apart);
    for (size_t i = 0; i < got.size(); ++i) {
      if (!c.gated && (i == 2 || i == 3)) continue;  // Unused without the gate.
      EXPECT_TRUE(SameBits(got[i], want[i])) << "buffer " << i;
    }

    // The CPU backend's calls on the same inputs.
    std::vector<float> base = c.gated ? fused : q0, kv = kv0, q(rows * q_width),
                       gate(rows * q_width), kd = slots, vd = slots;
    std::vector<RopeAppendArgs> batch;
    const QkNormArgs norm = args_for(base.data(), kv.data(), q.data(), gate.data(), kd.data(),
                                     vd.data(), qn.data(), kn.data(), inv_freq.data(), &batch);
    cpu_->NormRopeAppendBatch(norm, batch);
    EXPECT_LT(
        Measured("norm rope append queries", RelErr(c.gated ? got[2] : got[0], c.gated ? q : base)),
        1e-5f);
    EXPECT_LT(Measured("norm rope append keys", RelErr(got[4], kd)), 1e-5f);
    EXPECT_TRUE(SameBits(got[5], vd));
    if (c.gated) {
      EXPECT_TRUE(SameBits(got[3], gate));
    }
  }
}

// Calls whose sequences do not cover the rows of their QkNormArgs once (a row left out) take
// the default's calls, not the one launch.
TEST_F(HipKernelBackendTest, NormRopeAppendBatchLeavesCallsItCannotTakeToTheDefault) {
  const int q_heads = 4, kv_heads = 2, hd = 64;
  const int64_t q_width = q_heads * hd, width = kv_heads * hd, rows = 3;
  const std::vector<float> inv_freq(hd / 2, 0.01f), norm_w = RandomFloats(hd, 5);
  const DeviceBuffer q = Up(RandomFloats(rows * q_width, 6)),
                     kv = Up(RandomFloats(rows * 2 * width, 7)),
                     slots = Up(RandomFloats(8 * width, 8)), dfreq = Up(inv_freq), dw = Up(norm_w);
  QkNormArgs norm;
  norm.rows = rows;
  norm.q = q.floats();
  norm.q_ld = q_width;
  norm.k = kv.floats();
  norm.kv_ld = 2 * width;
  norm.q_heads = q_heads;
  norm.kv_heads = kv_heads;
  norm.head_dim = hd;
  norm.q_norm = norm.k_norm = dw.floats();
  norm.eps = 1e-6f;
  RopeAppendArgs a;
  a.q = norm.q;
  a.k = norm.k;
  a.v = norm.k + width;
  a.k_dst = slots.floats();
  a.v_dst = slots.floats() + 4 * width;
  a.tokens = 2;  // Of the 3 rows.
  a.q_ld = norm.q_ld;
  a.kv_ld = norm.kv_ld;
  a.q_heads = q_heads;
  a.kv_heads = kv_heads;
  a.head_dim = hd;
  a.rotary_dim = hd;
  a.inv_freq = dfreq.floats();
  gpu_->SetFuseQkNormRopeForTest(true);
  const int64_t before = gpu_->norm_rope_launches();
  gpu_->NormRopeAppendBatch(norm, {a});
  EXPECT_EQ(gpu_->norm_rope_launches(), before);
  a.tokens = 3;
  gpu_->NormRopeAppendBatch(norm, {a});
  EXPECT_EQ(gpu_->norm_rope_launches(), before + 1);
  gpu_->SetFuseQkNormRopeForTest(HipKernelBackendOptions().fuse_qk_norm_rope);
  ASSERT_TRUE(gpu_->Synchronize().ok()) << gpu_->status();
}

}  // namespace
}  // namespace cairn::infer
