// A real coding-agent CLI against the whole stack (issue 11): qwen-code (npm
// @qwen-code/qwen-code, fetched by tools/fetch-test-data) in non-interactive mode with OpenAI
// auth runs two prompts against cairn-gateway in front of real cairn-infer (the demo model) and
// cairn-cache processes, fully offline, with its managed memory and telemetry turned off. A
// recording proxy (qwen_code_agent.cjs) reports every request's cache use.
//
// What qwen-code 0.15.10 sends: a system prompt of about 25,000 characters and 11 tool
// definitions of about 28,000 (about 11,700 tokens together), then a context user turn and the
// prompt, streamed with stream_options.include_usage. An answer cut by the gateway's
// --max-output-tokens (finish_reason "length") makes it retry with a larger max_tokens and then
// ask the model to resume, up to five requests per prompt, each repeating the conversation.

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/services/gateway/real_stack.h"

namespace cairn::gateway::testing {
namespace {

using ::testing::AnyOf;
using ::testing::Eq;
using Json = nlohmann::json;

std::string SourceDir() {
  const char* dir = std::getenv("CAIRN_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

// The Node.js to run the agent with: the one tools/fetch-test-data fetched where the machine's
// is older than 20 (Debian 12 ships 18), else the machine's.
std::string NodeBinary() {
  const std::string fetched = SourceDir() + "/tests/data/downloads/node20/bin/node";
  return std::filesystem::exists(fetched) ? fetched : "node";
}

// Returns the major version of NodeBinary(), or 0 when it is missing.
int NodeMajorVersion() {
  FILE* pipe = ::popen((NodeBinary() + " --version 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return 0;
  char buf[32] = {};
  const bool read = std::fgets(buf, sizeof(buf), pipe) != nullptr;
  ::pclose(pipe);
  return read && buf[0] == 'v' ? std::atoi(buf + 1) : 0;
}

// Runs `command` and returns its standard output (empty on failure).
std::string Output(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  ::pclose(pipe);
  return out;
}

TEST(GatewayAgentTest, QwenCodeReusesItsSystemPromptAndToolsFromTheCache) {
  const std::string cli =
      SourceDir() + "/tests/data/downloads/qwen-code/node_modules/@qwen-code/qwen-code/cli.js";
  const bool in_ci = std::getenv("CI") != nullptr;
  if (!std::filesystem::exists(cli) || !HaveQwen3Tokenizer()) {
    if (in_ci) FAIL() << cli << " or the Qwen3 tokenizer is missing in CI";
    GTEST_SKIP() << "run tools/fetch-test-data (needs npm)";
  }
  if (NodeMajorVersion() < 20) GTEST_SKIP() << "qwen-code 0.15.10 needs Node.js 20 or later";
  const std::string dir = ::testing::TempDir() + "/gateway-agent";
  RealStackOptions options;
  options.preset = "demo";
  options.context_tokens = 16384;
  options.max_output_tokens = 4;
  options.start_timeout = absl::Seconds(180);
  absl::StatusOr<std::unique_ptr<RealStack>> stack = RealStack::Start(dir + "/stack", options);
  ASSERT_TRUE(stack.ok()) << stack.status();
  // The agent's home (settings) and the project it works in.
  const std::string home = dir + "/home";
  const std::string work = dir + "/work";
  std::filesystem::create_directories(home + "/.qwen");
  std::filesystem::create_directories(work);
  std::ofstream(work + "/hello.py") << "print('hello')\n";
  std::ofstream(home + "/.qwen/settings.json") << R"({
  "memory": {"enableManagedAutoMemory": false},
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "general": {"enableAutoUpdate": false, "disableAutoUpdate": true}
})";
  const std::string command = absl::StrCat(
      NodeBinary(), " ", SourceDir(), "/tests/integration/services/gateway/qwen_code_agent.cjs ",
      "http://127.0.0.1:", (*stack)->port(), " ", cli, " ", work, " ", home,
      " 'What does hello.py print?' 'Is hello.py valid Python 3?'");

  const std::string out = Output(command);

  const Json summary = Json::parse(out, nullptr, false);
  ASSERT_TRUE(summary.is_object() && summary.contains("requests")) << out;
  ASSERT_EQ(summary["runs"].size(), 2u) << out;
  for (const Json& run : summary["runs"]) EXPECT_EQ(run["code"], 0) << run["output"];
  // The agent's real prompt: its system prompt and tools are about 50,000 characters.
  EXPECT_GT(summary["system_chars"].get<int>() + summary["tools_chars"].get<int>(), 40000);
  const int prefix = summary["system_and_tools_tokens"].get<int>();
  EXPECT_GT(prefix, 8000) << out;
  const Json& requests = summary["requests"];
  ASSERT_GE(requests.size(), 2u) << out;
  const Json* second_prompt = nullptr;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Json& r = requests[i];
    std::cout << "prompt " << r["run"] << ": " << r["prompt_tokens"] << " prompt tokens, "
              << r["cached_tokens"] << " cached (" << r["tier"] << "), TTFT " << r["ttft_ms"]
              << " ms; system and tools " << prefix << " tokens\n";
    EXPECT_EQ(r["status"], 200) << r;
    EXPECT_TRUE(r["same_system"].get<bool>()) << "the system prompt or tools changed: " << r;
    if (second_prompt == nullptr && r["run"] == 1) second_prompt = &r;
    if (i == 0) {
      EXPECT_EQ(r["tier"], "cold") << r;
      continue;
    }
    EXPECT_THAT(r["tier"], AnyOf(Eq("live"), Eq("ram"))) << r;
    // Every later request reuses at least the whole system prompt and tools: requests that
    // repeat a conversation all of it but the generation prompt, and the second prompt's first
    // request (a new session) the checkpoint the first session left at the shared boundary
    // (the end of the system turn, which the daemon names to the cache).
    EXPECT_GE(r["cached_tokens"].get<int>(), prefix) << r;
  }
  ASSERT_NE(second_prompt, nullptr) << out;
  EXPECT_TRUE((*stack)->Stop()) << "a daemon did not exit 0 on SIGTERM";
}

// The agents that ship as native binaries, installed by tools/fetch-test-data.
std::string AgentBinary(const std::string& name) {
  return SourceDir() + "/tests/data/downloads/coding-agents/node_modules/.bin/" + name;
}

// Runs agent_cli.cjs: `agent` (codex or claude) on `prompts` (each after the first continues
// the conversation) against a fresh stack on the demo model; returns its summary.
Json RunNativeAgent(const std::string& agent, const std::vector<std::string>& prompts) {
  const std::string dir = ::testing::TempDir() + "/gateway-agent-" + agent;
  std::filesystem::remove_all(dir);
  RealStackOptions options;
  options.preset = "demo";
  options.context_tokens = 16384;
  options.max_output_tokens = 4;
  options.start_timeout = absl::Seconds(180);
  absl::StatusOr<std::unique_ptr<RealStack>> stack = RealStack::Start(dir + "/stack", options);
  if (!stack.ok()) return Json{{"failure", std::string(stack.status().message())}};
  const std::string home = dir + "/home";
  const std::string work = dir + "/work";
  std::filesystem::create_directories(home);
  std::filesystem::create_directories(work);
  std::ofstream(work + "/hello.py") << "print('hello')\n";
  std::string command =
      absl::StrCat(NodeBinary(), " ", SourceDir(), "/tests/integration/services/gateway/",
                   "agent_cli.cjs http://127.0.0.1:", (*stack)->port(), " ", agent, " ",
                   AgentBinary(agent), " ", work, " ", home);
  for (const std::string& p : prompts) absl::StrAppend(&command, " '", p, "'");
  Json summary = Json::parse(Output(command), nullptr, false);
  if (!summary.is_object()) summary = Json{{"failure", "agent_cli.cjs printed no summary"}};
  summary["stopped_cleanly"] = (*stack)->Stop();
  return summary;
}

// Prints each request's cache use and checks it: every request to a path starting with
// `path_prefix` answered 200 without an error event; the first (cold) prompt longer than
// `min_prompt` tokens; every later one restored (live or RAM) at least `restored_percent` % of it.
void ExpectEveryRequestServed(const Json& requests, const std::string& path_prefix,
                              int64_t min_prompt, int64_t restored_percent) {
  ASSERT_GE(requests.size(), 2u) << requests.dump();
  int64_t first_prompt = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Json& r = requests[i];
    const Json cairn = r.value("cairn", Json::object());
    const int64_t depth = cairn.value("depth", int64_t{0});
    const int64_t prefilled = cairn.value("prefilled_tokens", int64_t{0});
    std::cout << "run " << r["run"] << " " << r["path"] << ": " << r.value("status", 0) << ", "
              << depth << " restored (" << cairn.value("tier", "-") << ") + " << prefilled
              << " prefilled, TTFT " << cairn.value("ttft_ms", 0.0) << " ms\n";
    EXPECT_TRUE(absl::StartsWith(r["path"].get<std::string>(), path_prefix)) << r;
    EXPECT_EQ(r["status"], 200) << r;
    EXPECT_FALSE(r.contains("error")) << r;
    ASSERT_TRUE(r.contains("cairn")) << r;
    if (i == 0) {
      first_prompt = depth + prefilled;
      EXPECT_EQ(cairn["tier"], "cold") << r;
      EXPECT_GT(first_prompt, min_prompt) << "the agent's system prompt and tools: " << r;
      continue;
    }
    EXPECT_THAT(cairn["tier"], AnyOf(Eq("live"), Eq("ram"))) << r;
    EXPECT_GE(depth * 100, first_prompt * restored_percent) << r;
  }
}

bool HaveNativeAgent(const std::string& agent) {
  return std::filesystem::exists(AgentBinary(agent)) && HaveQwen3Tokenizer();
}

TEST(GatewayAgentTest, CodexExecAndResumeOverTheResponsesApi) {
  if (!HaveNativeAgent("codex")) {
    if (std::getenv("CI") != nullptr) FAIL() << AgentBinary("codex") << " is missing in CI";
    GTEST_SKIP() << "run tools/fetch-test-data (needs npm)";
  }

  // Codex CLI 0.171 offers function tools, a "namespace" of functions (its sub-agents) and
  // the hosted web_search on every request; `resume --last` resends the first run's items.
  const Json summary =
      RunNativeAgent("codex", {"What does hello.py print?", "Is hello.py valid Python 3?"});

  ASSERT_TRUE(summary.contains("runs")) << summary.dump();
  ASSERT_EQ(summary["runs"].size(), 2u) << summary.dump();
  for (const Json& run : summary["runs"]) {
    // The demo model's noise never ends on its own: every answer stops at the gateway's
    // --max-output-tokens, and its stream ends with response.incomplete, as OpenAI's does;
    // Codex CLI then reports it and exits 1, as it does against OpenAI. Any other failure is
    // the gateway's.
    if (run["code"] != 0) {
      EXPECT_THAT(run["output"].get<std::string>(),
                  ::testing::HasSubstr("Incomplete response returned, reason: max_output_tokens"))
          << run["output"];
    }
  }
  // The resumed conversation repeats the first run's prompt: most of it is restored.
  ExpectEveryRequestServed(summary["requests"], "/v1/responses", 4000, 90);
  EXPECT_TRUE(summary["stopped_cleanly"].get<bool>()) << "a daemon did not exit 0 on SIGTERM";
}

TEST(GatewayAgentTest, ClaudeCodeOverTheAnthropicMessagesApi) {
  if (!HaveNativeAgent("claude")) {
    if (std::getenv("CI") != nullptr) FAIL() << AgentBinary("claude") << " is missing in CI";
    GTEST_SKIP() << "run tools/fetch-test-data (needs npm)";
  }

  const Json summary =
      RunNativeAgent("claude", {"What does hello.py print?", "Is hello.py valid Python 3?"});

  ASSERT_TRUE(summary.contains("runs")) << summary.dump();
  ASSERT_EQ(summary["runs"].size(), 2u) << summary.dump();
  for (const Json& run : summary["runs"]) {
    // The demo model's noise never ends on its own: every answer stops at the gateway's
    // --max-output-tokens with stop_reason "max_tokens", Claude Code asks again with a larger
    // max_tokens and finally gives up with this message. Any other failure is the gateway's.
    if (run["code"] != 0) {
      EXPECT_THAT(run["output"].get<std::string>(),
                  ::testing::HasSubstr("exceeded the 128000 output token maximum"))
          << run["output"];
    }
  }
  // Every later request repeats the first one's system prompt, tools and first turn.
  ExpectEveryRequestServed(summary["requests"], "/v1/messages", 8000, 75);
  EXPECT_TRUE(summary["stopped_cleanly"].get<bool>()) << "a daemon did not exit 0 on SIGTERM";
}

}  // namespace
}  // namespace cairn::gateway::testing
