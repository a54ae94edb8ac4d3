#include "common/json/json_scan.h"

#include <string>

#include "gtest/gtest.h"

namespace cairn {
namespace {

TEST(JsonScanTest, CountsTheMembersOfTheLargestObject) {
  EXPECT_EQ(LargestJsonObjectMembers(""), 0);
  EXPECT_EQ(LargestJsonObjectMembers("[1, 2, 3]"), 0);
  EXPECT_EQ(LargestJsonObjectMembers("{}"), 0);
  EXPECT_EQ(LargestJsonObjectMembers(R"({"a": 1, "b": {"c": 2}})"), 2);
  // The inner object's members do not count towards the outer one's, after it closes either.
  EXPECT_EQ(LargestJsonObjectMembers(R"({"a": {"x": 1, "y": 2, "z": 3}, "b": 1})"), 3);
  // Colons in arrays of strings, in keys and in values, and escaped quotes are no members.
  EXPECT_EQ(LargestJsonObjectMembers(R"({"a:b": "c:d", "e": ["f:g", "\":\""]})"), 2);
  EXPECT_EQ(LargestJsonObjectMembers(R"({"a\\": 1, "b": "\\"})"), 2);
}

TEST(JsonScanTest, FindsAHugeObjectInsideAnArray) {
  std::string text = R"({"tools": [{"parameters": {"properties": {)";
  for (int i = 0; i < 5000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": {}";
  text += "}}}]}";
  EXPECT_EQ(LargestJsonObjectMembers(text), 5000);
  EXPECT_GT(LargestJsonObjectMembers(text), kMaxOrderedJsonObjectMembers);
}

TEST(JsonScanTest, NestingDepthSkipsStringsAndStopsPastTheLimit) {
  EXPECT_EQ(JsonNestingDepth("", 8), 0);
  EXPECT_EQ(JsonNestingDepth(R"({"a": [1, {"b": 2}], "c": {}})", 8), 3);
  EXPECT_EQ(JsonNestingDepth(R"({"a": "[[[[{{{{\"[["})", 8), 1);
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_EQ(JsonNestingDepth(deep, 100), 100);
  EXPECT_EQ(JsonNestingDepth(deep, 10), 11);  // Stops counting once past the limit.
}

TEST(JsonScanTest, MalformedTextEndsWithoutHarm) {
  EXPECT_EQ(LargestJsonObjectMembers("}}]]{\"a\":"), 1);
  EXPECT_EQ(LargestJsonObjectMembers("\"unterminated \\"), 0);
}

}  // namespace
}  // namespace cairn
