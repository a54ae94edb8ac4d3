#include "services/infer/text/text_command.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/text/text_test_data.h"

namespace cairn::infer::text {
namespace {

using ::cairn::testing::StatusIs;

std::string WriteTemp(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << content;
  return path;
}

TEST(TextCommandTest, TokenizeFilePrintsIds) {
  CAIRN_REQUIRE_DOWNLOADED(testing::Qwen3ModelDir() + "/tokenizer.json");
  TextCommandOptions options;
  options.model_dir = testing::Qwen3ModelDir();
  options.tokenize_file = WriteTemp("tokenize.txt", "hello world");
  std::ostringstream out;

  CAIRN_ASSERT_OK(RunTextCommand(options, out));

  const nlohmann::json j = nlohmann::json::parse(out.str(), nullptr, false);
  ASSERT_TRUE(j.is_object()) << out.str();
  EXPECT_EQ(j["ids"], nlohmann::json({14990, 1879}));
}

TEST(TextCommandTest, RenderPrintsTextIdsAndStableBoundary) {
  CAIRN_REQUIRE_DOWNLOADED(testing::Qwen3ModelDir() + "/tokenizer.json");
  TextCommandOptions options;
  options.model_dir = testing::Qwen3ModelDir();
  options.render_file = WriteTemp(
      "render.json",
      R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true})");
  std::ostringstream out;

  CAIRN_ASSERT_OK(RunTextCommand(options, out));

  const nlohmann::json j = nlohmann::json::parse(out.str(), nullptr, false);
  ASSERT_TRUE(j.is_object()) << out.str();
  EXPECT_EQ(j["text"], "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // <|im_start|> user \n Hi <|im_end|> \n <|im_start|> assistant \n
  EXPECT_EQ(j["ids"].size(), 9u);
  EXPECT_EQ(j["stable_boundary"], 9);
}

TEST(TextCommandTest, BadOptionsAndInputsAreErrors) {
  std::ostringstream out;
  TextCommandOptions none;
  EXPECT_THAT(RunTextCommand(none, out), StatusIs(absl::StatusCode::kInvalidArgument));

  TextCommandOptions both;
  both.model_dir = testing::Qwen3ModelDir();
  both.tokenize_file = "a";
  both.render_file = "b";
  EXPECT_THAT(RunTextCommand(both, out), StatusIs(absl::StatusCode::kInvalidArgument));

  TextCommandOptions missing;
  missing.model_dir = testing::TextDataPath("no-such-model");
  missing.tokenize_file = "a";
  EXPECT_THAT(RunTextCommand(missing, out), StatusIs(absl::StatusCode::kNotFound));
}

TEST(TextCommandTest, MalformedRenderRequestIsInvalidArgument) {
  CAIRN_REQUIRE_DOWNLOADED(testing::Qwen3ModelDir() + "/tokenizer.json");
  TextCommandOptions options;
  options.model_dir = testing::Qwen3ModelDir();
  options.render_file = WriteTemp("bad.json", R"({"messages": 3})");
  std::ostringstream out;

  EXPECT_THAT(RunTextCommand(options, out), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn::infer::text
