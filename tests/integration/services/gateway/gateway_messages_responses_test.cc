// The gateway's Anthropic messages (streamed and not, count_tokens, bad content) and the
// Responses API (function calls, stream events) end to end over HTTP against the scripted fake
// daemon. The OpenAI chat and completions routes: gateway_api_test.cc.

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/services/gateway/gateway_harness.h"
#include "tests/integration/services/gateway/http_test_client.h"

namespace cairn::gateway::testing {
namespace {

using nlohmann::json;

TEST(GatewayApiTest, AnthropicMessagesNonStreamed) {
  GatewayHarness h;
  h.fake().SetScript(&Script::ReadFileToolCall);
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/messages?beta=true", R"({
      "model": "claude-sonnet-4-5", "max_tokens": 1024, "metadata": {"user_id": "u-123"},
      "system": [{"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}}],
      "thinking": {"type": "enabled", "budget_tokens": 1000},
      "context_management": {"edits": []}, "output_config": {"effort": "high"},
      "stop_sequences": ["</done>"],
      "tools": [{"name": "read_file", "description": "reads", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "any"},
      "messages": [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": [
          {"type": "thinking", "thinking": "hmm", "signature": "sig"},
          {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}]},
        {"role": "user", "content": [
          {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "body"}]},
          {"type": "text", "text": "now b"}]}]})");

  ASSERT_EQ(r.status, 200) << r.body;
  json body = r.json();
  EXPECT_EQ(body["type"], "message");
  EXPECT_EQ(body["role"], "assistant");
  EXPECT_EQ(body["model"], "fake-model");
  EXPECT_EQ(body["stop_reason"], "tool_use");
  EXPECT_EQ(body["content"][0]["type"], "thinking");
  EXPECT_EQ(body["content"][1]["type"], "tool_use");
  EXPECT_EQ(body["content"][1]["input"]["path"], "a.txt");
  EXPECT_EQ(body["usage"]["input_tokens"], 4);
  EXPECT_EQ(body["usage"]["cache_read_input_tokens"], 8);
  EXPECT_EQ(body["usage"]["output_tokens"], 6);
  EXPECT_EQ(body["cairn"]["tier"], "ram");
  infer_v1::GenerateRequest sent = h.fake().last_request();
  const auto& m = sent.chat().messages();
  ASSERT_EQ(m.size(), 5);
  EXPECT_EQ(m[0].role(), "system");
  EXPECT_EQ(m[0].content(), "You are an agent.");
  EXPECT_EQ(m[2].reasoning_content(), "hmm");
  EXPECT_EQ(m[2].tool_calls(0).arguments_json(), R"({"path":"a"})");
  EXPECT_EQ(m[3].role(), "tool");
  EXPECT_EQ(m[3].tool_call_id(), "toolu_1");
  EXPECT_EQ(m[3].content(), "body");
  EXPECT_EQ(m[4].content(), "now b");
  EXPECT_EQ(sent.chat().tool_choice(), "required");
  EXPECT_TRUE(sent.chat().options().enable_thinking());
  EXPECT_EQ(sent.sampling().stop(0), "</done>");
  EXPECT_EQ(sent.chat().DebugString().find("u-123"), std::string::npos);
}

TEST(GatewayApiTest, AnthropicMessageWithEmptyContentGetsA400NamingIt) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r =
      client.Post("/v1/messages", R"({"max_tokens":5,"messages":[{"role":"user","content":[]}]})");

  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["type"], "error");
  EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(r.json()["error"]["message"],
            "messages[0].content must not be empty (only the final assistant message may be)");
  EXPECT_EQ(h.fake().generate_calls(), 0);
}

TEST(GatewayApiTest, AnthropicMessagesStreamEvents) {
  GatewayHarness h;
  h.fake().SetScript([](const infer_v1::GenerateRequest& req) {
    Script s = Script::ReadFileToolCall(req);
    s.steps.insert(s.steps.begin() + 2, Script().Text("Let me read.").steps[0]);
    return s;
  });
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/messages", R"({"max_tokens": 100, "stream": true,
      "messages": [{"role": "user", "content": "go"}]})");

  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<SseEvent> events = ParseSse(r.body);
  std::vector<std::string> names;
  for (const SseEvent& e : events) names.push_back(e.event);
  std::vector<std::string> expected = {"message_start",       "ping",
                                       "content_block_start", "content_block_delta",
                                       "content_block_stop",  "content_block_start",
                                       "content_block_delta", "content_block_stop",
                                       "content_block_start", "content_block_delta",
                                       "content_block_delta", "content_block_stop",
                                       "message_delta",       "message_stop"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(json::parse(events[2].data)["content_block"]["type"], "thinking");
  EXPECT_EQ(json::parse(events[3].data)["delta"]["type"], "thinking_delta");
  EXPECT_EQ(json::parse(events[6].data)["delta"]["text"], "Let me read.");
  json tool_start = json::parse(events[8].data);
  EXPECT_EQ(tool_start["index"], 2);
  EXPECT_EQ(tool_start["content_block"]["type"], "tool_use");
  EXPECT_THAT(tool_start["content_block"]["id"].get<std::string>(),
              ::testing::MatchesRegex("toolu_[0-9a-f]{24}"));
  EXPECT_EQ(json::parse(events[9].data)["delta"]["type"], "input_json_delta");
  json message_delta = json::parse(events[12].data);
  EXPECT_EQ(message_delta["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(message_delta["usage"]["cache_read_input_tokens"], 8);
  EXPECT_EQ(json::parse(events[0].data)["message"]["usage"]["input_tokens"], 20);
}

TEST(GatewayApiTest, AnthropicCountTokensUsesTheTemplate) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r =
      client.Post("/v1/messages/count_tokens",
                  R"({"model":"x","system":"S","messages":[{"role":"user","content":"U"}]})");

  ASSERT_EQ(r.status, 200) << r.body;
  // The fake renders "<|system|>S\n<|user|>U\n", one id per byte.
  EXPECT_EQ(r.json()["input_tokens"], 22);
  EXPECT_EQ(h.fake().generate_calls(), 0);
}

TEST(GatewayApiTest, ResponsesNonStreamedWithFunctionCalls) {
  GatewayHarness h;
  h.fake().SetScript(&Script::ReadFileToolCall);
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/responses", R"({
      "model": "gpt-5-codex", "instructions": "You are Codex.", "store": false,
      "prompt_cache_key": "conv-77", "reasoning": {"effort": "medium", "summary": "auto"},
      "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
      "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"type": "message", "role": "user", "id": "item_1", "content": [{"type": "input_text", "text": "ls"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "run ls"}]},
        {"type": "function_call", "call_id": "call_a", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"},
        {"type": "function_call_output", "call_id": "call_a", "output": "a.txt"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]}]})");

  ASSERT_EQ(r.status, 200) << r.body;
  json body = r.json();
  EXPECT_EQ(body["object"], "response");
  EXPECT_EQ(body["status"], "completed");
  ASSERT_EQ(body["output"].size(), 2u);
  EXPECT_EQ(body["output"][0]["type"], "reasoning");
  EXPECT_EQ(body["output"][0]["summary"][0]["text"], "I should look");
  EXPECT_EQ(body["output"][1]["type"], "function_call");
  EXPECT_THAT(body["output"][1]["call_id"].get<std::string>(),
              ::testing::MatchesRegex("call_[0-9a-f]{24}"));
  EXPECT_EQ(body["output"][1]["arguments"], R"({"path":"a.txt"})");
  EXPECT_EQ(body["usage"]["input_tokens_details"]["cached_tokens"], 8);
  infer_v1::GenerateRequest sent = h.fake().last_request();
  const auto& m = sent.chat().messages();
  ASSERT_EQ(m.size(), 6);
  EXPECT_EQ(m[0].content(), "You are Codex.");
  EXPECT_EQ(m[1].role(), "system");
  EXPECT_EQ(m[2].content(), "ls");
  EXPECT_EQ(m[3].role(), "assistant");
  EXPECT_EQ(m[3].reasoning_content(), "run ls");
  EXPECT_EQ(m[3].tool_calls(0).id(), "call_a");
  EXPECT_EQ(m[4].role(), "tool");
  EXPECT_EQ(m[5].content(), "done");
  EXPECT_EQ(sent.conversation(), "conv-77");
  EXPECT_EQ(sent.chat().DebugString().find("item_1"), std::string::npos);
}

TEST(GatewayApiTest, ResponsesStreamEvents) {
  GatewayHarness h;
  h.fake().SetScript([](const infer_v1::GenerateRequest&) {
    Script s;
    s.Started(5).Reasoning("think").Text("Hel").Text("lo");
    infer_v1::Finished f = Script::MakeFinished(infer_v1::Finished::REASON_STOP, 3);
    s.Finished(f);
    return s;
  });
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/responses", R"({"input": "hi", "stream": true})");

  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<SseEvent> events = ParseSse(r.body);
  std::vector<std::string> names;
  for (const SseEvent& e : events) names.push_back(e.event);
  std::vector<std::string> expected = {"response.created",
                                       "response.in_progress",
                                       "response.output_item.added",
                                       "response.reasoning_summary_part.added",
                                       "response.reasoning_summary_text.delta",
                                       "response.reasoning_summary_text.done",
                                       "response.reasoning_summary_part.done",
                                       "response.output_item.done",
                                       "response.output_item.added",
                                       "response.content_part.added",
                                       "response.output_text.delta",
                                       "response.output_text.delta",
                                       "response.output_text.done",
                                       "response.content_part.done",
                                       "response.output_item.done",
                                       "response.completed"};
  EXPECT_EQ(names, expected);
  for (size_t i = 0; i < events.size(); ++i) {
    json e = json::parse(events[i].data);
    EXPECT_EQ(e["type"], events[i].event);
    EXPECT_EQ(e["sequence_number"], i);
  }
  json completed = json::parse(events.back().data)["response"];
  EXPECT_EQ(completed["status"], "completed");
  EXPECT_EQ(completed["output"][1]["content"][0]["text"], "Hello");
  EXPECT_EQ(completed["cairn"]["tier"], "ram");
}

}  // namespace
}  // namespace cairn::gateway::testing
