#ifndef CAIRN_TESTS_SUPPORT_STATUS_MATCHERS_H_
#define CAIRN_TESTS_SUPPORT_STATUS_MATCHERS_H_

// GoogleTest helpers for absl::Status (Debian's absl ships no status matchers).

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

// EXPECT_THAT(Foo(), StatusIs(absl::StatusCode::kInvalidArgument));
MATCHER_P(StatusIs, code, "has status code " + ::testing::PrintToString(code)) {
  const absl::Status& s = ::cairn::testing::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = ::cairn::testing::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.ok();
}

}  // namespace cairn::testing

#define CAIRN_ASSERT_OK(expr) ASSERT_THAT((expr), ::cairn::testing::IsOk())
#define CAIRN_EXPECT_OK(expr) EXPECT_THAT((expr), ::cairn::testing::IsOk())

#endif  // CAIRN_TESTS_SUPPORT_STATUS_MATCHERS_H_
