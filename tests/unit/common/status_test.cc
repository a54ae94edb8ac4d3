#include <optional>
#include <string>

#include "absl/strings/cord.h"
#include "common/status/annotate.h"
#include "common/status/check.h"
#include "common/status/grpc_status.h"
#include "common/status/status_macros.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn {
namespace {

using ::cairn::testing::StatusIs;

absl::Status FailIf(bool fail) {
  if (fail) return absl::NotFoundError("checkpoint 7 not in ram tier");
  return absl::OkStatus();
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

int g_calls = 0;
absl::Status CountedOk() {
  ++g_calls;
  return absl::OkStatus();
}

absl::Status UsesReturnIfError(bool fail, bool* reached_end) {
  RETURN_IF_ERROR(FailIf(fail));
  *reached_end = true;
  return absl::OkStatus();
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status AssignsExisting(int x, int* out) {
  int value = 0;
  ASSIGN_OR_RETURN(value, Half(x));
  *out = value;
  return absl::OkStatus();
}

TEST(StatusMacrosTest, ReturnIfErrorPropagatesTheFirstError) {
  bool reached = false;

  absl::Status s = UsesReturnIfError(true, &reached);

  EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(s.message(), "checkpoint 7 not in ram tier");
  EXPECT_FALSE(reached);
}

TEST(StatusMacrosTest, ReturnIfErrorContinuesOnOk) {
  bool reached = false;

  EXPECT_TRUE(UsesReturnIfError(false, &reached).ok());

  EXPECT_TRUE(reached);
}

TEST(StatusMacrosTest, ReturnIfErrorEvaluatesItsArgumentOnce) {
  g_calls = 0;
  auto f = []() -> absl::Status {
    RETURN_IF_ERROR(CountedOk());
    return absl::OkStatus();
  };

  ASSERT_TRUE(f().ok());

  EXPECT_EQ(g_calls, 1);
}

TEST(StatusMacrosTest, ReturnIfErrorAcceptsStatusOr) {
  auto f = []() -> absl::Status {
    RETURN_IF_ERROR(Half(3));
    return absl::OkStatus();
  };

  EXPECT_THAT(f(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StatusMacrosTest, AssignOrReturnChainsValues) {
  absl::StatusOr<int> q = Quarter(12);

  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(*q, 3);
}

TEST(StatusMacrosTest, AssignOrReturnStopsAtTheFailingStep) {
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Quarter(5), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StatusMacrosTest, AssignOrReturnAssignsToAnExistingVariable) {
  int out = 0;

  ASSERT_TRUE(AssignsExisting(8, &out).ok());

  EXPECT_EQ(out, 4);
  EXPECT_THAT(AssignsExisting(7, &out), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StatusMacrosTest, AssignOrReturnMovesMoveOnlyValues) {
  auto make = []() -> absl::StatusOr<std::unique_ptr<int>> { return std::make_unique<int>(5); };
  auto f = [&]() -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(std::unique_ptr<int> p, make());
    return *p;
  };

  EXPECT_EQ(*f(), 5);
}

TEST(AnnotateTest, PrependsContextAndKeepsTheCode) {
  absl::Status s = Annotate(absl::DataLossError("chunk 12 checksum mismatch"), "restoring slot 3");

  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(s.message(), "restoring slot 3: chunk 12 checksum mismatch");
}

TEST(AnnotateTest, LeavesOkAlone) { EXPECT_TRUE(Annotate(absl::OkStatus(), "context").ok()); }

TEST(AnnotateTest, KeepsPayloads) {
  absl::Status s = absl::InternalError("x");
  s.SetPayload("cairn/test", absl::Cord("payload"));

  absl::Status a = Annotate(s, "ctx");

  ASSERT_TRUE(a.GetPayload("cairn/test").has_value());
  EXPECT_EQ(std::string(*a.GetPayload("cairn/test")), "payload");
}

TEST(GrpcStatusTest, RoundTripsEveryCode) {
  for (int code = 0; code <= 16; ++code) {
    absl::Status s(static_cast<absl::StatusCode>(code), code == 0 ? "" : "message");

    grpc::Status g = ToGrpcStatus(s);
    absl::Status back = FromGrpcStatus(g);

    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(back.code(), s.code());
    EXPECT_EQ(back.message(), s.message());
  }
}

TEST(GrpcStatusTest, BinaryErrorDetailsTravelBothWays) {
  const std::string details("\x08\x03\x20\x01", 4);  // Bytes a service's proto defines.
  absl::Status s = WithGrpcErrorDetails(absl::InvalidArgumentError("too long"), details);
  s.SetPayload("type.cairn.dev/local-only", absl::Cord("stays"));

  grpc::Status g = ToGrpcStatus(s);
  absl::Status back = FromGrpcStatus(g);
  absl::Status plain = FromGrpcStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad"));

  EXPECT_EQ(g.error_details(), details);
  EXPECT_EQ(GrpcErrorDetailsOf(back), details);
  EXPECT_EQ(back.message(), "too long");
  EXPECT_FALSE(back.GetPayload("type.cairn.dev/local-only").has_value());
  EXPECT_EQ(GrpcErrorDetailsOf(plain), std::nullopt);
  EXPECT_TRUE(ToGrpcStatus(absl::InvalidArgumentError("bad")).error_details().empty());
}

TEST(CheckDeathTest, CheckAbortsWithTheCondition) {
  EXPECT_DEATH(CAIRN_CHECK(1 + 1 == 3), "CHECK failed: 1 \\+ 1 == 3");
}

}  // namespace
}  // namespace cairn
