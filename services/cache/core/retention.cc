#include "services/cache/core/retention.h"

#include <algorithm>
#include <tuple>

namespace cairn::cache {

absl::string_view EvictionRankName(EvictionRank rank) {
  switch (rank) {
    case EvictionRank::kRetryCopy:
      return "retry-copy";
    case EvictionRank::kCheap:
      return "cheap";
    case EvictionRank::kIdle:
      return "idle";
    case EvictionRank::kReused:
      return "reused";
  }
  return "reused";
}

EvictionRank RetentionPolicy::Classify(const RankInput& in) const {
  if (in.kind == CaptureKind::kEnd && in.stable_boundary >= 0 && in.depth > in.stable_boundary) {
    return EvictionRank::kRetryCopy;
  }
  double restorable = static_cast<double>(in.depth) * static_cast<double>(in.row_bytes_per_token);
  if (static_cast<double>(in.private_bytes) > options_.cheap_ratio * restorable) {
    return EvictionRank::kCheap;
  }
  return in.conversation_idle ? EvictionRank::kIdle : EvictionRank::kReused;
}

std::vector<CheckpointId> RetentionPolicy::EvictionOrder(std::vector<RetentionItem> items) const {
  items.erase(std::remove_if(items.begin(), items.end(),
                             [](const RetentionItem& i) { return i.pinned; }),
              items.end());
  std::sort(items.begin(), items.end(), [](const RetentionItem& a, const RetentionItem& b) {
    return std::make_tuple(static_cast<int>(a.rank), !a.covered, a.branch_point, a.last_use,
                           a.id) < std::make_tuple(static_cast<int>(b.rank), !b.covered,
                                                   b.branch_point, b.last_use, b.id);
  });
  std::vector<CheckpointId> out;
  out.reserve(items.size());
  for (const RetentionItem& i : items) out.push_back(i.id);
  return out;
}

}  // namespace cairn::cache
