#include "services/cache/core/retention.h"

#include <algorithm>
#include <limits>
#include <tuple>

namespace cairn::cache {

absl::string_view EvictionRankName(EvictionRank rank) {
  switch (rank) {
    case EvictionRank::kRetryCopy:
      return "retry-copy";
    case EvictionRank::kCheap:
      return "cheap";
    case EvictionRank::kSuperseded:
      return "superseded";
    case EvictionRank::kIdle:
      return "idle";
    case EvictionRank::kReused:
      return "reused";
  }
  return "reused";
}

namespace {

// Past the stable boundary of the request that captured it: a prompt end (a copy for
// retries) or a frontier preserved before a slot was overwritten (captured as kReused with the
// stable boundary of its own request).
bool PastStable(const RankInput& in, CaptureKind kind) {
  return in.kind == kind && in.stable_boundary >= 0 && in.depth > in.stable_boundary;
}

}  // namespace

bool RetentionPolicy::Supersedes(const RankInput& deeper) const {
  return deeper.kind != CaptureKind::kReused && !PastStable(deeper, CaptureKind::kEnd);
}

bool RetentionPolicy::InEditReach(const RankInput& in) const {
  const bool boundary = in.kind != CaptureKind::kGrid && !PastStable(in, CaptureKind::kEnd);
  return options_.edit_reach_turns > 0 && boundary && in.turns_back <= options_.edit_reach_turns;
}

EvictionRank RetentionPolicy::Classify(const RankInput& in) const {
  if (PastStable(in, CaptureKind::kEnd)) return EvictionRank::kRetryCopy;
  if (PastStable(in, CaptureKind::kReused)) {
    return options_.superseded_first && options_.frontier_with_superseded
               ? EvictionRank::kSuperseded
               : EvictionRank::kRetryCopy;
  }
  double restorable = static_cast<double>(in.depth) * static_cast<double>(in.row_bytes_per_token);
  if (static_cast<double>(in.private_bytes) > options_.cheap_ratio * restorable) {
    return EvictionRank::kCheap;
  }
  if (options_.superseded_first && in.superseded) {
    return EvictionRank::kSuperseded;
  }
  return in.conversation_idle ? EvictionRank::kIdle : EvictionRank::kReused;
}

EvictionRank RetentionPolicy::AdmissionRank(const RankInput& in) const {
  if (!options_.admission_by_rank) return EvictionRank::kReused;
  RankInput own = in;
  own.conversation_idle = false;  // Its conversation is in use now.
  own.superseded = in.stable_boundary > in.depth &&
                   (in.kind == CaptureKind::kGrid || in.kind == CaptureKind::kReused);
  return Classify(own);
}

int64_t RetentionPolicy::CheckpointCap(int64_t ram_budget_bytes, int64_t private_bytes) const {
  if (options_.max_checkpoints > 0) return options_.max_checkpoints;
  const int64_t floor = std::max(1, options_.min_checkpoints);
  if (private_bytes <= 0) return std::numeric_limits<int>::max();
  return std::max<int64_t>(floor, ram_budget_bytes / private_bytes);
}

double RetentionPolicy::ValuePerByte(const RetentionItem& item) const {
  double value = static_cast<double>(std::max<int64_t>(0, item.saved_tokens)) /
                 static_cast<double>(std::max<int64_t>(1, item.freed_bytes));
  if (!options_.value_across_ranks) return value;
  switch (item.rank) {
    case EvictionRank::kRetryCopy:
      return value * options_.retry_copy_reuse;
    case EvictionRank::kCheap:
      return value * options_.cheap_reuse;
    case EvictionRank::kSuperseded:
      return value * options_.superseded_reuse;
    case EvictionRank::kIdle:
      return value * options_.idle_reuse;
    case EvictionRank::kReused:
      return value * options_.reused_reuse;
  }
  return value;
}

double RetentionPolicy::EditReachValue(const RetentionItem& item) const {
  const double likelihood =
      item.frontier && item.turns_back == 0 ? options_.continue_reuse : options_.edit_reuse;
  return likelihood * static_cast<double>(std::max<int64_t>(0, item.saved_tokens));
}

std::vector<CheckpointId> RetentionPolicy::EvictionOrder(std::vector<RetentionItem> items) const {
  items.erase(
      std::remove_if(items.begin(), items.end(), [](const RetentionItem& i) { return i.pinned; }),
      items.end());
  const bool by_value = options_.value_per_byte;
  const bool across = by_value && options_.value_across_ranks;
  auto key = [&](const RetentionItem& i) {
    const double value = by_value ? ValuePerByte(i) : 0;
    // Idle and reused ranks: an overdue conversation goes first, or (shallow first) counts its
    // depth at overdue_depth_weight.
    double depth = 0;
    bool kept = true;
    if (!by_value && i.rank >= EvictionRank::kIdle) {
      const bool overdue = options_.overdue_gaps > 0 && i.overdue;
      const double weight = overdue ? options_.overdue_depth_weight : 1.0;
      kept = !overdue || (options_.shallow_first && weight > 0);
      const int64_t own = options_.shallow_by_saved ? i.own_tokens : i.depth;
      depth = options_.shallow_first ? weight * static_cast<double>(own) : 0.0;
    }
    // Within edit reach, the checkpoint whose loss costs an edit the fewest tokens goes first.
    const double reach = i.edit_reach ? EditReachValue(i) : 0.0;
    return std::make_tuple(across ? value : 0.0, static_cast<int>(i.rank), i.edit_reach, !i.covered,
                           i.branch_point, reach, across ? 0.0 : value, kept, depth, i.last_use,
                           i.id);
  };
  std::sort(items.begin(), items.end(),
            [&](const RetentionItem& a, const RetentionItem& b) { return key(a) < key(b); });
  std::vector<CheckpointId> out;
  out.reserve(items.size());
  for (const RetentionItem& i : items) out.push_back(i.id);
  return out;
}

}  // namespace cairn::cache
