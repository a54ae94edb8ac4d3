#include "services/infer/text/json_pattern.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "common/status/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/infer/text/json_grammar.h"
#include "services/infer/text/unicode.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/text/json_test_util.h"

namespace cairn::infer::text::json {
namespace {

using ::cairn::testing::StatusIs;
using ::testing::HasSubstr;
using text::testing::EcmaRegexSearch;
using text::testing::ValidDate;
using text::testing::ValidIpv4;
using text::testing::ValidIpv6;
using text::testing::ValidTime;

absl::StatusOr<PatternAutomaton> Compile(const std::vector<std::string>& patterns) {
  PatternBudget budget{kMaxPatternStatesPerSchema, kMaxPatternStepsPerSchema};
  PatternCompiler compiler(&budget);
  for (const std::string& p : patterns) RETURN_IF_ERROR(compiler.Add(p));
  return compiler.Compile();
}

// Whether some string of [min_length, max_length] code points matches `pattern`.
bool AnyMatchWithin(const std::string& pattern, int32_t min_length, int32_t max_length) {
  absl::StatusOr<PatternAutomaton> a = Compile({pattern});
  EXPECT_TRUE(a.ok()) << a.status();
  a->ExtendLengthTable(min_length);
  return a->start() >= 0 && a->Viable(a->start(), 0, min_length, max_length);
}

struct Case {
  std::string text;
  bool match;
};

void ExpectMatches(const std::string& pattern, const std::vector<Case>& cases) {
  absl::StatusOr<PatternAutomaton> a = Compile({pattern});
  ASSERT_TRUE(a.ok()) << pattern << ": " << a.status();
  for (const Case& c : cases) {
    EXPECT_EQ(a->Matches(c.text), c.match) << "pattern " << pattern << "\ntext " << c.text;
  }
}

void ExpectFormat(const std::string& name, const std::vector<Case>& cases) {
  const StringFormat* f = FindStringFormat(name);
  ASSERT_NE(f, nullptr) << name;
  absl::StatusOr<PatternAutomaton> a = Compile({std::string(f->pattern)});
  ASSERT_TRUE(a.ok()) << name << ": " << a.status();
  for (const Case& c : cases) {
    const bool fits =
        f->max_length < 0 || unicode::CodePointCount(c.text) <= static_cast<size_t>(f->max_length);
    EXPECT_EQ(a->Matches(c.text) && fits, c.match) << "format " << name << "\ntext " << c.text;
    EXPECT_EQ(text::testing::ValidFormat(name, c.text), c.match)
        << "reference for " << name << "\ntext " << c.text;
  }
}

TEST(PatternAutomatonTest, PatternsAreNotAnchoredUnlessTheySaySo) {
  ExpectMatches("ab", {{"ab", true}, {"xaby", true}, {"a", false}, {"", false}});
  ExpectMatches("^ab", {{"abc", true}, {"xab", false}});
  ExpectMatches("ab$", {{"xab", true}, {"abx", false}});
  ExpectMatches("^ab$", {{"ab", true}, {"abab", false}});
  ExpectMatches("", {{"", true}, {"anything", true}});
  ExpectMatches("^$", {{"", true}, {"a", false}});
  // Anchors wherever they stand, as assertions.
  ExpectMatches("^a|b$", {{"ax", true}, {"xb", true}, {"xa", false}, {"bx", false}});
  ExpectMatches("(?:^a|b)c", {{"ac", true}, {"xbc", true}, {"xac", false}});
  ExpectMatches("a$|^$", {{"", true}, {"ba", true}, {"ab", false}});
  ExpectMatches("a^b", {{"ab", false}, {"a^b", false}});
  ExpectMatches("x*^a", {{"a", true}, {"xa", false}});
  ExpectMatches("$^", {{"", true}, {"a", false}});
}

TEST(PatternAutomatonTest, CharactersAndClasses) {
  ExpectMatches("^a.c$", {{"abc", true},
                          {"a\xC3\xA9"
                           "c",
                           true},
                          {"a\nc", false},
                          {"a\rc", false},
                          {"a\xE2\x80\xA8"
                           "c",
                           false},
                          {"ac", false}});
  ExpectMatches("^[a-c_]+$", {{"abc_", true}, {"abd", false}});
  ExpectMatches("^[^a-c]$", {{"d", true}, {"a", false}, {"\n", true}, {"\xF0\x9F\x98\x80", true}});
  ExpectMatches("^[-a]$", {{"-", true}, {"a", true}, {"b", false}});
  ExpectMatches("^[a-]$", {{"-", true}, {"a", true}});
  ExpectMatches("^[a\\-z]$", {{"-", true}, {"b", false}});
  ExpectMatches("^[\\d.]$", {{"5", true}, {".", true}, {"x", false}});
  ExpectMatches("^[\\b]$", {{"\b", true}, {"b", false}});
  ExpectMatches("^[]$", {{"", false}, {"a", false}});
  ExpectMatches("^[^]$", {{"a", true}, {"\n", true}, {"", false}});
  ExpectMatches("^[[]$", {{"[", true}});
  ExpectMatches("^]}$", {{"]}", true}});
  ExpectMatches("^\\d\\D$", {{"1a", true},
                             {"11", false},
                             {"\xE0\xA7\xA8"
                              "a",
                              false}});
  ExpectMatches("^\\w\\W$", {{"_!", true}, {"a\xC3\xA9", true}, {"ab", false}});
  ExpectMatches("^\\s\\S$", {{" a", true},
                             {"\xC2\xA0"
                              "a",
                              true},
                             {"\xE3\x80\x80"
                              "a",
                              true},
                             {"a ", false}});
  ExpectMatches("^\\t\\n\\v\\f\\r\\0$", {{std::string("\t\n\v\f\r\0", 6), true}});
  ExpectMatches("^\\cJ\\x41\\u0042\\u{1F600}$", {{"\nAB\xF0\x9F\x98\x80", true}});
  // A surrogate pair of escapes is one code point; a lone surrogate matches nothing.
  ExpectMatches("^\\uD83D\\uDE00$", {{"\xF0\x9F\x98\x80", true}});
  ExpectMatches("^a\\uD83Db?$", {{"a", false}, {"ab", false}});
  ExpectMatches("^\\.\\/\\-\\\"\\$\\^\\{\\}\\(\\)\\[\\]\\|\\*\\+\\?\\\\$",
                {{"./-\"$^{}()[]|*+?\\", true}});
  ExpectMatches("^\xC3\xA9+$", {{"\xC3\xA9\xC3\xA9", true}, {"e", false}});
  ExpectMatches("^[\xC3\xA0-\xC3\xBF]$", {{"\xC3\xA9", true}, {"\xC3\x9F", false}});
}

TEST(PatternAutomatonTest, GroupsAlternativesAndQuantifiers) {
  ExpectMatches("^(ab|c)+$", {{"abcab", true}, {"", false}, {"abb", false}});
  ExpectMatches("^(?:ab|c)*$", {{"", true}, {"cc", true}});
  ExpectMatches("^(?<year>\\d{4})-(\\d\\d)$", {{"2024-01", true}, {"24-01", false}});
  ExpectMatches("^a?b??c$", {{"c", true}, {"abc", true}, {"aabc", false}});
  ExpectMatches("^a{3}$", {{"aaa", true}, {"aa", false}, {"aaaa", false}});
  ExpectMatches("^a{2,}$", {{"a", false}, {"aa", true}, {"aaaaaaa", true}});
  ExpectMatches("^a{1,3}?$", {{"", false}, {"a", true}, {"aaa", true}, {"aaaa", false}});
  ExpectMatches("^a{0}b$", {{"b", true}, {"ab", false}});
  ExpectMatches("^(a|)+$", {{"", true}, {"aaa", true}});
  ExpectMatches("^(a*)*b$", {{"b", true}, {"aaab", true}});
  ExpectMatches("^(x(y|z)*){2}$", {{"xyxz", true}, {"xx", true}, {"xyzy", false}});
  ExpectMatches("^()$", {{"", true}});
}

TEST(PatternAutomatonTest, LookaheadsRightAfterALeadingCaret) {
  // zod 4's z.email().
  const std::string zod =
      R"(^(?!\.)(?!.*\.\.)([A-Za-z0-9_'+\-\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\-]*\.)+[A-Za-z]{2,}$)";
  ExpectMatches(zod, {{"ada@example.com", true},
                      {"a.b@x.io", true},
                      {".ada@example.com", false},
                      {"a..b@example.com", false},
                      {"ada.@example.com", false},
                      {"ada@example", false}});
  ExpectMatches("^(?=.*\\d)(?=.*[a-z])[a-z0-9]{4,}$",
                {{"ab12", true}, {"abcd", false}, {"1234", false}, {"a1", false}});
  ExpectMatches("^(?!$)", {{"", false}, {"a", true}});
  ExpectMatches("^(?=a$)", {{"a", true}, {"ab", false}});
}

TEST(PatternAutomatonTest, LengthsAreViabilityNotJustAFinalCheck) {
  absl::StatusOr<PatternAutomaton> a = Compile({"^(ab|abcdef)$"});
  ASSERT_TRUE(a.ok()) << a.status();
  int32_t s = a->start();
  for (char c : std::string("ab")) s = a->Next(s, static_cast<uint32_t>(c));
  ASSERT_GE(s, 0);
  const int32_t abc = a->Next(s, 'c');
  ASSERT_GE(abc, 0);

  EXPECT_TRUE(a->Viable(s, 2, 0, 4));
  // After "abc" the pattern can still end, but not within 4 code points.
  EXPECT_FALSE(a->Viable(abc, 3, 0, 4));
  EXPECT_TRUE(a->Viable(abc, 3, 0, 6));
  // Only even lengths match "^(aa)+$": none in [3, 3], 4 in [3, 4].
  EXPECT_FALSE(AnyMatchWithin("^(aa)+$", 3, 3));
  EXPECT_TRUE(AnyMatchWithin("^(aa)+$", 3, 4));
  EXPECT_FALSE(AnyMatchWithin("^a{5}$", 0, 3));
  EXPECT_FALSE(AnyMatchWithin("^a{1,3}$", 5, -1));
  EXPECT_TRUE(AnyMatchWithin("^a+$", 4000, -1));
  EXPECT_TRUE(AnyMatchWithin("^(a|bbbbbb)$", 3, -1));
  absl::StatusOr<PatternAutomaton> min = Compile({"^(a|bbbbbb)$"});
  ASSERT_TRUE(min.ok()) << min.status();
  min->ExtendLengthTable(3);
  EXPECT_FALSE(min->Viable(min->Next(min->start(), 'a'), 1, 3, -1));
  EXPECT_TRUE(min->Viable(min->Next(min->start(), 'b'), 1, 3, -1));
}

TEST(PatternAutomatonTest, SeveralPatternsIntersect) {
  absl::StatusOr<PatternAutomaton> a = Compile({"^[a-z]+$", "x", "^.{2,3}$"});
  ASSERT_TRUE(a.ok()) << a.status();

  EXPECT_TRUE(a->Matches("ax"));
  EXPECT_TRUE(a->Matches("xyz"));
  EXPECT_FALSE(a->Matches("abc"));
  EXPECT_FALSE(a->Matches("xyzx"));
  EXPECT_FALSE(a->Matches("x1"));
}

TEST(PatternAutomatonTest, AMatchedUnanchoredPatternEndsInOneUniversalState) {
  absl::StatusOr<PatternAutomaton> a = Compile({"foo"});
  ASSERT_TRUE(a.ok()) << a.status();
  int32_t s = a->start();
  EXPECT_FALSE(a->universal(s));
  for (char c : std::string("xfoo")) s = a->Next(s, static_cast<uint32_t>(c));

  ASSERT_GE(s, 0);
  EXPECT_TRUE(a->universal(s));
  EXPECT_EQ(a->Next(s, 'f'), s);
  EXPECT_EQ(a->Next(s, 0x10FFFF), s);
  EXPECT_EQ(a->Next(s, 0xD800), -1);  // Surrogates are no characters of a JSON string.
  EXPECT_EQ(a->state_count(), 4);
}

TEST(PatternCompilerTest, RefusesWhatTheSubsetDoesNotSupportSayingWhere) {
  struct Refused {
    std::string pattern;
    std::string message;
  };
  const std::vector<Refused> refused = {
      {"(a)\\1", "a backreference (\\1 to \\9) at offset 3"},
      {"\\k<x>", "a named backreference"},
      {"(?<=a)b", "a lookbehind (?<= or (?<! at offset 0"},
      {"(?<!a)b", "a lookbehind"},
      {"a(?=b)", "a lookahead other than right after a leading ^ at offset 1"},
      {"(?!a)b", "a lookahead other than right after a leading ^"},
      {"^(?=(?=a))", "a lookahead other than right after a leading ^"},
      {"^a|^(?!b)", "a lookahead other than right after a leading ^"},
      {"\\bword\\b", "a word boundary assertion"},
      {"\\B", "a word boundary assertion"},
      {"(?i)abc", "inline flags or modifiers"},
      {"(?i:abc)", "inline flags or modifiers"},
      {"(?P<n>a)", "a Python group"},
      {"\\p{L}", "a Unicode property escape"},
      {"[\\P{L}]", "a Unicode property escape"},
      {"a{", "a '{' that starts no quantifier"},
      {"a{,3}", "a '{' that starts no quantifier"},
      {"{1}", "a '{' that starts no quantifier"},
      {"a{3,2}", "n < m"},
      {"a{1001}", "a repeat count above 1000"},
      {"*a", "nothing to repeat"},
      {"a**", "nothing to repeat"},
      {"^*", "a quantifier on an assertion"},
      {"(ab", "an unterminated group at offset 0"},
      {"ab)", "an unmatched ')' at offset 2"},
      {"[ab", "an unterminated character class"},
      {"[z-a]", "a class range out of order"},
      {"[\\w-.]", "a class range with a class escape"},
      {"\\01", "an octal escape"},
      {"\\a", "an escape \\a that this subset does not know"},
      {"\\c1", "a \\c escape without a letter"},
      {"\\x4", "a malformed \\x escape"},
      {"\\u12", "a malformed \\u escape"},
      {"\\u{110000}", "a malformed \\u{...}"},
      {"a\\", "a trailing backslash"},
      {std::string(70, '(') + std::string(70, ')'), "groups nested deeper than 64"},
  };
  for (const Refused& r : refused) {
    absl::StatusOr<PatternAutomaton> a = Compile({r.pattern});

    EXPECT_THAT(a.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << r.pattern;
    EXPECT_THAT(a.status().message(), HasSubstr(r.message)) << r.pattern;
  }
}

TEST(PatternCompilerTest, AutomatonSizeIsBounded) {
  // The DFA of "an a 20 places from the end" needs 2^20 states.
  absl::StatusOr<PatternAutomaton> exponential = Compile({"(a|b)*a(a|b){20}"});
  EXPECT_THAT(exponential.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(exponential.status().message(), HasSubstr("DFA states"));

  absl::StatusOr<PatternAutomaton> nfa = Compile({"(?:a{1000}){1000}"});
  EXPECT_THAT(nfa.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(nfa.status().message(), HasSubstr("NFA states"));

  std::string many_classes;
  for (uint32_t c = 0x100; c < 0x100 + 2 * 600; c += 2) unicode::AppendUtf8(c, &many_classes);
  absl::StatusOr<PatternAutomaton> classes = Compile({"[" + many_classes + "]"});
  EXPECT_THAT(classes.status().message(), HasSubstr("classes"));

  // The schema's budget is shared by its patterns.
  PatternBudget budget{kMaxPatternStatesPerSchema, kMaxPatternStepsPerSchema};
  absl::Status last = absl::OkStatus();
  for (int i = 0; i < 40 && last.ok(); ++i) {
    PatternCompiler compiler(&budget);
    ASSERT_TRUE(compiler.Add("(a|b)*a(a|b){11}").ok());
    last = compiler.Compile().status();
  }
  EXPECT_THAT(last, StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StringFormatTest, EveryFormatCompilesWithinTheBounds) {
  for (const char* name :
       {"date-time", "date", "time", "duration", "email", "hostname", "ipv4", "ipv6", "uuid",
        "uuid1", "uuid4", "uuid8", "json-pointer", "relative-json-pointer", "uri", "uri-reference",
        "iri", "iri-reference"}) {
    const StringFormat* f = FindStringFormat(name);
    ASSERT_NE(f, nullptr) << name;
    absl::StatusOr<PatternAutomaton> a = Compile({std::string(f->pattern)});
    ASSERT_TRUE(a.ok()) << name << ": " << a.status();
    RecordProperty(std::string("states of ") + name, a->state_count());
  }
  EXPECT_EQ(FindStringFormat("uri-template"), nullptr);
}

TEST(StringFormatTest, DatesFollowTheCalendar) {
  const StringFormat* f = FindStringFormat("date");
  absl::StatusOr<PatternAutomaton> a = Compile({std::string(f->pattern)});
  ASSERT_TRUE(a.ok()) << a.status();
  int checked = 0;
  for (int y : {0, 4, 100, 400, 1900, 1999, 2000, 2023, 2024, 2100, 2400, 9996, 9999}) {
    for (int m = 0; m <= 13; ++m) {
      for (int d = 0; d <= 32; ++d) {
        char text[32];
        std::snprintf(text, sizeof(text), "%04d-%02d-%02d", y, m, d);
        EXPECT_EQ(a->Matches(text), ValidDate(text)) << text;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 13 * 14 * 33);
  ExpectFormat("date", {{"2024-1-01", false},
                        {"20240101", false},
                        {"2024-01-01T", false},
                        {" 2024-01-01", false},
                        {"\xE0\xA7\xA8"
                         "024-01-01",
                         false}});
}

TEST(StringFormatTest, TimesAndDateTimes) {
  const std::vector<std::string> times = {
      "08:30:06Z",       "08:30:06z",      "23:59:59.999999+05:30",
      "00:00:00-00:00",  "23:59:60Z",      "23:59:60.5+00:00",
      "15:59:60-08:00",  "22:59:60Z",      "23:58:60Z",
      "24:00:00Z",       "08:60:00Z",      "08:30:61Z",
      "08:30:06+24:00",  "08:30:06+00:60", "08:30:06",
      "08:30:06.Z",      "8:30:06Z",       "08:30:06 Z",
      "08:30:06Z+00:30", "08:30:06-8:00",  "08:30:06,5Z",
      "08:30:06#00:20"};
  const StringFormat* f = FindStringFormat("time");
  absl::StatusOr<PatternAutomaton> a = Compile({std::string(f->pattern)});
  ASSERT_TRUE(a.ok()) << a.status();
  for (const std::string& t : times) {
    const bool leap_in_other_offset = t == "15:59:60-08:00";  // Valid; not generated (README).
    EXPECT_EQ(a->Matches(t), ValidTime(t) && !leap_in_other_offset) << t;
  }
  ExpectFormat("date-time", {{"1963-06-19T08:30:06.283185Z", true},
                             {"1963-06-19t08:30:06z", true},
                             {"1998-12-31T23:59:60Z", true},
                             {"1998-12-31T22:59:60Z", false},
                             {"2021-02-29T00:00:00Z", false},
                             {"1963-06-19 08:30:06Z", false},
                             {"1963-06-19T08:30:06", false},
                             {"2013-350T01:01:01", false},
                             {"1990-12-31T15:59:59-24:00", false}});
}

TEST(StringFormatTest, DurationsFollowRfc3339AppendixA) {
  ExpectFormat("duration", {{"P4Y", true},     {"PT0S", true},    {"P0D", true},
                            {"P1M", true},     {"PT1M", true},    {"PT36H", true},
                            {"P1DT12H", true}, {"P2W", true},     {"P1Y2M3DT4H5M6S", true},
                            {"P1Y2W", false},  {"P1", false},     {"P2D1", false},
                            {"PT1D", false},   {"P", false},      {"P1YT", false},
                            {"PT", false},     {"P2D1Y", false},  {"P1D2H", false},
                            {"P2S", false},    {"PT0.5S", false}, {"p1d", false},
                            {"P1Y1D", false},  {"PT1H1S", false}});
}

TEST(StringFormatTest, EmailsAndHostnames) {
  ExpectFormat("email", {{"joe.bloggs@example.com", true},
                         {"te~st@example.com", true},
                         {"~test@example.com", true},
                         {"test~@example.com", true},
                         {"o'brien+tag@mail.example.co.uk", true},
                         {"te.s.t@example.com", true},
                         {"2962", false},
                         {".test@example.com", false},
                         {"test.@example.com", false},
                         {"te..st@example.com", false},
                         {"joe.bloggs@invalid=domain.com", false},
                         {"joe@localhost", false},
                         {"joe@example.c", false},
                         {"joe@example.123", false},
                         {"joe@-example.com", false},
                         {"\"joe bloggs\"@example.com", false},  // Valid; not generated.
                         {"joe.bloggs@[127.0.0.1]", false},      // Valid; not generated.
                         {std::string(64, 'a') + "@example.com", true},
                         {std::string(65, 'a') + "@example.com", false},
                         {"a@" + std::string(63, 'b') + ".com", true},
                         {"a@" + std::string(64, 'b') + ".com", false}});
  std::string long_domain = "a@";
  while (long_domain.size() < 250) long_domain += "bbbbbbbbb.";
  ExpectFormat("email", {{long_domain + "com", false}, {long_domain.substr(0, 242) + "com", true}});
  ExpectFormat("hostname", {{"www.example.com", true},
                            {"hostname", true},
                            {"host-name", true},
                            {"h0stn4me", true},
                            {"1host", true},
                            {"a", true},
                            {"a-b", true},
                            {"a--bc", true},
                            {"ab--c", false},
                            {std::string(63, 'a'), true},
                            {std::string(64, 'a'), false},
                            {"-hostname", false},
                            {"hostname-", false},
                            {"host_name", false},
                            {"", false},
                            {".", false},
                            {".example", false},
                            {"example.", false},
                            {"a..b", false},
                            {"XN--aa---o47jg78q", false},
                            {"xn--4gbwdl", false}});  // A-labels are not generated.
}

TEST(StringFormatTest, IpAddressesAgreeWithInetPton) {
  const std::vector<std::string> addresses = {"192.168.0.1",
                                              "0.0.0.0",
                                              "255.255.255.255",
                                              "256.0.0.1",
                                              "087.10.0.1",
                                              "1.2.3",
                                              "1.2.3.4.5",
                                              "1.2.3.4 ",
                                              "::1",
                                              "::",
                                              "12345::",
                                              "::abef",
                                              "::abcef",
                                              "::laptop",
                                              "::42:ff:1",
                                              "d6::",
                                              ":2:3:4:5:6:7:8",
                                              "1:2:3:4:5:6:7:",
                                              ":2:3:4::8",
                                              "1:d6::42",
                                              "1::d6::42",
                                              "1::d6:192.168.0.1",
                                              "1:2::192.168.0.1",
                                              "1::2:192.168.256.1",
                                              "1::2:192.168.ff.1",
                                              "::ffff:192.168.0.1",
                                              "1:2:::4",
                                              "1:2:3:4:5:6:7:8",
                                              "1:2:3:4:5:6:7",
                                              "1",
                                              "127.0.0.1",
                                              "1:2:3:4:1.2.3",
                                              " ::1",
                                              "fe80::/64",
                                              "fe80::a%eth1",
                                              "1000:1000:1000:1000:1000:1000:255.255.255.255",
                                              "100:100:100:100:100:100:255.255.255.255.255",
                                              "1:2:3:4:5:6:7::",
                                              "1:2:3:4:5:6:7:8::",
                                              "::1:2:3:4:5:6:7",
                                              "1::2:3:4:5:6:7:8",
                                              "::ffff:1.2.3.04",
                                              "ABCD:EF01::",
                                              "1:2:3:4:5:6:1.2.3.4",
                                              "1:2:3:4:5:6:7:1.2.3.4"};
  const StringFormat* v4 = FindStringFormat("ipv4");
  const StringFormat* v6 = FindStringFormat("ipv6");
  absl::StatusOr<PatternAutomaton> a4 = Compile({std::string(v4->pattern)});
  absl::StatusOr<PatternAutomaton> a6 = Compile({std::string(v6->pattern)});
  ASSERT_TRUE(a4.ok() && a6.ok()) << a4.status() << a6.status();
  for (const std::string& s : addresses) {
    EXPECT_EQ(a4->Matches(s), ValidIpv4(s)) << s;
    EXPECT_EQ(a6->Matches(s), ValidIpv6(s)) << s;
  }
}

// RFC 3986 and RFC 3987, each text checked by the pattern and by a reader of the RFCs' grammars
// written by hand (json_test_util.h).
TEST(StringFormatTest, UrisAndIrisFollowRfc3986And3987) {
  const std::vector<std::pair<std::string, std::array<bool, 4>>> cases = {
      // text: uri, uri-reference, iri, iri-reference
      {"https://example.com", {true, true, true, true}},
      {"https://user:pw@example.com:8443/a/b%20c?q=1&r=%2F#top", {true, true, true, true}},
      {"http://[::1]:8080/", {true, true, true, true}},
      {"http://[2001:db8::7]/c=GB?objectClass?one", {true, true, true, true}},
      {"http://[v7.fe80:1]/", {true, true, true, true}},
      {"http://192.0.2.16:80/", {true, true, true, true}},
      {"file:///etc/hosts", {true, true, true, true}},
      {"mailto:John.Doe@example.com", {true, true, true, true}},
      {"urn:oasis:names:specification:docbook:dtd:xml:4.1.2", {true, true, true, true}},
      {"tel:+1-816-555-1212", {true, true, true, true}},
      {"news:comp.infosystems.www.servers.unix", {true, true, true, true}},
      {"a:", {true, true, true, true}},
      {"//example.com/path", {false, true, false, true}},
      {"/relative/path?x#y", {false, true, false, true}},
      {"../up/one", {false, true, false, true}},
      {"", {false, true, false, true}},
      {"?only=query", {false, true, false, true}},
      {"#frag", {false, true, false, true}},
      {"1a:b", {false, false, false, false}},
      {"seg:ment/x", {true, true, true, true}},
      {"./seg:ment", {false, true, false, true}},
      {"http://exa mple.com", {false, false, false, false}},
      {"http://example.com/%zz", {false, false, false, false}},
      {"http://example.com/a%2", {false, false, false, false}},
      {"http://ex[ample.com", {false, false, false, false}},
      {"http://[::1/", {false, false, false, false}},
      {"http://[12345::]/", {false, false, false, false}},
      {"http://host:port/", {false, false, false, false}},
      {"http://a@b@c/", {false, false, false, false}},
      {"https://example.com/q?a[]=1", {false, false, false, false}},
      {"http://example.com/#a#b", {false, false, false, false}},
      {"http://\xE4\xBE\x8B\xE5\xAD\x90.\xE6\xB5\x8B\xE8\xAF\x95/\xE8\xB7\xAF",
       {false, false, true, true}},
      {"http://example.com/?\xEE\x80\x80", {false, false, true, true}},   // iprivate, in a query.
      {"http://example.com/\xEE\x80\x80", {false, false, false, false}},  // Not in a path.
      {"http://example.com/\xC2\x85", {false, false, false, false}},      // U+0085: no ucschar.
  };
  const char* names[] = {"uri", "uri-reference", "iri", "iri-reference"};
  for (int i = 0; i < 4; ++i) {
    std::vector<Case> each;
    for (const auto& [text, valid] : cases) each.push_back({text, valid[static_cast<size_t>(i)]});
    ExpectFormat(names[i], each);
  }
}

TEST(StringFormatTest, UuidsAndJsonPointers) {
  ExpectFormat("uuid", {{"2eb8aa08-aa98-11ea-b4aa-73b441d16380", true},
                        {"2EB8AA08-AA98-11EA-B4AA-73B441D16380", true},
                        {"00000000-0000-0000-0000-000000000000", true},
                        {"2eb8aa08-aa98-11ea-b4aa-73b441d1638", false},
                        {"2eb8aa08-aa98-11ea-73b441d16380", false},
                        {"2eb8aa08-aa98-11ea-b4ga-73b441d16380", false},
                        {"2eb8aa08aa9811eab4aa73b441d16380", false},
                        {"2eb8-aa08-aa98-11ea-b4aa73b441d16380", false}});
  ExpectFormat("uuid4", {{"2eb8aa08-aa98-41ea-b4aa-73b441d16380", true},
                         {"2EB8AA08-AA98-41EA-8BAA-73B441D16380", true},
                         {"2eb8aa08-aa98-11ea-b4aa-73b441d16380", false},    // Version 1.
                         {"2eb8aa08-aa98-41ea-c4aa-73b441d16380", false}});  // Not RFC 4122's.
  ExpectFormat("uuid7", {{"0190a8b2-7c1e-7d3a-9f00-123456789abc", true},
                         {"0190a8b2-7c1e-4d3a-9f00-123456789abc", false}});
  ExpectFormat("json-pointer", {{"", true},
                                {"/foo/0", true},
                                {"/a~1b/m~0n", true},
                                {"/", true},
                                {"foo", false},
                                {"/a~", false},
                                {"/a~2", false}});
  ExpectFormat("relative-json-pointer", {{"1", true},
                                         {"0/foo", true},
                                         {"2#", true},
                                         {"01", false},
                                         {"-1", false},
                                         {"1#/", false},
                                         {"", false}});
}

// Random patterns over a small alphabet against std::wregex (ECMAScript, matching code points),
// on random strings: search semantics, as JSON Schema's pattern.
std::string RandomPattern(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  std::string out;
  const int terms = 1 + pick(3);
  for (int t = 0; t < terms; ++t) {
    std::string atom;
    switch (depth > 2 ? pick(6) : pick(8)) {
      case 0:
        atom = std::string(1, "abc"[pick(3)]);
        break;
      case 1:
        atom = ".";
        break;
      case 2:
        atom = std::vector<std::string>{"[ab]", "[^a]", "[a-c1]", "\\d",
                                        "\\w",  "\\W",  "\\s",    "[^\\d]"}[static_cast<size_t>(
            pick(8))];
        break;
      case 3:
        atom = std::string(1, "1_ "[pick(3)]);
        break;
      case 4:
      case 5:
        atom = "a";
        break;
      default:
        atom = "(" + std::string(pick(2) ? "?:" : "") + RandomPattern(rng, depth + 1) +
               (pick(2) ? "|" + RandomPattern(rng, depth + 1) : "") + ")";
        break;
    }
    switch (pick(9)) {
      case 0:
        atom += "*";
        break;
      case 1:
        atom += "+";
        break;
      case 2:
        atom += "?";
        break;
      case 3:
        atom += "{" + std::to_string(pick(3)) + "," + std::to_string(2 + pick(2)) + "}";
        break;
      default:
        break;
    }
    out += atom;
  }
  if (depth == 0 && pick(3) == 0) out = "^" + out;
  if (depth == 0 && pick(3) == 0) out += "$";
  if (depth == 0 && pick(5) == 0) out += "|" + RandomPattern(rng, 1);
  return out;
}

TEST(PatternAutomatonTest, AgreesWithStdRegexOnRandomPatterns) {
  std::mt19937 rng(20240601);
  const std::vector<std::string> alphabet = {
      "a", "b", "c", "1", "_", " ", "\n", "\xC3\xA9", "\xF0\x9F\x98\x80"};
  int compared = 0, too_large = 0;
  for (int i = 0; i < 400; ++i) {
    const std::string pattern = RandomPattern(rng, 0);
    absl::StatusOr<PatternAutomaton> a = Compile({pattern});
    if (!a.ok() && absl::StrContains(a.status().message(), "DFA states")) {
      ++too_large;  // Refused for its size (a few nest counted repeats of .+ and \s+).
      continue;
    }
    ASSERT_TRUE(a.ok()) << pattern << ": " << a.status();
    for (int j = 0; j < 40; ++j) {
      std::string text;
      const int len = static_cast<int>(rng() % 7);
      for (int k = 0; k < len; ++k) text += alphabet[rng() % alphabet.size()];
      EXPECT_EQ(a->Matches(text), EcmaRegexSearch(pattern, text))
          << "pattern " << pattern << "\ntext " << text;
      ++compared;
    }
  }
  EXPECT_LE(too_large, 4);
  EXPECT_EQ(compared, (400 - too_large) * 40);
}

}  // namespace
}  // namespace cairn::infer::text::json
