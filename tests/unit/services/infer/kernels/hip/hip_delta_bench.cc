// cairn_hip_kernel_bench's delta-rule rows (with the other modes) and its --delta mode: the
// gated delta rule's rows alone, then hashes of its bits at fixed inputs; the usage is in
// hip_kernel_bench.cc.
#include "tests/unit/services/infer/kernels/hip/hip_delta_bench.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/checksum/checksum.h"
#include "services/infer/kernels/hip/hip_compat.h"
#include "services/infer/kernels/hip/hip_kernel_backend.h"
#include "services/infer/kernels/hip/hip_kernels.h"
#include "tests/unit/services/infer/kernels/hip/hip_bench_util.h"

namespace cairn::infer {

// The gated delta rule at Qwen3-Next-like linear-attention heads (16 k heads, 32 v heads,
// 128 x 128): one layer's chunked call, the fp32 kernels, the matrix-unit path's two kernels
// apart, the layer's rule with its gates and q/k norms as launches of their own and inside the
// prepare kernels, the recurrent step.
void DeltaRuleRows(HipKernelBackend& b, Bench& bench, bool quick, int reps) {
  char label[160];
  const int kh = 16, vh = 32, dk = 128, dv = 128;
  const int64_t max_tokens = quick ? 4096 : 32768;
  float* q = bench.Buffer(max_tokens * kh * dk, 14, -0.1f, 0.1f);
  float* k = bench.Buffer(max_tokens * kh * dk, 15, -0.1f, 0.1f);
  float* v = bench.Buffer(max_tokens * vh * dv, 16);
  float* g = bench.Buffer(max_tokens * vh, 17, -0.5f, -0.01f);
  float* beta = bench.Buffer(max_tokens * vh, 18, 0.1f, 0.9f);
  float* state = bench.Buffer(vh * dk * dv, 19, -0.1f, 0.1f);
  float* o = bench.Buffer(max_tokens * vh * dv, 20);
  for (const int64_t tokens : {int64_t{4096}, int64_t{32768}}) {
    if (tokens > max_tokens) continue;
    const double t = bench.Time(
        [&] {
          b.GatedDeltaRule({q, k, v, g, beta, state, o, tokens, kh, vh, dk, dv, 64});
        },
        quick ? 2 : 5);
    std::snprintf(label, sizeof label, "gated delta chunked %ld tokens (one layer)", tokens);
    Row(label, t, "ktok/s", static_cast<double>(tokens), 1e3);
  }
  {
    // The fp32 kernels (mma_delta off) at 4096 tokens, against the matrix-unit path above.
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> fp32 =
        HipKernelBackend::Create({.mma_delta = false});
    if (!fp32.ok()) Bench::Fail(fp32.status().ToString());
    const double tf = bench.Time(
        [&] {
          (*fp32)->GatedDeltaRule({q, k, v, g, beta, state, o, 4096, kh, vh, dk, dv, 64});
          Bench::Check((*fp32)->Synchronize(), "fp32 delta rule");
        },
        2);
    Row("gated delta chunked 4096 tokens, fp32 kernels (mma_delta off)", tf, "ktok/s", 4096.0, 1e3);
    // The matrix-unit path's two kernels apart (one segment of 4096 tokens).
    const hip::GatedDeltaLaunch l{
        q, k, v, g, beta, state, o, 4096, kh, vh, dk, dv, 64, int64_t{kh} * dk, int64_t{vh} * dv};
    float* ws = bench.Buffer(hip::GatedDeltaMmaWorkspaceFloats(l, 4096), 21);
    for (const bool prepare : {true, false}) {
      const double tp = bench.Time(
          [&] {
            Bench::Check(hip::GatedDeltaMmaParts(l, 4096, ws, prepare, !prepare, nullptr,
                                                 nullptr) == hipSuccess
                             ? absl::OkStatus()
                             : absl::InternalError("delta parts launch"),
                         "delta parts");
            Bench::Check(hipStreamSynchronize(nullptr) == hipSuccess
                             ? absl::OkStatus()
                             : absl::InternalError("delta parts sync"),
                         "delta parts sync");
          },
          3);
      Row(prepare ? "gated delta 4096 tokens, matrix units: prepare kernel"
                  : "gated delta 4096 tokens, matrix units: scan kernel",
          tp, "ktok/s", 4096.0, 1e3);
    }
  }
  {
    // The layer's rule with its inputs as the conv and the projection leave them
    // (GatedDeltaStepBatch at 4096 tokens): the gates, q and k's normalisation and the rule as
    // three calls (fuse_delta_inputs off), and with the first two inside the prepare kernels.
    constexpr int64_t kTokens = 4096;
    const int64_t conv_ld = 2 * int64_t{kh} * dk + int64_t{vh} * dv;
    float* conv = bench.Buffer(kTokens * conv_ld, 22, -0.1f, 0.1f);
    float* proj = bench.Buffer(kTokens * 2 * vh, 23, -3.0f, 3.0f);
    float* dt_bias = bench.Buffer(vh, 24);
    float* neg_a = bench.Buffer(vh, 25, -2.0f, -0.1f);
    GatedDeltaInputs in;
    in.proj = proj;
    in.proj_ld = 2 * vh;
    in.tokens = kTokens;
    in.v_heads = vh;
    in.b_offset = 0;
    in.a_offset = vh;
    in.dt_bias = dt_bias;
    in.neg_a = neg_a;
    in.g = g;
    in.beta = beta;
    in.q = conv;
    in.k = conv + int64_t{kh} * dk;
    in.q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    in.k_heads = kh;
    in.dk = dk;
    in.qk_ld = conv_ld;
    in.eps = 1e-6f;
    const GatedDeltaArgs rule{in.q, in.k,    conv + 2 * int64_t{kh} * dk,
                              g,    beta,    state,
                              o,    kTokens, kh,
                              vh,   dk,      dv,
                              64,   conv_ld, conv_ld};
    absl::StatusOr<std::unique_ptr<HipKernelBackend>> apart =
        HipKernelBackend::Create({.fuse_delta_inputs = false});
    if (!apart.ok()) Bench::Fail(apart.status().ToString());
    for (HipKernelBackend* be : {apart->get(), &b}) {
      const double ts = bench.Time(
          [&] {
            be->GatedDeltaStepBatch(in, {&rule, 1});
            Bench::Check(be->Synchronize(), "delta step batch");
          },
          3);
      Row(be == &b ? "gated delta 4096 tokens with its gates and q/k norms in the prepare kernel"
                   : "gated delta 4096 tokens with GdnGates and L2NormalizeTwo launches",
          ts, "ktok/s", static_cast<double>(kTokens), 1e3);
    }
  }
  const double t = bench.Time(
      [&] {
        b.GatedDeltaRule({q, k, v, g, beta, state, o, 1, kh, vh, dk, dv, 0});
      },
      reps * 5);
  Row("gated delta recurrent 1 token (state read + write)", t, "GB/s", 2.0 * 4.0 * vh * dk * dv);
  bench.Free();
}

namespace {

// XXH3-64 of `n` floats of device memory.
uint64_t DeviceHash(HipKernelBackend& b, const float* p, int64_t n) {
  std::vector<float> host(static_cast<size_t>(n));
  Bench::Check(b.Download(host.data(), p, n * static_cast<int64_t>(sizeof(float))),
               "hash download");
  return Xxh3(host.data(), host.size() * sizeof(float));
}

}  // namespace

// --delta: the delta rule's rows, then the bits of the chunked path (hashes of the outputs and
// the final state after one call from fixed inputs) at shapes that take each of its code paths:
// one segment, two segments ending in a partial chunk, dk 64, and unaligned q and k rows.
int DeltaRule() {
  const std::unique_ptr<HipKernelBackend> backend = Bench::Backend();
  HipKernelBackend& b = *backend;
  Bench bench(&b);
  DeltaRuleRows(b, bench, false, 10);
  struct Shape {
    int kh, vh, dk, dv;
    int64_t tokens;
    int offset;  // Floats q and k start past their buffers' (aligned) starts.
  };
  for (const Shape& sh : {Shape{16, 32, 128, 128, 4096, 0}, Shape{16, 32, 128, 128, 5000, 0},
                          Shape{4, 8, 64, 64, 777, 0}, Shape{16, 32, 128, 128, 1000, 1}}) {
    const int64_t qk = sh.tokens * sh.kh * sh.dk + sh.offset;
    float* q = bench.Buffer(qk, 14, -0.1f, 0.1f) + sh.offset;
    float* k = bench.Buffer(qk, 15, -0.1f, 0.1f) + sh.offset;
    float* v = bench.Buffer(sh.tokens * sh.vh * sh.dv, 16);
    float* g = bench.Buffer(sh.tokens * sh.vh, 17, -0.5f, -0.01f);
    float* beta = bench.Buffer(sh.tokens * sh.vh, 18, 0.1f, 0.9f);
    float* state = bench.Buffer(static_cast<int64_t>(sh.vh) * sh.dk * sh.dv, 19, -0.1f, 0.1f);
    float* o = bench.Buffer(sh.tokens * sh.vh * sh.dv, 20);
    b.GatedDeltaRule({q, k, v, g, beta, state, o, sh.tokens, sh.kh, sh.vh, sh.dk, sh.dv, 64});
    Bench::Check(b.Synchronize(), "delta rule");
    std::printf("gated delta bits, %ld tokens, %d/%d heads of %d%s: out %016llx state %016llx\n",
                sh.tokens, sh.kh, sh.vh, sh.dk, sh.offset != 0 ? ", unaligned q and k" : "",
                static_cast<unsigned long long>(DeviceHash(b, o, sh.tokens * sh.vh * sh.dv)),
                static_cast<unsigned long long>(
                    DeviceHash(b, state, static_cast<int64_t>(sh.vh) * sh.dk * sh.dv)));
    bench.Free();
  }
  return 0;
}

}  // namespace cairn::infer
