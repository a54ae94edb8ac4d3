#include "services/cache/core/request_runner.h"

#include <algorithm>

#include "common/status/status_macros.h"
#include "services/cache/core/radix_prefix_index.h"

namespace cairn::cache {

RequestRunner::RequestRunner(CheckpointCache* cache, int slots, uint64_t daemon_session)
    : cache_(cache),
      daemon_session_(daemon_session),
      last_use_(std::max(1, slots), -1),
      last_conversation_(last_use_.size()),
      last_stable_(last_use_.size(), -1) {}

std::vector<ChunkCopy> RequestRunner::CompleteSpills(absl::Span<const uint64_t> preserve) {
  std::vector<ChunkCopy> preserved;
  for (uint64_t id : cache_->TakeNewSpills()) {
    absl::StatusOr<SpillInfo> spill = cache_->GetSpill(id);
    if (!spill.ok()) continue;
    std::vector<ChunkId> copied;
    for (const ChunkCopy& c : spill->chunks) copied.push_back(c.id);
    if (std::find(preserve.begin(), preserve.end(), id) != preserve.end()) {
      preserved.insert(preserved.end(), spill->chunks.begin(), spill->chunks.end());
    }
    // Fails only for an unknown spill, and this one was just taken.
    cache_->FinishSpill(id, copied, {}, "").IgnoreError();
  }
  return preserved;
}

int64_t RequestRunner::SpillBytes(int32_t slot) const {
  if (last_use_[static_cast<size_t>(slot)] < 0) return 0;  // Never used: nothing to keep.
  return cache_->SlotSpillBytes(SlotKey{daemon_session_, slot}).value_or(0);
}

int32_t RequestRunner::ChooseSlot(const Candidate& best, absl::Span<const TokenId> prompt) {
  if (best.tier == Tier::kLive) return best.slot.slot;
  if (cache_->planner().options().restore_in_holding_slot && best.depth > 0) {
    const bool cheapest = cache_->planner().options().holding_slot_cheapest;
    int32_t holding = -1;
    int64_t longest = best.depth - 1;
    int64_t holding_spill = 0;
    for (size_t i = 0; i < last_use_.size(); ++i) {
      const int32_t slot = static_cast<int32_t>(i);
      const SlotKey key{daemon_session_, slot};
      absl::StatusOr<std::vector<TokenId>> tokens = cache_->SlotTokens(key);
      if (!tokens.ok()) continue;
      const int64_t shared = CommonPrefixLength(*tokens, prompt);
      if (shared < longest || shared < best.depth) continue;
      const int64_t spill = cheapest ? SpillBytes(slot) : 0;
      const bool better =
          shared > longest ||
          (cheapest && (spill < holding_spill ||
                        (spill == holding_spill && last_use_[i] < last_use_[holding])));
      if (better) {
        holding = slot;
        longest = shared;
        holding_spill = spill;
      }
    }
    if (holding >= 0) return holding;
  }
  auto lru = std::min_element(last_use_.begin(), last_use_.end());
  int32_t chosen = static_cast<int32_t>(lru - last_use_.begin());
  if (!cache_->planner().options().cheapest_slot) return chosen;
  int64_t chosen_spill = SpillBytes(chosen);
  for (size_t i = 0; i < last_use_.size(); ++i) {
    const int32_t slot = static_cast<int32_t>(i);
    const int64_t spill = SpillBytes(slot);
    if (spill < chosen_spill) {
      chosen = slot;
      chosen_spill = spill;
    }
  }
  return chosen;
}

absl::StatusOr<CaptureOutcome> RequestRunner::PreserveFrontier(int32_t slot,
                                                               const ServeRequest& request,
                                                               CheckpointId keep) {
  CaptureOutcome c;
  const size_t i = static_cast<size_t>(slot);
  if (!cache_->planner().options().preserve_frontier || last_conversation_[i].empty() ||
      last_conversation_[i] == request.conversation) {
    return c;
  }
  const SlotKey key{daemon_session_, slot};
  absl::StatusOr<std::vector<TokenId>> tokens = cache_->SlotTokens(key);
  if (!tokens.ok() || tokens->empty()) return c;
  c.pos = static_cast<int64_t>(tokens->size());
  c.kind = CaptureKind::kReused;
  const int64_t min_tokens = cache_->planner().options().preserve_frontier_min_tokens;
  if (min_tokens > 0) {
    // What the frontier saves over the deepest checkpoint already on its path (no session's
    // live frontier counts: session 0 holds none).
    absl::StatusOr<LookupResult> below =
        cache_->Lookup(LookupRequest{request.identities, *tokens, -1, /*daemon_session=*/0});
    if (below.ok() && c.pos - below->best.depth < min_tokens) return c;
  }
  if (keep != 0) RETURN_IF_ERROR(cache_->Pin(keep));
  absl::StatusOr<CaptureTicket> ticket =
      cache_->BeginCapture(key, c.kind, last_conversation_[i], last_stable_[i]);
  if (keep != 0) RETURN_IF_ERROR(cache_->Unpin(keep));
  if (ticket.ok()) {
    ASSIGN_OR_RETURN(c.id, cache_->CommitCapture(ticket->id));
    c.admitted = true;
  } else if (!absl::IsAlreadyExists(ticket.status())) {
    c.rejected = std::string(ticket.status().message());
  }
  return c;
}

absl::StatusOr<ServeOutcome> RequestRunner::Serve(const ServeRequest& request) {
  const uint64_t first_event = cache_->events().logged() + 1;
  LookupRequest lookup{request.identities, request.tokens, request.stable_boundary,
                       daemon_session_};
  ASSIGN_OR_RETURN(LookupResult found, cache_->Lookup(lookup));

  ServeOutcome out;
  out.used = found.best;
  out.shared_prefix = found.shared_prefix;
  out.slot = ChooseSlot(found.best, request.tokens);
  last_use_[static_cast<size_t>(out.slot)] = served_++;
  const SlotKey slot{daemon_session_, out.slot};
  if (found.best.tier != Tier::kLive) {
    ASSIGN_OR_RETURN(out.preserved_frontier,
                     PreserveFrontier(out.slot, request, found.best.checkpoint));
  }
  last_conversation_[static_cast<size_t>(out.slot)] = request.conversation;
  last_stable_[static_cast<size_t>(out.slot)] = request.stable_boundary;
  switch (found.best.tier) {
    case Tier::kLive:
      RETURN_IF_ERROR(cache_->ContinueSlot(slot, request.identities, request.conversation));
      break;
    case Tier::kRam:
    case Tier::kDisk: {
      ASSIGN_OR_RETURN(out.restore, cache_->Restore(found.best.checkpoint, slot, request.identities,
                                                    request.conversation));
      out.preserved = CompleteSpills(out.restore.preserve_spills);
      break;
    }
    case Tier::kNone: {
      ASSIGN_OR_RETURN(std::vector<uint64_t> preserve,
                       cache_->StartCold(slot, request.identities, request.conversation));
      out.preserved = CompleteSpills(preserve);
      break;
    }
  }

  const int64_t n = static_cast<int64_t>(request.tokens.size());
  int64_t at = found.best.depth;
  out.prefilled = n - at;
  out.passes = found.plan.passes;
  for (const PlannedCapture& planned : found.plan.captures) {
    if (planned.pos > at) {
      RETURN_IF_ERROR(cache_->ExtendSlot(slot, request.tokens.subspan(at, planned.pos - at)));
      at = planned.pos;
    }
    CaptureOutcome c;
    c.pos = planned.pos;
    c.kind = planned.kind;
    absl::StatusOr<CaptureTicket> ticket =
        cache_->BeginCapture(slot, planned.kind, request.conversation, request.stable_boundary);
    if (ticket.ok()) {
      ASSIGN_OR_RETURN(c.id, cache_->CommitCapture(ticket->id));
      c.admitted = true;
      if (cache_->ShouldPersist(c.id)) {
        absl::StatusOr<PersistTicket> persist = cache_->BeginPersist(c.id);
        if (persist.ok()) {
          RETURN_IF_ERROR(cache_->CommitPersist(c.id));
          c.persisted = true;
        }
      }
    } else if (!absl::IsAlreadyExists(ticket.status())) {
      c.rejected = std::string(ticket.status().message());
    }
    if (absl::IsAlreadyExists(ticket.status())) continue;
    out.captures.push_back(std::move(c));
  }
  if (n > at) RETURN_IF_ERROR(cache_->ExtendSlot(slot, request.tokens.subspan(at)));
  if (!request.generated.empty()) RETURN_IF_ERROR(cache_->ExtendSlot(slot, request.generated));

  for (const Event& e : cache_->events().recent()) {
    if (e.seq < first_event) continue;
    if (e.type == EventType::kEvict || e.type == EventType::kDiskEvict ||
        e.type == EventType::kQuarantine) {
      out.evictions.push_back(e);
    }
  }
  return out;
}

}  // namespace cairn::cache
