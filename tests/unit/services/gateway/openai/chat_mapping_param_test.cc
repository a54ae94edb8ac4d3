// The chat and legacy completions parsers' field errors as OpenAI's API reports them: the
// field's path in the error's "param" (and first in its message), and stream_options only with
// "stream": true. The parsers' other behaviour: chat_mapping_test.cc.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/gateway/openai/chat_mapping.h"
#include "services/gateway/openai/errors.h"

namespace cairn::gateway {
namespace {

// As OpenAI's API: stream_options only with "stream": true, else a 400 naming it in "param".
TEST(ChatMappingTest, StreamOptionsNeedAStream) {
  // Both parsers read the same body: chat reads its messages, completions its prompt.
  auto body = [](const char* fields) {
    return Json::parse(absl::StrCat(
        R"({"messages": [{"role": "user", "content": "x"}], "prompt": "x")", fields, "}"));
  };
  for (const auto parse : {ParseChatCompletionRequest, ParseCompletionRequest}) {
    absl::StatusOr<GenerationSpec> absent =
        parse(body(R"(, "stream_options": {"include_usage": true})"), {});
    absl::StatusOr<GenerationSpec> off =
        parse(body(R"(, "stream": false, "stream_options": {})"), {});
    absl::StatusOr<GenerationSpec> null = parse(body(R"(, "stream_options": null)"), {});
    absl::StatusOr<GenerationSpec> on =
        parse(body(R"(, "stream": true, "stream_options": {"include_usage": true})"), {});

    for (const absl::StatusOr<GenerationSpec>& refused : {absent, off}) {
      ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
      const Json error = Json::parse(OpenAiErrorJson(refused.status()))["error"];
      EXPECT_EQ(error["param"], "stream_options");
      EXPECT_EQ(error["type"], "invalid_request_error");
      EXPECT_EQ(error["message"], "stream_options is only allowed when stream is enabled");
    }
    EXPECT_TRUE(null.ok()) << null.status();
    EXPECT_TRUE(on.ok()) << on.status();
  }
}

// As OpenAI's API: a 400 about one field names it in "param", by its path in the request.
TEST(ChatMappingTest, FieldErrorsNameTheFieldInParam) {
  struct Case {
    const char* fields;  // After "messages" (or in place of it, where they start with it).
    const char* param;
  };
  const Case chat_cases[] = {
      {R"("temperature": "hot")", "temperature"},
      {R"("temperature": -1)", "temperature"},
      {R"("max_tokens": 0)", "max_tokens"},
      {R"("stop": ["a", ""])", "stop[1]"},
      {R"("top_logprobs": 2)", "top_logprobs"},
      {R"("n": 2)", "n"},
      {R"("repetition_penalty": 0)", "repetition_penalty"},
      {R"("tools": [{"type": "function", "function": {"parameters": {}}}])",
       "tools[0].function.name"},
      {R"("tools": [{"type": "retrieval"}])", "tools[0].type"},
      {R"("tool_choice": "required")", "tool_choice"},
      {R"("response_format": {"type": "json_schema"})", "response_format.json_schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a b"}})",
       "response_format.json_schema.name"},
      {R"("functions": [{"name": "f"}])", "functions"},
      {R"("chat_template_kwargs": {"enable_thinking": 1})", "chat_template_kwargs.enable_thinking"},
  };
  for (const Case& c : chat_cases) {
    absl::StatusOr<GenerationSpec> spec = ParseChatCompletionRequest(
        Json::parse(
            absl::StrCat(R"({"messages": [{"role": "user", "content": "x"}], )", c.fields, "}")),
        {});
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.fields;
    const Json error = Json::parse(OpenAiErrorJson(spec.status()))["error"];
    EXPECT_EQ(error["param"], c.param) << c.fields;
    // The message still opens with the field's name.
    EXPECT_TRUE(absl::StartsWith(spec.status().message(), absl::StrCat(c.param, " ")))
        << spec.status();
  }
  const Case message_cases[] = {
      {R"({"model": "m"})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}, 7]})", "messages[1]"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": 5}]})",
       "messages[1].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       "messages[0].content[0].text"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0]"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {}}]}]})",
       "messages[0].tool_calls[0].function.name"},
  };
  for (const Case& c : message_cases) {
    absl::StatusOr<GenerationSpec> spec = ParseChatCompletionRequest(Json::parse(c.fields), {});
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.fields;
    EXPECT_EQ(Json::parse(OpenAiErrorJson(spec.status()))["error"]["param"], c.param) << c.fields;
  }
  // Messages are as before.
  const auto message = [](const char* body) {
    return std::string(ParseChatCompletionRequest(Json::parse(body), {}).status().message());
  };
  EXPECT_EQ(message(R"({"messages": [{"role": "user", "content": "x"}], "temperature": -1})"),
            "temperature must be between 0 and 100");
  EXPECT_EQ(message(R"({"messages": [{"role": "user", "content": 5}]})"),
            "messages[0].content must be a string or an array of parts, not integer");
}

TEST(ChatMappingTest, CompletionFieldErrorsNameTheFieldInParam) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model": "m"})", "prompt"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": ["a", "b"]})", "prompt"},
      {R"({"prompt": [1, -2]})", "prompt[1]"},
      {R"({"prompt": "x", "echo": true})", "echo"},
      {R"({"prompt": "x", "logprobs": 99})", "logprobs"},
      {R"({"prompt": "x", "cairn": {"stable_boundary": -1}})", "cairn.stable_boundary"},
  };
  for (const auto& [body, param] : cases) {
    absl::StatusOr<GenerationSpec> spec = ParseCompletionRequest(Json::parse(body), {});
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(Json::parse(OpenAiErrorJson(spec.status()))["error"]["param"], param) << body;
  }
  // Checked once the model's vocabulary is known, naming the entry too.
  absl::StatusOr<GenerationSpec> ids =
      ParseCompletionRequest(Json::parse(R"({"prompt": [1, 70], "stop_token_ids": [2, 90]})"), {});
  ASSERT_TRUE(ids.ok()) << ids.status();
  const absl::Status prompt = CheckAgainstVocabulary(*ids, 50);
  EXPECT_EQ(prompt.message(), "prompt[1] = 70 is not a token id (vocabulary size 50)");
  EXPECT_EQ(Json::parse(OpenAiErrorJson(prompt))["error"]["param"], "prompt[1]");
  const absl::Status stop = CheckAgainstVocabulary(*ids, 80);
  EXPECT_EQ(Json::parse(OpenAiErrorJson(stop))["error"]["param"], "stop_token_ids[1]") << stop;
}

}  // namespace
}  // namespace cairn::gateway
