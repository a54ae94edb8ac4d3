#include "tests/unit/services/infer/models/model_test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "gtest/gtest.h"
#include "services/infer/models/model_loader.h"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"

namespace cairn::infer::testing {

std::string ScratchDir() {
  static const std::string* dir = [] {
    auto* path = new std::string((std::filesystem::path(::testing::TempDir()) /
                                  absl::StrCat("cairn-infer-test-", getpid()))
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

absl::StatusOr<std::unique_ptr<Model>> LoadPreset(const std::string& name,
                                                  KernelBackend* backend) {
  ASSIGN_OR_RETURN(std::string dir, PresetDir(name));
  return LoadModel(dir, backend, {});
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

}  // namespace cairn::infer::testing
