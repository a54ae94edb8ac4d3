#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_TEXT_TEST_DATA_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_TEXT_TEST_DATA_H_

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

// Locations of the text test data: committed files under tests/data/text/ and the files
// tools/fetch-test-data downloads into tests/data/downloads/.
namespace cairn::infer::text::testing {

// Returns the repository root (env CAIRN_SOURCE_DIR, set by cairn_cc_test).
inline std::string SourceDir() {
  const char* dir = std::getenv("CAIRN_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

inline std::string TextDataPath(const std::string& name) {
  return SourceDir() + "/tests/data/text/" + name;
}

// The directory holding the real Qwen3 tokenizer.json and tokenizer_config.json.
inline std::string Qwen3ModelDir() {
  return SourceDir() + "/tests/data/downloads/tokenizer-qwen3/models";
}

inline bool RunningInCi() { return std::getenv("CI") != nullptr; }

}  // namespace cairn::infer::text::testing

// Skips the test (fails it when env CI is set) when the downloaded file `path` is absent.
#define CAIRN_REQUIRE_DOWNLOADED(path)                                                     \
  do {                                                                                     \
    if (!std::filesystem::exists(path)) {                                                  \
      if (::cairn::infer::text::testing::RunningInCi()) {                                  \
        FAIL() << (path) << " is missing; CI must run tools/fetch-test-data first";        \
      }                                                                                    \
      GTEST_SKIP() << (path) << " is missing; run tools/fetch-test-data (needs npm)";      \
    }                                                                                      \
  } while (false)

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_TEXT_TEXT_TEST_DATA_H_
