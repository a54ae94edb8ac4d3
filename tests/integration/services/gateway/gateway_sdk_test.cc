// The official OpenAI and Anthropic npm clients against the gateway (issue 11: chat,
// streaming, tools with tool-call deltas, completions with token ids, errors; messages,
// streaming, tools), over real HTTP with the scripted fake daemon behind it. The clients are
// fetched by tools/fetch-test-data; without them the test skips (fails when env CI is set).

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/services/gateway/gateway_harness.h"

namespace cairn::gateway::testing {
namespace {

std::string SourceDir() {
  const char* dir = std::getenv("CAIRN_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

// The script each request gets, chosen by its last message (see sdk_clients.cjs).
Script Choose(const infer_v1::GenerateRequest& request) {
  const auto& messages = request.chat().messages();
  const std::string last = messages.empty() ? "" : messages.rbegin()->content();
  if (absl::StrContains(last, "busy")) {
    Script s;
    s.Fail(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full");
    return s;
  }
  if (absl::StrContains(last, "too long")) {  // Refused after a silent wait: pings went first.
    Script s;
    s.Pause(absl::Milliseconds(500))
        .Fail(grpc::StatusCode::INVALID_ARGUMENT,
              "prompt of 9000 tokens does not fit the context of 4096 tokens");
    return s;
  }
  if (!absl::StrContains(last, "tool")) return Script::Reply({"Hello", " world"});
  return Script::ReadFileToolCall(request);
}

TEST(GatewaySdkTest, OfficialOpenAiAndAnthropicClientsWork) {
  const std::string modules = SourceDir() + "/tests/data/downloads/gateway-sdk/node_modules";
  if (!std::filesystem::exists(modules + "/openai") ||
      !std::filesystem::exists(modules + "/@anthropic-ai/sdk") ||
      std::system("command -v node >/dev/null 2>&1") != 0) {
    if (std::getenv("CI") != nullptr) FAIL() << modules << " or node is missing in CI";
    GTEST_SKIP() << "run tools/fetch-test-data (needs npm and node)";
  }
  HarnessOptions options;
  options.http.api_keys = {"test-key"};
  options.sse_ping_interval = absl::Milliseconds(100);  // Streams begin before a slow failure.
  GatewayHarness h(options);
  h.fake().SetScript(Choose);
  const std::string command = absl::StrCat("timeout 120 node ", SourceDir(),
                                           "/tests/integration/services/gateway/sdk_clients.cjs ",
                                           modules, " http://127.0.0.1:", h.port(), " 2>&1");

  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  int status = ::pclose(pipe);

  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_TRUE(absl::StrContains(output, "ok anthropicErrors")) << output;
}

}  // namespace
}  // namespace cairn::gateway::testing
