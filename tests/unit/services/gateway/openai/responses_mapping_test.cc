#include "services/gateway/openai/responses_mapping.h"

#include "gtest/gtest.h"

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
}

}  // namespace
}  // namespace cairn::gateway
