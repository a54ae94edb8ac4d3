#include "services/gateway/openai/chat_mapping.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn::gateway {
namespace {

infer_v1::Finished MakeFinished(infer_v1::Finished::Reason reason) {
  infer_v1::Finished f;
  f.set_reason(reason);
  f.set_prompt_tokens(100);
  f.set_completion_tokens(5);
  f.set_cached_tokens(96);
  f.mutable_cache()->set_restored_from(infer_v1::CacheResult::TIER_LIVE);
  f.mutable_cache()->set_restored_depth(96);
  f.mutable_cache()->set_prefilled_tokens(4);
  f.mutable_cache()->set_miss_reason("divergence at token 96");
  return f;
}

GenerationSpec MustParse(const char* body, RequestLimits limits = {}) {
  absl::StatusOr<GenerationSpec> spec = ParseChatCompletionRequest(Json::parse(body), limits);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? std::move(*spec) : GenerationSpec();
}

std::string ErrorOf(const char* body) {
  absl::StatusOr<GenerationSpec> spec = ParseChatCompletionRequest(Json::parse(body), {});
  EXPECT_FALSE(spec.ok()) << body;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(spec.status().message());
}

TEST(ChatMappingTest, RequestMapsToAChatPromptWithSampling) {
  GenerationSpec spec = MustParse(R"({"model": "m", "stream": true,
      "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
      "temperature": 0, "top_k": -1, "seed": 3, "stop": "END", "max_tokens": 10})");

  EXPECT_EQ(spec.model, "m");
  EXPECT_TRUE(spec.stream);
  const auto& chat = spec.request.chat();
  ASSERT_EQ(chat.messages_size(), 2);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(1).content(), "U");
  // The client's own values, present (greedy and top_k off are not left to the model).
  EXPECT_TRUE(spec.request.sampling().has_temperature());
  EXPECT_FLOAT_EQ(spec.request.sampling().temperature(), 0.0f);
  EXPECT_TRUE(spec.request.sampling().has_top_k());
  EXPECT_EQ(spec.request.sampling().top_k(), 0u);
  EXPECT_EQ(spec.request.sampling().seed(), 3u);
  EXPECT_EQ(spec.request.sampling().stop(0), "END");
  EXPECT_EQ(spec.request.sampling().max_tokens(), 10u);
  EXPECT_TRUE(spec.request.parse_output());
  EXPECT_FALSE(chat.options().has_enable_thinking());
}

// A client replaying a conversation sends an OpenAI refusal back, as a refusal part of the
// assistant's content or as the message's "refusal": it is what the assistant said.
TEST(ChatMappingTest, AnAssistantsRefusalIsItsText) {
  GenerationSpec spec = MustParse(R"({"messages": [
      {"role": "user", "content": "U"},
      {"role": "assistant", "content": [{"type": "text", "text": "Well."},
                                        {"type": "refusal", "refusal": "I can't."}]},
      {"role": "user", "content": "V"},
      {"role": "assistant", "content": null, "refusal": "No."},
      {"role": "user", "content": "W"}]})");

  const auto& m = spec.request.chat().messages();
  ASSERT_EQ(m.size(), 5);
  EXPECT_EQ(m[1].content(), "Well.\nI can't.");
  EXPECT_EQ(m[3].content(), "No.");
  EXPECT_NE(ErrorOf(R"({"messages": [{"role": "user",
                        "content": [{"type": "refusal", "refusal": "x"}]}]})")
                .find("messages[0].content[0] is a refusal part, which only an assistant"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"messages": [{"role": "user", "content": "x"},
                        {"role": "assistant", "content": [{"type": "refusal"}]}]})")
                .find("messages[1].content[0].refusal is required"),
            std::string::npos);
}

// The deprecated function-calling fields would otherwise be ignored, and their client get no
// calls: each is a 400 naming it and its replacement.
TEST(ChatMappingTest, DeprecatedFunctionCallingIsRefusedNamingTheField) {
  EXPECT_THAT(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}],
                          "functions": [{"name": "f", "parameters": {}}]})"),
              ::testing::AllOf(::testing::StartsWith("functions is the deprecated form of tools"),
                               ::testing::HasSubstr("in tools")));
  EXPECT_THAT(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}],
                          "function_call": "auto"})"),
              ::testing::StartsWith("function_call is the deprecated form of tool_choice"));
  EXPECT_THAT(ErrorOf(R"({"messages": [{"role": "user", "content": "x"},
                          {"role": "assistant", "content": null,
                           "function_call": {"name": "f", "arguments": "{}"}}]})"),
              ::testing::StartsWith("messages[1].function_call is the deprecated form of "
                                    "tool_calls"));
  EXPECT_THAT(ErrorOf(R"({"messages": [{"role": "user", "content": "x"},
                          {"role": "function", "name": "f", "content": "42"}]})"),
              ::testing::AllOf(::testing::StartsWith("messages[1].role \"function\" is the "
                                                     "deprecated role"),
                               ::testing::HasSubstr("role \"tool\"")));
  // Null and empty forms ask for nothing (SDKs serialize an unset field as null).
  GenerationSpec spec = MustParse(R"({"messages": [{"role": "user", "content": "x"},
      {"role": "assistant", "content": "y", "function_call": null},
      {"role": "user", "content": "z"}], "functions": [], "function_call": null})");
  EXPECT_EQ(spec.request.chat().messages_size(), 3);
}

// OpenAI's API and vLLM take a whole number written as a float where an integer is due.
TEST(ChatMappingTest, IntegerFieldsTakeWholeFloats) {
  GenerationSpec spec = MustParse(R"({"messages": [{"role": "user", "content": "U"}],
      "max_tokens": 100.0, "n": 1.0, "top_k": 40.0, "seed": 5.0, "logprobs": true,
      "top_logprobs": 2.0})");
  absl::StatusOr<GenerationSpec> completion = ParseCompletionRequest(
      Json::parse(R"({"prompt": [1.0, 2], "max_tokens": 7.0, "logprobs": 1.0})"), {});

  EXPECT_EQ(spec.request.sampling().max_tokens(), 100u);
  EXPECT_EQ(spec.request.sampling().top_k(), 40u);
  EXPECT_EQ(spec.request.sampling().seed(), 5u);
  EXPECT_EQ(spec.top_logprobs, 2u);
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_THAT(completion->request.token_ids().ids(), ::testing::ElementsAre(1u, 2u));
  EXPECT_EQ(completion->request.sampling().max_tokens(), 7u);
  EXPECT_EQ(completion->top_logprobs, 1u);
  EXPECT_NE(ErrorOf(R"({"messages": [{"role": "user", "content": "U"}], "max_tokens": 100.5})")
                .find("max_tokens must be an integer"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"messages": [{"role": "user", "content": "U"}], "seed": 1e300})")
                .find("seed must be an integer"),
            std::string::npos);
}

TEST(ChatMappingTest, TextPartsAreJoinedWithNewlines) {
  GenerationSpec spec = MustParse(R"({"messages": [
      {"role": "system", "content": [{"type": "text", "text": "Rules."}, {"type": "text", "text": "More."}]},
      {"role": "user", "content": [{"type": "text", "text": "Look:"}, "bare", {"type": "input_text", "text": "end"}]},
      {"role": "user", "content": [{"type": "text", "text": "alone"}]}]})");

  const auto& m = spec.request.chat().messages();
  ASSERT_EQ(m.size(), 3);
  EXPECT_EQ(m[0].content(), "Rules.\nMore.");
  EXPECT_EQ(m[1].content(), "Look:\nbare\nend");
  EXPECT_EQ(m[2].content(), "alone");
}

// A content's joined text is bounded like one string field, whatever its parts: bare strings
// (which some clients send) count as text parts do.
TEST(ChatMappingTest, JoinedContentIsBoundedAlsoWithBareStringParts) {
  RequestLimits limits;
  limits.max_string_bytes = 8;
  for (const char* content :
       {R"([{"type": "text", "text": "abcdef"}, {"type": "text", "text": "ghi"}])",
        R"(["abcdef", "ghi"])", R"(["abcdef", {"type": "text", "text": "g"}, "hi"])"}) {
    const Json body = {{"messages", {{{"role", "user"}, {"content", Json::parse(content)}}}}};
    absl::StatusOr<GenerationSpec> spec = ParseChatCompletionRequest(body, limits);
    ASSERT_FALSE(spec.ok()) << content;
    EXPECT_EQ(spec.status().message(), "messages[0].content is longer than 8 bytes") << content;
  }
}

TEST(ChatMappingTest, DefaultsLeaveTheDaemonToDecide) {
  GenerationSpec spec = MustParse(R"({"messages": [{"role": "user", "content": "U"}]})");

  // The knobs not given are left to the daemon: the model's generation_config.json, else the
  // API's defaults (temperature 1).
  EXPECT_TRUE(spec.request.sampling().model_defaults());
  EXPECT_FALSE(spec.request.sampling().has_temperature());
  EXPECT_FALSE(spec.request.sampling().has_top_p());
  EXPECT_FALSE(spec.request.sampling().has_top_k());
  EXPECT_FALSE(spec.request.sampling().has_seed());
  // Absent, not 0 (which the daemon refuses): up to the context's end.
  EXPECT_FALSE(spec.request.sampling().has_max_tokens());
  EXPECT_EQ(spec.request.sampling().logprobs(), 0u);
}

// A function's "strict" travels beside its JSON (which the template renders as the client
// sent it, without it); absent or null is false, and another type a 400 naming it.
TEST(ChatMappingTest, StrictFunctionsAreMarkedBesideTheirJson) {
  GenerationSpec spec = MustParse(R"({"messages": [{"role": "user", "content": "U"}],
      "tools": [{"type": "function", "function": {"name": "f", "strict": true, "parameters": {}}},
                {"type": "function", "function": {"name": "g", "strict": null}},
                {"type": "function", "function": {"name": "h"}}]})");

  ASSERT_EQ(spec.request.chat().tools_size(), 3);
  EXPECT_TRUE(spec.request.chat().tools(0).strict());
  EXPECT_FALSE(spec.request.chat().tools(1).strict());
  EXPECT_FALSE(spec.request.chat().tools(2).strict());
  EXPECT_FALSE(Json::parse(spec.request.chat().tools(0).json())["function"].contains("strict"));
  const std::string error = ErrorOf(R"({"messages": [{"role": "user", "content": "U"}],
      "tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]})");
  EXPECT_NE(error.find("tools[0].function.strict"), std::string::npos) << error;
}

TEST(ChatMappingTest, ToolChoiceObjectNamesTheFunction) {
  GenerationSpec spec = MustParse(R"({"messages": [{"role": "user", "content": "U"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
      "tool_choice": {"type": "function", "function": {"name": "f"}}})");

  EXPECT_EQ(spec.request.chat().tool_choice(), "f");
  EXPECT_EQ(Json::parse(spec.request.chat().tools(0).json())["function"]["name"], "f");
}

// parallel_tool_calls false: one call at most (the daemon ends the turn after it).
TEST(ChatMappingTest, ParallelToolCallsFalseAsksForOneCall) {
  const std::string head = R"({"messages": [{"role": "user", "content": "U"}],
      "tools": [{"type": "function", "function": {"name": "f"}}])";
  EXPECT_TRUE(MustParse((head + R"(, "parallel_tool_calls": false})").c_str())
                  .request.chat()
                  .single_tool_call());
  EXPECT_FALSE(MustParse((head + R"(, "parallel_tool_calls": true})").c_str())
                   .request.chat()
                   .single_tool_call());
  EXPECT_FALSE(MustParse((head + "}").c_str()).request.chat().single_tool_call());
  const std::string error = ErrorOf((head + R"(, "parallel_tool_calls": "no"})").c_str());
  EXPECT_NE(error.find("parallel_tool_calls"), std::string::npos) << error;
}

// A forced call the daemon could not serve is refused here, naming the client's field.
TEST(ChatMappingTest, ForcedToolChoiceNeedsTheToolItNames) {
  const std::string none = ErrorOf(R"({"messages": [{"role": "user", "content": "U"}],
      "tool_choice": "required"})");
  const std::string unknown = ErrorOf(R"({"messages": [{"role": "user", "content": "U"}],
      "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}})");

  EXPECT_EQ(none.rfind("tool_choice", 0), 0u) << none;
  EXPECT_NE(none.find("no tools"), std::string::npos) << none;
  EXPECT_EQ(unknown.rfind("tool_choice", 0), 0u) << unknown;
  EXPECT_NE(unknown.find("\"g\""), std::string::npos) << unknown;
  // A function named as a mode, a name the call's opening cannot carry, a prefill.
  for (const char* body : {R"({"messages": [{"role": "user", "content": "U"}],
          "tools": [{"type": "function", "function": {"name": "none"}}],
          "tool_choice": {"type": "function", "function": {"name": "none"}}})",
                           R"({"messages": [{"role": "user", "content": "U"}],
          "tools": [{"type": "function", "function": {"name": "a>b"}}],
          "tool_choice": {"type": "function", "function": {"name": "a>b"}}})",
                           R"({"messages": [{"role": "user", "content": "U"},
          {"role": "assistant", "content": "Sure"}], "continue_final_message": true,
          "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": "required"})"}) {
    const std::string error = ErrorOf(body);
    EXPECT_EQ(error.rfind("tool_choice", 0), 0u) << error;
  }
  EXPECT_EQ(MustParse(R"({"messages": [{"role": "user", "content": "U"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"})")
                .request.chat()
                .tool_choice(),
            "required");
}

TEST(ChatMappingTest, ContinuingTheFinalMessageIsOptIn) {
  const char* messages = R"("messages": [{"role": "user", "content": "U"},
                                         {"role": "assistant", "content": "The answer is"}])";

  GenerationSpec fresh = MustParse(absl::StrCat("{", messages, "}").c_str());
  GenerationSpec continued =
      MustParse(absl::StrCat("{", messages, R"(, "continue_final_message": true,
                                      "add_generation_prompt": false})")
                    .c_str());

  EXPECT_FALSE(fresh.request.chat().options().continue_final_message());
  EXPECT_TRUE(continued.request.chat().options().continue_final_message());
}

TEST(ChatMappingTest, ErrorsNameTheField) {
  EXPECT_NE(ErrorOf(R"({})").find("messages is required"), std::string::npos);
  EXPECT_NE(
      ErrorOf(R"({"messages": [{"role": "user", "content": 5}]})").find("messages[0].content"),
      std::string::npos);
  EXPECT_NE(
      ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "n": 3})").find("n must be 1"),
      std::string::npos);
  EXPECT_NE(
      ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "stop": [""]})").find("stop[0]"),
      std::string::npos);
  EXPECT_NE(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})")
                .find("logprobs"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})")
                .find("media"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"messages": [{"role": "user", "content": "x"}],
                        "response_format": {"type": "xml"}})")
                .find("response_format.type"),
            std::string::npos);
}

TEST(ChatMappingTest, ResponseFormatsMapToTheDaemonsResponseFormat) {
  GenerationSpec text = MustParse(R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "text"}})");
  GenerationSpec object = MustParse(R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_object"}})");
  GenerationSpec schema = MustParse(R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "answer-1",
          "description": "d", "strict": true,
          "schema": {"type": "object", "properties": {"n": {"type": "integer"}},
                     "required": ["n"]}}}})");
  GenerationSpec no_schema = MustParse(R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "any"}}})");

  EXPECT_FALSE(text.request.has_response_format());
  EXPECT_TRUE(object.request.response_format().json_object());
  ASSERT_EQ(schema.request.response_format().format_case(), infer_v1::ResponseFormat::kJsonSchema);
  EXPECT_EQ(Json::parse(schema.request.response_format().json_schema()),
            Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}},
                            "required": ["n"]})"));
  // No schema: the empty schema, any JSON value.
  EXPECT_EQ(no_schema.request.response_format().json_schema(), "{}");
  // The answer is parsed as content (the daemon turns reasoning and tool calls off for it).
  EXPECT_TRUE(schema.request.parse_output());
}

TEST(ChatMappingTest, ResponseFormatErrorsNameTheField) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  auto error = [&](const std::string& rest) {
    return std::string(ParseChatCompletionRequest(Json::parse("{" + user + ", " + rest + "}"), {})
                           .status()
                           .message());
  };

  EXPECT_NE(error(R"("response_format": {"type": "json_schema"})")
                .find("response_format.json_schema is required"),
            std::string::npos);
  EXPECT_NE(error(R"("response_format": {"type": "json_schema", "json_schema": {}})")
                .find("response_format.json_schema.name is required"),
            std::string::npos);
  EXPECT_NE(error(R"("response_format": {"type": "json_schema",
                      "json_schema": {"name": "a b"}})")
                .find("response_format.json_schema.name"),
            std::string::npos);
  EXPECT_NE(error(R"("response_format": {"type": "json_schema",
                      "json_schema": {"name": "a", "schema": "{}"}})")
                .find("response_format.json_schema.schema"),
            std::string::npos);
  EXPECT_NE(error(R"("response_format": {"type": "json_schema",
                      "json_schema": {"name": "a", "strict": "yes"}})")
                .find("response_format.json_schema.strict"),
            std::string::npos);
  EXPECT_NE(error(R"("response_format": "json_object")").find("response_format"),
            std::string::npos);
  // A format constrains the answer from its first token: not a forced call, a continued
  // message or an answer past EOS.
  EXPECT_NE(error(R"("response_format": {"type": "json_object"},
                      "tools": [{"type": "function", "function": {"name": "f"}}],
                      "tool_choice": "required")")
                .find("response_format cannot be combined with a tool_choice"),
            std::string::npos);
  EXPECT_NE(error(R"("response_format": {"type": "json_object"},
                      "continue_final_message": true)")
                .find("continue_final_message"),
            std::string::npos);
  EXPECT_NE(
      error(R"("response_format": {"type": "json_object"}, "ignore_eos": true)").find("ignore_eos"),
      std::string::npos);
}

TEST(ChatMappingTest, CompletionsTakeAResponseFormatToo) {
  absl::StatusOr<GenerationSpec> spec = ParseCompletionRequest(
      Json::parse(R"({"prompt": "x", "response_format": {"type": "json_object"}})"), {});
  absl::Status bad = ParseCompletionRequest(Json::parse(R"({"prompt": "x",
      "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})"),
                                            {})
                         .status();

  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->request.response_format().json_object());
  EXPECT_NE(bad.message().find("response_format.json_schema.name"), std::string::npos) << bad;
}

// A fill-in-the-middle suffix is refused as unsupported whatever its length (an empty one asks
// for nothing).
TEST(ChatMappingTest, ACompletionsSuffixIsRefusedAsUnsupported) {
  absl::Status long_suffix =
      ParseCompletionRequest(Json::parse(R"({"prompt": "def f(", "suffix": "):\n  pass"})"), {})
          .status();
  absl::StatusOr<GenerationSpec> empty =
      ParseCompletionRequest(Json::parse(R"({"prompt": "x", "suffix": ""})"), {});

  EXPECT_EQ(long_suffix.message(), "suffix is not supported") << long_suffix;
  EXPECT_TRUE(empty.ok()) << empty.status();
}

TEST(ChatMappingTest, StopStringsTheDaemonWouldRefuseAreRefusedNamingTheClientsField) {
  // cairn-infer refuses stop strings over 256 bytes naming its own `sampling.stop[0]`.
  Json body = Json::parse(R"({"messages": [{"role": "user", "content": "x"}]})");
  body["stop"] = std::string(kInferMaxStopBytes, 's');
  ASSERT_TRUE(ParseChatCompletionRequest(body, {}).ok());

  body["stop"] = std::string(kInferMaxStopBytes + 1, 's');
  absl::Status one = ParseChatCompletionRequest(body, {}).status();
  body["stop"] = Json::array({"END", std::string(kInferMaxStopBytes + 1, 's')});
  absl::Status listed = ParseChatCompletionRequest(body, {}).status();
  Json completion = Json::parse(R"({"prompt": "x"})");
  completion["stop"] = std::string(kInferMaxStopBytes + 1, 's');
  absl::Status legacy = ParseCompletionRequest(completion, {}).status();

  EXPECT_EQ(one.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(one.message(), "stop is longer than 256 bytes");
  EXPECT_EQ(listed.message(), "stop[1] is longer than 256 bytes");
  EXPECT_EQ(legacy.message(), "stop is longer than 256 bytes");
}

TEST(ChatMappingTest, LongCacheKeyIsCutOnACharacterBoundary) {
  // 127 ASCII bytes, then a 3-byte character across the 128-byte cut: the label travels in a
  // proto3 string, which the daemon refuses to parse unless it is valid UTF-8.
  const std::string key = std::string(127, 'k') + "\xe4\xb8\xad\xe6\x96\x87";
  Json body = Json::parse(R"({"messages": [{"role": "user", "content": "U"}]})");
  body["prompt_cache_key"] = key;

  absl::StatusOr<GenerationSpec> spec = ParseChatCompletionRequest(body, {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->request.conversation(), std::string(127, 'k'));
}

TEST(ChatMappingTest, ServerCapBoundsMaxTokens) {
  RequestLimits limits;
  limits.max_output_tokens = 64;

  GenerationSpec spec = MustParse(
      R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 32000,
          "max_tokens": 1})",
      limits);
  GenerationSpec none_asked =
      MustParse(R"({"messages": [{"role": "user", "content": "x"}]})", limits);
  GenerationSpec within =
      MustParse(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 20})", limits);

  // The cap, where it applies, is a ceiling the context's room may lower; a client's own
  // value within it is the client's (refused where the context leaves less, as OpenAI does).
  EXPECT_EQ(spec.request.sampling().max_tokens(), 64u);
  EXPECT_TRUE(spec.request.sampling().max_tokens_is_ceiling());
  EXPECT_EQ(none_asked.request.sampling().max_tokens(), 64u);
  EXPECT_TRUE(none_asked.request.sampling().max_tokens_is_ceiling());
  EXPECT_EQ(within.request.sampling().max_tokens(), 20u);
  EXPECT_FALSE(within.request.sampling().max_tokens_is_ceiling());
}

TEST(ChatMappingTest, NonStreamedBodyGoldenShape) {
  GenerationSpec spec = MustParse(R"({"messages": [{"role": "user", "content": "x"}]})");
  auto formatter = spec.make_formatter("served");
  infer_v1::Delta d;
  d.set_text("Hi");
  formatter->Collect(d);

  Json body = formatter->Body(MakeFinished(infer_v1::Finished::REASON_STOP));

  body.erase("id");
  body.erase("created");
  Json expected = Json::parse(R"({
    "object": "chat.completion", "model": "served",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"},
                 "finish_reason": "stop", "logprobs": null}],
    "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
              "prompt_tokens_details": {"cached_tokens": 96},
              "completion_tokens_details": {"reasoning_tokens": 0}},
    "cairn": {"tier": "live", "depth": 96, "prefilled_tokens": 4, "restore_ms": 0.0,
              "capture_ms": 0.0, "ttft_ms": 0.0, "captures": 0, "cache_available": false,
              "miss_reason": "divergence at token 96"}})");
  EXPECT_EQ(body, expected) << body.dump(2);
}

TEST(ChatMappingTest, StreamedChunksGoldenShape) {
  GenerationSpec spec = MustParse(R"({"stream": true, "logprobs": true, "top_logprobs": 1,
      "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "x"}]})");
  auto formatter = spec.make_formatter("served");
  infer_v1::Delta d;
  d.set_text("A");
  auto* lp = d.add_logprobs();
  lp->set_text("A");
  lp->set_token_bytes("A");
  lp->set_logprob(-0.5f);
  auto* alt = lp->add_top();
  alt->set_text("B");
  alt->set_logprob(-1.0f);
  infer_v1::Delta tool;
  auto* tc = tool.add_tool_calls();
  tc->set_index(0);
  tc->set_id("call_1");
  tc->set_name("f");
  tc->set_arguments_delta("{}");

  std::string first = formatter->StreamStarted(infer_v1::Started());
  std::string text = formatter->StreamDelta(d);
  std::string call = formatter->StreamDelta(tool);
  std::string last = formatter->StreamFinished(MakeFinished(infer_v1::Finished::REASON_TOOL_CALLS));

  auto data = [](const std::string& sse) {
    EXPECT_EQ(sse.rfind("data: ", 0), 0u) << sse;
    return Json::parse(sse.substr(6, sse.find("\n\n") - 6));
  };
  EXPECT_EQ(data(first)["choices"][0]["delta"],
            Json::parse(R"({"role":"assistant","content":""})"));
  Json t = data(text)["choices"][0];
  EXPECT_EQ(t["delta"]["content"], "A");
  EXPECT_EQ(t["logprobs"]["content"][0]["top_logprobs"][0]["token"], "B");
  EXPECT_EQ(t["logprobs"]["content"][0]["bytes"], Json::parse("[65]"));
  EXPECT_TRUE(t["logprobs"]["content"][0]["top_logprobs"][0]["bytes"].is_null());
  Json calls = data(call)["choices"][0]["delta"]["tool_calls"];
  EXPECT_THAT(calls[0]["id"].get<std::string>(), ::testing::MatchesRegex("call_[0-9a-f]{24}"));
  calls[0].erase("id");
  EXPECT_EQ(calls, Json::parse(R"([{"index":0,"type":"function",
                                    "function":{"name":"f","arguments":"{}"}}])"));
  EXPECT_EQ(data(last)["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_NE(last.find("\"usage\":{"), std::string::npos);
  EXPECT_EQ(last.substr(last.size() - 14), "data: [DONE]\n\n");
}

// A delta of tool call `index` as the daemon sends it: its first carries the daemon's id
// ("call_<index>", the same in every turn) and name, later ones only arguments.
infer_v1::Delta ToolCallDelta(uint32_t index, bool first, const std::string& arguments) {
  infer_v1::Delta d;
  infer_v1::ToolCallDelta* tc = d.add_tool_calls();
  tc->set_index(index);
  if (first) {
    tc->set_id(absl::StrCat("call_", index));
    tc->set_name("f");
  }
  tc->set_arguments_delta(arguments);
  return d;
}

// The ids of the tool calls in an OpenAI SSE chunk.
std::vector<std::string> StreamedCallIds(const std::string& sse) {
  std::vector<std::string> ids;
  const Json chunk = Json::parse(sse.substr(6, sse.find("\n\n") - 6));
  for (const Json& c : chunk["choices"][0]["delta"]["tool_calls"]) {
    if (c.contains("id")) ids.push_back(c["id"]);
  }
  return ids;
}

TEST(ChatMappingTest, ToolCallIdsAreRandomPerCallAndTheSameWithinAResponse) {
  GenerationSpec spec =
      MustParse(R"({"stream": true, "messages": [{"role": "user", "content": "x"}]})");
  auto turn1 = spec.make_formatter("served");
  auto turn2 = spec.make_formatter("served");
  infer_v1::Finished f = MakeFinished(infer_v1::Finished::REASON_TOOL_CALLS);
  for (int i = 0; i < 2; ++i) {
    infer_v1::ToolCall* call = f.add_tool_calls();
    call->set_id(absl::StrCat("call_", i));
    call->set_name("f");
    call->set_arguments_json("{}");
  }

  const std::vector<std::string> first =
      StreamedCallIds(turn1->StreamDelta(ToolCallDelta(0, true, "{")));
  const std::vector<std::string> rest =
      StreamedCallIds(turn1->StreamDelta(ToolCallDelta(0, false, "}")));
  const std::vector<std::string> second =
      StreamedCallIds(turn1->StreamDelta(ToolCallDelta(1, true, "{}")));
  const std::vector<std::string> next_turn =
      StreamedCallIds(turn2->StreamDelta(ToolCallDelta(0, true, "{}")));
  const Json body = turn1->Body(f)["choices"][0]["message"]["tool_calls"];

  ASSERT_EQ(first.size(), 1u);
  EXPECT_THAT(first[0], ::testing::MatchesRegex("call_[0-9a-f]{24}"));
  EXPECT_TRUE(rest.empty());  // Later deltas of a call carry no id, as OpenAI's.
  ASSERT_EQ(second.size(), 1u);
  EXPECT_THAT(second[0], ::testing::MatchesRegex("call_[0-9a-f]{24}"));
  EXPECT_NE(second[0], first[0]);
  ASSERT_EQ(next_turn.size(), 1u);
  EXPECT_NE(next_turn[0], first[0]);  // The daemon's call_0 again, another id.
  EXPECT_EQ(body[0]["id"], first[0]);
  EXPECT_EQ(body[1]["id"], second[0]);
}

// A delta of one token "A" (logprob -0.5) with the three alternatives B, C, D: the daemon is
// asked for at least one alternative, so it may send more than the client asked for.
infer_v1::Delta DeltaWithThreeAlternatives() {
  infer_v1::Delta d;
  d.set_text("A");
  auto* lp = d.add_logprobs();
  lp->set_text("A");
  lp->set_logprob(-0.5f);
  for (const char* alt : {"B", "C", "D"}) {
    auto* a = lp->add_top();
    a->set_text(alt);
    a->set_logprob(-1.0f);
  }
  return d;
}

TEST(ChatMappingTest, TopLogprobsHoldWhatWasAskedForAndNoMore) {
  for (const auto& [fields, expected] :
       std::vector<std::pair<std::string, size_t>>{{R"("logprobs": true)", 0},
                                                   {R"("logprobs": true, "top_logprobs": 0)", 0},
                                                   {R"("logprobs": true, "top_logprobs": 2)", 2}}) {
    const std::string body = R"({"messages": [{"role": "user", "content": "x"}], )" + fields + "}";
    GenerationSpec spec = MustParse(body.c_str());
    auto formatter = spec.make_formatter("served");
    const infer_v1::Delta d = DeltaWithThreeAlternatives();

    const std::string chunk = formatter->StreamDelta(d);
    formatter->Collect(d);
    Json body_json = formatter->Body(MakeFinished(infer_v1::Finished::REASON_STOP));

    Json streamed = Json::parse(chunk.substr(6, chunk.find("\n\n") - 6));
    for (const Json& content : {streamed["choices"][0]["logprobs"]["content"][0],
                                body_json["choices"][0]["logprobs"]["content"][0]}) {
      EXPECT_EQ(content["token"], "A") << fields;
      EXPECT_FLOAT_EQ(content["logprob"].get<float>(), -0.5f) << fields;
      ASSERT_TRUE(content["top_logprobs"].is_array()) << fields;
      EXPECT_EQ(content["top_logprobs"].size(), expected) << fields;
    }
  }
}

// The alternatives asked for, and the sampled token ("A", not among them) as OpenAI's legacy
// completions return it: up to logprobs + 1 entries.
TEST(ChatMappingTest, LegacyLogprobsHoldWhatWasAskedForAndTheSampledToken) {
  for (const auto& [asked, expected] : std::vector<std::pair<int, size_t>>{{0, 1}, {2, 3}}) {
    absl::StatusOr<GenerationSpec> spec = ParseCompletionRequest(
        Json::parse(absl::StrCat(R"({"prompt": "x", "logprobs": )", asked, "}")), {});
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto formatter = spec->make_formatter("served");
    const infer_v1::Delta d = DeltaWithThreeAlternatives();

    const std::string chunk = formatter->StreamDelta(d);
    formatter->Collect(d);
    Json body = formatter->Body(MakeFinished(infer_v1::Finished::REASON_STOP));

    Json streamed = Json::parse(chunk.substr(6, chunk.find("\n\n") - 6));
    for (const Json& lps : {streamed["choices"][0]["logprobs"], body["choices"][0]["logprobs"]}) {
      EXPECT_EQ(lps["tokens"], Json::parse(R"(["A"])")) << asked;
      EXPECT_FLOAT_EQ(lps["token_logprobs"][0].get<float>(), -0.5f) << asked;
      ASSERT_TRUE(lps["top_logprobs"][0].is_object()) << asked;
      EXPECT_EQ(lps["top_logprobs"][0].size(), expected) << asked;
      EXPECT_FLOAT_EQ(lps["top_logprobs"][0]["A"].get<float>(), -0.5f) << asked;
    }
  }
}

// JSON has no infinity or NaN: a token of zero probability (-inf) or an undefined one (NaN)
// is written as -9999.0, as OpenAI writes impossible tokens, never as null (SDKs read numbers).
TEST(ChatMappingTest, LogprobsWithoutAFiniteValueAreWrittenAsOpenAisImpossibleToken) {
  infer_v1::Delta d;
  d.set_text("A");
  auto* lp = d.add_logprobs();
  lp->set_text("A");
  lp->set_logprob(-std::numeric_limits<float>::infinity());
  auto* alt = lp->add_top();
  alt->set_text("B");
  alt->set_logprob(std::numeric_limits<float>::quiet_NaN());
  GenerationSpec chat = MustParse(R"({"messages": [{"role": "user", "content": "x"}],
                                      "logprobs": true, "top_logprobs": 1})");
  absl::StatusOr<GenerationSpec> completion =
      ParseCompletionRequest(Json::parse(R"({"prompt": "x", "logprobs": 1})"), {});
  ASSERT_TRUE(completion.ok()) << completion.status();
  auto chat_formatter = chat.make_formatter("served");
  auto completion_formatter = completion->make_formatter("served");

  const std::string chat_chunk = chat_formatter->StreamDelta(d);
  const std::string completion_chunk = completion_formatter->StreamDelta(d);
  chat_formatter->Collect(d);
  completion_formatter->Collect(d);
  const std::string chat_body =
      DumpJson(chat_formatter->Body(MakeFinished(infer_v1::Finished::REASON_STOP)));
  const std::string completion_body =
      DumpJson(completion_formatter->Body(MakeFinished(infer_v1::Finished::REASON_STOP)));

  for (const std::string& text : {chat_chunk.substr(6, chat_chunk.find("\n\n") - 6), chat_body}) {
    const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << text;
    const Json& content = j["choices"][0]["logprobs"]["content"][0];
    EXPECT_EQ(content["logprob"], Json(-9999.0)) << text;
    EXPECT_EQ(content["top_logprobs"][0]["logprob"], Json(-9999.0)) << text;
  }
  for (const std::string& text :
       {completion_chunk.substr(6, completion_chunk.find("\n\n") - 6), completion_body}) {
    const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << text;
    const Json& lps = j["choices"][0]["logprobs"];
    EXPECT_EQ(lps["token_logprobs"][0], Json(-9999.0)) << text;
    EXPECT_EQ(lps["top_logprobs"][0]["A"], Json(-9999.0)) << text;
    EXPECT_EQ(lps["top_logprobs"][0]["B"], Json(-9999.0)) << text;
  }
}

TEST(ChatMappingTest, CompletionPromptAsTokenIds) {
  absl::StatusOr<GenerationSpec> spec =
      ParseCompletionRequest(Json::parse(R"({"prompt": [[5, 6]], "logprobs": 2})"), {});

  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->request.token_ids().ids_size(), 2);
  EXPECT_EQ(spec->request.token_ids().ids(1), 6u);
  EXPECT_EQ(spec->request.sampling().logprobs(), 2u);
  EXPECT_TRUE(CheckAgainstVocabulary(*spec, 7).ok());
  EXPECT_EQ(CheckAgainstVocabulary(*spec, 6).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatMappingTest, CompletionExtensionsForReplayingAgents) {
  absl::StatusOr<GenerationSpec> spec =
      ParseCompletionRequest(Json::parse(R"({"prompt": [1, 2, 3, 4], "return_token_ids": true,
                      "prompt_cache_key": "session-7",
                      "cairn": {"stable_boundary": 3, "shared_boundary": 2}})"),
                             {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->request.conversation(), "session-7");
  EXPECT_EQ(spec->request.stable_boundary(), 3u);
  EXPECT_EQ(spec->request.shared_boundary(), 2u);
  auto formatter = spec->make_formatter("served");
  infer_v1::Delta d;
  d.add_token_ids(42);  // Held-back text: no text yet, but the id is reported.
  infer_v1::Delta e;
  e.add_token_ids(43);
  e.set_text("hi");
  formatter->Collect(d);
  formatter->Collect(e);
  Json body = formatter->Body(MakeFinished(infer_v1::Finished::REASON_LENGTH));
  EXPECT_EQ(body["choices"][0]["token_ids"], Json::parse("[42, 43]"));
  std::string chunk = formatter->StreamDelta(d);
  EXPECT_NE(chunk.find("\"token_ids\":[42]"), std::string::npos) << chunk;

  // A key of any accepted length becomes a label the daemon takes (it refuses labels over 256
  // bytes, naming a "conversation" field the client never sent).
  Json long_key = Json::parse(R"({"prompt": [1]})");
  long_key["prompt_cache_key"] = std::string(1000, 'k');
  absl::StatusOr<GenerationSpec> cut = ParseCompletionRequest(long_key, {});
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->request.conversation(), std::string(128, 'k'));

  absl::StatusOr<GenerationSpec> bad = ParseCompletionRequest(
      Json::parse(R"({"prompt": [1], "cairn": {"stable_boundary": -1}})"), {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cairn.stable_boundary"), std::string::npos)
      << bad.status();
}

// Media in the newest user message is refused; in a tool result or an earlier message (the
// history a client resends every turn) it stands as a placeholder.
TEST(ChatMappingTest, MediaIsRefusedInTheNewestUserMessageOnly) {
  const Json image = Json::parse(R"({"type": "image_url", "image_url": {"url": "data:,"}})");
  Json newest = {{"messages", {{{"role", "user"}, {"content", {image}}}}}};
  Json history = {{"messages",
                   {{{"role", "user"}, {"content", {image}}},
                    {{"role", "assistant"}, {"content", "I cannot see it."}},
                    {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", {image}}},
                    {{"role", "user"}, {"content", "go on"}}}}};

  absl::StatusOr<GenerationSpec> refused = ParseChatCompletionRequest(newest, {});
  absl::StatusOr<GenerationSpec> served = ParseChatCompletionRequest(history, {});

  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("media"), absl::string_view::npos);
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->request.chat().messages(0).content(),
            "[image_url omitted: this server reads text only]");
  EXPECT_EQ(served->request.chat().messages(2).content(),
            "[image_url omitted: this server reads text only]");
}

}  // namespace
}  // namespace cairn::gateway
