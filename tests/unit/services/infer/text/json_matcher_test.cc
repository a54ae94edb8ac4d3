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

TEST(ByteMatcherTest, PatternsMatchTheStringsDecodedContent) {
  // The JSON text escapes; the pattern sees the characters.
  ExpectDocs(
      R"({"type": "string", "pattern": "^a\"b$"})",
      {{R"("a\"b")", true}, {R"("a\u0022b")", true}, {R"("ab")", false}, {R"("a\\"b")", false}});
  ExpectDocs(R"({"type": "string", "pattern": "^\\\\$"})",  // One backslash.
             {{R"("\\")", true}, {R"("\u005c")", true}, {R"("\u005C")", true}, {R"("\/")", false}});
  ExpectDocs(R"({"type": "string", "pattern": "^a\\nb\\/$"})", {{R"("a\nb/")", true},
                                                                {R"("a\u000ab\/")", true},
                                                                {R"("a\u000Ab/")", true},
                                                                {R"("a\rb/")", false}});
  ExpectDocs(R"({"type": "string", "pattern": "^[\\u0000-\\u001f]$"})", {{R"("\u0001")", true},
                                                                         {R"("\t")", true},
                                                                         {R"("\b")", true},
                                                                         {R"("\f")", true},
                                                                         {R"(" ")", false}});
  ExpectDocs(R"({"type": "string", "pattern": "^.$"})", {{R"("\uD83D\uDE00")", true},
                                                         {"\"\xF0\x9F\x98\x80\"", true},
                                                         {R"("\u00e9")", true},
                                                         {"\"\xC3\xA9\"", true},
                                                         {R"("ab")", false},
                                                         {R"("\n")", false},
                                                         {R"("")", false}});
  ExpectDocs(R"({"type": "string", "pattern": "caf\u00e9"})",
             {{"\"un caf\xC3\xA9 noir\"", true}, {R"("caf\u00E9")", true}, {R"("cafe")", false}});
}

TEST(ByteMatcherTest, PatternsAndLengthsHoldTogether) {
  ExpectDocs(R"({"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 3})",
             {{R"("a")", false},
              {R"("ab")", true},
              {R"("\u0061\u0062")", true},
              {R"("abc")", true},
              {R"("abcd")", false},
              {R"("a1")", false}});
  ExpectDocs(R"({"type": "string", "pattern": "^(ab|abcdef)$", "maxLength": 4})",
             {{R"("ab")", true}, {R"("abcdef")", false}});
  ExpectDocs(R"({"type": ["string", "null"], "pattern": "^a{5}$", "maxLength": 3})",
             {{"null", true}, {R"("aaaaa")", false}});
}

TEST(ByteMatcherTest, APatternRefusesAByteAsSoonAsNoCompletionFits) {
  struct Case {
    std::string schema;
    std::string prefix;  // Accepted.
    std::string refused;
    std::string accepted;
  };
  const std::vector<Case> cases = {
      // \u escapes, digit by digit: \u00 may still become a-z, \u01 and \u005 cannot.
      {R"({"type": "string", "pattern": "^[a-z]$"})", "\"\\u00", "5", "6"},
      {R"({"type": "string", "pattern": "^[a-z]$"})", "\"\\u0", "1", "0"},
      // UTF-8, byte by byte: U+00E9 is C3 A9; C4 starts U+0100 to U+013F.
      {R"({"type": "string", "pattern": "^\u00e9$"})", "\"", "\xC4", "\xC3"},
      {R"({"type": "string", "pattern": "^\u00e9$"})", "\"\xC3", "\xA8", "\xA9"},
      // A surrogate pair: D83C starts U+1F000 to U+1F3FF, D83D U+1F400 to U+1F7FF.
      {R"({"type": "string", "pattern": "^\uD83D\uDE00$"})", "\"\\uD83", "C", "D"},
      {R"({"type": "string", "pattern": "^\uD83D\uDE00$"})", "\"\\uD83D\\uDE0", "1", "0"},
      {R"({"type": "string", "format": "uuid"})", "\"", "g", "f"},
      {R"({"type": "string", "format": "date"})", "\"2023-02-2", "9", "8"},
      {R"({"type": "string", "format": "date"})", "\"2024-02-2", "\"", "9"},
      {R"({"type": "string", "pattern": "^(ab|abcdef)$", "maxLength": 4})", "\"ab", "c", "\""},
      {R"({"type": "string", "pattern": "^a*b$", "maxLength": 3})", "\"aa", "a", "b"},
      {R"({"type": "string", "pattern": "^[0-9]+$", "minLength": 3})", "\"12", "\"", "3"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(c.schema);
    ASSERT_TRUE(g.ok()) << c.schema << ": " << g.status();
    ByteMatcher m(Compiled(*g));
    ASSERT_TRUE(m.AdvanceAll(c.prefix)) << c.schema << " " << c.prefix;

    ByteMatcher refused = m;
    ByteMatcher accepted = m;
    EXPECT_FALSE(refused.AdvanceAll(c.refused)) << c.schema << " " << c.prefix << c.refused;
    EXPECT_TRUE(accepted.AdvanceAll(c.accepted)) << c.schema << " " << c.prefix << c.accepted;
  }
}

// The schema `client.beta.chat.completions.parse(response_format=Event)` sends for a pydantic
// model with UUID, datetime, date, time, timedelta, EmailStr, Optional[datetime],
// constr(pattern=...), SecretStr and UUID4 fields (the SDK makes every property required).
constexpr char kPydanticFormats[] = R"({"properties": {"id": {"format": "uuid", "title": "Id",
    "type": "string"}, "starts_at": {"format": "date-time", "title": "Starts At", "type":
    "string"}, "day": {"format": "date", "title": "Day", "type": "string"}, "at": {"format":
    "time", "title": "At", "type": "string"}, "length": {"format": "duration", "title": "Length",
    "type": "string"}, "organizer": {"format": "email", "title": "Organizer", "type": "string"},
    "ends_at": {"anyOf": [{"format": "date-time", "type": "string"}, {"type": "null"}], "title":
    "Ends At"}, "code": {"pattern": "^[A-Z]{3}-\\d{4}$", "title": "Code", "type": "string"},
    "secret": {"format": "password", "title": "Secret", "type": "string", "writeOnly": true},
    "ticket": {"format": "uuid4", "title": "Ticket", "type": "string"}},
    "required": ["id", "starts_at", "day", "at", "length", "organizer", "ends_at", "code",
    "secret", "ticket"], "title": "Event", "type": "object", "additionalProperties": false})";

// The shape zod 4's z.toJSONSchema gives z.object({id: z.uuid(), email: z.email(), at:
// z.iso.datetime()}): a format and zod's own pattern for each.
constexpr char kZodFormats[] = R"({"$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object", "properties": {"id": {"type": "string", "format": "uuid", "pattern":
    "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$"},
    "email": {"type": "string", "format": "email", "pattern":
    "^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},
    "at": {"type": "string", "format": "date-time", "pattern":
    "^(?:(?:\\d\\d[2468][048]|\\d\\d[13579][26]|\\d\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|(?:02)-(?:0[1-9]|1\\d|2[0-8])))T(?:(?:[01]\\d|2[0-3]):[0-5]\\d(?::[0-5]\\d(?:\\.\\d+)?)?(?:Z))$"}},
    "required": ["id", "email", "at"], "additionalProperties": false})";

TEST(ByteMatcherTest, FormatsInTheSchemasPydanticAndZodSend) {
  const std::string event =
      R"({"id":"2eb8aa08-aa98-11ea-b4aa-73b441d16380","starts_at":"2024-02-29T09:30:00+01:00",)"
      R"("day":"2024-03-01","at":"12:00:00Z","length":"PT1H30M","organizer":"ada@example.com",)";
  const std::string v4 = R"(,"ticket":"2eb8aa08-aa98-41ea-b4aa-73b441d16380"})";
  const std::string v1 = R"(,"ticket":"2eb8aa08-aa98-11ea-b4aa-73b441d16380"})";
  ExpectDocs(
      kPydanticFormats,
      {{event + R"("ends_at":null,"code":"ABC-1234","secret":"hunter2")" + v4, true},
       {event + R"("ends_at":"2024-03-01T00:00:00.5Z","code":"ABC-1234","secret":"")" + v4, true},
       {event + R"("ends_at":"2023-02-29T00:00:00Z","code":"ABC-1234","secret":"")" + v4, false},
       {event + R"("ends_at":null,"code":"abc-1234","secret":"")" + v4, false},
       {event + R"("ends_at":null,"code":"ABC-12345","secret":"")" + v4, false},
       {event + R"("ends_at":null,"code":"ABC-1234","secret":"")" + v1, false}});
  ExpectDocs(kZodFormats,
             {{R"({"id":"2eb8aa08-aa98-41ea-b4aa-73b441d16380","email":"ada.l@example.com",)"
               R"("at":"2024-02-29T09:30:00Z"})",
               true},
              // uuid's format allows version 0, zod's pattern does not.
              {R"({"id":"2eb8aa08-aa98-01ea-b4aa-73b441d16380","email":"ada@example.com",)"
               R"("at":"2024-02-29T09:30:00Z"})",
               false},
              // zod's pattern allows no "~" and no seconds; the formats need both.
              {R"({"id":"2eb8aa08-aa98-41ea-b4aa-73b441d16380","email":"a~b@example.com",)"
               R"("at":"2024-02-29T09:30:00Z"})",
               false},
              {R"({"id":"2eb8aa08-aa98-41ea-b4aa-73b441d16380","email":"ada@example.com",)"
               R"("at":"2024-02-29T09:30Z"})",
               false},
              {R"({"id":"2eb8aa08-aa98-41ea-b4aa-73b441d16380","email":".ada@example.com",)"
               R"("at":"2024-02-29T09:30:00Z"})",
               false}});
}

TEST(ByteMatcherTest, EveryPrefixOfValidDocumentsCanBeCompletedAndValidates) {
  const std::vector<std::string> schemas = {
      R"({"type": "object", "properties": {"name": {"type": "string", "minLength": 3},
          "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 2}},
          "required": ["name", "tags"]})",
      R"({"anyOf": [{"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 1},
          {"type": "string", "maxLength": 2}]})",
      kPydanticFormats,
      kZodFormats,
      R"({"type": "string", "pattern": "^a*b$"})",
      R"({"type": "array", "items": {"type": "string", "format": "ipv6"}, "minItems": 1})",
  };
  for (const std::string& schema : schemas) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(schema);
    ASSERT_TRUE(g.ok()) << g.status();
    const testing::OrderedJson s = testing::OrderedJson::parse(schema);
    ByteMatcher m(Compiled(*g));
    std::string prefix;
    for (int step = 0; step < 40; ++step) {
      std::string rest;
      ASSERT_TRUE(testing::Complete(m, &rest)) << schema << "\n" << prefix;
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
