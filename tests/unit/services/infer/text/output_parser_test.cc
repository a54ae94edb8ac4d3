#include "services/infer/text/output_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace cairn::infer::text {
namespace {

OutputParserOptions Thinking() {
  OutputParserOptions o;
  o.starts_in_reasoning = true;
  return o;
}

TEST(OutputParserTest, SplitsReasoningFromTheAnswer) {
  ParsedOutput out =
      ParseOutput("Let me think.\nStep 2.\n</think>\n\nThe answer is 4.", Thinking());

  EXPECT_EQ(out.reasoning_content, "Let me think.\nStep 2.");
  EXPECT_EQ(out.content, "The answer is 4.");
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_TRUE(out.warnings.empty());
}

TEST(OutputParserTest, ReasoningOpenedByTheModel) {
  ParsedOutput out = ParseOutput("<think>\nhmm\n</think>\n\nHi", OutputParserOptions{});

  EXPECT_EQ(out.reasoning_content, "hmm");
  EXPECT_EQ(out.content, "Hi");
}

TEST(OutputParserTest, UnclosedReasoningStaysReasoning) {
  ParsedOutput out = ParseOutput("still thinking", Thinking());

  EXPECT_EQ(out.reasoning_content, "still thinking");
  EXPECT_EQ(out.content, "");
}

TEST(OutputParserTest, JsonToolCalls) {
  ParsedOutput out = ParseOutput(
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"run\", \"arguments\": "
      "\"{\\\"cmd\\\":\\\"ls\\\"}\"}\n</tool_call>",
      OutputParserOptions{});

  EXPECT_EQ(out.content, "Checking.");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].id, "call_0");
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"city\": \"Paris\", \"days\": 2}");
  EXPECT_EQ(out.tool_calls[1].id, "call_1");
  EXPECT_EQ(out.tool_calls[1].arguments, "{\"cmd\": \"ls\"}");
  EXPECT_TRUE(out.warnings.empty());
}

TEST(OutputParserTest, XmlToolCallsUseTheSchemaTypes) {
  OutputParserOptions o;
  o.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
      "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"}}}}}])");

  ParsedOutput out = ParseOutput(
      "<tool_call>\n<function=get_weather>\n<parameter=city>\n12\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n"
      "</function>\n</tool_call>",
      o);

  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments,
            "{\"city\": \"12\", \"days\": 3, \"opts\": {\"a\": [1, 2]}}");
  EXPECT_EQ(out.content, "");
}

// XML-form values the model wrote without their </parameter> (Qwen3.5 leaves it out at long
// contexts) end before the line opening the tool's next parameter, or at </function>; a value
// that holds this markup itself (a heredoc about it) is kept byte for byte.
TEST(OutputParserTest, XmlValuesWithoutTheirCloseOrHoldingTheMarkupKeepTheirOwnText) {
  OutputParserOptions o;
  o.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
      "name": "bash", "parameters": {"type": "object", "properties": {
        "command": {"type": "string"}, "timeout": {"type": "integer"}}}}}])");
  const auto call = [&](const std::string& params) {
    return ParseOutput("<tool_call>\n<function=bash>\n" + params + "</function>\n</tool_call>", o);
  };
  const std::string heredoc = "cat <<EOF | grep x\n<parameter=path>\na\n</parameter>\nEOF";

  const ParsedOutput missing_first =
      call("<parameter=command>\nls -la\n<parameter=timeout>\n30\n</parameter>\n");
  const ParsedOutput missing_last = call("<parameter=command>\nls -la\n");
  const ParsedOutput markup = call("<parameter=command>\n" + heredoc +
                                   "\n</parameter>\n<parameter=timeout>\n30\n</parameter>\n");

  ASSERT_EQ(missing_first.tool_calls.size(), 1u) << missing_first.content;
  EXPECT_EQ(missing_first.tool_calls[0].arguments, R"({"command": "ls -la", "timeout": 30})");
  ASSERT_EQ(missing_last.tool_calls.size(), 1u) << missing_last.content;
  EXPECT_EQ(missing_last.tool_calls[0].arguments, R"({"command": "ls -la"})");
  ASSERT_EQ(markup.tool_calls.size(), 1u) << markup.content;
  EXPECT_EQ(nlohmann::json::parse(markup.tool_calls[0].arguments),
            nlohmann::json({{"command", heredoc}, {"timeout", 30}}));
}

// Types named by a list or by anyOf/oneOf members: a value is text where "string" is among
// them or where they are not all named (no "type", a $ref), else JSON or Python's True, False
// and None (as Qwen3.5's template writes them), kept as text where neither reads it.
TEST(OutputParserTest, XmlToolCallsReadTypeListsAndAlternatives) {
  OutputParserOptions o;
  o.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
      "name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": ["integer", "null"]}, "b": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "c": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "d": {"type": ["string", "null"]},
        "e": {"anyOf": [{"$ref": "#/$defs/X"}, {"type": "null"}]}, "g": {"enum": [1, 2]},
        "h": {"oneOf": [{"type": "boolean"}, {"type": "array"}]}, "i": {"type": "integer"},
        "j": {"type": "boolean"}, "k": {"type": ["boolean", "null"]}}}}}])");
  auto param = [](const std::string& k, const std::string& v) {
    return "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
  };
  ParsedOutput out =
      ParseOutput("<tool_call>\n<function=f>\n" + param("a", "null") + param("b", "7") +
                      param("c", "null") + param("d", "8") + param("e", "null") + param("g", "1") +
                      param("h", "[true]") + param("i", "seven") + param("j", "True") +
                      param("k", "None") + "</function>\n</tool_call>",
                  o);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(nlohmann::ordered_json::parse(out.tool_calls[0].arguments),
            nlohmann::ordered_json::parse(R"({"a": null, "b": 7, "c": "null", "d": "8",
                "e": "null", "g": "1", "h": [true], "i": "seven", "j": true, "k": null})"));
}

TEST(OutputParserTest, MalformedToolCallIsContentWithAWarning) {
  const std::string bad = "<tool_call>\n{\"name\": \"f\", \"arguments\": {oops}\n</tool_call>";

  ParsedOutput out = ParseOutput("Try: " + bad, OutputParserOptions{});

  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, "Try: " + bad);
  ASSERT_EQ(out.warnings.size(), 1u);
}

// A call the model nests deeper than any tool's arguments do (kMaxTextJsonNesting) is not
// parsed (its copies and conversions recurse a level at a time): content with a warning in the
// JSON form, the parameter's text in the XML form.
TEST(OutputParserTest, ACallNestedTooDeepIsNotParsed) {
  const std::string deep = std::string(30000, '[') + std::string(30000, ']');
  const std::string json_call =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": " + deep + "}}\n</tool_call>";
  OutputParserOptions o;
  o.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
      "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "array"}}}}}])");

  ParsedOutput json_out = ParseOutput(json_call, o);
  ParsedOutput xml_out = ParseOutput("<tool_call>\n<function=f>\n<parameter=a>\n" + deep +
                                         "\n</parameter>\n</function>\n"
                                         "</tool_call>",
                                     o);

  EXPECT_TRUE(json_out.tool_calls.empty());
  EXPECT_EQ(json_out.content, json_call);
  EXPECT_EQ(json_out.warnings.size(), 1u);
  ASSERT_EQ(xml_out.tool_calls.size(), 1u);
  EXPECT_EQ(nlohmann::ordered_json::parse(xml_out.tool_calls[0].arguments)["a"], deep);
}

TEST(OutputParserTest, UnterminatedToolCallIsContentWithAWarning) {
  ParsedOutput out = ParseOutput("<tool_call>\n{\"name\": \"f\"", OutputParserOptions{});

  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, "<tool_call>\n{\"name\": \"f\"");
  EXPECT_EQ(out.warnings.size(), 1u);
}

// A forced tool call: the prompt ended in the call's opening, which the parser reads first; the
// answer parses as the text the two make together, whole or in pieces.
TEST(OutputParserTest, PromptTailIsParsedBeforeTheAnswer) {
  OutputParserOptions o;
  o.prompt_tail = "<tool_call>\n{\"name\": \"read\", \"arguments\": ";
  const std::string answer = "{\"path\": \"a\"}}\n</tool_call>";

  const ParsedOutput whole = ParseOutput(answer, o);
  OutputParser parser(o);
  ParsedOutput streamed = parser.Push(answer.substr(0, 5));
  streamed.Append(parser.Push(answer.substr(5)));
  streamed.Append(parser.Finish());

  for (const ParsedOutput* out : {&whole, static_cast<const ParsedOutput*>(&streamed)}) {
    EXPECT_EQ(out->content, "");
    ASSERT_EQ(out->tool_calls.size(), 1u);
    EXPECT_EQ(out->tool_calls[0].name, "read");
    EXPECT_EQ(out->tool_calls[0].arguments, "{\"path\": \"a\"}");
    EXPECT_TRUE(out->warnings.empty());
  }
}

// An answer that never closes the forced call returns it verbatim, the prompt's opening too.
TEST(OutputParserTest, UnterminatedForcedCallIsContentWithItsOpening) {
  OutputParserOptions o;
  o.prompt_tail = "<tool_call>\n<function=read>\n";

  ParsedOutput out = ParseOutput("<parameter=path>\na", o);

  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, "<tool_call>\n<function=read>\n<parameter=path>\na");
  EXPECT_EQ(out.warnings.size(), 1u);
}

// What the prompt's tail yields on its own comes back once, with the first Push (even an empty
// one) or with Finish.
TEST(OutputParserTest, PromptTailOutputComesBackOnce) {
  OutputParserOptions o;
  o.prompt_tail = "Sure.";

  OutputParser pushed(o);
  ParsedOutput first = pushed.Push("");
  ParsedOutput rest = pushed.Push(" Done");
  rest.Append(pushed.Finish());
  OutputParser finished(o);
  ParsedOutput only = finished.Finish();

  EXPECT_EQ(first.content + rest.content, "Sure. Done");
  EXPECT_EQ(only.content, "Sure.");
}

// Tools of any shape come from clients: a name that is not a string is skipped, not compared.
TEST(OutputParserTest, ToolsOfAnyShapeAreReadSafely) {
  OutputParserOptions o;
  o.tools = nlohmann::ordered_json::parse(R"([{"function": {"name": 5}}, {"function": "x"},
      {"function": {"name": "f", "parameters": {"properties": {"n": {}}}}}])");

  ParsedOutput out = ParseOutput(
      "<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>", o);

  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"n\": \"3\"}");
}

TEST(OutputParserTest, TextThatOnlyLooksLikeATagIsKept) {
  ParsedOutput out = ParseOutput("a < b and <tool", OutputParserOptions{});

  EXPECT_EQ(out.content, "a < b and <tool");
}

TEST(OutputParserTest, DisabledParsingKeepsTagsAsText) {
  OutputParserOptions o;
  o.parse_reasoning = false;
  o.parse_tool_calls = false;
  const std::string text = "<think>x</think><tool_call>{}</tool_call>";

  EXPECT_EQ(ParseOutput(text, o).content, text);
}

// Only a <think> at the answer's start opens reasoning: later in the answer (an agent working
// on a parser for such tags) it is text, and a tool call after it is still a call.
TEST(OutputParserTest, AThinkTagInsideTheAnswerIsText) {
  const ParsedOutput mid = ParseOutput(
      "I'll make the parser skip a leading <think> tag.\n\n<tool_call>\n"
      "{\"name\": \"edit\", \"arguments\": {}}\n</tool_call>",
      OutputParserOptions{});
  const ParsedOutput after_reasoning =
      ParseOutput("plan\n</think>\n\nQwen3 wraps it in <think>...</think> tags.", Thinking());
  const ParsedOutput empty_block = ParseOutput("<think>\n\n</think>\n\nX", OutputParserOptions{});

  EXPECT_EQ(mid.content, "I'll make the parser skip a leading <think> tag.");
  EXPECT_EQ(mid.reasoning_content, "");
  ASSERT_EQ(mid.tool_calls.size(), 1u);
  EXPECT_EQ(mid.tool_calls[0].name, "edit");
  EXPECT_EQ(after_reasoning.reasoning_content, "plan");
  EXPECT_EQ(after_reasoning.content, "Qwen3 wraps it in <think>...</think> tags.");
  EXPECT_EQ(empty_block.reasoning_content, "");
  EXPECT_EQ(empty_block.content, "X");
}

// A tool call opened while the reasoning is still open (Qwen3.5 sometimes leaves out the
// </think>) is a call when the output ends there, and part of the reasoning (a draft) when a
// </think> follows it.
TEST(OutputParserTest, AToolCallInsideOpenReasoningIsACallUnlessTheReasoningGoesOn) {
  const ParsedOutput call = ParseOutput(
      "I'll call\n<tool_call>\n{\"name\": \"get\", \"arguments\": {\"a\": 1}}\n</tool_call>",
      Thinking());
  const ParsedOutput draft = ParseOutput(
      "maybe\n<tool_call>\n{\"name\": \"get\"}\n</tool_call>\nno.\n</think>\n\nAnswer", Thinking());

  EXPECT_EQ(call.reasoning_content, "I'll call");
  EXPECT_EQ(call.content, "");
  ASSERT_EQ(call.tool_calls.size(), 1u);
  EXPECT_EQ(call.tool_calls[0].name, "get");
  EXPECT_EQ(call.tool_calls[0].arguments, "{\"a\": 1}");
  EXPECT_EQ(draft.reasoning_content, "maybe\n<tool_call>\n{\"name\": \"get\"}\n</tool_call>\nno.");
  EXPECT_EQ(draft.content, "Answer");
  EXPECT_TRUE(draft.tool_calls.empty());
}

// Streaming in any split gives the same result as parsing the whole text.
TEST(OutputParserTest, StreamingEqualsWholeTextForEverySplit) {
  const std::vector<std::pair<std::string, bool>> texts = {
      {"plan\n\n</think>\n\nHere.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n"
       "</tool_call>\n<tool_call>\n<function=b>\n<parameter=x>\n1\n</parameter>\n</function>\n"
       "</tool_call>",
       true},
      {"<think>r</think>answer with < and </ and <too\n", false},
      {"x<tool_call>{bad}</tool_call> y <tool_call>{\"name\":\"z\"}", false},
      {"I'll call\n<tool_call>\n{\"name\": \"get\", \"arguments\": {}}\n</tool_call>", true},
      {"draft\n<tool_call>\n{\"name\": \"get\"}\n</tool_call>\nno.\n</think>\n\nA <think> B", true},
      {" \n<think>\nr\n</think>\n\nskip a leading <think> tag.\n<tool_call>\n{\"name\": \"e\"}\n"
       "</tool_call>",
       false},
  };
  for (const auto& [text, thinking] : texts) {
    OutputParserOptions o;
    o.starts_in_reasoning = thinking;
    const ParsedOutput whole = ParseOutput(text, o);
    for (size_t chunk = 1; chunk <= 7; ++chunk) {
      OutputParser parser(o);
      ParsedOutput streamed;
      for (size_t i = 0; i < text.size(); i += chunk) {
        streamed.Append(parser.Push(std::string_view(text).substr(i, chunk)));
      }
      streamed.Append(parser.Finish());

      EXPECT_EQ(streamed.reasoning_content, whole.reasoning_content) << text << " / " << chunk;
      EXPECT_EQ(streamed.content, whole.content) << text << " / " << chunk;
      ASSERT_EQ(streamed.tool_calls.size(), whole.tool_calls.size()) << text;
      for (size_t k = 0; k < whole.tool_calls.size(); ++k) {
        EXPECT_EQ(streamed.tool_calls[k].name, whole.tool_calls[k].name);
        EXPECT_EQ(streamed.tool_calls[k].arguments, whole.tool_calls[k].arguments);
      }
      EXPECT_EQ(streamed.warnings.size(), whole.warnings.size());
    }
  }
}

}  // namespace
}  // namespace cairn::infer::text
