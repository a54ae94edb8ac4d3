#ifndef CAIRN_SERVICES_CACHE_SIM_POLICIES_INTERNAL_H_
#define CAIRN_SERVICES_CACHE_SIM_POLICIES_INTERNAL_H_

// Factories of the individual policies; MakePolicy (policy.h) is the public entry point.

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "services/cache/sim/policy.h"

namespace cairn::cache::sim {

absl::StatusOr<std::unique_ptr<Policy>> MakeCairnPolicy(const PolicyOptions& options,
                                                        const CostModel& cost, const Clock* clock);
std::unique_ptr<Policy> MakeNoCachePolicy(const PolicyOptions& options);
std::unique_ptr<Policy> MakeLiveOnlyPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> MakeLlamaCppPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> MakeBlockAlignedPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> MakeMarconiPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> MakeOraclePolicy(const PolicyOptions& options);

}  // namespace cairn::cache::sim

#endif  // CAIRN_SERVICES_CACHE_SIM_POLICIES_INTERNAL_H_
