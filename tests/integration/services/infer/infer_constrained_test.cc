// cairn-infer's constrained decoding over gRPC on the demo model: forced tool calls and
// structured outputs (response_format).
#include <cctype>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/services/infer/infer_harness.h"
#include "tests/integration/services/infer/infer_text_fixture.h"

namespace cairn::infer::testing {
namespace {

using ::testing::HasSubstr;

// tool_choice naming a function: the prompt ends in the call's opening (no reasoning), and what
// the model writes is parsed from there; a choice the request cannot serve is refused, naming
// the field.
TEST_F(InferDaemonDemoModelTest, ForcedToolCallOpensTheCallInThePrompt) {
  v1::GenerateRequest req = ListFilesRequest();
  req.mutable_chat()->set_tool_choice("list_files");
  req.mutable_sampling()->set_max_tokens(6);
  v1::GenerateRequest unknown = req;
  unknown.mutable_chat()->set_tool_choice("delete_files");
  v1::GenerateRequest no_tools = req;
  no_tools.mutable_chat()->clear_tools();
  no_tools.mutable_chat()->set_tool_choice("required");
  v1::ApplyTemplateResponse rendered;
  const grpc::Status applied = Render(req.chat(), &rendered);

  GenerateResult r = Generate(*stub_, req);
  GenerateResult refused_unknown = Generate(*stub_, unknown);
  GenerateResult refused_no_tools = Generate(*stub_, no_tools);

  ASSERT_TRUE(applied.ok()) << applied.error_message();
  const std::string opening = "<tool_call>\n{\"name\": \"list_files\", \"arguments\":";
  EXPECT_TRUE(
      absl::EndsWith(rendered.text(), "<|im_start|>assistant\n<think>\n\n</think>\n\n" + opening))
      << rendered.text();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.finished.prompt_tokens(), static_cast<uint32_t>(rendered.ids_size()));
  // Six tokens of a random model do not close the call: it comes back verbatim as content,
  // from the prompt's opening on, and nothing is reasoning.
  EXPECT_TRUE(absl::StartsWith(r.finished.content(), opening)) << r.finished.content();
  EXPECT_EQ(r.finished.reasoning_content(), "");
  EXPECT_EQ(refused_unknown.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused_unknown.status.error_message(), HasSubstr("chat.tool_choice"));
  EXPECT_THAT(refused_unknown.status.error_message(), HasSubstr("delete_files"));
  EXPECT_EQ(refused_no_tools.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused_no_tools.status.error_message(), HasSubstr("chat.tool_choice"));
}

// Structured outputs. The demo model's weights are random: unconstrained, its answer is noise,
// never JSON (checked below), so JSON answers show the constraint at work.

// Whether `text` is valid JSON so far: it parses, or fails only where the input ends.
bool IsJsonPrefix(const std::string& text) {
  struct PrefixSax : nlohmann::json_sax<nlohmann::json> {
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t position, const std::string&,
                     const nlohmann::detail::exception&) override {
      error_at = position;
      return false;
    }
    size_t error_at = 0;  // 1-based; 0: none.
  } sax;
  nlohmann::json::sax_parse(text, &sax);
  return sax.error_at == 0 || sax.error_at > text.size();
}

// A schema whose every valid text is short: an enum and an integer, both required, nothing
// else. The grammar bounds a run of whitespace (32 blanks and one newline) and an integer's
// digits (20), and additionalProperties false leaves no free string; so a valid answer is at
// most about 380 bytes (11 runs of whitespace, the two names, the longest enum value, 20
// digits and the punctuation), and max_tokens 500 lets even a model that picks whitespace at
// every chance close the object: such a request finishes with STOP, never LENGTH.
constexpr char kColorSchema[] = R"({"type": "object",
    "properties": {"color": {"enum": ["red", "green", "blue"]}, "count": {"type": "integer"}},
    "required": ["color", "count"], "additionalProperties": false})";
constexpr uint32_t kBoundedAnswerTokens = 500;

// Checks that `content` is one object valid under kColorSchema.
void ExpectValidColor(const std::string& content) {
  const nlohmann::json j = nlohmann::json::parse(content, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << content;
  EXPECT_EQ(j.size(), 2u) << content;
  ASSERT_TRUE(j.contains("color") && j["color"].is_string()) << content;
  EXPECT_THAT(j["color"].get<std::string>(), ::testing::AnyOf("red", "green", "blue")) << content;
  ASSERT_TRUE(j.contains("count")) << content;
  EXPECT_TRUE(j["count"].is_number_integer()) << content;
}

v1::GenerateRequest AskForJson(const std::string& question) {
  v1::GenerateRequest req;
  v1::ChatMessage* user = req.mutable_chat()->add_messages();
  user->set_role("user");
  user->set_content(question);
  req.set_parse_output(true);
  return req;
}

// AskForJson with `schema` as its response format and room for a bounded answer: greedy, or
// (`sample`) at temperature 1 seeded with `seed`.
v1::GenerateRequest AskForJsonUnder(const std::string& question, const char* schema, bool sample,
                                    uint64_t seed) {
  v1::GenerateRequest req = AskForJson(question);
  req.mutable_sampling()->set_max_tokens(kBoundedAnswerTokens);
  if (sample) {
    req.mutable_sampling()->set_temperature(1.0f);
    req.mutable_sampling()->set_seed(seed);
  }
  req.mutable_response_format()->set_json_schema(schema);
  return req;
}

// json_object: the answer is a JSON object from its first token, rendered without reasoning
// even where the request asks for it. Any object allows free strings, which a random model
// rarely closes, so the answer may end at max_tokens: it is then JSON so far.
TEST_F(InferDaemonDemoModelTest, JsonObjectFormatMakesTheAnswerAJsonObject) {
  v1::GenerateRequest free = AskForJson("Describe a cat as JSON.");
  free.mutable_sampling()->set_max_tokens(24);
  free.mutable_sampling()->set_ignore_eos(true);
  v1::GenerateRequest req = AskForJson("Describe a cat as JSON.");
  req.mutable_sampling()->set_max_tokens(48);
  req.mutable_response_format()->set_json_object(true);
  req.mutable_chat()->mutable_options()->set_enable_thinking(true);  // Overridden.

  GenerateResult noise = Generate(*stub_, free);
  GenerateResult r = Generate(*stub_, req);

  ASSERT_TRUE(noise.status.ok()) << noise.status.error_message();
  EXPECT_FALSE(IsJsonPrefix(noise.finished.content() + noise.finished.reasoning_content()))
      << noise.finished.content();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  const std::string& content = r.finished.content();
  EXPECT_EQ(r.text, content);
  EXPECT_EQ(r.finished.reasoning_content(), "");
  EXPECT_EQ(r.finished.reasoning_tokens(), 0u);
  EXPECT_EQ(r.finished.tool_calls_size(), 0);
  EXPECT_EQ(content.find_first_not_of(" \t\n"), content.find('{')) << content;
  EXPECT_TRUE(IsJsonPrefix(content)) << content;
  if (r.finished.reason() == v1::Finished::REASON_STOP) {
    EXPECT_TRUE(nlohmann::json::parse(content, nullptr, false).is_object()) << content;
  } else {
    EXPECT_EQ(r.finished.reason(), v1::Finished::REASON_LENGTH);
  }
}

// json_schema under greedy decoding and under sampling at temperature 1 (seeded): the answer is
// one valid object and ends with an end-of-turn token.
TEST_F(InferDaemonDemoModelTest, JsonSchemaFormatMakesTheAnswerValidUnderTheSchema) {
  for (const bool sample : {false, true}) {
    SCOPED_TRACE(sample ? "temperature 1" : "greedy");
    const v1::GenerateRequest req =
        AskForJsonUnder("Pick a colour and a count.", kColorSchema, sample, /*seed=*/7);

    GenerateResult r = Generate(*stub_, req);

    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.finished.reason(), v1::Finished::REASON_STOP) << r.finished.content();
    EXPECT_LT(r.finished.completion_tokens(), kBoundedAnswerTokens);
    ExpectValidColor(r.finished.content());
    EXPECT_EQ(r.finished.reasoning_content(), "");
  }
}

// Strings with formats and a pattern (each of bounded length, so that a random model ends them):
// the answer's strings are what the formats and the pattern allow.
TEST_F(InferDaemonDemoModelTest, JsonSchemaFormatsAndPatternsHoldInTheAnswer) {
  constexpr char kSchema[] = R"({"type": "object", "properties": {
      "id": {"type": "string", "format": "uuid"}, "day": {"type": "string", "format": "date"},
      "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}},
      "required": ["id", "day", "code"], "additionalProperties": false})";
  for (const bool sample : {false, true}) {
    SCOPED_TRACE(sample ? "temperature 1" : "greedy");
    const v1::GenerateRequest req =
        AskForJsonUnder("Make up an order.", kSchema, sample, /*seed=*/11);

    GenerateResult r = Generate(*stub_, req);

    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.finished.reason(), v1::Finished::REASON_STOP) << r.finished.content();
    const nlohmann::json j = nlohmann::json::parse(r.finished.content(), nullptr, false);
    ASSERT_TRUE(j.is_object() && j.size() == 3) << r.finished.content();
    const std::string id = j.value("id", ""), day = j.value("day", ""), code = j.value("code", "");
    ASSERT_EQ(id.size(), 36u) << id;
    for (size_t i = 0; i < id.size(); ++i) {
      const bool hyphen = i == 8 || i == 13 || i == 18 || i == 23;
      EXPECT_TRUE(hyphen ? id[i] == '-' : std::isxdigit(static_cast<unsigned char>(id[i]))) << id;
    }
    ASSERT_EQ(day.size(), 10u) << day;
    const int month = std::stoi(day.substr(5, 2)), date = std::stoi(day.substr(8, 2));
    EXPECT_TRUE(day[4] == '-' && day[7] == '-' && month >= 1 && month <= 12 && date >= 1 &&
                date <= 31)
        << day;
    ASSERT_EQ(code.size(), 8u) << code;
    EXPECT_TRUE(std::isupper(static_cast<unsigned char>(code[0])) && code[3] == '-' &&
                std::isdigit(static_cast<unsigned char>(code[7])))
        << code;
  }
}

// A raw text prompt is constrained from its first generated token, as it is (no template).
TEST_F(InferDaemonDemoModelTest, JsonSchemaFormatConstrainsATextPrompt) {
  v1::GenerateRequest req;
  req.set_text("colour and count: ");
  req.mutable_sampling()->set_max_tokens(kBoundedAnswerTokens);
  req.mutable_response_format()->set_json_schema(kColorSchema);

  GenerateResult r = Generate(*stub_, req);

  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.finished.reason(), v1::Finished::REASON_STOP) << r.text;
  ExpectValidColor(r.text);
}

// What a response format cannot be combined with, and a schema the grammar cannot compile, are
// INVALID_ARGUMENT naming the fields.
TEST_F(InferDaemonDemoModelTest, ResponseFormatRefusalsNameTheFields) {
  v1::GenerateRequest not_json = AskForJson("x");
  not_json.mutable_response_format()->set_json_schema("{\"type\": ");
  v1::GenerateRequest not_true = AskForJson("x");
  not_true.mutable_response_format()->set_json_object(false);
  v1::GenerateRequest forced = ListFilesRequest();
  forced.mutable_sampling()->set_ignore_eos(false);
  forced.mutable_chat()->set_tool_choice("required");
  forced.mutable_response_format()->set_json_object(true);
  v1::GenerateRequest no_eos = AskForJson("x");
  no_eos.mutable_sampling()->set_ignore_eos(true);
  no_eos.mutable_response_format()->set_json_object(true);
  v1::GenerateRequest prefill = AskForJson("x");
  v1::ChatMessage* open = prefill.mutable_chat()->add_messages();
  open->set_role("assistant");
  open->set_content("{");
  prefill.mutable_chat()->mutable_options()->set_add_generation_prompt(true);
  prefill.mutable_chat()->mutable_options()->set_continue_final_message(true);
  prefill.mutable_response_format()->set_json_object(true);

  const GenerateResult r_not_json = Generate(*stub_, not_json);
  const GenerateResult r_not_true = Generate(*stub_, not_true);
  const GenerateResult r_forced = Generate(*stub_, forced);
  const GenerateResult r_no_eos = Generate(*stub_, no_eos);
  const GenerateResult r_prefill = Generate(*stub_, prefill);

  for (const GenerateResult* r : {&r_not_json, &r_not_true, &r_forced, &r_no_eos, &r_prefill}) {
    EXPECT_EQ(r->status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << r->status.error_message();
    EXPECT_THAT(r->status.error_message(), HasSubstr("response_format"));
  }
  EXPECT_THAT(r_not_json.status.error_message(), HasSubstr("response_format.json_schema"));
  EXPECT_THAT(r_forced.status.error_message(), HasSubstr("chat.tool_choice"));
  EXPECT_THAT(r_no_eos.status.error_message(), HasSubstr("sampling.ignore_eos"));
  EXPECT_THAT(r_prefill.status.error_message(), HasSubstr("continue_final_message"));
}

// Forced tool calls are held to calls of defined functions whose arguments their parameters
// accept (services/infer/text/tool_call_grammar.h). The demo model writes calls as JSON.
v1::GenerateRequest ColorToolsRequest(const std::string& choice, bool sample) {
  v1::GenerateRequest req = AskForJson("Pick a colour.");
  req.mutable_chat()->add_tools()->set_json(
      absl::StrCat(R"({"type": "function", "function": {"name": "set_color", "parameters": )",
                   kColorSchema, "}}"));
  req.mutable_chat()->add_tools()->set_json(
      R"({"type": "function", "function": {"name": "reset", "parameters": {"type": "object",
          "properties": {}, "additionalProperties": false}}})");
  req.mutable_chat()->set_tool_choice(choice);
  req.mutable_sampling()->set_max_tokens(kBoundedAnswerTokens);
  if (sample) {
    req.mutable_sampling()->set_temperature(1.0f);
    req.mutable_sampling()->set_seed(11);
  }
  return req;
}

// A named function: one call of it, its arguments valid, and the answer ends after the call
// (its arguments are bounded as kColorSchema's answers are, so never at max_tokens).
TEST_F(InferDaemonDemoModelTest, ANamedForcedCallCarriesArgumentsItsParametersAccept) {
  for (const bool sample : {false, true}) {
    SCOPED_TRACE(sample ? "temperature 1" : "greedy");

    GenerateResult r = Generate(*stub_, ColorToolsRequest("set_color", sample));

    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.finished.reason(), v1::Finished::REASON_TOOL_CALLS) << r.text;
    ASSERT_EQ(r.finished.tool_calls_size(), 1) << r.text;
    EXPECT_EQ(r.finished.tool_calls(0).name(), "set_color");
    ExpectValidColor(r.finished.tool_calls(0).arguments_json());
    EXPECT_EQ(r.finished.content(), "");
  }
}

// "required": one or more calls, each of a defined function with valid arguments.
TEST_F(InferDaemonDemoModelTest, RequiredForcesCallsOfDefinedFunctions) {
  for (const bool sample : {false, true}) {
    SCOPED_TRACE(sample ? "temperature 1" : "greedy");

    GenerateResult r = Generate(*stub_, ColorToolsRequest("required", sample));

    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    // The first call fits in max_tokens; a random model may go on with more.
    ASSERT_GE(r.finished.tool_calls_size(), 1) << r.text;
    for (const v1::ToolCall& call : r.finished.tool_calls()) {
      ASSERT_THAT(call.name(), ::testing::AnyOf("set_color", "reset")) << r.text;
      if (call.name() == "set_color") {
        ExpectValidColor(call.arguments_json());
      } else {
        EXPECT_EQ(nlohmann::json::parse(call.arguments_json(), nullptr, false),
                  nlohmann::json::object())
            << call.arguments_json();
      }
    }
    if (r.finished.reason() != v1::Finished::REASON_LENGTH) {
      EXPECT_EQ(r.finished.reason(), v1::Finished::REASON_TOOL_CALLS) << r.text;
      EXPECT_EQ(r.finished.content(), "") << r.text;
    }
  }
}

// chat.single_tool_call (parallel_tool_calls false): "required" is exactly one call, after
// which the turn ends, where the random model writes more without it (greedy: two or more).
TEST_F(InferDaemonDemoModelTest, ASingleToolCallEndsTheTurnAfterIt) {
  for (const bool sample : {false, true}) {
    SCOPED_TRACE(sample ? "temperature 1" : "greedy");
    v1::GenerateRequest req = ColorToolsRequest("required", sample);
    req.mutable_chat()->set_single_tool_call(true);

    GenerateResult r = Generate(*stub_, req);

    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.finished.reason(), v1::Finished::REASON_TOOL_CALLS) << r.text;
    ASSERT_EQ(r.finished.tool_calls_size(), 1) << r.text;
    EXPECT_EQ(r.finished.content(), "") << r.text;
  }
}

// A short request forcing a call of function "f" with `params`, strict or not.
v1::GenerateRequest ForceFunctionF(const std::string& params, bool strict) {
  v1::GenerateRequest req = AskForJson("x");
  req.mutable_chat()->add_tools()->set_json(
      absl::StrCat(R"({"type": "function", "function": {"name": "f", )",
                   strict ? R"("strict": true, )" : "", R"("parameters": )", params, "}}"));
  req.mutable_chat()->set_tool_choice("f");
  req.mutable_sampling()->set_max_tokens(4);
  return req;
}

// A strict function's parameters the grammar cannot express are refused, naming the choice; a
// function that is not strict gets any JSON object instead.
TEST_F(InferDaemonDemoModelTest, AForcedCallOfAStrictFunctionNeedsExpressibleParameters) {
  const std::string params =
      R"({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}})";
  v1::GenerateRequest strict = ForceFunctionF(params, true);
  v1::GenerateRequest loose = ForceFunctionF(params, false);

  GenerateResult r_strict = Generate(*stub_, strict);
  GenerateResult r_loose = Generate(*stub_, loose);

  EXPECT_EQ(r_strict.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r_strict.status.error_message(), HasSubstr("chat.tool_choice \"f\""));
  EXPECT_THAT(r_strict.status.error_message(), HasSubstr("multipleOf"));
  ASSERT_TRUE(r_loose.status.ok()) << r_loose.status.error_message();
  // The text comes back from the call's opening in the prompt on.
  const std::string opening = "{\"name\": \"f\", \"arguments\":";
  const size_t at = r_loose.text.find(opening);
  ASSERT_NE(at, std::string::npos) << r_loose.text;
  EXPECT_TRUE(IsJsonPrefix(r_loose.text.substr(at + opening.size()))) << r_loose.text;
}

// Under "auto" with a strict function, the answer is free until the model opens a call: its
// tokens and logprobs are those of the same request without "strict" (the random model opens
// none in these tokens).
TEST_F(InferDaemonDemoModelTest, AStrictFunctionUnderAutoLeavesTheAnswerAsItWas) {
  for (const bool sample : {false, true}) {
    SCOPED_TRACE(sample ? "temperature 1" : "greedy");
    v1::GenerateRequest plain = ColorToolsRequest("auto", sample);
    plain.mutable_sampling()->set_max_tokens(24);
    plain.mutable_sampling()->set_logprobs(2);
    v1::GenerateRequest strict = plain;
    strict.mutable_chat()->mutable_tools(0)->set_strict(true);

    GenerateResult r_plain = Generate(*stub_, plain);
    GenerateResult r_strict = Generate(*stub_, strict);

    ASSERT_TRUE(r_plain.status.ok()) << r_plain.status.error_message();
    ASSERT_TRUE(r_strict.status.ok()) << r_strict.status.error_message();
    EXPECT_EQ(r_strict.tokens, r_plain.tokens);
    EXPECT_EQ(r_strict.logprobs, r_plain.logprobs);
    EXPECT_EQ(r_strict.text.find("<tool_call>"), std::string::npos) << r_strict.text;
  }
}

// The demo model with a template that writes calls in the XML form (Cairn's own test template):
// forced calls are held to that form, their values read back by the schema's types.
class InferDaemonXmlTemplateTest : public InferDaemonTextTest {
 protected:
  void SetUp() override {
    StartServer("demo", "m-demo-xml",
                text::testing::TextDataPath("templates/cairn_xml_tools_test.jinja"));
  }
};

TEST_F(InferDaemonXmlTemplateTest, ForcedCallsAreHeldToTheXmlForm) {
  for (const std::string choice : {"set_color", "required"}) {
    for (const bool sample : {false, true}) {
      SCOPED_TRACE(absl::StrCat(choice, sample ? ", temperature 1" : ", greedy"));
      v1::GenerateRequest req = ColorToolsRequest(choice, sample);
      v1::ApplyTemplateResponse rendered;
      ASSERT_TRUE(Render(req.chat(), &rendered).ok());

      GenerateResult r = Generate(*stub_, req);

      const std::string opening =
          choice == "required" ? "<tool_call>\n" : "<tool_call>\n<function=set_color>\n";
      EXPECT_TRUE(absl::EndsWith(rendered.text(), opening)) << rendered.text();
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      ASSERT_GE(r.finished.tool_calls_size(), 1) << r.text;
      for (const v1::ToolCall& call : r.finished.tool_calls()) {
        ASSERT_THAT(call.name(), ::testing::AnyOf("set_color", "reset")) << r.text;
        if (call.name() == "set_color") {
          ExpectValidColor(call.arguments_json());  // "count" read back as an integer.
        } else {
          EXPECT_EQ(call.arguments_json(), "{}") << r.text;
        }
      }
      EXPECT_EQ(r.finished.content(), "") << r.text;
      if (choice == "set_color") {
        EXPECT_EQ(r.finished.reason(), v1::Finished::REASON_TOOL_CALLS) << r.text;
        EXPECT_EQ(r.finished.tool_calls_size(), 1) << r.text;
      }
    }
  }
}

// A strict function whose parameters the XML form cannot write (members besides its
// properties) is refused, naming the choice; one that is not strict is left to the model.
TEST_F(InferDaemonXmlTemplateTest, AStrictFunctionTheXmlFormCannotWriteIsRefused) {
  const std::string params =
      R"({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": true})";
  v1::GenerateRequest strict = ForceFunctionF(params, true);
  v1::GenerateRequest loose = ForceFunctionF(params, false);

  GenerateResult r_strict = Generate(*stub_, strict);
  GenerateResult r_loose = Generate(*stub_, loose);

  EXPECT_EQ(r_strict.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r_strict.status.error_message(), HasSubstr("chat.tool_choice \"f\""));
  EXPECT_THAT(r_strict.status.error_message(), HasSubstr("XML form"));
  EXPECT_TRUE(r_loose.status.ok()) << r_loose.status.error_message();
}

// A conversation the template itself refuses (its raise_exception) is the client's to fix:
// INVALID_ARGUMENT with the template's words, not an internal error.
TEST_F(InferDaemonXmlTemplateTest, AConversationTheTemplateRefusesIsAnInvalidArgument) {
  v1::GenerateRequest req;
  req.mutable_sampling()->set_max_tokens(2);
  v1::ChatMessage* user = req.mutable_chat()->add_messages();
  user->set_role("user");
  user->set_content("hello");
  v1::ChatMessage* late = req.mutable_chat()->add_messages();
  late->set_role("system");
  late->set_content("a system message after the user's");

  GenerateResult r = Generate(*stub_, req);
  v1::ApplyTemplateResponse rendered;
  const grpc::Status applied = Render(req.chat(), &rendered);

  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("System message must be at the beginning."));
  EXPECT_EQ(applied.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace cairn::infer::testing
