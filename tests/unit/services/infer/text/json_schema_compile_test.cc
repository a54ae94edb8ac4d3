#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/infer/text/json_constraint.h"
#include "services/infer/text/json_grammar.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer::text {
namespace {

using ::cairn::testing::StatusIs;
using ::testing::HasSubstr;

TEST(JsonSchemaCompileTest, CompilesEverySupportedKeyword) {
  const std::vector<std::string> schemas = {
      R"({})",
      R"(true)",
      R"({"type": "string", "minLength": 1, "maxLength": 3})",
      R"({"type": ["string", "null"]})",
      R"({"type": "integer"})",
      R"({"type": "number"})",
      R"({"type": "boolean"})",
      R"({"type": "null"})",
      R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
          "additionalProperties": false})",
      R"({"type": "object", "additionalProperties": true})",
      R"({"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}})",
      R"({"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 4})",
      R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]})",
      R"({"type": "array", "items": [{"type": "string"}]})",
      R"({"enum": ["a", 1, null, {"x": [true]}]})",
      R"({"const": {"k": "v"}})",
      R"({"type": "string", "enum": ["a", 1]})",
      R"({"anyOf": [{"type": "string"}, {"type": "integer"}]})",
      R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})",
      R"({"allOf": [{"type": "string"}]})",
      R"({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s"})",
      R"({"definitions": {"s": {"type": "string"}}, "$ref": "#/definitions/s"})",
      R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}})",
      R"({"title": "t", "description": "d", "default": 1, "examples": [1], "$schema": "x",
          "$id": "y", "$comment": "c", "deprecated": false, "readOnly": true, "strict": true,
          "nullable": false, "type": "integer"})",
  };
  for (const std::string& schema : schemas) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(schema);
    EXPECT_TRUE(g.ok()) << schema << ": " << g.status();
  }
}

TEST(JsonSchemaCompileTest, RefusesNarrowingKeywordsItDoesNotImplementNamingThePath) {
  const std::vector<std::string> refused = {"multipleOf",
                                            "uniqueItems",
                                            "not",
                                            "if",
                                            "then",
                                            "else",
                                            "patternProperties",
                                            "propertyNames",
                                            "dependentRequired",
                                            "dependentSchemas",
                                            "contains",
                                            "unevaluatedProperties",
                                            "unevaluatedItems",
                                            "minProperties",
                                            "maxProperties"};
  for (const std::string& keyword : refused) {
    const std::string schema =
        R"({"type": "object", "properties": {"id": {"type": "string", ")" + keyword + R"(": 1}}})";

    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(schema);

    EXPECT_THAT(g.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << keyword;
    EXPECT_EQ(g.status().message(),
              "schema keyword \"" + keyword + "\" at /properties/id is not supported");
  }
}

TEST(JsonSchemaCompileTest, CompilesPatternsAndFormats) {
  const std::vector<std::string> schemas = {
      R"({"type": "string", "pattern": "^[a-z0-9_]+$", "minLength": 3, "maxLength": 20})",
      R"({"type": ["string", "null"], "pattern": "x"})", R"({"pattern": "^\\d+$"})",
      R"({"type": "integer", "pattern": "^(unused"})",  // pattern applies to strings only.
      R"({"type": "string", "format": "date-time"})", R"({"type": "string", "format": "date"})",
      R"({"type": "string", "format": "time"})", R"({"type": "string", "format": "duration"})",
      R"({"type": "string", "format": "email"})", R"({"type": "string", "format": "hostname"})",
      R"({"type": "string", "format": "ipv4"})", R"({"type": "string", "format": "ipv6"})",
      R"({"type": "string", "format": "uuid"})", R"({"type": "string", "format": "json-pointer"})",
      R"({"type": "string", "format": "relative-json-pointer"})",
      R"({"type": "string", "format": "email", "pattern": "@example\\.com$"})",
      // Annotations: SecretStr, bytes, paths, OpenAPI's number formats, anything unknown.
      R"({"type": "string", "format": "password", "writeOnly": true})",
      R"({"type": "string", "format": "binary"})", R"({"type": "string", "format": "file-path"})",
      R"({"type": "integer", "format": "int64"})", R"({"type": "integer", "format": "int32"})",
      R"({"type": "number", "format": "double"})", R"({"type": "string", "format": "x-my-own"})",
      R"({"type": "integer", "format": "date"})",  // Formats of strings apply to strings only.
  };
  for (const std::string& schema : schemas) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(schema);
    EXPECT_TRUE(g.ok()) << schema << ": " << g.status();
  }
}

TEST(JsonSchemaCompileTest, RefusesFormatsThatConstrainAndAreNotImplemented) {
  for (const std::string format : {"uri-template", "idn-email", "idn-hostname", "regex", "byte",
                                   "name-email", "ipvanyaddress", "json-string", "base64url"}) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(
        R"({"properties": {"site": {"type": "string", "format": ")" + format + R"("}}})");

    EXPECT_THAT(g.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << format;
    EXPECT_EQ(
        g.status().message(),
        "schema keyword \"format\" at /properties/site is not supported as \"" + format + "\"");
  }
}

TEST(JsonSchemaCompileTest, PatternErrorsNameTheKeywordThePathAndWhy) {
  struct Case {
    std::string schema;
    std::string message;
  };
  const std::vector<Case> cases = {
      {R"({"properties": {"id": {"type": "string", "pattern": "(a)\\1"}}})",
       "schema keyword \"pattern\" at /properties/id is not supported: a backreference (\\1 to "
       "\\9) at offset 3"},
      {R"({"properties": {"id": {"type": "string", "pattern": "(?<=x)y"}}})",
       "schema keyword \"pattern\" at /properties/id is not supported: a lookbehind (?<= or (?<! "
       "at offset 0"},
      {R"({"type": "string", "pattern": "(a|b)*a(a|b){20}"})",
       "schema keyword \"pattern\" at / is not supported: it needs more than 4096 DFA states"},
      {R"({"type": "string", "pattern": 1})", "schema keyword \"pattern\" at / is not a string"},
      {R"({"type": "string", "format": 1})", "schema keyword \"format\" at / is not a string"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "^a{5}$",
          "maxLength": 3}}, "required": ["a"]})",
       "the schema at /properties/a matches nothing"},
      {R"({"type": "string", "format": "uuid", "maxLength": 35})", "accepts no value"},
      // About 2000 states, each with a row of 4097 lengths.
      {R"({"type": "string", "pattern": "^[a-z]{0,1000}[0-9]{0,1000}$", "minLength": 4096})",
       "schema keyword \"minLength\" at / beside pattern is not supported: the schema's patterns "
       "would need length tables of more than 4194304 entries"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(c.schema);

    EXPECT_THAT(g.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << c.schema;
    EXPECT_THAT(g.status().message(), HasSubstr(c.message)) << c.schema;
  }
}

TEST(JsonSchemaCompileTest, StringsOfOnePatternShareItsAutomaton) {
  // 1000 email fields of 1000 lengths: one automaton, within the schema's budget.
  std::string props;
  for (int i = 0; i < 1000; ++i) {
    props += (i ? "," : "") + std::string("\"e") + std::to_string(i) +
             R"(": {"type": "string", "format": "email", "minLength": )" + std::to_string(i % 40) +
             R"(, "maxLength": )" + std::to_string(100 + i) + "}";
  }

  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      JsonGrammar::FromSchema(R"({"type": "object", "properties": {)" + props + "}}");

  EXPECT_TRUE(g.ok()) << g.status();
}

TEST(JsonSchemaCompileTest, PatternsShareOneBudgetPerSchema) {
  // Each needs about 2^11 DFA states; together more than a schema may build.
  std::string props;
  for (int i = 0; i < 40; ++i) {
    props += (i ? "," : "") + std::string("\"p") + std::to_string(i) +
             R"(": {"type": "string", "pattern": "x)" + std::to_string(i) + R"((a|b)*a(a|b){10}"})";
  }

  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      JsonGrammar::FromSchema(R"({"type": "object", "properties": {)" + props + "}}");

  EXPECT_THAT(g.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(g.status().message(), HasSubstr("in all"));
}

TEST(JsonSchemaCompileTest, RefusesNumberBoundsItCannotExpress) {
  const std::vector<std::string> refused = {
      R"({"type": "integer", "minimum": 1, "maximum": 5})",
      R"({"type": "integer", "minimum": 2})",
      R"({"type": "integer", "maximum": -1})",
      R"({"type": "integer", "minimum": 1.5})",
      R"({"type": "integer", "exclusiveMinimum": true})",
      R"({"type": "number", "minimum": 1})",
      R"({"type": "number", "maximum": 100})",
      R"({"type": "number", "exclusiveMinimum": 0})",
  };
  for (const std::string& schema : refused) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(schema);

    EXPECT_THAT(g.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << schema;
    EXPECT_THAT(g.status().message(), HasSubstr("at / ")) << schema;
  }
}

TEST(JsonSchemaCompileTest, PathsEscapeJsonPointerCharacters) {
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g =
      JsonGrammar::FromSchema(R"({"properties": {"a/b~c": {"items": {"format": "regex"}}}})");

  EXPECT_THAT(g.status().message(), HasSubstr("at /properties/a~1b~0c/items is not supported"));
}

TEST(JsonSchemaCompileTest, RefusesAnObjectTooLargeForAnOrderedParseBeforeParsing) {
  // Parsing keeps members in order, which costs n^2 / 2 comparisons for an object of n members:
  // 200,000 members (about 2 MB, here inside $defs' annotations) would take minutes.
  std::string schema = R"({"type": "integer", "examples": [{)";
  for (int i = 0; i < 200000; ++i) schema += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  schema += "}]}";
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(schema);
  // Refused for its size in bytes (1 MiB) first; a smaller one for its members.
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  std::string members = R"({"type": "integer", "examples": [{)";
  for (int i = 0; i < 5000; ++i) members += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  members += "}]}";
  g = JsonGrammar::FromSchema(members);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("more than 4096 members"), std::string::npos) << g.status();
}

TEST(JsonSchemaCompileTest, RefusesMalformedAndHostileSchemas) {
  struct Case {
    std::string schema;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"{", "not valid JSON"},
      {"3", "is not an object or a boolean"},
      {R"({"$ref": "#"})", "refers to itself"},
      {R"({"anyOf": [{"$ref": "#"}, {"type": "string"}]})", "refers to itself"},
      {R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})",
       "refers to itself"},
      {R"({"$ref": "#/$defs/missing"})", "\"$ref\" at / to \"#/$defs/missing\" is not supported"},
      {R"({"$ref": "http://example.com/s.json"})", "is not supported"},
      {R"({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})",
       "accepts no value"},
      {R"({"type": "object", "properties": {"a": false}, "required": ["a"]})",
       "the schema at /properties/a matches nothing"},
      {R"(false)", "accepts no value"},
      {R"({"enum": []})", "accepts no value"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "accepts no value"},
      {R"({"type": "array", "prefixItems": [{}], "minItems": 2})", "accepts no value"},
      {R"({"type": "array", "minItems": 100000000})", "\"minItems\" at / is too large"},
      {R"({"type": "string", "minLength": -1})", "is not a non-negative integer"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})",
       "required property \"b\" at /required is not in properties"},
      {R"({"allOf": [{}, {}]})", "allOf"},
      {R"({"type": "strin"})", "\"type\" at /"},
      {R"({"type": "string", "anyOf": [{}]})", "with sibling keyword \"type\""},
      {R"({"$ref": "#", "type": "string"})", "with sibling keyword \"type\""},
      {std::string(200, '[') + std::string(200, ']'), "nests deeper than"},
      {R"({"items":)" + std::string(60, ' ') +
           [] {
             std::string s;
             for (int i = 0; i < 70; ++i) s += R"({"items":)";
             s += "{}";
             for (int i = 0; i < 71; ++i) s += "}";
             return s;
           }(),
       "nests deeper than"},
      {std::string(json::kMaxSchemaBytes + 1, ' '), "larger than"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(c.schema);

    EXPECT_THAT(g.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << c.schema.substr(0, 80);
    EXPECT_THAT(g.status().message(), HasSubstr(c.message_part)) << c.schema.substr(0, 80);
  }
}

TEST(JsonSchemaCompileTest, RequiredChainDeeperThanTheNestingLimitIsRefused) {
  std::string schema = R"({"type": "string"})";
  for (int i = 0; i < json::kMaxValueNesting + 2; ++i) {
    schema = R"({"type": "object", "properties": {"a": )" + schema + R"(}, "required": ["a"]})";
  }

  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(schema);

  EXPECT_THAT(g.status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(JsonSchemaCompileTest, LongReferenceChainsCountAsNesting) {
  std::string defs;
  const int n = 3000;  // Under the 4096 members an object may have (json_scan.h).
  for (int i = 0; i < n; ++i) {
    defs += "\"d" + std::to_string(i) + "\": {\"anyOf\": [{\"$ref\": \"#/$defs/d" +
            std::to_string(i + 1) + "\"}, {\"type\": \"null\"}]},";
  }
  defs += "\"d" + std::to_string(n) + "\": {}";
  const std::string schema = "{\"$defs\": {" + defs + "}, \"$ref\": \"#/$defs/d0\"}";

  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(schema);

  EXPECT_THAT(g.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(g.status().message(), HasSubstr("nests deeper than"));
}

TEST(JsonSchemaCompileTest, GrammarSizeIsBounded) {
  std::string alts;
  for (int i = 0; i < json::kMaxGrammarNodes + 10; ++i) alts += R"({"type":"string"},)";
  alts.pop_back();
  const std::string schema = "{\"anyOf\": [" + alts + "]}";

  absl::StatusOr<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::FromSchema(schema);

  EXPECT_THAT(g.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(g.status().message(), HasSubstr("grammar nodes"));
}

}  // namespace
}  // namespace cairn::infer::text
