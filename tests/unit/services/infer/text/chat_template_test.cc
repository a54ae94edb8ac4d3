#include "services/infer/text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/file_util.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/text/text_test_data.h"

namespace cairn::infer::text {
namespace {

using ::cairn::testing::StatusIs;
using json = nlohmann::ordered_json;

json ReadJson(const std::string& path) {
  absl::StatusOr<std::string> data = ReadFileToString(path);
  if (!data.ok()) return json();
  return json::parse(*data, nullptr, false);
}

// Renders every case of a reference file (tools/reference/text_reference.py) and compares
// with transformers' apply_chat_template output.
void ExpectMatchesReference(const ChatTemplate& tmpl, const std::string& reference_file) {
  const json ref = ReadJson(testing::TextDataPath(reference_file));
  ASSERT_TRUE(ref.is_object()) << reference_file;
  ASSERT_GE(ref["cases"].size(), 30u);
  for (const json& c : ref["cases"]) {
    absl::StatusOr<ChatRequest> request = ParseChatRequest(c["request"]);
    ASSERT_TRUE(request.ok()) << request.status();

    absl::StatusOr<std::string> text = tmpl.Render(*request);

    ASSERT_TRUE(text.ok()) << c["name"] << ": " << text.status();
    EXPECT_EQ(*text, c["text"].get<std::string>()) << c["name"];
  }
}

ChatTemplateOptions ReferenceOptions() {
  ChatTemplateOptions options;
  options.parse_string_arguments = false;  // The reference passes arguments as given.
  return options;
}

TEST(ChatTemplateTest, Qwen3TemplateMatchesApplyChatTemplate) {
  CAIRN_REQUIRE_DOWNLOADED(testing::Qwen3ModelDir() + "/tokenizer_config.json");
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tmpl =
      ChatTemplate::FromModelDir(testing::Qwen3ModelDir(), ReferenceOptions());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();

  ExpectMatchesReference(**tmpl, "chat_qwen3_reference.json");
}

TEST(ChatTemplateTest, XmlToolsTestTemplateMatchesApplyChatTemplate) {
  absl::StatusOr<std::string> source =
      ReadFileToString(testing::TextDataPath("templates/cairn_xml_tools_test.jinja"));
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tmpl =
      ChatTemplate::Create(*source, ReferenceOptions());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();

  ExpectMatchesReference(**tmpl, "chat_cairn_xml_reference.json");
}

TEST(ChatTemplateTest, StringArgumentsAreParsedForTemplatesThatIterateThem) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tmpl = ChatTemplate::Create(
      "{% for m in messages %}{% for c in m.tool_calls %}"
      "{% for k, v in c.function.arguments|items %}{{ k }}={{ v }};{% endfor %}"
      "{% endfor %}{% endfor %}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  absl::StatusOr<ChatRequest> request = ParseChatRequest(json::parse(
      R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [
          {"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1, \"b\": \"x\"}"}}
        ]}]})"));
  ASSERT_TRUE(request.ok()) << request.status();

  absl::StatusOr<std::string> text = (*tmpl)->Render(*request);

  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "a=1;b=x;");
}

TEST(ChatTemplateTest, ArgumentsWithAnObjectTooLargeForAnOrderedParseStayAString) {
  // Parsing keeps members in order at a cost quadratic in an object's members
  // (common/json/json_scan.h): such arguments are rendered as the string they came as.
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tmpl = ChatTemplate::Create(
      "{% for m in messages %}{% for c in m.tool_calls %}"
      "{% if c.function.arguments is mapping %}mapping{% else %}string{% endif %};"
      "{% endfor %}{% endfor %}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  std::string huge = "{";
  for (int i = 0; i < 5000; ++i) huge += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  huge += "}";
  json calls = json::array();
  calls.push_back({{"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}});
  calls.push_back({{"type", "function"}, {"function", {{"name", "f"}, {"arguments", huge}}}});
  json body = {
      {"messages", json::array({{{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}}})}};
  absl::StatusOr<ChatRequest> request = ParseChatRequest(body);
  ASSERT_TRUE(request.ok()) << request.status();

  absl::StatusOr<std::string> text = (*tmpl)->Render(*request);

  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "mapping;string;");
}

TEST(ChatTemplateTest, RaiseExceptionIsAFailedPrecondition) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tmpl =
      ChatTemplate::Create("{% if not messages %}{{ raise_exception('No messages.') }}{% endif %}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();

  absl::StatusOr<std::string> text = (*tmpl)->Render(ChatRequest{});

  EXPECT_THAT(text.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(text.status().message(), "No messages.");
}

TEST(ChatTemplateTest, MalformedRequestsAreRejected) {
  EXPECT_THAT(ParseChatRequest(json::parse(R"({"messages": "hi"})")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseChatRequest(json::parse(R"({"messages": [{"content": "x"}]})")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseChatRequest(json::parse(R"({"messages": [], "tools": {}})")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ChatTemplateTest, ContinueFinalMessageCutsTheRenderAfterTheAssistantsContent) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tmpl = ChatTemplate::Create(
      "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  absl::StatusOr<ChatRequest> request = ParseChatRequest(json::parse(
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}],
          "add_generation_prompt": true, "continue_final_message": true})"));
  ASSERT_TRUE(request.ok()) << request.status();
  ChatRequest padded = *request;  // The template trims: the content is found without the spaces.
  padded.messages[1]["content"] = " Hel\n";

  absl::StatusOr<std::string> text = (*tmpl)->Render(*request);
  absl::StatusOr<std::string> trimmed = (*tmpl)->Render(padded);

  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<user>hi</user><assistant>Hel");
  ASSERT_TRUE(trimmed.ok()) << trimmed.status();
  EXPECT_EQ(*trimmed, "<user>hi</user><assistant>Hel");
}

// A short content that also stands in the end-of-turn marker ("<", ">", "\n") is continued
// where the message's content ends, not found inside the marker.
TEST(ChatTemplateTest, ContinueFinalMessageCutsBeforeTheEndOfTurnMarker) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tmpl = ChatTemplate::Create(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
      "{% endfor %}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  auto render = [&](const char* content) {
    ChatRequest request;
    request.messages = json::array(
        {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", content}}});
    request.continue_final_message = true;
    return (*tmpl)->Render(request);
  };

  absl::StatusOr<std::string> lt = render("<");
  absl::StatusOr<std::string> gt = render(">");
  absl::StatusOr<std::string> newline = render("\n");

  const std::string head = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  ASSERT_TRUE(lt.ok() && gt.ok() && newline.ok());
  EXPECT_EQ(*lt, head + "<");
  EXPECT_EQ(*gt, head + ">");
  EXPECT_EQ(*newline, head + "\n");
}

TEST(ChatTemplateTest, ContinueFinalMessageRefusesWhatItCannotContinue) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tmpl = ChatTemplate::Create(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}");
  absl::StatusOr<std::unique_ptr<ChatTemplate>> drops_content =
      ChatTemplate::Create("{% for m in messages %}<{{ m.role }}>{% endfor %}");
  ASSERT_TRUE(tmpl.ok() && drops_content.ok());
  auto render = [](const ChatTemplate& t, const char* messages) {
    ChatRequest request;
    request.messages = json::parse(messages);
    request.continue_final_message = true;
    return t.Render(request).status();
  };

  EXPECT_THAT(render(**tmpl, R"([{"role": "user", "content": "hi"}])"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(render(**tmpl, R"([{"role": "user", "content": "hi"},
                                 {"role": "assistant", "content": ""}])"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(render(**tmpl, R"([{"role": "user", "content": "hi"},
                                 {"role": "assistant", "content": "x", "tool_calls": [
                                   {"type": "function", "function": {"name": "f"}}]}])"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  const absl::Status not_found = render(**drops_content, R"([{"role": "user", "content": "hi"},
                                          {"role": "assistant", "content": "Hel"}])");
  EXPECT_THAT(not_found, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(not_found.message().find("cannot continue"), absl::string_view::npos) << not_found;
}

// A multimodal checkpoint may carry its template only as the processor's chat_template.json;
// the tokenizer's chat_template.jinja wins where both exist.
TEST(ChatTemplateTest, TheProcessorsChatTemplateJsonIsReadWhereTheTokenizerHasNone) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "cairn-processor-template";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "chat_template.json") << R"({"chat_template": "P{{ messages[0].content }}"})";
  const std::string messages = R"({"messages": [{"role": "user", "content": "hi"}]})";
  auto render = [&](const ChatTemplate& t) {
    absl::StatusOr<ChatRequest> r = ParseChatRequest(nlohmann::ordered_json::parse(messages));
    return r.ok() ? t.Render(*r) : absl::StatusOr<std::string>(r.status());
  };

  absl::StatusOr<std::unique_ptr<ChatTemplate>> processor =
      ChatTemplate::FromModelDir(dir.string());
  std::ofstream(dir / "chat_template.jinja") << "J{{ messages[0].content }}";
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tokenizer =
      ChatTemplate::FromModelDir(dir.string());
  std::ofstream(dir / "chat_template.json") << R"(["not an object"])";
  std::filesystem::remove(dir / "chat_template.jinja");
  absl::StatusOr<std::unique_ptr<ChatTemplate>> bad = ChatTemplate::FromModelDir(dir.string());

  ASSERT_TRUE(processor.ok()) << processor.status();
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(*render(**processor), "Phi");
  EXPECT_EQ(*render(**tokenizer), "Jhi");
  EXPECT_THAT(bad.status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ChatTemplateTest, ModelDirWithoutTemplateIsNotFound) {
  EXPECT_THAT(ChatTemplate::FromModelDir(testing::TextDataPath("templates")).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace cairn::infer::text
