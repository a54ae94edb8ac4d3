#ifndef CAIRN_SERVICES_CACHE_CORE_RETENTION_H_
#define CAIRN_SERVICES_CACHE_CORE_RETENTION_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "services/cache/core/types.h"

namespace cairn::cache {

// Retention knobs (docs/architecture.md §3, seed §5). Every default is the seed's number except
// `near_duplicate_tokens`, which the seed leaves open (it reuses the grid snap distance), and
// the two rules docs/cache-policy.md measured on agent traces: the checkpoint cap follows the
// budget, and superseded checkpoints go before idle ones.
struct RetentionOptions {
  // RAM checkpoints, whatever their size. 0: automatic, as many private states as the budget
  // holds (budget / private bytes) but at least `min_checkpoints`. The seed's fixed 128 bound
  // long before a 64 GiB budget did (docs/cache-policy.md).
  int max_checkpoints = 0;
  int min_checkpoints = 128;  // Floor of the automatic cap: the seed's number.
  // A checkpoint with a deeper checkpoint of its own conversation below it on its path that
  // Supersedes() it, and no checkpoint of another conversation below it, is superseded:
  // evicted after retry copies and cheap ones, before idle conversations' latest states.
  // False: the seed's four ranks only.
  bool superseded_first = true;
  // Edit reach: a checkpoint ranked superseded that sits at a message boundary (a stable
  // boundary, a prompt end not past it, a learned point or a preserved frontier; not a grid
  // point, where no edit resumes) and belongs to its conversation's latest request or one of
  // the `edit_reach_turns` before it goes after the other superseded checkpoints, the least
  // valuable first (EditReachValue). An edit of one of the last messages resumes there;
  // without it the edited turn restores from the shared preamble (docs/cache-policy.md).
  // Turns are counted by the distinct stable boundaries of the conversation's newer
  // checkpoints in the tier. 0: off.
  int edit_reach_turns = 2;
  // The most tokens-saving checkpoints within edit reach, as many as this share of the
  // tier's budget holds in private state, keep their conversation's rank (idle or reused)
  // instead of staying superseded. 0: none.
  double edit_reach_share = 0.03;
  // Likelihoods of reuse that weigh the tokens a checkpoint within edit reach saves: the
  // frontier preserved after the conversation's latest request (its next turn continues there
  // when it resends the answer), and every other one (only an edit comes back to it).
  double continue_reuse = 0.5;
  double edit_reuse = 0.05;
  // A capture may evict only checkpoints ranked at or below its own rank (AdmissionRank);
  // otherwise it is rejected. False: a capture evicts whatever it needs, as the seed did.
  bool admission_by_rank = true;
  // A frontier preserved past its request's stable boundary (PlannerOptions::
  // preserve_frontier) ranks with superseded checkpoints rather than with retry copies: it
  // saves its answer's tokens whenever the next prompt keeps them, a retry copy a few header
  // tokens. Needs superseded_first.
  bool frontier_with_superseded = true;
  // Inside the idle and reused ranks, shallower checkpoints go first (before least recently
  // used): a deeper state restores more tokens per byte, its private state spread over more
  // rows, and a fixed preference does not thrash the way recency does when more
  // conversations take turns than the budget holds.
  bool shallow_first = true;
  // With shallow_first: the depth that orders is the tokens a checkpoint adds to the deepest
  // checkpoint of another conversation above it on its path in the tier, not its depth from
  // the root: a subagent forked from its parent's 30,000-token prompt that added 2,000 tokens
  // counts 2,000 while the parent's checkpoint above it is kept. (Its own conversation's
  // checkpoints above it do not count: they are older states the ranks evict first.)
  bool shallow_by_saved = false;
  // Inside the idle and reused ranks, the checkpoints of an overdue conversation go first
  // (before shallow first): one not used for more than this many of its mean gaps between
  // requests (while it has had only one request, of the mean gap over every conversation),
  // which has most likely ended or paused. Shallow first alone keeps the deepest states of
  // conversations that ended for good. 0: off.
  double overdue_gaps = 2;
  // With shallow_first: an overdue conversation's depth counts this much in the shallow-first
  // order (0: it goes first whatever its depth): its likelihood of coming back weighs the
  // tokens it would save, so a long session that paused can outlive a short state in use,
  // while a finished conversation's state goes before others of up to twice its depth.
  double overdue_depth_weight = 0.5;
  // Inside each rank, the checkpoint worth least per byte goes first (instead of shallow
  // first, then least recently used): tokens saved (its depth past the deepest checkpoint
  // above it on its path, which a prompt falls back to without it) per byte its eviction frees
  // (its private state and tail, and the rows no other checkpoint in the tier references).
  bool value_per_byte = false;
  // With value_per_byte: value decides across ranks too, each rank weighing its checkpoints'
  // value by its likelihood of reuse below; the ranks break ties.
  bool value_across_ranks = false;
  // Likelihood of reuse per rank, for value_across_ranks.
  double retry_copy_reuse = 0.1;
  double cheap_reuse = 0.5;
  double superseded_reuse = 0.1;
  double idle_reuse = 0.5;
  double reused_reuse = 1.0;
  // A checkpoint's rows that still sit in a slot (borrowed) are charged to the RAM budget
  // only when they are spilled into the arena (before the slot is overwritten, or for a
  // restore into another slot), making room then by rank, instead of when the checkpoint is
  // admitted: while a slot holds them they cost the arena nothing, as a peer's slot-local
  // state does. A capture whose rows and state together exceed the budget is rejected, since
  // it could never be spilled. False: the seed's rule, space reserved at admission so that
  // preservation never evicts.
  bool charge_on_spill = true;
  double cheap_ratio = 8.0;             // Cheap: private bytes > ratio x restorable row bytes.
  int64_t near_duplicate_tokens = 128;  // Covered: a shallower RAM checkpoint this close.
  int64_t disk_spacing_tokens = 2048;   // Prompt checkpoints closer than this to a disk one
                                        // on the same path are not written.
};

// Eviction ranks, first evicted first.
enum class EvictionRank {
  kRetryCopy = 1,   // Prompt-end (or preserved-frontier) checkpoint past the stable boundary.
  kCheap = 2,       // Private state > cheap_ratio x the row bytes it would restore.
  kSuperseded = 3,  // Its own conversation continued past it (superseded_first).
  kIdle = 4,        // Its conversation was not reused within one budget turnover.
  kReused = 5,      // Everything else.
};

// "retry-copy", "cheap", "superseded", "idle", "reused".
absl::string_view EvictionRankName(EvictionRank rank);

// What retention needs to know about one checkpoint.
struct RetentionItem {
  CheckpointId id = 0;
  EvictionRank rank = EvictionRank::kReused;
  bool covered = false;       // A shallower checkpoint on its path within near-duplicate reach.
  bool branch_point = false;  // Two continuations branch at it.
  absl::Time last_use;        // Of its conversation (ties: of itself).
  bool pinned = false;        // Being read; never a victim.
  int64_t depth = 0;          // Tokens it restores (RetentionOptions::shallow_first).
  bool overdue = false;       // Its conversation is overdue (RetentionOptions::overdue_gaps).
  bool edit_reach = false;    // Within edit reach (RetentionOptions::edit_reach_turns).
  int turns_back = 0;         // RankInput::turns_back.
  bool frontier = false;      // A frontier preserved past its request's stable boundary.
  // RetentionOptions::value_per_byte: its depth past the deepest checkpoint above it on its
  // path in the same tier, and the bytes its eviction frees.
  int64_t saved_tokens = 0;
  int64_t freed_bytes = 0;
  // RetentionOptions::shallow_by_saved: its depth past the deepest checkpoint of another
  // conversation above it on its path in the same tier.
  int64_t own_tokens = 0;
};

struct RankInput {
  CaptureKind kind = CaptureKind::kEnd;
  int64_t depth = 0;
  int64_t stable_boundary = -1;  // As known when captured.
  int64_t private_bytes = 0;
  int64_t row_bytes_per_token = 0;
  bool conversation_idle = false;
  bool superseded = false;  // See RetentionOptions::superseded_first.
  // Distinct stable boundaries among its conversation's newer checkpoints in the tier
  // (RetentionOptions::edit_reach_turns).
  int turns_back = 0;
};

// Ranks checkpoints for eviction. Stateless and thread-safe.
class RetentionPolicy {
 public:
  explicit RetentionPolicy(RetentionOptions options = {}) : options_(options) {}

  EvictionRank Classify(const RankInput& in) const;
  // True if a checkpoint described by `deeper` supersedes its own conversation's checkpoints
  // above it: a point the client resends (not a retry copy or preserved frontier past the
  // stable boundary, and not a reused history end, which the next prompt may leave).
  bool Supersedes(const RankInput& deeper) const;
  // True if a checkpoint described by `in` sits at a message boundary within edit reach
  // (edit_reach_turns); it matters for checkpoints ranked superseded.
  bool InEditReach(const RankInput& in) const;
  // The highest rank a capture described by `in` may evict to make room (admission_by_rank):
  // its own rank as Classify gives it, counting a grid point or reused history end above its
  // request's stable boundary as superseded (the stable capture that follows supersedes it).
  // kReused (everything) when admission_by_rank is off.
  EvictionRank AdmissionRank(const RankInput& in) const;
  // The RAM checkpoint cap for a budget and a private-state size (max_checkpoints, or the
  // automatic cap when it is 0).
  int64_t CheckpointCap(int64_t ram_budget_bytes, int64_t private_bytes) const;
  // Returns the ids of unpinned `items` in eviction order: by rank; inside a rank covered
  // near-duplicates first, then leaves before branch points, then (value_per_byte) least
  // value per byte first or (idle and reused ranks) overdue conversations first (overdue_gaps)
  // and shallower first (shallow_first), then least recently used. With value_per_byte and
  // value_across_ranks: least value per byte weighed by its rank's likelihood of reuse first, then
  // the order above.
  std::vector<CheckpointId> EvictionOrder(std::vector<RetentionItem> items) const;
  // Tokens saved per byte freed, times the likelihood of reuse of the item's rank when
  // value_across_ranks is set.
  double ValuePerByte(const RetentionItem& item) const;
  // Within edit reach: tokens saved times the likelihood of reuse (continue_reuse for the
  // latest preserved frontier, edit_reuse otherwise); the least valuable goes first.
  double EditReachValue(const RetentionItem& item) const;

  const RetentionOptions& options() const { return options_; }

 private:
  RetentionOptions options_;
};

}  // namespace cairn::cache

#endif  // CAIRN_SERVICES_CACHE_CORE_RETENTION_H_
