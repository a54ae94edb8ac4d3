#include "services/infer/text/tool_call_grammar.h"

#include <filesystem>
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
#include "services/infer/text/token_index.h"
#include "services/infer/text/tokenizer.h"
#include "tests/unit/services/infer/text/tool_call_test_util.h"

namespace cairn::infer::text {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;
using testing::Read;
using testing::Tool;

Json WeatherAndSearch() {
  return Json::array(
      {Tool("get_weather", Json::parse(R"({"type": "object", "properties": {"city": {"type":
           "string"}, "days": {"type": "integer"}}, "required": ["city"]})")),
       Tool("search", Json::parse(R"({"type": "object", "properties": {"query": {"type":
           "string"}}, "required": ["query"], "additionalProperties": false})"))});
}

std::shared_ptr<const JsonGrammar> Grammar(const Json& tools, const std::string& function) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = ForcedToolCallGrammar(tools, function);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

TEST(ForcedToolCallGrammarTest, ANamedFunctionIsItsArgumentsThenTheCallsEnd) {
  std::shared_ptr<const JsonGrammar> g = Grammar(WeatherAndSearch(), "get_weather");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Read(g, R"( {"city": "Paris", "days": 3}})"
                      "\n</tool_call>")
                  .complete);
  EXPECT_TRUE(Read(g, R"({"city":"Paris"}})"
                      "\n</tool_call>")
                  .complete);
  // Not complete before the call's end; nothing after it.
  EXPECT_FALSE(Read(g, R"( {"city": "Paris"}})").complete);
  EXPECT_TRUE(Read(g, R"( {"city": "Paris"}})"
                      "\n</tool")
                  .prefix);
  EXPECT_FALSE(Read(g, R"( {"city": "Paris"}})"
                       "\n</tool_call>\n")
                   .prefix);
  // Arguments its parameters refuse.
  EXPECT_FALSE(Read(g, R"( {"days": 3})").prefix);  // city is required first.
  EXPECT_FALSE(Read(g, R"( {"city": 7)").prefix);   // Not a string.
  EXPECT_FALSE(Read(g, R"( {"city": "a"})"
                       "\n</tool_call>")
                   .prefix);  // The call's brace.
  EXPECT_FALSE(Read(g, R"( [1])").prefix);
}

// The output parser ends a call at the first "</tool_call>" wherever it is: no string of the
// arguments may hold it as written (its escaped form may).
TEST(ForcedToolCallGrammarTest, NoStringHoldsTheCallsClosingTag) {
  std::shared_ptr<const JsonGrammar> g = Grammar(WeatherAndSearch(), "search");
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(Read(g, R"( {"query": "a</tool_call>)").prefix);
  EXPECT_TRUE(Read(g, R"( {"query": "a<\/tool_call></tool_cal>"}})"
                      "\n</tool_call>")
                  .complete);
  std::shared_ptr<const JsonGrammar> any = Grammar(WeatherAndSearch(), "");
  ASSERT_NE(any, nullptr);
  EXPECT_FALSE(Read(any, R"({"name": "search", "arguments": {"query": "</tool_call>)").prefix);
  // Nor does an enum value (left out), and a property named so is refused.
  Json tools = Json::array({Tool("e", Json::parse(R"({"type": "object", "properties": {"m":
      {"enum": ["</tool_call>", "ok"]}}, "required": ["m"]})"))});
  std::shared_ptr<const JsonGrammar> e = Grammar(tools, "e");
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(Read(e, R"( {"m": "</)").prefix);
  EXPECT_TRUE(Read(e, R"( {"m": "ok"}})"
                      "\n</tool_call>")
                  .complete);
  tools[0] = Tool("e", Json::parse(R"({"type": "object", "properties": {"a</tool_call>b":
      {"type": "integer"}}})"),
                  true);
  EXPECT_THAT(ForcedToolCallGrammar(tools, "e").status().message(),
              HasSubstr("holds the call's markup"));
}

// Hostile schemas cost time linear in their size: an enum of one string of 128 KiB.
TEST(ForcedToolCallGrammarTest, AHugeEnumValueCompilesInTime) {
  Json params = {{"type", "object"},
                 {"properties", {{"v", {{"enum", {std::string(128 * 1024, 'x')}}}}}}};
  for (const ToolCallMarkup markup : {ToolCallMarkup::kJson, ToolCallMarkup::kXml}) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
        ForcedToolCallGrammar(Json::array({Tool("big", params)}), "", markup);
    EXPECT_TRUE(g.ok()) << g.status();
  }
}

TEST(ForcedToolCallGrammarTest, RequiredIsOneOrMoreCallsOfDefinedFunctions) {
  std::shared_ptr<const JsonGrammar> g = Grammar(WeatherAndSearch(), "");
  ASSERT_NE(g, nullptr);
  const std::string weather = R"({"name": "get_weather", "arguments": {"city": "Oslo"}})"
                              "\n</tool_call>";
  const std::string search = R"({"name": "search", "arguments": {"query": "x"}})"
                             "\n</tool_call>";
  EXPECT_TRUE(Read(g, weather).complete);
  EXPECT_TRUE(Read(g, search).complete);
  EXPECT_TRUE(Read(g, weather + "\n<tool_call>\n" + search).complete);
  EXPECT_TRUE(Read(g, weather + "\n<tool_call>\n" + search + "\n<tool_call>\n" + weather).complete);
  EXPECT_FALSE(Read(g, weather + "\n<tool_call>\n").complete);
  EXPECT_FALSE(Read(g, weather + "\n\n").prefix);
  // Unknown names, another function's arguments, members out of the template's order.
  EXPECT_FALSE(Read(g, R"({"name": "rm_rf")").prefix);
  EXPECT_FALSE(Read(g, R"({"name": "search", "arguments": {"city")").prefix);
  EXPECT_FALSE(Read(g, R"({"arguments")").prefix);
  EXPECT_FALSE(Read(g, R"({"name": "search", "arguments": {"query": "x"}, "id": 1)").prefix);
}

TEST(ForcedToolCallGrammarTest, EachFunctionsDefinitionsStayItsOwn) {
  // Both define "Item" (pydantic's $defs), differently; one recurses through "#".
  Json tools =
      Json::array({Tool("add", Json::parse(R"({"type": "object", "properties": {"item": {"$ref":
           "#/$defs/Item"}}, "required": ["item"], "$defs": {"Item": {"type": "object",
           "properties": {"n": {"type": "integer"}}, "required": ["n"]}}})")),
                   Tool("tree", Json::parse(R"({"type": "object", "properties": {"item": {"$ref":
           "#/definitions/Item"}, "child": {"$ref": "#"}}, "required": ["item"],
           "definitions": {"Item": {"type": "string"}}})"))});
  std::shared_ptr<const JsonGrammar> g = Grammar(tools, "");
  ASSERT_NE(g, nullptr);
  const std::string end = "}\n</tool_call>";
  EXPECT_TRUE(Read(g, R"({"name": "add", "arguments": {"item": {"n": 1}})" + end).complete);
  EXPECT_FALSE(Read(g, R"({"name": "add", "arguments": {"item": ")").prefix);
  EXPECT_TRUE(
      Read(g, R"({"name": "tree", "arguments": {"item": "a", "child": {"item": "b"}})" + end)
          .complete);
  EXPECT_FALSE(Read(g, R"({"name": "tree", "arguments": {"item": {)").prefix);
  EXPECT_FALSE(Read(g, R"({"name": "tree", "arguments": {"item": "a", "child": {"n")").prefix);
  // The named form resolves the function's refs in its own document.
  std::shared_ptr<const JsonGrammar> add = Grammar(tools, "add");
  ASSERT_NE(add, nullptr);
  EXPECT_TRUE(Read(add, R"( {"item": {"n": 2}})" + end).complete);
}

TEST(ForcedToolCallGrammarTest, DataThatLooksLikeARefIsLeftAlone) {
  // A const whose value is an object with "$ref", and a property named "$ref".
  Json tools = Json::array({Tool("f", Json::parse(R"({"type": "object", "properties": {"mode":
      {"const": {"$ref": "#"}}, "$ref": {"type": "boolean"}}, "required": ["mode"]})"))});
  std::shared_ptr<const JsonGrammar> g = Grammar(tools, "");
  ASSERT_NE(g, nullptr);
  // (A const is written in its compact serialisation.)
  EXPECT_TRUE(Read(g, R"({"name": "f", "arguments": {"mode": {"$ref":"#"}, "$ref": true}})"
                      "\n</tool_call>")
                  .complete);
}

TEST(ForcedToolCallGrammarTest, ParametersTheGrammarCannotExpressAreAnyObjectUnlessStrict) {
  const Json params = Json::parse(R"({"type": "object", "properties": {"path": {"type":
      "string", "not": {"const": ""}}}})");
  Json tools = Json::array({Tool("read", params), Tool("search", Json{{"type", "object"}})});
  std::shared_ptr<const JsonGrammar> g = Grammar(tools, "");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Read(g, R"({"name": "read", "arguments": {"anything": [1, 2]}})"
                      "\n</tool_call>")
                  .complete);
  EXPECT_FALSE(Read(g, R"({"name": "read", "arguments": [)").prefix);
  std::shared_ptr<const JsonGrammar> named = Grammar(tools, "read");
  ASSERT_NE(named, nullptr);
  EXPECT_TRUE(Read(named, R"( {"x": null}})"
                          "\n</tool_call>")
                  .complete);

  tools[0] = Tool("read", params, /*strict=*/true);
  for (const std::string function : {"", "read"}) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> strict =
        ForcedToolCallGrammar(tools, function);
    EXPECT_EQ(strict.status().code(), absl::StatusCode::kInvalidArgument) << function;
    EXPECT_THAT(strict.status().message(), HasSubstr("strict function \"read\"")) << function;
    EXPECT_THAT(strict.status().message(), HasSubstr("not")) << function;
  }
}

TEST(ForcedToolCallGrammarTest, MissingParametersAreAnyObject) {
  Json tools = Json::array({Json{{"type", "function"}, {"function", {{"name", "now"}}}}});
  std::shared_ptr<const JsonGrammar> g = Grammar(tools, "");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Read(g, R"({"name": "now", "arguments": {}})"
                      "\n</tool_call>")
                  .complete);
}

TEST(ForcedToolCallGrammarTest, BadRequestsAreInvalidArgument) {
  EXPECT_EQ(ForcedToolCallGrammar(WeatherAndSearch(), "nope").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ForcedToolCallGrammar(Json::array(), "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ForcedToolCallGrammar(Json(nullptr), "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ForcedToolCallGrammar(Json::array({Json{{"type", "function"}}}), "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ForcedToolCallGrammarTest, FramedRefusesMalformedItems) {
  using json::SeqItem;
  std::shared_ptr<const JsonGrammar> any = JsonGrammar::AnyObject();
  const auto& inner = static_cast<const json::CompiledGrammar&>(*any);
  const SeqItem value = SeqItem::Value(inner.root());
  SeqItem choice;
  choice.kind = SeqItem::Kind::kChoice;
  choice.texts = {"a", "b"};
  SeqItem chosen;
  chosen.kind = SeqItem::Kind::kChosenValue;
  chosen.values = {inner.root(), inner.root()};
  SeqItem short_chosen = chosen;
  short_chosen.values.pop_back();
  const SeqItem end = SeqItem::Text(">");
  EXPECT_FALSE(json::CompiledGrammar::Framed(inner, {}).ok());
  EXPECT_FALSE(json::CompiledGrammar::Framed(inner, {value}).ok());
  EXPECT_FALSE(json::CompiledGrammar::Framed(inner, {SeqItem::Text(""), value, end}).ok());
  EXPECT_FALSE(json::CompiledGrammar::Framed(inner, std::vector<SeqItem>(65, end)).ok());
  EXPECT_FALSE(json::CompiledGrammar::Framed(inner, {chosen, end}).ok());
  EXPECT_FALSE(json::CompiledGrammar::Framed(inner, {choice, short_chosen, end}).ok());
  EXPECT_FALSE(json::CompiledGrammar::Framed(inner, {SeqItem::Value(1 << 20), end}).ok());
  EXPECT_TRUE(json::CompiledGrammar::Framed(inner, {SeqItem::Text("<"), value, end}).ok());
  EXPECT_TRUE(json::CompiledGrammar::Framed(inner, {choice, chosen, end}).ok());
}

// Every call begins alike, and a matcher follows at most 32 alternatives: the name picks the
// arguments' grammar instead, so each of many functions can still be called, with its own.
TEST(ForcedToolCallGrammarTest, EachOfManyFunctionsCanBeCalled) {
  Json tools = Json::array();
  for (int i = 0; i < 80; ++i) {
    tools.push_back(Tool("tool_" + std::to_string(i),
                         Json{{"type", "object"},
                              {"properties", {{"arg" + std::to_string(i), {{"type", "integer"}}}}},
                              {"required", {"arg" + std::to_string(i)}}}));
  }
  std::shared_ptr<const JsonGrammar> g = Grammar(tools, "");
  ASSERT_NE(g, nullptr);
  for (int i : {0, 7, 31, 32, 55, 79}) {
    const std::string name = "tool_" + std::to_string(i);
    EXPECT_TRUE(Read(g, R"({"name": ")" + name + R"(", "arguments": {"arg)" + std::to_string(i) +
                            R"(": 5}})"
                            "\n</tool_call>")
                    .complete)
        << name;
    EXPECT_FALSE(Read(g, R"({"name": ")" + name + R"(", "arguments": {"arg)" +
                             std::to_string((i + 1) % 80) + R"(")")
                     .prefix)
        << name;
  }
}

// Under "auto", a call the model opens is held when a function is strict: strict functions'
// arguments follow their parameters, the others' are any object; no strict function, no
// grammar.
TEST(StrictToolCallGrammarTest, StrictFunctionsFollowTheirParametersOthersAnyObject) {
  Json tools = WeatherAndSearch();
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> none = StrictToolCallGrammar(tools);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr);
  tools[0]["function"]["strict"] = true;
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = StrictToolCallGrammar(tools);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_NE(*g, nullptr);
  const std::string end = "}\n</tool_call>";
  EXPECT_TRUE(Read(*g,
                   "\n"
                   R"({"name": "get_weather", "arguments": {"city": "Oslo"})" +
                       end)
                  .complete);
  EXPECT_FALSE(Read(*g,
                    "\n"
                    R"({"name": "get_weather", "arguments": {"town")")
                   .prefix);
  EXPECT_TRUE(Read(*g,
                   "\n"
                   R"({"name": "search", "arguments": {"town": [true]})" +
                       end)
                  .complete);
  EXPECT_FALSE(Read(*g,
                    "\n"
                    R"({"name": "other")")
                   .prefix);
  // One call: the next is held anew after its own opening token.
  EXPECT_FALSE(Read(*g,
                    "\n"
                    R"({"name": "search", "arguments": {}})" +
                        end + "\n")
                   .prefix);
  // A strict function the grammar cannot express is any object here (not refused).
  tools[1] = Tool("read", Json::parse(R"({"type": "object", "not": {}})"), /*strict=*/true);
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> loose = StrictToolCallGrammar(tools);
  ASSERT_TRUE(loose.ok()) << loose.status();
  EXPECT_TRUE(Read(*loose,
                   "\n"
                   R"({"name": "read", "arguments": {"x": 1})" +
                       end)
                  .complete);
}

// The real Qwen3 tokenizer: the tokens a model writes a call with are allowed one by one
// (tokens that span the arguments' end and the markup's, such as "}}\n" or "\"}}\n", included),
// and the end of turn only after the call's end.
class ForcedToolCallTokensTest : public testing::ToolCallTokensTest {};

// Free until the `<tool_call>` token: every id allowed, and nothing checked; then the call's
// tokens are held (the end of turn too) until its end, after which the text is free again and
// the next call is held anew.
TEST_F(ForcedToolCallTokensTest, ATriggeredConstraintHoldsOnlyTheCalls) {
  Json tools = WeatherAndSearch();
  tools[0]["function"]["strict"] = true;
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = StrictToolCallGrammar(tools);
  ASSERT_TRUE(g.ok() && *g != nullptr);
  const TokenId open = *tokenizer_->TokenToId("<tool_call>");
  std::unique_ptr<JsonConstraint> c = TriggeredConstraint(*g, index_.get(), {open, -1, {}});
  std::vector<uint64_t> mask((static_cast<size_t>(index_->id_limit()) + 63) / 64);
  const std::string call =
      "\n"
      R"({"name": "get_weather", "arguments": {"city": "Rome"}})"
      "\n</tool_call>";
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<std::vector<TokenId>> free_text = tokenizer_->Encode("Let me check.\n");
    ASSERT_TRUE(free_text.ok());
    for (TokenId id : *free_text) {
      EXPECT_TRUE(c->Unconstrained());
      ASSERT_TRUE(c->Accept(id).ok());
    }
    ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok());
    EXPECT_TRUE(TokenAllowedHere(mask, end_));
    ASSERT_TRUE(c->Accept(open).ok());
    absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode(call);
    ASSERT_TRUE(ids.ok());
    for (TokenId id : *ids) {
      EXPECT_FALSE(c->Unconstrained());
      ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok());
      EXPECT_FALSE(TokenAllowedHere(mask, end_));
      ASSERT_TRUE(TokenAllowedHere(mask, id)) << tokenizer_->Decode({id}).value();
      ASSERT_TRUE(c->Accept(id).ok());
    }
    EXPECT_TRUE(c->Unconstrained()) << "round " << round;
  }
  // A held call refuses what its grammar does not allow.
  ASSERT_TRUE(c->Accept(open).ok());
  EXPECT_FALSE(c->Accept(*tokenizer_->TokenToId("hello")).ok());
}

// Inside a string whose text so far ends in part of the closing tag, the mask is exactly the
// tokens the matcher accepts.
TEST_F(ForcedToolCallTokensTest, MasksNearTheClosingTagAreExactlyWhatTheMatcherAccepts) {
  std::shared_ptr<const JsonGrammar> g = Grammar(WeatherAndSearch(), "search");
  const auto* index = dynamic_cast<const TrieTokenIndex*>(index_.get());
  ASSERT_NE(index, nullptr);
  for (const std::string text :
       {R"( {"query": "a)", R"( {"query": "a</)", R"( {"query": "a</tool_call)"}) {
    std::unique_ptr<JsonConstraint> c = JsonConstraint::Create(g, index_.get(), {end_});
    std::vector<uint64_t> mask((static_cast<size_t>(index_->id_limit()) + 63) / 64);
    absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok());
    for (TokenId id : *ids) ASSERT_TRUE(c->Accept(id).ok()) << text;
    ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok());
    json::ByteMatcher at(static_cast<const json::CompiledGrammar*>(g.get()));
    ASSERT_TRUE(at.AdvanceAll(text));
    for (TokenId id = 0; id < index_->id_limit(); ++id) {
      const std::string_view bytes = index->bytes(id);
      json::ByteMatcher m = at;
      ASSERT_EQ(TokenAllowedHere(mask, id), !bytes.empty() && m.AdvanceAll(bytes))
          << "token \"" << std::string(bytes) << "\" after " << text;
    }
  }
}

// One call only (parallel_tool_calls false): after the call, held by a grammar or ended by the
// close token where none holds it, only the end of the turn may follow.
TEST_F(ForcedToolCallTokensTest, ASingleCallEndsTheTurn) {
  Json tools = WeatherAndSearch();
  tools[0]["function"]["strict"] = true;
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> strict = StrictToolCallGrammar(tools);
  ASSERT_TRUE(strict.ok() && *strict != nullptr);
  const TokenId open = *tokenizer_->TokenToId("<tool_call>");
  const TokenId close = *tokenizer_->TokenToId("</tool_call>");
  std::vector<uint64_t> mask((static_cast<size_t>(index_->id_limit()) + 63) / 64);
  for (const bool held : {true, false}) {
    SCOPED_TRACE(held ? "held by a grammar" : "free");
    std::unique_ptr<JsonConstraint> c =
        TriggeredConstraint(held ? *strict : nullptr, index_.get(), {open, close, {end_}});
    absl::StatusOr<std::vector<TokenId>> text = tokenizer_->Encode(
        "Checking.\n<tool_call>\n"
        R"({"name": "get_weather", "arguments": {"city": "Rome"}})"
        "\n</tool_call>");
    ASSERT_TRUE(text.ok());
    for (TokenId id : *text) {
      EXPECT_FALSE(c->Complete() && !c->Unconstrained());
      ASSERT_TRUE(c->Accept(id).ok()) << tokenizer_->Decode({id}).value();
    }
    EXPECT_TRUE(c->Complete());
    EXPECT_FALSE(c->Unconstrained());
    ASSERT_TRUE(c->Allowed(absl::MakeSpan(mask)).ok());
    int allowed = 0;
    for (TokenId id = 0; id < index_->id_limit(); ++id) allowed += TokenAllowedHere(mask, id);
    EXPECT_EQ(allowed, 1);
    EXPECT_TRUE(TokenAllowedHere(mask, end_));
    EXPECT_FALSE(c->Accept(open).ok());
    EXPECT_TRUE(c->Accept(end_).ok());
  }
  // "required" with one call: its end is the answer's.
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> one =
      ForcedToolCallGrammar(WeatherAndSearch(), "", ToolCallMarkup::kJson, /*single=*/true);
  ASSERT_TRUE(one.ok());
  const std::string call = R"({"name": "search", "arguments": {"query": "x"}})"
                           "\n</tool_call>";
  EXPECT_TRUE(Read(*one, call).complete);
  EXPECT_FALSE(Read(*one, call + "\n").prefix);
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> xml =
      ForcedToolCallGrammar(WeatherAndSearch(), "", ToolCallMarkup::kXml, /*single=*/true);
  ASSERT_TRUE(xml.ok());
  const std::string xml_call =
      "<function=search>\n<parameter=query>\nx\n</parameter>\n</function>\n</tool_call>";
  EXPECT_TRUE(Read(*xml, xml_call).complete);
  EXPECT_FALSE(Read(*xml, xml_call + "\n").prefix);
}

TEST_F(ForcedToolCallTokensTest, AModelsOwnTokensOfACallAreAllowed) {
  ExpectAllowedThrough(Grammar(WeatherAndSearch(), "get_weather"),
                       R"( {"city": "Paris", "days": 3}})"
                       "\n</tool_call>");
  ExpectAllowedThrough(Grammar(WeatherAndSearch(), "search"),
                       R"( {"query": "weather in \"Oslo\""}})"
                       "\n</tool_call>");
  ExpectAllowedThrough(Grammar(WeatherAndSearch(), ""),
                       R"({"name": "search", "arguments": {"query": "x"}})"
                       "\n</tool_call>\n<tool_call>\n"
                       R"({"name": "get_weather", "arguments": {"city": "Rome"}})"
                       "\n</tool_call>");
}

}  // namespace
}  // namespace cairn::infer::text
