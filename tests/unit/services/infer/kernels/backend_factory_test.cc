#include "services/infer/kernels/backend_factory.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace cairn::infer {
namespace {

using ::cairn::testing::StatusIs;
using ::testing::HasSubstr;

TEST(BackendFactoryTest, CreatesTheCpuBackend) {
  absl::StatusOr<std::unique_ptr<KernelBackend>> b = CreateKernelBackend({.threads = 1});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(std::string((*b)->name()), HasSubstr("cpu"));
  EXPECT_TRUE((*b)->memory()->host_visible());
}

TEST(BackendFactoryTest, UnknownNamesListTheBuildsBackends) {
  absl::StatusOr<std::unique_ptr<KernelBackend>> b = CreateKernelBackend({.name = "tpu"});
  EXPECT_THAT(b.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(b.status().message(), HasSubstr("\"tpu\" is not available (this build has: cpu"));
}

TEST(BackendFactoryTest, HipInABuildWithoutItSaysHowToGetIt) {
  const std::vector<std::string> names = AvailableKernelBackends();
  if (std::find(names.begin(), names.end(), "hip") != names.end()) {
    GTEST_SKIP() << "this build has the HIP backend";
  }
  absl::StatusOr<std::unique_ptr<KernelBackend>> b = CreateKernelBackend({.name = "hip"});
  EXPECT_THAT(b.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(b.status().message(), HasSubstr("-DCAIRN_ENABLE_HIP=ON"));
}

}  // namespace
}  // namespace cairn::infer
