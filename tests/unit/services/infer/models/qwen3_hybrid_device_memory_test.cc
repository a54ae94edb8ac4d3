// The model's device path without a GPU: the CPU backend's kernels behind a memory that says it
// is not host-visible, so the model uploads its weights, keeps its activations in a bump arena
// and moves bytes only through Upload / Download, as it does for the HIP backend. The logits must
// be the CPU backend's bits, only logits (and MoE routing) may come down, and the arena must
// stop allocating once warm.

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "gtest/gtest.h"
#include "services/infer/engine/generation.h"
#include "services/infer/engine/slot_kv_memory.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/models/model_test_util.h"

namespace cairn::infer {
namespace {

// Host memory posing as a device's, counting what crosses.
class CountingMemory final : public DeviceMemory {
 public:
  const char* name() const override { return "counting"; }
  bool host_visible() const override { return false; }
  absl::StatusOr<void*> Allocate(int64_t bytes) override {
    if (allocation_limit >= 0 && bytes > allocation_limit) {
      return absl::ResourceExhaustedError(absl::StrCat("no memory for ", bytes, " bytes"));
    }
    ++allocations;
    return HostDeviceMemory()->Allocate(bytes);
  }
  void Free(void* p) override { HostDeviceMemory()->Free(p); }
  absl::Status Upload(void* d, const void* s, int64_t n) override {
    if (!kept.ok()) return kept;
    uploaded += n;
    return HostDeviceMemory()->Upload(d, s, n);
  }
  absl::Status Download(void* d, const void* s, int64_t n) override {
    if (!kept.ok()) return kept;
    downloaded += n;
    return HostDeviceMemory()->Download(d, s, n);
  }
  absl::Status Copy(void* d, const void* s, int64_t n) override {
    return HostDeviceMemory()->Copy(d, s, n);
  }
  absl::Status Zero(void* d, int64_t n) override { return HostDeviceMemory()->Zero(d, n); }
  absl::Status DownloadRowsQueued(void* d, int64_t dst_pitch, const void* s, int64_t src_pitch,
                                  int64_t row_bytes, int64_t rows) override {
    if (!kept.ok()) return kept;
    ++queued_downloads;
    // The default: a Download a row, at once.
    return DeviceMemory::DownloadRowsQueued(d, dst_pitch, s, src_pitch, row_bytes, rows);
  }
  absl::Status WaitQueuedDownloads() override {
    ++waits;
    return absl::OkStatus();
  }

  // Allocations of more bytes fail (-1: none do).
  int64_t allocation_limit = -1;
  // The error the backend keeps, as the HIP backend's memory fails with it while kept.
  absl::Status kept;
  int64_t allocations = 0;
  int64_t queued_downloads = 0;
  int64_t waits = 0;
  int64_t uploaded = 0;
  int64_t downloaded = 0;
};

// The CPU backend's operations with CountingMemory as its memory.
class DeviceLikeBackend final : public KernelBackend {
 public:
  explicit DeviceLikeBackend(std::unique_ptr<CpuKernelBackend> cpu) : cpu_(std::move(cpu)) {}
  CountingMemory& counting() { return memory_; }

  absl::string_view name() const override { return "device-like"; }
  DeviceMemory* memory() override { return &memory_; }
  // The HIP backend's kept errors: the next Attention call keeps `error` instead of running,
  // and the memory fails with it until Recover forgets it (never, for a fault).
  void KeepAtNextAttention(absl::Status error, bool fault) {
    armed_ = std::move(error);
    armed_fault_ = fault;
  }
  int recover_calls() const { return recover_calls_; }
  absl::Status Fault() const override { return fault_ ? memory_.kept : absl::OkStatus(); }
  absl::Status Recover() override {
    ++recover_calls_;
    if (fault_) return memory_.kept;
    memory_.kept = absl::OkStatus();
    return absl::OkStatus();
  }
  void MatMulTransposed(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                        int64_t n, float* y, int64_t ldy, bool accumulate) override {
    cpu_->MatMulTransposed(x, m, k, ldx, w, n, y, ldy, accumulate);
  }
  void MatMulRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w, int64_t n,
                  float* y, int64_t ldy, bool accumulate) override {
    cpu_->MatMulRows(x, m, k, ldx, w, n, y, ldy, accumulate);
  }
  void EmbeddingGather(const float* table, int64_t dim, const int32_t* ids, int64_t n,
                       float* out) override {
    cpu_->EmbeddingGather(table, dim, ids, n, out);
  }
  bool AcceptsWeightType(WeightType type) const override { return cpu_->AcceptsWeightType(type); }
  void MatMulTransposedTyped(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w,
                             float* y, int64_t ldy, bool accumulate) override {
    cpu_->MatMulTransposedTyped(x, m, ldx, w, y, ldy, accumulate);
  }
  void MatMulRowsTyped(const float* x, int64_t m, int64_t ldx, const WeightMatrix& w, float* y,
                       int64_t ldy, bool accumulate) override {
    cpu_->MatMulRowsTyped(x, m, ldx, w, y, ldy, accumulate);
  }
  void EmbeddingGatherTyped(const WeightMatrix& table, const int32_t* ids, int64_t n,
                            float* out) override {
    cpu_->EmbeddingGatherTyped(table, ids, n, out);
  }
  void SplitHeadPairs(const float* in, int64_t rows, int heads, int head_dim, float* a,
                      float* b) override {
    cpu_->SplitHeadPairs(in, rows, heads, head_dim, a, b);
  }
  void SigmoidMul(float* x, const float* gate, int64_t n) override { cpu_->SigmoidMul(x, gate, n); }
  void GdnGates(const float* in, int64_t ld, int64_t tokens, int heads, int64_t b_offset,
                int64_t a_offset, const float* dt_bias, const float* neg_a, float* g,
                float* beta) override {
    cpu_->GdnGates(in, ld, tokens, heads, b_offset, a_offset, dt_bias, neg_a, g, beta);
  }
  void MoeRoute(const float* logits, int64_t tokens, int experts, int top_k, bool renormalise,
                int32_t* ids, float* weights) override {
    cpu_->MoeRoute(logits, tokens, experts, top_k, renormalise, ids, weights);
  }
  void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
               bool zero_centred, float* y) override {
    cpu_->RmsNorm(x, rows, dim, w, eps, zero_centred, y);
  }
  void GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w,
                    float eps, float* y) override {
    cpu_->GatedRmsNorm(x, z, rows, dim, w, eps, y);
  }
  void L2Normalize(float* x, int64_t rows, int64_t dim, float eps, float scale) override {
    cpu_->L2Normalize(x, rows, dim, eps, scale);
  }
  void Rope(float* x, int64_t tokens, int64_t ld, int heads, int head_dim, int rotary_dim,
            const float* inv_freq, int64_t first_position) override {
    cpu_->Rope(x, tokens, ld, heads, head_dim, rotary_dim, inv_freq, first_position);
  }
  void SiluMul(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, int64_t rows,
               int64_t dim, float* out) override {
    cpu_->SiluMul(gate, ld_gate, up, ld_up, rows, dim, out);
  }
  void CausalConvSilu(const float* in, int64_t ld_in, int64_t tokens, int64_t channels,
                      const float* w, int kernel, float* state, float* out) override {
    cpu_->CausalConvSilu(in, ld_in, tokens, channels, w, kernel, state, out);
  }
  void Attention(const AttentionArgs& args) override {
    if (!armed_.ok()) {
      if (memory_.kept.ok()) memory_.kept = armed_;
      fault_ = armed_fault_;
      armed_ = absl::OkStatus();
      return;
    }
    cpu_->Attention(args);
  }
  void GatedDeltaRule(const GatedDeltaArgs& args) override { cpu_->GatedDeltaRule(args); }

 private:
  std::unique_ptr<CpuKernelBackend> cpu_;
  CountingMemory memory_;
  absl::Status armed_;
  bool armed_fault_ = false;
  bool fault_ = false;
  int recover_calls_ = 0;
};

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The preset loaded on the CPU backend (host_) and on the device-like one (model_, on device_).
class DeviceMemoryModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Model>> host = testing::LoadPreset(GetParam(), cpu_.get());
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = *std::move(host);
    absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset(GetParam(), &device_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
  }

  // The CPU model's last logits for `tokens`, from an empty slot.
  absl::StatusOr<std::vector<float>> HostLogits(const std::vector<int32_t>& tokens) {
    ASSIGN_OR_RETURN(std::unique_ptr<SlotState> slot,
                     SlotState::Create(host_->state_layout(), std::ssize(tokens)));
    return host_->Forward(slot.get(), tokens, {});
  }

  std::unique_ptr<CpuKernelBackend> cpu_ = testing::TestBackend();
  DeviceLikeBackend device_{testing::TestBackend()};
  std::unique_ptr<Model> host_;
  std::unique_ptr<Model> model_;
};

TEST_P(DeviceMemoryModelTest, DevicePathGivesTheCpuBitsAndMovesOnlyLogits) {
  const ModelInfo& info = model_->info();
  // Every weight went up once (plus the RoPE frequencies the model computes).
  EXPECT_GE(device_.counting().uploaded, info.weight_bytes);
  EXPECT_LT(device_.counting().uploaded, info.weight_bytes + 4096);

  const int64_t vocab = info.vocab_size;
  const std::vector<int32_t> tokens = testing::RandomTokens(200, vocab, 3);
  const std::vector<int64_t> passes = {1, 90, 5, 104};
  absl::StatusOr<std::unique_ptr<SlotState>> host_slot =
      SlotState::Create(host_->state_layout(), 210);
  absl::StatusOr<std::unique_ptr<SlotState>> device_slot =
      SlotState::Create(model_->state_layout(), 210, device_.memory());
  ASSERT_TRUE(host_slot.ok() && device_slot.ok());
  absl::StatusOr<std::vector<float>> expected =
      Prefill(*host_, host_slot->get(), tokens, passes, /*all_logits=*/true);
  ASSERT_TRUE(expected.ok()) << expected.status();
  device_.counting().downloaded = 0;
  absl::StatusOr<std::vector<float>> got =
      Prefill(*model_, device_slot->get(), tokens, passes, /*all_logits=*/true);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(SameBytes(*expected, *got));
  const bool moe = GetParam() != "dense";
  if (!moe) {
    EXPECT_EQ(device_.counting().downloaded, 200 * vocab * static_cast<int64_t>(sizeof(float)));
  }

  // Decode steps of one shape: the arena is warm after the first and allocates nothing more.
  for (int step = 0; step < 3; ++step) {
    const std::vector<int32_t> next = {tokens[static_cast<size_t>(step)]};
    absl::StatusOr<std::vector<float>> a = host_->Forward(host_slot->get(), next, {});
    const int64_t allocations = device_.counting().allocations;
    absl::StatusOr<std::vector<float>> b = model_->Forward(device_slot->get(), next, {});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(SameBytes(*a, *b)) << "step " << step;
    if (step > 0) {
      EXPECT_EQ(device_.counting().allocations, allocations) << "step " << step;
    }
  }
}

// ForwardBatchInto reuses its results' memory and gives ForwardBatch's bits, on the host path
// and on the device path (logits staged, then copied into each result); so do ForwardBatchViews'
// spans (on the device path, into the staging itself where one download holds the batch).
TEST_P(DeviceMemoryModelTest, ReusedResultsGiveTheBitsOfFreshOnes) {
  CAIRN_EXPECT_OK(testing::CompareReusedResults(*host_, cpu_->memory(), 11));
  CAIRN_EXPECT_OK(testing::CompareReusedResults(*model_, device_.memory(), 11));
}

// Logits in parts of the vocabulary (Qwen3HybridOptions::logits_parts, each part's download
// queued while the next computes) give the bits of one product and one download: short passes
// (the row-wise product) with every position's logits and with the last only, a batched decode
// step, and a long pass (the GEMM: one product, not in parts).
TEST_P(DeviceMemoryModelTest, LogitsInPartsGiveTheBitsOfOneProduct) {
  DeviceLikeBackend whole_device(testing::TestBackend());
  DeviceLikeBackend parts_device(testing::TestBackend());
  absl::StatusOr<std::unique_ptr<Model>> whole = testing::LoadPreset(GetParam(), &whole_device);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ModelLoadOptions options;
  options.qwen3_hybrid.logits_parts = 3;
  options.qwen3_hybrid.logits_parts_min_bytes = 0;
  absl::StatusOr<std::unique_ptr<Model>> parts =
      testing::LoadPreset(GetParam(), &parts_device, options);
  ASSERT_TRUE(parts.ok()) << parts.status();
  const int64_t vocab = (*whole)->info().vocab_size;
  const std::vector<int32_t> tokens = testing::RandomTokens(57, vocab, 5);
  std::vector<std::unique_ptr<SlotState>> slots;
  for (DeviceLikeBackend* device : {&whole_device, &parts_device}) {
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<std::unique_ptr<SlotState>> slot =
          SlotState::Create((*whole)->state_layout(), 64, device->memory());
      ASSERT_TRUE(slot.ok()) << slot.status();
      slots.push_back(*std::move(slot));
    }
  }
  for (const bool all_logits : {true, false}) {
    absl::StatusOr<std::vector<float>> a =
        Prefill(**whole, slots[all_logits ? 0 : 1].get(), tokens, {7, 50}, all_logits);
    absl::StatusOr<std::vector<float>> b =
        Prefill(**parts, slots[all_logits ? 2 : 3].get(), tokens, {7, 50}, all_logits);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(SameBytes(*a, *b)) << "all logits " << all_logits;
  }
  // Passes of 7 tokens in parts, of 50 (longer than row_kernel_max_tokens) whole.
  EXPECT_EQ(whole_device.counting().queued_downloads, 0);
  EXPECT_EQ(parts_device.counting().queued_downloads, 3 * 2);
  EXPECT_EQ(parts_device.counting().waits, 2);
  const std::vector<int32_t> next_a = {tokens[0]};
  const std::vector<int32_t> next_b = {tokens[1]};
  const SequencePass whole_batch[] = {{slots[0].get(), next_a}, {slots[1].get(), next_b}};
  const SequencePass parts_batch[] = {{slots[2].get(), next_a}, {slots[3].get(), next_b}};
  absl::StatusOr<std::vector<std::vector<float>>> a = (*whole)->ForwardBatch(whole_batch);
  absl::StatusOr<std::vector<std::vector<float>>> b = (*parts)->ForwardBatch(parts_batch);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), 2u);
  ASSERT_EQ(b->size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(SameBytes((*a)[i], (*b)[i])) << "sequence " << i;
  EXPECT_EQ(parts_device.counting().queued_downloads, 3 * 3);
}

// A pass that fails for want of device memory (its scratch), or on an error its backend keeps
// but can forget, fails with that error and is no fault: the model has the backend recover, and
// the next pass gives the bits of a model that never failed. A backend's fault stays one.
TEST_P(DeviceMemoryModelTest, AFailedPassIsRecoveredUnlessTheBackendFaulted) {
  const std::vector<int32_t> tokens = testing::RandomTokens(40, model_->info().vocab_size, 9);
  absl::StatusOr<std::vector<float>> expected = HostLogits(tokens);
  ASSERT_TRUE(expected.ok()) << expected.status();
  std::vector<std::unique_ptr<SlotState>> slots;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<std::unique_ptr<SlotState>> slot =
        SlotState::Create(model_->state_layout(), 48, device_.memory());
    ASSERT_TRUE(slot.ok()) << slot.status();
    slots.push_back(*std::move(slot));
  }
  auto pass = [&](int slot) { return model_->Forward(slots[slot].get(), tokens, {}); };

  // No memory for the pass's scratch (the model's first pass: its arena is empty).
  device_.counting().allocation_limit = 0;
  absl::StatusOr<std::vector<float>> r = pass(0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  CAIRN_EXPECT_OK(model_->Fault());
  device_.counting().allocation_limit = -1;
  r = pass(1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(SameBytes(*expected, *r));

  // An error the backend keeps and can forget.
  const int recovered = device_.recover_calls();
  device_.KeepAtNextAttention(absl::ResourceExhaustedError("no memory for the workspace"), false);
  r = pass(2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("workspace"), absl::string_view::npos) << r.status();
  EXPECT_GT(device_.recover_calls(), recovered);
  CAIRN_EXPECT_OK(model_->Fault());
  r = pass(3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(SameBytes(*expected, *r));

  // A fault: the pass fails with it, the model reports it, and nothing runs after it.
  device_.KeepAtNextAttention(absl::InternalError("an illegal address"), true);
  r = pass(4);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  EXPECT_EQ(model_->Fault().code(), absl::StatusCode::kInternal);
  r = pass(1);
  EXPECT_FALSE(r.ok());
}

// ReservePassMemory leaves the scratch of its pass in the model and its slot empty: a pass of
// that length allocates nothing more and gives the bits of a model that never reserved. Without
// the memory it fails, naming the pass.
TEST_P(DeviceMemoryModelTest, ReservingAPassTakesItsScratchAtOnce) {
  SlotKvMemoryOptions options;
  options.slots = 2;
  options.max_rows = 64;
  options.memory = device_.memory();
  absl::StatusOr<std::unique_ptr<SlotKvMemory>> slots =
      SlotKvMemory::Create(model_->state_layout(), options);
  ASSERT_TRUE(slots.ok()) << slots.status();

  device_.counting().allocation_limit = 0;
  const absl::Status refused = ReservePassMemory(*model_, **slots, 48);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("a pass of 48 tokens"), absl::string_view::npos) << refused;
  CAIRN_EXPECT_OK(model_->Fault());
  device_.counting().allocation_limit = -1;

  CAIRN_ASSERT_OK(ReservePassMemory(*model_, **slots, 48));
  EXPECT_EQ((*slots)->slot(0)->position(), 0);
  const std::vector<int32_t> tokens = testing::RandomTokens(48, model_->info().vocab_size, 4);
  absl::StatusOr<std::vector<float>> expected = HostLogits(tokens);
  ASSERT_TRUE(expected.ok()) << expected.status();
  for (int slot : {0, 1}) {
    const int64_t allocations = device_.counting().allocations;
    absl::StatusOr<std::vector<float>> got = model_->Forward((*slots)->slot(slot), tokens, {});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(SameBytes(*expected, *got)) << "slot " << slot;
    EXPECT_EQ(device_.counting().allocations, allocations) << "slot " << slot;
  }
}

// cairn-infer's --max-pass-tokens 0: a model computing in device memory prefills in longer
// passes than one in host memory; a length given is kept whatever the memory.
TEST(PassTokensTest, TheDefaultFollowsWhereTheModelComputes) {
  CountingMemory device;
  EXPECT_EQ(PassTokensFor(0, device), kDevicePassTokens);
  EXPECT_EQ(PassTokensFor(0, *HostDeviceMemory()), kHostPassTokens);
  EXPECT_GT(kDevicePassTokens, kHostPassTokens);
  EXPECT_EQ(PassTokensFor(300, device), 300);
  EXPECT_EQ(PassTokensFor(300, *HostDeviceMemory()), 300);
}

TEST_P(DeviceMemoryModelTest, SlotsInAnotherMemoryAreRefused) {
  DeviceLikeBackend device(testing::TestBackend());
  absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset(GetParam(), &device);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<SlotState>> host_slot =
      SlotState::Create((*model)->state_layout(), 8);
  ASSERT_TRUE(host_slot.ok());
  const std::vector<int32_t> tokens = {1, 2};
  absl::StatusOr<std::vector<float>> r = (*model)->Forward(host_slot->get(), tokens, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("host memory"), absl::string_view::npos) << r.status();
}

INSTANTIATE_TEST_SUITE_P(Architectures, DeviceMemoryModelTest,
                         ::testing::Values("dense", "next", "moe", "qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace cairn::infer
