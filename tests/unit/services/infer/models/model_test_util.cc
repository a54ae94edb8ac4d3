#include "tests/unit/services/infer/models/model_test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status/status_macros.h"
#include "gtest/gtest.h"
#include "services/infer/models/model_loader.h"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"

namespace cairn::infer::testing {

std::string ScratchDir() {
  static const std::string* dir = [] {
    auto* path = new std::string(
        (std::filesystem::path(::testing::TempDir()) / absl::StrCat("cairn-infer-test-", getpid()))
            .string());
    std::error_code ec;
    std::filesystem::create_directories(*path, ec);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(ScratchDir(), ignored);
    });
    return path;
  }();
  return *dir;
}

absl::StatusOr<std::string> PresetDir(const std::string& name) {
  static auto* written = new std::map<std::string, std::string>();
  auto it = written->find(name);
  if (it != written->end()) return it->second;
  ASSIGN_OR_RETURN(RandomCheckpointOptions options, RandomCheckpointPreset(name));
  const std::string dir = (std::filesystem::path(ScratchDir()) / ("model-" + name)).string();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  RETURN_IF_ERROR(WriteRandomCheckpoint(dir, options));
  written->emplace(name, dir);
  return dir;
}

std::unique_ptr<CpuKernelBackend> TestBackend() {
  absl::StatusOr<std::unique_ptr<CpuKernelBackend>> backend =
      CpuKernelBackend::Create({.threads = 2});
  return backend.ok() ? *std::move(backend) : nullptr;
}

absl::StatusOr<std::unique_ptr<Model>> LoadPreset(const std::string& name, KernelBackend* backend) {
  return LoadPreset(name, backend, {});
}

absl::StatusOr<std::unique_ptr<Model>> LoadPreset(const std::string& name, KernelBackend* backend,
                                                  const ModelLoadOptions& options) {
  ASSIGN_OR_RETURN(std::string dir, PresetDir(name));
  return LoadModel(dir, backend, options);
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> out;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(vocab)));
  }
  return out;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = a.size() == b.size() ? 0.0f : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

absl::Status CompareReusedResults(Model& model, DeviceMemory* memory, uint64_t seed) {
  const int64_t vocab = model.info().vocab_size;
  const std::vector<int32_t> tokens = RandomTokens(64, vocab, seed);
  const auto span = absl::MakeConstSpan(tokens);
  // Each batch: (slot, first token, tokens, all_logits) per sequence.
  struct Pass {
    int slot;
    int64_t first;
    int64_t n;
    bool all;
  };
  const std::vector<std::vector<Pass>> batches = {
      {{0, 0, 20, true}, {1, 3, 7, false}},
      {{0, 20, 1, false}, {1, 10, 1, false}, {2, 30, 5, true}},
      {{0, 21, 1, false}, {1, 11, 1, false}, {2, 35, 1, false}},
      {{0, 22, 1, false}, {1, 12, 1, false}},
      {{2, 36, 1, false}},
      {{0, 23, 1, false}, {1, 13, 1, false}, {2, 37, 1, false}},
  };
  // How the results come back: 0 ForwardBatch, 1 ForwardBatchInto into kept vectors, 2
  // ForwardBatchViews into kept spans (copied out before the next batch).
  const auto run = [&](int mode) -> absl::StatusOr<std::vector<std::vector<std::vector<float>>>> {
    std::vector<std::unique_ptr<SlotState>> slots;
    for (int i = 0; i < 3; ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<SlotState> slot,
                       SlotState::Create(model.state_layout(), 64, memory));
      slots.push_back(std::move(slot));
    }
    std::vector<std::vector<float>> kept = {std::vector<float>(3, NAN),
                                            {},
                                            std::vector<float>(5 * vocab + 17, 1.0f),
                                            std::vector<float>(9, -2.0f)};
    std::vector<absl::Span<const float>> views(5);
    std::vector<std::vector<std::vector<float>>> out;
    for (const std::vector<Pass>& b : batches) {
      std::vector<SequencePass> passes;
      for (const Pass& p : b) {
        passes.push_back(
            {slots[static_cast<size_t>(p.slot)].get(), span.subspan(p.first, p.n), p.all});
      }
      if (mode == 2) {
        RETURN_IF_ERROR(model.ForwardBatchViews(passes, views));
        std::vector<std::vector<float>> copied;
        for (absl::Span<const float> v : views) copied.emplace_back(v.begin(), v.end());
        out.push_back(std::move(copied));
      } else if (mode == 1) {
        RETURN_IF_ERROR(model.ForwardBatchInto(passes, kept));
        out.push_back(kept);
      } else {
        ASSIGN_OR_RETURN(std::vector<std::vector<float>> fresh, model.ForwardBatch(passes));
        out.push_back(std::move(fresh));
      }
    }
    return out;
  };
  ASSIGN_OR_RETURN(const auto fresh, run(0));
  for (int mode = 1; mode <= 2; ++mode) {
    const char* const how = mode == 1 ? "reused results" : "views";
    ASSIGN_OR_RETURN(const auto reused, run(mode));
    for (size_t b = 0; b < batches.size(); ++b) {
      if (fresh[b].size() != batches[b].size() || reused[b].size() != batches[b].size()) {
        return absl::InternalError(absl::StrCat("batch ", b, ": ", fresh[b].size(), " fresh and ",
                                                reused[b].size(), " ", how, " for ",
                                                batches[b].size(), " sequences"));
      }
      for (size_t i = 0; i < batches[b].size(); ++i) {
        const std::vector<float>& f = fresh[b][i];
        const std::vector<float>& r = reused[b][i];
        const int64_t rows = batches[b][i].all ? batches[b][i].n : 1;
        if (static_cast<int64_t>(f.size()) != rows * vocab || r.size() != f.size() ||
            std::memcmp(f.data(), r.data(), f.size() * sizeof(float)) != 0) {
          return absl::InternalError(
              absl::StrCat("batch ", b, " sequence ", i, ": ", how, " differ from fresh results"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cairn::infer::testing
