#include "services/infer/text/json_matcher.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "services/infer/text/json_constraint.h"
#include "tests/unit/services/infer/text/json_test_util.h"

namespace cairn::infer::text {
namespace {

using json::ByteMatcher;
using testing::Compiled;

struct Doc {
  std::string text;
  bool valid;
};

// Feeds `text` byte by byte; returns whether every byte is accepted and the value is complete.
bool Matches(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  ByteMatcher m(Compiled(g));
  return m.AdvanceAll(text) && m.Complete();
}

void ExpectDocs(const std::string& schema, const std::vector<Doc>& docs) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(schema);
  ASSERT_TRUE(g.ok()) << schema << ": " << g.status();
  for (const Doc& d : docs) {
    EXPECT_EQ(Matches(*g, d.text), d.valid) << "schema " << schema << "\ntext " << d.text;
  }
}

TEST(ByteMatcherTest, Strings) {
  ExpectDocs(R"({"type": "string"})", {{R"("")", true},
                                       {R"("abc")", true},
                                       {"\"caf\xC3\xA9 \xE4\xBD\xA0 \xF0\x9F\x98\x80\"", true},
                                       {R"("\" \\ \/ \b \f \n \r \t")", true},
                                       {R"("\u00e9\uD83D\uDE00")", true},
                                       {R"("\uD83D")", false},  // Lone high surrogate.
                                       {R"("\uDE00")", false},  // Lone low surrogate.
                                       {R"("\uD83Dx")", false},
                                       {R"("\x")", false},
                                       {R"("\u12G4")", false},
                                       {"\"a\nb\"", false},              // Raw control character.
                                       {"\"\xC3\"", false},              // Truncated UTF-8.
                                       {"\"\xC0\x80\"", false},          // Overlong.
                                       {"\"\xED\xA0\x80\"", false},      // Encoded surrogate.
                                       {"\"\xF4\x90\x80\x80\"", false},  // Above U+10FFFF.
                                       {"\"\xFF\"", false},
                                       {R"("abc)", false},
                                       {R"("a" )", false},  // Nothing after the top-level value.
                                       {R"( "a")", false},  // Nor before it.
                                       {R"(abc)", false}});
}

TEST(ByteMatcherTest, StringLengthsCountCodePoints) {
  ExpectDocs(R"({"type": "string", "minLength": 2, "maxLength": 3})",
             {{R"("a")", false},
              {R"("ab")", true},
              {"\"\xC3\xA9\xC3\xA9\xC3\xA9\"", true},
              {"\"\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\"", false},
              {R"("\n\uD83D\uDE00x")", true},
              {R"("abcd")", false}});
}

TEST(ByteMatcherTest, Numbers) {
  ExpectDocs(R"({"type": "number"})", {{"0", true},
                                       {"-0", true},
                                       {"12", true},
                                       {"-12.5e+3", true},
                                       {"1E9", true},
                                       {"0.25", true},
                                       {"01", false},
                                       {"-", false},
                                       {"1.", false},
                                       {".5", false},
                                       {"1e", false},
                                       {"+1", false},
                                       {"1.5.2", false},
                                       {std::string(json::kMaxIntegerDigits, '9'), true},
                                       {std::string(json::kMaxIntegerDigits + 1, '9'), false},
                                       // Every value a finite double (1e400 is not).
                                       {std::string(json::kMaxIntegerDigits, '9') + "e99", true},
                                       {"1e-99", true},
                                       {"1e100", false},
                                       {"1e400", false}});
  ExpectDocs(R"({"type": "integer"})",
             {{"0", true}, {"-42", true}, {"1.0", false}, {"1e3", false}});
}

TEST(ByteMatcherTest, LiteralsShareTriePrefixes) {
  ExpectDocs(R"({"enum": ["a", "ab", 1, 12, null, true, {"k": [1, "x"]}]})",
             {{R"("a")", true},
              {R"("ab")", true},
              {R"("abc")", false},
              {"1", true},
              {"12", true},
              {"123", false},
              {"null", true},
              {"nul", false},
              {"true", true},
              {"false", false},
              {R"({"k":[1,"x"]})", true},
              {R"({"k": [1, "x"]})", false}});  // Exactly the compact serialisation.
  ExpectDocs(R"({"type": "boolean"})", {{"true", true}, {"false", true}, {"null", false}});
  ExpectDocs(R"({"const": "caf\u00e9"})", {{"\"caf\xC3\xA9\"", true}, {R"("cafe")", false}});
}

TEST(ByteMatcherTest, ObjectsFollowPropertyOrderWithOptionalOnesSkippable) {
  const std::string schema = R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
      "required": ["b"]})";
  ExpectDocs(schema, {{R"({"b":"x"})", true},
                      {R"({"a":1,"b":"x","c":true})", true},
                      {R"({"b":"x","c":false})", true},
                      {R"({"a":1,"b":"x"})", true},
                      {R"({"a":1})", false},            // b is required.
                      {R"({"b":"x","a":1})", false},    // Schema order.
                      {R"({"b":"x","b":"y"})", false},  // Once.
                      {R"({"b":"x","d":1})", false},    // No additional properties.
                      {R"({"b":"x",})", false},
                      {R"({})", false},
                      {"{\n  \"a\": 1,\n  \"b\": \"x\"\n}", true},
                      {"{ \"b\" : \"x\" }", true}});
}

TEST(ByteMatcherTest, AdditionalPropertiesComeAfterNamedOnesAndNeverRepeatThem) {
  const std::string schema = R"({"type": "object", "properties": {"id": {"type": "integer"}},
      "additionalProperties": {"type": "string"}})";
  ExpectDocs(schema, {{R"({"id":1,"x":"a","y":"b"})", true},
                      {R"({"x":"a"})", true},
                      {R"({})", true},
                      {R"({"x":1})", false},
                      {R"({"id":"a"})", false},  // A named key takes its own schema.
                      {R"({"x":"a","id":"b"})", false},
                      {R"({"idx":"a"})", true},
                      {R"({"i":"a"})", true},
                      {R"({"x\n":"a"})", false}});  // No escapes where names are excluded.
  ExpectDocs(R"({"type": "object"})", {{R"({"a":1,"b":{}})", true}});
  ExpectDocs(R"({"type": "object", "additionalProperties": true})",
             {{R"({"a\"b":[1,{"c":null}]})", true}, {R"({"a":1,})", false}});
}

TEST(ByteMatcherTest, Arrays) {
  ExpectDocs(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
             {{"[]", false},
              {"[1]", true},
              {"[1,2,3]", true},
              {"[1,2,3,4]", false},
              {"[ 1 , 2 ]", true},
              {"[1,]", false},
              {"[\"a\"]", false}});
  ExpectDocs(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "null"}]})",
             {{"[]", true},
              {R"(["a"])", true},
              {R"(["a",null])", true},
              {R"(["a",null,1])", false},
              {R"([null])", false}});
}

TEST(ByteMatcherTest, AnyValueAndAlternatives) {
  ExpectDocs(R"({})", {{"null", true},
                       {R"({"a":[1,-2.5e3,"x",{"b":false}],"c":{}})", true},
                       {"[[[[]]]]", true},
                       {"nan", false},
                       {"{'a':1}", false}});
  ExpectDocs(R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}},
                 "required": ["a"]}, {"type": "object", "properties": {"b": {"type": "integer"}},
                 "required": ["b"]}, {"type": "null"}]})",
             {{R"({"a":"x"})", true}, {R"({"b":2})", true}, {R"({"a":2})", false}, {"null", true}});
  ExpectDocs(R"({"type": ["integer", "string"]})", {{"3", true}, {R"("3")", true}, {"3.5", false}});
}

TEST(ByteMatcherTest, SchemasTheOpenAiSdksSend) {
  // Python: client.beta.chat.completions.parse(response_format=Model), pydantic 2 through the
  // SDK's to_strict_json_schema: $defs, an Enum, Optional as anyOf with null, titles, a $ref
  // with a description, a discriminated union (oneOf with its "discriminator").
  const std::string pydantic = R"({"$defs": {"Cat": {"properties": {"pet_type": {"const": "cat",
      "title": "Pet Type", "type": "string"}, "meows": {"title": "Meows", "type": "integer"}},
      "required": ["pet_type", "meows"], "title": "Cat", "type": "object",
      "additionalProperties": false}, "Dog": {"properties": {"pet_type": {"const": "dog",
      "title": "Pet Type", "type": "string"}, "barks": {"title": "Barks", "type": "number"}},
      "required": ["pet_type", "barks"], "title": "Dog", "type": "object",
      "additionalProperties": false}, "Color": {"enum": ["red", "green"], "title": "Color",
      "type": "string"}}, "properties": {"pet": {"discriminator": {"mapping": {"cat":
      "#/$defs/Cat", "dog": "#/$defs/Dog"}, "propertyName": "pet_type"}, "oneOf": [{"$ref":
      "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}], "title": "Pet"}, "color": {"$ref":
      "#/$defs/Color", "description": "The pet's colour"}, "nickname": {"anyOf": [{"type":
      "string"}, {"type": "null"}], "title": "Nickname"}}, "required": ["pet", "color",
      "nickname"], "title": "Owner", "type": "object", "additionalProperties": false})";
  ExpectDocs(pydantic,
             {{R"({"pet":{"pet_type":"cat","meows":3},"color":"red","nickname":null})", true},
              {R"({"pet":{"pet_type":"dog","barks":1.5},"color":"green","nickname":"Rex"})", true},
              {R"({"pet":{"pet_type":"cat","barks":1},"color":"red","nickname":null})", false},
              {R"({"pet":{"pet_type":"dog","barks":1},"color":"blue","nickname":null})", false}});
  // JavaScript: zodResponseFormat(schema, "person") (zod-to-json-schema in OpenAI's strict
  // mode): draft 07, "definitions", nullable as a type list, recursion through a definition.
  const std::string zod = R"({"type": "object", "properties": {"name": {"type": "string"},
      "age": {"type": ["number", "null"]}, "tags": {"type": "array", "items": {"type": "string",
      "enum": ["a", "b"]}}, "next": {"anyOf": [{"$ref": "#/definitions/person"}, {"type":
      "null"}]}}, "required": ["name", "age", "tags", "next"], "additionalProperties": false,
      "definitions": {"person": {"type": "object", "properties": {"name": {"type": "string"},
      "age": {"type": ["number", "null"]}, "tags": {"type": "array", "items": {"type": "string",
      "enum": ["a", "b"]}}, "next": {"anyOf": [{"$ref": "#/definitions/person"}, {"type":
      "null"}]}}, "required": ["name", "age", "tags", "next"], "additionalProperties": false}},
      "$schema": "http://json-schema.org/draft-07/schema#"})";
  ExpectDocs(zod, {{R"({"name":"x","age":null,"tags":[],"next":null})", true},
                   {R"({"name":"x","age":3,"tags":["a","b"],"next":{"name":"y","age":1.5,)"
                    R"("tags":["b"],"next":null}})",
                    true},
                   {R"({"name":"x","age":3,"tags":["c"],"next":null})", false},
                   {R"({"name":"x","age":3,"tags":[],"next":null,"extra":1})", false}});
}

TEST(ByteMatcherTest, IntegerBoundsThatDigitCountsAndSignsExpress) {
  // zod 4's z.number().int() (openai-node's zodResponseFormat through z.toJSONSchema) is
  // bounded to JavaScript's safe integers: at most 15 digits stay inside them.
  ExpectDocs(R"({"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991})",
             {{"-999999999999999", true},
              {"999999999999999", true},
              {"0", true},
              {"9999999999999999", false},
              {"1.5", false}});
  // z.int().nonnegative(); pydantic's Field(ge=0) and Field(gt=0).
  ExpectDocs(R"({"type": "integer", "minimum": 0, "maximum": 9007199254740991})",
             {{"0", true}, {"42", true}, {"-1", false}, {"-0", false}});
  ExpectDocs(R"({"type": ["integer", "null"], "exclusiveMinimum": 0})",
             {{"1", true}, {"100", true}, {"null", true}, {"0", false}, {"-3", false}});
  ExpectDocs(R"({"type": "number", "minimum": 0})",
             {{"0.5", true}, {"1e-3", true}, {"-0.5", false}});
  // Bounds do not apply to other types.
  ExpectDocs(R"({"type": "string", "minimum": 3})", {{R"("a")", true}});
}

TEST(ByteMatcherTest, RecursiveSchemas) {
  const std::string tree = R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"]}}, "$ref": "#/$defs/node"})";
  ExpectDocs(tree, {{R"({"v":1})", true},
                    {R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})", true},
                    {R"({"v":1,"kids":[{"kids":[]}]})", false}});
  const std::string list = R"({"type": "object", "properties": {"next": {"anyOf": [
      {"$ref": "#"}, {"type": "null"}]}}, "required": ["next"]})";
  ExpectDocs(list, {{R"({"next":null})", true}, {R"({"next":{"next":{"next":null}}})", true}});
}

TEST(ByteMatcherTest, AlternativesSharingReferencesAreExpandedOnce) {
  // d0 = anyOf[d1, d1], d1 = anyOf[d2, d2], ...: 2^30 paths to the one string at the end.
  // Followed path by path, the first byte would take hours.
  const int n = 30;
  std::string defs;
  for (int i = 0; i < n; ++i) {
    const std::string next = R"({"$ref": "#/$defs/d)" + std::to_string(i + 1) + R"("})";
    defs += R"("d)" + std::to_string(i) + R"(": {"anyOf": [)" + next + ", " + next + "]}, ";
  }
  defs += R"("d)" + std::to_string(n) + R"(": {"type": "string"})";
  const std::string schema = R"({"$defs": {)" + defs + R"(}, "$ref": "#/$defs/d0"})";

  ExpectDocs(schema, {{R"("x")", true}, {"1", false}});
}

TEST(ByteMatcherTest, NestingIsBoundedAndStaysCompletable) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema("{}");
  ASSERT_TRUE(g.ok()) << g.status();
  ByteMatcher m(Compiled(*g));
  int opened = 0;
  while (m.Advance('[')) ++opened;

  std::string rest;
  const bool completed = testing::CompleteGreedily(m, &rest);

  EXPECT_EQ(opened, json::kMaxValueNesting);
  EXPECT_TRUE(completed);
  EXPECT_EQ(rest, std::string(static_cast<size_t>(opened), ']'));
}

TEST(ByteMatcherTest, WhitespaceRunsAreBounded) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema("{}");
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string blanks(json::kMaxWhitespaceBlanks, ' ');

  EXPECT_TRUE(Matches(*g, "[\n" + blanks + "1]"));
  EXPECT_TRUE(Matches(*g, "[" + blanks.substr(1) + "\t\n1]"));
  EXPECT_FALSE(Matches(*g, "[\n" + blanks + " 1]"));
  EXPECT_FALSE(Matches(*g, "[\n\n1]"));
  EXPECT_FALSE(Matches(*g, "[\r\n1]"));
  EXPECT_TRUE(Matches(*g, "[\n  1,\n  2\n]"));  // Each run is counted apart.
}

TEST(ByteMatcherTest, MultiByteCharactersMayArriveSplit) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      JsonGrammar::FromSchema(R"({"type": "string", "maxLength": 1})");
  ASSERT_TRUE(g.ok()) << g.status();
  ByteMatcher m(Compiled(*g));

  ASSERT_TRUE(m.AdvanceAll("\"\xF0\x9F"));
  ByteMatcher before_end = m;
  EXPECT_FALSE(before_end.Advance('"'));
  ASSERT_TRUE(m.AdvanceAll("\x98"));
  EXPECT_FALSE(m.Advance('a'));
  ASSERT_TRUE(m.AdvanceAll("\x80\""));
  EXPECT_TRUE(m.Complete());
  EXPECT_TRUE(m.AtEnd());
}

TEST(ByteMatcherTest, StatesCompareAndHashByValue) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema("{}");
  ASSERT_TRUE(g.ok()) << g.status();
  ByteMatcher a(Compiled(*g));
  ByteMatcher b(Compiled(*g));
  ASSERT_TRUE(a.AdvanceAll(R"({"x":"ab)"));
  ASSERT_TRUE(b.AdvanceAll(R"({"y":"cdef)"));

  absl::flat_hash_set<ByteMatcher> set = {a, b};

  EXPECT_EQ(a, b);  // Inside an unbounded string: the content read is not part of the state.
  EXPECT_EQ(set.size(), 1u);
}

TEST(ByteMatcherTest, NumberAtTopLevelCanStillExtend) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      JsonGrammar::FromSchema(R"({"type": "number"})");
  ASSERT_TRUE(g.ok()) << g.status();
  ByteMatcher m(Compiled(*g));

  ASSERT_TRUE(m.AdvanceAll("12"));

  EXPECT_TRUE(m.Complete());
  EXPECT_FALSE(m.AtEnd());
}

TEST(ByteMatcherTest, EveryPrefixOfValidDocumentsCanBeCompletedAndValidates) {
  const std::vector<std::string> schemas = {
      R"({"type": "object", "properties": {"name": {"type": "string", "minLength": 3},
          "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 2}},
          "required": ["name", "tags"]})",
      R"({"anyOf": [{"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 1},
          {"type": "string", "maxLength": 2}]})",
  };
  for (const std::string& schema : schemas) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(schema);
    ASSERT_TRUE(g.ok()) << g.status();
    const testing::OrderedJson s = testing::OrderedJson::parse(schema);
    ByteMatcher m(Compiled(*g));
    std::string prefix;
    for (int step = 0; step < 12; ++step) {
      std::string rest;
      ASSERT_TRUE(testing::CompleteGreedily(m, &rest)) << schema;
      const testing::OrderedJson v = testing::OrderedJson::parse(prefix + rest, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << prefix + rest;
      EXPECT_TRUE(testing::Validate(v, s, s)) << prefix + rest;
      if (rest.empty()) break;
      ASSERT_TRUE(m.Advance(static_cast<uint8_t>(rest[0])));
      prefix += rest[0];
    }
  }
}

}  // namespace
}  // namespace cairn::infer::text
