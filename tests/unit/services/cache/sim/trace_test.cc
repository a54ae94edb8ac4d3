#include "services/cache/sim/trace.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/cache/sim/trace_generator.h"
#include "tests/support/status_matchers.h"

namespace cairn::cache::sim {
namespace {

using ::cairn::testing::StatusIs;
using ::testing::HasSubstr;

TEST(TraceTest, RandomStreamIsSplitMix64ModVocab) {
  // The first output of SplitMix64 seeded with 0 is 0xE220A8397B1DCDAF.
  EXPECT_EQ(RandomToken(0, 0, 151936), static_cast<TokenId>(0xE220A8397B1DCDAFull % 151936));
  EXPECT_EQ(RandomToken(42, 3, 151936), 104852);
}

TEST(TraceTest, SegmentsWithOneSeedAgreeOnTheirOverlap) {
  absl::StatusOr<std::vector<TraceRequest>> trace = ParseTrace(
      "{\"conv\": \"A\", \"segments\": [{\"rand\": 7, \"len\": 10}]}\n"
      "{\"conv\": \"B\", \"segments\": [{\"rand\": 7, \"len\": 5, \"skip\": 5}]}\n");
  ASSERT_TRUE(trace.ok()) << trace.status();

  Prompt a = Materialize((*trace)[0]);
  Prompt b = Materialize((*trace)[1]);

  ASSERT_EQ(a.tokens.size(), 10u);
  ASSERT_EQ(b.tokens.size(), 5u);
  EXPECT_EQ(std::vector<TokenId>(a.tokens.begin() + 5, a.tokens.end()), b.tokens);
}

TEST(TraceTest, ParsesEveryFieldAndSegmentKind) {
  absl::StatusOr<std::vector<TraceRequest>> trace = ParseTrace(
      "# a comment\n\n"
      "{\"conv\": \"A\", \"t\": 12.5, \"segments\": [{\"text\": \"hi\"}, {\"ids\": [5, 6]},"
      " {\"rand\": 1, \"len\": 3}], \"stable\": 4, \"gen\": 9}\n");

  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->size(), 1u);
  const TraceRequest& r = trace->front();
  EXPECT_EQ(r.line, 3);
  EXPECT_EQ(r.conv, "A");
  EXPECT_DOUBLE_EQ(r.t, 12.5);
  EXPECT_EQ(r.stable, 4);
  EXPECT_EQ(r.gen, 9);
  Prompt p = Materialize(r);
  ASSERT_EQ(p.tokens.size(), 7u);
  EXPECT_EQ(p.tokens[0], 'h');
  EXPECT_EQ(p.tokens[2], 5);
  EXPECT_EQ(p.segment_starts, (std::vector<int64_t>{0, 2, 4}));
}

TEST(TraceTest, UnknownFieldIsAnErrorWithItsLine) {
  absl::StatusOr<std::vector<TraceRequest>> trace = ParseTrace(
      "{\"conv\": \"A\", \"segments\": [{\"ids\": [1]}]}\n"
      "{\"conv\": \"A\", \"segments\": [{\"ids\": [1]}], \"temperature\": 0.7}\n");

  EXPECT_THAT(trace.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(trace.status().message()), HasSubstr("line 2"));
  EXPECT_THAT(std::string(trace.status().message()), HasSubstr("temperature"));
}

TEST(TraceTest, RejectsMalformedRequests) {
  const std::vector<std::string> bad = {
      "not json",
      "[1, 2]",
      "{\"segments\": [{\"ids\": [1]}]}",
      "{\"conv\": \"A\"}",
      "{\"conv\": \"A\", \"segments\": []}",
      "{\"conv\": \"A\", \"segments\": [{\"ids\": [1], \"text\": \"x\"}]}",
      "{\"conv\": \"A\", \"segments\": [{\"rand\": 1}]}",
      "{\"conv\": \"A\", \"segments\": [{\"ids\": [-1]}]}",
      "{\"conv\": \"A\", \"segments\": [{\"ids\": [1], \"len\": 3}]}",
      "{\"conv\": \"A\", \"segments\": [{\"ids\": [1]}], \"stable\": 2}",
      "{\"conv\": \"A\", \"segments\": [{\"ids\": [1]}], \"gen\": -1}",
      "{\"conv\": \"A\", \"segments\": [{\"ids\": [1]}], \"t\": \"soon\"}",
      "{\"conv\": \"A\", \"segments\": [{\"rand\": 1, \"len\": 3, \"seed\": 2}]}",
  };
  for (const std::string& line : bad) {
    absl::StatusOr<std::vector<TraceRequest>> trace = ParseTrace(line);
    EXPECT_THAT(trace.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << line;
    if (!trace.ok()) {
      EXPECT_THAT(std::string(trace.status().message()), HasSubstr("line 1")) << line;
    }
  }
}

TEST(TraceTest, FormatTraceLineRoundTrips) {
  absl::StatusOr<std::vector<TraceRequest>> original = ParseTrace(
      "{\"conv\": \"A\", \"t\": 1.5, \"segments\": [{\"text\": \"hi\"}, {\"ids\": [5]},"
      " {\"rand\": 3, \"len\": 4, \"skip\": 2}], \"stable\": 3, \"gen\": 2}");
  ASSERT_TRUE(original.ok()) << original.status();

  absl::StatusOr<std::vector<TraceRequest>> again = ParseTrace(FormatTraceLine(original->front()));

  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Materialize(again->front()).tokens, Materialize(original->front()).tokens);
  EXPECT_EQ(again->front().stable, 3);
  EXPECT_EQ(again->front().gen, 2);
}

TEST(TraceTest, MissingFileIsNotFound) {
  EXPECT_THAT(ReadTraceFile("/nonexistent/cairn/trace.jsonl").status(),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(TraceGeneratorTest, SameSeedSameTraceAndEveryLineParses) {
  AgentTraceOptions options;
  options.conversations = 3;
  options.turns_per_conversation = 5;

  absl::StatusOr<std::vector<TraceRequest>> a = GenerateAgentTrace(options);
  absl::StatusOr<std::vector<TraceRequest>> b = GenerateAgentTrace(options);

  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  ASSERT_GE(a->size(), 15u);
  std::string text;
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ(FormatTraceLine((*a)[i]), FormatTraceLine((*b)[i]));
    text += FormatTraceLine((*a)[i]) + "\n";
    if (i > 0) {
      EXPECT_GE((*a)[i].t, (*a)[i - 1].t);
    }
  }
  absl::StatusOr<std::vector<TraceRequest>> parsed = ParseTrace(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->size(), a->size());
}

}  // namespace
}  // namespace cairn::cache::sim
