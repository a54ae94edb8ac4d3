// The XML form of tool-call grammars (ToolCallMarkup::kXml, tool_call_grammar.h): what a call
// may hold, byte by byte, and with the real Qwen3 tokenizer token by token; and that what the
// grammar allows, the output parser reads back as arguments valid under the schema.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/infer/text/json_constraint.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/json_matcher.h"
#include "services/infer/text/output_parser.h"
#include "services/infer/text/token_index.h"
#include "services/infer/text/tokenizer.h"
#include "services/infer/text/tool_call_grammar.h"
#include "tests/unit/services/infer/text/tool_call_test_util.h"

namespace cairn::infer::text {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;
using testing::Read;
using testing::Tool;

// A coding agent's tools: a file written whole, a search with an enum and optional numbers.
Json AgentTools() {
  return Json::array({Tool("write_file", Json::parse(R"({"type": "object", "properties": {
           "path": {"type": "string", "minLength": 1},
           "content": {"type": "string"}}, "required": ["path", "content"],
           "additionalProperties": false})")),
                      Tool("search", Json::parse(R"({"type": "object", "properties": {
           "query": {"type": "string"},
           "order": {"type": "string", "enum": ["asc", "desc"]},
           "limit": {"type": "integer", "minimum": 1},
           "tags": {"type": "array", "items": {"type": "string"}},
           "since": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
           "required": ["query"]})"))});
}

std::shared_ptr<const JsonGrammar> Xml(const Json& tools, const std::string& function) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      ForcedToolCallGrammar(tools, function, ToolCallMarkup::kXml);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

std::string Param(const std::string& key, const std::string& value) {
  return "<parameter=" + key + ">\n" + value + "\n</parameter>\n";
}
const std::string kEnd = "</function>\n</tool_call>";

// The arguments the output parser reads from a whole call `body` (after "<tool_call>\n").
Json Parsed(const Json& tools, const std::string& body) {
  OutputParserOptions options;
  options.format = ToolCallFormat::kXml;
  options.tools = tools;
  OutputParser parser(options);
  ParsedOutput out = parser.Push("<tool_call>\n" + body);
  out.Append(parser.Finish());
  EXPECT_EQ(out.tool_calls.size(), 1u) << body << "\n" << out.content;
  if (out.tool_calls.size() != 1) return nullptr;
  return Json::parse(out.tool_calls[0].arguments);
}

TEST(XmlToolCallGrammarTest, ANamedFunctionsParametersInTheTemplatesForm) {
  std::shared_ptr<const JsonGrammar> g = Xml(AgentTools(), "write_file");
  ASSERT_NE(g, nullptr);
  const std::string content = "int main() {\n  return \"</para\" < 1;\n}\n";
  const std::string call = Param("path", "a.cc") + Param("content", content) + kEnd;
  EXPECT_TRUE(Read(g, call).complete);
  Json args = Parsed(AgentTools(), "<function=write_file>\n" + call);
  EXPECT_EQ(args, Json({{"path", "a.cc"}, {"content", content}}));
  // Empty content, and content that ends in newlines, are written and read back.
  EXPECT_TRUE(Read(g, Param("path", "a") + Param("content", "") + kEnd).complete);
  EXPECT_EQ(Parsed(AgentTools(), "<function=write_file>\n" + Param("path", "a") +
                                     Param("content", "x\n\n") + kEnd)["content"],
            "x\n\n");
  // Not complete before the call's end; nothing after it.
  EXPECT_FALSE(Read(g, Param("path", "a") + Param("content", "b") + "</function>").complete);
  EXPECT_FALSE(Read(g, call + "\n").prefix);
  // Required ones first, in the schema's order, each once; no other keys; minLength.
  EXPECT_FALSE(Read(g, "<parameter=content>").prefix);
  EXPECT_FALSE(Read(g, Param("path", "a") + "</function>").prefix);
  EXPECT_FALSE(Read(g, Param("path", "a") + "<parameter=path>").prefix);
  EXPECT_FALSE(Read(g, "<parameter=mode>").prefix);
  EXPECT_FALSE(Read(g, "<parameter=path>\n\n</parameter>\n").prefix);
  // A value never holds the closing tag (the parser would end it there), nor controls.
  EXPECT_FALSE(Read(g, Param("path", "a") + "<parameter=content>\nx</parameter>").prefix);
  EXPECT_FALSE(Read(g, Param("path", "a") + "<parameter=content>\nx\n</parameter>x").prefix);
  EXPECT_FALSE(Read(g, Param("path", "a") + "<parameter=content>\nx</tool_call>").prefix);
  EXPECT_FALSE(Read(g, "<parameter=path>\na\x01").prefix);
  EXPECT_FALSE(Read(g, "<parameter=path>\na\xC3(").prefix);  // Malformed UTF-8.
  EXPECT_TRUE(Read(g, "<parameter=path>\n\xC3\xA9\t\"\\{").prefix);
}

TEST(XmlToolCallGrammarTest, ValuesAreTextOrJsonAsTheParserReadsThem) {
  std::shared_ptr<const JsonGrammar> g = Xml(AgentTools(), "search");
  ASSERT_NE(g, nullptr);
  const std::string call = Param("query", "  a \"b\" ") + Param("order", "desc") +
                           Param("limit", "10") + Param("tags", R"(["x", "y"])") +
                           Param("since", "null") + kEnd;
  EXPECT_TRUE(Read(g, call).complete);
  EXPECT_EQ(Parsed(AgentTools(), "<function=search>\n" + call),
            Json::parse(R"({"query": "  a \"b\" ", "order": "desc", "limit": 10,
                            "tags": ["x", "y"], "since": null})"));
  EXPECT_TRUE(Read(g, Param("query", "q") + Param("since", "1700000000") + kEnd).complete);
  EXPECT_EQ(Parsed(AgentTools(), "<function=search>\n" + Param("query", "q") +
                                     Param("since", "17") + kEnd)["since"],
            17);
  // An enum's texts as they are (not quoted); JSON by the schema.
  EXPECT_FALSE(Read(g, Param("query", "q") + "<parameter=order>\n\"desc\"").prefix);
  EXPECT_FALSE(Read(g, Param("query", "q") + Param("order", "descending")).prefix);
  EXPECT_FALSE(Read(g, Param("query", "q") + "<parameter=limit>\n0").prefix);
  EXPECT_FALSE(Read(g, Param("query", "q") + "<parameter=limit>\nten").prefix);
  EXPECT_FALSE(Read(g, Param("query", "q") + "<parameter=tags>\n[1").prefix);
  EXPECT_FALSE(Read(g, Param("query", "q") + "<parameter=limit>\n5 \n").prefix);
  // Enum values that would hold a closing tag are left out.
  Json tools = Json::array({Tool("e", Json::parse(R"({"type": "object", "properties": {
      "tags": {"type": "array", "items": {"enum": ["</parameter>", "ok"]}},
      "mode": {"enum": ["a</tool_call>b", "plain"]}}})"))});
  std::shared_ptr<const JsonGrammar> e = Xml(tools, "e");
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(Read(e, "<parameter=tags>\n[\"</").prefix);
  EXPECT_TRUE(Read(e, Param("tags", R"(["ok"])") + kEnd).complete);
  EXPECT_FALSE(Read(e, "<parameter=mode>\na<").prefix);
  EXPECT_TRUE(Read(e, Param("mode", "plain") + kEnd).complete);
  // JSON strings inside a value hold neither closing tag as written.
  EXPECT_FALSE(Read(g, Param("query", "q") + "<parameter=tags>\n[\"</parameter>").prefix);
  EXPECT_FALSE(Read(g, Param("query", "q") + "<parameter=tags>\n[\"</tool_call>").prefix);
  EXPECT_TRUE(Read(g, Param("query", "q") + "<parameter=tags>\n[\"<\\/parameter>\"]").prefix);
}

TEST(XmlToolCallGrammarTest, RequiredCallsAnyFunctionAndMore) {
  std::shared_ptr<const JsonGrammar> g = Xml(AgentTools(), "");
  ASSERT_NE(g, nullptr);
  const std::string write =
      "<function=write_file>\n" + Param("path", "p") + Param("content", "c") + kEnd;
  const std::string search = "<function=search>\n" + Param("query", "q") + kEnd;
  EXPECT_TRUE(Read(g, write).complete);
  EXPECT_TRUE(Read(g, search + "\n<tool_call>\n" + write).complete);
  EXPECT_FALSE(Read(g, "<function=rm>").prefix);
  EXPECT_FALSE(Read(g, "<function=search>\n<parameter=path>").prefix);
  EXPECT_FALSE(Read(g, search + "\n<tool_call>\n").complete);
}

TEST(XmlToolCallGrammarTest, WhatTheFormCannotWriteIsFreeUnlessStrict) {
  // Members besides the properties, and a name with '>'.
  const Json open = Json::parse(R"({"type": "object", "properties": {"a": {"type": "string"}}})");
  Json with_extra = open;
  with_extra["additionalProperties"] = true;
  const Json odd_name =
      Json::parse(R"({"type": "object", "properties": {"a>b": {"type": "string"}}})");
  const Json lt_name =
      Json::parse(R"({"type": "object", "properties": {"a</tool_call": {"type": "string"}}})");
  for (const Json& params : {with_extra, odd_name, lt_name}) {
    Json tools = Json::array({Tool("f", params)});
    std::shared_ptr<const JsonGrammar> g = Xml(tools, "f");
    ASSERT_NE(g, nullptr);
    // Free parameters are still members the parser reads: any names, text values.
    const std::string call = Param("z", "1") + Param("b c", "x</function>") + kEnd;
    EXPECT_TRUE(Read(g, call).complete) << params;
    EXPECT_EQ(Parsed(tools, "<function=f>\n" + call), Json({{"z", "1"}, {"b c", "x</function>"}}));
    EXPECT_TRUE(Read(g, kEnd).complete);
    EXPECT_FALSE(Read(g, "hello</function>").prefix);
    EXPECT_FALSE(Read(g, "<parameter=>").prefix);
    EXPECT_FALSE(Read(g, "<parameter=a<b").prefix);
    EXPECT_FALSE(Read(g, "<parameter=a\n").prefix);
    EXPECT_FALSE(Read(g, "</function>\n</tool_call>x").prefix);
    tools[0] = Tool("f", params, /*strict=*/true);
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> strict =
        ForcedToolCallGrammar(tools, "f", ToolCallMarkup::kXml);
    EXPECT_EQ(strict.status().code(), absl::StatusCode::kInvalidArgument) << params;
    EXPECT_THAT(strict.status().message(), HasSubstr("strict function \"f\""));
  }
  // A parameter read as a string whose schema accepts none (an object behind a $ref).
  Json ref = Json::parse(R"({"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}},
      "$defs": {"P": {"type": "object"}}})");
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> strict =
      ForcedToolCallGrammar(Json::array({Tool("f", ref, true)}), "", ToolCallMarkup::kXml);
  EXPECT_THAT(strict.status().message(), HasSubstr("reads its value as a string"));
  // Parameters of no properties but any others are members of any name with text values.
  std::shared_ptr<const JsonGrammar> any =
      Xml(Json::array({Tool("g", Json::parse(R"({"type": "object", "additionalProperties":
          {"type": "string", "enum": ["x", "y"]}})"),
                            true)}),
          "g");
  ASSERT_NE(any, nullptr);
  EXPECT_TRUE(Read(any, Param("k1", "x") + Param("k2", "y") + kEnd).complete);
  EXPECT_FALSE(Read(any, Param("k1", "z")).prefix);
  // A string branch no string meets is no string: free parameters (not a refused grammar).
  std::shared_ptr<const JsonGrammar> dead =
      Xml(Json::array({Tool("h", Json::parse(R"({"type": "object", "properties": {"n": {"anyOf":
          [{"type": "string", "minLength": 5, "maxLength": 2}, {"type": "integer"}]}}})"))}),
          "h");
  ASSERT_NE(dead, nullptr);
  EXPECT_TRUE(Read(dead, Param("n", "text") + kEnd).complete);
  // Many kinds of string (each a matcher stack at every newline) are more than the form keeps.
  Json kinds = Json::array();
  for (int i = 0; i < 10; ++i) kinds.push_back({{"type", "string"}, {"minLength", i}});
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> many = ForcedToolCallGrammar(
      Json::array(
          {Tool("k", Json{{"type", "object"}, {"properties", {{"s", {{"anyOf", kinds}}}}}}, true)}),
      "k", ToolCallMarkup::kXml);
  EXPECT_THAT(many.status().message(), HasSubstr("kinds of string"));
  // No parameters at all: the call closes at once.
  std::shared_ptr<const JsonGrammar> none = Xml(
      Json::array({Tool("now", Json::parse(R"({"type": "object", "properties": {}})"))}), "now");
  ASSERT_NE(none, nullptr);
  EXPECT_TRUE(Read(none, kEnd).complete);
  EXPECT_FALSE(Read(none, "<parameter=").prefix);
}

TEST(XmlToolCallGrammarTest, StrictUnderAutoHoldsCallsInTheXmlForm) {
  Json tools = AgentTools();
  tools[0]["function"]["strict"] = true;
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      StrictToolCallGrammar(tools, ToolCallMarkup::kXml);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_NE(*g, nullptr);
  EXPECT_TRUE(
      Read(*g, "\n<function=write_file>\n" + Param("path", "p") + Param("content", "") + kEnd)
          .complete);
  EXPECT_FALSE(Read(*g, "\n<function=write_file>\n<parameter=x").prefix);
  // search is not strict: free parameters.
  EXPECT_TRUE(Read(*g, "\n<function=search>\n" + Param("anything", "[") + kEnd).complete);
  EXPECT_FALSE(Read(*g, "\n<function=other>").prefix);
}

// The real Qwen3 tokenizer: a model's tokens of a call in the XML form are allowed one by one,
// a long file's content included, and the end of turn only after the call.
class XmlToolCallTokensTest : public testing::ToolCallTokensTest {};

TEST_F(XmlToolCallTokensTest, AModelsOwnTokensOfACallAreAllowed) {
  std::string file;
  for (int i = 0; i < 40; ++i) {
    file += "  <div class=\"row\">" + std::to_string(i) + " \xC3\xA9\xE2\x82\xAC</div>\n";
  }
  file += "</parameter\n";
  ExpectAllowedThrough(Xml(AgentTools(), "write_file"),
                       Param("path", "web/index.html") + Param("content", file) + kEnd);
  ExpectAllowedThrough(Xml(AgentTools(), ""), "<function=search>\n" +
                                                  Param("query", "weather in \"Oslo\"") +
                                                  Param("order", "asc") + Param("limit", "5") +
                                                  kEnd + "\n<tool_call>\n<function=write_file>\n" +
                                                  Param("path", "a") + Param("content", "") + kEnd);
}

// Inside a value, the mask is exactly the tokens the matcher accepts: where "</" may begin the
// closing tag or stay content, and in the free text of a value.
TEST_F(XmlToolCallTokensTest, MasksInsideValuesAreExactlyWhatTheMatcherAccepts) {
  std::shared_ptr<const JsonGrammar> g = Xml(AgentTools(), "write_file");
  const auto* index = dynamic_cast<const TrieTokenIndex*>(index_.get());
  ASSERT_NE(index, nullptr);
  const std::string head = Param("path", "a") + "<parameter=content>\n";
  for (const std::string& text : {head + "abc", head + "abc\n</", head + "x\n</parameter"}) {
    std::unique_ptr<JsonConstraint> c = JsonConstraint::Create(g, index_.get(), {end_});
    std::vector<uint64_t> mask((static_cast<size_t>(index_->id_limit()) + 63) / 64);
    absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok());
    for (TokenId id : *ids) ASSERT_TRUE(c->Accept(id).ok()) << tokenizer_->Decode({id}).value();
    ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok());
    json::ByteMatcher at(static_cast<const json::CompiledGrammar*>(g.get()));
    ASSERT_TRUE(at.AdvanceAll(text));
    int allowed = 0;
    for (TokenId id = 0; id < index_->id_limit(); ++id) {
      const std::string_view bytes = index->bytes(id);
      json::ByteMatcher m = at;
      const bool accepted = !bytes.empty() && m.AdvanceAll(bytes);
      ASSERT_EQ(TokenAllowedHere(mask, id), accepted)
          << "token \"" << std::string(bytes) << "\" after " << text;
      allowed += accepted ? 1 : 0;
    }
    EXPECT_GT(allowed, 1000) << text;
  }
}

}  // namespace
}  // namespace cairn::infer::text
