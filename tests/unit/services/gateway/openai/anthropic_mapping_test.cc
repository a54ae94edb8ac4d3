#include "services/gateway/openai/anthropic_mapping.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn::gateway {
namespace {

// A turn's text blocks are joined into one string, bounded like one string field.
TEST(AnthropicMappingTest, JoinedTextBlocksAreBoundedLikeOneString) {
  RequestLimits limits;
  limits.max_string_bytes = 8;
  absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [
          {"type": "text", "text": "abcdef"}, {"type": "text", "text": "ghi"}]}]})"),
      limits);

  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), "messages[0].content is longer than 8 bytes");

  // So are documents and search results read as text, alone and joined with the rest.
  for (const char* blocks : {R"([{"type": "search_result", "source": "abcdef", "title": "t",
             "content": [{"type": "text", "text": "x"}]}])",
                             R"([{"type": "text", "text": "abcdef"},
            {"type": "document", "source": {"type": "text", "data": "ghi"}}])"}) {
    absl::StatusOr<GenerationSpec> joined = ParseAnthropicMessagesRequest(
        Json::parse(absl::StrCat(R"({"max_tokens": 5, "messages": [{"role": "user", "content": )",
                                 blocks, "}]}")),
        limits);
    EXPECT_EQ(joined.status().code(), absl::StatusCode::kInvalidArgument) << blocks;
    EXPECT_NE(joined.status().message().find("longer than 8 bytes"), std::string::npos)
        << joined.status();
  }
}

TEST(AnthropicMappingTest, ThinkingBlocksOfOneTurnAreJoinedWithNewlines) {
  absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"},
          {"role": "assistant", "content": [{"type": "thinking", "thinking": "first"},
           {"type": "thinking", "thinking": "second"}, {"type": "text", "text": "done"}]},
          {"role": "user", "content": "y"}]})"),
      {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->request.chat().messages(1).reasoning_content(), "first\nsecond");
}

TEST(AnthropicMappingTest, ForcedToolChoiceNeedsTheToolItNames) {
  absl::StatusOr<GenerationSpec> any = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "a"}],
          "tool_choice": {"type": "any"}})"),
      {});
  absl::StatusOr<GenerationSpec> unknown = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "a"}],
          "tools": [{"name": "f", "input_schema": {"type": "object"}}],
          "tool_choice": {"type": "tool", "name": "g"}})"),
      {});

  EXPECT_EQ(any.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(any.status().message().rfind("tool_choice", 0), 0u) << any.status();
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("\"g\""), std::string::npos) << unknown.status();
  // A prefill (the final message the assistant's text) cannot be forced into a call.
  absl::StatusOr<GenerationSpec> prefill = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "a"},
          {"role": "assistant", "content": "Sure"}],
          "tools": [{"name": "f", "input_schema": {"type": "object"}}],
          "tool_choice": {"type": "any"}})"),
      {});
  EXPECT_EQ(prefill.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(prefill.status().message().rfind("tool_choice", 0), 0u) << prefill.status();
}

TEST(AnthropicMappingTest, DisableParallelToolUseAsksForOneCall) {
  const std::string head = R"({"max_tokens": 5, "messages": [{"role": "user", "content": "u"}],
      "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": )";
  absl::StatusOr<GenerationSpec> one = ParseAnthropicMessagesRequest(
      Json::parse(head + R"({"type": "any", "disable_parallel_tool_use": true}})"), {});
  absl::StatusOr<GenerationSpec> many =
      ParseAnthropicMessagesRequest(Json::parse(head + R"({"type": "auto"}})"), {});

  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_TRUE(one->request.chat().single_tool_call());
  EXPECT_EQ(one->request.chat().tool_choice(), "required");
  EXPECT_FALSE(many->request.chat().single_tool_call());
}

TEST(AnthropicMappingTest, OutputFormatMapsToAJsonSchema) {
  absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
          "output_format": {"type": "json_schema",
                            "schema": {"type": "object", "properties": {"a": {"type": "string"}},
                                       "required": ["a"], "additionalProperties": false}}})"),
      {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(Json::parse(spec->request.response_format().json_schema()),
            Json::parse(R"({"type": "object", "properties": {"a": {"type": "string"}},
                            "required": ["a"], "additionalProperties": false})"));
}

TEST(AnthropicMappingTest, OutputConfigFormatMapsToAJsonSchema) {
  // The generally available spelling: output_config.format; output_config's other fields
  // (effort) are accepted and not used.
  absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
          "output_config": {"effort": "high",
                            "format": {"type": "json_schema", "schema": {"type": "integer"}}}})"),
      {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(Json::parse(spec->request.response_format().json_schema()),
            Json::parse(R"({"type": "integer"})"));

  absl::StatusOr<GenerationSpec> effort_only = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
          "output_config": {"effort": "low"}})"),
      {});
  ASSERT_TRUE(effort_only.ok()) << effort_only.status();
  EXPECT_FALSE(effort_only->request.has_response_format());

  auto error = [](const char* body) {
    return std::string(ParseAnthropicMessagesRequest(Json::parse(body), {}).status().message());
  };
  EXPECT_NE(error(R"({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
                      "output_config": {"format": {"type": "json_object"}}})")
                .find("output_config.format.type"),
            std::string::npos);
  EXPECT_NE(error(R"({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
                      "output_format": {"type": "json_schema", "schema": {}},
                      "output_config": {"format": {"type": "json_schema", "schema": {}}}})")
                .find("output_config.format and output_format cannot both be given"),
            std::string::npos);
  EXPECT_NE(error(R"({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
                      "output_config": 3})")
                .find("output_config"),
            std::string::npos);
}

TEST(AnthropicMappingTest, OutputFormatErrorsNameTheField) {
  auto error = [](const char* body) {
    return std::string(ParseAnthropicMessagesRequest(Json::parse(body), {}).status().message());
  };

  EXPECT_NE(error(R"({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
                      "output_format": {"type": "json_object"}})")
                .find("output_format.type"),
            std::string::npos);
  EXPECT_NE(error(R"({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
                      "output_format": {"type": "json_schema", "schema": 3}})")
                .find("output_format.schema"),
            std::string::npos);
  // A prefill would be continued outside the schema.
  EXPECT_NE(error(R"({"max_tokens": 10, "messages": [{"role": "user", "content": "x"},
                      {"role": "assistant", "content": "{"}],
                      "output_format": {"type": "json_schema", "schema": {}}})")
                .find("output_format cannot be combined with a final assistant message"),
            std::string::npos);
}

TEST(AnthropicMappingTest, BlocksMapToChatMessages) {
  absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(Json::parse(R"({
      "max_tokens": 50, "system": "S",
      "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "calling"},
          {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}},
          {"type": "tool_use", "id": "t2", "name": "g", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r1"},
                                     {"type": "tool_result", "tool_use_id": "t2"}]}],
      "tool_choice": {"type": "tool", "name": "f"},
      "tools": [{"name": "f", "input_schema": {"type": "object"}}]})"),
                                                                      {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& m = spec->request.chat().messages();
  ASSERT_EQ(m.size(), 5);
  EXPECT_EQ(m[0].role(), "system");
  EXPECT_EQ(m[1].content(), "a\nb");  // Text blocks are joined with newlines.
  EXPECT_EQ(m[2].content(), "calling");
  ASSERT_EQ(m[2].tool_calls_size(), 2);
  EXPECT_EQ(m[2].tool_calls(0).arguments_json(), R"({"x":1})");
  EXPECT_EQ(m[3].tool_call_id(), "t1");
  EXPECT_EQ(m[4].tool_call_id(), "t2");
  EXPECT_EQ(spec->request.chat().tool_choice(), "f");
  EXPECT_EQ(spec->request.sampling().max_tokens(), 50u);
  // No temperature given: the model's (generation_config.json) or the API's default.
  EXPECT_TRUE(spec->request.sampling().model_defaults());
  EXPECT_FALSE(spec->request.sampling().has_temperature());
}

TEST(AnthropicMappingTest, SystemBlocksAndToolResultPartsAreJoinedWithNewlines) {
  absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(Json::parse(R"({
      "max_tokens": 50,
      "system": [{"type": "text", "text": "You are an agent."}, {"type": "text", "text": "Be brief."}],
      "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
          "content": [{"type": "text", "text": "line one"}, {"type": "text", "text": "line two"}]}]}]})"),
                                                                      {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& m = spec->request.chat().messages();
  ASSERT_EQ(m.size(), 4);
  EXPECT_EQ(m[0].content(), "You are an agent.\nBe brief.");
  EXPECT_EQ(m[3].role(), "tool");
  EXPECT_EQ(m[3].content(), "line one\nline two");
}

TEST(AnthropicMappingTest, RefusesServerToolsAndMissingMaxTokens) {
  auto parse = [](const char* body) {
    return ParseAnthropicMessagesRequest(Json::parse(body), {}).status();
  };

  absl::Status no_max = parse(R"({"messages": [{"role": "user", "content": "x"}]})");
  absl::Status server_tool =
      parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                                       "tools": [{"type": "web_search_20250305", "name": "web_search"}]})");
  absl::Status count = ParseAnthropicCountTokensRequest(
                           Json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), {})
                           .status();

  EXPECT_NE(no_max.message().find("max_tokens"), absl::string_view::npos);
  EXPECT_NE(server_tool.message().find("tools[0].type"), absl::string_view::npos);
  EXPECT_TRUE(count.ok()) << count;
}

TEST(AnthropicMappingTest, NonStreamedMessageGoldenShape) {
  absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})"), {});
  ASSERT_TRUE(spec.ok());
  auto formatter = spec->make_formatter("served");
  infer_v1::Finished f;
  f.set_reason(infer_v1::Finished::REASON_LENGTH);
  f.set_prompt_tokens(10);
  f.set_cached_tokens(6);
  f.set_completion_tokens(5);
  f.set_content("trunc");

  Json body = formatter->Body(f);

  body.erase("id");
  body.erase("cairn");
  EXPECT_EQ(body, Json::parse(R"({"type": "message", "role": "assistant", "model": "served",
      "content": [{"type": "text", "text": "trunc"}], "stop_reason": "max_tokens",
      "stop_sequence": null, "usage": {"input_tokens": 4, "output_tokens": 5,
      "cache_read_input_tokens": 6, "cache_creation_input_tokens": 0}})"))
      << body.dump(2);
}

// max_tokens is a ceiling, as Anthropic takes it for its current models: a prompt that leaves
// fewer tokens of the context is answered up to the context's end (no 400 "prompt is too
// long" for a prompt that fits: Claude Code asks for 32,000), and an answer the context cut
// short of max_tokens says so.
TEST(AnthropicMappingTest, MaxTokensIsACeilingAndTheContextsEndHasItsOwnStopReason) {
  absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 32000, "stream": true,
                      "messages": [{"role": "user", "content": "x"}]})"),
      {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->request.sampling().max_tokens(), 32000u);
  EXPECT_TRUE(spec->request.sampling().max_tokens_is_ceiling());
  infer_v1::Finished cut;
  cut.set_reason(infer_v1::Finished::REASON_LENGTH);
  cut.set_prompt_tokens(30000);
  cut.set_completion_tokens(10960);
  infer_v1::Finished full = cut;
  full.set_completion_tokens(32000);

  const Json cut_body = spec->make_formatter("served")->Body(cut);
  const std::string cut_stream = spec->make_formatter("served")->StreamFinished(cut);
  const Json full_body = spec->make_formatter("served")->Body(full);

  EXPECT_EQ(cut_body["stop_reason"], "model_context_window_exceeded") << cut_body.dump();
  EXPECT_NE(cut_stream.find(R"("stop_reason":"model_context_window_exceeded")"),
            std::string::npos)
      << cut_stream;
  EXPECT_EQ(full_body["stop_reason"], "max_tokens") << full_body.dump();
}

// This server reads text. An image in the newest user turn is refused (its sender learns the
// model cannot see it); one in a tool result or an earlier turn, which the client resends every
// turn, stands as a placeholder, or every later turn of the conversation would be refused.
TEST(AnthropicMappingTest, MediaIsRefusedInTheNewestUserTurnOnly) {
  const char* image = R"({"type": "image", "source": {"type": "base64", "media_type":
                          "image/png", "data": "iVBORw0KGgo="}})";
  const std::string newest = absl::StrCat(
      R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text",
          "text": "look"}, )",
      image, "]}]}");
  const std::string history = absl::StrCat(
      R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text",
          "text": "look"}, )",
      image, R"(]}, {"role": "assistant", "content": "I cannot see it."},
          {"role": "user", "content": "then read the file"}]})");
  const std::string tool_result = absl::StrCat(
      R"({"max_tokens": 5, "messages": [{"role": "user", "content": "open it"},
          {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read",
           "input": {"path": "a.png"}}]},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
           "content": [)",
      image, "]}]}]}");

  absl::StatusOr<GenerationSpec> refused = ParseAnthropicMessagesRequest(Json::parse(newest), {});
  absl::StatusOr<GenerationSpec> earlier = ParseAnthropicMessagesRequest(Json::parse(history), {});
  absl::StatusOr<GenerationSpec> result =
      ParseAnthropicMessagesRequest(Json::parse(tool_result), {});

  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("messages[0].content[1]"), absl::string_view::npos)
      << refused.status();
  ASSERT_TRUE(earlier.ok()) << earlier.status();
  EXPECT_EQ(earlier->request.chat().messages(0).content(),
            "look\n[image omitted: this server reads text only]");
  ASSERT_TRUE(result.ok()) << result.status();
  const auto& messages = result->request.chat().messages();
  EXPECT_EQ(messages[messages.size() - 1].role(), "tool");
  EXPECT_EQ(messages[messages.size() - 1].content(),
            "[image omitted: this server reads text only]");
}

// Claude Code's Read tool answers a PDF with a document block inside its tool_result: it stands
// as a placeholder there (refused, every later turn would be too); a document of text, or of
// text blocks, and a search_result read as their text; a PDF in the newest user turn is refused.
TEST(AnthropicMappingTest, DocumentAndSearchResultBlocksReadAsTextOrStandAsPlaceholders) {
  absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 5, "tools": [{"name": "Read", "input_schema": {}}],
          "messages": [
          {"role": "user", "content": "read it"},
          {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read",
           "input": {}}]},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
           {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
            "data": "AAAA"}},
           {"type": "search_result", "source": "https://a.example", "title": "A",
            "content": [{"type": "text", "text": "found"}]}]},
           {"type": "document", "title": "notes.txt", "source": {"type": "text",
            "media_type": "text/plain", "data": "line one"}},
           {"type": "document", "source": {"type": "content", "content": [
            {"type": "text", "text": "part"}]}}]}]})"),
      {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& messages = spec->request.chat().messages();
  ASSERT_EQ(messages.size(), 4);
  EXPECT_EQ(messages[2].role(), "tool");
  EXPECT_EQ(messages[2].content(),
            "[document omitted: this server reads text only]\nA\nhttps://a.example\nfound");
  EXPECT_EQ(messages[3].role(), "user");
  EXPECT_EQ(messages[3].content(), "notes.txt\nline one\npart");

  absl::StatusOr<GenerationSpec> pdf = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [
          {"type": "document", "source": {"type": "url", "url": "https://a.example/x.pdf"}},
          {"type": "text", "text": "summarise"}]}]})"),
      {});
  EXPECT_EQ(pdf.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(pdf.status().message()), ::testing::HasSubstr("media block"));
}

TEST(AnthropicMappingTest, ToolUseIdsAreRandomPerCallAndTheSameInStreamAndBody) {
  absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(
      Json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})"), {});
  ASSERT_TRUE(spec.ok());
  auto turn1 = spec->make_formatter("served");
  auto turn2 = spec->make_formatter("served");
  infer_v1::Delta d;
  infer_v1::ToolCallDelta* tc = d.add_tool_calls();
  tc->set_index(0);
  tc->set_id("call_0");  // The daemon's id, the same in every turn.
  tc->set_name("f");
  tc->set_arguments_delta("{}");
  infer_v1::Finished f;
  f.set_reason(infer_v1::Finished::REASON_TOOL_CALLS);
  infer_v1::ToolCall* call = f.add_tool_calls();
  call->set_id("call_0");
  call->set_name("f");
  call->set_arguments_json("{}");
  auto block_id = [](const std::string& events) {
    const size_t data = events.find("data: ", events.find("event: content_block_start")) + 6;
    return Json::parse(events.substr(data, events.find('\n', data) - data))["content_block"]["id"]
        .get<std::string>();
  };

  const std::string streamed = block_id(turn1->StreamDelta(d));
  const std::string next_turn = block_id(turn2->StreamDelta(d));
  const Json body = turn1->Body(f);

  EXPECT_THAT(streamed, ::testing::MatchesRegex("toolu_[0-9a-f]{24}"));
  EXPECT_NE(next_turn, streamed);
  EXPECT_EQ(body["content"][0]["id"], streamed);
}

TEST(AnthropicMappingTest, AStopStringIsReportedAsTheStopSequence) {
  absl::StatusOr<GenerationSpec> spec =
      ParseAnthropicMessagesRequest(Json::parse(R"({"max_tokens": 5, "stop_sequences": ["END"],
                      "messages": [{"role": "user", "content": "x"}]})"),
                                    {});
  ASSERT_TRUE(spec.ok());
  auto formatter = spec->make_formatter("served");
  infer_v1::Finished f;
  f.set_reason(infer_v1::Finished::REASON_STOP);
  f.set_stop_sequence("END");
  Json body = formatter->Body(f);
  EXPECT_EQ(body["stop_reason"], "stop_sequence");
  EXPECT_EQ(body["stop_sequence"], "END");
  f.clear_stop_sequence();  // EOS.
  EXPECT_EQ(spec->make_formatter("served")->Body(f)["stop_reason"], "end_turn");
  EXPECT_TRUE(spec->make_formatter("served")->Body(f)["stop_sequence"].is_null());
}

TEST(AnthropicMappingTest, StopSequencesTheDaemonWouldRefuseAreRefusedNamingTheField) {
  // cairn-infer refuses stop strings over 256 bytes naming its own `sampling.stop[0]`.
  Json body = Json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})");
  body["stop_sequences"] = Json::array({std::string(kInferMaxStopBytes, 's')});
  ASSERT_TRUE(ParseAnthropicMessagesRequest(body, {}).ok());

  body["stop_sequences"] = Json::array({"END", std::string(kInferMaxStopBytes + 1, 's')});
  absl::Status long_stop = ParseAnthropicMessagesRequest(body, {}).status();

  EXPECT_EQ(long_stop.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(long_stop.message(), "stop_sequences[1] is longer than 256 bytes");
}

TEST(AnthropicMappingTest, AnEmptyMessageIsRefusedNamingItsContent) {
  auto error_of = [](const char* messages) {
    return std::string(
        ParseAnthropicMessagesRequest(
            Json::parse(absl::StrCat(R"({"max_tokens": 5, "messages": )", messages, "}")), {})
            .status()
            .message());
  };

  const std::string only = error_of(R"([{"role": "user", "content": []}])");
  const std::string middle = error_of(R"([{"role": "user", "content": "a"},
      {"role": "assistant", "content": []}, {"role": "user", "content": "b"}])");
  const std::string empty_text = error_of(R"([{"role": "user", "content": ""}])");

  EXPECT_EQ(only,
            "messages[0].content must not be empty (only the final assistant message may be)");
  EXPECT_EQ(middle,
            "messages[1].content must not be empty (only the final assistant message may be)");
  EXPECT_EQ(empty_text,
            "messages[0].content must not be empty (only the final assistant message may be)");
}

// Messages that all add nothing leave no prompt: refused here, not by the daemon naming its own
// field (chat.messages). A system prompt is a prompt.
TEST(AnthropicMappingTest, MessagesThatAllAddNothingAreRefusedNamingMessages) {
  auto parse = [](const char* fields) {
    return ParseAnthropicMessagesRequest(
        Json::parse(absl::StrCat(R"({"max_tokens": 5, )", fields, "}")), {});
  };

  absl::StatusOr<GenerationSpec> empty_final =
      parse(R"("messages": [{"role": "assistant", "content": ""}])");
  absl::StatusOr<GenerationSpec> redacted = parse(
      R"("messages": [{"role": "user", "content": [{"type": "redacted_thinking", "data": "x"}]}])");
  absl::StatusOr<GenerationSpec> with_system =
      parse(R"("system": "s", "messages": [{"role": "assistant", "content": []}])");

  EXPECT_EQ(empty_final.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty_final.status().message().rfind("messages must hold a message", 0), 0u)
      << empty_final.status();
  EXPECT_EQ(redacted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseAnthropicCountTokensRequest(
                Json::parse(R"({"messages": [{"role": "assistant", "content": ""}]})"), {})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(with_system.ok()) << with_system.status();
  EXPECT_EQ(with_system->request.chat().messages_size(), 1);
}

TEST(AnthropicMappingTest, DroppedBlocksBesideOthersAndAnEmptyFinalAssistantMessageAreFine) {
  absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(Json::parse(R"({
      "max_tokens": 5, "messages": [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"},
                                          {"type": "text", "text": "b"}]},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                          {"type": "redacted_thinking", "data": "x"},
                                          {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": ""}]},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]},
        {"role": "user", "content": "d"},
        {"role": "assistant", "content": []}]})"),
                                                                      {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& m = spec->request.chat().messages();
  // The message of redacted_thinking alone (Anthropic's API takes it) adds nothing.
  ASSERT_EQ(m.size(), 6);
  EXPECT_EQ(m[1].content(), "b");
  EXPECT_EQ(m[3].reasoning_content(), "t");
  EXPECT_EQ(m[3].tool_calls(0).name(), "f");
  EXPECT_EQ(m[4].role(), "tool");
  EXPECT_EQ(m[5].content(), "d");
}

TEST(AnthropicMappingTest, AFinalAssistantMessageWithTextIsContinued) {
  auto continues = [](const char* messages) {
    absl::StatusOr<GenerationSpec> spec = ParseAnthropicMessagesRequest(
        Json::parse(absl::StrCat(R"({"max_tokens": 5, "messages": )", messages, "}")), {});
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() && spec->request.chat().options().continue_final_message();
  };

  EXPECT_TRUE(continues(R"([{"role": "user", "content": "2+2?"},
                            {"role": "assistant", "content": "The answer is"}])"));
  EXPECT_TRUE(continues(R"([{"role": "user", "content": "2+2?"}, {"role": "assistant",
                            "content": [{"type": "text", "text": "The answer is"}]}])"));
  EXPECT_FALSE(continues(R"([{"role": "user", "content": "2+2?"}])"));
  EXPECT_FALSE(continues(R"([{"role": "user", "content": "2+2?"},
                             {"role": "assistant", "content": []}])"));
  EXPECT_FALSE(continues(R"([{"role": "user", "content": "2+2?"}, {"role": "assistant",
                             "content": [{"type": "tool_use", "id": "t", "name": "f"}]}])"));
}

}  // namespace
}  // namespace cairn::gateway
