// The cairn policy: the cache core and its request runner, exactly as the daemon runs them.

#include <memory>
#include <utility>
#include <vector>

#include "common/status/status_macros.h"
#include "services/cache/core/request_runner.h"
#include "services/cache/sim/policies_internal.h"

namespace cairn::cache::sim {
namespace {

constexpr char kCompatibility[] = "sim";
// Events kept in RAM per simulation; the runner reads each request's evictions from them.
constexpr size_t kEventRing = size_t{1} << 16;

class CairnPolicy final : public Policy {
 public:
  CairnPolicy(std::unique_ptr<CheckpointCache> cache, int slots)
      : cache_(std::move(cache)), runner_(cache_.get(), slots) {}

  absl::StatusOr<RequestResult> Serve(const SimRequest& request) override {
    ServeRequest serve;
    serve.identities = {kCompatibility, ""};
    serve.conversation = request.conv;
    serve.tokens = request.tokens;
    serve.stable_boundary = request.stable;
    serve.generated = request.generated;
    ASSIGN_OR_RETURN(ServeOutcome out, runner_.Serve(serve));
    RequestResult r;
    r.restored_tier = out.used.tier;
    r.restored_depth = out.used.depth;
    r.prefilled = out.prefilled;
    r.passes = std::move(out.passes);
    r.restore_bytes = out.restore.bytes_to_copy;
    std::vector<const CaptureOutcome*> captures;
    if (out.preserved_frontier.admitted) captures.push_back(&out.preserved_frontier);
    for (const CaptureOutcome& c : out.captures) captures.push_back(&c);
    for (const CaptureOutcome* cp : captures) {
      const CaptureOutcome& c = *cp;
      if (!c.admitted) continue;
      r.captures.push_back({c.pos, c.kind});
      absl::StatusOr<CheckpointInfo> info = cache_->GetCheckpoint(c.id);
      if (info.ok()) r.capture_bytes += info->private_bytes + info->tail_bytes;
    }
    for (const Event& e : out.evictions) {
      r.evicted.push_back({e.checkpoint, absl::StrCat(EventTypeName(e.type), ":", e.reason),
                           e.conversation, e.depth});
    }
    return r;
  }

  int64_t BytesInUse() const override {
    return cache_->ram_ledger().used() + cache_->ram_ledger().reserved();
  }
  int64_t PeakBytes() const override { return cache_->ram_ledger().peak(); }

 private:
  std::unique_ptr<CheckpointCache> cache_;
  RequestRunner runner_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Policy>> MakeCairnPolicy(const PolicyOptions& options,
                                                        const CostModel& cost, const Clock* clock) {
  CacheOptions cache_options;
  cache_options.ram_bytes = options.ram_bytes;
  cache_options.disk_bytes = options.disk_bytes;
  cache_options.planner = options.planner;
  cache_options.retention = options.retention;
  cache_options.event_ring_capacity = kEventRing;
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointCache> cache,
                   CheckpointCache::Create(cache_options, clock));
  RETURN_IF_ERROR(cache->RegisterLayout(kCompatibility, cost.Layout()));
  return std::unique_ptr<Policy>(new CairnPolicy(std::move(cache), options.slots));
}

}  // namespace cairn::cache::sim
