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

TEST(TextCommandTest, TokenizeBatchAnswersEachLineInOrder) {
  CAIRN_REQUIRE_DOWNLOADED(testing::Qwen3ModelDir() + "/tokenizer.json");
  TextCommandOptions options;
  options.model_dir = testing::Qwen3ModelDir();
  // "hello world"; an invalid byte; "é" split across its two byte tokens; an id out of range.
  options.tokenize_batch_file = WriteTemp("batch.jsonl",
                                          "{\"encode_hex\": \"68656c6c6f20776f726c64\"}\n"
                                          "{\"encode_hex\": \"ff\"}\n"
                                          "{\"decode\": [14990, 127, 102]}\n"
                                          "{\"decode\": [-1]}\n");
  std::ostringstream out;

  CAIRN_ASSERT_OK(RunTextCommand(options, out));

  std::vector<nlohmann::json> lines;
  std::istringstream in(out.str());
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 4u) << out.str();
  EXPECT_EQ(lines[0]["ids"], nlohmann::json({14990, 1879}));
  EXPECT_TRUE(lines[1].contains("error")) << lines[1];
  EXPECT_EQ(lines[2]["text"], "hello\xC3\xA9");
  EXPECT_EQ(lines[2]["stream"], "hello\xC3\xA9");
  EXPECT_EQ(lines[2]["stream_pieces_valid"], true);
  EXPECT_TRUE(lines[3].contains("error")) << lines[3];
}

TEST(TextCommandTest, TokenizeBatchRejectsAnUnknownLine) {
  CAIRN_REQUIRE_DOWNLOADED(testing::Qwen3ModelDir() + "/tokenizer.json");
  TextCommandOptions options;
  options.model_dir = testing::Qwen3ModelDir();
  // An unknown case; an id a TokenId cannot hold (2^32 + 14990, never truncated to "hello");
  // a skip_special that is not a boolean (nlohmann's value() would throw on it).
  for (const char* line : {"{\"encode\": \"hi\"}\n", "{\"decode\": [4294982286]}\n",
                           "{\"decode\": [14990], \"skip_special\": \"yes\"}\n"}) {
    options.tokenize_batch_file = WriteTemp("bad_batch.jsonl", line);
    std::ostringstream out;

    EXPECT_THAT(RunTextCommand(options, out), StatusIs(absl::StatusCode::kInvalidArgument)) << line;
  }
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
