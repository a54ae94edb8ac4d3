// The gateway's OpenAI-shaped APIs end to end over HTTP against the scripted fake daemon:
// chat and completions (streamed and not, tools, reasoning, logprobs, usage and the `cairn`
// object), models / tokenize / detokenize / metrics, and upstream errors mapped to HTTP codes.
// Anthropic messages and the Responses API: gateway_messages_responses_test.cc.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/services/gateway/gateway_harness.h"
#include "tests/integration/services/gateway/http_test_client.h"

namespace cairn::gateway::testing {
namespace {

using nlohmann::json;

const char kChat[] = R"({"model":"fake-model","messages":[{"role":"user","content":"hi"}]})";

// The JSON objects of an OpenAI-style stream, and whether it ended with [DONE].
std::vector<json> DataChunks(const std::string& body, bool* done) {
  std::vector<json> chunks;
  *done = false;
  for (const SseEvent& e : ParseSse(body)) {
    if (e.data == "[DONE]") {
      *done = true;
      continue;
    }
    chunks.push_back(json::parse(e.data, nullptr, false));
  }
  return chunks;
}

TEST(GatewayApiTest, ChatCompletionAnswersInTheOpenAiShape) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/chat/completions", kChat);

  ASSERT_EQ(r.status, 200) << r.body;
  json body = r.json();
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_TRUE(absl::StartsWith(body["id"].get<std::string>(), "chatcmpl-"));
  EXPECT_EQ(body["model"], "fake-model");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello world");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 12);
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
  EXPECT_EQ(body["usage"]["total_tokens"], 14);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(body["cairn"]["tier"], "ram");
  EXPECT_EQ(body["cairn"]["depth"], 8);
  EXPECT_EQ(body["cairn"]["prefilled_tokens"], 4);
  EXPECT_DOUBLE_EQ(body["cairn"]["ttft_ms"].get<double>(), 7.25);
  infer_v1::GenerateRequest sent = h.fake().last_request();
  ASSERT_EQ(sent.chat().messages_size(), 1);
  EXPECT_EQ(sent.chat().messages(0).content(), "hi");
  EXPECT_TRUE(sent.parse_output());
  EXPECT_TRUE(sent.chat().options().add_generation_prompt());
}

// The schema `client.beta.chat.completions.parse(response_format=CalendarEvent)` sends (pydantic
// 2 through the OpenAI SDK's to_strict_json_schema): nested models in $defs, an Enum, an
// Optional field as anyOf with null, titles everywhere, properties not in alphabetical order.
const char kPydanticSchema[] = R"({"$defs": {"Attendee": {"properties": {"name": {"title": "Name",
    "type": "string"}, "email": {"title": "Email", "type": "string"}}, "required": ["name",
    "email"], "title": "Attendee", "type": "object", "additionalProperties": false}, "Priority":
    {"enum": ["low", "high"], "title": "Priority", "type": "string"}}, "properties": {"reasoning":
    {"title": "Reasoning", "type": "string"}, "name": {"title": "Name", "type": "string"},
    "attendees": {"items": {"$ref": "#/$defs/Attendee"}, "title": "Attendees", "type": "array"},
    "priority": {"$ref": "#/$defs/Priority"}, "location": {"anyOf": [{"type": "string"},
    {"type": "null"}], "title": "Location"}}, "required": ["reasoning", "name", "attendees",
    "priority", "location"], "title": "CalendarEvent", "type": "object", "additionalProperties":
    false})";

TEST(GatewayApiTest, SchemasReachTheDaemonWithTheirPropertiesInTheRequestsOrder) {
  // The daemon generates properties in the schema's order (as OpenAI does): "reasoning" must
  // stay before "name", not be sorted after it.
  GatewayHarness h;
  HttpTestClient client(h.port());
  const std::string schema = kPydanticSchema;
  const std::string expected = nlohmann::ordered_json::parse(schema).dump();
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"/v1/chat/completions",
       R"({"model":"fake-model","messages":[{"role":"user","content":"hi"}],
           "response_format":{"type":"json_schema","json_schema":{"name":"CalendarEvent",
           "strict":true,"schema":)" +
           schema + "}}}"},
      {"/v1/responses", R"({"model":"fake-model","input":"hi","text":{"format":{
           "type":"json_schema","name":"CalendarEvent","strict":true,"schema":)" +
                            schema + "}}}"},
      {"/v1/messages", R"({"model":"fake-model","max_tokens":64,"messages":[{"role":"user",
           "content":"hi"}],"output_format":{"type":"json_schema","schema":)" +
                           schema + "}}"},
      {"/v1/messages", R"({"model":"fake-model","max_tokens":64,"messages":[{"role":"user",
           "content":"hi"}],"output_config":{"effort":"low","format":{"type":"json_schema",
           "schema":)" + schema +
                           "}}}"},
  };

  for (const auto& [path, request] : requests) {
    HttpResult r = client.Post(path, request);

    ASSERT_EQ(r.status, 200) << path << ": " << r.body;
    const std::string sent = h.fake().last_request().response_format().json_schema();
    EXPECT_EQ(nlohmann::ordered_json::parse(sent).dump(), expected) << path;
  }
}

TEST(GatewayApiTest, ChatCompletionStreamsChunksUsageAndDone) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/chat/completions",
                             R"({"stream":true,"stream_options":{"include_usage":true},
                                 "messages":[{"role":"user","content":"hi"}]})");

  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  bool done = false;
  std::vector<json> chunks = DataChunks(r.body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 4u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content;
  for (const json& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content")) {
      content += c["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "Hello world");
  const json& finish = chunks[chunks.size() - 2];
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(finish["cairn"]["tier"], "ram");
  const json& usage = chunks.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(usage["cairn"]["tier"], "ram");
}

// /v1/completions streams its usage as OpenAI does: a chunk of its own with no choices after
// the finish_reason chunk, then [DONE] (a client reading usage from that chunk found none).
TEST(GatewayApiTest, CompletionStreamsUsageInAChunkOfItsOwn) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r =
      client.Post("/v1/completions",
                  R"({"stream":true,"stream_options":{"include_usage":true},"prompt":"hi"})");

  ASSERT_EQ(r.status, 200) << r.body;
  bool done = false;
  std::vector<json> chunks = DataChunks(r.body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 3u);
  const json& finish = chunks[chunks.size() - 2];
  EXPECT_EQ(finish["object"], "text_completion");
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(finish.contains("usage"));
  const json& usage = chunks.back();
  EXPECT_EQ(usage["object"], "text_completion");
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
}

TEST(GatewayApiTest, StreamOptionsWithoutAStreamGetA400NamingThem) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult chat = client.Post("/v1/chat/completions",
                                R"({"stream_options":{"include_usage":true},
                                    "messages":[{"role":"user","content":"hi"}]})");
  HttpResult completion =
      client.Post("/v1/completions", R"({"stream":false,"stream_options":{},"prompt":"hi"})");

  for (const HttpResult& r : {chat, completion}) {
    ASSERT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error");
    EXPECT_EQ(r.json()["error"]["param"], "stream_options") << r.body;
  }
  EXPECT_EQ(h.fake().generate_calls(), 0);
}

TEST(GatewayApiTest, A400AboutOneFieldNamesItInParamOnTheOpenAiRoutes) {
  GatewayHarness h;
  HttpTestClient client(h.port());
  struct Case {
    const char* path;
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {"/v1/chat/completions", R"({"temperature":-1,"messages":[{"role":"user","content":"hi"}]})",
       "temperature"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"},{"role":"user","content":5}]})",
       "messages[1].content"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],
           "tools":[{"type":"function","function":{"parameters":{}}}]})",
       "tools[0].function.name"},
      {"/v1/completions", R"({"prompt":"hi","max_tokens":0})", "max_tokens"},
      {"/v1/responses", R"({"input":[{"role":"user","content":[{"type":"input_image"}]}]})",
       "input[0].content[0]"},
  };
  for (const Case& c : cases) {
    HttpResult r = client.Post(c.path, c.body);
    ASSERT_EQ(r.status, 400) << c.path << " " << r.body;
    EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error");
    EXPECT_EQ(r.json()["error"]["param"], c.param) << r.body;
  }
  // A body that is not JSON is about no one field.
  HttpResult not_json = client.Post("/v1/chat/completions", "{");
  ASSERT_EQ(not_json.status, 400) << not_json.body;
  EXPECT_TRUE(not_json.json()["error"].contains("param"));
  EXPECT_TRUE(not_json.json()["error"]["param"].is_null()) << not_json.body;
  // Anthropic's error shape has no param, for a field error too.
  HttpResult anthropic = client.Post(
      "/v1/messages", R"({"max_tokens":"5","messages":[{"role":"user","content":"x"}]})");
  ASSERT_EQ(anthropic.status, 400) << anthropic.body;
  EXPECT_EQ(anthropic.json()["type"], "error");
  EXPECT_FALSE(anthropic.json()["error"].contains("param")) << anthropic.body;
  EXPECT_EQ(h.fake().generate_calls(), 0);
}

TEST(GatewayApiTest, ToolCallAndReasoningDeltasStreamInTheOpenAiShape) {
  GatewayHarness h;
  h.fake().SetScript(&Script::ReadFileToolCall);
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/chat/completions", R"({
      "stream": true, "parallel_tool_calls": false, "tool_choice": "auto",
      "messages": [{"role": "user", "content": "read a.txt"}],
      "tools": [{"type": "function", "function": {"name": "read_file",
                 "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]})");

  ASSERT_EQ(r.status, 200) << r.body;
  bool done = false;
  std::vector<json> chunks = DataChunks(r.body, &done);
  std::string reasoning, arguments, name, id;
  for (const json& c : chunks) {
    if (c["choices"].empty()) continue;
    const json& delta = c["choices"][0]["delta"];
    if (delta.contains("reasoning_content"))
      reasoning += delta["reasoning_content"].get<std::string>();
    if (!delta.contains("tool_calls")) continue;
    const json& tc = delta["tool_calls"][0];
    EXPECT_EQ(tc["index"], 0);
    if (tc.contains("id")) {
      id = tc["id"];
      EXPECT_EQ(tc["type"], "function");
      name = tc["function"]["name"];
    }
    arguments += tc["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(reasoning, "I should look");
  // The gateway's own id, not the daemon's call_1 (which repeats in every turn).
  EXPECT_THAT(id, ::testing::MatchesRegex("call_[0-9a-f]{24}"));
  EXPECT_EQ(name, "read_file");
  EXPECT_EQ(arguments, R"({"path":"a.txt"})");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
  infer_v1::GenerateRequest sent = h.fake().last_request();
  ASSERT_EQ(sent.chat().tools_size(), 1);
  EXPECT_EQ(json::parse(sent.chat().tools(0).json())["function"]["name"], "read_file");
  EXPECT_EQ(sent.chat().tool_choice(), "auto");
}

TEST(GatewayApiTest, NonStreamedToolCallsAndReasoningComeFromFinished) {
  GatewayHarness h;
  h.fake().SetScript(&Script::ReadFileToolCall);
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/chat/completions", kChat);

  ASSERT_EQ(r.status, 200) << r.body;
  json message = r.json()["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(message["reasoning_content"], "I should look");
  EXPECT_THAT(message["tool_calls"][0]["id"].get<std::string>(),
              ::testing::MatchesRegex("call_[0-9a-f]{24}"));
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"path":"a.txt"})");
  EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "tool_calls");
}

TEST(GatewayApiTest, ConversationHistoryWithToolsMapsToChatMessages) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/chat/completions", R"({
      "messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "read "}, {"type": "text", "text": "it"}]},
        {"role": "assistant", "content": null, "reasoning_content": "need file",
         "tool_calls": [{"id": "call_9", "type": "function",
                         "function": {"name": "read_file", "arguments": "{\"path\":\"b\"}"}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "file body"},
        {"role": "system", "content": "late system"}],
      "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 0.1,
      "frequency_penalty": 0.2, "repetition_penalty": 1.1, "seed": 7, "stop": ["END", "STOP"],
      "max_completion_tokens": 99, "logprobs": true, "top_logprobs": 3,
      "chat_template_kwargs": {"enable_thinking": false}})");

  ASSERT_EQ(r.status, 200) << r.body;
  infer_v1::GenerateRequest sent = h.fake().last_request();
  const auto& m = sent.chat().messages();
  ASSERT_EQ(m.size(), 5);
  EXPECT_EQ(m[0].role(), "system");
  EXPECT_EQ(m[1].content(), "read \nit");  // Text parts are joined with newlines.
  EXPECT_EQ(m[2].reasoning_content(), "need file");
  EXPECT_EQ(m[2].tool_calls(0).id(), "call_9");
  EXPECT_EQ(m[2].tool_calls(0).arguments_json(), R"({"path":"b"})");
  EXPECT_EQ(m[3].role(), "tool");
  EXPECT_EQ(m[3].tool_call_id(), "call_9");
  EXPECT_EQ(m[4].role(), "system");
  const auto& s = sent.sampling();
  EXPECT_FLOAT_EQ(s.temperature(), 0.5f);
  EXPECT_FLOAT_EQ(s.top_p(), 0.9f);
  EXPECT_EQ(s.top_k(), 40u);
  EXPECT_FLOAT_EQ(s.min_p(), 0.05f);
  EXPECT_FLOAT_EQ(s.presence_penalty(), 0.1f);
  EXPECT_FLOAT_EQ(s.frequency_penalty(), 0.2f);
  EXPECT_FLOAT_EQ(s.repetition_penalty(), 1.1f);
  EXPECT_EQ(s.seed(), 7u);
  ASSERT_EQ(s.stop_size(), 2);
  EXPECT_EQ(s.stop(1), "STOP");
  EXPECT_EQ(s.max_tokens(), 99u);
  EXPECT_EQ(s.logprobs(), 3u);
  EXPECT_FALSE(sent.chat().options().enable_thinking());
}

TEST(GatewayApiTest, PerRunIdsAndMetadataNeverReachThePrompt) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/chat/completions", R"({
      "messages": [{"role": "user", "content": "hi"}],
      "prompt_cache_key": "run-4242", "user": "user-777", "metadata": {"user_id": "meta-555"},
      "store": false, "service_tier": "auto", "client_metadata": {"session": "sess-999"}})");

  ASSERT_EQ(r.status, 200) << r.body;
  std::string prompt = h.fake().last_request().chat().DebugString();
  for (const char* id : {"run-4242", "user-777", "meta-555", "sess-999"}) {
    EXPECT_EQ(prompt.find(id), std::string::npos) << id << " reached the prompt";
  }
  EXPECT_EQ(h.fake().last_request().conversation(), "run-4242");  // Routing label only.
}

TEST(GatewayApiTest, ServerCapsOutputTokensAndReportsLength) {
  HarnessOptions options;
  options.limits.max_output_tokens = 16;
  GatewayHarness h(options);
  h.fake().SetScript([](const infer_v1::GenerateRequest&) {
    Script s;
    s.Started(3).Text("a");
    s.Finished(Script::MakeFinished(infer_v1::Finished::REASON_LENGTH, 16));
    return s;
  });
  HttpTestClient client(h.port());

  HttpResult big = client.Post(
      "/v1/chat/completions", R"({"max_tokens":32000,"messages":[{"role":"user","content":"x"}]})");
  uint32_t sent_big = h.fake().last_request().sampling().max_tokens();
  HttpResult none = client.Post("/v1/chat/completions", kChat);
  uint32_t sent_none = h.fake().last_request().sampling().max_tokens();
  HttpResult small = client.Post("/v1/chat/completions",
                                 R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}]})");
  uint32_t sent_small = h.fake().last_request().sampling().max_tokens();

  EXPECT_EQ(sent_big, 16u);
  EXPECT_EQ(sent_none, 16u);
  EXPECT_EQ(sent_small, 5u);
  EXPECT_EQ(big.json()["choices"][0]["finish_reason"], "length");
}

TEST(GatewayApiTest, CompletionsTakeTextOrTokenIds) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult ids = client.Post("/v1/completions", R"({"prompt":[1,2,999],"max_tokens":4})");
  infer_v1::GenerateRequest sent_ids = h.fake().last_request();
  HttpResult text = client.Post("/v1/completions", R"({"prompt":["once upon"],"stream":true})");
  infer_v1::GenerateRequest sent_text = h.fake().last_request();

  ASSERT_EQ(ids.status, 200) << ids.body;
  EXPECT_EQ(ids.json()["object"], "text_completion");
  EXPECT_EQ(ids.json()["choices"][0]["text"], "Hello world");
  EXPECT_EQ(ids.json()["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  ASSERT_EQ(sent_ids.token_ids().ids_size(), 3);
  EXPECT_EQ(sent_ids.token_ids().ids(2), 999u);
  ASSERT_EQ(text.status, 200);
  EXPECT_EQ(sent_text.text(), "once upon");
  bool done = false;
  std::vector<json> chunks = DataChunks(text.body, &done);
  EXPECT_TRUE(done);
  std::string all;
  for (const json& c : chunks) all += c["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(all, "Hello world");
}

TEST(GatewayApiTest, ModelsTokenizeDetokenizeAndMetrics) {
  GatewayHarness h;
  HttpTestClient client(h.port());
  ASSERT_EQ(client.Post("/v1/chat/completions", kChat).status, 200);

  HttpResult models = client.Get("/v1/models");
  HttpResult tok = client.Post("/tokenize", R"({"prompt":"AB"})");
  HttpResult tok_chat = client.Post("/tokenize", R"({"messages":[{"role":"user","content":"A"}]})");
  HttpResult detok = client.Post("/detokenize", R"({"tokens":[72,105]})");
  ASSERT_EQ(client.Get("/no/such/route/123").status, 404);
  ASSERT_EQ(client.Post("/v1/chat/completions", "{").status, 400);
  HttpResult metrics = client.Get("/metrics");

  EXPECT_EQ(models.json()["data"][0]["id"], "fake-model");
  EXPECT_EQ(models.json()["data"][0]["max_model_len"], 4096);
  EXPECT_EQ(tok.json()["tokens"], json::parse("[65,66]"));
  EXPECT_EQ(tok.json()["count"], 2);
  EXPECT_GT(tok_chat.json()["count"].get<int>(), 1);
  EXPECT_EQ(detok.json()["prompt"], "Hi");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_TRUE(absl::StartsWith(metrics.headers["content-type"], "text/plain"));
  EXPECT_NE(metrics.body.find(
                "cairn_gateway_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1"),
            std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("cairn_gateway_cache_hits_total{tier=\"ram\"} 1"), std::string::npos);
  EXPECT_NE(metrics.body.find("cairn_gateway_requests_total{route=\"other\",status=\"404\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.body.find(
                "cairn_gateway_requests_total{route=\"/v1/chat/completions\",status=\"400\"} 1"),
            std::string::npos);
  EXPECT_EQ(metrics.body.find("/no/such/route"), std::string::npos);
  EXPECT_NE(metrics.body.find("cairn_gateway_prompt_tokens_total{kind=\"reused\"} 8"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("cairn_infer_slots{daemon="), std::string::npos);
  EXPECT_NE(metrics.body.find("cairn_gateway_ttft_ms_bucket{le=\"10\"} 1"), std::string::npos);
}

TEST(GatewayApiTest, ModelByIdIsTheServedModelsObjectElse404) {
  GatewayHarness h;
  HttpTestClient client(h.port());

  HttpResult served = client.Get("/v1/models/fake-model");
  HttpResult escaped = client.Get("/v1/models/fake%2Dmodel");
  HttpResult other = client.Get("/v1/models/gpt-4o");
  HttpResult metrics = client.Get("/metrics");

  ASSERT_EQ(served.status, 200) << served.body;
  EXPECT_EQ(served.json(), client.Get("/v1/models").json()["data"][0]);
  EXPECT_EQ(served.json()["object"], "model");
  EXPECT_EQ(escaped.status, 200) << escaped.body;
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(other.json()["error"]["type"], "not_found_error") << other.body;
  EXPECT_NE(
      metrics.body.find("cairn_gateway_requests_total{route=\"/v1/models/{id}\",status=\"404\"} 1"),
      std::string::npos)
      << metrics.body;
}

TEST(GatewayApiTest, AnAnswerTooLargeForTheChannelIsNotAskedToBeRetried) {
  GatewayHarness h;
  HttpTestClient client(h.port());
  // 3 MiB of "\xc3\xa9": the fake's byte tokenizer answers 3 Mi ids of two bytes each, over
  // the 4 MiB a gRPC channel receives. Retrying cannot help, so no 429 and no Retry-After.
  std::string text;
  for (int i = 0; i < (3 << 19); ++i) text += "\xc3\xa9";

  HttpResult r = client.Post("/tokenize", json{{"prompt", text}}.dump());

  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_EQ(r.headers.count("retry-after"), 0u);
  EXPECT_TRUE(absl::StrContains(r.json()["error"]["message"].get<std::string>(), "larger than"))
      << r.body.substr(0, 300);
  EXPECT_EQ(HttpTestClient(h.port()).Post("/tokenize", R"({"prompt":"AB"})").status, 200);
}

TEST(GatewayApiTest, UpstreamErrorsMapToHttpCodes) {
  GatewayHarness h;
  struct Case {
    grpc::StatusCode code;
    int http;
    bool retry_after;
  };
  for (const Case& c : {Case{grpc::StatusCode::RESOURCE_EXHAUSTED, 429, true},
                        Case{grpc::StatusCode::UNAVAILABLE, 503, true},
                        Case{grpc::StatusCode::INVALID_ARGUMENT, 400, false},
                        Case{grpc::StatusCode::NOT_FOUND, 404, false},
                        Case{grpc::StatusCode::DEADLINE_EXCEEDED, 504, false},
                        Case{grpc::StatusCode::INTERNAL, 500, false}}) {
    h.fake().SetScript([code = c.code](const infer_v1::GenerateRequest&) {
      Script s;
      s.Fail(code, "fake failure");
      return s;
    });
    HttpTestClient client(h.port());

    HttpResult r = client.Post("/v1/chat/completions", kChat);
    HttpResult anthropic = client.Post(
        "/v1/messages", R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}]})");

    EXPECT_EQ(r.status, c.http) << r.body;
    EXPECT_EQ(r.json()["error"]["message"], "fake failure");
    EXPECT_EQ(r.headers.count("retry-after") > 0, c.retry_after) << c.http;
    EXPECT_EQ(anthropic.status, c.http);
    EXPECT_EQ(anthropic.json()["type"], "error");
    EXPECT_EQ(anthropic.json()["error"]["message"], "fake failure");
  }
}

// cairn-infer names a request the context cannot hold in the call's binary error details
// (ErrorDetails); they cross the gRPC channel, and the gateway names the error as each API does
// by them, not by the message's words. A refusal in the same words without them is a plain 400.
TEST(GatewayApiTest, AContextOverflowIsNamedByTheDaemonsReasonOverTheWire) {
  GatewayHarness h;
  const std::string words = "the conversation is longer than this model reads";
  auto refuse = [&h, words](bool with_reason) {
    infer_v1::ErrorDetails details;
    details.set_code(grpc::StatusCode::INVALID_ARGUMENT);
    details.set_message(words);
    details.set_reason(infer_v1::ERROR_REASON_CONTEXT_OVERFLOW);
    Script s;
    s.status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, words,
                            with_reason ? details.SerializeAsString() : "");
    h.fake().SetScript([s](const infer_v1::GenerateRequest&) { return s; });
  };
  HttpTestClient client(h.port());
  const std::string anthropic_request =
      R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}]})";

  refuse(true);
  HttpResult openai = client.Post("/v1/chat/completions", kChat);
  HttpResult anthropic = client.Post("/v1/messages", anthropic_request);
  refuse(false);
  HttpResult plain = client.Post("/v1/chat/completions", kChat);
  HttpResult plain_anthropic = client.Post("/v1/messages", anthropic_request);

  EXPECT_EQ(openai.status, 400) << openai.body;
  EXPECT_EQ(openai.json()["error"]["code"], "context_length_exceeded") << openai.body;
  EXPECT_EQ(openai.json()["error"]["param"], "messages") << openai.body;
  EXPECT_EQ(openai.json()["error"]["message"], words);
  EXPECT_EQ(anthropic.status, 400) << anthropic.body;
  EXPECT_EQ(anthropic.json()["error"]["message"], "prompt is too long: " + words);
  EXPECT_EQ(plain.status, 400) << plain.body;
  EXPECT_EQ(plain.json()["error"]["code"], "invalid_argument") << plain.body;
  EXPECT_TRUE(plain.json()["error"]["param"].is_null()) << plain.body;
  EXPECT_EQ(plain_anthropic.json()["error"]["message"], words);
}

TEST(GatewayApiTest, AStopStringTheDaemonWouldRefuseGetsA400NamingTheClientsField) {
  GatewayHarness h;
  HttpTestClient client(h.port());
  const std::string too_long(257, 's');  // cairn-infer takes stop strings of 256 bytes at most.

  HttpResult openai = client.Post(
      "/v1/chat/completions",
      json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"stop", too_long}}.dump());
  HttpResult anthropic =
      client.Post("/v1/messages", json{{"max_tokens", 5},
                                       {"messages", {{{"role", "user"}, {"content", "x"}}}},
                                       {"stop_sequences", {too_long}}}
                                      .dump());

  EXPECT_EQ(openai.status, 400) << openai.body;
  EXPECT_EQ(openai.json()["error"]["message"], "stop is longer than 256 bytes");
  EXPECT_EQ(anthropic.status, 400) << anthropic.body;
  EXPECT_EQ(anthropic.json()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(anthropic.json()["error"]["message"], "stop_sequences[0] is longer than 256 bytes");
  EXPECT_EQ(h.fake().generate_calls(), 0);
}

TEST(GatewayApiTest, ErrorAfterTheStreamStartedEndsItWithAnErrorEvent) {
  GatewayHarness h;
  h.fake().SetScript([](const infer_v1::GenerateRequest&) {
    Script s;
    s.Started(3).Text("par").Fail(grpc::StatusCode::INTERNAL, "model exploded");
    return s;
  });
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/chat/completions",
                             R"({"stream":true,"messages":[{"role":"user","content":"x"}]})");

  ASSERT_EQ(r.status, 200);
  bool done = false;
  std::vector<json> chunks = DataChunks(r.body, &done);
  EXPECT_TRUE(done);
  EXPECT_EQ(chunks.back()["error"]["message"], "model exploded");
}

// Pings every 20 ms, for the tests of what a quiet stream sends.
constexpr absl::Duration kFastPings = absl::Milliseconds(20);

// "Hello" after 300 ms of silence (a long prefill), for any request.
Script HelloAfterAPause(const infer_v1::GenerateRequest&) {
  Script s = Script::Reply({"Hello"});
  s.steps.insert(s.steps.begin(), Script().Pause(absl::Milliseconds(300)).steps[0]);
  return s;
}

TEST(GatewayApiTest, SilentStreamsGetPingsBeforeTheFirstToken) {
  HarnessOptions options;
  options.sse_ping_interval = kFastPings;
  GatewayHarness h(options);
  h.fake().SetScript(HelloAfterAPause);
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/chat/completions",
                             R"({"stream":true,"messages":[{"role":"user","content":"x"}]})");

  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.rfind(": ping\n\n", 0), 0u) << r.body;
  EXPECT_EQ(r.headers["x-accel-buffering"], "no");  // A proxy in front passes pings on.
  bool done = false;
  std::vector<json> chunks = DataChunks(r.body, &done);
  EXPECT_TRUE(done);
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["content"], "Hello");
}

// While a tool call is generated the daemon's messages carry nothing to show (the call is held
// until it closes): the pings go on, so that a long call does not leave the stream silent past
// a client's or a proxy's idle timeout.
TEST(GatewayApiTest, PingsGoOnWhileTheDaemonsMessagesShowNothing) {
  HarnessOptions options;
  options.sse_ping_interval = kFastPings;
  GatewayHarness h(options);
  h.fake().SetScript([](const infer_v1::GenerateRequest&) {
    Script s;
    s.Started(12);
    for (int i = 0; i < 30; ++i) {
      Script::Step token;  // One generated token, its text held back.
      token.message.mutable_delta()->add_token_ids(100 + i);
      s.steps.push_back(token);
      s.Pause(absl::Milliseconds(10));
    }
    s.ToolCall(0, "call_0", "write_file", R"({"path":"a.txt"})");
    s.Finished(Script::MakeFinished(infer_v1::Finished::REASON_TOOL_CALLS, 31));
    return s;
  });
  HttpTestClient client(h.port());

  HttpResult r = client.Post(
      "/v1/messages",
      R"({"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"x"}]})");

  ASSERT_EQ(r.status, 200) << r.body;
  const size_t started = r.body.find("event: message_start");
  const size_t tool = r.body.find("\"tool_use\"");
  ASSERT_NE(started, std::string::npos) << r.body;
  ASSERT_NE(tool, std::string::npos) << r.body;
  EXPECT_NE(r.body.substr(started, tool - started).find("\n: ping\n"), std::string::npos) << r.body;
}

// A Responses stream's heartbeats before the output begins are events, not comments: Codex CLI
// ends a stream that sent no event for minutes, which a long prefill would otherwise be. The
// first opens the response; the later ones repeat response.in_progress; the sequence numbers
// run on without a gap.
TEST(GatewayApiTest, ResponsesStreamsGetEventsWhileTheyWaitForTheFirstToken) {
  HarnessOptions options;
  options.sse_ping_interval = kFastPings;
  GatewayHarness h(options);
  h.fake().SetScript(HelloAfterAPause);
  HttpTestClient client(h.port());

  HttpResult r = client.Post("/v1/responses", R"({"stream": true, "input": "x"})");

  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.rfind("event: response.created\n", 0), 0u) << r.body;
  EXPECT_EQ(r.body.find(": ping"), std::string::npos) << r.body;
  std::vector<std::string> types;
  int64_t expected_sequence = 0;
  for (absl::string_view line : absl::StrSplit(r.body, '\n')) {
    if (!absl::StartsWith(line, "data: ")) continue;
    const json event = json::parse(line.substr(6));
    types.push_back(event["type"]);
    EXPECT_EQ(event["sequence_number"], expected_sequence++) << line;
  }
  ASSERT_GE(types.size(), 4u) << r.body;
  EXPECT_EQ(types[0], "response.created");
  EXPECT_EQ(types[1], "response.in_progress");
  EXPECT_EQ(types[2], "response.in_progress");  // A later tick, still waiting.
  EXPECT_EQ(std::count(types.begin(), types.end(), "response.created"), 1);
  EXPECT_EQ(types.back(), "response.completed");
}

}  // namespace
}  // namespace cairn::gateway::testing
