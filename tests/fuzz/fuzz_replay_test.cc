// Replays every committed input of every fuzz target (reliability plan C4, H2): the seeds in
// tests/fuzz/corpus/<name>/ and every input that once crashed, in tests/fuzz/regressions/<name>/.
// A crash, sanitizer report or broken property aborts the test.

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_target.h"

namespace cairn::fuzz {
namespace {

struct Target {
  const char* name;
  int (*run)(const uint8_t* data, size_t size);
};

constexpr Target kTargets[] = {
    {"tokenizer", FuzzTokenizer},
    {"chat_template", FuzzChatTemplate},
    {"safetensors", FuzzSafetensors},
    {"model_config", FuzzModelConfig},
    {"disk_format", FuzzDiskFormat},
    {"disk_recovery", FuzzDiskRecovery},
    {"trace", FuzzTrace},
    {"gateway_request", FuzzGatewayRequest},
    {"cache_rpc", FuzzCacheRpc},
    {"infer_rpc", FuzzInferRpc},
    {"json_schema", FuzzJsonSchema},
    {"sampler", FuzzSampler},
};

std::filesystem::path FuzzDir() {
  const char* source = std::getenv("CAIRN_SOURCE_DIR");
  return std::filesystem::path(source != nullptr ? source : ".") / "tests/fuzz";
}

std::vector<std::filesystem::path> FilesIn(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Runs `target` over every file in `dir`; returns how many.
size_t Replay(const Target& target, const std::filesystem::path& dir) {
  const std::vector<std::filesystem::path> files = FilesIn(dir);
  for (const std::filesystem::path& file : files) {
    SCOPED_TRACE(file.string());
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(target.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
  }
  return files.size();
}

class FuzzReplayTest : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzReplayTest, EverySeedAndRegressionInputRunsClean) {
  const Target& target = GetParam();

  const size_t seeds = Replay(target, FuzzDir() / "corpus" / target.name);
  const size_t regressions = Replay(target, FuzzDir() / "regressions" / target.name);

  EXPECT_GT(seeds, 0u) << "no seed corpus for fuzz target " << target.name;
  RecordProperty("regressions", static_cast<int>(regressions));
}

// "disk_format" -> "DiskFormat".
std::string TestName(const ::testing::TestParamInfo<Target>& target) {
  std::string name;
  bool upper = true;
  for (const char* c = target.param.name; *c != '\0'; ++c) {
    if (*c == '_') {
      upper = true;
      continue;
    }
    name.push_back(upper ? static_cast<char>(std::toupper(*c)) : *c);
    upper = false;
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllTargets, FuzzReplayTest, ::testing::ValuesIn(kTargets), TestName);

}  // namespace
}  // namespace cairn::fuzz
