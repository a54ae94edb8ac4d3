// Baseline policies modelled on the peers described in tools/cairnctl/README.md. Each is a
// simplified, documented model of what the peer does with recurrent state, good enough to compare
// restore depths and memory on one trace; none reproduces every detail of the peer.

#include <algorithm>
#include <cmath>
#include <limits>
#include <list>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "services/cache/core/radix_prefix_index.h"
#include "services/cache/sim/policies_internal.h"

namespace cairn::cache::sim {

namespace {

int64_t CommonPrefix(absl::Span<const TokenId> a, absl::Span<const TokenId> b) {
  return CommonPrefixLength(a, b);
}

std::vector<TokenId> WithGenerated(const SimRequest& r) {
  std::vector<TokenId> out = r.tokens;
  out.insert(out.end(), r.generated.begin(), r.generated.end());
  return out;
}

// Tracks the peak of BytesInUse.
class TrackedPolicy : public Policy {
 public:
  int64_t PeakBytes() const override { return peak_; }

 protected:
  void Track() { peak_ = std::max(peak_, BytesInUse()); }

 private:
  int64_t peak_ = 0;
};

// No cache: every prompt is prefilled from token 0.
class NoCachePolicy final : public TrackedPolicy {
 public:
  explicit NoCachePolicy(const PolicyOptions& o) : options_(o) {}
  absl::StatusOr<RequestResult> Serve(const SimRequest& request) override {
    RequestResult r;
    const int64_t n = static_cast<int64_t>(request.tokens.size());
    r.prefilled = n;
    r.passes = SplitPasses(0, n, {}, options_.planner.max_pass_tokens);
    return r;
  }
  int64_t BytesInUse() const override { return 0; }

 private:
  PolicyOptions options_;
};

// Live slots only: a prompt that extends a slot's frontier continues in place; anything else
// prefills cold in the least recently used slot (recurrent state cannot be truncated).
class LiveOnlyPolicy final : public TrackedPolicy {
 public:
  explicit LiveOnlyPolicy(const PolicyOptions& o)
      : options_(o), slots_(static_cast<size_t>(std::max(1, o.slots))) {}

  absl::StatusOr<RequestResult> Serve(const SimRequest& request) override {
    RequestResult r;
    const int64_t n = static_cast<int64_t>(request.tokens.size());
    Slot* chosen = nullptr;
    for (Slot& s : slots_) {
      const int64_t len = static_cast<int64_t>(s.tokens.size());
      if (len > 0 && len <= n && CommonPrefix(s.tokens, request.tokens) == len &&
          (chosen == nullptr || len > static_cast<int64_t>(chosen->tokens.size()))) {
        chosen = &s;
      }
    }
    if (chosen != nullptr) {
      r.restored_tier = Tier::kLive;
      r.restored_depth = static_cast<int64_t>(chosen->tokens.size());
    } else {
      chosen = &*std::min_element(slots_.begin(), slots_.end(), [](const Slot& a, const Slot& b) {
        return a.last_use < b.last_use;
      });
    }
    chosen->last_use = ++clock_;
    chosen->tokens = WithGenerated(request);
    r.prefilled = n - r.restored_depth;
    r.passes = SplitPasses(r.restored_depth, n, {}, options_.planner.max_pass_tokens);
    return r;
  }
  int64_t BytesInUse() const override { return 0; }

 private:
  struct Slot {
    std::vector<TokenId> tokens;
    int64_t last_use = 0;
  };
  PolicyOptions options_;
  std::vector<Slot> slots_;
  int64_t clock_ = 0;
};

// llama.cpp server (anchors §1): per-slot context checkpoints (private state only; KV rows
// stay in the slot and truncate for free) at the start of the last user message, at other
// message starts at least min-step past the previous one, and 4 + n_ubatch and 4 tokens
// before the prompt end; at most ctx_checkpoints per slot, oldest dropped first. Slot choice
// by prompt similarity, else LRU. A host-RAM prompt cache (--cache-ram) keeps whole slot
// states (rows + checkpoints) when a slot is taken over, oldest evicted first; an entry is
// reused when it keeps at least 25% of its tokens.
// Memory, held to the RAM budget as a server configured for it would be: slot checkpoints are
// host RAM that --cache-ram does not cover (anchors §1.1), so --ctx-checkpoints is lowered
// until every slot's list fits in `llamacpp_checkpoint_share` of the budget, and --cache-ram
// is the rest of it. The prompt cache counts an entry's checkpoints (#23561) and is a strict
// limit (#25070): an entry larger than it is not saved, older ones are evicted to make room.
class LlamaCppPolicy final : public TrackedPolicy {
 public:
  explicit LlamaCppPolicy(const PolicyOptions& o)
      : options_(o), slots_(static_cast<size_t>(std::max(1, o.slots))) {
    const int64_t per_checkpoint = std::max<int64_t>(1, o.cost.private_bytes);
    const double share = std::clamp(o.llamacpp_checkpoint_share, 0.0, 1.0);
    const int64_t fits = static_cast<int64_t>(static_cast<double>(o.ram_bytes) * share) /
                         (per_checkpoint * static_cast<int64_t>(slots_.size()));
    ctx_checkpoints_ =
        static_cast<int>(std::min<int64_t>(std::max(0, o.llamacpp_ctx_checkpoints), fits));
    cache_limit_ =
        o.ram_bytes - static_cast<int64_t>(slots_.size()) * ctx_checkpoints_ * o.cost.private_bytes;
  }

  absl::StatusOr<RequestResult> Serve(const SimRequest& request) override {
    RequestResult r;
    const int64_t n = static_cast<int64_t>(request.tokens.size());
    const int64_t private_bytes = options_.cost.private_bytes;
    // Slot choice: best prompt similarity above the threshold, else least recently used.
    Slot* slot = nullptr;
    double best_similarity = options_.llamacpp_slot_similarity;
    for (Slot& s : slots_) {
      if (s.tokens.empty()) continue;
      double sim = static_cast<double>(CommonPrefix(s.tokens, request.tokens)) /
                   static_cast<double>(s.tokens.size());
      if (sim >= best_similarity) {
        best_similarity = sim;
        slot = &s;
      }
    }
    if (slot == nullptr) {
      slot = &*std::min_element(slots_.begin(), slots_.end(), [](const Slot& a, const Slot& b) {
        return a.last_use < b.last_use;
      });
    }
    slot->last_use = ++clock_;
    int64_t lcp = CommonPrefix(slot->tokens, request.tokens);
    // The host cache may hold a better state for this prompt.
    auto best_entry = entries_.end();
    int64_t best_entry_lcp = lcp;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      int64_t l = CommonPrefix(it->tokens, request.tokens);
      if (l > best_entry_lcp &&
          static_cast<double>(l) >=
              options_.llamacpp_min_cache_fraction * static_cast<double>(it->tokens.size())) {
        best_entry = it;
        best_entry_lcp = l;
      }
    }
    bool loaded = false;
    // The slot's state goes to the host cache before it is replaced or truncated.
    Entry saved{slot->tokens, slot->checkpoints};
    bool save = lcp < static_cast<int64_t>(slot->tokens.size()) || best_entry != entries_.end();
    if (best_entry != entries_.end()) {
      slot->tokens = std::move(best_entry->tokens);
      slot->checkpoints = std::move(best_entry->checkpoints);
      cache_bytes_ -= EntryBytes(slot->tokens.size(), slot->checkpoints.size());
      r.restore_bytes = EntryBytes(slot->tokens.size(), slot->checkpoints.size());
      entries_.erase(best_entry);
      lcp = best_entry_lcp;
      loaded = true;
    }
    if (save) SaveToCache(std::move(saved), r);
    // Resume: extend the slot in place, else the newest checkpoint at or before the
    // divergence (an identical prompt backs off one token to get logits), else token 0.
    const int64_t len = static_cast<int64_t>(slot->tokens.size());
    int64_t resume = 0;
    if (len > 0 && lcp == len && len < n) {
      resume = len;
      r.restored_tier = loaded ? Tier::kRam : Tier::kLive;
    } else {
      int64_t limit = std::min(lcp, n - 1);
      for (auto it = slot->checkpoints.rbegin(); it != slot->checkpoints.rend(); ++it) {
        if (*it <= limit) {
          resume = *it;
          break;
        }
      }
      if (resume > 0) {
        r.restored_tier = Tier::kRam;
        if (!loaded) r.restore_bytes = private_bytes;
      }
    }
    r.restored_depth = resume;
    slot->checkpoints.erase(std::remove_if(slot->checkpoints.begin(), slot->checkpoints.end(),
                                           [&](int64_t p) { return p > resume; }),
                            slot->checkpoints.end());
    // Checkpoints of this prompt.
    std::vector<SimCapture> planned;
    const int64_t last_start = request.segment_starts.empty() ? 0 : request.segment_starts.back();
    int64_t previous = slot->checkpoints.empty() ? 0 : slot->checkpoints.back();
    for (int64_t start : request.segment_starts) {
      if (start <= resume || start >= n) continue;
      if (start == last_start) {
        planned.push_back({start, CaptureKind::kStable});
        previous = start;
      } else if (start - previous >= options_.llamacpp_min_step) {
        planned.push_back({start, CaptureKind::kGrid});
        previous = start;
      }
    }
    for (int64_t p : {n - options_.llamacpp_end_offset - options_.llamacpp_ubatch,
                      n - options_.llamacpp_end_offset}) {
      if (p > resume && p < n) planned.push_back({p, CaptureKind::kEnd});
    }
    std::sort(planned.begin(), planned.end(),
              [](const SimCapture& a, const SimCapture& b) { return a.pos < b.pos; });
    planned.erase(
        std::unique(planned.begin(), planned.end(),
                    [](const SimCapture& a, const SimCapture& b) { return a.pos == b.pos; }),
        planned.end());
    std::vector<int64_t> stops;
    for (const SimCapture& c : planned) {
      slot->checkpoints.push_back(c.pos);
      stops.push_back(c.pos);
      r.captures.push_back(c);
      r.capture_bytes += private_bytes;
      while (static_cast<int>(slot->checkpoints.size()) > ctx_checkpoints_) {
        r.evicted.push_back({static_cast<uint64_t>(slot->checkpoints.front()), "fifo", "", -1});
        slot->checkpoints.erase(slot->checkpoints.begin());
      }
    }
    r.prefilled = n - resume;
    r.passes = SplitPasses(resume, n, stops, options_.planner.max_pass_tokens);
    slot->tokens = WithGenerated(request);
    Track();
    return r;
  }

  int64_t BytesInUse() const override {
    int64_t bytes = cache_bytes_;
    for (const Slot& s : slots_) {
      bytes += static_cast<int64_t>(s.checkpoints.size()) * options_.cost.private_bytes;
    }
    return bytes;
  }

 private:
  struct Slot {
    std::vector<TokenId> tokens;
    std::vector<int64_t> checkpoints;  // Positions, oldest first.
    int64_t last_use = 0;
  };
  struct Entry {
    std::vector<TokenId> tokens;
    std::vector<int64_t> checkpoints;
  };

  int64_t EntryBytes(size_t tokens, size_t checkpoints) const {
    return static_cast<int64_t>(tokens) * options_.cost.bytes_per_row +
           static_cast<int64_t>(checkpoints + 1) * options_.cost.private_bytes;
  }

  void SaveToCache(Entry entry, RequestResult& r) {
    if (entry.tokens.empty()) return;
    int64_t bytes = EntryBytes(entry.tokens.size(), entry.checkpoints.size());
    if (bytes > cache_limit_) return;
    while (!entries_.empty() && cache_bytes_ + bytes > cache_limit_) {
      const Entry& old = entries_.front();
      cache_bytes_ -= EntryBytes(old.tokens.size(), old.checkpoints.size());
      r.evicted.push_back({++evicted_entries_, "ram-cache-oldest", "", -1});
      entries_.pop_front();
    }
    entries_.push_back(std::move(entry));
    cache_bytes_ += bytes;
    Track();
  }

  PolicyOptions options_;
  std::vector<Slot> slots_;
  int ctx_checkpoints_ = 0;   // --ctx-checkpoints as configured for the budget.
  int64_t cache_limit_ = 0;   // --cache-ram as configured for the budget.
  std::list<Entry> entries_;  // Oldest first.
  int64_t cache_bytes_ = 0;
  int64_t clock_ = 0;
  uint64_t evicted_entries_ = 0;
};

// A token tree of cached states (shared by the block-aligned and Marconi models): rows are
// shared by content, so their bytes are the union of every cached state's prefix.
class StateTree {
 public:
  struct State {
    RadixPrefixIndex::Handle node = nullptr;
    int64_t depth = 0;
    int64_t last_use = 0;
  };

  // The deepest cached state whose tokens are a prefix of `tokens` with depth <= `max_depth`.
  const State* Deepest(absl::Span<const TokenId> tokens, int64_t max_depth,
                       int64_t* shared_prefix) {
    RadixPrefixIndex::Walk walk = tree_.Lookup(tokens);
    if (shared_prefix != nullptr) *shared_prefix = walk.shared_prefix;
    const State* best = nullptr;
    for (const RadixPrefixIndex::Hit& hit : walk.hits) {
      if (hit.depth <= max_depth) best = &states_.at(hit.entry.id);
    }
    return best;
  }
  void Touch(const State* s, int64_t now) { const_cast<State*>(s)->last_use = now; }
  // Adds a state for `tokens` unless one exists (then refreshes it). Returns its id.
  uint64_t Add(absl::Span<const TokenId> tokens, int64_t now) {
    RadixPrefixIndex::Walk walk = tree_.Lookup(tokens);
    for (const RadixPrefixIndex::Hit& hit : walk.hits) {
      if (hit.depth == static_cast<int64_t>(tokens.size())) {
        states_.at(hit.entry.id).last_use = now;
        return hit.entry.id;
      }
    }
    uint64_t id = next_id_++;
    State s;
    s.depth = static_cast<int64_t>(tokens.size());
    s.last_use = now;
    s.node = tree_.Insert(tokens, {IndexEntry::Kind::kCheckpoint, id});
    states_.emplace(id, s);
    return id;
  }
  void Remove(uint64_t id) {
    tree_.Remove(states_.at(id).node, {IndexEntry::Kind::kCheckpoint, id});
    states_.erase(id);
  }
  // Removes the state with the lowest `score` (ties: lowest id), never one of `keep` unless
  // nothing else is left, until the tree fits `budget`. Records each eviction in `r`.
  template <typename Score>
  void EvictUntilFits(int64_t budget, const CostModelOptions& cost,
                      const std::vector<uint64_t>& keep, const char* reason, Score score,
                      RequestResult& r) {
    while (Bytes(cost) > budget && !states_.empty()) {
      uint64_t victim = 0;
      double lowest = std::numeric_limits<double>::infinity();
      for (const auto& [id, s] : states_) {
        if (std::find(keep.begin(), keep.end(), id) != keep.end()) continue;
        double v = score(s);
        if (v < lowest || (v == lowest && id < victim)) {
          lowest = v;
          victim = id;
        }
      }
      if (victim == 0) {
        auto left = std::find_if(keep.begin(), keep.end(),
                                 [&](uint64_t id) { return states_.contains(id); });
        if (left == keep.end()) break;
        victim = *left;
      }
      Remove(victim);
      r.evicted.push_back({victim, reason, "", -1});
    }
  }

  int64_t Bytes(const CostModelOptions& cost) const {
    return tree_.token_count() * cost.bytes_per_row +
           static_cast<int64_t>(states_.size()) * cost.private_bytes;
  }
  const absl::flat_hash_map<uint64_t, State>& states() const { return states_; }

 private:
  RadixPrefixIndex tree_;
  absl::flat_hash_map<uint64_t, State> states_;
  uint64_t next_id_ = 1;
};

// vLLM `align` / SGLang-style block-aligned hybrid caching (anchors §2-§3): prefill passes are
// clipped to end on block boundaries; the state is kept only at the prompt's last block
// boundary (retention interval 0); rows are shared by content in blocks; a hit is the
// deepest cached boundary strictly before the prompt end (the last token is recomputed for
// logits); LRU eviction over states, rows freed with the last state that needs them.
class BlockAlignedPolicy final : public TrackedPolicy {
 public:
  explicit BlockAlignedPolicy(const PolicyOptions& o) : options_(o) {}

  absl::StatusOr<RequestResult> Serve(const SimRequest& request) override {
    RequestResult r;
    const int64_t n = static_cast<int64_t>(request.tokens.size());
    const int64_t block = std::max<int64_t>(1, options_.block_tokens);
    ++now_;
    const StateTree::State* hit = tree_.Deepest(request.tokens, n - 1, nullptr);
    if (hit != nullptr) {
      tree_.Touch(hit, now_);
      r.restored_tier = Tier::kRam;
      r.restored_depth = hit->depth;
      r.restore_bytes = options_.cost.private_bytes;
    }
    std::vector<int64_t> stops;
    for (int64_t b = (r.restored_depth / block + 1) * block; b < n; b += block) stops.push_back(b);
    r.prefilled = n - r.restored_depth;
    r.passes = SplitPasses(r.restored_depth, n, stops, options_.planner.max_pass_tokens);
    const int64_t boundary = (n / block) * block;
    if (boundary > r.restored_depth) {
      uint64_t id = tree_.Add(absl::MakeConstSpan(request.tokens).subspan(0, boundary), now_);
      r.captures.push_back({boundary, CaptureKind::kGrid});
      r.capture_bytes += options_.cost.private_bytes;
      tree_.EvictUntilFits(
          options_.ram_bytes, options_.cost, {id}, "lru",
          [](const StateTree::State& s) { return static_cast<double>(s.last_use); }, r);
    }
    Track();
    return r;
  }
  int64_t BytesInUse() const override { return tree_.Bytes(options_.cost); }

 private:
  PolicyOptions options_;
  StateTree tree_;
  int64_t now_ = 0;
};

// Marconi (MLSys'25, anchors §5): token-exact states admitted only at sequence ends (prompt
// plus generated tokens) and at branch points found before prefill (where the prompt leaves
// cached history); rows shared by content; eviction by a blend of recency and FLOPs saved per
// byte (weight `marconi_recency_weight`).
class MarconiPolicy final : public TrackedPolicy {
 public:
  explicit MarconiPolicy(const PolicyOptions& o) : options_(o), cost_(o.cost) {}

  absl::StatusOr<RequestResult> Serve(const SimRequest& request) override {
    RequestResult r;
    const int64_t n = static_cast<int64_t>(request.tokens.size());
    ++now_;
    int64_t shared = 0;
    const StateTree::State* hit = tree_.Deepest(request.tokens, n, &shared);
    if (hit != nullptr) {
      tree_.Touch(hit, now_);
      r.restored_tier = Tier::kRam;
      r.restored_depth = hit->depth;
      r.restore_bytes = options_.cost.private_bytes;
    }
    std::vector<int64_t> stops;
    std::vector<uint64_t> admitted;
    if (shared > r.restored_depth && shared < n) {
      stops.push_back(shared);
      admitted.push_back(tree_.Add(absl::MakeConstSpan(request.tokens).subspan(0, shared), now_));
      r.captures.push_back({shared, CaptureKind::kLearned});
      r.capture_bytes += options_.cost.private_bytes;
    }
    r.prefilled = n - r.restored_depth;
    r.passes = SplitPasses(r.restored_depth, n, stops, options_.planner.max_pass_tokens);
    std::vector<TokenId> full = WithGenerated(request);
    admitted.push_back(tree_.Add(full, now_));
    r.captures.push_back({n, CaptureKind::kEnd});
    r.capture_bytes += options_.cost.private_bytes;
    // Utility = w * recency + (1 - w) * normalised FLOPs saved per byte; lowest goes. The
    // normalisers are taken once per request.
    double max_efficiency = 0;
    int64_t min_use = std::numeric_limits<int64_t>::max();
    for (const auto& [id, s] : tree_.states()) {
      max_efficiency = std::max(max_efficiency, Efficiency(s));
      min_use = std::min(min_use, s.last_use);
    }
    const double w = options_.marconi_recency_weight;
    tree_.EvictUntilFits(
        options_.ram_bytes, options_.cost, admitted, "utility",
        [&](const StateTree::State& s) {
          double recency = now_ == min_use ? 1.0
                                           : static_cast<double>(s.last_use - min_use) /
                                                 static_cast<double>(now_ - min_use);
          double efficiency = max_efficiency > 0 ? Efficiency(s) / max_efficiency : 0;
          return w * recency + (1 - w) * efficiency;
        },
        r);
    Track();
    return r;
  }
  int64_t BytesInUse() const override { return tree_.Bytes(options_.cost); }

 private:
  double Efficiency(const StateTree::State& s) const {
    double bytes = static_cast<double>(options_.cost.private_bytes) +
                   static_cast<double>(s.depth) * static_cast<double>(options_.cost.bytes_per_row);
    return cost_.PassMs(0, s.depth) / bytes;
  }

  PolicyOptions options_;
  CostModel cost_;
  StateTree tree_;
  int64_t now_ = 0;
};

// The infinite-memory bound (not a peer): unlimited memory, a restore point at every token of
// every earlier sequence (prompt plus generated tokens, so a live frontier's answer counts),
// so a request prefills only the tokens past the longest prefix it shares with anything seen
// before. Memory: the union of every sequence's rows plus one private state per sequence (a
// lower bound on what a real cache with the same restores would hold).
class OraclePolicy final : public TrackedPolicy {
 public:
  explicit OraclePolicy(const PolicyOptions& o) : options_(o) {}

  absl::StatusOr<RequestResult> Serve(const SimRequest& request) override {
    RequestResult r;
    const int64_t n = static_cast<int64_t>(request.tokens.size());
    const int64_t shared = std::min(n, tree_.Lookup(request.tokens).shared_prefix);
    if (shared > 0) {
      r.restored_tier = Tier::kRam;
      r.restored_depth = shared;
      r.restore_bytes = options_.cost.private_bytes;
    }
    r.prefilled = n - shared;
    r.passes = SplitPasses(shared, n, {}, options_.planner.max_pass_tokens);
    std::vector<TokenId> full = WithGenerated(request);
    if (!full.empty()) {
      RadixPrefixIndex::Walk walk = tree_.Lookup(full);
      const bool known = std::any_of(walk.hits.begin(), walk.hits.end(), [&](const auto& h) {
        return h.depth == static_cast<int64_t>(full.size());
      });
      if (!known) {
        tree_.Insert(full, {IndexEntry::Kind::kCheckpoint, ++sequences_});
        r.captures.push_back({static_cast<int64_t>(full.size()), CaptureKind::kEnd});
      }
    }
    Track();
    return r;
  }
  int64_t BytesInUse() const override {
    return tree_.token_count() * options_.cost.bytes_per_row +
           static_cast<int64_t>(sequences_) * options_.cost.private_bytes;
  }

 private:
  PolicyOptions options_;
  RadixPrefixIndex tree_;
  uint64_t sequences_ = 0;
};

}  // namespace

std::unique_ptr<Policy> MakeNoCachePolicy(const PolicyOptions& o) {
  return std::make_unique<NoCachePolicy>(o);
}
std::unique_ptr<Policy> MakeLiveOnlyPolicy(const PolicyOptions& o) {
  return std::make_unique<LiveOnlyPolicy>(o);
}
std::unique_ptr<Policy> MakeLlamaCppPolicy(const PolicyOptions& o) {
  return std::make_unique<LlamaCppPolicy>(o);
}
std::unique_ptr<Policy> MakeBlockAlignedPolicy(const PolicyOptions& o) {
  return std::make_unique<BlockAlignedPolicy>(o);
}
std::unique_ptr<Policy> MakeMarconiPolicy(const PolicyOptions& o) {
  return std::make_unique<MarconiPolicy>(o);
}
std::unique_ptr<Policy> MakeOraclePolicy(const PolicyOptions& o) {
  return std::make_unique<OraclePolicy>(o);
}

const std::vector<std::string>& PolicyNames() {
  static const auto* names = new std::vector<std::string>{
      "cairn", "none", "live-only", "llamacpp", "block-aligned", "marconi", "oracle"};
  return *names;
}

absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(absl::string_view name,
                                                   const PolicyOptions& options,
                                                   const Clock* clock) {
  if (options.ram_bytes < 0 || options.slots < 1 || options.planner.max_pass_tokens < 1 ||
      options.block_tokens < 1 || options.llamacpp_ctx_checkpoints < 0) {
    return absl::InvalidArgumentError(
        "policy options: budgets must be >= 0, slots, pass and block sizes >= 1");
  }
  if (!(options.llamacpp_checkpoint_share >= 0 && options.llamacpp_checkpoint_share <= 1)) {
    return absl::InvalidArgumentError(
        "policy options: llamacpp_checkpoint_share must be in [0, 1]");
  }
  if (name == "cairn") return MakeCairnPolicy(options, CostModel(options.cost), clock);
  if (name == "none") return MakeNoCachePolicy(options);
  if (name == "live-only") return MakeLiveOnlyPolicy(options);
  if (name == "llamacpp") return MakeLlamaCppPolicy(options);
  if (name == "block-aligned") return MakeBlockAlignedPolicy(options);
  if (name == "marconi") return MakeMarconiPolicy(options);
  if (name == "oracle") return MakeOraclePolicy(options);
  return absl::InvalidArgumentError(absl::StrCat("unknown policy '", name, "'"));
}

}  // namespace cairn::cache::sim
