#include "services/gateway/openai/json_util.h"

#include <cstdint>
#include <limits>
#include <string>

#include "common/json/json_scan.h"
#include "gtest/gtest.h"
#include "services/gateway/openai/errors.h"

namespace cairn::gateway {
namespace {

TEST(JsonUtilTest, ParsesObjectsAndRejectsEverythingElse) {
  EXPECT_TRUE(ParseJsonObject(R"({"a":[1,{"b":"]"}]})", 8).ok());
  EXPECT_EQ(ParseJsonObject("", 8).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJsonObject("{", 8).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJsonObject("[]", 8).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJsonObject("\"\\xff\"", 8).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JsonUtilTest, DepthLimitIgnoresBracketsInsideStrings) {
  std::string deep = std::string(10, '[') + std::string(10, ']');

  EXPECT_FALSE(ParseJsonObject(R"({"a":)" + deep + "}", 8).ok());
  EXPECT_TRUE(ParseJsonObject(R"({"a":"[[[[[[[[[[[[\"[[["})", 2).ok());
}

TEST(JsonUtilTest, ObjectsKeepTheClientsOrderAndAreBoundedInMembers) {
  absl::StatusOr<Json> j = ParseJsonObject(R"({"type":"object","properties":{"z":1,"a":2}})", 8);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(DumpJson(*j), R"({"type":"object","properties":{"z":1,"a":2}})");

  // An ordered parse is quadratic in an object's members: 5000 are refused before parsing.
  std::string wide = R"({"logit_bias":{)";
  for (int i = 0; i < 5000; ++i) wide += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
  wide += "}}";
  absl::StatusOr<Json> refused = ParseJsonObject(wide, 8);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("more than 4096 members"), std::string::npos)
      << refused.status();
}

// `objects` objects of `members` members each, in an array.
std::string ManyWideObjects(int objects, int members) {
  std::string text = R"({"messages":[)";
  for (int o = 0; o < objects; ++o) {
    text += o ? ",{" : "{";
    for (int i = 0; i < members; ++i) text += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
    text += "}";
  }
  return text + "]}";
}

TEST(JsonUtilTest, TheWholeBodysOrderedParseIsBoundedToo) {
  // Each object is within the per-object bound; together they are over the body's budget.
  const std::string costly = ManyWideObjects(5, 4000);

  absl::StatusOr<Json> refused = ParseJsonObject(costly, 8);
  absl::StatusOr<Json> fine = ParseJsonObject(ManyWideObjects(4, 4000), 8);
  const JsonObjectScan scan = ScanJsonObjects(costly);

  EXPECT_EQ(scan.largest_members, 4000);
  EXPECT_EQ(scan.squared_members, 5 * 4000 * 4000 + 1);  // The outer object's one member too.
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("too many object members in all"), std::string::npos)
      << refused.status();
  EXPECT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(ScanJsonObjects(R"({"a": {"x": 1, "y": 2}, "b": [{"c": 1}], "d": {)").squared_members,
            3 * 3 + 2 * 2 + 1 * 1 + 0);
}

// What a parse allocates is bounded by the number of values, not only the body's bytes: an
// 8 MiB body of empty arrays took 260 MB to parse.
TEST(JsonUtilTest, TheValuesOfABodyAreBounded) {
  std::string many = "{\"a\":[";
  for (int64_t i = 0; i < kMaxRequestJsonValues; ++i) many += "[],";
  many += "[]]}";
  absl::StatusOr<Json> refused = ParseJsonObject(many, 64);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("values"), std::string::npos) << refused.status();
  EXPECT_EQ(ScanJsonObjects(R"({"a": [1, 2, {"b": 3}], "c": "x,[y"})").values_bound, 7);
  EXPECT_TRUE(ParseJsonObject(R"({"a": [1, 2, 3]})", 64).ok());
}

TEST(JsonUtilTest, FieldReadersCheckTypesAndRangesAndNameTheField) {
  Json j = Json::parse(R"({"s":"x","n":1.5,"i":7,"big":18446744073709551615,"neg":-3,
                           "b":true,"arr":[1,2,3],"nul":null})");
  JsonFields f(j, "req");

  EXPECT_EQ(*f.String("s", 10).value(), "x");
  EXPECT_FALSE(f.String("s", 0).ok());
  EXPECT_FALSE(f.String("n", 10).ok());
  EXPECT_DOUBLE_EQ(*f.Number("n", 0, 2).value(), 1.5);
  EXPECT_FALSE(f.Number("n", 0, 1).ok());
  EXPECT_EQ(*f.Integer("i", 0, 10).value(), 7);
  EXPECT_FALSE(f.Integer("n", 0, 10).ok());
  EXPECT_FALSE(f.Integer("big", 0, 1 << 30).ok());
  EXPECT_FALSE(f.Integer("neg", 0, 10).ok());
  EXPECT_TRUE(*f.Bool("b").value());
  EXPECT_FALSE(f.Bool("i").ok());
  EXPECT_FALSE(f.Array("arr", 2).ok());
  EXPECT_FALSE(f.String("nul", 10).value().has_value());
  EXPECT_FALSE(f.String("missing", 10).value().has_value());
  absl::Status named = f.Integer("n", 0, 10).status();
  EXPECT_NE(named.message().find("req.n"), absl::string_view::npos) << named;
}

// The "param" of the OpenAI error body `status` renders as ("" for null).
std::string ParamOf(const absl::Status& status) {
  const Json param = Json::parse(OpenAiErrorJson(status))["error"]["param"];
  return param.is_string() ? param.get<std::string>() : "";
}

TEST(JsonUtilTest, FieldErrorsNameTheirFieldAsTheParam) {
  Json j = Json::parse(R"({"n": 1.5, "s": 1, "o": [], "items": [{}, 2], "ids": [1, "x"]})");
  JsonFields top(j, "");
  JsonFields nested(j, "req");

  EXPECT_EQ(ParamOf(top.Integer("n", 0, 10).status()), "n");
  EXPECT_EQ(ParamOf(nested.Number("n", 0, 1).status()), "req.n");
  EXPECT_EQ(ParamOf(nested.String("s", 10).status()), "req.s");
  EXPECT_EQ(ParamOf(nested.Bool("s").status()), "req.s");
  EXPECT_EQ(ParamOf(nested.Object("o").status()), "req.o");
  EXPECT_EQ(ParamOf(nested.Array("n", 10).status()), "req.n");
  EXPECT_EQ(ParamOf(ForEachObject(j["items"], "req.items", 10,
                                  [](const JsonFields&) { return absl::OkStatus(); })),
            "req.items[1]");
  EXPECT_EQ(ParamOf(ForEachObject(j["items"], "req.items", 10,
                                  [](const JsonFields& item) {
                                    return InvalidField(item.Name("x"), "is required");
                                  })),
            "req.items[0].x");
  EXPECT_EQ(ParamOf(JsonInteger(j["ids"][1], "ids[1]", 0, 9).status()), "ids[1]");
  // The message is as before: the field's name, then what is wrong with it.
  const absl::Status s = nested.Number("n", 0, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "req.n must be between 0 and 1");
  // Errors about the body as a whole name no field.
  EXPECT_EQ(ParamOf(ParseJsonObject("{", 8).status()), "");
  EXPECT_EQ(ParamOf(ParseJsonObject("[]", 8).status()), "");
}

TEST(JsonUtilTest, WholeFloatsReadAsIntegersAndNothingElseDoes) {
  Json j = Json::parse(R"({"whole": 100.0, "exp": 1e2, "neg": -1.0, "zero": -0.0, "half": 100.5,
                           "huge": 1e300, "edge": 9223372036854775808.0, "big": 2e9})");
  j["nan"] = std::numeric_limits<double>::quiet_NaN();
  j["inf"] = std::numeric_limits<double>::infinity();
  JsonFields f(j, "");

  EXPECT_EQ(*f.Integer("whole", 1, 1000).value(), 100);
  EXPECT_EQ(*f.Integer("exp", 1, 1000).value(), 100);
  EXPECT_EQ(*f.Integer("neg", -1, 10).value(), -1);
  EXPECT_EQ(*f.Integer("zero", 0, 10).value(), 0);
  EXPECT_EQ(*f.Integer("big", 0, std::numeric_limits<int64_t>::max()).value(), 2000000000);
  for (const char* key : {"half", "huge", "edge", "nan", "inf"}) {
    absl::Status s = f.Integer(key, 0, std::numeric_limits<int64_t>::max()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_NE(s.message().find(key), absl::string_view::npos) << s;
  }
  EXPECT_FALSE(f.Integer("big", 0, 1000).ok());
  EXPECT_FALSE(f.Integer("neg", 0, 10).ok());
}

TEST(JsonUtilTest, DumpNeverThrowsOnInvalidUtf8) {
  Json j = std::string("bad \xff byte");

  EXPECT_EQ(DumpJson(j), "\"bad \xef\xbf\xbd byte\"");
}

}  // namespace
}  // namespace cairn::gateway
