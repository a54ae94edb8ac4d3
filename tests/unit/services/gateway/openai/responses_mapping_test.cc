#include "services/gateway/openai/responses_mapping.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/gateway/openai/errors.h"

namespace cairn::gateway {
namespace {

TEST(ResponsesMappingTest, StringInputAndInstructions) {
  absl::StatusOr<GenerationSpec> spec = ParseResponsesRequest(
      Json::parse(R"({"instructions": "I", "input": "hello", "max_output_tokens": 7,
                      "store": false, "metadata": {"k": "secret-meta"}})"),
      {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& m = spec->request.chat().messages();
  ASSERT_EQ(m.size(), 2);
  EXPECT_EQ(m[0].role(), "system");
  EXPECT_EQ(m[1].content(), "hello");
  EXPECT_EQ(spec->request.sampling().max_tokens(), 7u);
  EXPECT_EQ(spec->request.chat().DebugString().find("secret-meta"), std::string::npos);
}

// An assistant message replayed from an answer OpenAI refused holds a refusal part.
TEST(ResponsesMappingTest, AnAssistantsRefusalPartIsItsText) {
  absl::StatusOr<GenerationSpec> spec = ParseResponsesRequest(Json::parse(R"({"input": [
      {"type": "message", "role": "user", "content": "hello"},
      {"type": "message", "role": "assistant",
       "content": [{"type": "refusal", "refusal": "I can't."}]},
      {"type": "message", "role": "user", "content": "why"}]})"),
                                                              {});
  absl::StatusOr<GenerationSpec> user =
      ParseResponsesRequest(Json::parse(R"({"input": [{"type": "message", "role": "user",
                                 "content": [{"type": "refusal", "refusal": "x"}]}]})"),
                            {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->request.chat().messages_size(), 3);
  EXPECT_EQ(spec->request.chat().messages(1).content(), "I can't.");
  EXPECT_EQ(user.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(user.status().message()),
              ::testing::HasSubstr("input[0].content[0] is a refusal part"));
}

TEST(ResponsesMappingTest, ParallelToolCallsFalseAsksForOneCall) {
  absl::StatusOr<GenerationSpec> one =
      ParseResponsesRequest(Json::parse(R"({"input": "x", "parallel_tool_calls": false})"), {});
  absl::StatusOr<GenerationSpec> many = ParseResponsesRequest(Json::parse(R"({"input": "x"})"), {});

  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_TRUE(one->request.chat().single_tool_call());
  EXPECT_FALSE(many->request.chat().single_tool_call());
  // The answer reports the request's choice.
  infer_v1::Finished f;
  f.set_reason(infer_v1::Finished::REASON_STOP);
  EXPECT_EQ(one->make_formatter("served")->Body(f)["parallel_tool_calls"], false);
  EXPECT_EQ(many->make_formatter("served")->Body(f)["parallel_tool_calls"], true);
}

TEST(ResponsesMappingTest, TextFormatsMapToTheDaemonsResponseFormat) {
  absl::StatusOr<GenerationSpec> text = ParseResponsesRequest(
      Json::parse(R"({"input": "x", "text": {"format": {"type": "text"}}})"), {});
  absl::StatusOr<GenerationSpec> object = ParseResponsesRequest(
      Json::parse(R"({"input": "x", "text": {"format": {"type": "json_object"}}})"), {});
  absl::StatusOr<GenerationSpec> schema = ParseResponsesRequest(
      Json::parse(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "r",
          "strict": true, "schema": {"type": "object", "properties": {}}}}})"),
      {});

  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_TRUE(object.ok()) << object.status();
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_FALSE(text->request.has_response_format());
  EXPECT_TRUE(object->request.response_format().json_object());
  EXPECT_EQ(Json::parse(schema->request.response_format().json_schema()),
            Json::parse(R"({"type": "object", "properties": {}})"));
}

TEST(ResponsesMappingTest, TextFormatErrorsNameTheField) {
  auto error = [](const char* body) {
    return std::string(ParseResponsesRequest(Json::parse(body), {}).status().message());
  };

  EXPECT_NE(
      error(R"({"input": "x", "text": {"format": {"type": "grammar"}}})").find("text.format.type"),
      std::string::npos);
  EXPECT_NE(error(R"({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}})")
                .find("text.format.name is required"),
            std::string::npos);
  EXPECT_NE(error(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n",
                      "schema": []}}})")
                .find("text.format.schema"),
            std::string::npos);
  EXPECT_NE(error(R"({"input": "x", "text": {"format": {"type": "json_object"}},
                      "tools": [{"type": "function", "name": "f"}], "tool_choice": "required"})")
                .find("text.format cannot be combined with a tool_choice"),
            std::string::npos);
}

// As OpenAI's API: a 400 about one field names it in "param", by its path in the request.
TEST(ResponsesMappingTest, FieldErrorsNameTheFieldInParam) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model": "m"})", "input"},
      {R"({"input": 5})", "input"},
      {R"({"input": "x", "temperature": 9000})", "temperature"},
      {R"({"input": "x", "max_output_tokens": "many"})", "max_output_tokens"},
      {R"({"input": [{"role": "user", "content": 5}]})", "input[0].content"},
      {R"({"input": [{"type": "function_call", "name": "f"}]})", "input[0].call_id"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})",
       "input[0].content[0]"},
      {R"({"input": "x", "tools": [{"type": "function"}]})", "tools[0].name"},
      {R"({"input": "x", "tools": [{"type": "namespace", "name": "ns",
          "tools": [{"type": "function", "name": "f", "parameters": 1}]}]})",
       "tools[0].tools[0].parameters"},
      {R"({"input": "x", "text": {"format": {"type": "json_schema"}}})", "text.format.name"},
      {R"({"input": "x", "reasoning": {"effort": 1}})", "reasoning.effort"},
      {R"({"input": "x", "previous_response_id": "r"})", "previous_response_id"},
  };
  for (const auto& [body, param] : cases) {
    absl::StatusOr<GenerationSpec> spec = ParseResponsesRequest(Json::parse(body), {});
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(Json::parse(OpenAiErrorJson(spec.status()))["error"]["param"], param) << body;
    EXPECT_TRUE(absl::StartsWith(spec.status().message(), absl::StrCat(param, " ")))
        << spec.status();
  }
}

TEST(ResponsesMappingTest, ParallelFunctionCallsShareOneAssistantTurn) {
  absl::StatusOr<GenerationSpec> spec = ParseResponsesRequest(Json::parse(R"({"input": [
      {"role": "user", "content": "go"},
      {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
      {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "a", "output": "1"},
      {"type": "function_call_output", "call_id": "b", "output": [{"type": "input_text", "text": "2"}]}]})"),
                                                              {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& m = spec->request.chat().messages();
  ASSERT_EQ(m.size(), 4);
  EXPECT_EQ(m[1].tool_calls_size(), 2);
  EXPECT_EQ(m[3].content(), "2");
}

TEST(ResponsesMappingTest, RefusesOtherToolTypesAndStoredState) {
  auto error = [](const char* body) {
    return std::string(ParseResponsesRequest(Json::parse(body), {}).status().message());
  };

  EXPECT_NE(error(R"({"input": "x", "tools": [{"type": "local_shell"}]})").find("tools[0].type"),
            std::string::npos);
  EXPECT_NE(error(R"({"input": "x", "previous_response_id": "r"})").find("previous_response_id"),
            std::string::npos);
  EXPECT_NE(error(R"({"input": [{"type": "item_reference", "id": "x"}]})").find("input[0].type"),
            std::string::npos);
  EXPECT_NE(
      error(R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})").find("media"),
      std::string::npos);
}

TEST(ResponsesMappingTest, NamespaceFunctionsAreQualifiedAndHostedToolsLeftOut) {
  absl::StatusOr<GenerationSpec> spec = ParseResponsesRequest(Json::parse(R"({
      "input": [{"role": "user", "content": "go"},
                {"type": "function_call", "call_id": "a", "namespace": "crm", "name": "get",
                 "arguments": "{}"},
                {"type": "function_call_output", "call_id": "a", "output": "1"}],
      "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}},
                {"type": "namespace", "name": "crm", "description": "the CRM",
                 "tools": [{"type": "function", "name": "get"},
                           {"type": "function", "name": "put", "strict": false}]},
                {"type": "web_search", "external_web_access": false}],
      "tool_choice": {"type": "function", "namespace": "crm", "name": "put"}})"),
                                                              {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& chat = spec->request.chat();
  std::vector<std::string> names;
  for (const auto& t : chat.tools()) names.push_back(Json::parse(t.json())["function"]["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"f", "crm.get", "crm.put"}));
  EXPECT_EQ(chat.tool_choice(), "crm.put");
  ASSERT_EQ(chat.messages(1).tool_calls_size(), 1);
  EXPECT_EQ(chat.messages(1).tool_calls(0).name(), "crm.get");
}

TEST(ResponsesMappingTest, CallsOfANamespaceFunctionNameTheirNamespace) {
  absl::StatusOr<GenerationSpec> spec = ParseResponsesRequest(Json::parse(R"({"input": "x",
      "tools": [{"type": "namespace", "name": "crm", "description": "",
                 "tools": [{"type": "function", "name": "put"}]}]})"),
                                                              {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto formatter = spec->make_formatter("served");
  infer_v1::Finished f;
  f.set_reason(infer_v1::Finished::REASON_TOOL_CALLS);
  for (const char* name : {"crm.put", "other.put", "plain"}) {
    infer_v1::ToolCall* call = f.add_tool_calls();
    call->set_id(absl::StrCat("call-", name));
    call->set_name(name);
    call->set_arguments_json("{}");
  }
  infer_v1::Delta streamed;
  infer_v1::ToolCallDelta* d = streamed.add_tool_calls();
  d->set_id("call-s");
  d->set_name("crm.put");
  d->set_arguments_delta("{}");

  Json body = formatter->Body(f);
  auto stream_formatter = spec->make_formatter("served");
  std::string events = stream_formatter->StreamDelta(streamed);

  ASSERT_EQ(body["output"].size(), 3u);
  EXPECT_EQ(body["output"][0]["name"], "put");
  EXPECT_EQ(body["output"][0]["namespace"], "crm");
  EXPECT_EQ(body["output"][1]["name"], "other.put");  // Not a namespace of the request.
  EXPECT_FALSE(body["output"][1].contains("namespace"));
  EXPECT_FALSE(body["output"][2].contains("namespace"));
  EXPECT_NE(events.find(R"("name":"put",)"), std::string::npos) << events;
  EXPECT_NE(events.find(R"("namespace":"crm")"), std::string::npos) << events;
}

TEST(ResponsesMappingTest, CallIdsAreRandomPerCallAndTheSameInEveryEventOfTheCall) {
  absl::StatusOr<GenerationSpec> spec = ParseResponsesRequest(Json::parse(R"({"input": "x"})"), {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto turn1 = spec->make_formatter("served");
  auto turn2 = spec->make_formatter("served");
  auto delta = [](uint32_t index, bool first, const std::string& arguments) {
    infer_v1::Delta d;
    infer_v1::ToolCallDelta* tc = d.add_tool_calls();
    tc->set_index(index);
    if (first) {
      tc->set_id(absl::StrCat("call_", index));  // The daemon's, the same in every turn.
      tc->set_name("f");
    }
    tc->set_arguments_delta(arguments);
    return d;
  };
  infer_v1::Finished f;
  f.set_reason(infer_v1::Finished::REASON_TOOL_CALLS);
  // Every call_id the events name, in order.
  auto call_ids = [](const std::string& events) {
    std::vector<std::string> ids;
    for (size_t at = events.find("data: "); at != std::string::npos;
         at = events.find("data: ", at + 1)) {
      const size_t from = at + 6;
      const Json e = Json::parse(events.substr(from, events.find('\n', from) - from));
      if (e.contains("item")) ids.push_back(e["item"]["call_id"]);
      if (e.contains("response")) {
        for (const Json& item : e["response"]["output"]) ids.push_back(item["call_id"]);
      }
    }
    return ids;
  };

  std::string events = turn1->StreamDelta(delta(0, true, "{"));
  events += turn1->StreamDelta(delta(0, false, "}"));
  events += turn1->StreamDelta(delta(1, true, "{}"));
  events += turn1->StreamFinished(f);
  const std::vector<std::string> ids = call_ids(events);
  const std::vector<std::string> next_turn = call_ids(turn2->StreamDelta(delta(0, true, "{}")));

  // Added and done for each call, then both in response.completed.
  ASSERT_EQ(ids.size(), 6u) << events;
  EXPECT_THAT(ids[0], ::testing::MatchesRegex("call_[0-9a-f]{24}"));
  EXPECT_EQ(ids, (std::vector<std::string>{ids[0], ids[0], ids[2], ids[2], ids[0], ids[2]}));
  EXPECT_NE(ids[2], ids[0]);
  ASSERT_EQ(next_turn.size(), 1u);
  EXPECT_NE(next_turn[0], ids[0]);
}

TEST(ResponsesMappingTest, RefusesNamespacesItCannotQualify) {
  auto error = [](const char* body) {
    return std::string(ParseResponsesRequest(Json::parse(body), {}).status().message());
  };

  EXPECT_NE(error(R"({"input": "x", "tools": [{"type": "namespace", "name": "a.b",
                      "tools": []}]})")
                .find("tools[0].name"),
            std::string::npos);
  EXPECT_NE(error(R"({"input": "x", "tools": [{"type": "namespace", "name": "a",
                      "tools": [{"type": "custom", "name": "p"}]}]})")
                .find("tools[0].tools[0].type"),
            std::string::npos);
  EXPECT_NE(error(R"({"input": "x", "tools": [{"type": "function", "name": "a.b"},
                      {"type": "namespace", "name": "a", "tools": [{"type": "function",
                       "name": "b"}]}]})")
                .find("names two tools"),
            std::string::npos);
}

// A forced function of a namespace is written into the call's opening as "NAMESPACE.NAME", so
// the namespace is checked as the name is: a 400 naming tool_choice, not the daemon's refusal
// naming its own field.
TEST(ResponsesMappingTest, AForcedNamespaceFunctionIsCheckedWithItsNamespace) {
  auto parse = [](const char* ns) {
    const Json body = {{"input", "x"},
                       {"tools",
                        {{{"type", "namespace"},
                          {"name", ns},
                          {"tools", {{{"type", "function"}, {"name", "f"}}}}}}},
                       {"tool_choice", {{"type", "function"}, {"name", "f"}, {"namespace", ns}}}};
    return ParseResponsesRequest(body, {});
  };

  ASSERT_TRUE(parse("agents").ok()) << parse("agents").status();
  EXPECT_EQ(parse("agents")->request.chat().tool_choice(), "agents.f");
  ASSERT_TRUE(parse("none").ok()) << parse("none").status();  // "none.f" is no mode.
  for (const char* ns : {"two words", "a<b", "tab\there"}) {
    absl::StatusOr<GenerationSpec> spec = parse(ns);
    ASSERT_FALSE(spec.ok()) << ns;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(spec.status().message(), "tool_choice.namespace"))
        << spec.status();
  }
}

// The events of an SSE stream, by name, with their data.
std::vector<std::pair<std::string, Json>> Events(const std::string& sse) {
  std::vector<std::pair<std::string, Json>> events;
  for (size_t at = sse.find("event: "); at != std::string::npos; at = sse.find("event: ", at + 1)) {
    const size_t name_end = sse.find('\n', at);
    const size_t data = name_end + 1 + 6;  // "data: ".
    events.emplace_back(sse.substr(at + 7, name_end - at - 7),
                        Json::parse(sse.substr(data, sse.find('\n', data) - data)));
  }
  return events;
}

TEST(ResponsesMappingTest, AStreamCutByLengthEndsIncomplete) {
  absl::StatusOr<GenerationSpec> spec =
      ParseResponsesRequest(Json::parse(R"({"input": "x", "stream": true})"), {});
  ASSERT_TRUE(spec.ok());
  auto formatter = spec->make_formatter("served");
  infer_v1::Delta d;
  d.set_text("partial");
  infer_v1::Finished f;
  f.set_reason(infer_v1::Finished::REASON_LENGTH);

  formatter->StreamStarted(infer_v1::Started());
  formatter->StreamDelta(d);
  const auto events = Events(formatter->StreamFinished(f));

  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().first, "response.incomplete");
  EXPECT_EQ(events.back().second["type"], "response.incomplete");
  const Json& response = events.back().second["response"];
  EXPECT_EQ(response["status"], "incomplete");
  EXPECT_EQ(response["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(response["output"][0]["content"][0]["text"], "partial");
  EXPECT_EQ(response["output"][0]["status"], "incomplete");  // The message it cut, as OpenAI.
  for (const auto& [name, data] : events) EXPECT_NE(name, "response.completed");
}

TEST(ResponsesMappingTest, AFailedStreamNamesItsErrorInOpenAisCodes) {
  absl::StatusOr<GenerationSpec> spec =
      ParseResponsesRequest(Json::parse(R"({"input": "x", "stream": true})"), {});
  ASSERT_TRUE(spec.ok());
  auto code = [&](const absl::Status& status) {
    auto formatter = spec->make_formatter("served");
    formatter->StreamStarted(infer_v1::Started());
    const auto events = Events(formatter->StreamError(status));
    EXPECT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].first, "response.failed");
    EXPECT_EQ(events[0].second["response"]["status"], "failed");
    EXPECT_EQ(events[0].second["response"]["error"]["message"], std::string(status.message()));
    return events[0].second["response"]["error"]["code"].get<std::string>();
  };

  EXPECT_EQ(code(absl::InvalidArgumentError(
                "prompt of 9000 tokens does not fit the context of 4096 tokens")),
            "context_length_exceeded");
  EXPECT_EQ(code(absl::ResourceExhaustedError("request queue is full (4 waiting)")),
            "rate_limit_exceeded");
  EXPECT_EQ(code(absl::InvalidArgumentError("bad")), "invalid_request_error");
  EXPECT_EQ(code(absl::InternalError("model exploded")), "server_error");
}

// A stream the gateway started with pings (a long prefill) may fail before the daemon's Started:
// the SDKs (openai's ResponseStream) refuse any lifecycle event before response.created, so the
// failure must still open with it, or the client sees a protocol error instead of the API error.
TEST(ResponsesMappingTest, AStreamThatFailsBeforeItStartedStillOpensWithResponseCreated) {
  absl::StatusOr<GenerationSpec> spec =
      ParseResponsesRequest(Json::parse(R"({"input": "x", "stream": true})"), {});
  ASSERT_TRUE(spec.ok());
  auto formatter = spec->make_formatter("served");

  const auto events = Events(formatter->StreamError(
      absl::InvalidArgumentError("prompt of 9000 tokens does not fit the context of 4096 tokens")));

  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].first, "response.created");
  EXPECT_EQ(events[1].first, "response.in_progress");
  EXPECT_EQ(events[2].first, "response.failed");
  EXPECT_EQ(events[0].second["response"]["id"], events[2].second["response"]["id"]);
  EXPECT_EQ(events[2].second["response"]["error"]["code"], "context_length_exceeded");
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].second["sequence_number"], i);
}

// The same for a daemon that skipped Started: the stream still opens with response.created.
TEST(ResponsesMappingTest, AStreamFinishedWithoutStartedStillOpensWithResponseCreated) {
  absl::StatusOr<GenerationSpec> spec =
      ParseResponsesRequest(Json::parse(R"({"input": "x", "stream": true})"), {});
  ASSERT_TRUE(spec.ok());
  auto formatter = spec->make_formatter("served");
  infer_v1::Finished f;
  f.set_reason(infer_v1::Finished::REASON_STOP);

  const auto events = Events(formatter->StreamFinished(f));

  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].first, "response.created");
  EXPECT_EQ(events[2].first, "response.completed");
}

TEST(ResponsesMappingTest, IncompleteWhenCutByLength) {
  absl::StatusOr<GenerationSpec> spec = ParseResponsesRequest(Json::parse(R"({"input": "x"})"), {});
  ASSERT_TRUE(spec.ok());
  auto formatter = spec->make_formatter("served");
  infer_v1::Finished f;
  f.set_reason(infer_v1::Finished::REASON_LENGTH);
  f.set_content("partial");

  Json body = formatter->Body(f);

  EXPECT_EQ(body["status"], "incomplete");
  EXPECT_EQ(body["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "partial");
  EXPECT_EQ(body["output"][0]["status"], "incomplete");
}

// Media in the newest input message is refused; in a function call's output or an earlier
// message it stands as a placeholder.
TEST(ResponsesMappingTest, MediaIsRefusedInTheNewestUserMessageOnly) {
  const Json image = Json::parse(R"({"type": "input_image", "image_url": "data:,"})");
  Json newest = {{"input", {{{"role", "user"}, {"content", {image}}}}}};
  Json history = {
      {"input",
       {{{"role", "user"}, {"content", {image}}},
        {{"type", "function_call"}, {"call_id", "c1"}, {"name", "view"}, {"arguments", "{}"}},
        {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", {image}}}}}};

  absl::StatusOr<GenerationSpec> refused = ParseResponsesRequest(newest, {});
  absl::StatusOr<GenerationSpec> served = ParseResponsesRequest(history, {});

  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("media"), absl::string_view::npos);
  ASSERT_TRUE(served.ok()) << served.status();
  const auto& messages = served->request.chat().messages();
  EXPECT_EQ(messages[0].content(), "[input_image omitted: this server reads text only]");
  EXPECT_EQ(messages[messages.size() - 1].content(),
            "[input_image omitted: this server reads text only]");
}

}  // namespace
}  // namespace cairn::gateway
