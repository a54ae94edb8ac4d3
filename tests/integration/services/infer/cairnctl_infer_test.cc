// cairnctl's inference-daemon verbs and streaming `call` against a live in-process cairn-infer.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/services/infer/infer_harness.h"
#include "tests/unit/services/infer/models/model_test_util.h"
#include "tools/cairnctl/command.h"

namespace cairn::infer::testing {
namespace {

using ::testing::HasSubstr;

class CairnctlInferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeModelFolder("dense", false, "m-cairnctl");
    ASSERT_TRUE(dir.ok()) << dir.status();
    InferServerOptions o;
    o.model_dir = *dir;
    o.slots = 2;
    absl::StatusOr<std::unique_ptr<InferServer>> s = InferServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    std::vector<const char*> argv = {"cairnctl"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    return cairnctl::RunCairnctl(static_cast<int>(argv.size()), argv.data(), out_, err_);
  }
  std::unique_ptr<InferServer> server_;
  std::ostringstream out_, err_;
};

TEST_F(CairnctlInferTest, ModelAndSlots) {
  ASSERT_EQ(Run({"model", "--addr", server_->address()}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("qwen3_5_text"));
  EXPECT_THAT(out_.str(), HasSubstr("not connected"));

  ASSERT_EQ(Run({"slots", "--addr", server_->address()}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("idle"));
  EXPECT_THAT(out_.str(), HasSubstr("0 requests queued"));
}

TEST_F(CairnctlInferTest, GenerateFromTokenIdsPrintsTheCacheReport) {
  const std::string file = ScratchDir() + "/ids.json";
  std::ofstream(file) << "[1, 2, 3, 4, 5, 6, 7, 8]";

  ASSERT_EQ(
      Run({"generate", "--addr", server_->address(), "--prompt-ids", file, "--max-tokens", "5"}), 0)
      << err_.str();

  EXPECT_THAT(out_.str(), HasSubstr("8 prompt tokens (0 cached, restored from cold"));
  EXPECT_THAT(out_.str(), HasSubstr("5 generated"));
  EXPECT_THAT(out_.str(), HasSubstr("cache unavailable"));
}

TEST_F(CairnctlInferTest, GenerateRefusesTwoPromptSources) {
  EXPECT_EQ(Run({"generate", "--addr", server_->address(), "--chat", "[]", "hello"}), 2);
}

TEST_F(CairnctlInferTest, CallPrintsEveryMessageOfAServerStream) {
  ASSERT_EQ(Run({"call", "--addr", server_->address(), "cairn.infer.v1.InferService/Generate",
                 R"({"token_ids": {"ids": [5, 6, 7]}, "sampling": {"max_tokens": 3}})"}),
            0)
      << err_.str();

  std::vector<std::string> lines;
  std::istringstream in(out_.str());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u) << out_.str();  // Started, three deltas, Finished.
  EXPECT_THAT(lines.front(), HasSubstr("\"started\""));
  EXPECT_THAT(lines.back(), HasSubstr("\"finished\""));
}

TEST_F(CairnctlInferTest, CallReportsAStreamError) {
  EXPECT_EQ(Run({"call", "--addr", server_->address(), "cairn.infer.v1.InferService/Generate",
                 R"({"token_ids": {"ids": []}})"}),
            1);
  EXPECT_THAT(err_.str(), HasSubstr("prompt is empty"));
}

}  // namespace
}  // namespace cairn::infer::testing
